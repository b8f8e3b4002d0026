/* Internals shared by the store's source files (and its tests). Not installed.
 *
 * LMDB named databases (all integers little-endian unless said otherwise; ids in keys big-endian so
 * that keys sort by id):
 *   meta       "schema_version" -> u32; "next_session", "next_ckpt" -> u64 (next id to hand out)
 *   sessions   id (be64) -> created_ns (i64), name bytes
 *   journal    session (be64), seq (be64) -> type (u32), length (u32), payload
 *   manifests  ckpt id (be64) -> encoded manifest (manifest.c)
 *   chunks     hash (16) -> pack id (u64), data offset (u64), length (u64)
 *   packs      pack id (be64) -> committed size (u64)
 *   blobs      session (be64), hash (16) -> length (u64): chunks pinned by a session's journal
 */
#ifndef CRCUDA_STORE_INTERNAL_H
#define CRCUDA_STORE_INTERNAL_H

#include <lmdb.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>

#include "crc_store.h"

#define PACK_MAGIC	  "CRCPACK1" /* 8 bytes at offset 0 of a pack file */
#define PACK_HEADER_SIZE  32u	     /* magic, version (u32), reserved (u32), pack id (u64), reserved */
#define PACK_VERSION	  1u
#define CHUNK_MAGIC	  0x4b484343u  /* "CCHK" */
#define CHUNK_HEADER_SIZE 32u	       /* magic (u32), reserved (u32), length (u64), hash (16) */
#define PACK_TARGET_SIZE  (1ull << 30) /* a writer starts a new pack file past this */
#define CHUNK_LOC_SIZE	  24u
#define STORE_MAP_SIZE	  (16ull << 30) /* LMDB map: sparse, grows on demand */

struct crc_store {
	MDB_env *env;
	MDB_dbi dbi_meta, dbi_sessions, dbi_journal, dbi_manifests, dbi_chunks, dbi_packs, dbi_blobs;
	char *dir;
	char *packs_dir;
	int packs_dir_fd;
	bool nosync; /* CRC_STORE_NOSYNC */
	uid_t owner; /* of the store directory */
	/* The last pack file opened for reading, kept open for sequential chunk reads. */
	int read_fd;
	uint64_t read_pack;
};

struct chunk_loc {
	uint64_t pack;
	uint64_t offset; /* of the chunk's data, past its header */
	uint64_t length;
};

static inline void put_le32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}
static inline void put_le64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}
static inline void put_be64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (56 - 8 * i));
}
static inline uint32_t get_le32(const uint8_t *p)
{
	uint32_t v = 0;
	for (int i = 3; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}
static inline uint64_t get_le64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}
static inline uint64_t get_be64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 0; i < 8; i++)
		v = (v << 8) | p[i];
	return v;
}

/* Maps an LMDB return code to a crcuda code, logging what failed. */
int crc__mdb_err(int rc, const char *what);
int64_t crc__now_ns(void);
/* Path of a pack file: "<packs_dir>/<16 hex>.pack" into buf (PATH_MAX). */
void crc__pack_path(const struct crc_store *st, uint64_t pack, char *buf, size_t len);
/* Parses "<16 hex>.pack"; returns false for other names. */
bool crc__pack_name_parse(const char *name, uint64_t *out);
int crc__chunk_locate(struct crc_store *st, MDB_txn *txn, const struct crc_hash *hash, struct chunk_loc *out);
void crc__chunk_loc_decode(const uint8_t *v, struct chunk_loc *out);
void crc__chunk_loc_encode(const struct chunk_loc *loc, uint8_t *v);
/* Reads and hashes a chunk at loc; buf must hold loc->length bytes. */
int crc__chunk_read_at(struct crc_store *st, const struct crc_hash *hash, const struct chunk_loc *loc,
		       void *buf);
int crc__session_check(struct crc_store *st, MDB_txn *txn, uint64_t session);

/* Writes chunks into new pack files. Each pack is flock'ed (LOCK_EX) from creation until the
 * commit that names it is done, so that gc can tell a live writer's pack from a dead one's. */
struct pack_file {
	uint64_t id;
	int fd;
	uint64_t size; /* bytes written so far (header included) */
};
struct pack_writer {
	struct crc_store *st;
	struct pack_file *files; /* the last one is being written */
	size_t nfiles, capfiles;
	uint8_t *buf; /* write-behind buffer: small chunks are gathered into large writes */
	size_t used, cap;
};
void crc__pw_init(struct pack_writer *pw, struct crc_store *st);
/* Appends one chunk; sets *out to where its data lives. */
int crc__pw_append(struct pack_writer *pw, const struct crc_hash *hash, const void *data, size_t len,
		   struct chunk_loc *out);
/* Writes out and fsyncs the pack file being written (it stays open and locked); the earlier ones
 * were sealed when the writer moved past them. */
int crc__pw_seal(struct pack_writer *pw);
/* Fsyncs the packs directory: new pack files' entries must be durable before a commit names them. */
int crc__packs_dir_sync(struct crc_store *st);
/* Closes the files (releasing their locks); with discard, unlinks them too. Frees the buffers. */
void crc__pw_release(struct pack_writer *pw, bool discard);

/* A set of 16-byte hashes with a u64 value each, open addressing. */
struct hset {
	struct hset_slot {
		struct crc_hash key;
		uint64_t value;
		bool used;
	} * slots;
	size_t cap, count;
};
/* Returns the slot for key (value untouched if it was there), or NULL when out of memory. */
struct hset_slot *crc__hset_insert(struct hset *s, const struct crc_hash *key, bool *out_new);
struct hset_slot *crc__hset_find(const struct hset *s, const struct crc_hash *key);
void crc__hset_free(struct hset *s);

/* Manifest encoding (manifest.c). */
int crc__manifest_encode(const struct crc_manifest *m, uint8_t **out, size_t *out_len);
int crc__manifest_decode(const void *data, size_t len, struct crc_manifest **out);

/* Test-only fault injection: when set, called at named points of the write paths (and between
 * small pieces of pack writes). The crash test sets it in a forked writer and raises SIGKILL. */
extern void (*crc__store_fault_hook)(const char *point);
#define STORE_FAULT(point)                                                                                   \
	do {                                                                                                 \
		if (crc__store_fault_hook)                                                                   \
			crc__store_fault_hook(point);                                                        \
	} while (0)

#endif
