/* Host implementations of tests/stress/stress_kernels.cu for the simulated device (see
 * sim/crcuda_sim_kernel.h). */
#include "crcuda_sim_kernel.h"

#define GRID_STRIDE(blk, t) ((blk)->grid_dim.x * (blk)->block_dim.x)

CRCUDA_SIM_KERNEL(st_gather)
{
	const unsigned *table = CRCUDA_SIM_PARAM(blk, 0, const unsigned *);
	unsigned tsize = CRCUDA_SIM_PARAM(blk, 1, unsigned);
	const unsigned *idx = CRCUDA_SIM_PARAM(blk, 2, const unsigned *);
	unsigned *out = CRCUDA_SIM_PARAM(blk, 3, unsigned *);
	unsigned n = CRCUDA_SIM_PARAM(blk, 4, unsigned);
	unsigned *flag = CRCUDA_SIM_PARAM(blk, 5, unsigned *);

	CRCUDA_SIM_FOR_EACH_THREAD(blk, t)
	{
		for (unsigned i = CRCUDA_SIM_GLOBAL_X(blk, t); i < n; i += GRID_STRIDE(blk, t)) {
			unsigned j = idx[i];

			if (j >= tsize) {
				__atomic_fetch_or(flag, 1u, __ATOMIC_RELAXED);
				out[i] = 0;
			} else {
				out[i] = table[j] ^ (i * 2654435761u);
			}
		}
	}
}

CRCUDA_SIM_KERNEL(st_mix)
{
	unsigned *state = CRCUDA_SIM_PARAM(blk, 0, unsigned *);
	unsigned n = CRCUDA_SIM_PARAM(blk, 1, unsigned);
	const unsigned *in = CRCUDA_SIM_PARAM(blk, 2, const unsigned *);
	unsigned nin = CRCUDA_SIM_PARAM(blk, 3, unsigned);
	unsigned salt = CRCUDA_SIM_PARAM(blk, 4, unsigned);

	CRCUDA_SIM_FOR_EACH_THREAD(blk, t)
	{
		for (unsigned i = CRCUDA_SIM_GLOBAL_X(blk, t); i < n; i += GRID_STRIDE(blk, t))
			state[i] = (state[i] ^ in[i % nin]) * 1664525u + 1013904223u + salt + i;
	}
}

CRCUDA_SIM_KERNEL(st_update)
{
	unsigned *table = CRCUDA_SIM_PARAM(blk, 0, unsigned *);
	unsigned tsize = CRCUDA_SIM_PARAM(blk, 1, unsigned);
	const unsigned *state = CRCUDA_SIM_PARAM(blk, 2, const unsigned *);
	unsigned n = CRCUDA_SIM_PARAM(blk, 3, unsigned);

	CRCUDA_SIM_FOR_EACH_THREAD(blk, t)
	{
		for (unsigned i = CRCUDA_SIM_GLOBAL_X(blk, t); i < tsize; i += GRID_STRIDE(blk, t))
			table[i] += state[(i * 7u) % n] >> 3;
	}
}

CRCUDA_SIM_KERNEL(st_sum)
{
	const unsigned *state = CRCUDA_SIM_PARAM(blk, 0, const unsigned *);
	unsigned n = CRCUDA_SIM_PARAM(blk, 1, unsigned);
	unsigned long long *out = CRCUDA_SIM_PARAM(blk, 2, unsigned long long *);

	CRCUDA_SIM_FOR_EACH_THREAD(blk, t)
	{
		unsigned long long local = 0;

		for (unsigned i = CRCUDA_SIM_GLOBAL_X(blk, t); i < n; i += GRID_STRIDE(blk, t))
			local += (unsigned long long)state[i] * (i | 1u);
		__atomic_fetch_add(out, local, __ATOMIC_RELAXED);
	}
}

CRCUDA_SIM_KERNEL(st_bump)
{
	unsigned long long add = CRCUDA_SIM_PARAM(blk, 0, unsigned long long);
	unsigned long long *counter = CRCUDA_SIM_GLOBAL(blk, "st_counter", unsigned long long);

	if (blk->block_idx.x == 0 && counter)
		*counter = *counter * 6364136223846793005ull + add;
}

CRCUDA_SIM_KERNEL(st_read)
{
	unsigned long long *out = CRCUDA_SIM_PARAM(blk, 0, unsigned long long *);
	const unsigned long long *counter = CRCUDA_SIM_GLOBAL(blk, "st_counter", const unsigned long long);

	if (blk->block_idx.x == 0 && counter)
		*out = *counter;
}
