/* The chunk digest kernel (digest.h): block b digests chunk b, described by desc[2b] (its device
 * address, 16-byte aligned) and desc[2b + 1] (its length); the digest goes to out[2b], out[2b + 1]. */
#include "digest.h"

extern "C" __global__ void __launch_bounds__(CRC_DIGEST_THREADS)
    crc_chunk_digest(const unsigned long long *desc, unsigned long long *out)
{
	__shared__ unsigned long long sa[CRC_DIGEST_THREADS], sb[CRC_DIGEST_THREADS];
	const unsigned long long addr = desc[2 * blockIdx.x], len = desc[2 * blockIdx.x + 1];
	const ulonglong2 *v = (const ulonglong2 *)addr;
	const unsigned long long nvec = len / 16;
	unsigned t = threadIdx.x;
	unsigned long long a = crc_digest_lane_a(t), b = crc_digest_lane_b(t);

#pragma unroll 4
	for (unsigned long long i = t; i < nvec; i += CRC_DIGEST_THREADS) {
		ulonglong2 w = __ldcs(v + i); /* read once: not worth keeping in the caches */

		a = crc_digest_round_a(a, w.x, w.y);
		b = crc_digest_round_b(b, w.x, w.y);
	}
	sa[t] = a;
	sb[t] = b;
	__syncthreads();
	if (t == 0) {
		unsigned long long r[2];

		crc_digest_finish(sa, sb, (const unsigned char *)addr + nvec * 16, len, r);
		out[2 * blockIdx.x] = r[0];
		out[2 * blockIdx.x + 1] = r[1];
	}
}
