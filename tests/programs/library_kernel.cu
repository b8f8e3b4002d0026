// Kernels of library_kernel.c, loaded the way cudart does it (cuLibraryLoadData on the fatbin wrapper,
// cuLibraryGetKernel, cuLaunchKernel on the CUkernel).
struct Packed {
	double d;
	char c[13];
};

__device__ int launches_seen = 100;

__global__ void saxpy_i(int a, const int *x, int *y, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		y[i] = a * x[i] + y[i];
	if (i == 0)
		launches_seen += 1;
}

// The parameter layout of the driver notes' example: offsets 0, 8, 16, 40; sizes 4, 8, 24, 2.
__global__ void pack_params(int a, long long *out, Packed s, short t)
{
	if (threadIdx.x == 0) {
		out[0] = a;
		out[1] = (long long)s.d;
		out[2] = s.c[12];
		out[3] = t;
	}
}
