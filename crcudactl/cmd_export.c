/* crcudactl export ID [-o FILE] / crcudactl import [-i FILE]: a checkpoint as one self-contained,
 * checksummed stream, so that it restores on a node that does not see the store (scp, object storage,
 * a job's stage-out), and back into a store there.
 *
 * The stream (all integers little-endian):
 *   header   "CRCUDAEX", u32 format version (EXPORT_FORMAT), u32 n, n bytes: the writer's crcuda
 *            version, NUL-padded
 *   records  u32 type, u32 check (XXH32 of these 16 bytes with check 0: a damaged length reads as
 *            damage, not as a truncation), u64 length, then length bytes; types in this order:
 *     INFO     u64 checkpoint id, i64 created_ns, u64 store session, u64 journal_seq, u64 journal
 *              records, u64 blobs, u64 chunks, u64 chunk bytes, u64 files, u64 file bytes, u32 meta
 *              keys, u32 regions; then where it came from ("host:store"), no NUL
 *     META     u32 key length, key, value (the rest): one per metadata key, as the manifest holds them
 *     REGION   u32 kind, u32 nchunks, u64 addr, u64 size, 16 module hash, u32 name length + 1 (0: no
 *              name), u32 0, name, then nchunks x (16 hash, u64 length): one per manifest region
 *     JOURNAL  u64 seq, u32 type, u32 0, payload: the records of the checkpoint's store session up to
 *              its crcuda.journal_seq (what a restore replays)
 *     BLOB     16 hash, bytes: the module images those records name (crc_store_blob_put), once each
 *     CHUNK    16 hash, bytes: every distinct chunk the regions name, once, in the order the regions
 *              first name them
 *     FILE     u32 mode, u32 name length, name, bytes: each regular file of the CRIU image directory
 *     TRAILER  u64 records before it (the header not counted), 16 XXH3-128 (canonical) of every byte
 *              before it; nothing follows
 * Import checks the magic, the version, each record's place and size, each chunk and blob against its
 * hash, and the trailer's checksum before it commits anything: a new store session with the journal
 * and the blobs, the checkpoint (crc_ckpt_*), and a new image directory <store>/criu/<name>. Its
 * metadata is the exported one with crcuda.session, crcuda.journal_seq and criu.images_dir naming the
 * new ones, and crcuda.imported_from. Both ends hold one chunk (or CRIU file piece) at a time, never
 * the whole checkpoint; import keeps the journal in memory and spools the blobs to an unlinked file in
 * the store until the checksum is known. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "crcuda/tls.h"
#include "crcuda/xxh3.h"

#include "crc_store.h"
#include "crcuda/errno.h"
#include "crcuda/journal.h"
#include "crcudactl.h"

#define EXPORT_MAGIC	    "CRCUDAEX"
#define EXPORT_FORMAT	    1u
#define EXPORT_JSON_VERSION 1
#define REC_HDR		    16u
#define IO_BUF		    (1u << 20)
#define FILE_PIECE	    (4u << 20) /* CRIU image files go in pieces of this */
#define INFO_FIXED	    88u
#define REGION_FIXED	    48u
#define META_MAX	    (1u << 20)
#define NAME_MAX_EX	    255u

enum ex_rec {
	EX_INFO = 1,
	EX_META = 2,
	EX_REGION = 3,
	EX_JOURNAL = 4,
	EX_BLOB = 5,
	EX_CHUNK = 6,
	EX_FILE = 7,
	EX_TRAILER = 8,
};

static const char *rec_name(uint32_t t)
{
	static const char *const n[] = {"?",	"info",	 "metadata", "region", "journal",
					"blob", "chunk", "file",     "trailer"};
	return t < sizeof(n) / sizeof(n[0]) ? n[t] : "unknown";
}

static void le32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}
static void le64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t rd32(const uint8_t *p)
{
	uint32_t v = 0;
	for (int i = 3; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}
static uint64_t rd64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}

static void digest(XXH3_state_t *xs, uint8_t out[16])
{
	XXH128_canonical_t c;

	XXH128_canonicalFromHash(&c, XXH3_128bits_digest(xs));
	memcpy(out, c.digest, 16);
}

#ifndef CRC_EXPORT_STREAM_ONLY
static void human(uint64_t b, char *buf, size_t len)
{
	if (b >= (1ull << 30))
		snprintf(buf, len, "%.1f GiB", (double)b / (1 << 30));
	else if (b >= (1u << 20))
		snprintf(buf, len, "%.1f MiB", (double)b / (1 << 20));
	else
		snprintf(buf, len, "%.1f KiB", (double)b / 1024);
}
#endif

/* Every chunk reference of the regions, sorted by hash (then position): the first entry of a hash
 * stands for it. */
struct cref {
	struct crc_hash hash;
	uint64_t len;
	uint32_t region, index;
	bool got; /* first entry of a hash: exported, or received */
};

static int cref_cmp(const void *a, const void *b)
{
	const struct cref *x = a, *y = b;
	int c = memcmp(x->hash.bytes, y->hash.bytes, 16);

	if (c)
		return c;
	if (x->region != y->region)
		return x->region < y->region ? -1 : 1;
	return x->index < y->index ? -1 : x->index > y->index;
}

/* The first entry with hash, or NULL. */
static struct cref *cref_find(struct cref *v, size_t n, const struct crc_hash *hash)
{
	size_t lo = 0, hi = n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (memcmp(v[mid].hash.bytes, hash->bytes, 16) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < n && !memcmp(v[lo].hash.bytes, hash->bytes, 16) ? &v[lo] : NULL;
}

/* ---- export ------------------------------------------------------------------------------------- */

/* The stream out: buffered, hashed, counted. */
struct xw {
	int fd;
	XXH3_state_t *xs;
	uint8_t *buf;
	size_t used;
	uint64_t bytes, records;
	int err; /* -errno of the first failed write */
	/* Tests (ctl_export_opts): the byte at flip_at goes out with a bit flipped; at cut_at the stream
	 * ends (the write side is shut down, later bytes are dropped). UINT64_MAX: never. */
	uint64_t out, flip_at, cut_at;
};

static int write_all(int fd, const void *p, size_t n)
{
	const uint8_t *b = p;
	int rc;

	/* A migration's TLS connection (cmd_migrate.c). */
	if (crc_tls_write_all(fd, p, n, &rc))
		return rc == CRC_EAGAIN ? -EAGAIN : rc ? -EPIPE : 0;
	while (n) {
		ssize_t w = write(fd, b, n);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return w < 0 ? -errno : -EIO;
		b += w;
		n -= (size_t)w;
	}
	return 0;
}

/* Writes n bytes of the stream, with the test hooks applied. */
static int xw_out(struct xw *w, const void *p, size_t n)
{
	const uint8_t *b = p;
	uint64_t at = w->out;
	bool cut = false;
	int rc = 0;

	w->out += n;
	if (at >= w->cut_at)
		return 0;
	if (w->cut_at - at <= n) {
		n = (size_t)(w->cut_at - at);
		cut = true;
	}
	if (w->flip_at >= at && w->flip_at - at < n) {
		size_t k = (size_t)(w->flip_at - at);
		uint8_t flipped = b[k] ^ 1;

		if ((k && (rc = write_all(w->fd, b, k))) || (rc = write_all(w->fd, &flipped, 1)))
			return rc;
		rc = n - k - 1 ? write_all(w->fd, b + k + 1, n - k - 1) : 0;
	} else if (n) {
		rc = write_all(w->fd, b, n);
	}
	if (!rc && cut)
		crc_tls_end_writes(w->fd);
	return rc;
}

static int xw_flush(struct xw *w)
{
	if (!w->err && w->used)
		w->err = xw_out(w, w->buf, w->used);
	w->used = 0;
	return w->err;
}

static int xw_put(struct xw *w, const void *p, size_t n)
{
	if (w->err)
		return w->err;
	crc_xxh3_128_update(w->xs, p, n);
	w->bytes += n;
	if (w->used + n > IO_BUF && xw_flush(w))
		return w->err;
	if (n >= IO_BUF)
		return w->err = xw_out(w, p, n);
	memcpy(w->buf + w->used, p, n);
	w->used += n;
	return 0;
}

static uint32_t rec_check(const uint8_t h[REC_HDR])
{
	uint8_t c[REC_HDR];

	memcpy(c, h, REC_HDR);
	memset(c + 4, 0, 4);
	return XXH32(c, REC_HDR, 0);
}

static int xw_rec(struct xw *w, uint32_t type, uint64_t len)
{
	uint8_t h[REC_HDR] = {0};

	le32(h, type);
	le64(h + 8, len);
	le32(h + 4, rec_check(h));
	w->records++;
	return xw_put(w, h, sizeof(h));
}

struct export
{
	struct crc_store *st;
	struct crc_chunk_reader *rd; /* where set, chunks are read through it (a thread's own reader) */
	struct crc_manifest *m;
	struct xw w;
	uint64_t session, upto;
	bool journal; /* the manifest names a store session and journal_seq */
	uint64_t njournal;
	/* Module images the journal names. */
	struct blob {
		struct crc_hash hash;
		uint64_t len;
		bool known; /* the reader holds it: not sent (its import pins it) */
	} * blobs;
	size_t nblobs, capblobs, blobs_sent;
	struct cref *refs;
	size_t nrefs;
	uint64_t nchunks, chunk_bytes;
	int imgfd; /* the CRIU image directory, or -1 */
	char imgdir[PATH_MAX * 2];
	char **files;
	size_t nfiles;
	uint64_t file_bytes;
	const struct ctl_export_opts *o; /* never NULL */
	uint64_t skipped, skipped_bytes; /* distinct chunks left out: the reader holds them */
	char why[PATH_MAX * 3];
};

static int ex_fail(struct export *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int ex_fail(struct export *e, const char *fmt, ...)
{
	va_list ap;

	if (!e->why[0]) {
		va_start(ap, fmt);
		vsnprintf(e->why, sizeof(e->why), fmt, ap);
		va_end(ap);
	}
	return -1;
}

/* A journal pass: counts the records and collects the images they name (write = false), or writes
 * them (write = true). */
struct jpass {
	struct export *e;
	bool write;
	int err;
};

static int blob_add(struct export *e, const uint8_t hash[16], uint64_t len)
{
	for (size_t i = 0; i < e->nblobs; i++)
		if (!memcmp(e->blobs[i].hash.bytes, hash, 16))
			return 0;
	if (e->nblobs == e->capblobs) {
		size_t cap = e->capblobs ? e->capblobs * 2 : 16;
		struct blob *b = realloc(e->blobs, cap * sizeof(*b));

		if (!b)
			return CRC_ENOMEM;
		e->blobs = b;
		e->capblobs = cap;
	}
	memcpy(e->blobs[e->nblobs].hash.bytes, hash, 16);
	e->blobs[e->nblobs++].len = len;
	return 0;
}

static int journal_rec(void *arg, uint64_t seq, uint32_t type, const void *payload, uint32_t len)
{
	struct jpass *p = arg;
	struct export *e = p->e;
	static const uint8_t zero[16];
	struct crc_jrec_view v;
	uint8_t h[16] = {0};

	if (seq > e->upto)
		return 1; /* past the checkpoint */
	if (p->write) {
		le64(h, seq);
		le32(h + 8, type);
		if (xw_rec(&e->w, EX_JOURNAL, sizeof(h) + (uint64_t)len) || xw_put(&e->w, h, sizeof(h)) ||
		    (len && xw_put(&e->w, payload, len)))
			return p->err = e->w.err, 1;
		return 0;
	}
	e->njournal++;
	if (crc_jrec_decode(payload, len, &v)) {
		ex_fail(e, "journal record %" PRIu64 " of store session %" PRIu64 " cannot be decoded", seq,
			e->session);
		return p->err = CRC_ECORRUPT, 1;
	}
	if (memcmp(v.call->image_hash, zero, 16) &&
	    (p->err = blob_add(e, v.call->image_hash, v.call->image_bytes)))
		return 1;
	return 0;
}

static int name_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Lists the CRIU image directory's files (regular files only) and takes a shared lock on it, as a
 * restore does, so that rm leaves it while we read. */
static int list_images(struct export *e, const char *store)
{
	const char *rel = crc_manifest_meta_get(e->m, "criu.images_dir");
	struct dirent *de;
	size_t cap = 0;
	DIR *d;

	if (!rel || e->o->chunks_only || e->o->no_images)
		return 0;
	snprintf(e->imgdir, sizeof(e->imgdir), "%s%s%s", rel[0] == '/' ? "" : store, rel[0] == '/' ? "" : "/",
		 rel);
	e->imgfd = open(e->imgdir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (e->imgfd < 0)
		return ex_fail(e, "its CRIU images %s: %s", e->imgdir, strerror(errno));
	if (flock(e->imgfd, LOCK_SH))
		return ex_fail(e, "cannot lock %s: %s", e->imgdir, strerror(errno));
	d = fdopendir(dup(e->imgfd));
	if (!d)
		return ex_fail(e, "%s: %s", e->imgdir, strerror(errno));
	while ((de = readdir(d))) {
		struct stat sb;

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (fstatat(e->imgfd, de->d_name, &sb, AT_SYMLINK_NOFOLLOW)) {
			ex_fail(e, "%s/%s: %s", e->imgdir, de->d_name, strerror(errno));
			break;
		}
		if (!S_ISREG(sb.st_mode)) {
			ex_fail(e, "%s/%s is a %s, not a regular file: refusing to export it", e->imgdir,
				de->d_name,
				S_ISLNK(sb.st_mode)   ? "symbolic link"
				: S_ISDIR(sb.st_mode) ? "directory"
						      : "special file");
			break;
		}
		if (strlen(de->d_name) > NAME_MAX_EX) {
			ex_fail(e, "%s/%s: name too long", e->imgdir, de->d_name);
			break;
		}
		if (e->nfiles == cap) {
			char **f = realloc(e->files, (cap = cap ? cap * 2 : 32) * sizeof(*f));

			if (!f) {
				ex_fail(e, "out of memory");
				break;
			}
			e->files = f;
		}
		if (!(e->files[e->nfiles] = strdup(de->d_name))) {
			ex_fail(e, "out of memory");
			break;
		}
		e->nfiles++;
		e->file_bytes += (uint64_t)sb.st_size;
	}
	closedir(d);
	if (e->why[0])
		return -1;
	if (e->nfiles)
		qsort(e->files, e->nfiles, sizeof(*e->files), name_cmp);
	return 0;
}

/* The regions' chunk references, sorted; counts the distinct chunks. */
int ctl_ckpt_images(struct crc_store *st, const struct crc_manifest *m, struct crc_hash **out, size_t *n)
{
	struct export e = {.st = st, .m = (struct crc_manifest *)m};
	struct jpass jp = {.e = &e};
	const char *s = crc_manifest_meta_get(m, "crcuda.session"),
		   *q = crc_manifest_meta_get(m, "crcuda.journal_seq");
	int rc = 0;

	*out = NULL;
	*n = 0;
	if (!s || !q)
		return 0; /* no journal */
	e.session = strtoull(s, NULL, 0);
	e.upto = strtoull(q, NULL, 0);
	rc = crc_store_journal_iterate(st, e.session, journal_rec, &jp);
	if (rc >= 0 && !jp.err && e.nblobs && !(*out = calloc(e.nblobs, sizeof(**out))))
		jp.err = CRC_ENOMEM;
	for (size_t i = 0; *out && i < e.nblobs; i++)
		(*out)[(*n)++] = e.blobs[i].hash;
	free(e.blobs);
	return jp.err ? jp.err : rc < 0 ? rc : 0;
}

static int index_chunks(struct export *e)
{
	size_t n = 0;

	for (uint32_t r = 0; r < e->m->nregions; r++)
		n += e->m->regions[r].nchunks;
	e->refs = calloc(n ? n : 1, sizeof(*e->refs));
	if (!e->refs)
		return ex_fail(e, "out of memory");
	for (uint32_t r = 0; r < e->m->nregions; r++)
		for (uint32_t c = 0; c < e->m->regions[r].nchunks; c++)
			e->refs[e->nrefs++] = (struct cref){.hash = e->m->regions[r].chunks[c].hash,
							    .len = e->m->regions[r].chunks[c].length,
							    .region = r,
							    .index = c};
	qsort(e->refs, e->nrefs, sizeof(*e->refs), cref_cmp);
	for (size_t i = 0; i < e->nrefs; i++)
		if (!i || memcmp(e->refs[i].hash.bytes, e->refs[i - 1].hash.bytes, 16)) {
			if (ctl_hash_known(e->o->known, e->o->nknown, &e->refs[i].hash)) {
				e->refs[i].got = true; /* the reader has it: not sent */
				e->skipped++;
				e->skipped_bytes += e->refs[i].len;
				continue;
			}
			e->nchunks++;
			e->chunk_bytes += e->refs[i].len;
		}
	return 0;
}

static int hash_cmp(const void *a, const void *b)
{
	return memcmp(((const struct crc_hash *)a)->bytes, ((const struct crc_hash *)b)->bytes, 16);
}

bool ctl_hash_known(const struct crc_hash *sorted, size_t n, const struct crc_hash *h)
{
	return n && bsearch(h, sorted, n, sizeof(*sorted), hash_cmp);
}

void ctl_hash_sort(struct crc_hash *v, size_t n)
{
	if (n)
		qsort(v, n, sizeof(*v), hash_cmp);
}

/* Metadata an export without CRIU images leaves out (the import then makes no image directory). */
static bool meta_left_out(const struct export *e, const char *key)
{
	return (e->o->chunks_only || e->o->no_images) && !strcmp(key, "criu.images_dir");
}

static int write_io_err(struct export *e)
{
	return ex_fail(e, "writing the export: %s",
		       e->w.err == -EPIPE ? "the reader went away" : strerror(-e->w.err));
}

static int write_header_info(struct export *e, const char *from)
{
	uint8_t h[16 + 32] = {0}, info[INFO_FIXED];

	memcpy(h, EXPORT_MAGIC, 8);
	le32(h + 8, EXPORT_FORMAT);
	le32(h + 12, 32);
	snprintf((char *)h + 16, 32, "%s", CRCUDA_VERSION);
	le64(info, e->m->ckpt_id);
	le64(info + 8, (uint64_t)e->m->created_ns);
	le64(info + 16, e->journal ? e->session : 0);
	le64(info + 24, e->journal ? e->upto : 0);
	le64(info + 32, e->njournal);
	le64(info + 40, e->blobs_sent);
	le64(info + 48, e->nchunks);
	le64(info + 56, e->chunk_bytes);
	le64(info + 64, e->nfiles);
	le64(info + 72, e->file_bytes);
	uint32_t nmeta = 0;

	for (uint32_t i = 0; i < e->m->nmeta; i++)
		nmeta += !meta_left_out(e, e->m->meta[i].key);
	le32(info + 80, nmeta);
	le32(info + 84, e->m->nregions);
	xw_put(&e->w, h, sizeof(h));
	xw_rec(&e->w, EX_INFO, sizeof(info) + strlen(from));
	xw_put(&e->w, info, sizeof(info));
	xw_put(&e->w, from, strlen(from));
	for (uint32_t i = 0; i < e->m->nmeta; i++) {
		const struct crc_meta_kv *kv = &e->m->meta[i];
		uint8_t kl[4];

		if (meta_left_out(e, kv->key))
			continue;
		le32(kl, (uint32_t)strlen(kv->key));
		xw_rec(&e->w, EX_META, 4 + strlen(kv->key) + strlen(kv->value));
		xw_put(&e->w, kl, 4);
		xw_put(&e->w, kv->key, strlen(kv->key));
		xw_put(&e->w, kv->value, strlen(kv->value));
	}
	for (uint32_t r = 0; r < e->m->nregions; r++) {
		const struct crc_region *rg = &e->m->regions[r];
		size_t nl = rg->name ? strlen(rg->name) : 0;
		uint8_t f[REGION_FIXED] = {0};

		le32(f, rg->kind);
		le32(f + 4, rg->nchunks);
		le64(f + 8, rg->addr);
		le64(f + 16, rg->size);
		memcpy(f + 24, rg->module.bytes, 16);
		le32(f + 40, rg->name ? (uint32_t)nl + 1 : 0);
		xw_rec(&e->w, EX_REGION, sizeof(f) + nl + 24ull * rg->nchunks);
		xw_put(&e->w, f, sizeof(f));
		if (nl)
			xw_put(&e->w, rg->name, nl);
		for (uint32_t c = 0; c < rg->nchunks; c++) {
			uint8_t ref[24];

			memcpy(ref, rg->chunks[c].hash.bytes, 16);
			le64(ref + 16, rg->chunks[c].length);
			xw_put(&e->w, ref, sizeof(ref));
		}
	}
	return e->w.err ? write_io_err(e) : 0;
}

/* One record of stored bytes (a module image or a chunk): read back, hash-checked, through *buf. */
static int export_stored(struct export *e, int type, const char *what, const struct crc_hash *hash,
			 uint64_t len, uint8_t **buf, size_t *cap)
{
	char hex[CRC_HASH_HEX_LEN + 1];
	size_t got = 0;
	int rc;

	if (len > *cap) {
		free(*buf);
		*cap = 0;
		if (!(*buf = malloc(len)))
			return ex_fail(e, "out of memory");
		*cap = len;
	}
	rc = e->rd ? crc_chunk_reader_read(e->rd, hash, *buf, len, &got)
		   : crc_store_chunk_read(e->st, hash, *buf, len, &got);
	if (rc || got != len) {
		crc_hash_to_hex(hash, hex);
		return ex_fail(e, "%s %s: %s", what, hex, crc_strerror(rc ? rc : CRC_ETRUNC));
	}
	if (xw_rec(&e->w, type, 16 + len) || xw_put(&e->w, hash->bytes, 16) || xw_put(&e->w, *buf, len))
		return write_io_err(e);
	return 0;
}

static int write_blobs_chunks(struct export *e)
{
	uint8_t *buf = NULL;
	size_t cap = 0;
	int rc;

	for (size_t i = 0; i < e->nblobs; i++) {
		struct blob *b = &e->blobs[i];

		if (!b->len || b->len > CRC_CHUNK_MAX) {
			free(buf);
			return ex_fail(e, "the journal names a module image of %" PRIu64 " bytes", b->len);
		}
		if (b->known)
			continue;
		if ((rc = export_stored(e, EX_BLOB, "module image", &b->hash, b->len, &buf, &cap))) {
			free(buf);
			return rc;
		}
	}
	/* In the regions' order (the order their pack files hold them), each distinct chunk once. */
	for (uint32_t r = 0; r < e->m->nregions; r++) {
		for (uint32_t c = 0; c < e->m->regions[r].nchunks; c++) {
			const struct crc_chunk_ref *ch = &e->m->regions[r].chunks[c];
			struct cref *f = cref_find(e->refs, e->nrefs, &ch->hash);

			if (!f || f->got)
				continue;
			f->got = true;
			if (!ch->length || ch->length > CRC_CHUNK_MAX) {
				free(buf);
				return ex_fail(e, "region %u names a chunk of %" PRIu64 " bytes", r,
					       ch->length);
			}
			if ((rc = export_stored(e, EX_CHUNK, "chunk", &ch->hash, ch->length, &buf, &cap))) {
				free(buf);
				return rc;
			}
		}
	}
	free(buf);
	return 0;
}

static int write_files(struct export *e)
{
	uint8_t *buf = malloc(FILE_PIECE);

	if (!buf)
		return ex_fail(e, "out of memory");
	for (size_t i = 0; i < e->nfiles; i++) {
		const char *name = e->files[i];
		int fd = openat(e->imgfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
		struct stat sb;
		uint8_t f[8];
		uint64_t left;

		if (fd < 0 || fstat(fd, &sb) || !S_ISREG(sb.st_mode)) {
			ex_fail(e, "%s/%s: %s", e->imgdir, name,
				fd < 0 ? strerror(errno) : "not a regular file");
			if (fd >= 0)
				close(fd);
			free(buf);
			return -1;
		}
		le32(f, (uint32_t)(sb.st_mode & 07777));
		le32(f + 4, (uint32_t)strlen(name));
		left = (uint64_t)sb.st_size;
		xw_rec(&e->w, EX_FILE, sizeof(f) + strlen(name) + left);
		xw_put(&e->w, f, sizeof(f));
		xw_put(&e->w, name, strlen(name));
		while (left && !e->w.err) {
			ssize_t n = read(fd, buf, left < FILE_PIECE ? left : FILE_PIECE);

			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0) {
				/* Its size is in the record already: a file that shrinks cannot be sent. */
				ex_fail(e, "%s/%s: %s", e->imgdir, name,
					n < 0 ? strerror(errno) : "it shrank while being read");
				break;
			}
			xw_put(&e->w, buf, (size_t)n);
			left -= (uint64_t)n;
		}
		close(fd);
		if (e->why[0] || e->w.err) {
			free(buf);
			return e->why[0] ? -1 : write_io_err(e);
		}
	}
	free(buf);
	return 0;
}

/* Writes checkpoint e->m of the open store e->st to e->w.fd, as e->o says: everything is looked at
 * before the first byte goes out. 0, or -1 with e->why. */
static int export_write(struct export *e, const char *store)
{
	struct jpass jp = {.e = e};
	char from[PATH_MAX + 300], host[256] = "", real[PATH_MAX];
	uint8_t trailer[24];
	int rc;

	if (!e->o->chunks_only) {
		const char *s = crc_manifest_meta_get(e->m, "crcuda.session"),
			   *q = crc_manifest_meta_get(e->m, "crcuda.journal_seq");

		e->journal = s && q;
		e->session = s ? strtoull(s, NULL, 0) : 0;
		e->upto = q ? strtoull(q, NULL, 0) : 0;
	}
	if (e->journal) {
		rc = crc_store_journal_iterate(e->st, e->session, journal_rec, &jp);
		if (rc < 0 || jp.err)
			return ex_fail(e, "reading the journal of store session %" PRIu64 ": %s", e->session,
				       crc_strerror(jp.err ? jp.err : rc));
	}
	/* Module images the reader holds are left out, as chunks are. */
	for (size_t i = 0; i < e->nblobs; i++) {
		e->blobs[i].known = ctl_hash_known(e->o->known, e->o->nknown, &e->blobs[i].hash);
		e->blobs_sent += !e->blobs[i].known;
	}
	if (index_chunks(e) || list_images(e, store))
		return -1;
	gethostname(host, sizeof(host) - 1);
	snprintf(from, sizeof(from), "%s:%s", host, realpath(store, real) ? real : store);
	/* A reader that goes away is an error we report, not a signal that kills us. */
	signal(SIGPIPE, SIG_IGN);
	e->w.xs = XXH3_createState();
	e->w.buf = malloc(IO_BUF);
	if (!e->w.xs || !e->w.buf)
		return ex_fail(e, "out of memory");
	XXH3_128bits_reset(e->w.xs);
	e->w.flip_at = e->o->flip_at;
	e->w.cut_at = e->o->cut_at;
	if (write_header_info(e, from))
		return -1;
	jp.write = true;
	if (e->journal) {
		rc = crc_store_journal_iterate(e->st, e->session, journal_rec, &jp);
		if (jp.err)
			return write_io_err(e);
		if (rc < 0)
			return ex_fail(e, "reading the journal of store session %" PRIu64 ": %s", e->session,
				       crc_strerror(rc));
	}
	if (write_blobs_chunks(e) || write_files(e))
		return -1;
	le64(trailer, e->w.records);
	digest(e->w.xs, trailer + 8);
	if (xw_rec(&e->w, EX_TRAILER, sizeof(trailer)) || xw_put(&e->w, trailer, sizeof(trailer)) ||
	    xw_flush(&e->w))
		return write_io_err(e);
	return 0;
}

static void export_free(struct export *e)
{
	if (e->imgfd >= 0)
		close(e->imgfd);
	for (size_t i = 0; i < e->nfiles; i++)
		free(e->files[i]);
	free(e->files);
	free(e->refs);
	free(e->blobs);
	free(e->w.buf);
	if (e->w.xs)
		XXH3_freeState(e->w.xs);
	crc_manifest_free(e->m);
	crc_store_close(e->st);
}

int ctl_export_fd(const char *store, uint64_t id, int fd, const struct ctl_export_opts *o,
		  struct ctl_export_result *res, char *why, size_t len)
{
	struct export e = {.imgfd = -1, .w.fd = fd, .o = o};
	int rc = crc_store_open(store, 0, &e.st);

	if (rc)
		ex_fail(&e, "cannot open the store %s: %s", store, crc_strerror(rc));
	else if ((rc = crc_store_manifest_get(e.st, id, &e.m)))
		ex_fail(&e, "checkpoint %" PRIu64 " in %s: %s", id, store, crc_strerror(rc));
	else
		rc = export_write(&e, store);
	if (res)
		*res = (struct ctl_export_result){.bytes = e.w.bytes,
						  .chunks = e.nchunks,
						  .chunk_bytes = e.chunk_bytes,
						  .skipped = e.skipped,
						  .skipped_bytes = e.skipped_bytes,
						  .file_bytes = e.file_bytes};
	snprintf(why, len, "%s", e.why);
	export_free(&e);
	return rc ? -1 : 0;
}

int ctl_export_chunks_fd(struct crc_store *st, const char *store, uint64_t id, const struct crc_hash *hashes,
			 const uint64_t *lens, size_t n, int fd, const struct ctl_export_opts *o,
			 struct ctl_export_result *res, char *why, size_t len)
{
	struct ctl_export_opts co = *o;
	struct crc_region rg = {.kind = CRC_REGION_OTHER, .name = (char *)"migration stripe"};
	struct crc_manifest man = {.ckpt_id = id, .nregions = 1, .regions = &rg};
	struct export e = {.imgfd = -1, .w.fd = fd, .o = &co, .st = st, .m = &man};
	struct timespec now;
	int rc = -1;

	/* Chunks only, every one sent: the caller chose them from what the reader lacks. */
	co.chunks_only = true;
	co.known = NULL;
	co.nknown = 0;
	clock_gettime(CLOCK_REALTIME, &now);
	man.created_ns = (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
	if (n > UINT32_MAX || !(rg.chunks = calloc(n ? n : 1, sizeof(*rg.chunks)))) {
		ex_fail(&e, "out of memory (%zu chunks)", n);
		goto out;
	}
	rg.nchunks = (uint32_t)n;
	for (size_t i = 0; i < n; i++) {
		rg.chunks[i].hash = hashes[i];
		rg.chunks[i].length = lens[i];
		rg.size += lens[i];
	}
	if ((rc = crc_chunk_reader_open(st, &e.rd))) {
		ex_fail(&e, "cannot read the store %s: %s", store, crc_strerror(rc));
		goto out;
	}
	rc = export_write(&e, store);
out:
	if (res)
		*res = (struct ctl_export_result){
		    .bytes = e.w.bytes, .chunks = e.nchunks, .chunk_bytes = e.chunk_bytes};
	snprintf(why, len, "%s", e.why);
	crc_chunk_reader_close(e.rd);
	free(rg.chunks);
	e.st = NULL; /* the caller's */
	e.m = NULL;
	export_free(&e);
	return rc ? -1 : 0;
}

/* The commands; the CRIU plugin builds this file with CRC_EXPORT_STREAM_ONLY for the stream alone. */
#ifndef CRC_EXPORT_STREAM_ONLY
static void export_usage(FILE *f)
{
	fprintf(f,
		"Usage: crcudactl export [--store DIR] [-o FILE] ID\n"
		"\n"
		"Writes checkpoint ID as one self-contained, checksummed stream: its metadata and regions,\n"
		"the journal a restore replays and the module images it names, every chunk of device memory\n"
		"(once each) and the CRIU images. `crcudactl import` reads it into any store, so that the\n"
		"checkpoint restores on a node that does not see this one (scp, object storage, a batch\n"
		"job's stage-out; or a pipe: crcudactl export 3 | ssh node crcudactl import). The files the\n"
		"process maps (its program, libraries) are not in it: the other node must have them.\n"
		"\n"
		"Options:\n"
		"  -s, --store DIR   the store (default $CRCUDA_STORE, else ~/.local/share/crcuda/store)\n"
		"  -o, --output FILE write to FILE, which appears once complete (default stdout, which\n"
		"                    must not be a terminal)\n"
		"      --json        with -o: a summary as JSON on stdout\n"
		"  -h, --help        this help\n"
		"\n"
		"Exit status: 0 written, 1 failed (FILE is then left as it was), 2 usage error.\n");
}

int cmd_export(int argc, char **argv, struct ctl_opts *opts)
{
	enum { OPT_JSON = 256 };
	static const struct option longopts[] = {
	    {"store", required_argument, NULL, 's'},
	    {"output", required_argument, NULL, 'o'},
	    {"json", no_argument, NULL, OPT_JSON},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	const char *store_arg = NULL, *out = NULL;
	static const struct ctl_export_opts all = {.flip_at = UINT64_MAX, .cut_at = UINT64_MAX};
	char store[PATH_MAX], sz[32], fsz[32], tmp[PATH_MAX + 8] = "";
	struct export e = {.imgfd = -1, .w.fd = -1, .o = &all};
	uint64_t id;
	int c, rc, ret = CTL_EXIT_FAILURE;
	char *end;
	bool ok = true;

	while ((c = getopt_long(argc, argv, "s:o:h", longopts, NULL)) != -1) {
		switch (c) {
		case 's':
			store_arg = optarg;
			break;
		case 'o':
			out = strcmp(optarg, "-") ? optarg : NULL;
			break;
		case OPT_JSON:
			opts->json = true;
			break;
		case 'h':
			export_usage(stdout);
			return CTL_EXIT_OK;
		default:
			export_usage(stderr);
			return CTL_EXIT_USAGE;
		}
	}
	if (argc - optind != 1) {
		ctl_error("export: give one checkpoint ID (see crcudactl ls)");
		export_usage(stderr);
		return CTL_EXIT_USAGE;
	}
	errno = 0;
	id = strtoull(argv[optind], &end, 10);
	if (errno || *end || !id || argv[optind][0] == '-') {
		ctl_error("export: '%s' is not a checkpoint id", argv[optind]);
		return CTL_EXIT_USAGE;
	}
	if (opts->json && !out) {
		ctl_error("export: --json needs -o FILE (the export itself goes to stdout)");
		return CTL_EXIT_USAGE;
	}
	if (!out && isatty(STDOUT_FILENO)) {
		ctl_error("export: refusing to write a binary stream to a terminal: give -o FILE, or "
			  "redirect stdout");
		return CTL_EXIT_USAGE;
	}
	if (ctl_store_dir(store_arg, store, sizeof(store)))
		return CTL_EXIT_USAGE;
	rc = crc_store_open(store, 0, &e.st);
	if (rc) {
		ctl_error("export: cannot open the store %s: %s", store, crc_strerror(rc));
		return CTL_EXIT_FAILURE;
	}
	rc = crc_store_manifest_get(e.st, id, &e.m);
	if (rc) {
		ctl_error("export: checkpoint %" PRIu64 " in %s: %s", id, store,
			  rc == CRC_ENOTFOUND ? "no such checkpoint (see crcudactl ls)" : crc_strerror(rc));
		crc_store_close(e.st);
		return CTL_EXIT_FAILURE;
	}
	if (out) {
		struct stat sb;

		if (!stat(out, &sb) && !S_ISREG(sb.st_mode)) {
			/* A pipe or a device (/dev/null): written as it is. */
			e.w.fd = open(out, O_WRONLY | O_CLOEXEC);
		} else {
			/* A file appears whole, under its name, only once it is complete and synced. */
			snprintf(tmp, sizeof(tmp), "%s.XXXXXX", out);
			e.w.fd = mkostemp(tmp, O_CLOEXEC);
			if (e.w.fd < 0)
				tmp[0] = 0;
		}
		if (e.w.fd < 0) {
			ex_fail(&e, "%s: %s", out, strerror(errno));
			goto out;
		}
	} else {
		e.w.fd = STDOUT_FILENO;
	}
	if (export_write(&e, store))
		goto out;
	if (tmp[0] && (fsync(e.w.fd) || rename(tmp, out))) {
		ex_fail(&e, "%s: %s", out, strerror(errno));
		goto out;
	}
	tmp[0] = 0;
	human(e.w.bytes, sz, sizeof(sz));
	human(e.chunk_bytes, fsz, sizeof(fsz));
	if (opts->json)
		ok = !ctl_json_print(json_pack(
		    "{s:i, s:s, s:I, s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "version", EXPORT_JSON_VERSION,
		    "store", store, "id", (json_int_t)id, "file", out, "bytes", (json_int_t)e.w.bytes,
		    "regions", (json_int_t)e.m->nregions, "chunks", (json_int_t)e.nchunks, "chunk_bytes",
		    (json_int_t)e.chunk_bytes, "journal_records", (json_int_t)e.njournal, "blobs",
		    (json_int_t)e.nblobs, "criu_files", (json_int_t)e.nfiles));
	else
		fprintf(out ? stdout : stderr,
			"exported checkpoint %" PRIu64 "%s%s: %u regions, %" PRIu64 " chunks (%s), %" PRIu64
			" journal records, %zu module images, %zu CRIU image files; %s\n",
			id, out ? " to " : "", out ? out : "", e.m->nregions, e.nchunks, fsz, e.njournal,
			e.nblobs, e.nfiles, sz);
	ret = ok ? CTL_EXIT_OK : CTL_EXIT_FAILURE;
out:
	if (ret != CTL_EXIT_OK)
		ctl_error("export: checkpoint %" PRIu64 ": %s", id, e.why[0] ? e.why : "failed");
	if (out && e.w.fd >= 0)
		close(e.w.fd);
	if (tmp[0])
		unlink(tmp);
	export_free(&e);
	return ret;
}

#endif /* CRC_EXPORT_STREAM_ONLY */

/* ---- import ------------------------------------------------------------------------------------- */

/* The stream in: buffered, hashed (while hashing is on), with its offset. */
struct xr {
	int fd;
	XXH3_state_t *xs;
	uint8_t *buf;
	size_t pos, end;
	uint64_t off;
	bool eof;
};

/* read(2), or the bytes of TLS records where fd has a session (a migration's connection). */
static ssize_t fd_read(int fd, void *p, size_t n)
{
	ssize_t got;

	if (!crc_tls_read_some(fd, p, n, &got))
		return read(fd, p, n);
	if (got >= 0)
		return got;
	if (got == CRC_EDAEMON)
		return 0; /* the peer went away: the stream ends */
	errno = got == CRC_EAGAIN ? EAGAIN : EPROTO;
	return -1;
}

/* Reads n bytes: 0, CRC_ETRUNC when the stream ends first (*got says how many came), or -errno. */
static int xr_read(struct xr *r, void *p, size_t n, bool hash, size_t *got)
{
	uint8_t *d = p;
	size_t done = 0;

	while (done < n) {
		if (r->pos == r->end) {
			ssize_t k;

			if (r->eof)
				break;
			if (n - done >= IO_BUF) {
				/* Large reads go straight to the caller's buffer. */
				k = fd_read(r->fd, d + done, n - done);
				if (k < 0 && errno == EINTR)
					continue;
				if (k < 0)
					return -errno;
				if (!k) {
					r->eof = true;
					break;
				}
				done += (size_t)k;
				continue;
			}
			k = fd_read(r->fd, r->buf, IO_BUF);
			if (k < 0 && errno == EINTR)
				continue;
			if (k < 0)
				return -errno;
			if (!k) {
				r->eof = true;
				break;
			}
			r->pos = 0;
			r->end = (size_t)k;
		}
		size_t take = r->end - r->pos < n - done ? r->end - r->pos : n - done;

		memcpy(d + done, r->buf + r->pos, take);
		r->pos += take;
		done += take;
	}
	if (hash && done)
		crc_xxh3_128_update(r->xs, p, done);
	r->off += done;
	if (got)
		*got = done;
	return done == n ? 0 : CRC_ETRUNC;
}

struct jrec {
	uint32_t type, len;
	uint8_t *payload;
};

struct spooled {
	struct crc_hash hash;
	uint64_t off, len;
};

struct import {
	const char *src; /* for messages */
	struct crc_store *st;
	char store[PATH_MAX];
	struct xr r;
	bool sync;
	uint64_t images_pinned; /* module images left out of the stream, pinned from the store */
	/* INFO */
	uint64_t src_id, src_session, src_seq, n_journal, n_blobs, n_chunks, chunk_bytes, n_files, file_bytes;
	int64_t created_ns;
	uint32_t n_meta, n_regions;
	char *from;
	/* META, REGION */
	struct crc_meta_kv *meta;
	uint32_t nmeta;
	struct crc_region *regions;
	uint32_t nregions;
	struct cref *refs;
	size_t nrefs;
	/* JOURNAL */
	struct jrec *jrecs;
	size_t njrecs, capjrecs;
	/* BLOB: spooled until the checksum is known */
	int spool;
	struct spooled *blobs;
	size_t nblobs, capblobs;
	uint64_t spool_off;
	/* CHUNK */
	uint64_t session;
	struct crc_ckpt *ck;
	uint64_t got_chunks, got_chunk_bytes;
	uint8_t *buf;
	size_t bufcap;
	/* FILE */
	char imgname[64];
	char imgdir[PATH_MAX + 80];
	int imgfd; /* the new image directory, locked; -1 before it exists */
	uint64_t got_files;
	uint64_t records;
	/* ctl_import_fd: chunks not sent may be in the store already (named, not put); the stream is
	 * followed by more of the connection (no end of file after its trailer); a pre-copy round's. */
	bool known_ok, more_follows, precopy;
	char why[PATH_MAX + 512];
};

static int im_fail(struct import *im, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int im_fail(struct import *im, const char *fmt, ...)
{
	va_list ap;

	if (!im->why[0]) {
		va_start(ap, fmt);
		vsnprintf(im->why, sizeof(im->why), fmt, ap);
		va_end(ap);
	}
	return -1;
}

/* A read of part of record `type` (number im->records): the error says where the stream ended. */
static int im_read(struct import *im, void *p, size_t n, uint32_t type)
{
	int rc = xr_read(&im->r, p, n, true, NULL);

	if (rc == CRC_ETRUNC && !type)
		return im_fail(im, "the export is truncated: it ends at byte %" PRIu64 ", inside its header",
			       im->r.off);
	if (rc == CRC_ETRUNC)
		return im_fail(im,
			       "the export is truncated: it ends at byte %" PRIu64 ", inside record %" PRIu64
			       " (%s)",
			       im->r.off, im->records, rec_name(type));
	if (rc)
		return im_fail(im, "reading the export: %s", strerror(-rc));
	return 0;
}

static int im_corrupt(struct import *im, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int im_corrupt(struct import *im, const char *fmt, ...)
{
	char what[PATH_MAX + 256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	return im_fail(im, "the export is corrupt: %s (record %" PRIu64 ", byte %" PRIu64 ")", what,
		       im->records, im->r.off);
}

static int rec_info(struct import *im, uint64_t len)
{
	uint8_t f[INFO_FIXED];

	if (len < INFO_FIXED || len > INFO_FIXED + PATH_MAX + 300)
		return im_corrupt(im, "an info record of %" PRIu64 " bytes", len);
	if (im_read(im, f, sizeof(f), EX_INFO))
		return -1;
	im->src_id = rd64(f);
	im->created_ns = (int64_t)rd64(f + 8);
	im->src_session = rd64(f + 16);
	im->src_seq = rd64(f + 24);
	im->n_journal = rd64(f + 32);
	im->n_blobs = rd64(f + 40);
	im->n_chunks = rd64(f + 48);
	im->chunk_bytes = rd64(f + 56);
	im->n_files = rd64(f + 64);
	im->file_bytes = rd64(f + 72);
	im->n_meta = rd32(f + 80);
	im->n_regions = rd32(f + 84);
	/* Read before the checksum can vouch for them: bounded, so that damage cannot ask for the moon. */
	if (im->n_meta > (1u << 20) || im->n_regions > (1u << 22))
		return im_corrupt(im, "%u metadata keys and %u regions", im->n_meta, im->n_regions);
	im->from = calloc(1, len - INFO_FIXED + 1);
	if (!im->from)
		return im_fail(im, "out of memory");
	return im_read(im, im->from, len - INFO_FIXED, EX_INFO);
}

static int rec_meta(struct import *im, uint64_t len)
{
	uint8_t kl[4];
	uint32_t k;
	char *key, *val;

	if (len < 5 || len > META_MAX)
		return im_corrupt(im, "a metadata record of %" PRIu64 " bytes", len);
	if (im->nmeta >= im->n_meta)
		return im_corrupt(im, "more metadata records than its info record says (%u)", im->n_meta);
	if (im_read(im, kl, 4, EX_META))
		return -1;
	k = rd32(kl);
	if (!k || k > len - 4)
		return im_corrupt(im, "a metadata key of %u bytes in a record of %" PRIu64, k, len);
	key = calloc(1, k + 1);
	val = calloc(1, len - 4 - k + 1);
	if (!key || !val) {
		free(key);
		free(val);
		return im_fail(im, "out of memory");
	}
	im->meta[im->nmeta++] = (struct crc_meta_kv){key, val};
	if (im_read(im, key, k, EX_META) || im_read(im, val, len - 4 - k, EX_META))
		return -1;
	if (strlen(key) != k || strlen(val) != len - 4 - k)
		return im_corrupt(im, "a metadata key or value with a NUL byte");
	return 0;
}

static int rec_region(struct import *im, uint64_t len)
{
	uint8_t f[REGION_FIXED];
	struct crc_region *rg;
	uint32_t nl;
	uint64_t sum = 0;

	if (im->nregions >= im->n_regions)
		return im_corrupt(im, "more region records than its info record says (%u)", im->n_regions);
	if (len < REGION_FIXED)
		return im_corrupt(im, "a region record of %" PRIu64 " bytes", len);
	if (im_read(im, f, sizeof(f), EX_REGION))
		return -1;
	rg = &im->regions[im->nregions++];
	rg->kind = rd32(f);
	rg->nchunks = rd32(f + 4);
	rg->addr = rd64(f + 8);
	rg->size = rd64(f + 16);
	memcpy(rg->module.bytes, f + 24, 16);
	nl = rd32(f + 40);
	if (nl > NAME_MAX_EX * 16 || rg->nchunks > rg->size ||
	    len != REGION_FIXED + (nl ? nl - 1 : 0) + 24ull * rg->nchunks)
		return im_corrupt(im, "a region record whose sizes do not add up");
	if (nl) {
		if (!(rg->name = calloc(1, nl)))
			return im_fail(im, "out of memory");
		if (im_read(im, rg->name, nl - 1, EX_REGION))
			return -1;
		if (strlen(rg->name) != nl - 1)
			return im_corrupt(im, "a region name with a NUL byte");
	}
	rg->chunks = calloc(rg->nchunks ? rg->nchunks : 1, sizeof(*rg->chunks));
	if (!rg->chunks)
		return im_fail(im, "out of memory (a region of %u chunks)", rg->nchunks);
	for (uint32_t c = 0; c < rg->nchunks; c++) {
		uint8_t ref[24];

		if (im_read(im, ref, sizeof(ref), EX_REGION))
			return -1;
		memcpy(rg->chunks[c].hash.bytes, ref, 16);
		rg->chunks[c].length = rd64(ref + 16);
		if (!rg->chunks[c].length || rg->chunks[c].length > CRC_CHUNK_MAX)
			return im_corrupt(im, "a region names a chunk of %" PRIu64 " bytes",
					  rg->chunks[c].length);
		sum += rg->chunks[c].length;
	}
	if (sum != rg->size)
		return im_corrupt(im, "region %u: its chunks hold %" PRIu64 " bytes, the region %" PRIu64,
				  im->nregions - 1, sum, rg->size);
	return 0;
}

static int rec_journal(struct import *im, uint64_t len)
{
	uint8_t f[16];
	struct jrec *j;

	if (len < 16 || len - 16 > CRC_JREC_MAX_PAYLOAD)
		return im_corrupt(im, "a journal record of %" PRIu64 " bytes", len);
	if (im_read(im, f, sizeof(f), EX_JOURNAL))
		return -1;
	if (im->njrecs == im->capjrecs) {
		size_t cap = im->capjrecs ? im->capjrecs * 2 : 256;

		j = realloc(im->jrecs, cap * sizeof(*j));
		if (!j)
			return im_fail(im, "out of memory");
		im->jrecs = j;
		im->capjrecs = cap;
	}
	j = &im->jrecs[im->njrecs];
	*j = (struct jrec){.type = rd32(f + 8), .len = (uint32_t)(len - 16), .payload = malloc(len - 16 + 1)};
	if (!j->payload)
		return im_fail(im, "out of memory");
	im->njrecs++;
	if (j->type == 0 || j->type >= CRC_JREC_TYPE_END)
		return im_corrupt(im, "a journal record of type %u", j->type);
	return im_read(im, j->payload, j->len, EX_JOURNAL);
}

static int ensure_buf(struct import *im, size_t n)
{
	if (n <= im->bufcap)
		return 0;
	free(im->buf);
	im->bufcap = n > FILE_PIECE ? n : FILE_PIECE;
	if (!(im->buf = malloc(im->bufcap))) {
		im->bufcap = 0;
		return im_fail(im, "out of memory");
	}
	return 0;
}

/* A blob goes to the spool file, piece by piece, hashed on the way. */
static int rec_blob(struct import *im, uint64_t len)
{
	struct crc_hash h, got;
	XXH3_state_t *xs;
	uint64_t left, off = im->spool_off;
	char hex[CRC_HASH_HEX_LEN + 1];
	int rc = 0;

	if (len <= 16 || len - 16 > CRC_CHUNK_MAX)
		return im_corrupt(im, "a blob record of %" PRIu64 " bytes", len);
	if (im->nblobs >= im->n_blobs)
		return im_corrupt(im, "more blobs than its info record says (%" PRIu64 ")", im->n_blobs);
	if (im_read(im, h.bytes, 16, EX_BLOB) || ensure_buf(im, FILE_PIECE))
		return -1;
	if (im->spool < 0) {
		/* Unlinked, in the store (the blobs may be large for /tmp). */
		im->spool = open(im->store, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
		if (im->spool < 0) {
			char path[PATH_MAX + 32];

			snprintf(path, sizeof(path), "%s/.import-XXXXXX", im->store);
			im->spool = mkostemp(path, O_CLOEXEC);
			if (im->spool >= 0)
				unlink(path);
		}
		if (im->spool < 0)
			return im_fail(im, "cannot make a temporary file in %s: %s", im->store,
				       strerror(errno));
	}
	if (!(xs = XXH3_createState()))
		return im_fail(im, "out of memory");
	XXH3_128bits_reset(xs);
	for (left = len - 16; left && !rc;) {
		size_t n = left < FILE_PIECE ? left : FILE_PIECE;

		rc = im_read(im, im->buf, n, EX_BLOB);
		if (!rc) {
			crc_xxh3_128_update(xs, im->buf, n);
			if (pwrite(im->spool, im->buf, n, (off_t)off) != (ssize_t)n)
				rc = im_fail(im, "writing a temporary file in %s: %s", im->store,
					     strerror(errno));
		}
		off += n;
		left -= n;
	}
	digest(xs, got.bytes);
	XXH3_freeState(xs);
	if (rc)
		return rc;
	if (memcmp(got.bytes, h.bytes, 16)) {
		crc_hash_to_hex(&h, hex);
		return im_corrupt(im, "module image %s does not match its hash", hex);
	}
	if (im->nblobs == im->capblobs) {
		size_t cap = im->capblobs ? im->capblobs * 2 : 16;
		struct spooled *b = realloc(im->blobs, cap * sizeof(*b));

		if (!b)
			return im_fail(im, "out of memory");
		im->blobs = b;
		im->capblobs = cap;
	}
	im->blobs[im->nblobs++] = (struct spooled){h, im->spool_off, len - 16};
	im->spool_off = off;
	return 0;
}

/* Past the regions: the chunk index, then the store session and the checkpoint they go into. */
static int begin_ckpt(struct import *im)
{
	char name[PATH_MAX + 400];
	size_t n = 0;
	uint32_t idx;
	int rc;

	if (im->nregions != im->n_regions || im->nmeta != im->n_meta)
		return im_corrupt(im, "%u regions and %u metadata keys, its info record says %u and %u",
				  im->nregions, im->nmeta, im->n_regions, im->n_meta);
	for (uint32_t r = 0; r < im->nregions; r++)
		n += im->regions[r].nchunks;
	im->refs = calloc(n ? n : 1, sizeof(*im->refs));
	if (!im->refs)
		return im_fail(im, "out of memory");
	for (uint32_t r = 0; r < im->nregions; r++)
		for (uint32_t c = 0; c < im->regions[r].nchunks; c++)
			im->refs[im->nrefs++] = (struct cref){.hash = im->regions[r].chunks[c].hash,
							      .len = im->regions[r].chunks[c].length,
							      .region = r,
							      .index = c};
	qsort(im->refs, im->nrefs, sizeof(*im->refs), cref_cmp);
	for (size_t i = 1; i < im->nrefs; i++)
		if (!memcmp(im->refs[i].hash.bytes, im->refs[i - 1].hash.bytes, 16) &&
		    im->refs[i].len != im->refs[i - 1].len)
			return im_corrupt(im, "one chunk hash named with two lengths");
	snprintf(name, sizeof(name), "import of checkpoint %" PRIu64 " from %s", im->src_id, im->from);
	rc = crc_store_session_create(im->st, name, &im->session);
	if (!rc)
		rc = crc_ckpt_begin(im->st, im->session, &im->ck);
	for (uint32_t r = 0; r < im->nregions && !rc; r++) {
		const struct crc_region *rg = &im->regions[r];
		struct crc_region_desc d = {.kind = rg->kind,
					    .addr = rg->addr,
					    .size = rg->size,
					    .name = rg->name,
					    .module = rg->module};

		rc = crc_ckpt_region_add(im->ck, &d, &idx);
		if (!rc && idx != r)
			rc = CRC_EINVAL;
	}
	if (rc)
		return im_fail(im, "cannot begin a checkpoint in %s: %s", im->store, crc_strerror(rc));
	return 0;
}

static int rec_chunk(struct import *im, uint64_t len)
{
	struct crc_hash h, got;
	struct cref *f;
	char hex[CRC_HASH_HEX_LEN + 1];
	int rc;

	if (len <= 16 || len - 16 > CRC_CHUNK_MAX)
		return im_corrupt(im, "a chunk record of %" PRIu64 " bytes", len);
	if (im_read(im, h.bytes, 16, EX_CHUNK))
		return -1;
	crc_hash_to_hex(&h, hex);
	f = cref_find(im->refs, im->nrefs, &h);
	if (!f)
		return im_corrupt(im, "chunk %s is not one the checkpoint's regions name", hex);
	if (f->got)
		return im_corrupt(im, "chunk %s comes twice", hex);
	if (f->len != len - 16)
		return im_corrupt(im, "chunk %s has %" PRIu64 " bytes, its region says %" PRIu64, hex,
				  len - 16, f->len);
	if (ensure_buf(im, f->len) || im_read(im, im->buf, f->len, EX_CHUNK))
		return -1;
	/* Hashed by the store as it puts it: a mismatch aborts before anything is committed. */
	rc = crc_ckpt_put_chunk_at(im->ck, 0, f->region, f->index, im->buf, f->len, &got);
	if (rc)
		return im_fail(im, "writing chunk %s into %s: %s", hex, im->store, crc_strerror(rc));
	if (memcmp(got.bytes, h.bytes, 16))
		return im_corrupt(im, "chunk %s does not match its hash", hex);
	f->got = true;
	for (struct cref *o = f + 1; o < im->refs + im->nrefs && !memcmp(o->hash.bytes, h.bytes, 16); o++) {
		rc = crc_ckpt_ref_chunk_at(im->ck, 0, o->region, o->index, &h, o->len);
		if (rc)
			return im_fail(im, "naming chunk %s again: %s", hex, crc_strerror(rc));
	}
	im->got_chunks++;
	im->got_chunk_bytes += f->len;
	return 0;
}

static int make_imgdir(struct import *im)
{
	char criu[PATH_MAX + 16], stamp[32];
	time_t now = time(NULL);
	struct tm tm;

	gmtime_r(&now, &tm);
	strftime(stamp, sizeof(stamp), "%Y%m%dT%H%M%SZ", &tm);
	snprintf(criu, sizeof(criu), "%s/criu", im->store);
	if (mkdir(criu, 0700) && errno != EEXIST)
		return im_fail(im, "cannot create %s: %s", criu, strerror(errno));
	snprintf(im->imgdir, sizeof(im->imgdir), "%s/%s-import-XXXXXX", criu, stamp);
	if (!mkdtemp(im->imgdir)) {
		im->imgdir[0] = 0;
		return im_fail(im, "cannot create an image directory in %s: %s", criu, strerror(errno));
	}
	snprintf(im->imgname, sizeof(im->imgname), "%s", strrchr(im->imgdir, '/') + 1);
	/* Held until the manifest names it (as a checkpoint does): gc leaves a locked directory. */
	im->imgfd = open(im->imgdir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (im->imgfd < 0 || flock(im->imgfd, LOCK_EX))
		return im_fail(im, "cannot lock %s: %s", im->imgdir, strerror(errno));
	return 0;
}

static int rec_file(struct import *im, uint64_t len)
{
	uint8_t f[8];
	char name[NAME_MAX_EX + 1] = "";
	uint32_t mode, nl;
	uint64_t left;
	int fd, rc = 0;

	if (im->imgfd < 0)
		return im_corrupt(im, "CRIU image files, but its metadata names no image directory");
	if (len < 8 || im->got_files >= im->n_files)
		return im_corrupt(im, "a file record of %" PRIu64 " bytes, or more than %" PRIu64, len,
				  im->n_files);
	if (im_read(im, f, sizeof(f), EX_FILE))
		return -1;
	mode = rd32(f);
	nl = rd32(f + 4);
	if (!nl || nl > NAME_MAX_EX || nl > len - 8)
		return im_corrupt(im, "a file name of %u bytes", nl);
	if (im_read(im, name, nl, EX_FILE))
		return -1;
	if (strlen(name) != nl || strchr(name, '/') || !strcmp(name, ".") || !strcmp(name, ".."))
		return im_corrupt(im, "a file named '%s'", name);
	fd = openat(im->imgfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
		    (mode_t)(mode & 0777));
	if (fd < 0)
		return errno == EEXIST ? im_corrupt(im, "file '%s' comes twice", name)
				       : im_fail(im, "%s/%s: %s", im->imgdir, name, strerror(errno));
	if (ensure_buf(im, FILE_PIECE)) {
		close(fd);
		return -1;
	}
	for (left = len - 8 - nl; left && !rc;) {
		size_t n = left < FILE_PIECE ? left : FILE_PIECE;

		rc = im_read(im, im->buf, n, EX_FILE);
		if (!rc && write_all(fd, im->buf, n))
			rc = im_fail(im, "writing %s/%s: %s", im->imgdir, name, strerror(errno));
		left -= n;
	}
	if (!rc && im->sync && fsync(fd))
		rc = im_fail(im, "%s/%s: %s", im->imgdir, name, strerror(errno));
	close(fd);
	im->got_files++;
	return rc;
}

static int rec_trailer(struct import *im, uint64_t len, const uint8_t sum[16])
{
	uint8_t t[24], extra;
	size_t got;

	if (len != sizeof(t))
		return im_corrupt(im, "a trailer of %" PRIu64 " bytes", len);
	if (xr_read(&im->r, t, sizeof(t), false, &got))
		return im_fail(im, "the export is truncated: it ends at byte %" PRIu64 ", inside its trailer",
			       im->r.off);
	if (rd64(t) != im->records)
		return im_corrupt(im, "its trailer counts %" PRIu64 " records, %" PRIu64 " came", rd64(t),
				  im->records);
	if (memcmp(t + 8, sum, 16))
		return im_fail(im,
			       "the export is corrupt: its checksum (XXH3-128 in the trailer) does not match "
			       "its bytes");
	if (!im->more_follows && xr_read(&im->r, &extra, 1, false, &got) != CRC_ETRUNC)
		return im_corrupt(im, "bytes after its trailer");
	return 0;
}

/* Commits what the verified stream held: the journal and the blobs into the new store session, the
 * metadata naming the new session, journal and images, then the checkpoint. */
static int im_commit(struct import *im, uint64_t *out_id)
{
	struct crc_jrec_in *in = NULL;
	uint64_t last = 0;
	uint8_t *buf = NULL;
	char val[80];
	int rc = 0;

	if (im->got_chunks != im->n_chunks || im->got_chunk_bytes != im->chunk_bytes ||
	    im->nblobs != im->n_blobs || im->njrecs != im->n_journal || im->got_files != im->n_files)
		return im_fail(im,
			       "the export is incomplete: %" PRIu64
			       " chunks, %zu blobs, %zu journal records and "
			       "%" PRIu64 " files came, its info record says %" PRIu64 ", %" PRIu64
			       ", %" PRIu64 " and %" PRIu64,
			       im->got_chunks, im->nblobs, im->njrecs, im->got_files, im->n_chunks,
			       im->n_blobs, im->n_journal, im->n_files);
	for (size_t i = 0; i < im->nrefs; i++) {
		if ((i && !memcmp(im->refs[i].hash.bytes, im->refs[i - 1].hash.bytes, 16)) || im->refs[i].got)
			continue;
		if (!im->known_ok)
			return im_fail(im, "the export is incomplete: it lacks a chunk its regions name");
		/* Left out because this store holds it (a migration's earlier round sent it). */
		for (size_t j = i;
		     j < im->nrefs && !memcmp(im->refs[j].hash.bytes, im->refs[i].hash.bytes, 16); j++) {
			rc = crc_ckpt_ref_chunk_at(im->ck, 0, im->refs[j].region, im->refs[j].index,
						   &im->refs[j].hash, im->refs[j].len);
			if (rc) {
				char hex[CRC_HASH_HEX_LEN + 1];

				crc_hash_to_hex(&im->refs[i].hash, hex);
				return im_fail(im, "chunk %s was not sent and %s does not hold it: %s", hex,
					       im->store, crc_strerror(rc));
			}
		}
	}
	if (im->njrecs) {
		in = calloc(im->njrecs, sizeof(*in));
		if (!in)
			return im_fail(im, "out of memory");
		for (size_t i = 0; i < im->njrecs; i++)
			in[i] =
			    (struct crc_jrec_in){im->jrecs[i].type, im->jrecs[i].len, im->jrecs[i].payload};
		rc = crc_store_journal_append_batch(im->st, im->session, in, im->njrecs, &last);
		free(in);
		if (rc)
			return im_fail(im, "writing the journal into %s: %s", im->store, crc_strerror(rc));
	}
	for (size_t i = 0; i < im->nblobs; i++) {
		struct crc_hash h;

		free(buf);
		if (!(buf = malloc(im->blobs[i].len)))
			return im_fail(im, "out of memory");
		if (pread(im->spool, buf, im->blobs[i].len, (off_t)im->blobs[i].off) !=
		    (ssize_t)im->blobs[i].len) {
			free(buf);
			return im_fail(im, "reading back a temporary file: %s", strerror(errno));
		}
		rc = crc_store_blob_put(im->st, im->session, buf, im->blobs[i].len, &h);
		if (!rc && memcmp(h.bytes, im->blobs[i].hash.bytes, 16))
			rc = CRC_ECORRUPT; /* the temporary file changed under us */
		if (rc) {
			free(buf);
			return im_fail(im, "writing a module image into %s: %s", im->store, crc_strerror(rc));
		}
	}
	free(buf);
	/* Module images the journal names that the stream left out (a migration's earlier round brought
	 * them: the store holds them) are pinned to the new session; else the export is incomplete. */
	for (size_t i = 0; i < im->njrecs; i++) {
		static const uint8_t zero[16];
		char hex[CRC_HASH_HEX_LEN + 1];
		struct crc_jrec_view v;
		struct crc_hash h;
		bool sent = false;

		if (crc_jrec_decode(im->jrecs[i].payload, im->jrecs[i].len, &v))
			return im_corrupt(im, "journal record %zu cannot be decoded", i);
		if (!memcmp(v.call->image_hash, zero, 16))
			continue;
		memcpy(h.bytes, v.call->image_hash, 16);
		for (size_t b = 0; b < im->nblobs && !sent; b++)
			sent = !memcmp(im->blobs[b].hash.bytes, h.bytes, 16);
		if (sent)
			continue;
		crc_hash_to_hex(&h, hex);
		if (!im->known_ok)
			return im_fail(
			    im, "the export is incomplete: it lacks module image %s, which its journal names",
			    hex);
		rc = crc_store_blob_pin(im->st, im->session, &h, v.call->image_bytes);
		if (rc)
			return im_fail(im, "module image %s was not sent and %s does not hold it: %s", hex,
				       im->store, crc_strerror(rc));
		im->images_pinned++;
	}
	for (uint32_t i = 0; i < im->nmeta && !rc; i++) {
		const char *k = im->meta[i].key, *v = im->meta[i].value;

		if (!strcmp(k, "crcuda.session"))
			snprintf(val, sizeof(val), "%" PRIu64, im->session), v = val;
		else if (!strcmp(k, "crcuda.journal_seq"))
			snprintf(val, sizeof(val), "%" PRIu64, last), v = val;
		else if (!strcmp(k, "criu.images_dir"))
			snprintf(val, sizeof(val), "criu/%s", im->imgname), v = val;
		rc = crc_ckpt_meta_set(im->ck, k, v);
	}
	if (!rc) {
		char from[PATH_MAX + 400];

		snprintf(from, sizeof(from), "%s checkpoint %" PRIu64, im->from, im->src_id);
		rc = crc_ckpt_meta_set(im->ck, "crcuda.imported_from", from);
	}
	if (!rc && im->precopy)
		rc = crc_ckpt_meta_set(im->ck, "crcuda.migrate_precopy", "1");
	if (rc)
		return im_fail(im, "%s", crc_strerror(rc));
	if (im->imgfd >= 0 && im->sync && fsync(im->imgfd))
		return im_fail(im, "%s: %s", im->imgdir, strerror(errno));
	rc = crc_ckpt_commit(im->ck, out_id);
	im->ck = NULL;
	if (rc)
		return im_fail(im, "committing the checkpoint into %s: %s", im->store, crc_strerror(rc));
	return 0;
}

/* What leaving one kind of record for the next (type; EX_TRAILER at the end) sets up. */
static int im_advance(struct import *im, uint32_t last, uint32_t type)
{
	if (last == EX_INFO) {
		im->meta = calloc(im->n_meta ? im->n_meta : 1, sizeof(*im->meta));
		im->regions = calloc(im->n_regions ? im->n_regions : 1, sizeof(*im->regions));
		if (!im->meta || !im->regions)
			return im_fail(im, "out of memory (%u metadata keys, %u regions)", im->n_meta,
				       im->n_regions);
	}
	if (last <= EX_META && type > EX_META)
		for (uint32_t i = 0; i < im->nmeta; i++)
			if (!strcmp(im->meta[i].key, "criu.images_dir") && make_imgdir(im))
				return -1;
	if (last <= EX_REGION && type > EX_REGION && begin_ckpt(im))
		return -1;
	return 0;
}

static int im_run(struct import *im, uint64_t *out_id)
{
	uint8_t h[16], sum[16];
	uint32_t last = 0, n;
	char ver[257] = "";

	if (xr_read(&im->r, h, 16, true, NULL)) {
		if (im->r.off == 0)
			return im_fail(im, "the export is empty");
		return memcmp(h, EXPORT_MAGIC, im->r.off < 8 ? im->r.off : 8)
			   ? im_fail(im, "not a crcuda export (no CRCUDAEX header)")
			   : im_fail(im,
				     "the export is truncated: it ends at byte %" PRIu64
				     ", inside its header",
				     im->r.off);
	}
	if (memcmp(h, EXPORT_MAGIC, 8))
		return im_fail(im, "not a crcuda export (no CRCUDAEX header)");
	n = rd32(h + 12);
	if (n >= sizeof(ver))
		return im_corrupt(im, "a header of %u bytes", n);
	if (im_read(im, ver, n, 0))
		return -1;
	ver[n] = 0;
	if (rd32(h + 8) != EXPORT_FORMAT)
		return im_fail(im, "export format version %u%s%.32s%s; this crcudactl (%s) reads version %u",
			       rd32(h + 8), ver[0] ? " (written by crcuda " : "", ver, ver[0] ? ")" : "",
			       CRCUDA_VERSION, EXPORT_FORMAT);
	for (;;) {
		uint8_t rh[REC_HDR];
		size_t got;
		uint32_t type;
		uint64_t len;
		int rc = xr_read(&im->r, rh, sizeof(rh), false, &got);

		if (rc == CRC_ETRUNC)
			return im_fail(im, "the export is truncated: it ends at byte %" PRIu64 "%s",
				       im->r.off, got ? ", inside a record header" : ", before its trailer");
		if (rc)
			return im_fail(im, "reading the export: %s", strerror(-rc));
		type = rd32(rh);
		len = rd64(rh + 8);
		if (rd32(rh + 4) != rec_check(rh))
			return im_fail(im,
				       "the export is corrupt: the header of record %" PRIu64
				       " (byte %" PRIu64 ") is damaged",
				       im->records + 1, im->r.off - REC_HDR);
		if (type == EX_TRAILER) {
			/* The checksum covers everything before the trailer's own header. */
			digest(im->r.xs, sum);
			if (!last)
				return im_corrupt(im, "a trailer before its info record");
			if (im_advance(im, last, type) || rec_trailer(im, len, sum))
				return -1;
			return im_commit(im, out_id);
		}
		crc_xxh3_128_update(im->r.xs, rh, sizeof(rh));
		im->records++;
		if (type < EX_INFO || type > EX_TRAILER)
			return im_corrupt(im, "a record of unknown type %u", type);
		if (type < last || (type == EX_INFO && last == EX_INFO) || (!last && type != EX_INFO))
			return im_corrupt(im, "a %s record after a %s record", rec_name(type),
					  last ? rec_name(last) : "header");
		if (last && type != last && im_advance(im, last, type))
			return -1;
		last = type;
		switch (type) {
		case EX_INFO:
			rc = rec_info(im, len);
			break;
		case EX_META:
			rc = rec_meta(im, len);
			break;
		case EX_REGION:
			rc = rec_region(im, len);
			break;
		case EX_JOURNAL:
			rc = rec_journal(im, len);
			break;
		case EX_BLOB:
			rc = rec_blob(im, len);
			break;
		case EX_CHUNK:
			rc = rec_chunk(im, len);
			break;
		case EX_FILE:
			rc = rec_file(im, len);
			break;
		}
		if (rc)
			return -1;
	}
}

/* Removes the image directory we made (flat: only the files we wrote). */
static void remove_imgdir(struct import *im)
{
	DIR *d;
	struct dirent *de;

	if (!im->imgdir[0])
		return;
	d = opendir(im->imgdir);
	while (d && (de = readdir(d)))
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
			unlinkat(dirfd(d), de->d_name, 0);
	if (d)
		closedir(d);
	rmdir(im->imgdir);
}

/* Opens the store and reads the stream into it: 0 with *id, or -1 with im->why. */
static int import_stream(struct import *im, uint64_t *id)
{
	char real[PATH_MAX];
	int rc = crc_store_open(im->store, CRC_STORE_CREATE, &im->st);

	if (rc)
		return im_fail(im, "cannot open the store %s: %s", im->store, crc_strerror(rc));
	/* The store's real path: the images directory and messages name it. */
	if (realpath(im->store, real))
		snprintf(im->store, sizeof(im->store), "%s", real);
	im->r.xs = XXH3_createState();
	im->r.buf = malloc(IO_BUF);
	if (!im->r.xs || !im->r.buf)
		return im_fail(im, "out of memory");
	XXH3_128bits_reset(im->r.xs);
	if (im_run(im, id))
		return -1;
	if (im->imgfd >= 0) {
		close(im->imgfd); /* the manifest names it now: the lock can go */
		im->imgfd = -1;
	}
	return 0;
}

/* Frees what import_stream holds; where it failed (!ok), drops what it began. */
static void import_free(struct import *im, bool ok)
{
	if (!ok) {
		crc_ckpt_abort(im->ck);
		remove_imgdir(im);
	}
	if (im->imgfd >= 0)
		close(im->imgfd);
	if (im->spool >= 0)
		close(im->spool);
	for (uint32_t i = 0; i < im->nmeta; i++) {
		free(im->meta[i].key);
		free(im->meta[i].value);
	}
	free(im->meta);
	for (uint32_t i = 0; i < im->nregions; i++) {
		free(im->regions[i].name);
		free(im->regions[i].chunks);
	}
	free(im->regions);
	for (size_t i = 0; i < im->njrecs; i++)
		free(im->jrecs[i].payload);
	free(im->jrecs);
	free(im->blobs);
	free(im->refs);
	free(im->buf);
	free(im->from);
	free(im->r.buf);
	if (im->r.xs)
		XXH3_freeState(im->r.xs);
	crc_store_close(im->st);
}

int ctl_import_fd(const char *store, int fd, const struct ctl_import_opts *o, uint64_t *id, uint64_t *bytes,
		  char *why, size_t len)
{
	const char *env = getenv("CRCUDA_STORE_SYNC");
	struct import im = {.r.fd = fd,
			    .spool = -1,
			    .imgfd = -1,
			    .src = "the stream",
			    .known_ok = o->known_ok,
			    .more_follows = o->more_follows,
			    .precopy = o->precopy,
			    .sync = !(env && !strcmp(env, "0"))};
	int rc;

	snprintf(im.store, sizeof(im.store), "%s", store);
	rc = import_stream(&im, id);
	*bytes = im.r.off;
	if (o->images_pinned)
		*o->images_pinned = im.images_pinned;
	snprintf(why, len, "%s", im.why[0] ? im.why : "failed");
	import_free(&im, !rc);
	return rc;
}

#ifndef CRC_EXPORT_STREAM_ONLY
static void import_usage(FILE *f)
{
	fprintf(f,
		"Usage: crcudactl import [--store DIR] [-i FILE]\n"
		"\n"
		"Reads a checkpoint that `crcudactl export` wrote into the store (created if needed) and\n"
		"prints its id there; `crcudactl restore ID` then restores it. Every chunk is checked\n"
		"against its hash and the whole stream against the checksum in its trailer before anything\n"
		"is committed: a truncated or damaged export fails, saying why, and leaves no checkpoint\n"
		"(nor CRIU images) behind.\n"
		"\n"
		"Options:\n"
		"  -s, --store DIR  the store (default $CRCUDA_STORE, else ~/.local/share/crcuda/store)\n"
		"  -i, --input FILE read FILE (default stdin, which must not be a terminal)\n"
		"      --json       machine-readable result on stdout\n"
		"  -h, --help       this help\n"
		"\n"
		"Exit status: 0 imported, 1 failed (nothing imported), 2 usage error.\n");
}

int cmd_import(int argc, char **argv, struct ctl_opts *opts)
{
	enum { OPT_JSON = 256 };
	static const struct option longopts[] = {
	    {"store", required_argument, NULL, 's'},
	    {"input", required_argument, NULL, 'i'},
	    {"json", no_argument, NULL, OPT_JSON},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	const char *store_arg = NULL, *in = NULL, *env = getenv("CRCUDA_STORE_SYNC");
	struct import im = {.r.fd = -1, .spool = -1, .imgfd = -1, .src = "stdin"};
	uint64_t id = 0;
	char sz[32];
	int c, ret = CTL_EXIT_FAILURE;

	while ((c = getopt_long(argc, argv, "s:i:h", longopts, NULL)) != -1) {
		switch (c) {
		case 's':
			store_arg = optarg;
			break;
		case 'i':
			in = strcmp(optarg, "-") ? optarg : NULL;
			break;
		case OPT_JSON:
			opts->json = true;
			break;
		case 'h':
			import_usage(stdout);
			return CTL_EXIT_OK;
		default:
			import_usage(stderr);
			return CTL_EXIT_USAGE;
		}
	}
	if (optind != argc) {
		ctl_error("import: unexpected operand '%s' (the export comes on stdin, or -i FILE)",
			  argv[optind]);
		return CTL_EXIT_USAGE;
	}
	if (!in && isatty(STDIN_FILENO)) {
		ctl_error("import: refusing to read from a terminal: give -i FILE, or redirect stdin");
		return CTL_EXIT_USAGE;
	}
	if (ctl_store_dir(store_arg, im.store, sizeof(im.store)))
		return CTL_EXIT_USAGE;
	im.sync = !(env && !strcmp(env, "0"));
	if (in) {
		im.src = in;
		im.r.fd = open(in, O_RDONLY | O_CLOEXEC);
		if (im.r.fd < 0) {
			ctl_error("import: %s: %s", in, strerror(errno));
			return CTL_EXIT_FAILURE;
		}
	} else {
		im.r.fd = STDIN_FILENO;
	}
	if (import_stream(&im, &id))
		goto out;
	human(im.r.off, sz, sizeof(sz));
	if (opts->json)
		ctl_json_print(json_pack(
		    "{s:i, s:s, s:I, s:{s:I, s:s}, s:I, s:I, s:I, s:I, s:I, s:s?, s:I, s:I}", "version",
		    EXPORT_JSON_VERSION, "store", im.store, "id", (json_int_t)id, "source", "id",
		    (json_int_t)im.src_id, "from", im.from, "regions", (json_int_t)im.nregions, "chunks",
		    (json_int_t)im.got_chunks, "chunk_bytes", (json_int_t)im.got_chunk_bytes,
		    "journal_records", (json_int_t)im.njrecs, "blobs", (json_int_t)im.nblobs, "criu_images",
		    im.imgname[0] ? im.imgdir + strlen(im.store) + 1 : NULL, "criu_files",
		    (json_int_t)im.got_files, "bytes", (json_int_t)im.r.off));
	else
		printf("imported checkpoint %" PRIu64 " (checkpoint %" PRIu64 " of %s; %s)\n", id, im.src_id,
		       im.from, sz);
	ret = CTL_EXIT_OK;
out:
	if (ret != CTL_EXIT_OK)
		ctl_error("import: %s: %s", im.src, im.why[0] ? im.why : "failed");
	import_free(&im, ret == CTL_EXIT_OK);
	if (in && im.r.fd >= 0)
		close(im.r.fd);
	return ret;
}
#endif /* CRC_EXPORT_STREAM_ONLY */
