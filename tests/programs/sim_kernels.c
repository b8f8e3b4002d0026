/* Host implementations of the test programs' kernels for the simulated device (see
 * sim/crcuda_sim_kernel.h): one function per kernel, named crcuda_sim_kernel_<mangled name>, called
 * once per thread block. Each mirrors its CUDA source in tests/programs/<program>.cu. */
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "crcuda_sim_kernel.h"

/* vector_add.cu: vector_add(const float *a, const float *b, float *c, int n) */
CRCUDA_SIM_KERNEL(_Z10vector_addPKfS0_Pfi)
{
	const float *a = CRCUDA_SIM_PARAM(blk, 0, const float *);
	const float *b = CRCUDA_SIM_PARAM(blk, 1, const float *);
	float *c = CRCUDA_SIM_PARAM(blk, 2, float *);
	int n = CRCUDA_SIM_PARAM(blk, 3, int);

	CRCUDA_SIM_FOR_EACH_THREAD(blk, t)
	{
		unsigned i = CRCUDA_SIM_GLOBAL_X(blk, t);

		if ((int)i < n)
			c[i] = a[i] + b[i];
	}
}

/* vector_add.cu: extern "C" scale_i32(int *data, int factor, int n) */
CRCUDA_SIM_KERNEL(scale_i32)
{
	int *data = CRCUDA_SIM_PARAM(blk, 0, int *);
	int factor = CRCUDA_SIM_PARAM(blk, 1, int);
	int n = CRCUDA_SIM_PARAM(blk, 2, int);

	CRCUDA_SIM_FOR_EACH_THREAD(blk, t)
	{
		unsigned i = CRCUDA_SIM_GLOBAL_X(blk, t);

		if ((int)i < n)
			data[i] *= factor;
	}
}

/* streams_events.cu: busy_add(volatile int *data, int rounds, int n) */
CRCUDA_SIM_KERNEL(_Z8busy_addPViii)
{
	volatile int *data = CRCUDA_SIM_PARAM(blk, 0, volatile int *);
	int rounds = CRCUDA_SIM_PARAM(blk, 1, int);
	int n = CRCUDA_SIM_PARAM(blk, 2, int);

	CRCUDA_SIM_FOR_EACH_THREAD(blk, t)
	{
		unsigned i = CRCUDA_SIM_GLOBAL_X(blk, t);

		if ((int)i >= n)
			continue;
		for (int r = 0; r < rounds; r++)
			data[i] = data[i] + 1;
	}
}

/* streams_events.cu: combine(const int *a, const int *b, int *out, int n) */
CRCUDA_SIM_KERNEL(_Z7combinePKiS0_Pii)
{
	const int *a = CRCUDA_SIM_PARAM(blk, 0, const int *);
	const int *b = CRCUDA_SIM_PARAM(blk, 1, const int *);
	int *out = CRCUDA_SIM_PARAM(blk, 2, int *);
	int n = CRCUDA_SIM_PARAM(blk, 3, int);

	CRCUDA_SIM_FOR_EACH_THREAD(blk, t)
	{
		unsigned i = CRCUDA_SIM_GLOBAL_X(blk, t);

		if ((int)i < n)
			out[i] = 2 * a[i] + b[i];
	}
}

/* memset.cu: count_bytes(const unsigned char *data, unsigned long long n, unsigned char value,
 * unsigned int *count) */
CRCUDA_SIM_KERNEL(_Z11count_bytesPKhyhPj)
{
	const unsigned char *data = CRCUDA_SIM_PARAM(blk, 0, const unsigned char *);
	unsigned long long n = CRCUDA_SIM_PARAM(blk, 1, unsigned long long);
	unsigned char value = CRCUDA_SIM_PARAM(blk, 2, unsigned char);
	unsigned int *count = CRCUDA_SIM_PARAM(blk, 3, unsigned int *);

	CRCUDA_SIM_FOR_EACH_THREAD(blk, t)
	{
		unsigned long long i = (unsigned long long)blk->block_idx.x * blk->block_dim.x + t.x;

		if (i < n && data[i] == value)
			__atomic_fetch_add(count, 1u, __ATOMIC_RELAXED);
	}
}

/* device_globals.cu: update_globals(int rounds) */
CRCUDA_SIM_KERNEL(_Z14update_globalsi)
{
	int rounds = CRCUDA_SIM_PARAM(blk, 0, int);
	int *counter = CRCUDA_SIM_GLOBAL(blk, "counter", int);
	int *history = CRCUDA_SIM_GLOBAL(blk, "history", int);
	unsigned long long *zeroed = CRCUDA_SIM_GLOBAL(blk, "zeroed", unsigned long long);
	const int *coefficients = CRCUDA_SIM_GLOBAL(blk, "coefficients", const int);

	CRCUDA_SIM_FOR_EACH_THREAD(blk, t)
	{
		if (blk->block_idx.x == 0 && t.x == 0)
			*counter += rounds * coefficients[0];
		if (t.x < 4)
			history[t.x] += coefficients[t.x];
		if (t.x < 8)
			zeroed[t.x] += (unsigned long long)(t.x + 1) << 32;
	}
}

/* device_globals.cu: read_globals(int *out) */
CRCUDA_SIM_KERNEL(_Z12read_globalsPi)
{
	int *out = CRCUDA_SIM_PARAM(blk, 0, int *);
	const int *counter = CRCUDA_SIM_GLOBAL(blk, "counter", const int);
	const int *history = CRCUDA_SIM_GLOBAL(blk, "history", const int);
	const int *coefficients = CRCUDA_SIM_GLOBAL(blk, "coefficients", const int);

	CRCUDA_SIM_FOR_EACH_THREAD(blk, t)
	{
		if (t.x == 0)
			out[0] = *counter;
		if (t.x < 4)
			out[1 + t.x] = history[t.x] + coefficients[t.x];
	}
}

/* many_launches.cu: increment(unsigned long long *counter) */
CRCUDA_SIM_KERNEL(_Z9incrementPy)
{
	unsigned long long *counter = CRCUDA_SIM_PARAM(blk, 0, unsigned long long *);
	unsigned long long threads =
	    (unsigned long long)blk->block_dim.x * blk->block_dim.y * blk->block_dim.z;

	__atomic_fetch_add(counter, threads, __ATOMIC_RELAXED);
}

/* pinned_async.cu: square_u32(const unsigned int *in, unsigned int *out, int n) */
CRCUDA_SIM_KERNEL(_Z10square_u32PKjPji)
{
	const unsigned int *in = CRCUDA_SIM_PARAM(blk, 0, const unsigned int *);
	unsigned int *out = CRCUDA_SIM_PARAM(blk, 1, unsigned int *);
	int n = CRCUDA_SIM_PARAM(blk, 2, int);

	CRCUDA_SIM_FOR_EACH_THREAD(blk, t)
	{
		unsigned i = CRCUDA_SIM_GLOBAL_X(blk, t);

		if ((int)i < n)
			out[i] = in[i] * in[i];
	}
}

/* pinned_async.cu: add_one_mapped(unsigned int *host_mem, int n) */
CRCUDA_SIM_KERNEL(_Z14add_one_mappedPji)
{
	unsigned int *mem = CRCUDA_SIM_PARAM(blk, 0, unsigned int *);
	int n = CRCUDA_SIM_PARAM(blk, 1, int);

	CRCUDA_SIM_FOR_EACH_THREAD(blk, t)
	{
		unsigned i = CRCUDA_SIM_GLOBAL_X(blk, t);

		if ((int)i < n)
			mem[i] += 1;
	}
}

/* vmm_fixed.cu: fill_index(unsigned int *data, unsigned int salt, unsigned long long n) */
CRCUDA_SIM_KERNEL(_Z10fill_indexPjjy)
{
	unsigned int *data = CRCUDA_SIM_PARAM(blk, 0, unsigned int *);
	unsigned int salt = CRCUDA_SIM_PARAM(blk, 1, unsigned int);
	unsigned long long n = CRCUDA_SIM_PARAM(blk, 2, unsigned long long);

	CRCUDA_SIM_FOR_EACH_THREAD(blk, t)
	{
		unsigned long long i = (unsigned long long)blk->block_idx.x * blk->block_dim.x + t.x;

		if (i < n)
			data[i] = (unsigned int)i * 2654435761u + salt;
	}
}

/* library_kernel.cu: saxpy_i(int a, const int *x, int *y, int n) */
CRCUDA_SIM_KERNEL(_Z7saxpy_iiPKiPii)
{
	int a = CRCUDA_SIM_PARAM(blk, 0, int);
	const int *x = CRCUDA_SIM_PARAM(blk, 1, const int *);
	int *y = CRCUDA_SIM_PARAM(blk, 2, int *);
	int n = CRCUDA_SIM_PARAM(blk, 3, int);
	int *launches_seen = CRCUDA_SIM_GLOBAL(blk, "launches_seen", int);

	CRCUDA_SIM_FOR_EACH_THREAD(blk, t)
	{
		unsigned i = CRCUDA_SIM_GLOBAL_X(blk, t);

		if ((int)i < n)
			y[i] = a * x[i] + y[i];
		if (i == 0)
			*launches_seen += 1;
	}
}

/* library_kernel.cu: pack_params(int a, long long *out, Packed s, short t), Packed = {double; char[13]} */
struct packed {
	double d;
	char c[13];
};

CRCUDA_SIM_KERNEL(_Z11pack_paramsiPx6Packeds)
{
	int a = CRCUDA_SIM_PARAM(blk, 0, int);
	long long *out = CRCUDA_SIM_PARAM(blk, 1, long long *);
	struct packed s;
	short t = CRCUDA_SIM_PARAM(blk, 3, short);

	memcpy(&s, blk->params[2], sizeof(s));
	out[0] = a;
	out[1] = (long long)s.d;
	out[2] = s.c[12];
	out[3] = t;
}

/* sim_checks.cu: add_one(int *data, int n); no_host_impl has none on purpose. */
CRCUDA_SIM_KERNEL(_Z7add_onePii)
{
	int *data = CRCUDA_SIM_PARAM(blk, 0, int *);
	int n = CRCUDA_SIM_PARAM(blk, 1, int);

	CRCUDA_SIM_FOR_EACH_THREAD(blk, t)
	{
		unsigned i = CRCUDA_SIM_GLOBAL_X(blk, t);

		if ((int)i < n)
			data[i] += 1;
	}
}

/* state_app.cu: grid-stride loops over n words. */
static unsigned long long sim_stride_start(const struct crcuda_sim_block *blk, struct crcuda_sim_dim3 t)
{
	return (unsigned long long)blk->block_idx.x * blk->block_dim.x + t.x;
}

CRCUDA_SIM_KERNEL(state_init)
{
	unsigned *x = CRCUDA_SIM_PARAM(blk, 0, unsigned *);
	unsigned long long n = CRCUDA_SIM_PARAM(blk, 1, unsigned long long);
	unsigned seed = CRCUDA_SIM_PARAM(blk, 2, unsigned);
	unsigned long long stride = (unsigned long long)blk->grid_dim.x * blk->block_dim.x;

	CRCUDA_SIM_FOR_EACH_THREAD(blk, t)
	{
		for (unsigned long long i = sim_stride_start(blk, t); i < n; i += stride)
			x[i] = (unsigned)(i * 2654435761ull) ^ seed;
	}
}

CRCUDA_SIM_KERNEL(state_step)
{
	unsigned *x = CRCUDA_SIM_PARAM(blk, 0, unsigned *);
	unsigned long long n = CRCUDA_SIM_PARAM(blk, 1, unsigned long long);
	unsigned step = CRCUDA_SIM_PARAM(blk, 2, unsigned);
	unsigned long long stride = (unsigned long long)blk->grid_dim.x * blk->block_dim.x;

	CRCUDA_SIM_FOR_EACH_THREAD(blk, t)
	{
		for (unsigned long long i = sim_stride_start(blk, t); i < n; i += stride)
			x[i] = x[i] * 1664525u + 1013904223u + step;
	}
}

/* state_app --graph: the step number on the device. */
CRCUDA_SIM_KERNEL(state_count)
{
	unsigned *step = CRCUDA_SIM_PARAM(blk, 0, unsigned *);

	*step += 1;
}

/* state_app.cu: extern "C" state_cond(const unsigned *step, unsigned per, cudaGraphConditionalHandle h) */
CRCUDA_SIM_KERNEL(state_cond)
{
	const unsigned *step = CRCUDA_SIM_PARAM(blk, 0, const unsigned *);
	unsigned per = CRCUDA_SIM_PARAM(blk, 1, unsigned);
	unsigned long long h = CRCUDA_SIM_PARAM(blk, 2, unsigned long long);

	if (blk->block_idx.x == 0)
		CRCUDA_SIM_SET_CONDITIONAL(blk, h, *step % per != 0);
}

CRCUDA_SIM_KERNEL(state_step_dev)
{
	unsigned *x = CRCUDA_SIM_PARAM(blk, 0, unsigned *);
	unsigned long long n = CRCUDA_SIM_PARAM(blk, 1, unsigned long long);
	const unsigned *step = CRCUDA_SIM_PARAM(blk, 2, const unsigned *);
	unsigned long long stride = (unsigned long long)blk->grid_dim.x * blk->block_dim.x;
	unsigned k = *step;

	CRCUDA_SIM_FOR_EACH_THREAD(blk, t)
	{
		for (unsigned long long i = sim_stride_start(blk, t); i < n; i += stride)
			x[i] = x[i] * 1664525u + 1013904223u + k;
	}
}

/* graph_attr: the simulated device has no clusters; the size its launch asks for (2). */
CRCUDA_SIM_KERNEL(attr_probe)
{
	unsigned *acc = CRCUDA_SIM_PARAM(blk, 0, unsigned *);
	unsigned salt = CRCUDA_SIM_PARAM(blk, 1, unsigned);

	unsigned b = blk->block_idx.x;

	acc[b] = acc[b] * 3u + 2u * 1000u + salt + b;
}

CRCUDA_SIM_KERNEL(state_checksum)
{
	const unsigned *x = CRCUDA_SIM_PARAM(blk, 0, const unsigned *);
	unsigned long long n = CRCUDA_SIM_PARAM(blk, 1, unsigned long long);
	unsigned long long *sum = CRCUDA_SIM_PARAM(blk, 2, unsigned long long *);
	unsigned long long stride = (unsigned long long)blk->grid_dim.x * blk->block_dim.x;
	unsigned long long local = 0;

	CRCUDA_SIM_FOR_EACH_THREAD(blk, t)
	{
		for (unsigned long long i = sim_stride_start(blk, t); i < n; i += stride)
			local += x[i] ^ (unsigned)i;
	}
	__atomic_fetch_add(sum, local, __ATOMIC_RELAXED);
}

/* fault_app.cu: extern "C" fault_assert(const int *flag): the assert fails when *flag != 0. */
CRCUDA_SIM_KERNEL(fault_assert)
{
	const int *flag = CRCUDA_SIM_PARAM(blk, 0, const int *);

	if (*flag != 0)
		blk->trap(710); /* CUDA_ERROR_ASSERT */
}

/* fault_app.cu: extern "C" fault_oob(int *base, long long offset): a write nowhere. */
CRCUDA_SIM_KERNEL(fault_oob)
{
	(void)blk->params;
	blk->trap(700); /* CUDA_ERROR_ILLEGAL_ADDRESS, without touching the address */
}

/* tests/ckpt-daemon/backlog.cu: backlog_spin(unsigned ms) holds its stream; backlog_bump(counter). */
CRCUDA_SIM_KERNEL(backlog_spin)
{
	unsigned ms = CRCUDA_SIM_PARAM(blk, 0, unsigned);
	struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000};

	nanosleep(&ts, NULL);
}

CRCUDA_SIM_KERNEL(backlog_bump)
{
	unsigned long long *counter = CRCUDA_SIM_PARAM(blk, 0, unsigned long long *);

	__atomic_fetch_add(counter, 1, __ATOMIC_RELAXED);
}

/* graph_basic.cu: extern "C" graph_k1(unsigned *p, const unsigned *t, const unsigned *acc, unsigned mul,
 * int n) */
CRCUDA_SIM_KERNEL(graph_k1)
{
	unsigned *p = CRCUDA_SIM_PARAM(blk, 0, unsigned *);
	const unsigned *t = CRCUDA_SIM_PARAM(blk, 1, const unsigned *);
	const unsigned *acc = CRCUDA_SIM_PARAM(blk, 2, const unsigned *);
	unsigned mul = CRCUDA_SIM_PARAM(blk, 3, unsigned);
	int n = CRCUDA_SIM_PARAM(blk, 4, int);

	CRCUDA_SIM_FOR_EACH_THREAD(blk, th)
	{
		unsigned i = CRCUDA_SIM_GLOBAL_X(blk, th);

		if ((int)i < n)
			p[i] = t[i] * mul + acc[i];
	}
}

/* graph_basic.cu: extern "C" graph_k2(unsigned *q, const unsigned *t, const unsigned *acc, unsigned add,
 * int n) */
CRCUDA_SIM_KERNEL(graph_k2)
{
	unsigned *q = CRCUDA_SIM_PARAM(blk, 0, unsigned *);
	const unsigned *t = CRCUDA_SIM_PARAM(blk, 1, const unsigned *);
	const unsigned *acc = CRCUDA_SIM_PARAM(blk, 2, const unsigned *);
	unsigned add = CRCUDA_SIM_PARAM(blk, 3, unsigned);
	int n = CRCUDA_SIM_PARAM(blk, 4, int);

	CRCUDA_SIM_FOR_EACH_THREAD(blk, th)
	{
		unsigned i = CRCUDA_SIM_GLOBAL_X(blk, th);

		if ((int)i < n)
			q[i] = t[i] * 5u + (acc[i] >> 3) + add;
	}
}

/* graph_basic.cu: extern "C" graph_k3(unsigned *acc, const unsigned *p, const unsigned *q) */
CRCUDA_SIM_KERNEL(graph_k3)
{
	unsigned *acc = CRCUDA_SIM_PARAM(blk, 0, unsigned *);
	const unsigned *p = CRCUDA_SIM_PARAM(blk, 1, const unsigned *);
	const unsigned *q = CRCUDA_SIM_PARAM(blk, 2, const unsigned *);

	CRCUDA_SIM_FOR_EACH_THREAD(blk, th)
	{
		unsigned i = CRCUDA_SIM_GLOBAL_X(blk, th);

		acc[i] = acc[i] * 3u + (p[i] ^ q[i]) + i;
	}
}

/* graph_basic.cu: extern "C" graph_mix(unsigned *acc, unsigned salt, int n) */
CRCUDA_SIM_KERNEL(graph_mix)
{
	unsigned *acc = CRCUDA_SIM_PARAM(blk, 0, unsigned *);
	unsigned salt = CRCUDA_SIM_PARAM(blk, 1, unsigned);
	int n = CRCUDA_SIM_PARAM(blk, 2, int);

	CRCUDA_SIM_FOR_EACH_THREAD(blk, th)
	{
		unsigned i = CRCUDA_SIM_GLOBAL_X(blk, th);

		if ((int)i < n)
			acc[i] = acc[i] * 2654435761u + salt;
	}
}

/* graph_basic.cu: extern "C" graph_affine(unsigned *x, unsigned mul, unsigned add, int n) */
CRCUDA_SIM_KERNEL(graph_affine)
{
	unsigned *x = CRCUDA_SIM_PARAM(blk, 0, unsigned *);
	unsigned mul = CRCUDA_SIM_PARAM(blk, 1, unsigned);
	unsigned add = CRCUDA_SIM_PARAM(blk, 2, unsigned);
	int n = CRCUDA_SIM_PARAM(blk, 3, int);

	CRCUDA_SIM_FOR_EACH_THREAD(blk, th)
	{
		unsigned i = CRCUDA_SIM_GLOBAL_X(blk, th);

		if ((int)i < n)
			x[i] = x[i] * mul + add + i;
	}
}

/* graph_basic.cu: extern "C" graph_mix2(unsigned *dst, const unsigned *src, unsigned mul, int n) */
CRCUDA_SIM_KERNEL(graph_mix2)
{
	unsigned *dst = CRCUDA_SIM_PARAM(blk, 0, unsigned *);
	const unsigned *src = CRCUDA_SIM_PARAM(blk, 1, const unsigned *);
	unsigned mul = CRCUDA_SIM_PARAM(blk, 2, unsigned);
	int n = CRCUDA_SIM_PARAM(blk, 3, int);

	CRCUDA_SIM_FOR_EACH_THREAD(blk, th)
	{
		unsigned i = CRCUDA_SIM_GLOBAL_X(blk, th);

		if ((int)i < n)
			dst[i] = dst[i] * mul + src[i];
	}
}

/* state_app.cu: texture and surface objects, point-sampled at element centres: one element each. */
static int sim_resource_of(const struct crcuda_sim_block *blk, unsigned long long obj,
			   struct crcuda_sim_resource *res)
{
	if (blk->resource(obj, res)) {
		blk->trap(700); /* an object that does not exist: an illegal access */
		return -1;
	}
	return 0;
}

/* extern "C" tex_sample2d(unsigned *out, cudaTextureObject_t tex, int w, int h) */
CRCUDA_SIM_KERNEL(tex_sample2d)
{
	unsigned *out = CRCUDA_SIM_PARAM(blk, 0, unsigned *);
	int w = CRCUDA_SIM_PARAM(blk, 2, int), h = CRCUDA_SIM_PARAM(blk, 3, int);
	struct crcuda_sim_resource res;

	if (sim_resource_of(blk, CRCUDA_SIM_PARAM(blk, 1, unsigned long long), &res))
		return;
	CRCUDA_SIM_FOR_EACH_THREAD(blk, t)
	{
		int x = (int)CRCUDA_SIM_GLOBAL_X(blk, t), y = (int)blk->block_idx.y;

		if (x < w && y < h)
			out[y * w + x] = *CRCUDA_SIM_ELEM(&res, unsigned, x, y, 0);
	}
}

/* extern "C" tex_sample_layered(unsigned *out, cudaTextureObject_t tex, int w, int h) */
CRCUDA_SIM_KERNEL(tex_sample_layered)
{
	unsigned *out = CRCUDA_SIM_PARAM(blk, 0, unsigned *);
	int w = CRCUDA_SIM_PARAM(blk, 2, int), h = CRCUDA_SIM_PARAM(blk, 3, int);
	struct crcuda_sim_resource res;

	if (sim_resource_of(blk, CRCUDA_SIM_PARAM(blk, 1, unsigned long long), &res))
		return;
	CRCUDA_SIM_FOR_EACH_THREAD(blk, t)
	{
		int x = (int)CRCUDA_SIM_GLOBAL_X(blk, t), y = (int)blk->block_idx.y,
		    layer = (int)blk->block_idx.z;

		if (x < w && y < h)
			out[(layer * h + y) * w + x] = *CRCUDA_SIM_ELEM(&res, unsigned, x, y, layer);
	}
}

/* extern "C" tex_fetch1d(unsigned *out, cudaTextureObject_t tex, int n) */
CRCUDA_SIM_KERNEL(tex_fetch1d)
{
	unsigned *out = CRCUDA_SIM_PARAM(blk, 0, unsigned *);
	int n = CRCUDA_SIM_PARAM(blk, 2, int);
	struct crcuda_sim_resource res;

	if (sim_resource_of(blk, CRCUDA_SIM_PARAM(blk, 1, unsigned long long), &res))
		return;
	CRCUDA_SIM_FOR_EACH_THREAD(blk, t)
	{
		int i = (int)CRCUDA_SIM_GLOBAL_X(blk, t);

		if (i < n)
			out[i] = *CRCUDA_SIM_ELEM(&res, unsigned, i, 0, 0);
	}
}

/* extern "C" surf_step(cudaSurfaceObject_t surf, int w, int h, unsigned step) */
CRCUDA_SIM_KERNEL(surf_step)
{
	int w = CRCUDA_SIM_PARAM(blk, 1, int), h = CRCUDA_SIM_PARAM(blk, 2, int);
	unsigned step = CRCUDA_SIM_PARAM(blk, 3, unsigned);
	struct crcuda_sim_resource res;

	if (sim_resource_of(blk, CRCUDA_SIM_PARAM(blk, 0, unsigned long long), &res))
		return;
	CRCUDA_SIM_FOR_EACH_THREAD(blk, t)
	{
		int x = (int)CRCUDA_SIM_GLOBAL_X(blk, t), y = (int)blk->block_idx.y;

		if (x < w && y < h) {
			unsigned *e = CRCUDA_SIM_ELEM(&res, unsigned, x, y, 0);

			*e = *e * 1664525u + step + (unsigned)x;
		}
	}
}

/* extern "C" state_step_tex(unsigned *x, unsigned long long n, unsigned step, cudaTextureObject_t tex,
 * int w, int h) */
CRCUDA_SIM_KERNEL(state_step_tex)
{
	unsigned *x = CRCUDA_SIM_PARAM(blk, 0, unsigned *);
	unsigned long long n = CRCUDA_SIM_PARAM(blk, 1, unsigned long long);
	unsigned step = CRCUDA_SIM_PARAM(blk, 2, unsigned);
	int w = CRCUDA_SIM_PARAM(blk, 4, int), h = CRCUDA_SIM_PARAM(blk, 5, int);
	unsigned long long stride = (unsigned long long)blk->grid_dim.x * blk->block_dim.x;
	struct crcuda_sim_resource res;

	if (sim_resource_of(blk, CRCUDA_SIM_PARAM(blk, 3, unsigned long long), &res))
		return;
	CRCUDA_SIM_FOR_EACH_THREAD(blk, t)
	{
		for (unsigned long long i = CRCUDA_SIM_GLOBAL_X(blk, t); i < n; i += stride) {
			unsigned e = (unsigned)(i % (unsigned long long)(w * h));

			x[i] = x[i] * 1664525u + 1013904223u + step +
			       *CRCUDA_SIM_ELEM(&res, unsigned, e % (unsigned)w, e / (unsigned)w, 0);
		}
	}
}

/* graph_cond.cu: extern "C" cond_step(unsigned *counter, unsigned limit, cudaGraphConditionalHandle h) */
CRCUDA_SIM_KERNEL(cond_step)
{
	unsigned *counter = CRCUDA_SIM_PARAM(blk, 0, unsigned *);
	unsigned limit = CRCUDA_SIM_PARAM(blk, 1, unsigned);
	unsigned long long h = CRCUDA_SIM_PARAM(blk, 2, unsigned long long);

	if (blk->block_idx.x == 0) {
		unsigned c = ++*counter;

		CRCUDA_SIM_SET_CONDITIONAL(blk, h, c < limit);
	}
}

/* managed_vars.cu: mv_bump(int n), with __managed__ int mv_count, unsigned mv_table[300] and
 * __device__ int mv_plain */
CRCUDA_SIM_KERNEL(_Z7mv_bumpi)
{
	int n = CRCUDA_SIM_PARAM(blk, 0, int);
	int *count = CRCUDA_SIM_GLOBAL(blk, "mv_count", int);
	unsigned *table = CRCUDA_SIM_GLOBAL(blk, "mv_table", unsigned);
	const int *plain = CRCUDA_SIM_GLOBAL(blk, "mv_plain", const int);

	CRCUDA_SIM_FOR_EACH_THREAD(blk, t)
	{
		if (t.x == 0)
			*count += n;
		table[t.x] = table[t.x] * 3 + t.x + (unsigned)*plain;
	}
}

/* managed_vars.cu: mv_read(int *out, const unsigned *table) */
CRCUDA_SIM_KERNEL(_Z7mv_readPiPKj)
{
	int *out = CRCUDA_SIM_PARAM(blk, 0, int *);
	const unsigned *table = CRCUDA_SIM_PARAM(blk, 1, const unsigned *);
	int *count = CRCUDA_SIM_GLOBAL(blk, "mv_count", int);

	out[0] = *count;
	out[1] = (int)table[299];
}

/* managed_atomics.cu: add_system(int *word, int per_thread) */
CRCUDA_SIM_KERNEL(_Z10add_systemPii)
{
	int *word = CRCUDA_SIM_PARAM(blk, 0, int *);
	int per_thread = CRCUDA_SIM_PARAM(blk, 1, int);

	CRCUDA_SIM_FOR_EACH_THREAD(blk, t)
	{
		for (int i = 0; i < per_thread; i++)
			__atomic_fetch_add(word, 1, __ATOMIC_RELAXED);
	}
}

/* managed_atomics.cu: slow_write(int *word, int value): 200 ms, then the write */
CRCUDA_SIM_KERNEL(_Z10slow_writePii)
{
	int *word = CRCUDA_SIM_PARAM(blk, 0, int *);
	int value = CRCUDA_SIM_PARAM(blk, 1, int);
	struct timespec ts = {0, 200 * 1000 * 1000};

	nanosleep(&ts, NULL);
	__atomic_store_n(word, value, __ATOMIC_RELEASE);
}

/* peer_ring.cu: ring_step(unsigned *data, int n, unsigned salt) */
CRCUDA_SIM_KERNEL(ring_step)
{
	uint32_t *data = CRCUDA_SIM_PARAM(blk, 0, uint32_t *);
	int n = CRCUDA_SIM_PARAM(blk, 1, int);
	uint32_t salt = CRCUDA_SIM_PARAM(blk, 2, uint32_t);

	for (int i = 0; i < n; i++)
		data[i] = data[i] * 1664525u + 1013904223u + salt;
}

/* peer_ring.cu: coll_ring_exchange(data, next_inbox, next_flag, my_inbox, my_flag, n, step). The flags
 * are in memory another process maps: the wait spins on an atomic load (the other process's stream
 * thread raises it), with a short sleep so that a simulated device does not burn a CPU. */
CRCUDA_SIM_KERNEL(coll_ring_exchange)
{
	uint32_t *data = CRCUDA_SIM_PARAM(blk, 0, uint32_t *);
	uint32_t *next_inbox = CRCUDA_SIM_PARAM(blk, 1, uint32_t *);
	uint32_t *next_flag = CRCUDA_SIM_PARAM(blk, 2, uint32_t *);
	const uint32_t *my_inbox = CRCUDA_SIM_PARAM(blk, 3, const uint32_t *);
	uint32_t *my_flag = CRCUDA_SIM_PARAM(blk, 4, uint32_t *);
	int n = CRCUDA_SIM_PARAM(blk, 5, int);
	uint32_t step = CRCUDA_SIM_PARAM(blk, 6, uint32_t);
	struct timespec pause = {.tv_nsec = 50 * 1000};

	memcpy(next_inbox, data, (size_t)n * sizeof(*data));
	__atomic_store_n(next_flag, step + 1, __ATOMIC_RELEASE);
	while (__atomic_load_n(my_flag, __ATOMIC_ACQUIRE) < step + 1)
		nanosleep(&pause, NULL);
	for (int i = 0; i < n; i++)
		data[i] = data[i] * 3u + my_inbox[i];
}
