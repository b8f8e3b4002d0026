/* Journal records (common/journal.c): crc_jrec_decode as the worker's replay calls it (on an aligned
 * copy), and the formatting `crcudactl inspect` does straight on the store's bytes, which LMDB hands
 * out 2-byte aligned (the payload is what follows a record's 8-byte header in an LMDB value). */
#include <string.h>

#include "crcuda/journal.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct crc_jrec_view v;
	char text[4096];
	uint32_t type = 0;
	uint8_t *copy, *odd;

	fuzz_quiet();
	if (size >= 1) {
		type = data[0];
		data++;
		size--;
	}
	copy = malloc(size ? size : 1);
	memcpy(copy, data, size);
	if (!crc_jrec_decode(copy, size, &v)) {
		const uint8_t *end = copy + size;

		FUZZ_CHECK((const uint8_t *)v.call == copy);
		FUZZ_CHECK((const uint8_t *)(v.handles + v.call->nhandles) <= end);
		FUZZ_CHECK((const uint8_t *)(v.refs + v.call->nrefs) <= end);
		FUZZ_CHECK(v.args + v.call->args_len <= end);
		fuzz_touch(v.handles, 8 * (size_t)v.call->nhandles);
		fuzz_touch(v.refs, 8 * (size_t)v.call->nrefs);
		fuzz_touch(v.args, v.call->args_len);
		if (v.name)
			FUZZ_CHECK(strlen(v.name) < v.call->name_len);
	}
	/* As LMDB gives it: 2 bytes past an 8-byte boundary. */
	odd = malloc(size + 2);
	memcpy(odd + 2, data, size);
	crc_jrec_format_text(text, sizeof(text), 1, type, odd + 2, size);
	FUZZ_CHECK(strlen(text) < sizeof(text));
	crc_jrec_format_json(text, sizeof(text), 1, type, odd + 2, size);
	FUZZ_CHECK(strlen(text) < sizeof(text));
	/* A short buffer truncates. */
	crc_jrec_format_json(text, 7, 2, type, copy, size);
	FUZZ_CHECK(strlen(text) < 7);
	free(odd);
	free(copy);
	return 0;
}
