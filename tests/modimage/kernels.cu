// Kernels and device globals whose module images the modimage tests parse. Built with nvcc at build
// time into a cubin, PTX, several fatbins and a host object (tests/modimage/CMakeLists.txt).
struct S {
	double d;
	char c[13];
};

__device__ int counter = 5;
__constant__ float coeffs[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
__device__ double big[1024];
__managed__ int mval = 7;

__global__ void vecadd(const float *a, const float *b, float *c, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		c[i] = a[i] + b[i] * coeffs[i & 15];
	if (i == 0)
		atomicAdd(&counter, 1);
}

__global__ void k1(int a, float *p, S s, short h)
{
	p[a] = s.d + s.c[3] + h + big[a] + mval;
}

extern "C" __global__ void noargs(void)
{
}
