/* managed: managed memory (cuMemAllocManaged) read and written by the CPU directly and by kernels, in
 * turns, as UnifiedMemoryStreams and conjugateGradientUM use it: CPU fill, kernel update, CPU check,
 * LOOPS times, with advice, prefetches to the device and back (one by one and in batches), a discard, a
 * stream attach, copies and a memset on it; its pointer attributes and range attributes. Then a large
 * allocation (32 MiB, which the layer moves into the GPU's memory when prefetched there): kernels on it after
 * a prefetch, the CPU's first touch a read or a write, a host function reading it, a copy from it and a
 * memset of it while it is on the GPU. Every value is checked against a CPU model; prints
 * a checksum and PASS. */
#include <string.h>

#include "cuda_test.h"

extern const unsigned char graph_basic_fatbin[];

#define N     8192
#define BLOCK 128
#define LOOPS 25
#define BIG   (8u << 20) /* 32 MiB of words: large enough for the layer to move */

struct peek {
	const unsigned *x;
	unsigned at, seen;
};

static void host_peek(void *arg)
{
	struct peek *p = arg;

	p->seen = p->x[p->at];
}

static CUmemLocation on_device(CUdevice dev)
{
	return (CUmemLocation){.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev};
}

int main(void)
{
	static unsigned model[N];
	CUcontext ctx;
	CUdevice dev;
	CUmodule mod;
	CUfunction affine;
	CUstream s;
	CUdeviceptr m, host_attached, d;
	unsigned *x;
	unsigned mul = 5, add = 3, is_managed = 0, type = 0;
	int n = N, v = 0;
	unsigned long long sum = 0xcbf29ce484222325ull;
	void *params[] = {&m, &mul, &add, &n};

	cu_test_init("managed");
	ctx = cu_test_primary_context(&dev);
	(void)ctx;
	CU_CHECK(cuModuleLoadData(&mod, graph_basic_fatbin));
	CU_CHECK(cuModuleGetFunction(&affine, mod, "graph_affine"));
	CU_CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	CU_EXPECT(cuMemAllocManaged(&m, N * sizeof(unsigned), 4), CUDA_ERROR_INVALID_VALUE);
	CU_CHECK(cuMemAllocManaged(&m, N * sizeof(unsigned), CU_MEM_ATTACH_GLOBAL));
	CU_CHECK(cuMemAllocManaged(&host_attached, 4096, CU_MEM_ATTACH_HOST));
	CU_CHECK(cuMemAlloc(&d, N * sizeof(unsigned)));
	x = (unsigned *)(uintptr_t)m;

	CU_CHECK(cuPointerGetAttribute(&is_managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, m));
	CU_CHECK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, m + 64));
	CHECK(is_managed == 1 && type == CU_MEMORYTYPE_DEVICE);
	int ordinal = -1;
	CU_CHECK(cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, m));
	CHECK(ordinal == (int)dev);
	CU_CHECK(cuMemAdvise(m, N * sizeof(unsigned), CU_MEM_ADVISE_SET_READ_MOSTLY, on_device(dev)));
	CU_CHECK(cuMemAdvise(m, N * sizeof(unsigned), CU_MEM_ADVISE_SET_PREFERRED_LOCATION, on_device(dev)));
	CU_CHECK(cuMemRangeGetAttribute(&v, sizeof(v), CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, m,
					N * sizeof(unsigned)));
	CHECK(v == 1);
	CU_CHECK(cuMemRangeGetAttribute(&v, sizeof(v), CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION, m, 4096));
	CHECK(v == (int)dev);
	CU_CHECK(cuMemAdvise(m, N * sizeof(unsigned), CU_MEM_ADVISE_UNSET_READ_MOSTLY, on_device(dev)));
	CU_EXPECT(cuMemRangeGetAttribute(&v, sizeof(v), CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, d, 4),
		  CUDA_ERROR_INVALID_VALUE);

	for (unsigned i = 0; i < N; i++)
		model[i] = x[i] = i * 2654435761u;
	for (int l = 0; l < LOOPS; l++) {
		/* The CPU's writes reach the kernel; the kernel's reach the CPU after a synchronisation. */
		if (l % 2)
			CU_CHECK(cuMemPrefetchAsync(m, N * sizeof(unsigned), on_device(dev), 0, s));
		CU_CHECK(cuLaunchKernel(affine, N / BLOCK, 1, 1, BLOCK, 1, 1, 0, s, params, NULL));
		if (l % 2)
			CU_CHECK(cuMemPrefetchAsync(m, N * sizeof(unsigned),
						    (CUmemLocation){.type = CU_MEM_LOCATION_TYPE_HOST}, 0,
						    s));
		CU_CHECK(cuStreamSynchronize(s));
		for (unsigned i = 0; i < N; i++) {
			model[i] = model[i] * mul + add + i;
			if (x[i] != model[i]) {
				fprintf(stderr, "managed: loop %d: x[%u] = %#x, want %#x\n", l, i, x[i],
					model[i]);
				return 1;
			}
			x[i] ^= (unsigned)l; /* the CPU writes between kernels */
			model[i] ^= (unsigned)l;
		}
	}
	CU_CHECK(cuMemRangeGetAttribute(&v, sizeof(v), CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION, m, 4));
	CHECK(v == CU_DEVICE_CPU);
	CU_CHECK(cuStreamAttachMemAsync(s, host_attached, 0, CU_MEM_ATTACH_SINGLE));
	CU_CHECK(cuStreamSynchronize(s));

	/* Batches: m to the device and host_attached to the CPU in one; shapes the driver refuses; a
	 * discard (only of host_attached, whose contents are written again below). */
	{
		CUdeviceptr dptrs[2] = {m, host_attached};
		size_t sizes[2] = {N * sizeof(unsigned), 4096}, idxs[2] = {0, 1}, bad_idxs[2] = {1, 1};
		CUmemLocation locs[2] = {on_device(dev), {.type = CU_MEM_LOCATION_TYPE_HOST}};

		CU_CHECK(cuMemPrefetchBatchAsync(dptrs, sizes, 2, locs, idxs, 2, 0, s));
		CU_CHECK(cuMemRangeGetAttribute(&v, sizeof(v), CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION,
						m, 4));
		CHECK(v == (int)dev);
		CU_CHECK(cuMemRangeGetAttribute(&v, sizeof(v), CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION,
						host_attached, 4));
		CHECK(v == CU_DEVICE_CPU);
		CU_EXPECT(cuMemPrefetchBatchAsync(dptrs, sizes, 2, locs, bad_idxs, 2, 0, s),
			  CUDA_ERROR_INVALID_VALUE);
		CU_EXPECT(cuMemPrefetchBatchAsync(dptrs, sizes, 2, locs, idxs, 2, 1, s),
			  CUDA_ERROR_INVALID_VALUE);
		CU_EXPECT(cuMemPrefetchBatchAsync(dptrs, sizes, 0, locs, idxs, 1, 0, s),
			  CUDA_ERROR_INVALID_VALUE);
		dptrs[0] = d; /* device memory, not managed */
		CU_EXPECT(cuMemDiscardBatchAsync(dptrs, sizes, 2, 0, s), CUDA_ERROR_INVALID_VALUE);
		dptrs[0] = host_attached;
		CU_CHECK(cuMemDiscardBatchAsync(dptrs, sizes + 1, 1, 0, s));
		CU_CHECK(cuMemDiscardAndPrefetchBatchAsync(dptrs, sizes + 1, 1, locs, idxs, 1, 0, s));
		CU_CHECK(cuMemRangeGetAttribute(&v, sizeof(v), CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION,
						host_attached, 4));
		CHECK(v == (int)dev);
		CU_CHECK(cuStreamSynchronize(s));
	}

	/* Copies and a memset: managed to device and back, memset of half. */
	CU_CHECK(cuMemcpy(d, m, N * sizeof(unsigned)));
	CU_CHECK(cuMemsetD32(m, 0x01020304u, N / 2));
	CU_CHECK(cuMemcpyDtoH((unsigned *)(uintptr_t)host_attached, d, 4096));
	for (unsigned i = 0; i < N; i++)
		CHECK(x[i] == (i < N / 2 ? 0x01020304u : model[i]));
	for (unsigned i = 0; i < 1024; i++)
		CHECK(((unsigned *)(uintptr_t)host_attached)[i] == model[i]);
	for (unsigned i = 0; i < N; i++)
		sum = (sum ^ x[i]) * 0x100000001b3ull;

	static unsigned bmodel[BIG], page[1024];
	CUdeviceptr big;
	int bn = BIG;
	void *bparams[] = {&big, &mul, &add, &bn};
	struct peek peek = {0};
	CU_CHECK(cuMemAllocManaged(&big, BIG * sizeof(unsigned), CU_MEM_ATTACH_GLOBAL));
	unsigned *y = (unsigned *)(uintptr_t)big;
	for (unsigned i = 0; i < BIG; i++)
		bmodel[i] = y[i] = i ^ 0x5a5a5a5au;
	peek.x = y;
	for (unsigned l = 0; l < 6; l++) {
		CU_CHECK(cuMemPrefetchAsync(big, BIG * sizeof(unsigned), on_device(dev), 0, s));
		CU_CHECK(cuLaunchKernel(affine, BIG / BLOCK, 1, 1, BLOCK, 1, 1, 0, s, bparams, NULL));
		for (unsigned i = 0; i < BIG; i++)
			bmodel[i] = bmodel[i] * mul + add + i;
		if (l == 5) { /* last: a process with host functions keeps managed memory off the GPU */
			peek.at = 4099 * l;
			CU_CHECK(cuLaunchHostFunc(s, host_peek, &peek));
		} else if (l == 2) {
			CU_CHECK(cuMemcpyDtoHAsync(page, big + 8192, sizeof(page), s));
			CU_CHECK(cuStreamSynchronize(s));
			CHECK(!memcmp(page, bmodel + 2048, sizeof(page)));
		} else if (l == 3) {
			CU_CHECK(cuMemsetD32Async(big, l, 16, s));
			for (unsigned i = 0; i < 16; i++)
				bmodel[i] = l;
		}
		CU_CHECK(cuStreamSynchronize(s));
		if (l == 5)
			CHECK(peek.seen == bmodel[peek.at]);
		if (l % 2) { /* the first touch a write */
			y[BIG - 1 - l] = l;
			bmodel[BIG - 1 - l] = l;
		}
		for (unsigned i = 0; i < BIG; i++) {
			if (y[i] != bmodel[i]) {
				fprintf(stderr, "managed: big loop %u: y[%u] = %#x, want %#x\n", l, i, y[i],
					bmodel[i]);
				return 1;
			}
		}
	}
	for (unsigned i = 0; i < BIG; i++)
		sum = (sum ^ y[i]) * 0x100000001b3ull;
	CU_CHECK(cuMemFree(big));
	CU_CHECK(cuMemFree(m));
	CU_CHECK(cuMemFree(host_attached));
	CU_CHECK(cuMemFree(d));
	CU_CHECK(cuStreamDestroy(s));
	printf("managed: checksum %016llx\n", sum);
	cu_test_pass("managed");
}
