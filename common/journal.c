/* Journal record layout checks and formatting (crcuda/journal.h). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "crcuda/cuda_api.h"
#include "crcuda/errno.h"
#include "crcuda/journal.h"

/* Type names as the store spells them (crc_jrec_type_name lives in the store library, which
 * crc_common does not link). */
static const char *type_name(uint32_t type)
{
	static const char *const names[] = {
	    [1] = "CONTEXT_CREATE",  [2] = "CONTEXT_SET",    [3] = "MODULE_LOAD",
	    [4] = "MODULE_UNLOAD",   [5] = "FUNCTION_GET",   [6] = "GLOBAL_GET",
	    [7] = "MEM_ALLOC",	     [8] = "MEM_FREE",	     [9] = "STREAM_CREATE",
	    [10] = "STREAM_DESTROY", [11] = "EVENT_CREATE",  [12] = "EVENT_DESTROY",
	    [13] = "LAUNCH_STATS",   [14] = "MEM_RESERVE",   [15] = "MEM_UNRESERVE",
	    [16] = "VMM_CREATE",     [17] = "VMM_RELEASE",   [18] = "VMM_MAP",
	    [19] = "VMM_UNMAP",	     [20] = "VMM_ACCESS",    [21] = "CONTEXT_DESTROY",
	    [22] = "FUNCTION_SET",   [23] = "OBJECT_CREATE", [24] = "OBJECT_DESTROY",
	    [25] = "ARRAY_MAP",
	};
	return type < sizeof(names) / sizeof(names[0]) && names[type] ? names[type] : "UNKNOWN";
}

static size_t a8(size_t v)
{
	return (v + 7) & ~(size_t)7;
}

size_t crc_jrec_size(unsigned nhandles, unsigned nrefs, size_t name_len, size_t args_len)
{
	return sizeof(struct crc_jrec_call) + 8 * (size_t)nhandles + 8 * (size_t)nrefs + a8(name_len) +
	       a8(args_len);
}

int crc_jrec_decode(const void *payload, size_t len, struct crc_jrec_view *v)
{
	const struct crc_jrec_call *c = payload;
	const uint8_t *p = payload;
	size_t off = sizeof(*c);

	if ((uintptr_t)payload % _Alignof(struct crc_jrec_call))
		return CRC_EINVAL;
	if (len < sizeof(*c) || c->version != CRC_JREC_VERSION ||
	    len < crc_jrec_size(c->nhandles, c->nrefs, c->name_len, c->args_len))
		return CRC_ECORRUPT;
	v->call = c;
	v->handles = (const uint64_t *)(p + off);
	off += 8 * (size_t)c->nhandles;
	v->refs = (const uint64_t *)(p + off);
	off += 8 * (size_t)c->nrefs;
	v->name = c->name_len ? (const char *)(p + off) : NULL;
	if (c->name_len && v->name[c->name_len - 1])
		return CRC_ECORRUPT;
	off += a8(c->name_len);
	v->args = p + off;
	return 0;
}

/* Decodes a payload where it lies, or a copy of it (*copy, to free) where it is not aligned for
 * struct crc_jrec_call: the store's payloads are only 2-byte aligned (LMDB values). */
static int decode_any(const void *payload, size_t len, struct crc_jrec_view *v, void **copy)
{
	*copy = NULL;
	if ((uintptr_t)payload % _Alignof(struct crc_jrec_call)) {
		*copy = malloc(len ? len : 1);
		if (!*copy)
			return CRC_ENOMEM;
		memcpy(*copy, payload, len);
		payload = *copy;
	}
	return crc_jrec_decode(payload, len, v);
}

static const char *call_name(uint16_t op)
{
	return op < CRC_CU_COUNT ? crc_cu_table[op].sym : "?";
}

/* Appends with snprintf semantics, tracking the total length. */
#define PUT(...)                                                                                             \
	do {                                                                                                 \
		int n_ =                                                                                     \
		    snprintf(buf + (used < len ? used : len), used < len ? len - used : 0, __VA_ARGS__);     \
		if (n_ > 0)                                                                                  \
			used += (size_t)n_;                                                                  \
	} while (0)

static void hex16(const uint8_t *h, char *out)
{
	for (int i = 0; i < 16; i++)
		sprintf(out + 2 * i, "%02x", h[i]);
}

static int all_zero(const uint8_t *h)
{
	for (int i = 0; i < 16; i++)
		if (h[i])
			return 0;
	return 1;
}

int crc_jrec_format_text(char *buf, size_t len, uint64_t seq, uint32_t type, const void *payload, size_t plen)
{
	struct crc_jrec_view v;
	size_t used = 0;
	char hex[33];
	void *copy;

	if (len)
		buf[0] = 0;
	PUT("%6" PRIu64 " %-15s", seq, type_name(type));
	if (decode_any(payload, plen, &v, &copy)) {
		free(copy);
		PUT(" (undecodable, %zu bytes)", plen);
		return (int)used;
	}
	PUT(" %s", call_name(v.call->op));
	if (v.call->ctx)
		PUT(" ctx=%#" PRIx64, v.call->ctx);
	if (v.name)
		PUT(" name=%s", v.name);
	for (unsigned i = 0; i < v.call->nhandles; i++)
		PUT(" -> %#" PRIx64, v.handles[i]);
	for (unsigned i = 0; i < v.call->nrefs; i++)
		if (v.refs[i] != v.call->ctx)
			PUT(" uses=%#" PRIx64, v.refs[i]);
	if (v.call->object)
		PUT(" object=%#" PRIx64, v.call->object);
	if (v.call->addr || v.call->size)
		PUT(" addr=%#" PRIx64 " size=%" PRIu64, v.call->addr, v.call->size);
	if (!all_zero(v.call->image_hash)) {
		hex16(v.call->image_hash, hex);
		PUT(" image=%s bytes=%" PRIu64, hex, v.call->image_bytes);
	}
	if (v.call->flags & CRC_JREC_LIBRARY)
		PUT(" library");
	free(copy);
	return (int)used;
}

int crc_jrec_format_json(char *buf, size_t len, uint64_t seq, uint32_t type, const void *payload, size_t plen)
{
	struct crc_jrec_view v;
	size_t used = 0;
	char hex[33];
	void *copy;

	if (len)
		buf[0] = 0;
	PUT("{\"seq\":%" PRIu64 ",\"type\":\"%s\"", seq, type_name(type));
	if (decode_any(payload, plen, &v, &copy)) {
		free(copy);
		PUT(",\"error\":\"undecodable\",\"bytes\":%zu}", plen);
		return (int)used;
	}
	PUT(",\"call\":\"%s\",\"ctx\":%" PRIu64 ",\"thread\":%u", call_name(v.call->op), v.call->ctx,
	    v.call->thread);
	if (v.name) {
		/* Mangled C++ names hold no quotes or backslashes; escape anyway. */
		PUT(",\"name\":\"");
		for (const char *c = v.name; *c; c++) {
			if (*c == '"' || *c == '\\')
				PUT("\\%c", *c);
			else if ((unsigned char)*c < 0x20)
				PUT("\\u%04x", *c);
			else
				PUT("%c", *c);
		}
		PUT("\"");
	}
	PUT(",\"handles\":[");
	for (unsigned i = 0; i < v.call->nhandles; i++)
		PUT("%s%" PRIu64, i ? "," : "", v.handles[i]);
	PUT("],\"refs\":[");
	for (unsigned i = 0; i < v.call->nrefs; i++)
		PUT("%s%" PRIu64, i ? "," : "", v.refs[i]);
	PUT("],\"object\":%" PRIu64 ",\"addr\":%" PRIu64 ",\"size\":%" PRIu64, v.call->object, v.call->addr,
	    v.call->size);
	if (!all_zero(v.call->image_hash)) {
		hex16(v.call->image_hash, hex);
		PUT(",\"image\":\"%s\",\"image_bytes\":%" PRIu64, hex, v.call->image_bytes);
	}
	PUT(",\"library\":%s,\"args_bytes\":%u}", v.call->flags & CRC_JREC_LIBRARY ? "true" : "false",
	    v.call->args_len);
	free(copy);
	return (int)used;
}
