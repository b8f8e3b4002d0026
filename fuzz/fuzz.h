/* Shared bits of the libFuzzer harnesses (fuzz/README.md). Each harness is one target: it feeds the
 * fuzzer's bytes to one decoder of bytes that another process, a file or the store wrote, and checks
 * what it can (round trips, bounds) besides what ASan and UBSan check. */
#ifndef CRCUDA_FUZZ_H
#define CRCUDA_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "crcuda/log.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The decoders log what was wrong with an input: formatted (the arguments are checked by the
 * sanitizers too), but written to /dev/null. */
static inline void fuzz_quiet(void)
{
	static int done;

	if (!done) {
		crc_log_set_file("/dev/null");
		done = 1;
	}
}

/* A property the decoder must keep: abort (libFuzzer saves the input) when it does not. */
#define FUZZ_CHECK(cond)                                                                                     \
	do {                                                                                                 \
		if (!(cond)) {                                                                               \
			fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);             \
			abort();                                                                             \
		}                                                                                            \
	} while (0)

/* Reads every byte of [p, p + n): an out-of-bounds pointer or length handed back by a decoder shows. */
static inline unsigned fuzz_touch(const void *p, size_t n)
{
	const volatile uint8_t *b = p;
	unsigned s = 0;

	for (size_t i = 0; i < n; i++)
		s += b[i];
	return s;
}

#endif
