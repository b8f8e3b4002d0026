/* Forwarded NVML requests (common/nvml_fwd.c) as crcudad's worker decodes them: any bytes from a
 * client, matched by name against the table's forwarded rows, then decoded and answered (the reply
 * encoded from the decoded buffers). Every buffer must be exactly as long as the row says for the
 * decoded counts, within the wire's limits, and the reply as long as computed. */
#include <string.h>

#include "fuzz.h"
#include "nvml_fwd_rows.h"

static int row_cmp(const void *key, const void *elem)
{
	return strcmp(key, ((const struct crc_nvml_row *)elem)->fn.name);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char name[CRC_NVML_NAME_MAX];
	union crc_nvml_arg a[CRC_NVML_PARAMS_MAX];
	void *bufs[CRC_NVML_PARAMS_MAX];
	size_t lens[CRC_NVML_PARAMS_MAX], n;
	const struct crc_nvml_row *row;
	uint8_t *copy, *out;

	fuzz_quiet();
	if (crc_nvml_req_name(data, size, name))
		return 0;
	row = bsearch(name, crc_nvml_rows, CRC_NVML_ROWS, sizeof(crc_nvml_rows[0]), row_cmp);
	if (!row)
		return 0;
	copy = malloc(size);
	memcpy(copy, data, size);
	if (!crc_nvml_decode_req(&row->fn, copy, size, a, bufs, lens)) {
		for (unsigned i = 0; i < row->fn.n; i++) {
			const struct crc_nvml_param *p = &row->fn.params[i];

			if (p->kind == CRC_NVML_DEV)
				FUZZ_CHECK(strlen(a[i].p) < CRC_NVML_UUID_BYTES);
			if (p->kind < CRC_NVML_PTR || !a[i].p)
				continue;
			FUZZ_CHECK(lens[i] == crc_nvml_param_bytes(&row->fn, a, i));
			FUZZ_CHECK(lens[i] <= CRC_NVML_BYTES_MAX);
			if (p->kind == CRC_NVML_PTR)
				FUZZ_CHECK(lens[i] == p->size);
			if (p->kind == CRC_NVML_ARR)
				FUZZ_CHECK(lens[i] == crc_nvml_arr_count(&row->fn, a, i) * p->size);
			fuzz_touch(a[i].p, lens[i]);
		}
		n = crc_nvml_reply_bytes(&row->fn, a, lens);
		out = malloc(n);
		crc_nvml_encode_reply(&row->fn, a, lens, 0, 1, out);
		fuzz_touch(out, n);
		free(out);
		for (unsigned i = 0; i < CRC_NVML_PARAMS_MAX; i++)
			free(bufs[i]);
	}
	free(copy);
	return 0;
}
