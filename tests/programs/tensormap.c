/* tensormap: tensor maps (TMA descriptors) encoded by the driver: tiled (2D and 5D), im2col (4D), an
 * address replaced, and arguments the driver refuses (rank 0, a misaligned address, an inner box wider
 * than the swizzle). The maps name a fixed (unallocated, aligned)
 * address, so their bytes are the same in every run: it prints a digest of them, which the layer must
 * reproduce, and PASS. */
#include <string.h>

#include "cuda_test.h"

#define ADDR ((void *)(uintptr_t)0x7f1234560000ull)

static unsigned long long digest = 0xcbf29ce484222325ull;

static void fold(const CUtensorMap *m)
{
	const unsigned char *b = (const unsigned char *)m;

	for (size_t i = 0; i < sizeof(*m); i++)
		digest = (digest ^ b[i]) * 0x100000001b3ull;
}

int main(void)
{
	CUtensorMap m;
	cuuint64_t dims2[2] = {1024, 512}, strides2[1] = {1024 * 4};
	cuuint32_t box2[2] = {32, 32}, es2[2] = {1, 1}; /* a 128-byte inner box: the 128B swizzle's span */
	cuuint64_t dims5[5] = {8, 16, 16, 4, 2},
		   strides5[4] = {16 * 2, 16 * 16 * 2, 16 * 16 * 16 * 2, 4 * 16 * 16 * 16 * 2};
	cuuint32_t box5[5] = {8, 8, 8, 2, 1}, es5[5] = {1, 1, 1, 1, 1};
	cuuint64_t dims4[4] = {64, 32, 32, 8}, strides4[3] = {64 * 2, 64 * 32 * 2, 64 * 32 * 32 * 2};
	cuuint32_t es4[4] = {1, 1, 1, 1};
	int lower[2] = {-1, -1}, upper[2] = {1, 1};

	cu_test_init("tensormap");
	cu_test_primary_context(NULL);
	CU_CHECK(cuTensorMapEncodeTiled(&m, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, ADDR, dims2, strides2, box2,
					es2, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
					CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
					CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
	fold(&m);
	CU_CHECK(cuTensorMapReplaceAddress(&m, (char *)ADDR + 4096));
	fold(&m);
	CU_CHECK(cuTensorMapEncodeTiled(&m, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 5, ADDR, dims5, strides5, box5,
					es5, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
					CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
	fold(&m);
	CU_CHECK(cuTensorMapEncodeIm2col(&m, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 4, ADDR, dims4, strides4, lower,
					 upper, 64, 32, es4, CU_TENSOR_MAP_INTERLEAVE_NONE,
					 CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_NONE,
					 CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
	fold(&m);
	/* Refused: rank 0, a misaligned address. */
	CU_EXPECT(cuTensorMapEncodeTiled(&m, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 0, ADDR, dims2, strides2, box2,
					 es2, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
					 CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
		  CUDA_ERROR_INVALID_VALUE);
	CU_EXPECT(cuTensorMapEncodeTiled(&m, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, (char *)ADDR + 4, dims2,
					 strides2, box2, es2, CU_TENSOR_MAP_INTERLEAVE_NONE,
					 CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_NONE,
					 CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
		  CUDA_ERROR_INVALID_VALUE);
	/* An inner box of 256 bytes, beyond the 128B swizzle's span (measured: the driver refuses it). */
	cuuint32_t wide[2] = {64, 32};
	CU_EXPECT(cuTensorMapEncodeTiled(&m, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, ADDR, dims2, strides2, wide,
					 es2, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
					 CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
		  CUDA_ERROR_INVALID_VALUE);
	printf("tensormap: digest %016llx\n", digest);
	cu_test_pass("tensormap");
}
