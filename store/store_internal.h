/* Internals shared by the store's source files (and its tests). Not installed.
 *
 * LMDB named databases (all integers little-endian unless said otherwise; ids in keys big-endian so
 * that keys sort by id):
 *   meta       "schema_version" -> u32; "next_session", "next_ckpt" -> u64 (next id to hand out)
 *   sessions   id (be64) -> created_ns (i64), name bytes
 *   journal    session (be64), seq (be64) -> type (u32), length (u32), payload
 *   manifests  ckpt id (be64) -> encoded manifest (manifest.c)
 *   chunks     hash (16) -> pack id (u64), data offset (u64), length (u64): a chunk stored as is;
 *              a compressed one (schema 2) has 32 bytes: those three, then its stored length (u32)
 *              and its encoding (u32, CHUNK_ENC_*). length is always the uncompressed bytes' (the
 *              hash's) length.
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

#define PACK_MAGIC	 "CRCPACK1" /* 8 bytes at offset 0 of a pack file */
#define PACK_HEADER_SIZE 32u	    /* magic, version (u32), reserved (u32), pack id (u64), reserved */
#define PACK_VERSION	 1u
#define CHUNK_MAGIC	 0x4b484343u /* "CCHK" */
/* magic (u32), encoding (u32, CHUNK_ENC_*; was "reserved", 0, before schema 2), length (u64: the bytes that
 * follow, the stored ones), hash (16, of the uncompressed bytes). Readers go by the index, not by
 * this header; it keeps a pack file walkable header to header. */
#define CHUNK_HEADER_SIZE  32u
#define PACK_TARGET_SIZE   (1ull << 30) /* a writer starts a new pack file past this */
#define CHUNK_LOC_SIZE	   24u		/* index entry of a chunk stored as is */
#define CHUNK_LOC_SIZE_ENC 32u		/* ... of an encoded (compressed) one */

/* How a chunk's bytes are stored. Values are part of the on-disk format. */
enum chunk_encoding {
	CHUNK_ENC_RAW = 0,
	CHUNK_ENC_LZ4 = 1,  /* one LZ4 block (LZ4_compress_fast) */
	CHUNK_ENC_ZSTD = 2, /* one zstd frame */
	CHUNK_ENC_END
};

/* CRCUDA_STORE_COMPRESS: which chunks a writer compresses (codec.c says why auto is what it is). */
enum store_compress {
	STORE_COMPRESS_AUTO,
	STORE_COMPRESS_OFF,
	STORE_COMPRESS_LZ4,
	STORE_COMPRESS_ZSTD,
};
#define STORE_READERS_MAX 16		/* threads of crc_store_chunks_read */
#define STORE_MAP_SIZE	  (16ull << 30) /* LMDB map: sparse, grows on demand */

/* Memory a thread reuses to encode or decode chunks (codec.c). */
struct chunk_scratch {
	uint8_t *buf;
	size_t cap;
	void *zstd_cctx, *zstd_dctx;
};

struct crc_store {
	MDB_env *env;
	MDB_dbi dbi_meta, dbi_sessions, dbi_journal, dbi_manifests, dbi_chunks, dbi_packs, dbi_blobs;
	char *dir;
	char *packs_dir;
	int packs_dir_fd;
	bool nosync;		      /* CRC_STORE_NOSYNC */
	uint32_t schema;	      /* the store's schema version (1 until a compressed chunk is indexed) */
	enum store_compress compress; /* CRCUDA_STORE_COMPRESS */
	uid_t owner;		      /* of the store directory */
	/* The last pack file opened for reading, kept open for sequential chunk reads. */
	int read_fd;
	uint64_t read_pack;
	struct chunk_scratch *read_scratch; /* for decoding what crc_store_chunk_read reads */
	/* One per reader thread of crc_store_chunks_read, kept between calls: a restore reads a batch at
	 * a time, and a fresh 4 MiB buffer per thread and batch would cost its page faults each time. */
	struct chunk_scratch batch_scratch[STORE_READERS_MAX];
};

struct chunk_loc {
	uint64_t pack;
	uint64_t offset;   /* of the chunk's data, past its header */
	uint64_t length;   /* of the chunk's (uncompressed) bytes */
	uint64_t stored;   /* bytes in the pack file (length when raw) */
	uint32_t encoding; /* CHUNK_ENC_* */
};

void crc__scratch_free(struct chunk_scratch *s);
/* Parses CRCUDA_STORE_COMPRESS (unset or empty: auto); an unknown value is warned about once and
 * taken as auto. */
enum store_compress crc__compress_policy(void);
const char *crc__encoding_name(uint32_t encoding);
/* Decides how to store len bytes of data under policy: returns CHUNK_ENC_RAW (store data as is) or
 * an encoding with *out pointing at *out_len encoded bytes in scratch (valid until its next use).
 * Never fails: out of memory or a codec error means raw. */
uint32_t crc__chunk_encode(enum store_compress policy, bool durable, const void *data, size_t len,
			   struct chunk_scratch *scratch, const void **out, size_t *out_len);
/* Decodes stored bytes into dst, which must come out exactly dst_len long. Returns 0 or CRC_ECORRUPT
 * (a damaged or truncated stream, or one of another length). */
int crc__chunk_decode(uint32_t encoding, const void *src, size_t src_len, void *dst, size_t dst_len,
		      struct chunk_scratch *scratch);

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
/* Decodes an index entry of size bytes; CRC_ECORRUPT for a size or encoding it cannot be. */
int crc__chunk_loc_decode(const void *v, size_t size, struct chunk_loc *out);
/* Encodes into v (CHUNK_LOC_SIZE_ENC bytes); returns the entry's size. */
size_t crc__chunk_loc_encode(const struct chunk_loc *loc, uint8_t *v);
/* Reads and hashes a chunk at loc; buf must hold loc->length bytes. */
int crc__chunk_read_at(struct crc_store *st, const struct crc_hash *hash, const struct chunk_loc *loc,
		       void *buf);
int crc__session_check(struct crc_store *st, MDB_txn *txn, uint64_t session);
/* In txn, raises the store's schema record to CRC_STORE_SCHEMA_VERSION (before a compressed chunk is
 * indexed); the caller sets st->schema after the commit. */
int crc__schema_upgrade(struct crc_store *st, MDB_txn *txn);

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
	struct chunk_scratch enc; /* compressed chunks */
};
void crc__pw_init(struct pack_writer *pw, struct crc_store *st);
/* Appends one chunk, compressed where the store's policy says it pays; sets *out to where its data
 * lives and how it is stored. */
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
