// Kernels of the random-instant checkpoint/restart stress programs (stress_drv.c, stress_rt.cu): an
// embedding-like gather that checks its indices (an index out of range sets a flag, as PyTorch's
// device-side assert would fire), a state update, a table update, a 64-bit sum and a module global
// that every step advances. Host implementations for the simulated device: sim_kernels.c.
__device__ unsigned long long st_counter = 1;

extern "C" __global__ void st_gather(const unsigned *table, unsigned tsize, const unsigned *idx, unsigned *out,
				     unsigned n, unsigned *flag)
{
	for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
		unsigned j = idx[i];
		if (j >= tsize) {
			atomicOr(flag, 1u);
			out[i] = 0;
		} else {
			out[i] = table[j] ^ (i * 2654435761u);
		}
	}
}

extern "C" __global__ void st_mix(unsigned *state, unsigned n, const unsigned *in, unsigned nin, unsigned salt)
{
	for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
		state[i] = (state[i] ^ in[i % nin]) * 1664525u + 1013904223u + salt + i;
}

extern "C" __global__ void st_update(unsigned *table, unsigned tsize, const unsigned *state, unsigned n)
{
	for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < tsize; i += gridDim.x * blockDim.x)
		table[i] += state[(i * 7u) % n] >> 3;
}

extern "C" __global__ void st_sum(const unsigned *state, unsigned n, unsigned long long *out)
{
	unsigned long long local = 0;
	for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
		local += (unsigned long long)state[i] * (i | 1u);
	atomicAdd(out, local);
}

extern "C" __global__ void st_bump(unsigned long long add)
{
	if (blockIdx.x == 0 && threadIdx.x == 0)
		st_counter = st_counter * 6364136223846793005ull + add;
}

extern "C" __global__ void st_read(unsigned long long *out)
{
	if (blockIdx.x == 0 && threadIdx.x == 0)
		*out = st_counter;
}
