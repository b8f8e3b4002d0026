// Kernel of memset.c: counts the bytes equal to `value` (a device-side check of the memsets).
__global__ void count_bytes(const unsigned char *data, unsigned long long n, unsigned char value,
			    unsigned int *count)
{
	unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
	if (i < n && data[i] == value)
		atomicAdd(count, 1u);
}
