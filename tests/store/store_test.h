/* Helpers shared by the store tests: a fresh store directory, deterministic bytes. */
#ifndef CRCUDA_TESTS_STORE_TEST_H
#define CRCUDA_TESTS_STORE_TEST_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

/* Creates an empty directory under TMPDIR (or /tmp) and returns its malloc'd path. */
static inline char *test_tmpdir(const char *tag)
{
	const char *base = getenv("TMPDIR");
	char *path;
	if (!base || !*base)
		base = "/tmp";
	CHECK(asprintf(&path, "%s/crcuda-%s-XXXXXX", base, tag) > 0);
	CHECK(mkdtemp(path) != NULL);
	return path;
}

static inline void test_rmrf(const char *path)
{
	char *cmd;
	CHECK(asprintf(&cmd, "rm -rf '%s'", path) > 0);
	CHECK(system(cmd) == 0);
	free(cmd);
}

/* xorshift bytes: different for each seed, the same on every run. */
static inline void test_fill(void *buf, size_t len, uint64_t seed)
{
	uint8_t *p = buf;
	uint64_t x = seed * 0x9e3779b97f4a7c15ull + 0x1234567;
	for (size_t i = 0; i < len; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		p[i] = (uint8_t)(x >> 24);
	}
}

#define CHECK_OK(expr)                                                                                       \
	do {                                                                                                 \
		int check_rc_ = (expr);                                                                      \
		if (check_rc_) {                                                                             \
			fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #expr,                 \
				crc_strerror(check_rc_));                                                    \
			exit(1);                                                                             \
		}                                                                                            \
	} while (0)

#endif
