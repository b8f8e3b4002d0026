/* stress_drv: the driver-API program of the random-instant checkpoint/restart stress test
 * (cr-stress.sh). Two streams ordered by events; per step: tokens into pageable and pinned memory,
 * copied asynchronously to device buffers taken from a caching-allocator-like pool, an embedding-like
 * gather that checks its indices, state and table updates, a module global advanced, a sum copied back
 * asynchronously into pinned memory (read by a cuLaunchHostFunc callback and by the host after an
 * event) and into pageable memory (read by a cuStreamAddCallback callback and the next step). The next
 * step's tokens depend on the sums, so a stale or lost copy changes every later line. */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>

#include "../programs/cuda_test.h"
#include "stress_common.h"

extern const unsigned char stress_kernels_fatbin[];

static int drv_alloc(uint64_t *p, size_t n)
{
	CUdeviceptr d;
	int rc = cuMemAlloc(&d, n) != CUDA_SUCCESS;

	*p = d;
	return rc;
}

static int drv_free(uint64_t p)
{
	return cuMemFree((CUdeviceptr)p) != CUDA_SUCCESS;
}

static void CUDA_CB host_fn(void *arg)
{
	st_cb_run(arg);
}

static void CUDA_CB stream_cb(CUstream s, CUresult status, void *arg)
{
	(void)s;
	if (status == CUDA_SUCCESS)
		st_cb_run(arg);
}

#define LAUNCH(f, s, ...)                                                                                    \
	do {                                                                                                 \
		void *args_[] = {__VA_ARGS__};                                                               \
		CU_CHECK(cuLaunchKernel(f, ST_GRID, 1, 1, ST_BLOCK, 1, 1, 0, s, args_, NULL));               \
	} while (0)

int main(int argc, char **argv)
{
	struct st_opts o;
	CUdevice dev;
	CUcontext ctx;
	CUmodule mod;
	CUfunction f_gather, f_mix, f_update, f_sum, f_bump, f_read;
	CUstream s0, s1;
	CUevent ev_a, ev_b, ev_c, ev_pin_free;
	CUdeviceptr d_state, d_table, d_sum, d_flag, d_out;
	unsigned *idx_page, *idx_pin, *host_state, *host_table;
	unsigned long long *res_pin, *res_page, counter = 0;
	struct st_pool pool = {0};
	struct st_cb cb_pin = {0}, cb_page = {0};
	uint64_t rng, h = 0;
	unsigned n = ST_N, tsize = ST_TSIZE, flag = 0;
	int rc;

	st_parse(argc, argv, &o);
	setvbuf(stdout, NULL, _IOLBF, 0);
	cu_test_init("stress_drv");
	rng = 0x853c49e6748fea9bull ^ o.seed;
	CU_CHECK(cuDeviceGet(&dev, 0));
	CU_CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
	CU_CHECK(cuCtxSetCurrent(ctx));
	CU_CHECK(cuModuleLoadData(&mod, stress_kernels_fatbin));
	CU_CHECK(cuModuleGetFunction(&f_gather, mod, "st_gather"));
	CU_CHECK(cuModuleGetFunction(&f_mix, mod, "st_mix"));
	CU_CHECK(cuModuleGetFunction(&f_update, mod, "st_update"));
	CU_CHECK(cuModuleGetFunction(&f_sum, mod, "st_sum"));
	CU_CHECK(cuModuleGetFunction(&f_bump, mod, "st_bump"));
	CU_CHECK(cuModuleGetFunction(&f_read, mod, "st_read"));
	CU_CHECK(cuStreamCreate(&s0, CU_STREAM_NON_BLOCKING));
	CU_CHECK(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
	CU_CHECK(cuEventCreate(&ev_a, CU_EVENT_DISABLE_TIMING));
	CU_CHECK(cuEventCreate(&ev_b, CU_EVENT_DISABLE_TIMING));
	CU_CHECK(cuEventCreate(&ev_c, CU_EVENT_DISABLE_TIMING));
	CU_CHECK(cuEventCreate(&ev_pin_free, CU_EVENT_DISABLE_TIMING));
	CU_CHECK(cuMemAlloc(&d_state, (size_t)n * 4));
	CU_CHECK(cuMemAlloc(&d_table, (size_t)tsize * 4));
	CU_CHECK(cuMemAlloc(&d_sum, 8));
	CU_CHECK(cuMemAlloc(&d_flag, 4));
	CU_CHECK(cuMemAlloc(&d_out, 8));
	CU_CHECK(cuMemAllocHost((void **)&idx_pin, 3 * ST_IDX * 4));
	CU_CHECK(cuMemHostAlloc((void **)&res_pin, 64, 0));
	idx_page = malloc(3 * ST_IDX * 4);
	res_page = malloc(64);
	host_state = malloc((size_t)n * 4);
	host_table = malloc((size_t)tsize * 4);
	CHECK(idx_page && res_page && host_state && host_table);
	*res_pin = *res_page = 0;
	for (unsigned i = 0; i < n; i++)
		host_state[i] = (unsigned)st_rng(&rng);
	for (unsigned i = 0; i < tsize; i++)
		host_table[i] = (unsigned)st_rng(&rng);
	CU_CHECK(cuMemcpyHtoD(d_state, host_state, (size_t)n * 4));
	CU_CHECK(cuMemcpyHtoDAsync(d_table, host_table, (size_t)tsize * 4, s0));
	CU_CHECK(cuMemsetD32Async(d_flag, 0, 1, s0));
	CU_CHECK(cuEventRecord(ev_pin_free, s1));
	cb_pin.src = res_pin;
	cb_page.src = res_page;

	for (unsigned step = 1; step <= o.steps; step++) {
		unsigned na = ST_IDX * (1 + step % 3), nb = ST_IDX * (1 + (step + 1) % 3);
		unsigned salt = (unsigned)st_rng(&rng);
		CUdeviceptr ia, ga, ib, gb;

		/* The previous step's pageable copy and its callback are done: its value feeds the tokens. */
		CU_CHECK(cuStreamSynchronize(s1));
		rng ^= *res_page;
		st_tokens(&rng, idx_page, na);
		ia = st_pool_get(&pool, (size_t)na * 4, drv_alloc);
		ga = st_pool_get(&pool, (size_t)na * 4, drv_alloc);
		ib = st_pool_get(&pool, (size_t)nb * 4, drv_alloc);
		gb = st_pool_get(&pool, (size_t)nb * 4, drv_alloc);
		CU_CHECK(cuMemcpyHtoDAsync(ia, idx_page, (size_t)na * 4, s0));
		LAUNCH(f_gather, s0, &d_table, &tsize, &ia, &ga, &na, &d_flag);
		CU_CHECK(cuEventRecord(ev_a, s0));
		/* Pinned tokens: rewritten only once the previous copy from them is done. */
		CU_CHECK(cuEventSynchronize(ev_pin_free));
		st_tokens(&rng, idx_pin, nb);
		CU_CHECK(cuMemcpyHtoDAsync(ib, idx_pin, (size_t)nb * 4, s1));
		CU_CHECK(cuEventRecord(ev_pin_free, s1));
		CU_CHECK(cuStreamWaitEvent(s1, ev_a, 0));
		LAUNCH(f_gather, s1, &d_table, &tsize, &ib, &gb, &nb, &d_flag);
		LAUNCH(f_mix, s1, &d_state, &n, &ga, &na, &salt);
		salt++;
		LAUNCH(f_mix, s1, &d_state, &n, &gb, &nb, &salt);
		CU_CHECK(cuEventRecord(ev_b, s1));
		CU_CHECK(cuStreamWaitEvent(s0, ev_b, 0));
		LAUNCH(f_update, s0, &d_table, &tsize, &d_state, &n);
		unsigned long long add = step;
		LAUNCH(f_bump, s0, &add);
		CU_CHECK(cuMemsetD8Async(d_sum, 0, 8, s0));
		LAUNCH(f_sum, s0, &d_state, &n, &d_sum);
		CU_CHECK(cuMemcpyDtoHAsync(res_pin, d_sum, 8, s0));
		CU_CHECK(cuLaunchHostFunc(s0, host_fn, &cb_pin));
		CU_CHECK(cuEventRecord(ev_c, s0));
		CU_CHECK(cuStreamWaitEvent(s1, ev_c, 0));
		CU_CHECK(cuMemcpyDtoHAsync(res_page, d_sum, 8, s1));
		CU_CHECK(cuStreamAddCallback(s1, stream_cb, &cb_page, 0));
		/* Events in flight: polled, then waited for. */
		while (cuEventQuery(ev_b) == CUDA_ERROR_NOT_READY)
			;
		CU_CHECK(cuEventSynchronize(ev_c));
		rng ^= *res_pin;
		h = st_fold(h, *res_pin);
		printf("step %u sum=%016llx cb=%016llx\n", step, *res_pin, (unsigned long long)cb_pin.acc);
		st_pool_put(&pool, ia);
		st_pool_put(&pool, ga);
		st_pool_put(&pool, ib);
		st_pool_put(&pool, gb);
		if (step % 5 == 0)
			st_pool_empty(&pool, drv_free);
		st_sleep_ms(o.sleep_ms);
	}
	CU_CHECK(cuCtxSynchronize());
	LAUNCH(f_read, s0, &d_out);
	CU_CHECK(cuStreamSynchronize(s0)); /* a non-blocking stream: the copy below does not wait for it */
	CU_CHECK(cuMemcpyDtoH(&counter, d_out, 8));
	CU_CHECK(cuMemcpyDtoH(&flag, d_flag, 4));
	CU_CHECK(cuMemcpyDtoH(host_state, d_state, (size_t)n * 4));
	CU_CHECK(cuMemcpyDtoH(host_table, d_table, (size_t)tsize * 4));
	rc = st_report("stress_drv", o.steps, h, host_state, n, host_table, tsize, counter, &cb_pin, &cb_page,
		       rng, flag);
	free(idx_page);
	free(res_page);
	free(host_state);
	free(host_table);
	return rc;
}
