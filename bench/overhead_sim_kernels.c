/* Host implementations of bench/overhead.cu's kernels, so the benchmark also runs (as a smoke test,
 * with small sizes) on the simulated device. */
#include "crcuda_sim_kernel.h"

CRCUDA_SIM_KERNEL(empty_kernel)
{
	(void)blk;
}

CRCUDA_SIM_KERNEL(touch_kernel)
{
	int *p = CRCUDA_SIM_PARAM(blk, 0, int *);
	int v = CRCUDA_SIM_PARAM(blk, 1, int);

	if (p && blk->block_idx.x == 0)
		p[0] = v;
}

/* Grid-stride loops as the CUDA kernels write them: the elements of block b's threads. */
#define FOR_BLOCK_ELEMENTS(blk, n, i)                                                                        \
	for (unsigned long long i##_base = (unsigned long long)(blk)->block_idx.x * (blk)->block_dim.x;      \
	     i##_base < (n); i##_base += (unsigned long long)(blk)->grid_dim.x * (blk)->block_dim.x)         \
		for (unsigned long long i = i##_base; i < i##_base + (blk)->block_dim.x && i < (n); i++)

CRCUDA_SIM_KERNEL(fill_kernel)
{
	unsigned *a = CRCUDA_SIM_PARAM(blk, 0, unsigned *);
	unsigned long long n = CRCUDA_SIM_PARAM(blk, 1, unsigned long long);
	unsigned v = CRCUDA_SIM_PARAM(blk, 2, unsigned);

	FOR_BLOCK_ELEMENTS(blk, n, i)
	a[i] = v + (unsigned)i;
}

CRCUDA_SIM_KERNEL(step_kernel)
{
	unsigned *a = CRCUDA_SIM_PARAM(blk, 0, unsigned *);
	unsigned long long n = CRCUDA_SIM_PARAM(blk, 1, unsigned long long);

	FOR_BLOCK_ELEMENTS(blk, n, i)
	a[i] = a[i] * 3u + 1u;
}

CRCUDA_SIM_KERNEL(sum_kernel)
{
	const unsigned *a = CRCUDA_SIM_PARAM(blk, 0, const unsigned *);
	unsigned long long n = CRCUDA_SIM_PARAM(blk, 1, unsigned long long);
	unsigned long long *out = CRCUDA_SIM_PARAM(blk, 2, unsigned long long *);
	unsigned long long s = 0;

	FOR_BLOCK_ELEMENTS(blk, n, i)
	s += a[i];
	*out += s;
}
