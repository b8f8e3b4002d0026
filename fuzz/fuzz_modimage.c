/* Module images as an application hands them to cuModuleLoadData and friends (common/modimage.c):
 * identification and sizing in a bounded buffer, fatbin containers (entries, LZ4/zstd
 * decompression, the entry a device would load) and the kernels and globals of what was chosen. The
 * first input byte is the target SASS version (0: any); the image follows, alone in an exactly sized
 * heap buffer so that ASan sees every byte read past it. */
#include <string.h>

#include "crcuda/errno.h"
#include "crcuda/modimage.h"
#include "fuzz.h"

static void check_info(const struct crc_modinfo *mi)
{
	for (size_t i = 0; i < mi->nkernels; i++) {
		const struct crc_kernel *k = &mi->kernels[i];

		FUZZ_CHECK(k->name);
		FUZZ_CHECK(crc_modinfo_kernel(mi, k->name) != NULL);
		fuzz_touch(k->params, k->nparams * sizeof(*k->params));
	}
	for (size_t i = 0; i < mi->nglobals; i++) {
		const struct crc_global *g = &mi->globals[i];

		FUZZ_CHECK(g->name);
		FUZZ_CHECK(crc_modinfo_global(mi, g->name) != NULL);
		if (g->init)
			fuzz_touch(g->init, g->size);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct crc_modimage_kind k;
	struct crc_fatbin_entry *ents = NULL;
	struct crc_modinfo mi;
	uint32_t sm = 0;
	size_t n = 0, idx;
	uint8_t *img;

	fuzz_quiet();
	if (size) {
		sm = data[0] < 200 ? data[0] : 0;
		data++;
		size--;
	}
	img = malloc(size ? size : 1);
	memcpy(img, data, size);
	if (!crc_modimage_identify_buf(img, size, &k)) {
		FUZZ_CHECK((const uint8_t *)k.data >= img && k.size <= size &&
			   (const uint8_t *)k.data + k.size <= img + size);
		fuzz_touch(k.data, k.size);
	}
	if (!crc_modinfo_from_image(img, size, sm, &mi)) {
		check_info(&mi);
		crc_modinfo_free(&mi);
	}
	if (!crc_fatbin_entries(img, size, &ents, &n)) {
		for (size_t i = 0; i < n; i++) {
			void *d;
			size_t dlen;

			FUZZ_CHECK(ents[i].payload >= img &&
				   ents[i].payload + ents[i].data_size <= img + size);
			if (!crc_fatbin_entry_data(&ents[i], &d, &dlen)) {
				fuzz_touch(d, dlen);
				free(d);
			}
		}
		if (!crc_fatbin_select(ents, n, sm, &idx))
			FUZZ_CHECK(idx < n);
		free(ents);
	}
	free(img);
	return 0;
}
