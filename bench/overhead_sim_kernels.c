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
