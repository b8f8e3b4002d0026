// The kernels of bench/overhead: an empty one for the launch rate, and one that touches its argument
// so the launch carries a realistic parameter block.
extern "C" __global__ void empty_kernel(void)
{
}

extern "C" __global__ void touch_kernel(int *p, int v)
{
	if (p && threadIdx.x == 0 && blockIdx.x == 0)
		p[0] = v;
}

// Managed-memory phases: a grid-stride fill, a read-modify-write step and a sum.
extern "C" __global__ void fill_kernel(unsigned *a, unsigned long long n, unsigned v)
{
	for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
	     i += (unsigned long long)gridDim.x * blockDim.x)
		a[i] = v + (unsigned)i;
}

extern "C" __global__ void step_kernel(unsigned *a, unsigned long long n)
{
	for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
	     i += (unsigned long long)gridDim.x * blockDim.x)
		a[i] = a[i] * 3u + 1u;
}

extern "C" __global__ void sum_kernel(const unsigned *a, unsigned long long n, unsigned long long *out)
{
	unsigned long long s = 0;
	for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
	     i += (unsigned long long)gridDim.x * blockDim.x)
		s += a[i];
	atomicAdd(out, s);
}
