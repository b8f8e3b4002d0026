// Kernels of device_globals.c: a __device__ with an initialiser, a zero-initialised one, and a
// __constant__ array the host writes.
__device__ int counter = 42;
__device__ int history[4] = {7, 8, 9, 10};
__device__ unsigned long long zeroed[8];
__constant__ int coefficients[4];

__global__ void update_globals(int rounds)
{
	if (blockIdx.x == 0 && threadIdx.x == 0)
		counter += rounds * coefficients[0];
	if (threadIdx.x < 4)
		history[threadIdx.x] += coefficients[threadIdx.x];
	if (threadIdx.x < 8)
		zeroed[threadIdx.x] += (unsigned long long)(threadIdx.x + 1) << 32;
}

__global__ void read_globals(int *out)
{
	if (threadIdx.x == 0)
		out[0] = counter;
	if (threadIdx.x < 4)
		out[1 + threadIdx.x] = history[threadIdx.x] + coefficients[threadIdx.x];
}
