/* Shared helpers for the modimage tests: read the nvcc-built images. */
#ifndef CRCUDA_TESTS_MODIMAGE_UTIL_H
#define CRCUDA_TESTS_MODIMAGE_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

/* Reads dir/name into a malloc'd buffer of exactly *len bytes (plus one NUL byte, not counted). */
static inline unsigned char *mi_read(const char *dir, const char *name, size_t *len)
{
	char path[4096];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	FILE *f = fopen(path, "rb");
	if (!f) {
		fprintf(stderr, "cannot open %s\n", path);
		exit(1);
	}
	CHECK(fseek(f, 0, SEEK_END) == 0);
	long n = ftell(f);
	CHECK(n > 0);
	rewind(f);
	unsigned char *b = malloc((size_t)n + 1);
	CHECK(b);
	CHECK(fread(b, 1, (size_t)n, f) == (size_t)n);
	b[n] = 0;
	fclose(f);
	*len = (size_t)n;
	return b;
}

#endif
