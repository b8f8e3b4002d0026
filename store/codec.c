/* Per-chunk compression: which chunks a writer compresses, and decoding them back.
 *
 * A chunk's address stays the hash of its uncompressed bytes (dedup and incremental checkpoints
 * compare those); only its bytes in the pack file are encoded, and the index entry says how.
 *
 * The decision, per chunk: a probe compresses a few small samples spread over the chunk with LZ4
 * (about 1% of a 4 MiB chunk's bytes); when they do not shrink by the needed share, the chunk is
 * stored as is at once (incompressible data, such as trained float32 weights or random bytes, costs
 * almost nothing). Otherwise the whole chunk is compressed, and kept only when it saves at least
 * 1/8 of its bytes: a smaller saving is not worth a decode on every restore.
 *
 * CRCUDA_STORE_COMPRESS=auto (the default) follows what the write is bound by (numbers from
 * bench/store --codec, docs/store.md):
 *   - durable stores (fsync'd, disk-bound at ~1.6 GB/s on the GPU host): LZ4 compresses compressible
 *     chunks at several hundred MB/s to GB/s per writer thread, and crcudad writes from up to 8
 *     lanes at once, so every byte saved is disk time saved: LZ4 where the probe says it saves 1/8.
 *   - CRCUDA_STORE_SYNC=0 stores (page cache, CPU-bound: a write is a memcpy at several GB/s per
 *     core): compressing ordinary data costs more than the copy it saves, so only chunks whose probe
 *     shrinks to a quarter or less (mostly zero memory: untouched buffers, zeroed optimizer state)
 *     are compressed; LZ4 runs on those faster than the copy, and restore decodes them faster still.
 * lz4 and zstd force that codec for every chunk that saves 1/8 (zstd level 1: smaller, slower to
 * write, about 1 GB/s per core to read back); off stores every chunk as is. */
#define LOG_PREFIX "store: "

#include <lz4.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <strings.h>
#include <zstd.h>

#include "crcuda/errno.h"
#include "crcuda/log.h"
#include "store_internal.h"

/* The probe: this many samples of this size, spread over the chunk (chunks below PROBE_MIN are
 * compressed whole; they are few and small). */
#define PROBE_SAMPLES 4
#define PROBE_SAMPLE  (8u << 10)
#define PROBE_MIN     (PROBE_SAMPLES * PROBE_SAMPLE * 4)
#define ZSTD_LEVEL    1

enum store_compress crc__compress_policy(void)
{
	static atomic_bool warned;
	const char *v = getenv("CRCUDA_STORE_COMPRESS");
	if (!v || !*v || !strcasecmp(v, "auto"))
		return STORE_COMPRESS_AUTO;
	if (!strcasecmp(v, "off") || !strcmp(v, "0") || !strcasecmp(v, "none"))
		return STORE_COMPRESS_OFF;
	if (!strcasecmp(v, "lz4"))
		return STORE_COMPRESS_LZ4;
	if (!strcasecmp(v, "zstd"))
		return STORE_COMPRESS_ZSTD;
	if (!atomic_exchange(&warned, true))
		pr_warn("CRCUDA_STORE_COMPRESS=%s: not auto, off, lz4 or zstd; using auto", v);
	return STORE_COMPRESS_AUTO;
}

const char *crc__encoding_name(uint32_t encoding)
{
	switch (encoding) {
	case CHUNK_ENC_RAW:
		return "raw";
	case CHUNK_ENC_LZ4:
		return "lz4";
	case CHUNK_ENC_ZSTD:
		return "zstd";
	default:
		return "unknown";
	}
}

void crc__scratch_free(struct chunk_scratch *s)
{
	if (!s)
		return;
	free(s->buf);
	ZSTD_freeCCtx(s->zstd_cctx);
	ZSTD_freeDCtx(s->zstd_dctx);
	memset(s, 0, sizeof(*s));
}

static bool scratch_reserve(struct chunk_scratch *s, size_t n)
{
	if (s->cap >= n)
		return true;
	uint8_t *p = malloc(n);
	if (!p)
		return false;
	free(s->buf);
	s->buf = p;
	s->cap = n;
	return true;
}

/* Compressed size of the probe's samples (with the codec the chunk would get) divided by their size,
 * as a fraction of 1 << 16. */
static unsigned probe_ratio(const uint8_t *data, size_t len, bool use_zstd, struct chunk_scratch *s)
{
	size_t out = 0;
	size_t stride = (len - PROBE_SAMPLE) / (PROBE_SAMPLES - 1);
	for (unsigned i = 0; i < PROBE_SAMPLES; i++) {
		const uint8_t *sample = data + i * stride;
		size_t n = PROBE_SAMPLE;
		if (use_zstd) {
			size_t z =
			    ZSTD_compressCCtx(s->zstd_cctx, s->buf, s->cap, sample, PROBE_SAMPLE, ZSTD_LEVEL);
			if (!ZSTD_isError(z) && z < n)
				n = z;
		} else {
			int z = LZ4_compress_default((const char *)sample, (char *)s->buf, PROBE_SAMPLE,
						     (int)s->cap);
			if (z > 0 && (size_t)z < n)
				n = (size_t)z;
		}
		out += n;
	}
	return (unsigned)((out << 16) / (PROBE_SAMPLES * PROBE_SAMPLE));
}

uint32_t crc__chunk_encode(enum store_compress policy, bool durable, const void *data, size_t len,
			   struct chunk_scratch *scratch, const void **out, size_t *out_len)
{
	if (policy == STORE_COMPRESS_OFF || len < 64 || len > CRC_CHUNK_MAX)
		return CHUNK_ENC_RAW;
	/* Kept only when it saves 1/8; the page-cache auto policy asks the probe for 3/4. */
	size_t keep_below = len - len / 8;
	unsigned probe_max = 7u << 13; /* 7/8 in 1/65536ths */
	if (policy == STORE_COMPRESS_AUTO && !durable)
		probe_max = 1u << 14; /* 1/4 */
	bool use_zstd = policy == STORE_COMPRESS_ZSTD;
	size_t bound = use_zstd ? ZSTD_compressBound(len) : (size_t)LZ4_compressBound((int)len);
	if (!scratch_reserve(scratch, bound > PROBE_SAMPLE * 2 ? bound : PROBE_SAMPLE * 2))
		return CHUNK_ENC_RAW;
	if (use_zstd && !scratch->zstd_cctx && !(scratch->zstd_cctx = ZSTD_createCCtx()))
		return CHUNK_ENC_RAW;
	if (len >= PROBE_MIN && probe_ratio(data, len, use_zstd, scratch) >= probe_max)
		return CHUNK_ENC_RAW;
	size_t n;
	if (use_zstd) {
		n = ZSTD_compressCCtx(scratch->zstd_cctx, scratch->buf, scratch->cap, data, len, ZSTD_LEVEL);
		if (ZSTD_isError(n))
			return CHUNK_ENC_RAW;
	} else {
		/* Capacity keep_below: LZ4 gives up (returns 0) as soon as the output would not fit, which
		 * also stops early on a chunk whose start compresses and whose rest does not. */
		int r = LZ4_compress_default(data, (char *)scratch->buf, (int)len, (int)keep_below);
		if (r <= 0)
			return CHUNK_ENC_RAW;
		n = (size_t)r;
	}
	if (n >= keep_below)
		return CHUNK_ENC_RAW;
	*out = scratch->buf;
	*out_len = n;
	return use_zstd ? CHUNK_ENC_ZSTD : CHUNK_ENC_LZ4;
}

int crc__chunk_decode(uint32_t encoding, const void *src, size_t src_len, void *dst, size_t dst_len,
		      struct chunk_scratch *scratch)
{
	switch (encoding) {
	case CHUNK_ENC_LZ4: {
		if (src_len > (size_t)LZ4_MAX_INPUT_SIZE || dst_len > (size_t)LZ4_MAX_INPUT_SIZE)
			return CRC_ECORRUPT;
		int r = LZ4_decompress_safe(src, dst, (int)src_len, (int)dst_len);
		return r >= 0 && (size_t)r == dst_len ? 0 : CRC_ECORRUPT;
	}
	case CHUNK_ENC_ZSTD: {
		if (!scratch->zstd_dctx && !(scratch->zstd_dctx = ZSTD_createDCtx()))
			return CRC_ENOMEM;
		unsigned long long size = ZSTD_getFrameContentSize(src, src_len);
		if (size != dst_len)
			return CRC_ECORRUPT;
		size_t r = ZSTD_decompressDCtx(scratch->zstd_dctx, dst, dst_len, src, src_len);
		return !ZSTD_isError(r) && r == dst_len ? 0 : CRC_ECORRUPT;
	}
	default:
		return CRC_ECORRUPT;
	}
}
