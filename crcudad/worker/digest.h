/* Chunk digests that find what changed in device memory since the last checkpoint, computed where the
 * memory is (a kernel at device bandwidth: digest_kernel.cu) and, the same function, on the host
 * (digest.c: the simulated device's kernel and the tests' reference).
 *
 * A chunk (16-byte aligned, any length) is read as 16-byte words; word i goes to lane i % THREADS,
 * which folds its words in order into two 64-bit accumulators (A: xxh64's round, B: another
 * bijective round); the lanes are then folded in order, the tail bytes after them, and each result
 * mixed (xxh64's avalanche). Every step is a bijection of the accumulator for fixed input and of the
 * input for a fixed accumulator, so a chunk that differs from another in a single word always
 * digests differently, and otherwise two 64-bit halves must both collide. Not a cryptographic hash:
 * it only compares a session's memory with its own earlier memory. */
#ifndef CRCUDA_DIGEST_H
#define CRCUDA_DIGEST_H

#ifdef __CUDACC__
#define CRC_DIGEST_FN __host__ __device__ static inline
typedef unsigned long long crc_digest_u64;
#else
#include <stdint.h>
#define CRC_DIGEST_FN static inline
typedef uint64_t crc_digest_u64;
#endif

#define CRC_DIGEST_THREADS 256 /* lanes: one per thread of the kernel's block */
#define CRC_DIGEST_KERNEL  "crc_chunk_digest"

#define CRC_DIGEST_P1 0x9E3779B185EBCA87ull
#define CRC_DIGEST_P2 0xC2B2AE3D27D4EB4Full
#define CRC_DIGEST_P3 0x165667B19E3779F9ull
#define CRC_DIGEST_P4 0x85EBCA77C2B2AE63ull
#define CRC_DIGEST_P5 0x27D4EB2F165667C5ull

CRC_DIGEST_FN crc_digest_u64 crc_digest_rotl(crc_digest_u64 x, int r)
{
	return (x << r) | (x >> (64 - r));
}

CRC_DIGEST_FN crc_digest_u64 crc_digest_round_a(crc_digest_u64 acc, crc_digest_u64 x, crc_digest_u64 y)
{
	acc = crc_digest_rotl(acc + x * CRC_DIGEST_P2, 31) * CRC_DIGEST_P1;
	return crc_digest_rotl(acc + y * CRC_DIGEST_P2, 31) * CRC_DIGEST_P1;
}

CRC_DIGEST_FN crc_digest_u64 crc_digest_round_b(crc_digest_u64 acc, crc_digest_u64 x, crc_digest_u64 y)
{
	acc = crc_digest_rotl(acc ^ (y * CRC_DIGEST_P3), 27) * CRC_DIGEST_P4 + CRC_DIGEST_P5;
	return crc_digest_rotl(acc ^ (x * CRC_DIGEST_P3), 27) * CRC_DIGEST_P4 + CRC_DIGEST_P5;
}

CRC_DIGEST_FN crc_digest_u64 crc_digest_lane_a(unsigned lane)
{
	return CRC_DIGEST_P1 + CRC_DIGEST_P2 + lane;
}

CRC_DIGEST_FN crc_digest_u64 crc_digest_lane_b(unsigned lane)
{
	return CRC_DIGEST_P3 ^ (CRC_DIGEST_P5 * (lane + 1));
}

CRC_DIGEST_FN crc_digest_u64 crc_digest_avalanche(crc_digest_u64 h)
{
	h ^= h >> 33;
	h *= CRC_DIGEST_P2;
	h ^= h >> 29;
	h *= CRC_DIGEST_P3;
	return h ^ (h >> 32);
}

/* Folds the lanes' accumulators, then the tail (len % 16 bytes at tail), into out[2]. */
CRC_DIGEST_FN void crc_digest_finish(const crc_digest_u64 *a, const crc_digest_u64 *b,
				     const unsigned char *tail, crc_digest_u64 len, crc_digest_u64 out[2])
{
	crc_digest_u64 ha = CRC_DIGEST_P5 ^ len, hb = CRC_DIGEST_P4 + len, w = 0;
	unsigned n = (unsigned)(len % 16);

	for (unsigned t = 0; t < CRC_DIGEST_THREADS; t++) {
		ha = crc_digest_round_a(ha, a[t], t);
		hb = crc_digest_round_b(hb, b[t], t);
	}
	for (unsigned j = 0; j < n; j++) {
		w |= (crc_digest_u64)tail[j] << (8 * (j % 8));
		if (j % 8 == 7 || j == n - 1) {
			ha = crc_digest_round_a(ha, w, j);
			hb = crc_digest_round_b(hb, w, j);
			w = 0;
		}
	}
	out[0] = crc_digest_avalanche(ha);
	out[1] = crc_digest_avalanche(hb);
}

#ifndef __CUDACC__
#include <string.h>

/* The same digest on the host: word i folded into lane i % THREADS, front to back. */
static inline void crc_digest_host(const void *data, uint64_t len, uint64_t out[2])
{
	uint64_t a[CRC_DIGEST_THREADS], b[CRC_DIGEST_THREADS], nvec = len / 16;
	const unsigned char *p = data;

	for (unsigned t = 0; t < CRC_DIGEST_THREADS; t++) {
		a[t] = crc_digest_lane_a(t);
		b[t] = crc_digest_lane_b(t);
	}
	for (uint64_t i = 0; i < nvec; i++) {
		unsigned t = (unsigned)(i % CRC_DIGEST_THREADS);
		uint64_t w[2];

		memcpy(w, p + 16 * i, sizeof(w));
		a[t] = crc_digest_round_a(a[t], w[0], w[1]);
		b[t] = crc_digest_round_b(b[t], w[0], w[1]);
	}
	crc_digest_finish(a, b, p + 16 * nvec, len, out);
}
#endif

#endif
