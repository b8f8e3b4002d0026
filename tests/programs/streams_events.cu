// Kernels of streams_events.c. busy_add adds `rounds` to each element one at a time, so that a
// consumer that does not wait for it reads a stale value.
__global__ void busy_add(volatile int *data, int rounds, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= n)
		return;
	for (int r = 0; r < rounds; r++)
		data[i] = data[i] + 1;
}

__global__ void combine(const int *a, const int *b, int *out, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		out[i] = 2 * a[i] + b[i];
}
