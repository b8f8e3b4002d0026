// stress_rt: stress_drv (tests/stress/stress_drv.c) written against the CUDA runtime, for the
// random-instant checkpoint/restart stress test (cr-stress.sh): the same steps with cudaMallocHost,
// cudaMemcpyAsync into pinned and pageable memory, cudaLaunchHostFunc and cudaStreamAddCallback, a
// caching-allocator-like pool over cudaMalloc/cudaFree, and the module global read with
// cudaMemcpyFromSymbol.
#include <stdio.h>
#include <stdlib.h>

#include "../cudart/cudart_test.h"
#include "stress_common.h"
#include "stress_kernels.cu"

static int rt_alloc(uint64_t *p, size_t n)
{
	void *d = NULL;
	int rc = cudaMalloc(&d, n) != cudaSuccess;

	*p = (uint64_t)(uintptr_t)d;
	return rc;
}

static int rt_free(uint64_t p)
{
	return cudaFree((void *)(uintptr_t)p) != cudaSuccess;
}

static void CUDART_CB host_fn(void *arg)
{
	st_cb_run((struct st_cb *)arg);
}

static void CUDART_CB stream_cb(cudaStream_t, cudaError_t status, void *arg)
{
	if (status == cudaSuccess)
		st_cb_run((struct st_cb *)arg);
}

#define DP(p) ((unsigned *)(uintptr_t)(p))

int main(int argc, char **argv)
{
	struct st_opts o;
	cudaStream_t s0, s1;
	cudaEvent_t ev_a, ev_b, ev_c, ev_pin_free;
	unsigned *d_state, *d_table, *d_flag, *idx_page, *idx_pin, *host_state, *host_table;
	unsigned long long *d_sum, *res_pin, *res_page, counter = 0;
	struct st_pool pool = {};
	struct st_cb cb_pin = {}, cb_page = {};
	uint64_t rng, h = 0;
	unsigned n = ST_N, tsize = ST_TSIZE, flag = 0;
	int rc;

	st_parse(argc, argv, &o);
	setvbuf(stdout, NULL, _IOLBF, 0);
	cudart_test_init("stress_rt");
	rng = 0x853c49e6748fea9bull ^ o.seed;
	CUDA_CHECK(cudaStreamCreateWithFlags(&s0, cudaStreamNonBlocking));
	CUDA_CHECK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
	CUDA_CHECK(cudaEventCreateWithFlags(&ev_a, cudaEventDisableTiming));
	CUDA_CHECK(cudaEventCreateWithFlags(&ev_b, cudaEventDisableTiming));
	CUDA_CHECK(cudaEventCreateWithFlags(&ev_c, cudaEventDisableTiming));
	CUDA_CHECK(cudaEventCreateWithFlags(&ev_pin_free, cudaEventDisableTiming));
	CUDA_CHECK(cudaMalloc(&d_state, (size_t)n * 4));
	CUDA_CHECK(cudaMalloc(&d_table, (size_t)tsize * 4));
	CUDA_CHECK(cudaMalloc(&d_sum, 8));
	CUDA_CHECK(cudaMalloc(&d_flag, 4));
	CUDA_CHECK(cudaMallocHost(&idx_pin, 3 * ST_IDX * 4));
	CUDA_CHECK(cudaHostAlloc(&res_pin, 64, cudaHostAllocDefault));
	idx_page = (unsigned *)malloc(3 * ST_IDX * 4);
	res_page = (unsigned long long *)malloc(64);
	host_state = (unsigned *)malloc((size_t)n * 4);
	host_table = (unsigned *)malloc((size_t)tsize * 4);
	CHECK(idx_page && res_page && host_state && host_table);
	*res_pin = *res_page = 0;
	for (unsigned i = 0; i < n; i++)
		host_state[i] = (unsigned)st_rng(&rng);
	for (unsigned i = 0; i < tsize; i++)
		host_table[i] = (unsigned)st_rng(&rng);
	CUDA_CHECK(cudaMemcpy(d_state, host_state, (size_t)n * 4, cudaMemcpyHostToDevice));
	CUDA_CHECK(cudaMemcpyAsync(d_table, host_table, (size_t)tsize * 4, cudaMemcpyHostToDevice, s0));
	CUDA_CHECK(cudaMemsetAsync(d_flag, 0, 4, s0));
	CUDA_CHECK(cudaEventRecord(ev_pin_free, s1));
	cb_pin.src = res_pin;
	cb_page.src = res_page;

	for (unsigned step = 1; step <= o.steps; step++) {
		unsigned na = ST_IDX * (1 + step % 3), nb = ST_IDX * (1 + (step + 1) % 3);
		unsigned salt = (unsigned)st_rng(&rng);

		CUDA_CHECK(cudaStreamSynchronize(s1));
		rng ^= *res_page;
		st_tokens(&rng, idx_page, na);
		uint64_t ia = st_pool_get(&pool, (size_t)na * 4, rt_alloc);
		uint64_t ga = st_pool_get(&pool, (size_t)na * 4, rt_alloc);
		uint64_t ib = st_pool_get(&pool, (size_t)nb * 4, rt_alloc);
		uint64_t gb = st_pool_get(&pool, (size_t)nb * 4, rt_alloc);
		CUDA_CHECK(cudaMemcpyAsync(DP(ia), idx_page, (size_t)na * 4, cudaMemcpyHostToDevice, s0));
		st_gather<<<ST_GRID, ST_BLOCK, 0, s0>>>(d_table, tsize, DP(ia), DP(ga), na, d_flag);
		CUDA_CHECK_LAUNCH();
		CUDA_CHECK(cudaEventRecord(ev_a, s0));
		CUDA_CHECK(cudaEventSynchronize(ev_pin_free));
		st_tokens(&rng, idx_pin, nb);
		CUDA_CHECK(cudaMemcpyAsync(DP(ib), idx_pin, (size_t)nb * 4, cudaMemcpyHostToDevice, s1));
		CUDA_CHECK(cudaEventRecord(ev_pin_free, s1));
		CUDA_CHECK(cudaStreamWaitEvent(s1, ev_a, 0));
		st_gather<<<ST_GRID, ST_BLOCK, 0, s1>>>(d_table, tsize, DP(ib), DP(gb), nb, d_flag);
		st_mix<<<ST_GRID, ST_BLOCK, 0, s1>>>(d_state, n, DP(ga), na, salt);
		st_mix<<<ST_GRID, ST_BLOCK, 0, s1>>>(d_state, n, DP(gb), nb, salt + 1);
		CUDA_CHECK_LAUNCH();
		CUDA_CHECK(cudaEventRecord(ev_b, s1));
		CUDA_CHECK(cudaStreamWaitEvent(s0, ev_b, 0));
		st_update<<<ST_GRID, ST_BLOCK, 0, s0>>>(d_table, tsize, d_state, n);
		st_bump<<<1, 1, 0, s0>>>(step);
		CUDA_CHECK(cudaMemsetAsync(d_sum, 0, 8, s0));
		st_sum<<<ST_GRID, ST_BLOCK, 0, s0>>>(d_state, n, d_sum);
		CUDA_CHECK_LAUNCH();
		CUDA_CHECK(cudaMemcpyAsync(res_pin, d_sum, 8, cudaMemcpyDeviceToHost, s0));
		CUDA_CHECK(cudaLaunchHostFunc(s0, host_fn, &cb_pin));
		CUDA_CHECK(cudaEventRecord(ev_c, s0));
		CUDA_CHECK(cudaStreamWaitEvent(s1, ev_c, 0));
		CUDA_CHECK(cudaMemcpyAsync(res_page, d_sum, 8, cudaMemcpyDeviceToHost, s1));
		CUDA_CHECK(cudaStreamAddCallback(s1, stream_cb, &cb_page, 0));
		while (cudaEventQuery(ev_b) == cudaErrorNotReady)
			;
		CUDA_CHECK(cudaEventSynchronize(ev_c));
		rng ^= *res_pin;
		h = st_fold(h, *res_pin);
		printf("step %u sum=%016llx cb=%016llx\n", step, *res_pin, (unsigned long long)cb_pin.acc);
		st_pool_put(&pool, ia);
		st_pool_put(&pool, ga);
		st_pool_put(&pool, ib);
		st_pool_put(&pool, gb);
		if (step % 5 == 0)
			st_pool_empty(&pool, rt_free);
		st_sleep_ms(o.sleep_ms);
	}
	CUDA_CHECK(cudaDeviceSynchronize());
	CUDA_CHECK(cudaMemcpyFromSymbol(&counter, st_counter, 8));
	CUDA_CHECK(cudaMemcpy(&flag, d_flag, 4, cudaMemcpyDeviceToHost));
	CUDA_CHECK(cudaMemcpy(host_state, d_state, (size_t)n * 4, cudaMemcpyDeviceToHost));
	CUDA_CHECK(cudaMemcpy(host_table, d_table, (size_t)tsize * 4, cudaMemcpyDeviceToHost));
	rc = st_report("stress_rt", o.steps, h, host_state, n, host_table, tsize, counter, &cb_pin, &cb_page,
		       rng, flag);
	free(idx_page);
	free(res_page);
	free(host_state);
	free(host_table);
	return rc;
}
