/* Journal records: what crcudad writes for every state-creating call of a session (crc_store's
 * journal, enum crc_jrec_type), and how `crcudactl inspect` prints them.
 *
 * Every record's payload is one struct crc_jrec_call followed by, each 8-byte aligned:
 *   handles[nhandles]  u64 virtual handles the call created, in the order the daemon named them
 *   refs[nrefs]        u64 virtual handles the call used (the caller's context first, when any)
 *   name[name_len]     NUL-terminated symbol (function, kernel or global lookups), if any
 *   args[args_len]     the request's argument bytes after struct crc_call_hdr (crcuda/proto.h): the
 *                      generated marshalling, or a hand-marshalled request; module loads carry only
 *                      their struct crc_load_req (the image is the blob named by image_hash)
 * Host byte order (a store moves between machines of one architecture). Replay feeds args back
 * through the daemon's dispatch with the recorded handles and addresses forced. */
#ifndef CRCUDA_JOURNAL_H
#define CRCUDA_JOURNAL_H

#include <stddef.h>
#include <stdint.h>

#define CRC_JREC_VERSION 1u

enum crc_jrec_call_flag {
	CRC_JREC_LIBRARY = 1u << 0, /* MODULE_LOAD/UNLOAD, GLOBAL_GET: a CUlibrary, not a CUmodule */
};

struct crc_jrec_call {
	uint32_t version; /* CRC_JREC_VERSION */
	uint16_t op;	  /* the driver call (crc_cu_id) */
	uint16_t nhandles;
	uint16_t nrefs;
	uint16_t name_len; /* bytes including the NUL, 0 when none */
	uint32_t args_len;
	uint64_t ctx; /* the caller's context (virtual handle), 0 for none */
	uint32_t thread;
	uint32_t call_flags;	/* crc_call_hdr.flags */
	uint64_t object;	/* the handle a destroy/unload/release destroyed, 0 otherwise */
	uint64_t addr, size;	/* device memory the call created or dropped (allocations, VMM), else 0 */
	uint8_t image_hash[16]; /* MODULE_LOAD: the image's blob (crc_store_blob_put), else zero */
	uint64_t image_bytes;
	uint32_t flags; /* enum crc_jrec_call_flag */
	uint32_t pad;
};

/* A decoded record: pointers into the payload. */
struct crc_jrec_view {
	const struct crc_jrec_call *call;
	const uint64_t *handles;
	const uint64_t *refs;
	const char *name; /* NULL when none */
	const uint8_t *args;
};

/* Checks a payload's layout and fills *v. 0, CRC_ECORRUPT, or CRC_EINVAL when payload is not aligned
 * for struct crc_jrec_call (the store's are not: copy them). */
int crc_jrec_decode(const void *payload, size_t len, struct crc_jrec_view *v);
/* Bytes of a payload with these parts. */
size_t crc_jrec_size(unsigned nhandles, unsigned nrefs, size_t name_len, size_t args_len);

/* The formatters take a payload as the store gives it (any alignment). One line, no newline: "MEM_ALLOC
 * cuMemAlloc_v2 ctx=0x10100000001 addr=0x680000000000 size=2097152". Writes at most len bytes (NUL included);
 * returns what snprintf returns. */
int crc_jrec_format_text(char *buf, size_t len, uint64_t seq, uint32_t type, const void *payload,
			 size_t plen);
/* One JSON object, no newline: {"seq":1,"type":"MEM_ALLOC","call":"cuMemAlloc_v2",...}. */
int crc_jrec_format_json(char *buf, size_t len, uint64_t seq, uint32_t type, const void *payload,
			 size_t plen);

#endif
