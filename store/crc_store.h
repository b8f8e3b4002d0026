/* crcuda's durable store: one LMDB environment (sessions, per-session journals, checkpoint
 * manifests, the index of content-addressed chunks) plus pack files holding the chunks' bytes.
 *
 * On-disk layout of a store directory:
 *   data.mdb, lock.mdb   the LMDB environment (named databases: meta, sessions, journal, manifests,
 *                        chunks, packs, blobs; see store/store_internal.h)
 *   packs/<16 hex>.pack  pack files: a 32-byte header, then chunks, each a 32-byte header (magic,
 *                        encoding, stored length, XXH3-128 hash of the uncompressed bytes) followed
 *                        by its bytes, as they are or compressed (LZ4 or zstd; CRCUDA_STORE_COMPRESS)
 *
 * A checkpoint becomes visible only through the one LMDB transaction that names every chunk it
 * needs; pack files are fsync'd before that transaction. A writer killed at any point leaves the
 * previous checkpoints intact; what it wrote is garbage that crc_store_gc() removes.
 *
 * Every function returns 0 or a negative crcuda error code (crcuda/errno.h). A store handle may be
 * used by one thread at a time (except crc_ckpt_put_chunk_at, one thread per lane, and its chunk
 * readers, one thread each), and must not be used across fork(). */
#ifndef CRCUDA_STORE_H
#define CRCUDA_STORE_H

#include <stddef.h>
#include <stdint.h>

/* The on-disk formats this code reads and writes; crc_store_open() refuses any other. Version 2 added
 * compressed chunks; a version 1 store stays version 1 until a commit indexes a compressed chunk
 * (then an older crcuda refuses it with CRC_ESCHEMA instead of misreading it). New stores are 2. */
#define CRC_STORE_SCHEMA_VERSION 2
#define CRC_STORE_SCHEMA_OLDEST	 1

struct crc_store;
struct crc_ckpt;

/* A chunk's content address: XXH3-128 of its bytes, canonical (big-endian) byte order. */
struct crc_hash {
	uint8_t bytes[16];
};
#define CRC_HASH_HEX_LEN 32

/* Writes 32 lowercase hex digits and a NUL into hex (CRC_HASH_HEX_LEN + 1 bytes). */
void crc_hash_to_hex(const struct crc_hash *hash, char *hex);
/* Parses 32 hex digits. Returns 0 or CRC_EINVAL. */
int crc_hash_from_hex(const char *hex, struct crc_hash *out);
/* Hashes len bytes of data into out. */
void crc_hash_compute(const void *data, size_t len, struct crc_hash *out);

/** @defgroup open_flags crc_store_open() flags
 * @{ */
/* Create the directory (and parents) and an empty store if none is there. */
#define CRC_STORE_CREATE 0x1u
/* Do not fsync pack files before a commit names them. A process killed at any point still leaves the
 * previous checkpoint intact (the page cache outlives it); a power loss may not. Also set by the
 * environment: CRCUDA_STORE_SYNC=0 (so a daemon's checkpoints follow its environment). */
#define CRC_STORE_NOSYNC 0x2u
/** @} */

/** Opens (or with CRC_STORE_CREATE creates) the store in dir.
 * @param[in] dir the store directory
 * @param[in] flags CRC_STORE_* flags
 * @param[out] out the new handle; close it with crc_store_close()
 * @retval CRC_EINVAL dir or out is NULL, or unknown flags
 * @retval CRC_ENOENT no store in dir and CRC_STORE_CREATE not given
 * @retval CRC_ESCHEMA the store was written with another schema version (the log names both)
 * @retval CRC_EPERM the store directory belongs to another user and the caller is not root
 * @retval CRC_ECORRUPT the LMDB environment or its schema record is damaged
 * @retval CRC_EDB another LMDB failure
 * @retval CRC_ENOMEM, or -errno from mkdir/open */
int crc_store_open(const char *dir, unsigned flags, struct crc_store **out);
/* Closes the handle. NULL is allowed. */
void crc_store_close(struct crc_store *st);
/* The directory the store was opened in. */
const char *crc_store_dir(const struct crc_store *st);

/** Creates a session (one client process of the daemon).
 * @param[in] name free-form, for humans (may be NULL)
 * @param[out] out_id the new session's id (ids start at 1 and are never reused)
 * @retval CRC_EINVAL st or out_id is NULL
 * @retval CRC_ENOSPC the LMDB map is full
 * @retval CRC_EDB, CRC_ECORRUPT LMDB failures */
int crc_store_session_create(struct crc_store *st, const char *name, uint64_t *out_id);

/* Journal record types. Values are part of the on-disk format: never renumber, only append.
 * Payload layouts are defined by the components that write them (later issues). */
enum crc_jrec_type {
	CRC_JREC_CONTEXT_CREATE = 1, /* device ordinal, flags */
	CRC_JREC_CONTEXT_SET = 2,    /* a setting replayed as made: a context's limit, cache or shared-
					memory configuration, a stream's attribute */
	CRC_JREC_MODULE_LOAD = 3,    /* image by content hash (crc_store_blob_put), module handle */
	CRC_JREC_MODULE_UNLOAD = 4,
	CRC_JREC_FUNCTION_GET = 5, /* module handle, mangled name, function handle */
	CRC_JREC_GLOBAL_GET = 6,   /* module handle, symbol name, address, size */
	CRC_JREC_MEM_ALLOC = 7,	   /* virtual address, size, flags */
	CRC_JREC_MEM_FREE = 8,
	CRC_JREC_STREAM_CREATE = 9,
	CRC_JREC_STREAM_DESTROY = 10,
	CRC_JREC_EVENT_CREATE = 11,
	CRC_JREC_EVENT_DESTROY = 12,
	CRC_JREC_LAUNCH_STATS = 13, /* launch counts and the last few launches, for debugging */
	CRC_JREC_MEM_RESERVE = 14,  /* cuMemAddressReserve: address, size */
	CRC_JREC_MEM_UNRESERVE = 15,
	CRC_JREC_VMM_CREATE = 16, /* cuMemCreate / cuMemRetainAllocationHandle: the handle */
	CRC_JREC_VMM_RELEASE = 17,
	CRC_JREC_VMM_MAP = 18, /* cuMemMap: address, size, handle */
	CRC_JREC_VMM_UNMAP = 19,
	CRC_JREC_VMM_ACCESS = 20, /* cuMemSetAccess */
	CRC_JREC_CONTEXT_DESTROY = 21,
	CRC_JREC_FUNCTION_SET = 22,   /* function/kernel attributes and cache configuration */
	CRC_JREC_OBJECT_CREATE = 23,  /* any other call that created a handle */
	CRC_JREC_OBJECT_DESTROY = 24, /* a destroy of such a handle (arrays) */
	CRC_JREC_ARRAY_MAP = 25,      /* cuMemMapArrayAsync: one entry, tiles of a sparse array mapped or
					 unmapped, replayed in order on the legacy stream */
	CRC_JREC_TYPE_END
};
/* "MODULE_LOAD"; "UNKNOWN" for values outside the enum. */
const char *crc_jrec_type_name(uint32_t type);

/* Largest journal payload accepted. */
#define CRC_JREC_MAX_PAYLOAD (16u << 20)

/** Appends one record to a session's journal, durably (one LMDB commit).
 * @param[in] session a session id from crc_store_session_create()
 * @param[in] type a crc_jrec_type
 * @param[in] payload len bytes (may be NULL when len is 0)
 * @param[out] out_seq the record's sequence number, 1 for a session's first record (may be NULL)
 * @retval CRC_EINVAL bad arguments, or len > CRC_JREC_MAX_PAYLOAD
 * @retval CRC_ENOTFOUND no such session
 * @retval CRC_ENOSPC, CRC_EDB, CRC_ECORRUPT LMDB failures */
int crc_store_journal_append(struct crc_store *st, uint64_t session, uint32_t type, const void *payload,
			     uint32_t len, uint64_t *out_seq);

/* One record of a batch (crc_store_journal_append_batch). */
struct crc_jrec_in {
	uint32_t type;
	uint32_t len;
	const void *payload;
};

/** Appends n records to a session's journal in one LMDB transaction (all or none).
 * @param[out] out_last_seq the last record's sequence number (may be NULL)
 * @retval as crc_store_journal_append */
int crc_store_journal_append_batch(struct crc_store *st, uint64_t session, const struct crc_jrec_in *recs,
				   size_t n, uint64_t *out_last_seq);

/* Called for each record in order. Return 0 to go on; any other value stops the iteration and
 * becomes crc_store_journal_iterate()'s result. payload is valid only during the call. */
typedef int (*crc_journal_fn)(void *arg, uint64_t seq, uint32_t type, const void *payload, uint32_t len);

/** Calls fn for each record of a session's journal, oldest first.
 * @retval CRC_EINVAL bad arguments
 * @retval CRC_ENOTFOUND no such session
 * @retval CRC_ECORRUPT a record whose header does not match its length
 * @retval CRC_EDB an LMDB failure
 * @retval other whatever fn returned when it stopped the iteration */
int crc_store_journal_iterate(struct crc_store *st, uint64_t session, crc_journal_fn fn, void *arg);

/** Stores bytes that a session's journal refers to by hash (a module image), as one chunk, and pins
 * it to the session so that gc keeps it. Bytes already in the store are not written again.
 * @param[out] out_hash the content hash to put in the journal record
 * @retval CRC_EINVAL bad arguments (len must be 1..CRC_CHUNK_MAX)
 * @retval CRC_ENOTFOUND no such session
 * @retval CRC_EIO, -errno writing the pack file
 * @retval CRC_ENOSPC, CRC_EDB, CRC_ECORRUPT LMDB failures */
int crc_store_blob_put(struct crc_store *st, uint64_t session, const void *data, size_t len,
		       struct crc_hash *out_hash);

/** Pins to a session bytes the store holds already (put by another session, or as a chunk), as
 * crc_store_blob_put would without them: an import whose source left out a module image the store has.
 * @retval CRC_ENOTFOUND no such session, or the store does not hold the bytes
 * @retval CRC_EINVAL bad arguments, or the bytes held under that hash are not len long
 * @retval CRC_EDB, CRC_ECORRUPT LMDB failures */
int crc_store_blob_pin(struct crc_store *st, uint64_t session, const struct crc_hash *hash, uint64_t len);

/* Largest chunk (crc_ckpt_put_chunk, crc_store_blob_put). */
#define CRC_CHUNK_MAX (1u << 30)

/* What a manifest region holds. Values are part of the on-disk format. */
enum crc_region_kind {
	CRC_REGION_DEVICE_ALLOC = 1,  /* device allocation at addr, size bytes */
	CRC_REGION_DEVICE_GLOBAL = 2, /* __device__/__constant__ variable name of module (image hash) */
	CRC_REGION_HOST = 3,	      /* host-side bytes the daemon keeps (e.g. pinned host memory) */
	CRC_REGION_OTHER = 4,
};
/* "device-alloc", "device-global", "host", "other"; "unknown" otherwise. */
const char *crc_region_kind_name(uint32_t kind);

struct crc_region_desc {
	uint32_t kind;		/* crc_region_kind */
	uint64_t addr;		/* device virtual address, or 0 */
	uint64_t size;		/* bytes; the region's chunks must add up to exactly this */
	const char *name;	/* symbol name, or NULL */
	struct crc_hash module; /* image hash of the module a global lives in, or all zero */
};

/** Starts writing a checkpoint of a session. Nothing is visible until crc_ckpt_commit().
 * @param[out] out the checkpoint under construction; finish it with crc_ckpt_commit or crc_ckpt_abort
 * @retval CRC_EINVAL bad arguments
 * @retval CRC_ENOTFOUND no such session
 * @retval CRC_ENOMEM, CRC_EDB */
int crc_ckpt_begin(struct crc_store *st, uint64_t session, struct crc_ckpt **out);
/** Adds a region; its chunks come from crc_ckpt_put_chunk() with the returned index.
 * @param[out] out_index the region's index in the manifest
 * @retval CRC_EINVAL bad arguments
 * @retval CRC_ENOMEM */
int crc_ckpt_region_add(struct crc_ckpt *ck, const struct crc_region_desc *desc, uint32_t *out_index);
/** Appends len bytes as the next chunk of a region, through lane 0. The bytes are hashed; a chunk
 * already in the store (or already in this checkpoint) is not written again. Large chunks (MiBs)
 * give the best throughput.
 * @param[out] out_hash the chunk's hash (may be NULL)
 * @retval CRC_EINVAL bad arguments (len must be 1..CRC_CHUNK_MAX)
 * @retval CRC_EIO, -errno writing the pack file (the checkpoint can then only be aborted)
 * @retval CRC_ENOMEM, CRC_EDB */
int crc_ckpt_put_chunk(struct crc_ckpt *ck, uint32_t region, const void *data, size_t len,
		       struct crc_hash *out_hash);
/* Most lanes a checkpoint may have (crc_ckpt_set_lanes). */
#define CRC_CKPT_LANES_MAX 32

/** Lets n threads put chunks at once (crc_ckpt_put_chunk_at), each through its own lane 0..n-1 with
 * pack files of its own, so that hashing and writing run in parallel. A checkpoint starts with one
 * lane; call this before its first chunk.
 * @retval CRC_EINVAL n is 0 or above CRC_CKPT_LANES_MAX, or chunks were already put
 * @retval CRC_ENOMEM */
int crc_ckpt_set_lanes(struct crc_ckpt *ck, unsigned n);
/** Puts len bytes as chunk chunk_index of a region, through a lane: as crc_ckpt_put_chunk, but
 * several threads may call it at once, one per lane, and a region's chunks may come in any order.
 * Every index from 0 up must be put (once) before the commit. The lanes share one dedup set: bytes
 * put twice, even by two lanes at once, are written once. Other calls on the checkpoint and its store
 * wait until every put has returned.
 * @param[in] lane 0..lanes-1 (crc_ckpt_set_lanes)
 * @param[in] chunk_index the chunk's position in the region (below the region's size)
 * @retval CRC_EINVAL bad arguments, or an index put before (then the checkpoint can only be aborted)
 * @retval as crc_ckpt_put_chunk otherwise */
int crc_ckpt_put_chunk_at(struct crc_ckpt *ck, unsigned lane, uint32_t region, uint32_t chunk_index,
			  const void *data, size_t len, struct crc_hash *out_hash);
/** Names a chunk the store already holds (put by an earlier checkpoint, or by this one) as chunk
 * chunk_index of a region, without its bytes: what an incremental checkpoint does for memory that
 * has not changed since. Same threading as crc_ckpt_put_chunk_at.
 * @retval 0 named
 * @retval CRC_ENOTFOUND the store does not hold it (collected since): put the bytes instead
 * @retval CRC_EINVAL bad arguments, or the chunk was put already */
int crc_ckpt_ref_chunk_at(struct crc_ckpt *ck, unsigned lane, uint32_t region, uint32_t chunk_index,
			  const struct crc_hash *hash, size_t len);
/** Records the device digest of chunk chunk_index of a region (before or after the chunk is put or
 * named; any thread): the manifest carries it for the restore's check on the device. {0, 0} is none.
 * @retval CRC_EINVAL bad arguments
 * @retval CRC_ENOMEM */
int crc_ckpt_set_digest_at(struct crc_ckpt *ck, uint32_t region, uint32_t chunk_index,
			   const uint64_t digest[2]);
/** Sets a free-form metadata key (e.g. "criu.images_dir"); a second call replaces the value.
 * @retval CRC_EINVAL bad arguments
 * @retval CRC_ENOMEM */
int crc_ckpt_meta_set(struct crc_ckpt *ck, const char *key, const char *value);
/** Makes what was put so far durable without committing: fsyncs the pack files (the lanes' in
 * parallel) and the packs directory, so that the commit has only its LMDB transaction left. A caller
 * that can still back out (the application not yet let go) calls it first: a full or failing disk
 * then fails here. The commit syncs again whatever was put after it.
 * @retval CRC_EIO, -errno writing or syncing pack files (the checkpoint can then only be aborted)
 * @retval CRC_EINVAL ck is NULL */
int crc_ckpt_sync(struct crc_ckpt *ck);
/** Makes the checkpoint durable and visible: fsyncs its pack files (the lanes' in parallel), then
 * commits one LMDB transaction holding the chunk index entries and the manifest. Frees ck whatever
 * the result.
 * @param[out] out_id the checkpoint id (may be NULL)
 * @retval CRC_EINVAL a region whose chunks do not add up to its size, or with a chunk never put
 * @retval CRC_EAGAIN a chunk this checkpoint reused was removed by a concurrent gc; retry
 * @retval CRC_ENOTFOUND the session was removed meanwhile
 * @retval CRC_EIO, -errno writing or syncing pack files
 * @retval CRC_ENOSPC, CRC_EDB, CRC_ECORRUPT LMDB failures */
int crc_ckpt_commit(struct crc_ckpt *ck, uint64_t *out_id);

/* Bytes this checkpoint wrote to the store so far: chunks the store already held (an unchanged region,
 * a dedup hit) are not written again and do not count. Uncompressed bytes. */
uint64_t crc_ckpt_new_bytes(const struct crc_ckpt *ck);
/* What those new chunks take in the pack files (less than crc_ckpt_new_bytes where they compressed). */
uint64_t crc_ckpt_stored_bytes(const struct crc_ckpt *ck);
/* Drops the checkpoint and deletes the pack files it wrote (every lane's). NULL is allowed. */
void crc_ckpt_abort(struct crc_ckpt *ck);

struct crc_chunk_ref {
	struct crc_hash hash;
	uint64_t length;
	/* The chunk's device digest (crcudad/worker/digest.h) where the checkpoint computed one, else
	 * {0, 0}: a restore may then check the bytes it uploaded on the device instead of hashing them
	 * on the way (a function of the bytes, like the hash). */
	uint64_t digest[2];
};

struct crc_region {
	uint32_t kind;
	uint64_t addr;
	uint64_t size;
	char *name; /* NULL when none */
	struct crc_hash module;
	uint32_t nchunks;
	struct crc_chunk_ref *chunks;
};

struct crc_meta_kv {
	char *key;
	char *value;
};

struct crc_manifest {
	uint64_t ckpt_id;
	uint64_t session_id;
	int64_t created_ns; /* CLOCK_REALTIME */
	uint32_t nregions;
	struct crc_region *regions;
	uint32_t nmeta;
	struct crc_meta_kv *meta;
};

/** Reads a checkpoint's manifest.
 * @param[out] out the manifest; free it with crc_manifest_free()
 * @retval CRC_EINVAL bad arguments
 * @retval CRC_ENOTFOUND no such checkpoint
 * @retval CRC_ECORRUPT the stored manifest cannot be decoded
 * @retval CRC_ENOMEM, CRC_EDB */
int crc_store_manifest_get(struct crc_store *st, uint64_t ckpt_id, struct crc_manifest **out);
void crc_manifest_free(struct crc_manifest *m);
/* The value of a metadata key, or NULL. */
const char *crc_manifest_meta_get(const struct crc_manifest *m, const char *key);
/* The uid a checkpoint belongs to: its crcuda.uid (the checkpointed process's user, which crcudad
 * records), else the owner of the store. */
unsigned crc_manifest_owner(const struct crc_store *st, const struct crc_manifest *m);
/** Whether uid may restore the checkpoint: root, or the checkpoint's owner (crc_manifest_owner).
 * @param[out] why the reason, naming both uids, when it may not (may be NULL)
 * @retval CRC_EPERM it may not */
int crc_manifest_check_owner(const struct crc_store *st, const struct crc_manifest *m, unsigned uid,
			     char *why, size_t why_len);
/** Lists checkpoint ids, ascending.
 * @param[out] out_ids malloc'd array (free() it; NULL when there are none)
 * @param[out] out_count number of ids
 * @retval CRC_EINVAL, CRC_ENOMEM, CRC_EDB */
int crc_store_manifest_list(struct crc_store *st, uint64_t **out_ids, size_t *out_count);
/** Deletes a checkpoint's manifest; its chunks go at the next crc_store_gc().
 * @retval CRC_EINVAL, CRC_ENOTFOUND, CRC_EDB */
int crc_store_manifest_delete(struct crc_store *st, uint64_t ckpt_id);

/** How a checkpoint's distinct chunks are stored (from the index; reads no chunk).
 * @param[out] out_bytes their (uncompressed) bytes; a chunk named twice counts once
 * @param[out] out_stored what they take in the pack files
 * @param[out] out_compressed how many of them are stored compressed (may be NULL)
 * @retval CRC_EINVAL, CRC_ENOMEM, CRC_EDB, CRC_ECORRUPT (a damaged index entry)
 * @retval CRC_ENOTFOUND the manifest names a chunk the index lacks (run verify) */
int crc_store_manifest_stored(struct crc_store *st, const struct crc_manifest *m, uint64_t *out_bytes,
			      uint64_t *out_stored, uint64_t *out_compressed);

/** Reads a chunk, decodes it when stored compressed, and checks its hash.
 * @param[out] buf buflen bytes; the chunk must fit
 * @param[out] out_len the chunk's length (also set when CRC_EINVAL says buf is too small)
 * @retval CRC_EINVAL bad arguments, or buflen smaller than the chunk
 * @retval CRC_ENOTFOUND no such chunk in the index
 * @retval CRC_ECORRUPT the bytes read (decoded) do not hash to the chunk's address, or compressed
 *         bytes that do not decode to the chunk's length
 * @retval CRC_ETRUNC the pack file ends before the chunk does
 * @retval CRC_EIO, -errno reading the pack file */
int crc_store_chunk_read(struct crc_store *st, const struct crc_hash *hash, void *buf, size_t buflen,
			 size_t *out_len);

/* Reads n chunks, chunk i into bufs[i] (at least lens[i] bytes, where *lens[i] on return is its
 * length), each checked against its hash, with up to `threads` threads reading and hashing at once
 * (restore's upload path; the store handle must not be used by another thread meanwhile).
 * @retval CRC_ENOTFOUND, CRC_ECORRUPT, CRC_ETRUNC, CRC_EINVAL (a buffer too small) as
 *         crc_store_chunk_read, for the first chunk that failed */
int crc_store_chunks_read(struct crc_store *st, const struct crc_hash *hashes, size_t n, void *const *bufs,
			  size_t *lens, unsigned threads);

/* A chunk reader for one thread, with its own pack file descriptor and decode buffer: several threads
 * may read chunks of one store at once, each through its own reader (restore's upload), while the
 * handle does nothing else. */
struct crc_chunk_reader;
/* Makes a reader of st (close it before the store). Returns 0, CRC_EINVAL or CRC_ENOMEM. */
int crc_chunk_reader_open(struct crc_store *st, struct crc_chunk_reader **out);
/* Reads the chunk of that hash into buf (buflen bytes at least: its length is *out_len), checked
 * against its hash. Errors as crc_store_chunk_read. */
int crc_chunk_reader_read(struct crc_chunk_reader *r, const struct crc_hash *hash, void *buf, size_t buflen,
			  size_t *out_len);
/* The same without hashing the bytes (lengths and compressed data are still checked): for a caller
 * that checks them otherwise, as a restore does on the device against the chunk's digest. */
int crc_chunk_reader_read_unverified(struct crc_chunk_reader *r, const struct crc_hash *hash, void *buf,
				     size_t buflen, size_t *out_len);
/* NULL is allowed. */
void crc_chunk_reader_close(struct crc_chunk_reader *r);

/* One problem crc_store_verify() found. what is a short sentence; id names the object (a chunk hash
 * in hex, a pack file name, "ckpt 3"); err is CRC_ECORRUPT, CRC_ETRUNC or CRC_ENOTFOUND. */
typedef void (*crc_problem_fn)(void *arg, int err, const char *id, const char *what);

struct crc_verify_report {
	uint64_t manifests;	/* manifests checked */
	uint64_t chunks;	/* indexed chunks read and hashed */
	uint64_t bytes;		/* their (uncompressed) bytes */
	uint64_t stored_bytes;	/* what they take in the pack files */
	uint64_t packs;		/* pack files checked */
	uint64_t orphan_packs;	/* pack files no commit names (a killed writer's; gc removes them) */
	uint64_t problems;	/* corrupt, truncated or missing objects */
	uint64_t bad_manifests; /* manifests that name a missing or damaged chunk */
};

/** Reads every indexed chunk and checks its hash, checks every pack file's header and length, and
 * checks that every manifest and pinned blob names only chunks that exist. Problems go to fn (may
 * be NULL) and are counted in the report.
 * @param[out] out the counts (may be NULL)
 * @retval 0 the store is consistent
 * @retval CRC_ECORRUPT at least one problem was found (details through fn and the log)
 * @retval CRC_EINVAL, CRC_ENOMEM, CRC_EDB, -errno when verify itself could not run */
int crc_store_verify(struct crc_store *st, crc_problem_fn fn, void *arg, struct crc_verify_report *out);

struct crc_gc_report {
	uint64_t chunks_removed;       /* index entries no manifest or blob names */
	uint64_t packs_removed;	       /* pack files left with no live chunk */
	uint64_t orphan_packs_removed; /* pack files of writers that died before committing */
	uint64_t bytes_freed;	       /* size of the removed pack files */
	uint64_t bytes_dead_retained;  /* dead chunk bytes in packs that still hold live chunks */
};

/** Removes index entries of chunks that no manifest or pinned blob names, pack files without live
 * chunks, and pack files of writers that died (not named by any commit and not locked by a live
 * writer). The index changes in one transaction before any file is unlinked.
 * @param[out] out the counts (may be NULL)
 * @retval CRC_EINVAL, CRC_ENOMEM, CRC_ECORRUPT (a manifest cannot be decoded: nothing is removed)
 * @retval CRC_EDB, -errno */
int crc_store_gc(struct crc_store *st, struct crc_gc_report *out);

/** Removes CRIU image directories (<store>/criu/<name>) that no manifest names in its
 * "criu.images_dir" (a failed or killed checkpoint's), except those locked by a checkpoint in progress
 * (flock on the directory, held until after its commit) or younger than a minute.
 * @param before_remove called with each directory's path before it is removed (may be NULL): what
 *        the dump made outside it (crcudactl's CRIU link remaps) goes with it
 * @param[out] dirs_removed, bytes_freed counts (may be NULL)
 * @retval CRC_EINVAL, CRC_ENOMEM, or a manifest read error (then nothing is removed) */
int crc_store_gc_criu(struct crc_store *st, void (*before_remove)(const char *dir), uint64_t *dirs_removed,
		      uint64_t *bytes_freed);

struct crc_store_stat {
	uint64_t sessions;
	uint64_t manifests;
	uint64_t chunks;
	uint64_t chunk_bytes;	     /* the chunks' (uncompressed) bytes */
	uint64_t chunk_stored_bytes; /* what they take in pack files (compressed where it paid) */
	uint64_t chunks_compressed;
	uint64_t packs;
	uint64_t pack_bytes;
};
/** Counts what the store holds (from the index; reads no chunk).
 * @retval CRC_EINVAL, CRC_EDB */
int crc_store_stat(struct crc_store *st, struct crc_store_stat *out);

#endif
