/* Host implementations of the cudart test programs' kernels for the simulated device (see
 * sim/crcuda_sim_kernel.h): one function per kernel, named crcuda_sim_kernel_<mangled name>, called
 * once per thread block. Each mirrors its CUDA source in tests/cudart/<program>.cu; the kernels are
 * ordinary C++ kernels, so the names are the mangled ones cudart registers. */
#include <stdint.h>

#include "crcuda_sim_kernel.h"

/* inc32.cu: inc(double *a) */
CRCUDA_SIM_KERNEL(_Z3incPd)
{
	double *a = CRCUDA_SIM_PARAM(blk, 0, double *);

	CRCUDA_SIM_FOR_EACH_THREAD(blk, t)
	{
		a[t.x] += 1.0;
	}
}

/* sum1000.cu: sum_to(long long *out, int n) */
CRCUDA_SIM_KERNEL(_Z6sum_toPxi)
{
	long long *out = CRCUDA_SIM_PARAM(blk, 0, long long *);
	int n = CRCUDA_SIM_PARAM(blk, 1, int);

	CRCUDA_SIM_FOR_EACH_THREAD(blk, t)
	{
		long long s = 0;

		for (int i = 1; i <= n; i++)
			s += i;
		*out = s;
	}
}

/* streams_events.cu: busy_fill(volatile int *a, int rounds, int n) */
CRCUDA_SIM_KERNEL(_Z9busy_fillPViii)
{
	volatile int *a = CRCUDA_SIM_PARAM(blk, 0, volatile int *);
	int rounds = CRCUDA_SIM_PARAM(blk, 1, int);
	int n = CRCUDA_SIM_PARAM(blk, 2, int);

	CRCUDA_SIM_FOR_EACH_THREAD(blk, t)
	{
		int i = (int)CRCUDA_SIM_GLOBAL_X(blk, t);

		if (i >= n)
			continue;
		for (int r = 0; r < rounds; r++)
			a[i] = a[i] + 1;
		a[i] = a[i] + i;
	}
}

/* streams_events.cu: derive(const int *a, int *b, int n) */
CRCUDA_SIM_KERNEL(_Z6derivePKiPii)
{
	const int *a = CRCUDA_SIM_PARAM(blk, 0, const int *);
	int *b = CRCUDA_SIM_PARAM(blk, 1, int *);
	int n = CRCUDA_SIM_PARAM(blk, 2, int);

	CRCUDA_SIM_FOR_EACH_THREAD(blk, t)
	{
		int i = (int)CRCUDA_SIM_GLOBAL_X(blk, t);

		if (i < n)
			b[i] = 2 * a[i] + 1;
	}
}

/* streams_events.cu: subtract(const int *a, const int *b, int *c, int n) */
CRCUDA_SIM_KERNEL(_Z8subtractPKiS0_Pii)
{
	const int *a = CRCUDA_SIM_PARAM(blk, 0, const int *);
	const int *b = CRCUDA_SIM_PARAM(blk, 1, const int *);
	int *c = CRCUDA_SIM_PARAM(blk, 2, int *);
	int n = CRCUDA_SIM_PARAM(blk, 3, int);

	CRCUDA_SIM_FOR_EACH_THREAD(blk, t)
	{
		int i = (int)CRCUDA_SIM_GLOBAL_X(blk, t);

		if (i < n)
			c[i] = b[i] - a[i];
	}
}

/* globals.cu: apply(int *out, int n), with __constant__ int coeffs[4], __device__ int table[4] and
 * __device__ unsigned int counter */
CRCUDA_SIM_KERNEL(_Z5applyPii)
{
	int *out = CRCUDA_SIM_PARAM(blk, 0, int *);
	int n = CRCUDA_SIM_PARAM(blk, 1, int);
	const int *coeffs = CRCUDA_SIM_GLOBAL(blk, "coeffs", const int);
	const int *table = CRCUDA_SIM_GLOBAL(blk, "table", const int);
	unsigned int *counter = CRCUDA_SIM_GLOBAL(blk, "counter", unsigned int);

	CRCUDA_SIM_FOR_EACH_THREAD(blk, t)
	{
		int i = (int)CRCUDA_SIM_GLOBAL_X(blk, t);

		if (i >= n)
			continue;
		out[i] = coeffs[i % 4] * i + table[i % 4];
		*counter += 1;
	}
}

/* globals.cu: bump_table(void) */
CRCUDA_SIM_KERNEL(_Z10bump_tablev)
{
	const int *coeffs = CRCUDA_SIM_GLOBAL(blk, "coeffs", const int);
	int *table = CRCUDA_SIM_GLOBAL(blk, "table", int);

	CRCUDA_SIM_FOR_EACH_THREAD(blk, t)
	{
		table[t.x] += coeffs[t.x];
	}
}

/* pinned_async.cu: affine(unsigned int *data, unsigned int mul, unsigned int add, int n) */
CRCUDA_SIM_KERNEL(_Z6affinePjjji)
{
	uint32_t *data = CRCUDA_SIM_PARAM(blk, 0, uint32_t *);
	uint32_t mul = CRCUDA_SIM_PARAM(blk, 1, uint32_t);
	uint32_t add = CRCUDA_SIM_PARAM(blk, 2, uint32_t);
	int n = CRCUDA_SIM_PARAM(blk, 3, int);

	CRCUDA_SIM_FOR_EACH_THREAD(blk, t)
	{
		int i = (int)CRCUDA_SIM_GLOBAL_X(blk, t);

		if (i < n)
			data[i] = data[i] * mul + add;
	}
}

/* ptds.cu: mix(unsigned int *data, unsigned int seed, int rounds, int n) */
CRCUDA_SIM_KERNEL(_Z3mixPjjii)
{
	uint32_t *data = CRCUDA_SIM_PARAM(blk, 0, uint32_t *);
	uint32_t seed = CRCUDA_SIM_PARAM(blk, 1, uint32_t);
	int rounds = CRCUDA_SIM_PARAM(blk, 2, int);
	int n = CRCUDA_SIM_PARAM(blk, 3, int);

	CRCUDA_SIM_FOR_EACH_THREAD(blk, t)
	{
		int i = (int)CRCUDA_SIM_GLOBAL_X(blk, t);
		uint32_t v;

		if (i >= n)
			continue;
		v = data[i];
		for (int r = 0; r < rounds; r++)
			v = v * 1664525u + seed;
		data[i] = v;
	}
}

/* many_launches.cu: add(unsigned long long *counter, unsigned int value) */
CRCUDA_SIM_KERNEL(_Z3addPyj)
{
	unsigned long long *counter = CRCUDA_SIM_PARAM(blk, 0, unsigned long long *);
	unsigned int value = CRCUDA_SIM_PARAM(blk, 1, unsigned int);

	CRCUDA_SIM_FOR_EACH_THREAD(blk, t)
	{
		*counter += value;
	}
}

/* state_rt.cu: mv_fold(unsigned step), with __managed__ unsigned long long mv_acc and unsigned mv_steps[64]
 */
CRCUDA_SIM_KERNEL(_Z7mv_foldj)
{
	unsigned step = CRCUDA_SIM_PARAM(blk, 0, unsigned);
	unsigned long long *acc = CRCUDA_SIM_GLOBAL(blk, "mv_acc", unsigned long long);
	const unsigned *steps = CRCUDA_SIM_GLOBAL(blk, "mv_steps", const unsigned);

	*acc = (*acc * 31 + steps[step % 64]) ^ step;
}
