/* crc_store_verify: every byte checked against its hash; crc_store_gc: mark from manifests and pinned
 * blobs, sweep the chunk index, then unlink pack files nothing lives in. */
#define LOG_PREFIX "store: "

#include <dirent.h>
#include <stdarg.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "crcuda/errno.h"
#include "crcuda/log.h"
#include "store_internal.h"

struct pack_rec {
	uint64_t id;
	uint64_t size;
	uint64_t live_bytes, dead_bytes;
	uint64_t live_chunks;
};

struct pack_table {
	struct pack_rec *v;
	size_t n;
};

/* Loads the packs database; keys are big-endian ids, so the table comes out sorted. */
static int packs_load(struct crc_store *st, MDB_txn *txn, struct pack_table *out)
{
	MDB_cursor *cur;
	MDB_val k, v;
	size_t cap = 0;
	int rc = mdb_cursor_open(txn, st->dbi_packs, &cur);
	if (rc)
		return crc__mdb_err(rc, "mdb_cursor_open");
	memset(out, 0, sizeof(*out));
	while ((rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) == 0) {
		if (out->n == cap) {
			cap = cap ? cap * 2 : 16;
			struct pack_rec *p = realloc(out->v, cap * sizeof(*p));
			if (!p) {
				mdb_cursor_close(cur);
				return CRC_ENOMEM;
			}
			out->v = p;
		}
		out->v[out->n++] = (struct pack_rec){
		    .id = k.mv_size == 8 ? get_be64(k.mv_data) : 0,
		    .size = v.mv_size == 8 ? get_le64(v.mv_data) : 0,
		};
	}
	mdb_cursor_close(cur);
	return rc == MDB_NOTFOUND ? 0 : crc__mdb_err(rc, "reading the packs database");
}

static struct pack_rec *packs_find(const struct pack_table *t, uint64_t id)
{
	size_t lo = 0, hi = t->n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (t->v[mid].id == id)
			return &t->v[mid];
		if (t->v[mid].id < id)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

/* Calls fn(arg, hash) for every chunk that a manifest or pinned blob names. A manifest that cannot
 * be decoded gives CRC_ECORRUPT, or with on_bad_manifest set, a call to it and the walk goes on. */
struct walk {
	struct crc_store *st;
	MDB_txn *txn;
	int (*chunk)(void *arg, uint64_t ckpt, const struct crc_hash *hash);
	void (*bad_manifest)(void *arg, uint64_t ckpt, int err);
	void *arg;
};

static int walk_roots(struct walk *w)
{
	MDB_cursor *cur = NULL;
	MDB_val k, v;
	int rc = mdb_cursor_open(w->txn, w->st->dbi_manifests, &cur);
	if (rc)
		return crc__mdb_err(rc, "mdb_cursor_open");
	while ((rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) == 0) {
		uint64_t ckpt = k.mv_size == 8 ? get_be64(k.mv_data) : 0;
		struct crc_manifest *m;
		rc = crc__manifest_decode(v.mv_data, v.mv_size, &m);
		if (rc == CRC_ECORRUPT && w->bad_manifest) {
			w->bad_manifest(w->arg, ckpt, rc);
			continue;
		}
		if (rc) {
			pr_err("checkpoint %" PRIu64 ": the manifest cannot be decoded", ckpt);
			goto out;
		}
		for (uint32_t i = 0; i < m->nregions && !rc; i++)
			for (uint32_t c = 0; c < m->regions[i].nchunks && !rc; c++)
				rc = w->chunk(w->arg, ckpt, &m->regions[i].chunks[c].hash);
		crc_manifest_free(m);
		if (rc)
			goto out;
	}
	mdb_cursor_close(cur);
	rc = mdb_cursor_open(w->txn, w->st->dbi_blobs, &cur);
	if (rc)
		return crc__mdb_err(rc, "mdb_cursor_open");
	while ((rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) == 0) {
		if (k.mv_size != 24)
			continue;
		struct crc_hash h;
		memcpy(h.bytes, (uint8_t *)k.mv_data + 8, 16);
		rc = w->chunk(w->arg, 0, &h);
		if (rc)
			goto out;
	}
out:
	mdb_cursor_close(cur);
	if (rc == MDB_NOTFOUND)
		return 0;
	return rc > 0 ? crc__mdb_err(rc, "walking manifests") : rc;
}

struct verify_ctx {
	struct crc_store *st;
	MDB_txn *txn;
	crc_problem_fn fn;
	void *arg;
	struct crc_verify_report rep;
	struct hset bad;       /* chunks found damaged */
	struct hset bad_ckpts; /* manifests already counted as bad (key: id in the first bytes) */
};

static void problem(struct verify_ctx *c, int err, const char *id, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void problem(struct verify_ctx *c, int err, const char *id, const char *fmt, ...)
{
	char what[256];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	c->rep.problems++;
	pr_err("verify: %s: %s", id, what);
	if (c->fn)
		c->fn(c->arg, err, id, what);
}

static void bad_ckpt(struct verify_ctx *c, uint64_t ckpt)
{
	struct crc_hash key = {{0}};
	bool fresh;
	put_be64(key.bytes, ckpt);
	key.bytes[15] = 1; /* ids and hashes never meet: this set holds ids only */
	if (crc__hset_insert(&c->bad_ckpts, &key, &fresh) && fresh)
		c->rep.bad_manifests++;
}

static void verify_bad_manifest(void *arg, uint64_t ckpt, int err)
{
	struct verify_ctx *c = arg;
	char id[32];
	snprintf(id, sizeof(id), "ckpt %" PRIu64, ckpt);
	problem(c, err, id, "the manifest cannot be decoded");
	bad_ckpt(c, ckpt);
}

static int verify_root_chunk(void *arg, uint64_t ckpt, const struct crc_hash *hash)
{
	struct verify_ctx *c = arg;
	struct chunk_loc loc;
	char hex[CRC_HASH_HEX_LEN + 1], id[64];
	int rc = crc__chunk_locate(c->st, c->txn, hash, &loc);
	if (rc && rc != CRC_ENOTFOUND)
		return rc;
	if (rc == 0 && !crc__hset_find(&c->bad, hash))
		return 0;
	crc_hash_to_hex(hash, hex);
	if (rc == CRC_ENOTFOUND) {
		snprintf(id, sizeof(id), ckpt ? "ckpt %" PRIu64 : "blob", ckpt);
		problem(c, CRC_ENOTFOUND, id, "names chunk %s, which is not in the index", hex);
	}
	if (ckpt)
		bad_ckpt(c, ckpt);
	return 0;
}

struct chunk_ent {
	struct crc_hash hash;
	struct chunk_loc loc;
};

static int chunk_ent_cmp(const void *a, const void *b)
{
	const struct chunk_loc *x = &((const struct chunk_ent *)a)->loc,
			       *y = &((const struct chunk_ent *)b)->loc;
	if (x->pack != y->pack)
		return x->pack < y->pack ? -1 : 1;
	return x->offset < y->offset ? -1 : x->offset > y->offset;
}

static int verify_packs(struct verify_ctx *c, const struct pack_table *packs)
{
	char path[PATH_MAX], id[32];
	for (size_t i = 0; i < packs->n; i++) {
		const struct pack_rec *p = &packs->v[i];
		snprintf(id, sizeof(id), "%016" PRIx64 ".pack", p->id);
		crc__pack_path(c->st, p->id, path, sizeof(path));
		c->rep.packs++;
		int fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0) {
			problem(c, CRC_ETRUNC, id, "pack file missing (%s)", strerror(errno));
			continue;
		}
		struct stat sb;
		uint8_t hdr[PACK_HEADER_SIZE];
		if (fstat(fd, &sb) == 0 && (uint64_t)sb.st_size < p->size)
			problem(c, CRC_ETRUNC, id, "pack file is %lld bytes, the commit recorded %" PRIu64,
				(long long)sb.st_size, p->size);
		if (pread(fd, hdr, sizeof(hdr), 0) != (ssize_t)sizeof(hdr))
			problem(c, CRC_ETRUNC, id, "pack file shorter than its header");
		else if (memcmp(hdr, PACK_MAGIC, 8) || get_le32(hdr + 8) != PACK_VERSION ||
			 get_le64(hdr + 16) != p->id)
			problem(c, CRC_ECORRUPT, id, "pack header damaged (magic, version or id)");
		close(fd);
	}
	/* Pack files no commit names: a killed writer's leftovers (or a live writer's), not damage. */
	DIR *d = opendir(c->st->packs_dir);
	if (!d)
		return -errno;
	struct dirent *de;
	uint64_t pid;
	while ((de = readdir(d)))
		if (crc__pack_name_parse(de->d_name, &pid) && !packs_find(packs, pid))
			c->rep.orphan_packs++;
	closedir(d);
	return 0;
}

static int verify_chunks(struct verify_ctx *c, const struct pack_table *packs)
{
	MDB_cursor *cur;
	MDB_val k, v;
	struct chunk_ent *ents = NULL;
	size_t n = 0, cap = 0, bufcap = 0;
	uint8_t *buf = NULL;
	char hex[CRC_HASH_HEX_LEN + 1];
	int rc = mdb_cursor_open(c->txn, c->st->dbi_chunks, &cur);
	if (rc)
		return crc__mdb_err(rc, "mdb_cursor_open");
	while ((rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) == 0) {
		if (n == cap) {
			cap = cap ? cap * 2 : 1024;
			struct chunk_ent *p = realloc(ents, cap * sizeof(*p));
			if (!p) {
				rc = CRC_ENOMEM;
				goto out;
			}
			ents = p;
		}
		if (k.mv_size != 16 || crc__chunk_loc_decode(v.mv_data, v.mv_size, &ents[n].loc)) {
			problem(c, CRC_ECORRUPT, "chunk index", "damaged entry of %zu/%zu bytes", k.mv_size,
				v.mv_size);
			continue;
		}
		memcpy(ents[n].hash.bytes, k.mv_data, 16);
		n++;
	}
	if (rc != MDB_NOTFOUND) {
		rc = crc__mdb_err(rc, "reading the chunk index");
		goto out;
	}
	rc = 0;
	/* In file order, so verify reads each pack sequentially. */
	qsort(ents, n, sizeof(*ents), chunk_ent_cmp);
	for (size_t i = 0; i < n; i++) {
		const struct chunk_ent *e = &ents[i];
		bool fresh;
		int err = 0;
		crc_hash_to_hex(&e->hash, hex);
		const struct pack_rec *p = packs_find(packs, e->loc.pack);
		if (!p || e->loc.offset < PACK_HEADER_SIZE + CHUNK_HEADER_SIZE ||
		    e->loc.offset + e->loc.stored > p->size || e->loc.length > CRC_CHUNK_MAX) {
			problem(c, CRC_ECORRUPT, hex, "index entry points outside any committed pack");
			err = CRC_ECORRUPT;
		} else {
			if (e->loc.length > bufcap) {
				free(buf);
				bufcap = e->loc.length;
				buf = malloc(bufcap);
				if (!buf) {
					rc = CRC_ENOMEM;
					goto out;
				}
			}
			err = crc__chunk_read_at(c->st, &e->hash, &e->loc, buf);
			if (err == CRC_ECORRUPT || err == CRC_ETRUNC || err < 0)
				problem(c, err, hex, "%s (pack %016" PRIx64 ", offset %" PRIu64 ")",
					err != CRC_ECORRUPT ? crc_strerror(err)
					: e->loc.encoding != CHUNK_ENC_RAW
					    ? "compressed bytes damaged: they do not "
					      "decode to the chunk's hash"
					    : "bytes do not match the hash",
					e->loc.pack, e->loc.offset);
			c->rep.chunks++;
			c->rep.bytes += e->loc.length;
			c->rep.stored_bytes += e->loc.stored;
		}
		if (err && !crc__hset_insert(&c->bad, &e->hash, &fresh)) {
			rc = CRC_ENOMEM;
			goto out;
		}
	}
out:
	mdb_cursor_close(cur);
	free(ents);
	free(buf);
	return rc;
}

int crc_store_verify(struct crc_store *st, crc_problem_fn fn, void *arg, struct crc_verify_report *out)
{
	if (!st)
		return CRC_EINVAL;
	struct verify_ctx c = {.st = st, .fn = fn, .arg = arg};
	struct pack_table packs = {0};
	/* Read through fresh descriptors: a cached one could still see a file since removed. */
	if (st->read_fd >= 0) {
		close(st->read_fd);
		st->read_fd = -1;
	}
	int rc = mdb_txn_begin(st->env, NULL, MDB_RDONLY, &c.txn);
	if (rc)
		return crc__mdb_err(rc, "mdb_txn_begin");
	if ((rc = packs_load(st, c.txn, &packs)) || (rc = verify_packs(&c, &packs)) ||
	    (rc = verify_chunks(&c, &packs)))
		goto out;
	MDB_stat ms;
	if (mdb_stat(c.txn, st->dbi_manifests, &ms) == 0)
		c.rep.manifests = ms.ms_entries;
	struct walk w = {st, c.txn, verify_root_chunk, verify_bad_manifest, &c};
	rc = walk_roots(&w);
	if (rc)
		goto out;
	rc = c.rep.problems ? CRC_ECORRUPT : 0;
	if (out)
		*out = c.rep;
out:
	mdb_txn_abort(c.txn);
	free(packs.v);
	crc__hset_free(&c.bad);
	crc__hset_free(&c.bad_ckpts);
	return rc;
}

static int gc_mark(void *arg, uint64_t ckpt, const struct crc_hash *hash)
{
	(void)ckpt;
	bool fresh;
	return crc__hset_insert(arg, hash, &fresh) ? 0 : CRC_ENOMEM;
}

/* Removes pack files that no commit names, unless a live writer holds their lock. */
static int gc_orphans(struct crc_store *st, struct crc_gc_report *rep)
{
	char path[PATH_MAX];
	DIR *d = opendir(st->packs_dir);
	if (!d) {
		int rc = -errno;
		pr_perror("opening %s", st->packs_dir);
		return rc;
	}
	struct dirent *de;
	uint64_t id;
	int rc = 0;
	while ((de = readdir(d))) {
		if (!crc__pack_name_parse(de->d_name, &id))
			continue;
		MDB_txn *txn;
		uint8_t key[8];
		put_be64(key, id);
		MDB_val k = {8, key}, v;
		if ((rc = mdb_txn_begin(st->env, NULL, MDB_RDONLY, &txn)))
			break;
		rc = mdb_get(txn, st->dbi_packs, &k, &v);
		mdb_txn_abort(txn);
		if (rc != MDB_NOTFOUND) {
			if (rc)
				break;
			continue;
		}
		/* Not committed. From here on, a pack that is skipped is no error. */
		rc = 0;
		crc__pack_path(st, id, path, sizeof(path));
		int fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			continue;
		if (flock(fd, LOCK_EX | LOCK_NB)) {
			close(fd); /* a live writer's */
			continue;
		}
		/* The writer may have committed and unlocked between our look-up and our lock. */
		rc = mdb_txn_begin(st->env, NULL, MDB_RDONLY, &txn);
		if (rc) {
			close(fd);
			break;
		}
		rc = mdb_get(txn, st->dbi_packs, &k, &v);
		mdb_txn_abort(txn);
		struct stat sb;
		if (rc == MDB_NOTFOUND && fstat(fd, &sb) == 0 && unlink(path) == 0) {
			rep->orphan_packs_removed++;
			rep->bytes_freed += (uint64_t)sb.st_size;
			pr_info("gc: removed %s (%lld bytes) left by a writer that did not commit", path,
				(long long)sb.st_size);
		}
		close(fd);
		if (rc && rc != MDB_NOTFOUND)
			break;
		rc = 0;
	}
	closedir(d);
	return rc > 0 ? crc__mdb_err(rc, "gc of orphan packs") : rc;
}

int crc_store_gc(struct crc_store *st, struct crc_gc_report *out)
{
	if (!st)
		return CRC_EINVAL;
	struct crc_gc_report rep = {0};
	struct hset live = {0};
	struct pack_table packs = {0};
	uint64_t *dead = NULL;
	size_t ndead = 0;
	MDB_txn *txn;
	MDB_cursor *cur = NULL;
	MDB_val k, v;
	char path[PATH_MAX];
	/* One write transaction: no checkpoint can commit between mark and sweep. */
	int rc = mdb_txn_begin(st->env, NULL, 0, &txn);
	if (rc)
		return crc__mdb_err(rc, "mdb_txn_begin");
	struct walk w = {st, txn, gc_mark, NULL, &live};
	if ((rc = walk_roots(&w)) || (rc = packs_load(st, txn, &packs)))
		goto fail;
	if ((rc = mdb_cursor_open(txn, st->dbi_chunks, &cur))) {
		rc = crc__mdb_err(rc, "mdb_cursor_open");
		goto fail;
	}
	while ((rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) == 0) {
		struct crc_hash h;
		struct chunk_loc loc = {0};
		if (k.mv_size != 16 || crc__chunk_loc_decode(v.mv_data, v.mv_size, &loc)) {
			pr_err("gc: damaged chunk index entry; run verify");
			rc = CRC_ECORRUPT;
			goto fail;
		}
		memcpy(h.bytes, k.mv_data, 16);
		struct pack_rec *p = packs_find(&packs, loc.pack);
		if (crc__hset_find(&live, &h)) {
			if (p) {
				p->live_chunks++;
				p->live_bytes += loc.stored;
			}
			continue;
		}
		if (p)
			p->dead_bytes += loc.stored;
		if ((rc = mdb_cursor_del(cur, 0))) {
			rc = crc__mdb_err(rc, "gc: removing a chunk");
			goto fail;
		}
		rep.chunks_removed++;
		STORE_FAULT("gc-chunk-removed");
	}
	if (rc != MDB_NOTFOUND) {
		rc = crc__mdb_err(rc, "gc: reading the chunk index");
		goto fail;
	}
	mdb_cursor_close(cur);
	cur = NULL;
	dead = calloc(packs.n ? packs.n : 1, sizeof(*dead));
	if (!dead) {
		rc = CRC_ENOMEM;
		goto fail;
	}
	for (size_t i = 0; i < packs.n; i++) {
		if (packs.v[i].live_chunks) {
			rep.bytes_dead_retained += packs.v[i].dead_bytes;
			continue;
		}
		uint8_t key[8];
		put_be64(key, packs.v[i].id);
		k = (MDB_val){8, key};
		if ((rc = mdb_del(txn, st->dbi_packs, &k, NULL))) {
			rc = crc__mdb_err(rc, "gc: removing a pack record");
			goto fail;
		}
		dead[ndead++] = packs.v[i].id;
		rep.bytes_freed += packs.v[i].size;
	}
	STORE_FAULT("gc-before-commit");
	rc = mdb_txn_commit(txn);
	txn = NULL;
	if (rc) {
		rc = crc__mdb_err(rc, "gc: commit");
		goto fail;
	}
	/* Unlinked only after the commit: a crash here leaves orphans, which the next gc removes. */
	for (size_t i = 0; i < ndead; i++) {
		crc__pack_path(st, dead[i], path, sizeof(path));
		if (unlink(path) && errno != ENOENT)
			pr_perror("gc: removing %s", path);
		else
			rep.packs_removed++;
		STORE_FAULT("gc-pack-unlinked");
	}
	if (st->read_fd >= 0) {
		close(st->read_fd);
		st->read_fd = -1;
	}
	rc = gc_orphans(st, &rep);
	fsync(st->packs_dir_fd);
	if (out)
		*out = rep;
fail:
	if (cur)
		mdb_cursor_close(cur);
	if (txn)
		mdb_txn_abort(txn);
	crc__hset_free(&live);
	free(packs.v);
	free(dead);
	return rc;
}
