// Kernel of vmm_fixed.c: writes a pattern over a range that spans two VMM mappings.
__global__ void fill_index(unsigned int *data, unsigned int salt, unsigned long long n)
{
	unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
	if (i < n)
		data[i] = (unsigned int)i * 2654435761u + salt;
}
