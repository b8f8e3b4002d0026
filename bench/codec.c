/* bench/codec [MiB]: what the store's per-chunk compression (store/codec.c) costs and saves on one
 * core, for kinds of data a checkpoint holds: zeros, random bytes, float32 weights (normal, sd 0.02),
 * Adam's second moment (small positive floats), and a chunk half zeros, half weights. For each it
 * prints, per 4 MiB chunk and one core, the throughput of a memcpy (what a page-cache write costs),
 * of the hash every chunk gets anyway, of the store's encode under each policy (lz4, zstd, auto for a
 * durable store, auto for a CRCUDA_STORE_SYNC=0 store; the probe included) and of the decode, with the
 * stored/logical ratio. Throughputs are of the uncompressed bytes. Default 64 MiB of each kind. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "crc_store.h"
#include "crcuda/errno.h"
#include "store_internal.h"

#define CHUNK (4u << 20)

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t next_u64(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}
static double next_normal(void)
{
	double u = ((next_u64() >> 11) + 1.0) / 9007199254740993.0,
	       v = (next_u64() >> 11) / 9007199254740992.0;
	return sqrt(-2 * log(u)) * cos(2 * M_PI * v);
}

enum kind { ZEROS, RANDOM, WEIGHTS, ADAM_SQ, HALF_ZERO, NKINDS };
static const char *const kind_names[] = {"zeros", "random", "f32-weights", "adam-exp-avg-sq", "half-zeros"};

static void fill(enum kind k, uint8_t *p, size_t len)
{
	float *f = (float *)p;
	size_t nf = len / sizeof(float);
	switch (k) {
	case ZEROS:
		memset(p, 0, len);
		break;
	case RANDOM:
		for (size_t i = 0; i + 8 <= len; i += 8) {
			uint64_t v = next_u64();
			memcpy(p + i, &v, 8);
		}
		break;
	case WEIGHTS:
		for (size_t i = 0; i < nf; i++)
			f[i] = (float)(0.02 * next_normal());
		break;
	case ADAM_SQ:
		/* (1 - beta2) * sum of squared gradients of ~1e-3: values around 1e-9..1e-6. */
		for (size_t i = 0; i < nf; i++) {
			double g = 1e-3 * next_normal();
			f[i] = (float)(0.001 * g * g * (1 + 3 * (next_u64() & 7)));
		}
		break;
	case HALF_ZERO:
		memset(p, 0, len);
		for (size_t i = nf / 2; i < nf; i++)
			f[i] = (float)(0.02 * next_normal());
		break;
	default:
		break;
	}
}

struct policy {
	const char *name;
	enum store_compress p;
	bool durable;
};

int main(int argc, char **argv)
{
	size_t total = (argc > 1 ? strtoull(argv[1], NULL, 10) : 64) << 20;
	size_t nchunks = total / CHUNK ? total / CHUNK : 1;
	uint8_t *data = malloc(nchunks * CHUNK), *dst = malloc(CHUNK), **enc = calloc(nchunks, sizeof(*enc));
	size_t *enclen = calloc(nchunks, sizeof(*enclen));
	uint32_t *encoding = calloc(nchunks, sizeof(*encoding));
	if (!data || !dst || !enc || !enclen || !encoding) {
		fprintf(stderr, "bench/codec: out of memory\n");
		return 1;
	}
	const struct policy policies[] = {{"lz4", STORE_COMPRESS_LZ4, true},
					  {"zstd-1", STORE_COMPRESS_ZSTD, true},
					  {"auto-durable", STORE_COMPRESS_AUTO, true},
					  {"auto-nosync", STORE_COMPRESS_AUTO, false}};
	struct chunk_scratch scratch = {0};
	printf("# %zu x 4 MiB chunks of each kind, one core; GB/s of uncompressed bytes\n", nchunks);
	printf("%-16s %7s %7s | %-12s %7s %8s %8s\n", "DATA", "memcpy", "hash", "POLICY", "ratio", "encode",
	       "decode");
	for (int k = 0; k < NKINDS; k++) {
		for (size_t c = 0; c < nchunks; c++)
			fill((enum kind)k, data + c * CHUNK, CHUNK);
		double t0 = now();
		for (size_t c = 0; c < nchunks; c++)
			memcpy(dst, data + c * CHUNK, CHUNK);
		double t1 = now();
		struct crc_hash h;
		for (size_t c = 0; c < nchunks; c++)
			crc_hash_compute(data + c * CHUNK, CHUNK, &h);
		double t2 = now();
		double memcpy_gbs = nchunks * (double)CHUNK / (t1 - t0) / 1e9,
		       hash_gbs = nchunks * (double)CHUNK / (t2 - t1) / 1e9;
		for (size_t p = 0; p < sizeof(policies) / sizeof(policies[0]); p++) {
			uint64_t stored = 0;
			double e0 = now();
			for (size_t c = 0; c < nchunks; c++) {
				const void *out;
				size_t n;
				encoding[c] = crc__chunk_encode(policies[p].p, policies[p].durable,
								data + c * CHUNK, CHUNK, &scratch, &out, &n);
				if (encoding[c] != CHUNK_ENC_RAW) {
					/* Kept out of the timing's way only as much as the store does: one
					 * copy into its write buffer would follow here. */
					free(enc[c]);
					enc[c] = malloc(n);
					if (!enc[c])
						return 1;
					memcpy(enc[c], out, n);
					enclen[c] = n;
				}
				stored += encoding[c] == CHUNK_ENC_RAW ? CHUNK : n;
			}
			double e1 = now();
			for (size_t c = 0; c < nchunks; c++) {
				if (encoding[c] == CHUNK_ENC_RAW)
					memcpy(dst, data + c * CHUNK, CHUNK); /* a raw chunk's read: a copy */
				else if (crc__chunk_decode(encoding[c], enc[c], enclen[c], dst, CHUNK,
							   &scratch) ||
					 memcmp(dst, data + c * CHUNK, CHUNK)) {
					fprintf(stderr, "bench/codec: %s chunk %zu did not round-trip\n",
						kind_names[k], c);
					return 1;
				}
			}
			double e2 = now();
			printf("%-16s %7.2f %7.2f | %-12s %7.3f %8.2f %8.2f\n", p ? "" : kind_names[k],
			       memcpy_gbs, hash_gbs, policies[p].name,
			       (double)stored / (nchunks * (double)CHUNK),
			       nchunks * (double)CHUNK / (e1 - e0) / 1e9,
			       nchunks * (double)CHUNK / (e2 - e1) / 1e9);
		}
	}
	for (size_t c = 0; c < nchunks; c++)
		free(enc[c]);
	crc__scratch_free(&scratch);
	free(enc);
	free(enclen);
	free(encoding);
	free(data);
	free(dst);
	return 0;
}
