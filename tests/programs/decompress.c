/* decompress: cuMemBatchDecompressAsync (CUDA 12.6+). A batch of two entries (cuMemAlloc memory)
 * is submitted; where the device has no decompression engine (the simulated device, an H100) the
 * driver refuses it, and what it answers (result, error index) is printed, as are the refusals (a
 * flag, a NULL array, no entry), so natively and under the layer must print the same
 * (sim_forward_decompress; tests/gpu/layer.sh). Where it succeeds the stream is synchronised and the
 * bytes written are printed. */
#include <stdint.h>

#include "cuda_test.h"

static void show(const char *what, CUresult res, size_t index)
{
	printf("decompress: %s: %s, error index %s\n", what, cu_error_name(res),
	       index == SIZE_MAX ? "none"
	       : index == 12345	 ? "unset"
				 : "an entry");
}

int main(void)
{
	CUdeviceptr src, dst, act;
	CUstream st;
	CUmemDecompressParams p[2] = {0};
	size_t index = 12345;
	unsigned got[2] = {0};
	CUresult res;

	cu_test_init("decompress");
	cu_test_primary_context(NULL);
	CU_CHECK(cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));
	CU_CHECK(cuMemAlloc(&src, 1 << 16));
	CU_CHECK(cuMemAlloc(&dst, 1 << 16));
	CU_CHECK(cuMemAlloc(&act, 2 * sizeof(unsigned)));
	CU_CHECK(cuMemsetD8(src, 0, 1 << 16));
	for (int i = 0; i < 2; i++)
		p[i] =
		    (CUmemDecompressParams){.srcNumBytes = 4096,
					    .dstNumBytes = 4096,
					    .dstActBytes = (cuuint32_t *)(uintptr_t)(act + 4 * (unsigned)i),
					    .src = (const void *)(uintptr_t)(src + 4096 * (unsigned)i),
					    .dst = (void *)(uintptr_t)(dst + 4096 * (unsigned)i),
					    .algo = CU_MEM_DECOMPRESS_ALGORITHM_DEFLATE};
	res = cuMemBatchDecompressAsync(p, 2, 0, &index, st);
	show("a batch of two", res, index);
	if (res == CUDA_SUCCESS) {
		res = cuStreamSynchronize(st);
		printf("decompress: synchronised: %s\n", cu_error_name(res));
		CU_CHECK(cuMemcpyDtoH(got, act, sizeof(got)));
		printf("decompress: bytes written %u %u\n", got[0], got[1]);
	}
	index = 12345;
	res = cuMemBatchDecompressAsync(p, 2, 1, &index, st);
	CHECK(res != CUDA_SUCCESS);
	show("flag 1", res, index);
	index = 12345;
	res = cuMemBatchDecompressAsync(NULL, 2, 0, &index, st);
	CHECK(res != CUDA_SUCCESS);
	show("NULL array", res, index);
	index = 12345;
	res = cuMemBatchDecompressAsync(p, 0, 0, &index, st);
	show("no entry", res, index);
	res = cuMemBatchDecompressAsync(p, 2, 0, NULL, st);
	show("no index", res, SIZE_MAX);
	CU_CHECK(cuStreamSynchronize(st));
	CU_CHECK(cuMemFree(src));
	CU_CHECK(cuMemFree(dst));
	CU_CHECK(cuMemFree(act));
	CU_CHECK(cuStreamDestroy(st));
	cu_test_pass("decompress");
}
