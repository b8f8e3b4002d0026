/* Journal records (common/journal.c): decoding and formatting. The store hands its payloads out
 * 2-byte aligned (LMDB values) and `crcudactl inspect` formats them where they lie: the formatters
 * read them through a copy (found by fuzz/fuzz_jrec.c: misaligned struct reads, UB), and the decoder,
 * which does not copy, refuses them. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "crcuda/errno.h"
#include "crcuda/journal.h"

int main(void)
{
	size_t len = crc_jrec_size(1, 1, 4, 8);
	uint64_t *aligned = calloc(1, len + 16);
	struct crc_jrec_call *c = (struct crc_jrec_call *)aligned;
	uint8_t *p = (uint8_t *)aligned, *odd = malloc(len + 2);
	struct crc_jrec_view v;
	char a[512], b[512];

	CHECK(aligned && odd);
	*c = (struct crc_jrec_call){.version = CRC_JREC_VERSION,
				    .op = 1,
				    .nhandles = 1,
				    .nrefs = 1,
				    .name_len = 4,
				    .args_len = 8,
				    .ctx = 0x10100000001ull,
				    .addr = 0x680000000000ull,
				    .size = 4096};
	memcpy(p + sizeof(*c), &(uint64_t){0x10300000001ull}, 8);
	memcpy(p + sizeof(*c) + 8, &(uint64_t){0x10100000001ull}, 8);
	memcpy(p + sizeof(*c) + 16, "abc", 4);
	CHECK_EQ_INT(crc_jrec_decode(p, len, &v), 0);
	CHECK_EQ_STR(v.name, "abc");
	CHECK_EQ_INT(crc_jrec_decode(p, len - 1, &v), CRC_ECORRUPT);
	memcpy(odd + 2, p, len);
	CHECK_EQ_INT(crc_jrec_decode(odd + 2, len, &v), CRC_EINVAL);
	crc_jrec_format_text(a, sizeof(a), 5, 7, p, len);
	crc_jrec_format_text(b, sizeof(b), 5, 7, odd + 2, len);
	CHECK_EQ_STR(a, b);
	CHECK(strstr(a, "name=abc") && strstr(a, "-> 0x10300000001") && strstr(a, "size=4096"));
	crc_jrec_format_json(a, sizeof(a), 5, 7, p, len);
	crc_jrec_format_json(b, sizeof(b), 5, 7, odd + 2, len);
	CHECK_EQ_STR(a, b);
	CHECK(strstr(a, "\"name\":\"abc\""));
	/* Undecodable, misaligned or not. */
	crc_jrec_format_text(b, sizeof(b), 5, 7, odd + 2, len - 1);
	CHECK(strstr(b, "undecodable"));
	free(odd);
	free(aligned);
	return 0;
}
