/* The host implementation of nvrtc_saxpy's kernel for the simulated device (sim/crcuda_sim_kernel.h). */
#include "crcuda_sim_kernel.h"

/* extern "C" saxpy(float a, const float *x, float *y, int n), FMA contraction off */
CRCUDA_SIM_KERNEL(saxpy)
{
	float a = CRCUDA_SIM_PARAM(blk, 0, float);
	const float *x = CRCUDA_SIM_PARAM(blk, 1, const float *);
	float *y = CRCUDA_SIM_PARAM(blk, 2, float *);
	int n = CRCUDA_SIM_PARAM(blk, 3, int);

	CRCUDA_SIM_FOR_EACH_THREAD(blk, t)
	{
		unsigned i = CRCUDA_SIM_GLOBAL_X(blk, t);

		if ((int)i < n) {
			volatile float p = a * x[i]; /* no contraction into an FMA */

			y[i] = p + y[i];
		}
	}
}
