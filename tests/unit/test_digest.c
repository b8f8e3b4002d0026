/* The chunk digest that finds changed device memory (crcudad/worker/digest.h): every single-word and
 * single-bit change, a swap of two words, a different length, and the tail bytes all change it; equal
 * bytes digest equally wherever they are. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "digest.h"

#define LEN ((16u << 10) + 13) /* several words per lane, and a tail */

static void digest(const unsigned char *p, uint64_t len, uint64_t d[2])
{
	crc_digest_host(p, len, d);
}

static int same(const uint64_t a[2], const uint64_t b[2])
{
	return a[0] == b[0] && a[1] == b[1];
}

int main(void)
{
	unsigned char *buf = malloc(LEN), *copy = malloc(LEN + 16);
	uint64_t base[2], d[2];
	uint64_t x = 88172645463325252ull;

	CHECK(buf && copy);
	for (size_t i = 0; i < LEN; i++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		buf[i] = (unsigned char)x;
	}
	digest(buf, LEN, base);
	/* Equal bytes at another address digest the same. */
	memcpy(copy + 16, buf, LEN);
	digest(copy + 16, LEN, d);
	CHECK(same(base, d));
	/* Every bit of the first and last 256 bytes (the tail among them), one bit of every other byte. */
	for (size_t i = 0; i < LEN; i++)
		for (int bit = (i < 256 || i + 256 >= LEN) ? 0 : (int)(i % 8); bit < 8;
		     bit += (i < 256 || i + 256 >= LEN) ? 1 : 8) {
			buf[i] ^= (unsigned char)(1u << bit);
			digest(buf, LEN, d);
			buf[i] ^= (unsigned char)(1u << bit);
			if (same(base, d)) {
				fprintf(stderr, "flipping bit %d of byte %zu left the digest unchanged\n",
					bit, i);
				return 1;
			}
		}
	/* Two 16-byte words swapped (same lane and other lanes); the same word moved. */
	for (size_t w = 1; w < 600; w += 37) {
		unsigned char t[16];

		memcpy(t, buf, 16);
		memcpy(buf, buf + 16 * w, 16);
		memcpy(buf + 16 * w, t, 16);
		digest(buf, LEN, d);
		memcpy(buf + 16 * w, buf, 16);
		memcpy(buf, t, 16);
		CHECK(!same(base, d));
	}
	/* Lengths: zeros of every length up to 300 bytes digest differently. */
	{
		static uint64_t seen[301][2];

		memset(copy, 0, 301);
		for (unsigned n = 0; n <= 300; n++) {
			digest(copy, n, seen[n]);
			for (unsigned m = 0; m < n; m++)
				CHECK(!same(seen[m], seen[n]));
		}
	}
	digest(buf, LEN, d);
	CHECK(same(base, d));
	free(buf);
	free(copy);
	printf("unit_digest: OK\n");
	return 0;
}
