// Kernels of graph_basic.c (CUDA graphs and stream capture). All arithmetic is on unsigned ints, so
// that the results wrap identically on the GPU, on the simulated device and in the CPU model.
extern "C" __global__ void graph_k1(unsigned *p, const unsigned *t, const unsigned *acc, unsigned mul, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		p[i] = t[i] * mul + acc[i];
}

extern "C" __global__ void graph_k2(unsigned *q, const unsigned *t, const unsigned *acc, unsigned add, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		q[i] = t[i] * 5u + (acc[i] >> 3) + add;
}

// The grid covers the buffers exactly (no bound parameter: its parameters are 3 pointers, passed
// through CU_LAUNCH_PARAM_BUFFER_POINTER).
extern "C" __global__ void graph_k3(unsigned *acc, const unsigned *p, const unsigned *q)
{
	unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
	acc[i] = acc[i] * 3u + (p[i] ^ q[i]) + i;
}

extern "C" __global__ void graph_mix(unsigned *acc, unsigned salt, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		acc[i] = acc[i] * 2654435761u + salt;
}

extern "C" __global__ void graph_affine(unsigned *x, unsigned mul, unsigned add, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		x[i] = x[i] * mul + add + (unsigned)i;
}

extern "C" __global__ void graph_mix2(unsigned *dst, const unsigned *src, unsigned mul, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		dst[i] = dst[i] * mul + src[i];
}
