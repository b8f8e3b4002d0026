// Kernels of state_app: a state-carrying program for checkpoint/restore tests and benchmarks. Every
// word of device memory changes at every step, so a restore that lost or reordered anything shows
// in the final checksum.
extern "C" __global__ void state_init(unsigned *x, unsigned long long n, unsigned seed)
{
	for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
	     i += (unsigned long long)gridDim.x * blockDim.x)
		x[i] = (unsigned)(i * 2654435761ull) ^ seed;
}

extern "C" __global__ void state_step(unsigned *x, unsigned long long n, unsigned step)
{
	for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
	     i += (unsigned long long)gridDim.x * blockDim.x)
		x[i] = x[i] * 1664525u + 1013904223u + step;
}

// Order-independent checksum: sum of (x[i] ^ i) over all words, in 64 bits.
extern "C" __global__ void state_checksum(const unsigned *x, unsigned long long n, unsigned long long *sum)
{
	unsigned long long local = 0;
	for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
	     i += (unsigned long long)gridDim.x * blockDim.x)
		local += x[i] ^ (unsigned)i;
	atomicAdd(sum, local);
}

// --graph: the step number lives on the device, so one captured graph serves every step: state_count
// advances it, state_step_dev reads it.
extern "C" __global__ void state_count(unsigned *step)
{
	if (blockIdx.x == 0 && threadIdx.x == 0)
		*step += 1;
}

extern "C" __global__ void state_step_dev(unsigned *x, unsigned long long n, const unsigned *step)
{
	unsigned k = *step;
	for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
	     i += (unsigned long long)gridDim.x * blockDim.x)
		x[i] = x[i] * 1664525u + 1013904223u + k;
}
