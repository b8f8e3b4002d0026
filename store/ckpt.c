/* Writing checkpoints (and blobs): chunks into pack files, then one LMDB commit naming them all.
 *
 * Several threads may put chunks into one checkpoint at once, each through its own lane (a pack
 * writer with pack files of its own, and an LMDB read transaction handle for dedup lookups), so that
 * hashing and writing never contend. What the lanes share (the dedup set, the region chunk arrays,
 * the list of new chunks) is guarded by one mutex, held only for those bookkeeping steps. */
#define LOG_PREFIX "store: "

#include <pthread.h>
#include <stdlib.h>

#include "crcuda/errno.h"
#include "crcuda/log.h"
#include "store_internal.h"

int crc__next_ckpt_id(struct crc_store *st, MDB_txn *txn, uint64_t *out);

struct ckpt_region {
	struct crc_region r; /* chunks grow as put_chunk appends */
	uint32_t capchunks;
};

struct ckpt_lane {
	struct pack_writer pw;
	/* Looks chunks up in the committed index: begun once, then renewed and reset around each lookup,
	 * so that no snapshot is held between puts. */
	MDB_txn *lookup_txn;
};

/* crc_ckpt_put_chunk's index: after the region's last chunk. */
#define CHUNK_APPEND UINT32_MAX
/* A chunk's value in the dedup set while the lane that claimed it looks it up and writes it. */
#define CHUNK_CLAIMED UINT64_MAX

struct crc_ckpt {
	struct crc_store *st;
	uint64_t session;
	int64_t created_ns;
	struct ckpt_region *regions;
	uint32_t nregions, capregions;
	struct crc_meta_kv *meta;
	uint32_t nmeta, capmeta;
	struct ckpt_lane *lanes;
	unsigned nlanes;
	pthread_mutex_t lock; /* guards what follows, and the regions' chunk arrays */
	/* Every distinct chunk this checkpoint names; value = index in newlocs + 1 when this checkpoint
	 * wrote it, 0 when it was already in the store (commit checks those are still there). */
	struct hset chunks;
	struct chunk_loc *newlocs;
	struct crc_hash *newhashes;
	size_t nnew, capnew;
	uint64_t new_bytes, stored_bytes;
	bool schema_raised; /* this commit indexes a compressed chunk in a version 1 store */
	int error;	    /* sticky: after a failed write only abort makes sense */
};

int crc_ckpt_begin(struct crc_store *st, uint64_t session, struct crc_ckpt **out)
{
	if (!st || !out)
		return CRC_EINVAL;
	MDB_txn *txn;
	int rc = mdb_txn_begin(st->env, NULL, MDB_RDONLY, &txn);
	if (rc)
		return crc__mdb_err(rc, "mdb_txn_begin");
	rc = crc__session_check(st, txn, session);
	mdb_txn_abort(txn);
	if (rc)
		return rc;
	struct crc_ckpt *ck = calloc(1, sizeof(*ck));
	if (!ck)
		return CRC_ENOMEM;
	ck->st = st;
	ck->session = session;
	ck->created_ns = crc__now_ns();
	pthread_mutex_init(&ck->lock, NULL);
	rc = crc_ckpt_set_lanes(ck, 1);
	if (rc) {
		pthread_mutex_destroy(&ck->lock);
		free(ck);
		return rc;
	}
	*out = ck;
	return 0;
}

int crc_ckpt_set_lanes(struct crc_ckpt *ck, unsigned n)
{
	if (!ck || !n || n > CRC_CKPT_LANES_MAX || ck->chunks.count)
		return CRC_EINVAL;
	if (n == ck->nlanes)
		return 0;
	struct ckpt_lane *lanes = calloc(n, sizeof(*lanes));
	if (!lanes)
		return CRC_ENOMEM;
	/* No chunk yet: the old lanes hold no pack file and no lookup transaction. */
	free(ck->lanes);
	ck->lanes = lanes;
	ck->nlanes = n;
	for (unsigned i = 0; i < n; i++)
		crc__pw_init(&lanes[i].pw, ck->st);
	return 0;
}

int crc_ckpt_region_add(struct crc_ckpt *ck, const struct crc_region_desc *desc, uint32_t *out_index)
{
	if (!ck || !desc || !out_index)
		return CRC_EINVAL;
	if (ck->nregions == ck->capregions) {
		uint32_t cap = ck->capregions ? ck->capregions * 2 : 8;
		struct ckpt_region *p = realloc(ck->regions, cap * sizeof(*p));
		if (!p)
			return CRC_ENOMEM;
		ck->regions = p;
		ck->capregions = cap;
	}
	struct ckpt_region *cr = &ck->regions[ck->nregions];
	memset(cr, 0, sizeof(*cr));
	cr->r.kind = desc->kind;
	cr->r.addr = desc->addr;
	cr->r.size = desc->size;
	cr->r.module = desc->module;
	if (desc->name && !(cr->r.name = strdup(desc->name)))
		return CRC_ENOMEM;
	*out_index = ck->nregions++;
	return 0;
}

int crc_ckpt_meta_set(struct crc_ckpt *ck, const char *key, const char *value)
{
	if (!ck || !key || !value)
		return CRC_EINVAL;
	char *v = strdup(value);
	if (!v)
		return CRC_ENOMEM;
	for (uint32_t i = 0; i < ck->nmeta; i++) {
		if (!strcmp(ck->meta[i].key, key)) {
			free(ck->meta[i].value);
			ck->meta[i].value = v;
			return 0;
		}
	}
	if (ck->nmeta == ck->capmeta) {
		uint32_t cap = ck->capmeta ? ck->capmeta * 2 : 8;
		struct crc_meta_kv *p = realloc(ck->meta, cap * sizeof(*p));
		if (!p)
			goto oom;
		ck->meta = p;
		ck->capmeta = cap;
	}
	char *k = strdup(key);
	if (!k)
		goto oom;
	ck->meta[ck->nmeta++] = (struct crc_meta_kv){k, v};
	return 0;
oom:
	free(v);
	return CRC_ENOMEM;
}

/* Is the chunk already in the store's committed index? (The store is opened MDB_NOTLS, so each
 * lane's transaction may live in whichever thread puts through it.) */
static int chunk_exists(struct crc_store *st, struct ckpt_lane *lane, const struct crc_hash *hash, bool *out)
{
	struct chunk_loc loc;
	int rc = lane->lookup_txn ? mdb_txn_renew(lane->lookup_txn)
				  : mdb_txn_begin(st->env, NULL, MDB_RDONLY, &lane->lookup_txn);
	if (rc)
		return crc__mdb_err(rc, "beginning a chunk lookup");
	rc = crc__chunk_locate(st, lane->lookup_txn, hash, &loc);
	mdb_txn_reset(lane->lookup_txn);
	if (rc && rc != CRC_ENOTFOUND)
		return rc;
	*out = rc == 0;
	return 0;
}

static int record_new_chunk(struct crc_ckpt *ck, const struct crc_hash *hash, const struct chunk_loc *loc)
{
	if (ck->nnew == ck->capnew) {
		size_t cap = ck->capnew ? ck->capnew * 2 : 64;
		struct chunk_loc *l = realloc(ck->newlocs, cap * sizeof(*l));
		if (!l)
			return CRC_ENOMEM;
		ck->newlocs = l;
		struct crc_hash *h = realloc(ck->newhashes, cap * sizeof(*h));
		if (!h)
			return CRC_ENOMEM;
		ck->newhashes = h;
		ck->capnew = cap;
	}
	ck->newlocs[ck->nnew] = *loc;
	ck->newhashes[ck->nnew] = *hash;
	ck->nnew++;
	return 0;
}

/* Adds the chunk to the checkpoint's set, writing it through the lane unless the store or this
 * checkpoint has it. The lane that first inserts a hash claims it; a lane that meets a claimed hash
 * goes on at once (its manifest entry needs only the hash, and a failed write fails the checkpoint). */
static int ckpt_add_chunk(struct crc_ckpt *ck, struct ckpt_lane *lane, const void *data, size_t len,
			  struct crc_hash *hash)
{
	bool fresh = false, exists = false;
	struct chunk_loc loc;
	crc_hash_compute(data, len, hash);
	pthread_mutex_lock(&ck->lock);
	int rc = ck->error;
	if (!rc) {
		struct hset_slot *slot = crc__hset_insert(&ck->chunks, hash, &fresh);
		if (!slot)
			rc = CRC_ENOMEM;
		else if (fresh)
			slot->value = CHUNK_CLAIMED;
	}
	pthread_mutex_unlock(&ck->lock);
	if (rc || !fresh)
		return rc;
	rc = chunk_exists(ck->st, lane, hash, &exists);
	if (!rc && !exists)
		rc = crc__pw_append(&lane->pw, hash, data, len, &loc);
	if (rc)
		return rc;
	pthread_mutex_lock(&ck->lock);
	if (!exists && !(rc = record_new_chunk(ck, hash, &loc))) {
		ck->new_bytes += len;
		ck->stored_bytes += loc.stored;
	}
	/* Found again: other lanes may have grown the set meanwhile. */
	if (!rc)
		crc__hset_find(&ck->chunks, hash)->value = exists ? 0 : ck->nnew;
	pthread_mutex_unlock(&ck->lock);
	return rc;
}

/* Names the chunk at index (CHUNK_APPEND: after the last) of a region; called with ck->lock held. */
/* The region's chunk slot of that index, the array grown (zeroed) to hold it; NULL when out of memory. */
static struct crc_chunk_ref *region_slot(struct ckpt_region *cr, uint32_t index)
{
	if (index >= cr->capchunks) {
		uint32_t cap = cr->capchunks ? cr->capchunks : 16;
		while (cap <= index)
			cap = cap > UINT32_MAX / 2 ? UINT32_MAX : cap * 2;
		struct crc_chunk_ref *p = realloc(cr->r.chunks, (size_t)cap * sizeof(*p));
		if (!p)
			return NULL;
		/* Length 0 marks a chunk not put yet (a put chunk has at least one byte). */
		memset(p + cr->capchunks, 0, (size_t)(cap - cr->capchunks) * sizeof(*p));
		cr->r.chunks = p;
		cr->capchunks = cap;
	}
	return &cr->r.chunks[index];
}

static int region_set_chunk(struct ckpt_region *cr, uint32_t index, const struct crc_hash *hash, size_t len)
{
	if (index == CHUNK_APPEND)
		index = cr->r.nchunks;
	struct crc_chunk_ref *slot = region_slot(cr, index);
	if (!slot)
		return CRC_ENOMEM;
	if (slot->length) {
		pr_err("chunk %u of a region was put twice", index);
		return CRC_EINVAL;
	}
	/* Its digest may have come first. */
	slot->hash = *hash;
	slot->length = len;
	if (index >= cr->r.nchunks)
		cr->r.nchunks = index + 1;
	return 0;
}

static int put_chunk(struct crc_ckpt *ck, unsigned lane, uint32_t region, uint32_t index, const void *data,
		     size_t len, struct crc_hash *out_hash)
{
	struct crc_hash hash;
	int rc = ckpt_add_chunk(ck, &ck->lanes[lane], data, len, &hash);
	pthread_mutex_lock(&ck->lock);
	if (!rc)
		rc = region_set_chunk(&ck->regions[region], index, &hash, len);
	if (rc && !ck->error)
		ck->error = rc;
	pthread_mutex_unlock(&ck->lock);
	if (!rc && out_hash)
		*out_hash = hash;
	return rc;
}

int crc_ckpt_put_chunk(struct crc_ckpt *ck, uint32_t region, const void *data, size_t len,
		       struct crc_hash *out_hash)
{
	if (!ck || region >= ck->nregions || !data || !len || len > CRC_CHUNK_MAX)
		return CRC_EINVAL;
	return put_chunk(ck, 0, region, CHUNK_APPEND, data, len, out_hash);
}

int crc_ckpt_put_chunk_at(struct crc_ckpt *ck, unsigned lane, uint32_t region, uint32_t chunk_index,
			  const void *data, size_t len, struct crc_hash *out_hash)
{
	if (!ck || lane >= ck->nlanes || region >= ck->nregions ||
	    chunk_index >= ck->regions[region].r.size || chunk_index == CHUNK_APPEND || !data || !len ||
	    len > CRC_CHUNK_MAX)
		return CRC_EINVAL;
	return put_chunk(ck, lane, region, chunk_index, data, len, out_hash);
}

int crc_ckpt_ref_chunk_at(struct crc_ckpt *ck, unsigned lane, uint32_t region, uint32_t chunk_index,
			  const struct crc_hash *hash, size_t len)
{
	bool known, exists = true, fresh = false;
	struct hset_slot *slot;
	int rc;

	if (!ck || lane >= ck->nlanes || region >= ck->nregions ||
	    chunk_index >= ck->regions[region].r.size || chunk_index == CHUNK_APPEND || !hash || !len ||
	    len > CRC_CHUNK_MAX)
		return CRC_EINVAL;
	pthread_mutex_lock(&ck->lock);
	rc = ck->error;
	known = !rc && crc__hset_find(&ck->chunks, hash);
	pthread_mutex_unlock(&ck->lock);
	if (rc)
		return rc;
	/* Named by an earlier checkpoint, it may have been collected since. */
	if (!known && (rc = chunk_exists(ck->st, &ck->lanes[lane], hash, &exists)))
		return rc;
	if (!exists)
		return CRC_ENOTFOUND;
	pthread_mutex_lock(&ck->lock);
	if (!known) {
		slot = crc__hset_insert(&ck->chunks, hash, &fresh);
		if (!slot)
			rc = CRC_ENOMEM;
		else if (fresh)
			slot->value = 0; /* in the store already */
	}
	if (!rc)
		rc = region_set_chunk(&ck->regions[region], chunk_index, hash, len);
	if (rc && !ck->error)
		ck->error = rc;
	pthread_mutex_unlock(&ck->lock);
	return rc;
}

int crc_ckpt_set_digest_at(struct crc_ckpt *ck, uint32_t region, uint32_t chunk_index,
			   const uint64_t digest[2])
{
	if (!ck || region >= ck->nregions || chunk_index >= ck->regions[region].r.size ||
	    chunk_index == CHUNK_APPEND || !digest)
		return CRC_EINVAL;
	pthread_mutex_lock(&ck->lock);
	struct crc_chunk_ref *slot = region_slot(&ck->regions[region], chunk_index);
	if (slot) {
		slot->digest[0] = digest[0];
		slot->digest[1] = digest[1];
	}
	pthread_mutex_unlock(&ck->lock);
	return slot ? 0 : CRC_ENOMEM;
}

/* Seals every lane's pack files, each lane in a thread of its own (the fsyncs are the long part),
 * then syncs the packs directory once. */
struct lane_seal {
	struct pack_writer *pw;
	int rc;
};

static void *seal_lane(void *arg)
{
	struct lane_seal *ls = arg;
	ls->rc = crc__pw_seal(ls->pw);
	return NULL;
}

static int sync_lanes(struct crc_ckpt *ck)
{
	struct lane_seal seals[CRC_CKPT_LANES_MAX];
	pthread_t tids[CRC_CKPT_LANES_MAX];
	bool threaded[CRC_CKPT_LANES_MAX] = {false};
	unsigned nseals = 0;
	int rc = 0;
	for (unsigned i = 0; i < ck->nlanes; i++)
		if (ck->lanes[i].pw.nfiles)
			seals[nseals++] = (struct lane_seal){&ck->lanes[i].pw, 0};
	if (!nseals)
		return 0;
	/* Without fsyncs a seal is a small write: not worth a thread. */
	for (unsigned i = 1; i < nseals && !ck->st->nosync; i++)
		threaded[i] = !pthread_create(&tids[i], NULL, seal_lane, &seals[i]);
	for (unsigned i = 0; i < nseals; i++) {
		if (threaded[i])
			pthread_join(tids[i], NULL);
		else
			seal_lane(&seals[i]);
		if (seals[i].rc && !rc)
			rc = seals[i].rc;
	}
	return rc ? rc : crc__packs_dir_sync(ck->st);
}

/* In txn: index the chunks this checkpoint wrote, record its lanes' packs, and check that the chunks
 * it reused are still indexed (a gc between put_chunk and commit may have removed them). */
static int commit_chunks(struct crc_ckpt *ck, MDB_txn *txn)
{
	struct crc_store *st = ck->st;
	const struct hset *chunks = &ck->chunks;
	int rc;
	for (size_t i = 0; i < chunks->cap; i++) {
		if (!chunks->slots[i].used || chunks->slots[i].value)
			continue;
		struct chunk_loc loc;
		rc = crc__chunk_locate(st, txn, &chunks->slots[i].key, &loc);
		if (rc == CRC_ENOTFOUND) {
			pr_warn(
			    "a reused chunk was removed by a concurrent gc; the checkpoint must be retried");
			return CRC_EAGAIN;
		}
		if (rc)
			return rc;
	}
	for (size_t i = 0; i < ck->nnew; i++) {
		uint8_t v[CHUNK_LOC_SIZE_ENC];
		if (ck->newlocs[i].encoding != CHUNK_ENC_RAW && st->schema < CRC_STORE_SCHEMA_VERSION &&
		    !ck->schema_raised) {
			if ((rc = crc__schema_upgrade(st, txn)))
				return rc;
			ck->schema_raised = true;
		}
		MDB_val k = {16, (void *)ck->newhashes[i].bytes},
			val = {crc__chunk_loc_encode(&ck->newlocs[i], v), v};
		rc = mdb_put(txn, st->dbi_chunks, &k, &val, MDB_NOOVERWRITE);
		/* Another writer indexed the same bytes meanwhile: keep theirs; ours become dead bytes. */
		if (rc && rc != MDB_KEYEXIST)
			return crc__mdb_err(rc, "indexing a chunk");
		STORE_FAULT("commit-chunk-indexed");
	}
	for (unsigned l = 0; l < ck->nlanes; l++) {
		const struct pack_writer *pw = &ck->lanes[l].pw;
		for (size_t i = 0; i < pw->nfiles; i++) {
			uint8_t key[8], v[8];
			put_be64(key, pw->files[i].id);
			put_le64(v, pw->files[i].size);
			MDB_val k = {8, key}, val = {8, v};
			rc = mdb_put(txn, st->dbi_packs, &k, &val, 0);
			if (rc)
				return crc__mdb_err(rc, "recording a pack file");
		}
	}
	STORE_FAULT("commit-packs-recorded");
	return 0;
}

static void ckpt_free(struct crc_ckpt *ck, bool discard_packs)
{
	for (unsigned i = 0; i < ck->nlanes; i++) {
		crc__pw_release(&ck->lanes[i].pw, discard_packs);
		if (ck->lanes[i].lookup_txn)
			mdb_txn_abort(ck->lanes[i].lookup_txn);
	}
	free(ck->lanes);
	pthread_mutex_destroy(&ck->lock);
	for (uint32_t i = 0; i < ck->nregions; i++) {
		free(ck->regions[i].r.name);
		free(ck->regions[i].r.chunks);
	}
	for (uint32_t i = 0; i < ck->nmeta; i++) {
		free(ck->meta[i].key);
		free(ck->meta[i].value);
	}
	free(ck->regions);
	free(ck->meta);
	crc__hset_free(&ck->chunks);
	free(ck->newlocs);
	free(ck->newhashes);
	free(ck);
}

void crc_ckpt_abort(struct crc_ckpt *ck)
{
	if (ck)
		ckpt_free(ck, true);
}

int crc_ckpt_sync(struct crc_ckpt *ck)
{
	if (!ck)
		return CRC_EINVAL;
	int rc = ck->error ? ck->error : sync_lanes(ck);
	if (rc && !ck->error)
		ck->error = rc;
	return rc;
}

int crc_ckpt_commit(struct crc_ckpt *ck, uint64_t *out_id)
{
	if (!ck)
		return CRC_EINVAL;
	struct crc_store *st = ck->st;
	MDB_txn *txn = NULL;
	uint8_t *enc = NULL;
	size_t enclen;
	uint64_t id;
	int rc = ck->error;
	if (rc)
		goto fail;
	for (uint32_t i = 0; i < ck->nregions; i++) {
		uint64_t sum = 0;
		for (uint32_t c = 0; c < ck->regions[i].r.nchunks; c++) {
			if (!ck->regions[i].r.chunks[c].length) {
				pr_err("region %u: chunk %u was never put", i, c);
				rc = CRC_EINVAL;
				goto fail;
			}
			sum += ck->regions[i].r.chunks[c].length;
		}
		if (sum != ck->regions[i].r.size) {
			pr_err("region %u: chunks hold %llu bytes, the region is %llu", i,
			       (unsigned long long)sum, (unsigned long long)ck->regions[i].r.size);
			rc = CRC_EINVAL;
			goto fail;
		}
	}
	STORE_FAULT("commit-start");
	rc = sync_lanes(ck);
	if (rc)
		goto fail;

	rc = mdb_txn_begin(st->env, NULL, 0, &txn);
	if (rc) {
		rc = crc__mdb_err(rc, "mdb_txn_begin");
		goto fail;
	}
	if ((rc = crc__session_check(st, txn, ck->session)) || (rc = crc__next_ckpt_id(st, txn, &id)))
		goto fail;
	STORE_FAULT("commit-txn-begun");
	rc = commit_chunks(ck, txn);
	if (rc)
		goto fail;

	struct crc_manifest m = {
	    .ckpt_id = id,
	    .session_id = ck->session,
	    .created_ns = ck->created_ns,
	    .nmeta = ck->nmeta,
	    .meta = ck->meta,
	    .nregions = ck->nregions,
	};
	m.regions = calloc(ck->nregions ? ck->nregions : 1, sizeof(*m.regions));
	if (!m.regions) {
		rc = CRC_ENOMEM;
		goto fail;
	}
	for (uint32_t i = 0; i < ck->nregions; i++)
		m.regions[i] = ck->regions[i].r;
	rc = crc__manifest_encode(&m, &enc, &enclen);
	free(m.regions);
	if (rc)
		goto fail;
	uint8_t key[8];
	put_be64(key, id);
	MDB_val k = {8, key}, v = {enclen, enc};
	rc = mdb_put(txn, st->dbi_manifests, &k, &v, MDB_NOOVERWRITE);
	if (rc) {
		rc = crc__mdb_err(rc, "writing the manifest");
		goto fail;
	}
	STORE_FAULT("commit-before-txn-commit");
	rc = mdb_txn_commit(txn);
	txn = NULL;
	if (rc) {
		rc = crc__mdb_err(rc, "committing the checkpoint");
		goto fail;
	}
	STORE_FAULT("commit-done");
	if (ck->schema_raised)
		st->schema = CRC_STORE_SCHEMA_VERSION;
	free(enc);
	/* Committed: the packs are named now, so releasing their locks is safe. */
	ckpt_free(ck, false);
	if (out_id)
		*out_id = id;
	return 0;
fail:
	if (txn)
		mdb_txn_abort(txn);
	free(enc);
	ckpt_free(ck, true);
	return rc;
}

/* Pins bytes the store holds (hash, len long) to a session: gc keeps them while it stands. */
static int blob_pin(struct crc_store *st, MDB_txn *txn, uint64_t session, const struct crc_hash *hash,
		    uint64_t len)
{
	uint8_t key[24], val[8];
	put_be64(key, session);
	memcpy(key + 8, hash->bytes, 16);
	put_le64(val, len);
	MDB_val k = {sizeof(key), key}, v = {sizeof(val), val};
	int rc = mdb_put(txn, st->dbi_blobs, &k, &v, 0);
	return rc ? crc__mdb_err(rc, "pinning a blob") : 0;
}

int crc_store_blob_put(struct crc_store *st, uint64_t session, const void *data, size_t len,
		       struct crc_hash *out_hash)
{
	if (!st || !data || !len || len > CRC_CHUNK_MAX || !out_hash)
		return CRC_EINVAL;
	struct crc_ckpt *ck;
	struct crc_hash hash;
	MDB_txn *txn = NULL;
	int rc = crc_ckpt_begin(st, session, &ck);
	if (rc)
		return rc;
	if ((rc = ckpt_add_chunk(ck, &ck->lanes[0], data, len, &hash)) || (rc = sync_lanes(ck)))
		goto fail;
	rc = mdb_txn_begin(st->env, NULL, 0, &txn);
	if (rc) {
		rc = crc__mdb_err(rc, "mdb_txn_begin");
		goto fail;
	}
	if ((rc = crc__session_check(st, txn, session)))
		goto fail;
	rc = commit_chunks(ck, txn);
	if (rc)
		goto fail;
	if ((rc = blob_pin(st, txn, session, &hash, len)))
		goto fail;
	rc = mdb_txn_commit(txn);
	txn = NULL;
	if (rc) {
		rc = crc__mdb_err(rc, "committing a blob");
		goto fail;
	}
	if (ck->schema_raised)
		st->schema = CRC_STORE_SCHEMA_VERSION;
	ckpt_free(ck, false);
	*out_hash = hash;
	return 0;
fail:
	if (txn)
		mdb_txn_abort(txn);
	ckpt_free(ck, true);
	return rc;
}

uint64_t crc_ckpt_new_bytes(const struct crc_ckpt *ck)
{
	return ck ? ck->new_bytes : 0;
}

uint64_t crc_ckpt_stored_bytes(const struct crc_ckpt *ck)
{
	return ck ? ck->stored_bytes : 0;
}

int crc_store_blob_pin(struct crc_store *st, uint64_t session, const struct crc_hash *hash, uint64_t len)
{
	if (!st || !hash || !len || len > CRC_CHUNK_MAX)
		return CRC_EINVAL;
	struct chunk_loc loc;
	MDB_txn *txn = NULL;
	int rc = mdb_txn_begin(st->env, NULL, 0, &txn);
	if (rc)
		return crc__mdb_err(rc, "mdb_txn_begin");
	if ((rc = crc__session_check(st, txn, session)) || (rc = crc__chunk_locate(st, txn, hash, &loc)))
		goto fail;
	if (loc.length != len) {
		rc = CRC_EINVAL; /* another object under that hash: never pinned under a wrong length */
		goto fail;
	}
	if ((rc = blob_pin(st, txn, session, hash, len)))
		goto fail;
	rc = mdb_txn_commit(txn);
	return rc ? crc__mdb_err(rc, "committing a blob") : 0;
fail:
	mdb_txn_abort(txn);
	return rc;
}
