// Kernels of pinned_async.c.
__global__ void square_u32(const unsigned int *in, unsigned int *out, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		out[i] = in[i] * in[i];
}

// Reads and writes mapped pinned host memory directly (zero-copy).
__global__ void add_one_mapped(unsigned int *host_mem, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		host_mem[i] += 1;
}
