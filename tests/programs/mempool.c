/* mempool: stream-ordered allocation and memory pools, as streamOrderedAllocation and CuPy's
 * MemoryAsyncPool use them: the default and current pools, attributes (release threshold, reuse
 * flags, used memory and its high-water mark), cuMemAllocAsync / cuMemAllocFromPoolAsync / cuMemFreeAsync
 * around kernels on a stream, a pool of one's own made current, access, trim, destroy, and the
 * refusals the driver answers. Every result is checked against a CPU model; prints a checksum and
 * PASS. */
#include <string.h>

#include "cuda_test.h"

extern const unsigned char graph_basic_fatbin[];

#define N     4096
#define BLOCK 128
#define ITERS 30

static void expect_u64(CUmemoryPool pool, CUmemPool_attribute attr, cuuint64_t want, const char *what)
{
	cuuint64_t v = ~0ull;

	CU_CHECK(cuMemPoolGetAttribute(pool, attr, &v));
	if (v != want) {
		fprintf(stderr, "mempool: %s is %llu, want %llu\n", what, (unsigned long long)v,
			(unsigned long long)want);
		exit(1);
	}
}

int main(void)
{
	static unsigned host[N], model[N];
	CUdevice dev;
	CUmodule mod;
	CUfunction affine;
	CUstream s;
	CUmemoryPool def, cur, mine;
	CUdeviceptr a, b;
	unsigned mul = 3, add = 5;
	int n = N, flag = -1;
	cuuint64_t threshold = 64ull << 20;
	unsigned long long sum = 0xcbf29ce484222325ull;
	CUmemAccess_flags access;

	cu_test_init("mempool");
	cu_test_primary_context(&dev);
	CU_CHECK(cuModuleLoadData(&mod, graph_basic_fatbin));
	CU_CHECK(cuModuleGetFunction(&affine, mod, "graph_affine"));
	CU_CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));

	CU_CHECK(cuDeviceGetDefaultMemPool(&def, dev));
	CU_CHECK(cuDeviceGetMemPool(&cur, dev));
	CHECK(def == cur);
	CU_CHECK(cuMemPoolSetAttribute(def, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold));
	expect_u64(def, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, threshold, "the release threshold");
	CU_CHECK(cuMemPoolGetAttribute(def, CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC, &flag));
	CHECK(flag == 1);
	CU_EXPECT(cuMemPoolDestroy(def), CUDA_ERROR_INVALID_VALUE);

	/* From the current (default) pool: allocate, compute, copy back, free, on the stream. */
	for (unsigned i = 0; i < N; i++)
		model[i] = host[i] = i * 2246822519u;
	for (int it = 0; it < ITERS; it++) {
		void *params[] = {&a, &mul, &add, &n};

		CU_CHECK(cuMemAllocAsync(&a, N * sizeof(unsigned), s));
		CU_CHECK(cuMemcpyHtoDAsync(a, host, sizeof(host), s));
		CU_CHECK(cuLaunchKernel(affine, N / BLOCK, 1, 1, BLOCK, 1, 1, 0, s, params, NULL));
		CU_CHECK(cuMemcpyDtoHAsync(host, a, sizeof(host), s));
		CU_CHECK(cuMemFreeAsync(a, s));
		CU_CHECK(cuStreamSynchronize(s));
		for (unsigned i = 0; i < N; i++) {
			model[i] = model[i] * mul + add + i;
			CHECK(host[i] == model[i]);
		}
	}
	expect_u64(def, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, 0, "memory in use after the frees");

	/* A pool of one's own, made the device's current one. */
	CUmemPoolProps props = {.allocType = CU_MEM_ALLOCATION_TYPE_PINNED,
				.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev}};
	CU_CHECK(cuMemPoolCreate(&mine, &props));
	CU_CHECK(cuDeviceSetMemPool(dev, mine));
	CU_CHECK(cuDeviceGetMemPool(&cur, dev));
	CHECK(cur == mine);
	CU_CHECK(cuMemAllocAsync(&a, 1 << 20, s));
	CU_CHECK(cuMemAllocFromPoolAsync(&b, 3 << 20, mine, s));
	expect_u64(mine, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, 4 << 20, "the pool's memory in use");
	CU_CHECK(cuMemsetD32Async(b, 0x11223344u, (3 << 20) / 4, s));
	CU_CHECK(cuMemcpyDtoDAsync(a, b, 1 << 20, s));
	CU_CHECK(cuMemcpyDtoHAsync(host, a, sizeof(host), s));
	CU_CHECK(cuMemFreeAsync(b, s));
	CU_CHECK(cuStreamSynchronize(s));
	for (unsigned i = 0; i < N; i++)
		CHECK(host[i] == 0x11223344u);
	expect_u64(mine, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, 1 << 20,
		   "the pool's memory in use after b's free");
	expect_u64(mine, CU_MEMPOOL_ATTR_USED_MEM_HIGH, 4 << 20, "the pool's high-water mark");
	/* A reset starts the mark again from what is in use (a). */
	cuuint64_t zero = 0;
	CU_CHECK(cuMemPoolSetAttribute(mine, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &zero));
	expect_u64(mine, CU_MEMPOOL_ATTR_USED_MEM_HIGH, 1 << 20, "the reset high-water mark");
	/* A stream-ordered allocation freed the plain way. The driver's books keep counting it as in use
	 * (H100, driver 580: still 1 MiB after), so they are not read after it. */
	CU_CHECK(cuMemFree(a));
	CUmemLocation here = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev};
	CU_CHECK(cuMemPoolGetAccess(&access, mine, &here));
	CHECK(access == CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
	CU_CHECK(cuMemPoolTrimTo(mine, 0));
	CU_CHECK(cuDeviceSetMemPool(dev, def));
	CU_CHECK(cuMemPoolDestroy(mine));
	CU_EXPECT(cuMemPoolTrimTo(mine, 0), CUDA_ERROR_INVALID_VALUE);
	props.location.id = 99;
	CU_EXPECT(cuMemPoolCreate(&mine, &props), CUDA_ERROR_INVALID_VALUE);

	for (unsigned i = 0; i < N; i++)
		sum = (sum ^ model[i]) * 0x100000001b3ull;
	CU_CHECK(cuStreamDestroy(s));
	printf("mempool: checksum %016llx\n", sum);
	cu_test_pass("mempool");
}
