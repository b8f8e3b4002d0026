/* memcpy2d: 2D copies (cuMemcpy2D, cuMemcpy2DUnaligned, cuMemcpy2DAsync) between pitched device memory
 * (cuMemAllocPitch), pageable and page-locked host memory, with x/y offsets; each result compared with
 * a CPU model, the padding of every destination checked untouched. Prints a checksum and PASS. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_test.h"

extern const unsigned char memset_fatbin[];

#define W      100 /* bytes a row */
#define H      37
#define HPITCH 128 /* the host buffers' pitch */
#define XOFF   5
#define YOFF   3
#define PADB   0xa5

static unsigned long long checksum = 0xcbf29ce484222325ull;

static void check_2d(const char *what, const unsigned char *got, size_t pitch, const unsigned char *want,
		     size_t want_pitch)
{
	for (size_t r = 0; r < H + YOFF; r++)
		for (size_t c = 0; c < pitch; c++) {
			bool in = r >= YOFF && c >= XOFF && c < XOFF + W;
			unsigned char w = in ? want[(r - YOFF) * want_pitch + (c - XOFF)] : PADB;

			if (got[r * pitch + c] != w) {
				fprintf(stderr, "memcpy2d: %s: byte (%zu, %zu) is %#x, want %#x\n", what, r,
					c, got[r * pitch + c], w);
				exit(1);
			}
			checksum = (checksum ^ got[r * pitch + c]) * 0x100000001b3ull;
		}
}

static CUDA_MEMCPY2D to_host(CUdeviceptr d, size_t dpitch, void *h)
{
	return (CUDA_MEMCPY2D){.srcMemoryType = CU_MEMORYTYPE_DEVICE,
			       .srcDevice = d,
			       .srcPitch = dpitch,
			       .dstXInBytes = XOFF,
			       .dstY = YOFF,
			       .dstMemoryType = CU_MEMORYTYPE_HOST,
			       .dstHost = h,
			       .dstPitch = HPITCH,
			       .WidthInBytes = W,
			       .Height = H};
}

int main(void)
{
	unsigned char *src = malloc(H * W), *pageable = malloc((H + YOFF) * HPITCH), *pinned;
	CUdeviceptr d1, d2;
	size_t p1, p2;
	CUstream s;

	if (!src || !pageable)
		return 1;
	cu_test_init("memcpy2d");
	cu_test_primary_context(NULL);
	CU_CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	CU_CHECK(cuMemAllocPitch(&d1, &p1, W, H, 4));
	CU_CHECK(cuMemAllocPitch(&d2, &p2, W + 64, H, 4));
	CU_CHECK(cuMemAllocHost((void **)&pinned, (H + YOFF) * HPITCH));
	for (size_t i = 0; i < H * W; i++)
		src[i] = (unsigned char)(i * 131 + 7);

	/* pageable (contiguous rows) -> device, device -> device (other pitch), device -> pageable */
	CUDA_MEMCPY2D c = {.srcMemoryType = CU_MEMORYTYPE_HOST,
			   .srcHost = src,
			   .srcPitch = W,
			   .dstMemoryType = CU_MEMORYTYPE_DEVICE,
			   .dstDevice = d1,
			   .dstPitch = p1,
			   .WidthInBytes = W,
			   .Height = H};
	CU_CHECK(cuMemcpy2D(&c));
	c = (CUDA_MEMCPY2D){.srcMemoryType = CU_MEMORYTYPE_DEVICE,
			    .srcDevice = d1,
			    .srcPitch = p1,
			    .dstMemoryType = CU_MEMORYTYPE_DEVICE,
			    .dstDevice = d2,
			    .dstXInBytes = 32,
			    .dstPitch = p2,
			    .WidthInBytes = W,
			    .Height = H};
	CU_CHECK(cuMemcpy2DUnaligned(&c));
	memset(pageable, PADB, (H + YOFF) * HPITCH);
	c = to_host(d2 + 32, p2, pageable);
	CU_CHECK(cuMemcpy2D(&c));
	check_2d("device to pageable", pageable, HPITCH, src, W);

	/* async: pageable (pitched, offset) -> device, device -> page-locked, on a stream */
	for (size_t i = 0; i < H * W; i++)
		src[i] = (unsigned char)(i * 17 + 3);
	memset(pageable, PADB, (H + YOFF) * HPITCH);
	for (size_t r = 0; r < H; r++)
		memcpy(pageable + (r + YOFF) * HPITCH + XOFF, src + r * W, W);
	c = (CUDA_MEMCPY2D){.srcXInBytes = XOFF,
			    .srcY = YOFF,
			    .srcMemoryType = CU_MEMORYTYPE_HOST,
			    .srcHost = pageable,
			    .srcPitch = HPITCH,
			    .dstMemoryType = CU_MEMORYTYPE_DEVICE,
			    .dstDevice = d1,
			    .dstPitch = p1,
			    .WidthInBytes = W,
			    .Height = H};
	CU_CHECK(cuMemcpy2DAsync(&c, s));
	memset(pinned, PADB, (H + YOFF) * HPITCH);
	c = to_host(d1, p1, pinned);
	CU_CHECK(cuMemcpy2DAsync(&c, s));
	CU_CHECK(cuStreamSynchronize(s));
	check_2d("device to page-locked, async", pinned, HPITCH, src, W);

	/* a pitch smaller than the width is refused */
	c.dstPitch = W - 1;
	CU_EXPECT(cuMemcpy2D(&c), CUDA_ERROR_INVALID_VALUE);

	CU_CHECK(cuMemFreeHost(pinned));
	CU_CHECK(cuMemFree(d1));
	CU_CHECK(cuMemFree(d2));
	CU_CHECK(cuStreamDestroy(s));
	free(src);
	free(pageable);
	printf("memcpy2d: checksum %016llx\n", checksum);
	cu_test_pass("memcpy2d");
}
