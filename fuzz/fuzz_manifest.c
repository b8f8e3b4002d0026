/* Checkpoint manifests as the store keeps them (store/manifest.c): crc__manifest_decode of a
 * manifests-database value, the decoder behind crc_store_manifest_get. A value it accepts must
 * encode back to the same bytes. */
#include <string.h>

#include "crcuda/errno.h"
#include "fuzz.h"
#include "store_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct crc_manifest *m = NULL;
	uint8_t *enc = NULL;
	size_t enc_len = 0;
	int rc;

	fuzz_quiet();
	rc = crc__manifest_decode(data, size, &m);
	if (rc) {
		FUZZ_CHECK(rc == CRC_ECORRUPT || rc == CRC_ENOMEM);
		return 0;
	}
	for (uint32_t i = 0; i < m->nregions; i++) {
		const struct crc_region *r = &m->regions[i];

		if (r->name)
			fuzz_touch(r->name, strlen(r->name));
		fuzz_touch(r->chunks, r->nchunks * sizeof(*r->chunks));
	}
	for (uint32_t i = 0; i < m->nmeta; i++)
		FUZZ_CHECK(crc_manifest_meta_get(m, m->meta[i].key) != NULL);
	FUZZ_CHECK(!crc__manifest_encode(m, &enc, &enc_len));
	FUZZ_CHECK(enc_len == size && !memcmp(enc, data, size));
	free(enc);
	crc_manifest_free(m);
	return 0;
}
