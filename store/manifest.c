/* Manifest encoding, reading, listing and deletion.
 *
 * Encoding (little-endian): magic "CRCM" (u32), version (u32), ckpt id (u64), session id (u64),
 * created_ns (i64), nregions (u32), nmeta (u32); each region: kind (u32), nchunks (u32), addr (u64),
 * size (u64), module hash (16), name length (u32, 0xffffffff = no name), name; then nchunks of hash
 * (16), length (u64) and, in version 2, the chunk's device digest (2 x u64, 0 0 = none); each meta
 * entry: key length (u32), key, value length (u32), value. Version 1 is written while no chunk has a
 * digest, so that a manifest without any stays readable by the versions before digests. */
#define LOG_PREFIX "store: "

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "crcuda/errno.h"
#include "crcuda/log.h"
#include "store_internal.h"

#define MANIFEST_MAGIC		 0x4d435243u /* "CRCM" */
#define MANIFEST_VERSION_PLAIN	 1u
#define MANIFEST_VERSION_DIGESTS 2u
#define NO_NAME			 0xffffffffu

struct enc {
	uint8_t *buf;
	size_t len, cap;
	bool oom;
};

static uint8_t *enc_reserve(struct enc *e, size_t n)
{
	if (e->oom)
		return NULL;
	if (e->len + n > e->cap) {
		size_t cap = e->cap ? e->cap : 256;
		while (cap < e->len + n)
			cap *= 2;
		uint8_t *b = realloc(e->buf, cap);
		if (!b) {
			e->oom = true;
			return NULL;
		}
		e->buf = b;
		e->cap = cap;
	}
	uint8_t *p = e->buf + e->len;
	e->len += n;
	return p;
}
static void enc_u32(struct enc *e, uint32_t v)
{
	uint8_t *p = enc_reserve(e, 4);
	if (p)
		put_le32(p, v);
}
static void enc_u64(struct enc *e, uint64_t v)
{
	uint8_t *p = enc_reserve(e, 8);
	if (p)
		put_le64(p, v);
}
static void enc_bytes(struct enc *e, const void *d, size_t n)
{
	uint8_t *p = enc_reserve(e, n);
	if (p && n)
		memcpy(p, d, n);
}
static void enc_str(struct enc *e, const char *s)
{
	if (!s) {
		enc_u32(e, NO_NAME);
		return;
	}
	size_t n = strlen(s);
	enc_u32(e, (uint32_t)n);
	enc_bytes(e, s, n);
}

static bool has_digests(const struct crc_manifest *m)
{
	for (uint32_t i = 0; i < m->nregions; i++)
		for (uint32_t c = 0; c < m->regions[i].nchunks; c++)
			if (m->regions[i].chunks[c].digest[0] | m->regions[i].chunks[c].digest[1])
				return true;
	return false;
}

int crc__manifest_encode(const struct crc_manifest *m, uint8_t **out, size_t *out_len)
{
	struct enc e = {0};
	bool digests = has_digests(m);
	enc_u32(&e, MANIFEST_MAGIC);
	enc_u32(&e, digests ? MANIFEST_VERSION_DIGESTS : MANIFEST_VERSION_PLAIN);
	enc_u64(&e, m->ckpt_id);
	enc_u64(&e, m->session_id);
	enc_u64(&e, (uint64_t)m->created_ns);
	enc_u32(&e, m->nregions);
	enc_u32(&e, m->nmeta);
	for (uint32_t i = 0; i < m->nregions; i++) {
		const struct crc_region *r = &m->regions[i];
		enc_u32(&e, r->kind);
		enc_u32(&e, r->nchunks);
		enc_u64(&e, r->addr);
		enc_u64(&e, r->size);
		enc_bytes(&e, r->module.bytes, 16);
		enc_str(&e, r->name);
		for (uint32_t c = 0; c < r->nchunks; c++) {
			enc_bytes(&e, r->chunks[c].hash.bytes, 16);
			enc_u64(&e, r->chunks[c].length);
			if (digests) {
				enc_u64(&e, r->chunks[c].digest[0]);
				enc_u64(&e, r->chunks[c].digest[1]);
			}
		}
	}
	for (uint32_t i = 0; i < m->nmeta; i++) {
		enc_str(&e, m->meta[i].key);
		enc_str(&e, m->meta[i].value ? m->meta[i].value : "");
	}
	if (e.oom) {
		free(e.buf);
		return CRC_ENOMEM;
	}
	*out = e.buf;
	*out_len = e.len;
	return 0;
}

struct dec {
	const uint8_t *p, *end;
	bool bad;
};

static const uint8_t *dec_take(struct dec *d, size_t n)
{
	if (d->bad || (size_t)(d->end - d->p) < n) {
		d->bad = true;
		return NULL;
	}
	const uint8_t *p = d->p;
	d->p += n;
	return p;
}
static uint32_t dec_u32(struct dec *d)
{
	const uint8_t *p = dec_take(d, 4);
	return p ? get_le32(p) : 0;
}
static uint64_t dec_u64(struct dec *d)
{
	const uint8_t *p = dec_take(d, 8);
	return p ? get_le64(p) : 0;
}
/* Returns 0 and sets *out (NULL for "no name"), or CRC_ECORRUPT / CRC_ENOMEM. */
static int dec_str(struct dec *d, char **out)
{
	*out = NULL;
	uint32_t n = dec_u32(d);
	if (d->bad)
		return CRC_ECORRUPT;
	if (n == NO_NAME)
		return 0;
	const uint8_t *p = dec_take(d, n);
	if (!p)
		return CRC_ECORRUPT;
	if (memchr(p, 0, n)) {
		d->bad = true;
		return CRC_ECORRUPT;
	}
	*out = strndup((const char *)p, n);
	return *out ? 0 : CRC_ENOMEM;
}

int crc__manifest_decode(const void *data, size_t len, struct crc_manifest **out)
{
	struct dec d = {data, (const uint8_t *)data + len, false};
	int rc = CRC_ECORRUPT;
	struct crc_manifest *m = calloc(1, sizeof(*m));
	if (!m)
		return CRC_ENOMEM;
	if (dec_u32(&d) != MANIFEST_MAGIC)
		goto fail;
	uint32_t version = dec_u32(&d);
	if (version != MANIFEST_VERSION_PLAIN && version != MANIFEST_VERSION_DIGESTS)
		goto fail;
	size_t chunk_bytes = version == MANIFEST_VERSION_DIGESTS ? 40 : 24;
	m->ckpt_id = dec_u64(&d);
	m->session_id = dec_u64(&d);
	m->created_ns = (int64_t)dec_u64(&d);
	uint32_t nregions = dec_u32(&d), nmeta = dec_u32(&d);
	/* Each region takes at least 44 bytes, each meta entry 8: bound the counts before allocating. */
	if (d.bad || nregions > (size_t)(d.end - d.p) / 44 || nmeta > (size_t)(d.end - d.p) / 8)
		goto fail;
	m->regions = calloc(nregions ? nregions : 1, sizeof(*m->regions));
	m->meta = calloc(nmeta ? nmeta : 1, sizeof(*m->meta));
	if (!m->regions || !m->meta) {
		rc = CRC_ENOMEM;
		goto fail;
	}
	for (uint32_t i = 0; i < nregions; i++) {
		struct crc_region *r = &m->regions[i];
		m->nregions = i + 1;
		r->kind = dec_u32(&d);
		uint32_t nchunks = dec_u32(&d);
		r->addr = dec_u64(&d);
		r->size = dec_u64(&d);
		const uint8_t *mod = dec_take(&d, 16);
		if (!mod)
			goto fail;
		memcpy(r->module.bytes, mod, 16);
		if ((rc = dec_str(&d, &r->name)))
			goto fail;
		rc = CRC_ECORRUPT;
		if (nchunks > (size_t)(d.end - d.p) / chunk_bytes)
			goto fail;
		r->chunks = calloc(nchunks ? nchunks : 1, sizeof(*r->chunks));
		if (!r->chunks) {
			rc = CRC_ENOMEM;
			goto fail;
		}
		r->nchunks = nchunks;
		for (uint32_t c = 0; c < nchunks; c++) {
			const uint8_t *h = dec_take(&d, 16);
			if (!h)
				goto fail;
			memcpy(r->chunks[c].hash.bytes, h, 16);
			r->chunks[c].length = dec_u64(&d);
			if (version == MANIFEST_VERSION_DIGESTS) {
				r->chunks[c].digest[0] = dec_u64(&d);
				r->chunks[c].digest[1] = dec_u64(&d);
			}
		}
	}
	for (uint32_t i = 0; i < nmeta; i++) {
		m->nmeta = i + 1;
		if ((rc = dec_str(&d, &m->meta[i].key)) || (rc = dec_str(&d, &m->meta[i].value)))
			goto fail;
		rc = CRC_ECORRUPT;
		if (!m->meta[i].key || !m->meta[i].value)
			goto fail;
	}
	/* One encoding for one manifest: version 2 only where a chunk has a digest (as written). */
	if (d.bad || d.p != d.end || (version == MANIFEST_VERSION_DIGESTS && !has_digests(m))) {
		rc = CRC_ECORRUPT;
		goto fail;
	}
	*out = m;
	return 0;
fail:
	crc_manifest_free(m);
	return rc;
}

void crc_manifest_free(struct crc_manifest *m)
{
	if (!m)
		return;
	for (uint32_t i = 0; i < m->nregions; i++) {
		free(m->regions[i].name);
		free(m->regions[i].chunks);
	}
	for (uint32_t i = 0; i < m->nmeta; i++) {
		free(m->meta[i].key);
		free(m->meta[i].value);
	}
	free(m->regions);
	free(m->meta);
	free(m);
}

const char *crc_manifest_meta_get(const struct crc_manifest *m, const char *key)
{
	if (!m || !key)
		return NULL;
	for (uint32_t i = 0; i < m->nmeta; i++)
		if (!strcmp(m->meta[i].key, key))
			return m->meta[i].value;
	return NULL;
}

unsigned crc_manifest_owner(const struct crc_store *st, const struct crc_manifest *m)
{
	const char *v = crc_manifest_meta_get(m, "crcuda.uid");
	char *end;
	unsigned long uid;

	if (v && *v) {
		errno = 0;
		uid = strtoul(v, &end, 10);
		if (!*end && !errno && uid <= UINT32_MAX)
			return (unsigned)uid;
	}
	return st ? (unsigned)st->owner : 0;
}

int crc_manifest_check_owner(const struct crc_store *st, const struct crc_manifest *m, unsigned uid,
			     char *why, size_t why_len)
{
	unsigned owner = crc_manifest_owner(st, m);

	if (uid == 0 || uid == owner)
		return 0;
	if (why && why_len)
		snprintf(why, why_len,
			 "checkpoint %" PRIu64 " belongs to uid %u, and uid %u may not restore it (only its "
			 "owner, or root)",
			 m ? m->ckpt_id : 0, owner, uid);
	return CRC_EPERM;
}

int crc_store_manifest_get(struct crc_store *st, uint64_t ckpt_id, struct crc_manifest **out)
{
	if (!st || !out)
		return CRC_EINVAL;
	MDB_txn *txn;
	uint8_t key[8];
	put_be64(key, ckpt_id);
	MDB_val k = {8, key}, v;
	int rc = mdb_txn_begin(st->env, NULL, MDB_RDONLY, &txn);
	if (rc)
		return crc__mdb_err(rc, "mdb_txn_begin");
	rc = mdb_get(txn, st->dbi_manifests, &k, &v);
	if (rc == 0) {
		rc = crc__manifest_decode(v.mv_data, v.mv_size, out);
		if (rc == CRC_ECORRUPT)
			pr_err("checkpoint %llu: the manifest cannot be decoded",
			       (unsigned long long)ckpt_id);
	} else {
		rc = crc__mdb_err(rc, "reading a manifest");
	}
	mdb_txn_abort(txn);
	return rc;
}

int crc_store_manifest_list(struct crc_store *st, uint64_t **out_ids, size_t *out_count)
{
	if (!st || !out_ids || !out_count)
		return CRC_EINVAL;
	MDB_txn *txn;
	MDB_cursor *cur = NULL;
	uint64_t *ids = NULL;
	size_t n = 0, cap = 0;
	MDB_val k, v;
	int rc = mdb_txn_begin(st->env, NULL, MDB_RDONLY, &txn);
	if (rc)
		return crc__mdb_err(rc, "mdb_txn_begin");
	rc = mdb_cursor_open(txn, st->dbi_manifests, &cur);
	if (rc)
		goto fail;
	while ((rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) == 0) {
		if (k.mv_size != 8)
			continue;
		if (n == cap) {
			cap = cap ? cap * 2 : 16;
			uint64_t *p = realloc(ids, cap * sizeof(*ids));
			if (!p) {
				mdb_cursor_close(cur);
				mdb_txn_abort(txn);
				free(ids);
				return CRC_ENOMEM;
			}
			ids = p;
		}
		ids[n++] = get_be64(k.mv_data);
	}
	if (rc != MDB_NOTFOUND)
		goto fail;
	mdb_cursor_close(cur);
	mdb_txn_abort(txn);
	*out_ids = ids;
	*out_count = n;
	return 0;
fail:
	if (cur)
		mdb_cursor_close(cur);
	mdb_txn_abort(txn);
	free(ids);
	return crc__mdb_err(rc, "listing manifests");
}

int crc_store_manifest_delete(struct crc_store *st, uint64_t ckpt_id)
{
	if (!st)
		return CRC_EINVAL;
	MDB_txn *txn;
	uint8_t key[8];
	put_be64(key, ckpt_id);
	MDB_val k = {8, key};
	int rc = mdb_txn_begin(st->env, NULL, 0, &txn);
	if (rc)
		return crc__mdb_err(rc, "mdb_txn_begin");
	rc = mdb_del(txn, st->dbi_manifests, &k, NULL);
	if (rc) {
		mdb_txn_abort(txn);
		return crc__mdb_err(rc, "deleting a manifest");
	}
	return crc__mdb_err(mdb_txn_commit(txn), "committing a manifest deletion");
}
