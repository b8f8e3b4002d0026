/* occupancy: the occupancy calculator, as matrixMulDrv and libraries that size their launches use it:
 * cuOccupancyMaxActiveBlocksPerMultiprocessor[WithFlags] over block sizes and shared memory, and
 * cuOccupancyMaxPotentialBlockSize[WithFlags] without and with a callback for the dynamic shared memory
 * of a block size (it runs in this process) and with a block size limit; a kernel launched with the
 * size found computes the right result. Prints every answer (natively and under the layer alike). */
#include "cuda_test.h"

extern const unsigned char graph_basic_fatbin[];

#define N 8192

static int callback_calls;

static size_t smem_for(int block_size)
{
	callback_calls++;
	return (size_t)block_size * 24;
}

int main(void)
{
	static unsigned host[N];
	CUmodule mod;
	CUfunction affine;
	CUdeviceptr x;
	int blocks = -1, grid = -1, block = -1, n = N;
	unsigned mul = 1, add = 0;

	cu_test_init("occupancy");
	cu_test_primary_context(NULL);
	CU_CHECK(cuModuleLoadData(&mod, graph_basic_fatbin));
	CU_CHECK(cuModuleGetFunction(&affine, mod, "graph_affine"));
	for (int size = 32; size <= 1024; size *= 2)
		for (size_t smem = 0; smem <= 16384; smem += 8192) {
			CU_CHECK(cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, affine, size, smem));
			printf("occupancy: block %d smem %zu: %d blocks per multiprocessor\n", size, smem,
			       blocks);
		}
	CU_CHECK(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&blocks, affine, 256, 0,
								      CU_OCCUPANCY_DISABLE_CACHING_OVERRIDE));
	printf("occupancy: block 256, caching override disabled: %d\n", blocks);
	CU_CHECK(cuOccupancyMaxPotentialBlockSize(&grid, &block, affine, NULL, 0, 0));
	printf("occupancy: potential block size %d, min grid %d\n", block, grid);
	CU_CHECK(cuOccupancyMaxPotentialBlockSize(&grid, &block, affine, NULL, 8192, 256));
	printf("occupancy: limited to 256, 8 KiB: block size %d, min grid %d\n", block, grid);
	CU_CHECK(cuOccupancyMaxPotentialBlockSizeWithFlags(&grid, &block, affine, smem_for, 0, 0,
							   CU_OCCUPANCY_DEFAULT));
	printf("occupancy: with a shared memory callback: block size %d, min grid %d (callback called: %s)\n",
	       block, grid, callback_calls ? "yes" : "no");
	CHECK(block > 0 && grid > 0);

	/* The size found works. */
	CU_CHECK(cuMemAlloc(&x, sizeof(host)));
	CU_CHECK(cuMemsetD32(x, 7, N));
	void *params[] = {&x, &mul, &add, &n};
	CU_CHECK(cuLaunchKernel(affine, (N + block - 1) / block, 1, 1, block, 1, 1, 0, NULL, params, NULL));
	CU_CHECK(cuMemcpyDtoH(host, x, sizeof(host)));
	for (unsigned i = 0; i < N; i++)
		CHECK(host[i] == 7u + i);
	CU_CHECK(cuMemFree(x));
	cu_test_pass("occupancy");
}
