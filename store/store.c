/* Opening the store, its schema record, sessions and journals. */
#define LOG_PREFIX "store: "

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "crcuda/xxh3.h"

#include "crcuda/errno.h"
#include "crcuda/log.h"
#include "store_internal.h"

void (*crc__store_fault_hook)(const char *point);

int crc__mdb_err(int rc, const char *what)
{
	switch (rc) {
	case 0:
		return 0;
	case MDB_NOTFOUND:
		return CRC_ENOTFOUND;
	case MDB_MAP_FULL:
		pr_err("%s: %s (the store's LMDB map is full)", what, mdb_strerror(rc));
		return CRC_ENOSPC;
	case MDB_CORRUPTED:
	case MDB_PAGE_NOTFOUND:
	case MDB_INVALID:
		pr_err("%s: %s", what, mdb_strerror(rc));
		return CRC_ECORRUPT;
	case MDB_VERSION_MISMATCH:
		pr_err("%s: %s", what, mdb_strerror(rc));
		return CRC_ESCHEMA;
	default:
		pr_err("%s: %s", what, mdb_strerror(rc));
		return rc > 0 ? -rc : CRC_EDB;
	}
}

int64_t crc__now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void crc_hash_compute(const void *data, size_t len, struct crc_hash *out)
{
	XXH128_canonical_t canon;
	XXH128_canonicalFromHash(&canon, crc_xxh3_128(data, len));
	memcpy(out->bytes, canon.digest, sizeof(out->bytes));
}

void crc_hash_to_hex(const struct crc_hash *hash, char *hex)
{
	static const char digits[] = "0123456789abcdef";
	for (int i = 0; i < 16; i++) {
		hex[2 * i] = digits[hash->bytes[i] >> 4];
		hex[2 * i + 1] = digits[hash->bytes[i] & 15];
	}
	hex[CRC_HASH_HEX_LEN] = 0;
}

static int hex_digit(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

int crc_hash_from_hex(const char *hex, struct crc_hash *out)
{
	if (!hex || !out || strlen(hex) != CRC_HASH_HEX_LEN)
		return CRC_EINVAL;
	for (int i = 0; i < 16; i++) {
		int hi = hex_digit(hex[2 * i]), lo = hex_digit(hex[2 * i + 1]);
		if (hi < 0 || lo < 0)
			return CRC_EINVAL;
		out->bytes[i] = (uint8_t)(hi << 4 | lo);
	}
	return 0;
}

const char *crc_jrec_type_name(uint32_t type)
{
	static const char *const names[] = {
	    [CRC_JREC_CONTEXT_CREATE] = "CONTEXT_CREATE",
	    [CRC_JREC_CONTEXT_SET] = "CONTEXT_SET",
	    [CRC_JREC_MODULE_LOAD] = "MODULE_LOAD",
	    [CRC_JREC_MODULE_UNLOAD] = "MODULE_UNLOAD",
	    [CRC_JREC_FUNCTION_GET] = "FUNCTION_GET",
	    [CRC_JREC_GLOBAL_GET] = "GLOBAL_GET",
	    [CRC_JREC_MEM_ALLOC] = "MEM_ALLOC",
	    [CRC_JREC_MEM_FREE] = "MEM_FREE",
	    [CRC_JREC_STREAM_CREATE] = "STREAM_CREATE",
	    [CRC_JREC_STREAM_DESTROY] = "STREAM_DESTROY",
	    [CRC_JREC_EVENT_CREATE] = "EVENT_CREATE",
	    [CRC_JREC_EVENT_DESTROY] = "EVENT_DESTROY",
	    [CRC_JREC_LAUNCH_STATS] = "LAUNCH_STATS",
	    [CRC_JREC_MEM_RESERVE] = "MEM_RESERVE",
	    [CRC_JREC_MEM_UNRESERVE] = "MEM_UNRESERVE",
	    [CRC_JREC_VMM_CREATE] = "VMM_CREATE",
	    [CRC_JREC_VMM_RELEASE] = "VMM_RELEASE",
	    [CRC_JREC_VMM_MAP] = "VMM_MAP",
	    [CRC_JREC_VMM_UNMAP] = "VMM_UNMAP",
	    [CRC_JREC_VMM_ACCESS] = "VMM_ACCESS",
	    [CRC_JREC_CONTEXT_DESTROY] = "CONTEXT_DESTROY",
	    [CRC_JREC_FUNCTION_SET] = "FUNCTION_SET",
	    [CRC_JREC_OBJECT_CREATE] = "OBJECT_CREATE",
	    [CRC_JREC_OBJECT_DESTROY] = "OBJECT_DESTROY",
	    [CRC_JREC_ARRAY_MAP] = "ARRAY_MAP",
	};
	return type < CRC_JREC_TYPE_END && names[type] ? names[type] : "UNKNOWN";
}

const char *crc_region_kind_name(uint32_t kind)
{
	switch (kind) {
	case CRC_REGION_DEVICE_ALLOC:
		return "device-alloc";
	case CRC_REGION_DEVICE_GLOBAL:
		return "device-global";
	case CRC_REGION_HOST:
		return "host";
	case CRC_REGION_OTHER:
		return "other";
	default:
		return "unknown";
	}
}

/* mkdir -p; the last one private (0700): checkpoints hold process and device memory. */
static int make_dirs(const char *path)
{
	char buf[PATH_MAX];
	if (snprintf(buf, sizeof(buf), "%s", path) >= (int)sizeof(buf))
		return -ENAMETOOLONG;
	for (char *p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = 0;
		if (mkdir(buf, 0755) && errno != EEXIST)
			return -errno;
		*p = '/';
	}
	if (mkdir(buf, 0700) && errno != EEXIST)
		return -errno;
	return 0;
}

/* A store is its owner's (and root's): another user may not open it, whatever its modes say. */
static int check_owner(struct crc_store *st)
{
	struct stat sb;
	uid_t me = geteuid();

	if (stat(st->dir, &sb)) {
		int rc = -errno;
		pr_perror("%s", st->dir);
		return rc;
	}
	if (!S_ISDIR(sb.st_mode)) {
		pr_err("%s: not a directory", st->dir);
		return -ENOTDIR;
	}
	st->owner = sb.st_uid;
	if (me != 0 && sb.st_uid != me) {
		pr_err("%s: the store belongs to uid %u, and uid %u may not use it (a store holds process "
		       "and device memory: it is private to its owner, and root)",
		       st->dir, (unsigned)sb.st_uid, (unsigned)me);
		return CRC_EPERM;
	}
	return 0;
}

static const char schema_key[] = "schema_version";

/* Checks (or, in a new store, writes) the schema-version record. Version 1 stores (before compressed
 * chunks) are read and written as they are; the first commit that indexes a compressed chunk makes
 * them version 2 (crc__schema_upgrade), so that an older crcuda refuses them with a clear error
 * instead of misreading an entry it does not know. */
static int schema_check(struct crc_store *st, MDB_txn *txn, bool create)
{
	MDB_val k = {sizeof(schema_key) - 1, (void *)schema_key}, v;
	int rc = mdb_get(txn, st->dbi_meta, &k, &v);
	if (rc == MDB_NOTFOUND && create) {
		uint8_t buf[4];
		put_le32(buf, CRC_STORE_SCHEMA_VERSION);
		v = (MDB_val){sizeof(buf), buf};
		st->schema = CRC_STORE_SCHEMA_VERSION;
		return crc__mdb_err(mdb_put(txn, st->dbi_meta, &k, &v, 0), "writing the schema version");
	}
	if (rc == MDB_NOTFOUND) {
		pr_err("%s: the store has no schema-version record", st->dir);
		return CRC_ECORRUPT;
	}
	if (rc)
		return crc__mdb_err(rc, "reading the schema version");
	if (v.mv_size != 4) {
		pr_err("%s: schema-version record of %zu bytes (expected 4)", st->dir, v.mv_size);
		return CRC_ECORRUPT;
	}
	uint32_t found = get_le32(v.mv_data);
	if (found < CRC_STORE_SCHEMA_OLDEST || found > CRC_STORE_SCHEMA_VERSION) {
		pr_err("%s: store schema version %u, but this crcuda reads and writes only versions %u to %u",
		       st->dir, found, CRC_STORE_SCHEMA_OLDEST, CRC_STORE_SCHEMA_VERSION);
		return CRC_ESCHEMA;
	}
	st->schema = found;
	return 0;
}

int crc__schema_upgrade(struct crc_store *st, MDB_txn *txn)
{
	if (st->schema >= CRC_STORE_SCHEMA_VERSION)
		return 0;
	uint8_t buf[4];
	put_le32(buf, CRC_STORE_SCHEMA_VERSION);
	MDB_val k = {sizeof(schema_key) - 1, (void *)schema_key}, v = {sizeof(buf), buf};
	int rc = mdb_put(txn, st->dbi_meta, &k, &v, 0);
	if (rc)
		return crc__mdb_err(rc, "writing the schema version");
	/* st->schema changes only once the transaction commits (the caller's part). */
	return 0;
}

static int open_dbis(struct crc_store *st, MDB_txn *txn, bool create)
{
	const struct {
		const char *name;
		MDB_dbi *dbi;
	} dbs[] = {
	    {"meta", &st->dbi_meta},	       {"sessions", &st->dbi_sessions}, {"journal", &st->dbi_journal},
	    {"manifests", &st->dbi_manifests}, {"chunks", &st->dbi_chunks},	{"packs", &st->dbi_packs},
	    {"blobs", &st->dbi_blobs},
	};
	for (size_t i = 0; i < sizeof(dbs) / sizeof(dbs[0]); i++) {
		int rc = mdb_dbi_open(txn, dbs[i].name, create ? MDB_CREATE : 0, dbs[i].dbi);
		if (rc == MDB_NOTFOUND) {
			pr_err("%s: not a crcuda store (no LMDB database \"%s\")", st->dir, dbs[i].name);
			return CRC_ECORRUPT;
		}
		if (rc)
			return crc__mdb_err(rc, "opening an LMDB database");
	}
	return 0;
}

int crc_store_open(const char *dir, unsigned flags, struct crc_store **out)
{
	if (!dir || !*dir || !out || (flags & ~(CRC_STORE_CREATE | CRC_STORE_NOSYNC)))
		return CRC_EINVAL;
	const char *sync_env = getenv("CRCUDA_STORE_SYNC");
	if (sync_env && !strcmp(sync_env, "0"))
		flags |= CRC_STORE_NOSYNC;
	bool create = flags & CRC_STORE_CREATE;
	char path[PATH_MAX];
	MDB_txn *txn = NULL;
	int rc;
	struct crc_store *st = calloc(1, sizeof(*st));
	if (!st)
		return CRC_ENOMEM;
	st->packs_dir_fd = -1;
	st->read_fd = -1;
	st->dir = strdup(dir);
	st->nosync = flags & CRC_STORE_NOSYNC;
	st->compress = crc__compress_policy();
	if (!st->dir || asprintf(&st->packs_dir, "%s/packs", dir) < 0) {
		st->packs_dir = NULL;
		rc = CRC_ENOMEM;
		goto fail;
	}

	snprintf(path, sizeof(path), "%s/data.mdb", dir);
	if (create) {
		rc = make_dirs(dir);
		if (rc) {
			pr_err("creating %s: %s", dir, strerror(-rc));
			goto fail;
		}
		/* Checked before anything is created in it. */
		rc = check_owner(st);
		if (rc)
			goto fail;
		if (mkdir(st->packs_dir, 0700) && errno != EEXIST) {
			rc = -errno;
			pr_perror("creating %s", st->packs_dir);
			goto fail;
		}
	} else if (access(path, F_OK) && errno != EACCES) {
		rc = errno == ENOENT ? CRC_ENOENT : -errno;
		pr_err("%s: no store there (%s: %s)", dir, path, strerror(errno));
		goto fail;
	} else if ((rc = check_owner(st))) {
		goto fail;
	}

	rc = mdb_env_create(&st->env);
	if (rc) {
		rc = crc__mdb_err(rc, "mdb_env_create");
		goto fail;
	}
	mdb_env_set_maxdbs(st->env, 8);
	mdb_env_set_mapsize(st->env, STORE_MAP_SIZE);
	/* MDB_NOTLS: read transactions are not tied to threads (the daemon hands work between them). */
	rc = mdb_env_open(st->env, dir, MDB_NOTLS, 0600);
	if (rc) {
		pr_err("%s: cannot open the LMDB environment", dir);
		rc = crc__mdb_err(rc, "mdb_env_open");
		goto fail;
	}
	rc = mdb_txn_begin(st->env, NULL, 0, &txn);
	if (rc) {
		rc = crc__mdb_err(rc, "mdb_txn_begin");
		goto fail;
	}
	/* The schema record is checked before anything else is looked at or created. */
	rc = mdb_dbi_open(txn, "meta", create ? MDB_CREATE : 0, &st->dbi_meta);
	if (rc == MDB_NOTFOUND) {
		pr_err("%s: not a crcuda store (no \"meta\" database)", dir);
		rc = CRC_ECORRUPT;
		goto fail;
	}
	if (rc) {
		rc = crc__mdb_err(rc, "opening the meta database");
		goto fail;
	}
	rc = schema_check(st, txn, create);
	if (rc)
		goto fail;
	rc = open_dbis(st, txn, create);
	if (rc)
		goto fail;
	rc = mdb_txn_commit(txn);
	txn = NULL;
	if (rc) {
		rc = crc__mdb_err(rc, "committing the store's creation");
		goto fail;
	}

	st->packs_dir_fd = open(st->packs_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (st->packs_dir_fd < 0) {
		rc = -errno;
		pr_perror("opening %s", st->packs_dir);
		goto fail;
	}
	*out = st;
	return 0;
fail:
	if (txn)
		mdb_txn_abort(txn);
	crc_store_close(st);
	return rc;
}

void crc_store_close(struct crc_store *st)
{
	if (!st)
		return;
	if (st->env)
		mdb_env_close(st->env);
	if (st->packs_dir_fd >= 0)
		close(st->packs_dir_fd);
	if (st->read_fd >= 0)
		close(st->read_fd);
	crc__scratch_free(st->read_scratch);
	free(st->read_scratch);
	for (unsigned i = 0; i < STORE_READERS_MAX; i++)
		crc__scratch_free(&st->batch_scratch[i]);
	free(st->packs_dir);
	free(st->dir);
	free(st);
}

const char *crc_store_dir(const struct crc_store *st)
{
	return st ? st->dir : NULL;
}

/* Hands out the next id of a counter in the meta database (first id 1). */
static int next_id(struct crc_store *st, MDB_txn *txn, const char *counter, uint64_t *out)
{
	MDB_val k = {strlen(counter), (void *)counter}, v;
	uint64_t id = 1;
	int rc = mdb_get(txn, st->dbi_meta, &k, &v);
	if (rc == 0 && v.mv_size == 8)
		id = get_le64(v.mv_data);
	else if (rc != MDB_NOTFOUND)
		return rc ? crc__mdb_err(rc, "reading an id counter") : CRC_ECORRUPT;
	uint8_t buf[8];
	put_le64(buf, id + 1);
	v = (MDB_val){8, buf};
	rc = mdb_put(txn, st->dbi_meta, &k, &v, 0);
	if (rc)
		return crc__mdb_err(rc, "writing an id counter");
	*out = id;
	return 0;
}

int crc__next_ckpt_id(struct crc_store *st, MDB_txn *txn, uint64_t *out)
{
	return next_id(st, txn, "next_ckpt", out);
}

int crc_store_session_create(struct crc_store *st, const char *name, uint64_t *out_id)
{
	if (!st || !out_id)
		return CRC_EINVAL;
	size_t namelen = name ? strlen(name) : 0;
	MDB_txn *txn;
	uint64_t id;
	int rc = mdb_txn_begin(st->env, NULL, 0, &txn);
	if (rc)
		return crc__mdb_err(rc, "mdb_txn_begin");
	rc = next_id(st, txn, "next_session", &id);
	if (rc)
		goto fail;
	uint8_t key[8];
	put_be64(key, id);
	MDB_val k = {8, key}, v = {8 + namelen, NULL};
	rc = mdb_put(txn, st->dbi_sessions, &k, &v, MDB_RESERVE);
	if (rc) {
		rc = crc__mdb_err(rc, "adding a session");
		goto fail;
	}
	put_le64(v.mv_data, (uint64_t)crc__now_ns());
	if (namelen)
		memcpy((uint8_t *)v.mv_data + 8, name, namelen);
	rc = mdb_txn_commit(txn);
	if (rc)
		return crc__mdb_err(rc, "committing a session");
	*out_id = id;
	return 0;
fail:
	mdb_txn_abort(txn);
	return rc;
}

int crc__session_check(struct crc_store *st, MDB_txn *txn, uint64_t session)
{
	uint8_t key[8];
	put_be64(key, session);
	MDB_val k = {8, key}, v;
	int rc = mdb_get(txn, st->dbi_sessions, &k, &v);
	if (rc == MDB_NOTFOUND) {
		pr_err("no session %llu in the store", (unsigned long long)session);
		return CRC_ENOTFOUND;
	}
	return crc__mdb_err(rc, "looking up a session");
}

int crc_store_journal_append(struct crc_store *st, uint64_t session, uint32_t type, const void *payload,
			     uint32_t len, uint64_t *out_seq)
{
	struct crc_jrec_in r = {.type = type, .len = len, .payload = payload};

	return crc_store_journal_append_batch(st, session, &r, 1, out_seq);
}

int crc_store_journal_append_batch(struct crc_store *st, uint64_t session, const struct crc_jrec_in *recs,
				   size_t n, uint64_t *out_last_seq)
{
	if (!st || (n && !recs))
		return CRC_EINVAL;
	for (size_t i = 0; i < n; i++)
		if ((recs[i].len && !recs[i].payload) || recs[i].len > CRC_JREC_MAX_PAYLOAD)
			return CRC_EINVAL;
	MDB_txn *txn;
	MDB_cursor *cur = NULL;
	uint64_t seq = 1;
	int rc = mdb_txn_begin(st->env, NULL, 0, &txn);
	if (rc)
		return crc__mdb_err(rc, "mdb_txn_begin");
	rc = crc__session_check(st, txn, session);
	if (rc)
		goto fail;
	rc = mdb_cursor_open(txn, st->dbi_journal, &cur);
	if (rc) {
		rc = crc__mdb_err(rc, "mdb_cursor_open");
		goto fail;
	}
	/* The session's last record is the one just before the first key of the next session. */
	uint8_t key[16];
	MDB_val k = {16, key}, v;
	if (session == UINT64_MAX) {
		rc = mdb_cursor_get(cur, &k, &v, MDB_LAST);
	} else {
		put_be64(key, session + 1);
		put_be64(key + 8, 0);
		rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
		rc = rc == MDB_NOTFOUND ? mdb_cursor_get(cur, &k, &v, MDB_LAST)
					: mdb_cursor_get(cur, &k, &v, MDB_PREV);
	}
	if (rc == 0 && k.mv_size == 16 && get_be64(k.mv_data) == session)
		seq = get_be64((uint8_t *)k.mv_data + 8) + 1;
	else if (rc && rc != MDB_NOTFOUND) {
		rc = crc__mdb_err(rc, "finding the journal's end");
		goto fail;
	}
	mdb_cursor_close(cur);
	cur = NULL;

	for (size_t i = 0; i < n; i++, seq++) {
		put_be64(key, session);
		put_be64(key + 8, seq);
		k = (MDB_val){16, key};
		v = (MDB_val){8 + (size_t)recs[i].len, NULL};
		rc = mdb_put(txn, st->dbi_journal, &k, &v, MDB_RESERVE | MDB_NOOVERWRITE);
		if (rc) {
			rc = crc__mdb_err(rc, "appending a journal record");
			goto fail;
		}
		put_le32(v.mv_data, recs[i].type);
		put_le32((uint8_t *)v.mv_data + 4, recs[i].len);
		if (recs[i].len)
			memcpy((uint8_t *)v.mv_data + 8, recs[i].payload, recs[i].len);
	}
	rc = mdb_txn_commit(txn);
	if (rc)
		return crc__mdb_err(rc, "committing journal records");
	if (out_last_seq)
		*out_last_seq = seq - 1;
	return 0;
fail:
	if (cur)
		mdb_cursor_close(cur);
	mdb_txn_abort(txn);
	return rc;
}

int crc_store_journal_iterate(struct crc_store *st, uint64_t session, crc_journal_fn fn, void *arg)
{
	if (!st || !fn)
		return CRC_EINVAL;
	MDB_txn *txn;
	MDB_cursor *cur = NULL;
	int rc = mdb_txn_begin(st->env, NULL, MDB_RDONLY, &txn);
	if (rc)
		return crc__mdb_err(rc, "mdb_txn_begin");
	rc = crc__session_check(st, txn, session);
	if (rc)
		goto out;
	rc = mdb_cursor_open(txn, st->dbi_journal, &cur);
	if (rc) {
		rc = crc__mdb_err(rc, "mdb_cursor_open");
		goto out;
	}
	uint8_t key[16];
	put_be64(key, session);
	put_be64(key + 8, 0);
	MDB_val k = {16, key}, v;
	for (rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE); rc == 0;
	     rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
		if (k.mv_size != 16 || get_be64(k.mv_data) != session)
			break;
		uint64_t seq = get_be64((uint8_t *)k.mv_data + 8);
		if (v.mv_size < 8 || get_le32((uint8_t *)v.mv_data + 4) != v.mv_size - 8) {
			pr_err("session %llu journal record %llu: header does not match its %zu bytes",
			       (unsigned long long)session, (unsigned long long)seq, v.mv_size);
			rc = CRC_ECORRUPT;
			goto out;
		}
		rc = fn(arg, seq, get_le32(v.mv_data), (uint8_t *)v.mv_data + 8, (uint32_t)(v.mv_size - 8));
		if (rc)
			goto out;
	}
	rc = rc == MDB_NOTFOUND ? 0 : crc__mdb_err(rc, "reading the journal");
out:
	if (cur)
		mdb_cursor_close(cur);
	mdb_txn_abort(txn);
	return rc;
}

int crc_store_stat(struct crc_store *st, struct crc_store_stat *out)
{
	if (!st || !out)
		return CRC_EINVAL;
	memset(out, 0, sizeof(*out));
	MDB_txn *txn;
	MDB_cursor *cur = NULL;
	MDB_stat ms;
	int rc = mdb_txn_begin(st->env, NULL, MDB_RDONLY, &txn);
	if (rc)
		return crc__mdb_err(rc, "mdb_txn_begin");
	if ((rc = mdb_stat(txn, st->dbi_sessions, &ms)))
		goto fail;
	out->sessions = ms.ms_entries;
	if ((rc = mdb_stat(txn, st->dbi_manifests, &ms)))
		goto fail;
	out->manifests = ms.ms_entries;
	MDB_val k, v;
	if ((rc = mdb_cursor_open(txn, st->dbi_chunks, &cur)))
		goto fail;
	while ((rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) == 0) {
		struct chunk_loc loc;
		out->chunks++;
		if (!crc__chunk_loc_decode(v.mv_data, v.mv_size, &loc)) {
			out->chunk_bytes += loc.length;
			out->chunk_stored_bytes += loc.stored;
			if (loc.encoding != CHUNK_ENC_RAW)
				out->chunks_compressed++;
		}
	}
	mdb_cursor_close(cur);
	if ((rc = mdb_cursor_open(txn, st->dbi_packs, &cur)))
		goto fail;
	while ((rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) == 0) {
		out->packs++;
		if (v.mv_size == 8)
			out->pack_bytes += get_le64(v.mv_data);
	}
	mdb_cursor_close(cur);
	mdb_txn_abort(txn);
	return rc == MDB_NOTFOUND ? 0 : crc__mdb_err(rc, "counting");
fail:
	mdb_txn_abort(txn);
	return crc__mdb_err(rc, "counting");
}

/* hset: open addressing, linear probing; the hash bytes are already uniform. */
static size_t hset_index(const struct crc_hash *key, size_t cap)
{
	uint64_t h;
	memcpy(&h, key->bytes, 8);
	return (size_t)h & (cap - 1);
}

struct hset_slot *crc__hset_find(const struct hset *s, const struct crc_hash *key)
{
	if (!s->cap)
		return NULL;
	for (size_t i = hset_index(key, s->cap);; i = (i + 1) & (s->cap - 1)) {
		if (!s->slots[i].used)
			return NULL;
		if (!memcmp(s->slots[i].key.bytes, key->bytes, 16))
			return &s->slots[i];
	}
}

struct hset_slot *crc__hset_insert(struct hset *s, const struct crc_hash *key, bool *out_new)
{
	if ((s->count + 1) * 2 > s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 64;
		struct hset_slot *slots = calloc(cap, sizeof(*slots));
		if (!slots)
			return NULL;
		for (size_t i = 0; i < s->cap; i++) {
			if (!s->slots[i].used)
				continue;
			size_t j = hset_index(&s->slots[i].key, cap);
			while (slots[j].used)
				j = (j + 1) & (cap - 1);
			slots[j] = s->slots[i];
		}
		free(s->slots);
		s->slots = slots;
		s->cap = cap;
	}
	size_t i = hset_index(key, s->cap);
	while (s->slots[i].used) {
		if (!memcmp(s->slots[i].key.bytes, key->bytes, 16)) {
			*out_new = false;
			return &s->slots[i];
		}
		i = (i + 1) & (s->cap - 1);
	}
	s->slots[i].used = true;
	s->slots[i].key = *key;
	s->slots[i].value = 0;
	s->count++;
	*out_new = true;
	return &s->slots[i];
}

void crc__hset_free(struct hset *s)
{
	free(s->slots);
	memset(s, 0, sizeof(*s));
}
