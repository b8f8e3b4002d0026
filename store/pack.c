/* Pack files: writing chunks in large sequential writes, reading them back with their hash checked. */
#define LOG_PREFIX "store: "

#include <errno.h>
#include <stdatomic.h>
#include <pthread.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "crcuda/xxh3.h"
#include "crcuda/errno.h"
#include "crcuda/log.h"
#include "store_internal.h"

/* Writes are gathered to this size; chunks at least half as big bypass the buffer. */
#define PW_BUF_SIZE (8u << 20)
/* With a fault hook set, writes go in pieces this big so a test can stop a writer mid-file. */
#define FAULT_PIECE (256u << 10)

void crc__pack_path(const struct crc_store *st, uint64_t pack, char *buf, size_t len)
{
	snprintf(buf, len, "%s/%016" PRIx64 ".pack", st->packs_dir, pack);
}

bool crc__pack_name_parse(const char *name, uint64_t *out)
{
	if (strlen(name) != 21 || strcmp(name + 16, ".pack"))
		return false;
	uint64_t v = 0;
	for (int i = 0; i < 16; i++) {
		char c = name[i];
		int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
		if (d < 0)
			return false;
		v = v << 4 | (uint64_t)d;
	}
	*out = v;
	return true;
}

int crc__chunk_loc_decode(const void *v, size_t size, struct chunk_loc *out)
{
	const uint8_t *p = v;
	if (size != CHUNK_LOC_SIZE && size != CHUNK_LOC_SIZE_ENC)
		return CRC_ECORRUPT;
	out->pack = get_le64(p);
	out->offset = get_le64(p + 8);
	out->length = get_le64(p + 16);
	out->stored = out->length;
	out->encoding = CHUNK_ENC_RAW;
	if (size == CHUNK_LOC_SIZE_ENC) {
		out->stored = get_le32(p + 24);
		out->encoding = get_le32(p + 28);
		/* An encoded chunk is there because it came out smaller. */
		if (out->encoding == CHUNK_ENC_RAW || out->encoding >= CHUNK_ENC_END || !out->stored ||
		    out->stored >= out->length)
			return CRC_ECORRUPT;
	}
	return 0;
}

size_t crc__chunk_loc_encode(const struct chunk_loc *loc, uint8_t *v)
{
	put_le64(v, loc->pack);
	put_le64(v + 8, loc->offset);
	put_le64(v + 16, loc->length);
	if (loc->encoding == CHUNK_ENC_RAW)
		return CHUNK_LOC_SIZE;
	put_le32(v + 24, (uint32_t)loc->stored);
	put_le32(v + 28, loc->encoding);
	return CHUNK_LOC_SIZE_ENC;
}

static int write_all(int fd, const void *data, size_t len)
{
	const uint8_t *p = data;
	while (len) {
		size_t n = len;
		if (crc__store_fault_hook && n > FAULT_PIECE)
			n = FAULT_PIECE;
		ssize_t w = write(fd, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return -errno;
		p += w;
		len -= (size_t)w;
		STORE_FAULT("pack-write-piece");
	}
	return 0;
}

void crc__pw_init(struct pack_writer *pw, struct crc_store *st)
{
	memset(pw, 0, sizeof(*pw));
	pw->st = st;
}

static int pw_flush(struct pack_writer *pw)
{
	if (!pw->used)
		return 0;
	struct pack_file *pf = &pw->files[pw->nfiles - 1];
	int rc = write_all(pf->fd, pw->buf, pw->used);
	if (rc) {
		pr_err("writing pack %016" PRIx64 ": %s", pf->id, strerror(-rc));
		return rc;
	}
	pw->used = 0;
	return 0;
}

static void buf_put(struct pack_writer *pw, const void *data, size_t len)
{
	memcpy(pw->buf + pw->used, data, len);
	pw->used += len;
}

/* Creates a new pack file, locked, and queues its header. */
static int pw_new_file(struct pack_writer *pw)
{
	char path[PATH_MAX];
	int rc, fd = -1;
	uint64_t id;
	if (pw->nfiles == pw->capfiles) {
		size_t cap = pw->capfiles ? pw->capfiles * 2 : 4;
		struct pack_file *files = realloc(pw->files, cap * sizeof(*files));
		if (!files)
			return CRC_ENOMEM;
		pw->files = files;
		pw->capfiles = cap;
	}
	for (;;) {
		if (getrandom(&id, sizeof(id), 0) != sizeof(id))
			return -errno;
		crc__pack_path(pw->st, id, path, sizeof(path));
		fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
		if (fd < 0 && errno == EEXIST)
			continue;
		if (fd < 0) {
			rc = -errno;
			pr_perror("creating %s", path);
			return rc;
		}
		if (flock(fd, LOCK_EX)) {
			rc = -errno;
			pr_perror("locking %s", path);
			close(fd);
			unlink(path);
			return rc;
		}
		/* gc unlinks unlocked packs that no commit names: if one did between our open and flock,
		 * this file is gone and we start over with another name. */
		struct stat sb;
		if (fstat(fd, &sb) == 0 && sb.st_nlink > 0)
			break;
		close(fd);
	}
	pw->files[pw->nfiles++] = (struct pack_file){.id = id, .fd = fd, .size = PACK_HEADER_SIZE};
	uint8_t hdr[PACK_HEADER_SIZE] = {0};
	memcpy(hdr, PACK_MAGIC, 8);
	put_le32(hdr + 8, PACK_VERSION);
	put_le64(hdr + 16, id);
	buf_put(pw, hdr, sizeof(hdr));
	STORE_FAULT("pack-created");
	return 0;
}

int crc__pw_seal(struct pack_writer *pw)
{
	if (!pw->nfiles)
		return 0;
	int rc = pw_flush(pw);
	if (rc)
		return rc;
	struct pack_file *pf = &pw->files[pw->nfiles - 1];
	if (!pw->st->nosync && fsync(pf->fd)) {
		rc = -errno;
		pr_perror("fsync of pack %016" PRIx64, pf->id);
		return rc;
	}
	STORE_FAULT("pack-synced");
	return 0;
}

int crc__pw_append(struct pack_writer *pw, const struct crc_hash *hash, const void *data, size_t len,
		   struct chunk_loc *out)
{
	int rc;
	if (!pw->buf) {
		pw->buf = malloc(PW_BUF_SIZE);
		if (!pw->buf)
			return CRC_ENOMEM;
		pw->cap = PW_BUF_SIZE;
	}
	const size_t length = len;
	uint32_t encoding =
	    crc__chunk_encode(pw->st->compress, !pw->st->nosync, data, len, &pw->enc, &data, &len);
	struct pack_file *pf = pw->nfiles ? &pw->files[pw->nfiles - 1] : NULL;
	if (!pf || (pf->size > PACK_HEADER_SIZE && pf->size + CHUNK_HEADER_SIZE + len > PACK_TARGET_SIZE)) {
		/* Sealing here, not at commit, spreads the fsyncs over the checkpoint. */
		if ((rc = crc__pw_seal(pw)) || (rc = pw_new_file(pw)))
			return rc;
		pf = &pw->files[pw->nfiles - 1];
	}
	uint8_t hdr[CHUNK_HEADER_SIZE] = {0};
	put_le32(hdr, CHUNK_MAGIC);
	put_le32(hdr + 4, encoding);
	put_le64(hdr + 8, len);
	memcpy(hdr + 16, hash->bytes, 16);
	if (pw->used + sizeof(hdr) > pw->cap && (rc = pw_flush(pw)))
		return rc;
	buf_put(pw, hdr, sizeof(hdr));
	*out = (struct chunk_loc){.pack = pf->id,
				  .offset = pf->size + CHUNK_HEADER_SIZE,
				  .length = length,
				  .stored = len,
				  .encoding = encoding};
	pf->size += CHUNK_HEADER_SIZE + len;

	if (len >= pw->cap / 2) {
		/* Large chunks go straight from the caller's memory: no copy. */
		if ((rc = pw_flush(pw)) || (rc = write_all(pf->fd, data, len))) {
			pr_err("writing pack %016" PRIx64 ": %s", pf->id, strerror(-rc));
			return rc;
		}
	} else {
		if (pw->used + len > pw->cap && (rc = pw_flush(pw)))
			return rc;
		buf_put(pw, data, len);
	}
	STORE_FAULT("chunk-appended");
	return 0;
}

int crc__packs_dir_sync(struct crc_store *st)
{
	if (!st->nosync && fsync(st->packs_dir_fd)) {
		int rc = -errno;
		pr_perror("fsync of %s", st->packs_dir);
		return rc;
	}
	STORE_FAULT("packs-dir-synced");
	return 0;
}

void crc__pw_release(struct pack_writer *pw, bool discard)
{
	char path[PATH_MAX];
	for (size_t i = 0; i < pw->nfiles; i++) {
		if (discard) {
			crc__pack_path(pw->st, pw->files[i].id, path, sizeof(path));
			unlink(path);
		}
		close(pw->files[i].fd);
	}
	free(pw->files);
	free(pw->buf);
	crc__scratch_free(&pw->enc);
	crc__pw_init(pw, pw->st);
}

int crc__chunk_locate(struct crc_store *st, MDB_txn *txn, const struct crc_hash *hash, struct chunk_loc *out)
{
	MDB_val k = {16, (void *)hash->bytes}, v;
	int rc = mdb_get(txn, st->dbi_chunks, &k, &v);
	if (rc == MDB_NOTFOUND)
		return CRC_ENOTFOUND;
	if (rc)
		return crc__mdb_err(rc, "looking up a chunk");
	if (crc__chunk_loc_decode(v.mv_data, v.mv_size, out)) {
		pr_err("damaged chunk index entry (%zu bytes; expected %u, or %u for a compressed chunk)",
		       v.mv_size, CHUNK_LOC_SIZE, CHUNK_LOC_SIZE_ENC);
		return CRC_ECORRUPT;
	}
	return 0;
}

#define READ_PIECE (512u << 10) /* hashed while in the CPU's cache (L2 is 1-2 MiB) */

/* Reads and checks one chunk (decoding it when it is stored compressed, through scratch) through the
 * pack file descriptor cache *fd / *fd_pack (one per thread). */
static int chunk_read_fd(struct crc_store *st, const struct crc_hash *hash, const struct chunk_loc *loc,
			 void *buf, int *fd, uint64_t *fd_pack, struct chunk_scratch *scratch, bool verify)
{
	char path[PATH_MAX], hex[CRC_HASH_HEX_LEN + 1];
	crc_hash_to_hex(hash, hex);
	crc__pack_path(st, loc->pack, path, sizeof(path));
	if (*fd < 0 || *fd_pack != loc->pack) {
		if (*fd >= 0)
			close(*fd);
		*fd = open(path, O_RDONLY | O_CLOEXEC);
		if (*fd < 0) {
			int rc = errno == ENOENT ? CRC_ETRUNC : -errno;
			pr_perror("chunk %s: opening %s", hex, path);
			return rc;
		}
		*fd_pack = loc->pack;
		/* Chunks are mostly read in file order (restore, verify): ask for deep readahead. */
		posix_fadvise(*fd, 0, 0, POSIX_FADV_SEQUENTIAL);
	}
	/* Start reading the bytes that follow while this chunk is hashed: chunks are mostly read in file
	 * order, and this overlaps the disk with the hashing. */
	posix_fadvise(*fd, (off_t)(loc->offset + loc->stored), (off_t)loc->stored, POSIX_FADV_WILLNEED);
	/* A raw chunk is read in pieces, each hashed while it is still in the CPU's cache (hashing the
	 * whole chunk after reading it read it from memory again); a compressed one once decoded. */
	bool raw = loc->encoding == CHUNK_ENC_RAW;
	uint8_t *p = buf;
	if (!raw) {
		if (scratch->cap < loc->stored) {
			free(scratch->buf);
			scratch->cap = 0;
			if (!(scratch->buf = malloc(loc->stored)))
				return CRC_ENOMEM;
			scratch->cap = loc->stored;
		}
		p = scratch->buf;
	}
	XXH3_state_t *hs = verify ? XXH3_createState() : NULL;
	if (verify && !hs)
		return CRC_ENOMEM;
	if (hs)
		XXH3_128bits_reset(hs);
	int rc = 0;
	size_t done = 0;
	while (done < loc->stored) {
		/* Unhashed, a chunk is read at once: fewer calls, and nothing to keep in cache. */
		size_t want = hs && raw && loc->stored - done > READ_PIECE ? READ_PIECE : loc->stored - done;
		ssize_t r = pread(*fd, p + done, want, (off_t)(loc->offset + done));
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			rc = -errno;
			pr_perror("chunk %s: reading %s", hex, path);
			goto out;
		}
		if (r == 0) {
			pr_err("chunk %s: %s ends at byte %" PRIu64 ", inside the chunk (%" PRIu64
			       "..%" PRIu64 ")",
			       hex, path, loc->offset + done, loc->offset, loc->offset + loc->stored);
			rc = CRC_ETRUNC;
			goto out;
		}
		if (raw && hs)
			crc_xxh3_128_update(hs, p + done, (size_t)r);
		done += (size_t)r;
	}
	if (!raw) {
		rc = crc__chunk_decode(loc->encoding, p, loc->stored, buf, loc->length, scratch);
		if (rc == CRC_ECORRUPT)
			pr_err("chunk %s: the %" PRIu64 " %s-compressed bytes at %s+%" PRIu64
			       " do not decode to %" PRIu64 " bytes",
			       hex, loc->stored, crc__encoding_name(loc->encoding), path, loc->offset,
			       loc->length);
		if (rc)
			goto out;
		if (hs)
			crc_xxh3_128_update(hs, buf, loc->length);
	}
	if (!hs)
		return 0;
	struct crc_hash got;
	XXH128_canonical_t canon;
	XXH128_canonicalFromHash(&canon, XXH3_128bits_digest(hs));
	memcpy(got.bytes, canon.digest, sizeof(got.bytes));
	if (memcmp(got.bytes, hash->bytes, 16)) {
		char gothex[CRC_HASH_HEX_LEN + 1];
		crc_hash_to_hex(&got, gothex);
		pr_err("chunk %s: the %" PRIu64 " bytes at %s+%" PRIu64 " hash to %s", hex, loc->length, path,
		       loc->offset, gothex);
		rc = CRC_ECORRUPT;
	}
out:
	XXH3_freeState(hs);
	return rc;
}

int crc__chunk_read_at(struct crc_store *st, const struct crc_hash *hash, const struct chunk_loc *loc,
		       void *buf)
{
	if (!st->read_scratch && !(st->read_scratch = calloc(1, sizeof(*st->read_scratch))))
		return CRC_ENOMEM;
	return chunk_read_fd(st, hash, loc, buf, &st->read_fd, &st->read_pack, st->read_scratch, true);
}

/* Where the chunk of that hash is, in a read transaction of its own; *out_len its length, which buflen
 * must hold (CRC_EINVAL otherwise, *out_len set all the same). */
static int locate_for_read(struct crc_store *st, const struct crc_hash *hash, size_t buflen, size_t *out_len,
			   struct chunk_loc *loc)
{
	MDB_txn *txn;
	int rc = mdb_txn_begin(st->env, NULL, MDB_RDONLY, &txn);
	if (rc)
		return crc__mdb_err(rc, "mdb_txn_begin");
	rc = crc__chunk_locate(st, txn, hash, loc);
	mdb_txn_abort(txn);
	if (rc)
		return rc;
	if (out_len)
		*out_len = loc->length;
	return buflen < loc->length ? CRC_EINVAL : 0;
}

int crc_store_chunk_read(struct crc_store *st, const struct crc_hash *hash, void *buf, size_t buflen,
			 size_t *out_len)
{
	if (!st || !hash || (!buf && buflen))
		return CRC_EINVAL;
	struct chunk_loc loc;
	int rc = locate_for_read(st, hash, buflen, out_len, &loc);
	return rc ? rc : crc__chunk_read_at(st, hash, &loc, buf);
}

/* ---- one thread's reader ------------------------------------------------------------------------- */
struct crc_chunk_reader {
	struct crc_store *st;
	int fd;
	uint64_t pack;
	struct chunk_scratch scratch;
};

int crc_chunk_reader_open(struct crc_store *st, struct crc_chunk_reader **out)
{
	if (!st || !out)
		return CRC_EINVAL;
	struct crc_chunk_reader *r = calloc(1, sizeof(*r));
	if (!r)
		return CRC_ENOMEM;
	r->st = st;
	r->fd = -1;
	*out = r;
	return 0;
}

static int reader_read(struct crc_chunk_reader *r, const struct crc_hash *hash, void *buf, size_t buflen,
		       size_t *out_len, bool verify)
{
	if (!r || !hash || (!buf && buflen))
		return CRC_EINVAL;
	struct chunk_loc loc;
	int rc = locate_for_read(r->st, hash, buflen, out_len, &loc);
	return rc ? rc : chunk_read_fd(r->st, hash, &loc, buf, &r->fd, &r->pack, &r->scratch, verify);
}

int crc_chunk_reader_read(struct crc_chunk_reader *r, const struct crc_hash *hash, void *buf, size_t buflen,
			  size_t *out_len)
{
	return reader_read(r, hash, buf, buflen, out_len, true);
}

int crc_chunk_reader_read_unverified(struct crc_chunk_reader *r, const struct crc_hash *hash, void *buf,
				     size_t buflen, size_t *out_len)
{
	return reader_read(r, hash, buf, buflen, out_len, false);
}

void crc_chunk_reader_close(struct crc_chunk_reader *r)
{
	if (!r)
		return;
	if (r->fd >= 0)
		close(r->fd);
	crc__scratch_free(&r->scratch);
	free(r);
}

int crc_store_manifest_stored(struct crc_store *st, const struct crc_manifest *m, uint64_t *out_bytes,
			      uint64_t *out_stored, uint64_t *out_compressed)
{
	if (!st || !m || !out_bytes || !out_stored)
		return CRC_EINVAL;
	struct hset seen = {0};
	uint64_t bytes = 0, stored = 0, compressed = 0;
	MDB_txn *txn;
	int rc = mdb_txn_begin(st->env, NULL, MDB_RDONLY, &txn);
	if (rc)
		return crc__mdb_err(rc, "mdb_txn_begin");
	for (uint32_t r = 0; r < m->nregions && !rc; r++)
		for (uint32_t c = 0; c < m->regions[r].nchunks && !rc; c++) {
			bool fresh;
			struct chunk_loc loc;
			const struct crc_hash *h = &m->regions[r].chunks[c].hash;
			if (!crc__hset_insert(&seen, h, &fresh))
				rc = CRC_ENOMEM;
			else if (fresh && !(rc = crc__chunk_locate(st, txn, h, &loc))) {
				bytes += loc.length;
				stored += loc.stored;
				compressed += loc.encoding != CHUNK_ENC_RAW;
			}
		}
	mdb_txn_abort(txn);
	crc__hset_free(&seen);
	if (rc)
		return rc;
	*out_bytes = bytes;
	*out_stored = stored;
	if (out_compressed)
		*out_compressed = compressed;
	return 0;
}

/* ---- parallel reads ------------------------------------------------------------------------------ */
struct batch {
	struct crc_store *st;
	const struct crc_hash *hashes;
	const struct chunk_loc *locs;
	void *const *bufs;
	size_t n;
	unsigned threads;
	atomic_size_t next;
	atomic_uint next_thread; /* each thread's index, for its scratch */
	atomic_int rc;
};

static void *batch_worker(void *arg)
{
	struct batch *b = arg;
	int fd = -1;
	uint64_t fd_pack = 0;
	struct chunk_scratch *scratch = &b->st->batch_scratch[atomic_fetch_add(&b->next_thread, 1)];

	for (size_t i; (i = atomic_fetch_add(&b->next, 1)) < b->n && !atomic_load(&b->rc);) {
		int rc = chunk_read_fd(b->st, &b->hashes[i], &b->locs[i], b->bufs[i], &fd, &fd_pack, scratch,
				       true);
		int zero = 0;

		if (rc)
			atomic_compare_exchange_strong(&b->rc, &zero, rc);
	}
	if (fd >= 0)
		close(fd);
	return NULL;
}

int crc_store_chunks_read(struct crc_store *st, const struct crc_hash *hashes, size_t n, void *const *bufs,
			  size_t *lens, unsigned threads)
{
	if (!st || (n && (!hashes || !bufs || !lens)))
		return CRC_EINVAL;
	if (!n)
		return 0;
	struct chunk_loc *locs = calloc(n, sizeof(*locs));
	if (!locs)
		return CRC_ENOMEM;
	MDB_txn *txn;
	int rc = mdb_txn_begin(st->env, NULL, MDB_RDONLY, &txn);
	if (rc) {
		free(locs);
		return crc__mdb_err(rc, "mdb_txn_begin");
	}
	for (size_t i = 0; i < n && !rc; i++) {
		rc = crc__chunk_locate(st, txn, &hashes[i], &locs[i]);
		if (!rc && lens[i] < locs[i].length)
			rc = CRC_EINVAL;
		if (!rc)
			lens[i] = locs[i].length;
	}
	mdb_txn_abort(txn);
	if (rc) {
		free(locs);
		return rc;
	}
	struct batch b = {.st = st, .hashes = hashes, .locs = locs, .bufs = bufs, .n = n};
	pthread_t tids[STORE_READERS_MAX];
	unsigned started = 0;
	if (threads > STORE_READERS_MAX)
		threads = STORE_READERS_MAX;
	/* The calling thread is one of the readers. */
	for (unsigned t = 1; t < threads && t < n; t++)
		if (!pthread_create(&tids[started], NULL, batch_worker, &b))
			started++;
	batch_worker(&b);
	for (unsigned t = 0; t < started; t++)
		pthread_join(tids[t], NULL);
	free(locs);
	return atomic_load(&b.rc);
}
