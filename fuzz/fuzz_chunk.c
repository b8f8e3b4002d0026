/* Stored chunks (store/codec.c, store/pack.c): the decoders behind every read of a compressed chunk,
 * and the chunk index entry. Input: a mode byte, a u32 (little-endian) length, then the bytes.
 *   mode 0, 1  crc__chunk_decode of the bytes as LZ4 (0) or zstd (1) into a buffer of that length
 *              (at most 1 MiB): 0 or CRC_ECORRUPT, never a write past the buffer
 *   mode 2..5  the bytes (the length is ignored) through crc__chunk_encode under policy lz4, zstd,
 *              auto-durable, auto-page-cache: what comes out encoded decodes back to the same bytes
 *              and saves at least 1/8
 *   mode 6     crc__chunk_loc_decode of the bytes as an index entry: one it accepts encodes back to
 *              the same bytes */
#include <stdlib.h>
#include <string.h>

#include "crcuda/errno.h"
#include "fuzz.h"
#include "store_internal.h"

#define DST_MAX (1u << 20)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const struct {
		enum store_compress policy;
		bool durable;
	} policies[] = {{STORE_COMPRESS_LZ4, true},
			{STORE_COMPRESS_ZSTD, true},
			{STORE_COMPRESS_AUTO, true},
			{STORE_COMPRESS_AUTO, false}};
	struct chunk_scratch scratch = {0};

	fuzz_quiet();
	if (size < 5)
		return 0;
	uint8_t mode = data[0];
	uint32_t len = get_le32(data + 1);
	data += 5;
	size -= 5;
	if (mode <= 1) {
		len %= DST_MAX + 1;
		uint8_t *dst = malloc(len ? len : 1);
		FUZZ_CHECK(dst != NULL);
		int rc =
		    crc__chunk_decode(mode ? CHUNK_ENC_ZSTD : CHUNK_ENC_LZ4, data, size, dst, len, &scratch);
		FUZZ_CHECK(rc == 0 || rc == CRC_ECORRUPT);
		if (!rc)
			fuzz_touch(dst, len);
		free(dst);
	} else if (mode <= 5) {
		const void *out;
		size_t out_len;
		uint32_t enc = crc__chunk_encode(policies[mode - 2].policy, policies[mode - 2].durable, data,
						 size, &scratch, &out, &out_len);
		if (enc != CHUNK_ENC_RAW) {
			FUZZ_CHECK(enc == CHUNK_ENC_LZ4 || enc == CHUNK_ENC_ZSTD);
			FUZZ_CHECK(out_len < size - size / 8 + 1);
			/* The encoded bytes live in the scratch, which the decode may use too: copy them. */
			uint8_t *copy = malloc(out_len), *back = malloc(size);
			FUZZ_CHECK(copy && back);
			memcpy(copy, out, out_len);
			FUZZ_CHECK(crc__chunk_decode(enc, copy, out_len, back, size, &scratch) == 0);
			FUZZ_CHECK(!memcmp(back, data, size));
			free(copy);
			free(back);
		}
	} else if (mode == 6) {
		struct chunk_loc loc;
		uint8_t again[CHUNK_LOC_SIZE_ENC];
		if (!crc__chunk_loc_decode(data, size, &loc)) {
			FUZZ_CHECK(loc.stored <= loc.length);
			FUZZ_CHECK(crc__chunk_loc_encode(&loc, again) == size);
			FUZZ_CHECK(!memcmp(again, data, size));
		}
	}
	crc__scratch_free(&scratch);
	return 0;
}
