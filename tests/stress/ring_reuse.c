/* ring_reuse: asynchronous copies from pageable memory queued behind a busy stream, more of them than
 * the session's request ring holds (16 MiB). The layer sends their bytes in the ring's records; once
 * the daemon has page-locked the rings (after the first copy to pageable memory) the driver copies
 * from a record by DMA when the stream gets there, so a record reused by later ones before that must
 * not be what is copied. Every destination must hold its own source's bytes. */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../programs/cuda_test.h"

extern const unsigned char stress_kernels_fatbin[];

#define PIECE  (2u << 20)
#define PIECES 16u

int main(void)
{
	CUdevice dev;
	CUcontext ctx;
	CUmodule mod;
	CUfunction f_mix;
	CUstream s;
	CUdeviceptr busy, dst, tmp;
	unsigned n = 4u << 20, salt = 1, nin = 1, probe = 0, bad = 0;
	unsigned *src = malloc((size_t)PIECE * PIECES), *back = malloc((size_t)PIECE * PIECES);

	cu_test_init("ring_reuse");
	CHECK(src && back);
	CU_CHECK(cuDeviceGet(&dev, 0));
	CU_CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
	CU_CHECK(cuCtxSetCurrent(ctx));
	CU_CHECK(cuModuleLoadData(&mod, stress_kernels_fatbin));
	CU_CHECK(cuModuleGetFunction(&f_mix, mod, "st_mix"));
	CU_CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	CU_CHECK(cuMemAlloc(&busy, (size_t)n * 4));
	CU_CHECK(cuMemAlloc(&tmp, 4));
	CU_CHECK(cuMemAlloc(&dst, (size_t)PIECE * PIECES));
	CU_CHECK(cuMemsetD32(busy, 7, n));
	CU_CHECK(cuMemsetD32(tmp, 0, 1));
	/* A copy to pageable memory first (the daemon page-locks the rings for those). */
	CU_CHECK(cuMemcpyDtoH(&probe, tmp, 4));
	for (int k = 0; k < 24; k++) {
		void *args[] = {&busy, &n, &tmp, &nin, &salt};
		CU_CHECK(cuLaunchKernel(f_mix, 64, 1, 1, 128, 1, 1, 0, s, args, NULL));
	}
	for (unsigned p = 0; p < PIECES; p++) {
		unsigned *piece = src + (size_t)p * (PIECE / 4);

		for (unsigned i = 0; i < PIECE / 4; i++)
			piece[i] = (p + 1) * 0x01000193u ^ i;
		CU_CHECK(cuMemcpyHtoDAsync(dst + (size_t)p * PIECE, piece, PIECE, s));
		/* The application may reuse its pageable buffer at once. */
		memset(piece, 0xee, PIECE);
	}
	CU_CHECK(cuStreamSynchronize(s));
	CU_CHECK(cuMemcpyDtoH(back, dst, (size_t)PIECE * PIECES));
	for (unsigned p = 0; p < PIECES; p++)
		for (unsigned i = 0; i < PIECE / 4; i++)
			if (back[(size_t)p * (PIECE / 4) + i] != ((p + 1) * 0x01000193u ^ i)) {
				if (!bad++)
					fprintf(stderr, "ring_reuse: piece %u word %u is %#x, not %#x\n", p,
						i, back[(size_t)p * (PIECE / 4) + i],
						(p + 1) * 0x01000193u ^ i);
			}
	free(src);
	free(back);
	if (bad) {
		fprintf(stderr, "ring_reuse: %u wrong words\n", bad);
		return 1;
	}
	printf("ring_reuse: %u pieces of %u bytes copied asynchronously from pageable memory: all exact\n",
	       PIECES, PIECE);
	return 0;
}
