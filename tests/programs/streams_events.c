/* streams_events: a chain across three streams ordered only by events (A on a blocking stream, B waits
 * for A on a non-blocking one, C waits for B), elapsed time, queries, the legacy NULL stream waiting
 * for a blocking stream, the per-thread default stream from cuGetProcAddress, and a host function. */
#include <stdatomic.h>
#include <string.h>

#include "cuda_test.h"

extern const unsigned char streams_events_fatbin[];

#define N      4096
#define BLOCK  128
#define ROUNDS 2000

typedef CUresult (*launch_fn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
			      unsigned, CUstream, void **, void **);

static atomic_int host_func_ran;

static void mark_host_func(void *arg)
{
	atomic_store((atomic_int *)arg, 1);
}

static void expect_all(CUdeviceptr d, int want, const char *what)
{
	static int host[N];

	CU_CHECK(cuMemcpyDtoH(host, d, sizeof(host)));
	for (int i = 0; i < N; i++) {
		if (host[i] != want) {
			fprintf(stderr, "streams_events: %s: element %d is %d, expected %d\n", what, i,
				host[i], want);
			exit(1);
		}
	}
}

int main(void)
{
	CUcontext ctx, stream_ctx;
	CUmodule mod;
	CUfunction busy_add, combine;
	CUstream s1, s2, s3;
	CUevent start, a_done, b_done, end, untimed;
	CUdeviceptr da, db, dout;
	int n = N, rounds = ROUNDS, least, greatest, priority;
	unsigned flags, grid = N / BLOCK;
	float ms = -1;

	cu_test_init("streams_events");
	ctx = cu_test_primary_context(NULL);
	CU_CHECK(cuModuleLoadData(&mod, streams_events_fatbin));
	CU_CHECK(cuModuleGetFunction(&busy_add, mod, "_Z8busy_addPViii"));
	CU_CHECK(cuModuleGetFunction(&combine, mod, "_Z7combinePKiS0_Pii"));
	CU_CHECK(cuMemAlloc(&da, N * sizeof(int)));
	CU_CHECK(cuMemAlloc(&db, N * sizeof(int)));
	CU_CHECK(cuMemAlloc(&dout, N * sizeof(int)));

	CU_CHECK(cuCtxGetStreamPriorityRange(&least, &greatest));
	CHECK(greatest <= least);
	CU_CHECK(cuStreamCreate(&s1, CU_STREAM_DEFAULT));
	CU_CHECK(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
	CU_CHECK(cuStreamCreateWithPriority(&s3, CU_STREAM_NON_BLOCKING, greatest));
	CU_CHECK(cuStreamGetFlags(s2, &flags));
	CHECK_EQ_INT(flags, CU_STREAM_NON_BLOCKING);
	CU_CHECK(cuStreamGetPriority(s3, &priority));
	CHECK_EQ_INT(priority, greatest);
	CU_CHECK(cuStreamGetCtx(s1, &stream_ctx));
	CHECK(stream_ctx == ctx);
	CU_CHECK(cuEventCreate(&start, CU_EVENT_DEFAULT));
	CU_CHECK(cuEventCreate(&a_done, CU_EVENT_DEFAULT));
	CU_CHECK(cuEventCreate(&b_done, CU_EVENT_DISABLE_TIMING));
	CU_CHECK(cuEventCreate(&end, CU_EVENT_DEFAULT));
	CU_CHECK(cuEventCreate(&untimed, CU_EVENT_DISABLE_TIMING));

	/* A (s1): 5 + ROUNDS. B (s2, after A): a copy of A. C (s3, after B): 2A + B. */
	CU_CHECK(cuEventRecord(start, s1));
	CU_CHECK(cuMemsetD32Async(da, 5, N, s1));
	void *busy_params[] = {&da, &rounds, &n};
	CU_CHECK(cuLaunchKernel(busy_add, grid, 1, 1, BLOCK, 1, 1, 0, s1, busy_params, NULL));
	CU_CHECK(cuEventRecord(a_done, s1));
	CU_CHECK(cuStreamWaitEvent(s2, a_done, 0));
	CU_CHECK(cuMemcpyDtoDAsync(db, da, N * sizeof(int), s2));
	CU_CHECK(cuEventRecord(b_done, s2));
	CU_CHECK(cuStreamWaitEvent(s3, b_done, 0));
	void *combine_params[] = {&da, &db, &dout, &n};
	CU_CHECK(cuLaunchKernel(combine, grid, 1, 1, BLOCK, 1, 1, 0, s3, combine_params, NULL));
	CU_CHECK(cuEventRecord(end, s3));
	CU_CHECK(cuEventSynchronize(end));
	CU_CHECK(cuEventQuery(end));
	CU_CHECK(cuEventElapsedTime(&ms, start, end));
	CHECK(ms >= 0.0f);
	CU_EXPECT(cuEventElapsedTime(&ms, start, b_done), CUDA_ERROR_INVALID_HANDLE);
	CU_CHECK(cuStreamSynchronize(s1));
	CU_CHECK(cuStreamSynchronize(s2));
	CU_CHECK(cuStreamQuery(s1));
	CU_CHECK(cuStreamQuery(s2));
	CU_CHECK(cuStreamQuery(s3));
	expect_all(dout, 3 * (5 + ROUNDS), "event chain");
	expect_all(db, 5 + ROUNDS, "copy after the event");

	/* The legacy NULL stream waits for work queued earlier on a blocking stream. */
	CU_CHECK(cuLaunchKernel(busy_add, grid, 1, 1, BLOCK, 1, 1, 0, s1, busy_params, NULL));
	expect_all(da, 5 + 2 * ROUNDS, "legacy stream after a blocking stream");

	/* The per-thread default stream, as cudart built with --default-stream per-thread gets it. */
	launch_fn launch_ptsz = NULL;
	CUdriverProcAddressQueryResult found;
	CU_CHECK(cuGetProcAddress("cuLaunchKernel", (void **)&launch_ptsz, 7000,
				  CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &found));
	CHECK(launch_ptsz != NULL);
	CHECK_EQ_INT(found, CU_GET_PROC_ADDRESS_SUCCESS);
	CU_CHECK(launch_ptsz(busy_add, grid, 1, 1, BLOCK, 1, 1, 0, NULL, busy_params, NULL));
	CU_CHECK(cuStreamSynchronize(CU_STREAM_PER_THREAD));
	expect_all(da, 5 + 3 * ROUNDS, "per-thread default stream");

	/* A host function runs in stream order. */
	CU_CHECK(cuLaunchKernel(busy_add, grid, 1, 1, BLOCK, 1, 1, 0, s2, busy_params, NULL));
	CU_CHECK(cuLaunchHostFunc(s2, mark_host_func, &host_func_ran));
	CU_CHECK(cuEventRecord(untimed, s2));
	CU_CHECK(cuStreamSynchronize(s2));
	CHECK_EQ_INT(atomic_load(&host_func_ran), 1);
	CU_CHECK(cuEventQuery(untimed));
	expect_all(da, 5 + 4 * ROUNDS, "non-blocking stream");

	CU_CHECK(cuEventDestroy(start));
	CU_CHECK(cuEventDestroy(a_done));
	CU_CHECK(cuEventDestroy(b_done));
	CU_CHECK(cuEventDestroy(end));
	CU_CHECK(cuEventDestroy(untimed));
	CU_CHECK(cuStreamDestroy(s1));
	CU_CHECK(cuStreamDestroy(s2));
	CU_CHECK(cuStreamDestroy(s3));
	CU_CHECK(cuMemFree(da));
	CU_CHECK(cuMemFree(db));
	CU_CHECK(cuMemFree(dout));
	CU_CHECK(cuModuleUnload(mod));
	CU_CHECK(cuDevicePrimaryCtxRelease(0));
	cu_test_pass("streams_events");
}
