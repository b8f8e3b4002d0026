/* Minimal assertions for crcuda's C tests: a failed check prints file:line and the values, then
 * exits 1. Exit 77 means "skipped" (ctest SKIP_RETURN_CODE). */
#ifndef CRCUDA_TESTS_CHECK_H
#define CRCUDA_TESTS_CHECK_H

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK_SKIP 77

#define CHECK(cond)                                                                                          \
	do {                                                                                                 \
		if (!(cond)) {                                                                               \
			fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);             \
			exit(1);                                                                             \
		}                                                                                            \
	} while (0)

#define CHECK_EQ_INT(a, b)                                                                                   \
	do {                                                                                                 \
		long long check_a_ = (long long)(a), check_b_ = (long long)(b);                              \
		if (check_a_ != check_b_) {                                                                  \
			fprintf(stderr, "%s:%d: CHECK failed: %s == %s (%lld != %lld)\n", __FILE__,          \
				__LINE__, #a, #b, check_a_, check_b_);                                       \
			exit(1);                                                                             \
		}                                                                                            \
	} while (0)

#define CHECK_EQ_STR(a, b)                                                                                   \
	do {                                                                                                 \
		const char *check_a_ = (a), *check_b_ = (b);                                                 \
		if (!check_a_ || !check_b_ || strcmp(check_a_, check_b_)) {                                  \
			fprintf(stderr, "%s:%d: CHECK failed: %s == %s (\"%s\" != \"%s\")\n", __FILE__,      \
				__LINE__, #a, #b, check_a_ ? check_a_ : "(null)",                            \
				check_b_ ? check_b_ : "(null)");                                             \
			exit(1);                                                                             \
		}                                                                                            \
	} while (0)

#endif
