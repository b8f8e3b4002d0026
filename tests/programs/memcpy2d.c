/* memcpy2d: 2D copies (cuMemcpy2D, cuMemcpy2DUnaligned, cuMemcpy2DAsync) between pitched device memory
 * (cuMemAllocPitch), pageable and page-locked host memory, with x/y offsets; then 3D copies
 * (cuMemcpy3D, cuMemcpy3DAsync) of a box with x/y/z offsets between pageable memory and pitched device
 * slices; then a batch (cuMemcpyBatchAsync: host to device, device to device, device to host)
 * and peer 3D copies (cuMemcpy3DPeer, cuMemcpy3DPeerAsync) between device buffers and to the host,
 * and a batch of 3D copies (cuMemcpy3DBatchAsync) between pageable, device and array memory;
 * each result compared with a CPU model, the padding of every destination checked untouched. Prints a
 * checksum and PASS. */
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
	CUcontext ctx = cu_test_primary_context(NULL);
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

	/* 3D: a box of D3 slices of H rows of W bytes, at (XOFF, YOFF, ZOFF) in pageable host volumes of
	 * HPITCH-byte rows and SH-row slices, through device slices of DH rows. */
	enum { D3 = 5, ZOFF = 2, SH = H + YOFF + 2, DH = H + 1 };
	size_t vol = (size_t)(D3 + ZOFF) * SH * HPITCH, p3;
	unsigned char *v_in = malloc(vol), *v_out = malloc(vol);
	CUdeviceptr d3;

	CHECK(v_in && v_out);
	for (size_t i = 0; i < vol; i++)
		v_in[i] = (unsigned char)(i * 2654435761u >> 13);
	memset(v_out, PADB, vol);
	CU_CHECK(cuMemAllocPitch(&d3, &p3, W, DH * D3, 4));
	CUDA_MEMCPY3D c3 = {.srcXInBytes = XOFF,
			    .srcY = YOFF,
			    .srcZ = ZOFF,
			    .srcMemoryType = CU_MEMORYTYPE_HOST,
			    .srcHost = v_in,
			    .srcPitch = HPITCH,
			    .srcHeight = SH,
			    .dstMemoryType = CU_MEMORYTYPE_DEVICE,
			    .dstDevice = d3,
			    .dstPitch = p3,
			    .dstHeight = DH,
			    .WidthInBytes = W,
			    .Height = H,
			    .Depth = D3};
	CU_CHECK(cuMemcpy3D(&c3));
	c3 = (CUDA_MEMCPY3D){.srcMemoryType = CU_MEMORYTYPE_DEVICE,
			     .srcDevice = d3,
			     .srcPitch = p3,
			     .srcHeight = DH,
			     .dstXInBytes = XOFF,
			     .dstY = YOFF,
			     .dstZ = ZOFF,
			     .dstMemoryType = CU_MEMORYTYPE_HOST,
			     .dstHost = v_out,
			     .dstPitch = HPITCH,
			     .dstHeight = SH,
			     .WidthInBytes = W,
			     .Height = H,
			     .Depth = D3};
	CU_CHECK(cuMemcpy3DAsync(&c3, s));
	CU_CHECK(cuStreamSynchronize(s));
	for (size_t z = 0; z < D3 + ZOFF; z++)
		for (size_t r = 0; r < SH; r++)
			for (size_t x = 0; x < HPITCH; x++) {
				size_t i = (z * SH + r) * HPITCH + x;
				bool in = z >= ZOFF && r >= YOFF && r < YOFF + H && x >= XOFF && x < XOFF + W;

				if (v_out[i] != (in ? v_in[i] : PADB)) {
					fprintf(stderr, "memcpy2d: 3D byte (%zu, %zu, %zu) is %#x\n", z, r, x,
						v_out[i]);
					return 1;
				}
				checksum = (checksum ^ v_out[i]) * 0x100000001b3ull;
			}
	CU_CHECK(cuMemFree(d3));
	free(v_in);
	free(v_out);

	/* A batch of three copies on the stream, in order. */
	{
		static unsigned char b_in[4096], b_out[4096];
		CUdeviceptr bd1, bd2, dsts[3], srcs[3];
		size_t sizes[3] = {sizeof(b_in), sizeof(b_in), sizeof(b_in)}, idx = 0;
		CUmemcpyAttributes attr = {.srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM};

		for (size_t i = 0; i < sizeof(b_in); i++)
			b_in[i] = (unsigned char)(i * 37 + 11);
		CU_CHECK(cuMemAlloc(&bd1, sizeof(b_in)));
		CU_CHECK(cuMemAlloc(&bd2, sizeof(b_in)));
		dsts[0] = bd1, srcs[0] = (uintptr_t)b_in;
		dsts[1] = bd2, srcs[1] = bd1;
		dsts[2] = (uintptr_t)b_out, srcs[2] = bd2;
		CU_CHECK(cuMemcpyBatchAsync(dsts, srcs, sizes, 3, &attr, &idx, 1, s));
		CU_CHECK(cuStreamSynchronize(s));
		CHECK(!memcmp(b_in, b_out, sizeof(b_in)));
		CU_EXPECT(cuMemcpyBatchAsync(dsts, srcs, sizes, 3, &attr, &idx, 0, s),
			  CUDA_ERROR_INVALID_VALUE);

		/* Peer 3D copies (one context here): a 16x8 box of bd1 into bd2 at an offset (64-byte rows),
		 * then bd2 back to the host, on the stream. */
		CUDA_MEMCPY3D_PEER pc = {.srcMemoryType = CU_MEMORYTYPE_DEVICE,
					 .srcDevice = bd1,
					 .srcContext = ctx,
					 .srcPitch = 64,
					 .srcHeight = 64,
					 .dstXInBytes = 8,
					 .dstY = 2,
					 .dstMemoryType = CU_MEMORYTYPE_DEVICE,
					 .dstDevice = bd2,
					 .dstContext = ctx,
					 .dstPitch = 64,
					 .dstHeight = 64,
					 .WidthInBytes = 16,
					 .Height = 8,
					 .Depth = 1};
		CU_CHECK(cuMemsetD8(bd2, 0xee, sizeof(b_in)));
		CU_CHECK(cuMemcpy3DPeer(&pc));
		pc = (CUDA_MEMCPY3D_PEER){.srcMemoryType = CU_MEMORYTYPE_DEVICE,
					  .srcDevice = bd2,
					  .srcContext = ctx,
					  .dstMemoryType = CU_MEMORYTYPE_HOST,
					  .dstHost = b_out,
					  .dstContext = ctx,
					  .WidthInBytes = sizeof(b_out),
					  .Height = 1,
					  .Depth = 1};
		CU_CHECK(cuMemcpy3DPeerAsync(&pc, s));
		CU_CHECK(cuStreamSynchronize(s));
		for (size_t i = 0; i < sizeof(b_out); i++) {
			size_t r = i / 64, x = i % 64;
			bool in = r >= 2 && r < 10 && x >= 8 && x < 24;

			CHECK(b_out[i] == (in ? b_in[(r - 2) * 64 + x - 8] : 0xee));
			checksum = (checksum ^ b_out[i]) * 0x100000001b3ull;
		}

		/* A batch of 3D copies: a 16x4x2 box of b_in (rows of 64, layers of 8 rows) into bd1
		 * packed, then into a CUDA array of 16x4x2 bytes, and from the array back to the host. */
		CUarray arr;
		CUDA_ARRAY3D_DESCRIPTOR ad = {.Width = 16,
					      .Height = 4,
					      .Depth = 2,
					      .Format = CU_AD_FORMAT_UNSIGNED_INT8,
					      .NumChannels = 1};
		CU_CHECK(cuArray3DCreate(&arr, &ad));
		CUmemcpy3DOperand host_in = {
		    .type = CU_MEMCPY_OPERAND_TYPE_POINTER,
		    .op.ptr = {.ptr = (uintptr_t)b_in, .rowLength = 64, .layerHeight = 8}};
		CUmemcpy3DOperand dev_packed = {.type = CU_MEMCPY_OPERAND_TYPE_POINTER,
						.op.ptr = {.ptr = bd1}};
		CUmemcpy3DOperand in_array = {.type = CU_MEMCPY_OPERAND_TYPE_ARRAY,
					      .op.array = {.array = arr}};
		CUmemcpy3DOperand host_out = {.type = CU_MEMCPY_OPERAND_TYPE_POINTER,
					      .op.ptr = {.ptr = (uintptr_t)b_out}};
		CUextent3D box = {16, 4, 2};
		CUDA_MEMCPY3D_BATCH_OP ops[2] = {{.src = host_in,
						  .dst = dev_packed,
						  .extent = box,
						  .srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM},
						 {.src = dev_packed,
						  .dst = in_array,
						  .extent = box,
						  .srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM}};

		memset(b_out, 0, sizeof(b_out));
		CU_CHECK(cuMemcpy3DBatchAsync(2, ops, 0, s));
		ops[0] = (CUDA_MEMCPY3D_BATCH_OP){.src = in_array,
						  .dst = host_out,
						  .extent = box,
						  .srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM};
		CU_CHECK(cuMemcpy3DBatchAsync(1, ops, 0, s));
		CU_CHECK(cuStreamSynchronize(s));
		for (size_t z = 0; z < 2; z++)
			for (size_t r = 0; r < 4; r++)
				for (size_t x = 0; x < 16; x++) {
					unsigned char got = b_out[(z * 4 + r) * 16 + x];

					CHECK(got == b_in[(z * 8 + r) * 64 + x]);
					checksum = (checksum ^ got) * 0x100000001b3ull;
				}
		ops[0].srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_INVALID;
		CU_EXPECT(cuMemcpy3DBatchAsync(1, ops, 0, s), CUDA_ERROR_INVALID_VALUE);
		ops[0].srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
		ops[0].extent.depth = 0;
		CU_EXPECT(cuMemcpy3DBatchAsync(1, ops, 0, s), CUDA_ERROR_INVALID_VALUE);
		CU_CHECK(cuArrayDestroy(arr));
		CU_CHECK(cuMemFree(bd1));
		CU_CHECK(cuMemFree(bd2));
	}

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
