/* big_copies: large copies between host memory (pageable and page-locked) and the device, both ways,
 * synchronous and asynchronous on a stream, of sizes that are no multiple of any piece size, each
 * checked byte for byte; an async copy in, a memset and an async copy out on one stream check stream
 * order. Under a TCP session these are the striped copies (crcuda/proto.h, "striped copies").
 *   big_copies [--mb N] [--rounds N] [--ready-file F --go-file G]
 * --mb: the largest copy (default 9, plus odd bytes); with --ready-file it writes "ready" there after
 * the first round and waits for --go-file (a checkpoint/restore in between: the device's bytes from
 * before are checked first). Prints a checksum of everything it copied back. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cuda_test.h"

static uint64_t mix(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ull;
	return x ^ (x >> 33);
}

static void fill(uint8_t *p, size_t n, uint64_t seed)
{
	for (size_t i = 0; i < n; i += 8) {
		uint64_t v = mix(seed + i);

		memcpy(p + i, &v, n - i < 8 ? n - i : 8);
	}
}

static uint64_t checksum = 0x9e3779b97f4a7c15ull;

/* Compares; what was copied back joins the checksum where hash says (a paused run's extra check does
 * not: the same checksum as an uninterrupted run). */
static void expect_same(const uint8_t *got, const uint8_t *want, size_t n, const char *what, bool hash)
{
	for (size_t i = 0; i < n; i++) {
		if (got[i] != want[i]) {
			fprintf(stderr, "big_copies: %s: byte %zu of %zu is 0x%02x, expected 0x%02x\n", what,
				i, n, got[i], want[i]);
			exit(1);
		}
	}
	for (size_t i = 0; hash && i + 8 <= n; i += 4096) {
		uint64_t v;

		memcpy(&v, got + i, 8);
		checksum = mix(checksum ^ v);
	}
}

int main(int argc, char **argv)
{
	const char *ready = NULL, *go = NULL;
	size_t mb = 9, max;
	int rounds = 2;
	CUdeviceptr d;
	CUstream stream;
	uint8_t *page_in, *page_out, *pin_in, *pin_out, *expected;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--mb") && i + 1 < argc)
			mb = strtoul(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
			rounds = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--ready-file") && i + 1 < argc)
			ready = argv[++i];
		else if (!strcmp(argv[i], "--go-file") && i + 1 < argc)
			go = argv[++i];
		else {
			fprintf(stderr,
				"usage: big_copies [--mb N] [--rounds N] [--ready-file F --go-file G]\n");
			return 2;
		}
	}
	max = (mb << 20) + 4097;
	cu_test_init("big_copies");
	cu_test_primary_context(NULL);
	CU_CHECK(cuMemAlloc(&d, max));
	CU_CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
	page_in = malloc(max);
	page_out = malloc(max);
	expected = malloc(max);
	if (!page_in || !page_out || !expected) {
		fprintf(stderr, "big_copies: out of memory\n");
		return 1;
	}
	CU_CHECK(cuMemAllocHost((void **)&pin_in, max));
	CU_CHECK(cuMemAllocHost((void **)&pin_out, max));
	for (int r = 0; r < rounds; r++) {
		/* Odd sizes: a piece's multiple plus a few bytes, a little less than a MiB multiple, all. */
		size_t sizes[] = {max / 2 + 1, max - 3, max};

		for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
			size_t n = sizes[s], at = n / 3, len = 4099;
			uint64_t seed = (uint64_t)r << 40 | (uint64_t)s << 32;

			/* Pageable in, page-locked out, synchronous. */
			fill(page_in, n, seed);
			CU_CHECK(cuMemcpyHtoD(d, page_in, n));
			memset(pin_out, 0, n);
			CU_CHECK(cuMemcpyDtoH(pin_out, d, n));
			expect_same(pin_out, page_in, n, "pageable in, page-locked out (sync)", true);
			/* Page-locked in, a memset, pageable out, all on one stream. */
			fill(pin_in, n, seed + 1);
			memcpy(expected, pin_in, n);
			memset(expected + at, 0xa5, len);
			memset(page_out, 0, n);
			CU_CHECK(cuMemcpyHtoDAsync(d, pin_in, n, stream));
			CU_CHECK(cuMemsetD8Async(d + at, 0xa5, len, stream));
			CU_CHECK(cuMemcpyDtoHAsync(page_out, d, n, stream));
			CU_CHECK(cuStreamSynchronize(stream));
			expect_same(page_out, expected, n, "page-locked in, memset, pageable out (async)",
				    true);
			/* Pageable in async, page-locked out async. */
			fill(page_in, n, seed + 2);
			CU_CHECK(cuMemcpyHtoDAsync(d, page_in, n, stream));
			CU_CHECK(cuMemcpyDtoHAsync(pin_out, d, n, stream));
			CU_CHECK(cuStreamSynchronize(stream));
			expect_same(pin_out, page_in, n, "pageable in, page-locked out (async)", true);
		}
		if (r == 0 && ready && go) {
			FILE *f = fopen(ready, "w");

			if (!f) {
				perror(ready);
				return 1;
			}
			fprintf(f, "ready\n");
			fclose(f);
			while (access(go, F_OK))
				usleep(20000);
			/* What the device held before: still there. */
			memset(page_out, 0, max);
			CU_CHECK(cuMemcpyDtoH(page_out, d, max));
			expect_same(page_out, page_in, max, "the device's bytes after the pause", false);
		}
	}
	CU_CHECK(cuMemFreeHost(pin_in));
	CU_CHECK(cuMemFreeHost(pin_out));
	CU_CHECK(cuMemFree(d));
	free(page_in);
	free(page_out);
	free(expected);
	printf("big_copies: %d rounds of up to %zu bytes exact, checksum=%016llx\n", rounds, max,
	       (unsigned long long)checksum);
	return 0;
}
