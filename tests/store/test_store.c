/* Store unit tests; argv[1] names the test (each is its own ctest entry). */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <fcntl.h>
#include <lmdb.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include "crc_store.h"
#include "crcuda/errno.h"
#include "crcuda/log.h"
#include "store_internal.h"
#include "store_test.h"

static struct crc_store *fresh_store(char **dir)
{
	struct crc_store *st;
	*dir = test_tmpdir("store");
	CHECK_OK(crc_store_open(*dir, CRC_STORE_CREATE, &st));
	return st;
}

/* Sum of the sizes of the pack files on disk, and their count. */
static uint64_t packs_on_disk(const char *dir, int *count)
{
	char *cmd, line[512];
	uint64_t total = 0;
	*count = 0;
	CHECK(asprintf(&cmd, "stat -c %%s '%s'/packs/*.pack 2>/dev/null", dir) > 0);
	FILE *f = popen(cmd, "r");
	CHECK(f != NULL);
	while (fgets(line, sizeof(line), f)) {
		total += strtoull(line, NULL, 10);
		(*count)++;
	}
	pclose(f);
	free(cmd);
	return total;
}

/* --- journal --- */

struct jseen {
	int n;
	uint64_t seqs[16];
	uint32_t types[16];
	char payloads[16][32];
	int stop_at;
};

static int jcollect(void *arg, uint64_t seq, uint32_t type, const void *payload, uint32_t len)
{
	struct jseen *s = arg;
	CHECK(s->n < 16 && len < 32);
	s->seqs[s->n] = seq;
	s->types[s->n] = type;
	memcpy(s->payloads[s->n], payload, len);
	s->payloads[s->n][len] = 0;
	s->n++;
	return s->stop_at && s->n == s->stop_at ? 42 : 0;
}

static void test_journal(void)
{
	char *dir;
	struct crc_store *st = fresh_store(&dir);
	uint64_t s1, s2, seq;
	CHECK_OK(crc_store_session_create(st, "one", &s1));
	CHECK_OK(crc_store_session_create(st, NULL, &s2));
	CHECK(s1 != s2);
	/* Interleaved appends: each session numbers its own records from 1. */
	CHECK_OK(crc_store_journal_append(st, s1, CRC_JREC_CONTEXT_CREATE, "ctx", 3, &seq));
	CHECK_EQ_INT(seq, 1);
	CHECK_OK(crc_store_journal_append(st, s2, CRC_JREC_MEM_ALLOC, "s2-alloc", 8, &seq));
	CHECK_EQ_INT(seq, 1);
	CHECK_OK(crc_store_journal_append(st, s1, CRC_JREC_MODULE_LOAD, "module", 6, &seq));
	CHECK_EQ_INT(seq, 2);
	CHECK_OK(crc_store_journal_append(st, s1, CRC_JREC_STREAM_CREATE, NULL, 0, &seq));
	CHECK_EQ_INT(seq, 3);
	CHECK_EQ_INT(crc_store_journal_append(st, 999, CRC_JREC_MEM_FREE, "x", 1, &seq), CRC_ENOTFOUND);
	CHECK_EQ_INT(crc_store_journal_append(st, s1, CRC_JREC_MEM_FREE, "x", CRC_JREC_MAX_PAYLOAD + 1, &seq),
		     CRC_EINVAL);
	crc_store_close(st);

	/* Durable across close: read it back from a new handle. */
	CHECK_OK(crc_store_open(dir, 0, &st));
	struct jseen seen = {0};
	CHECK_OK(crc_store_journal_iterate(st, s1, jcollect, &seen));
	CHECK_EQ_INT(seen.n, 3);
	CHECK_EQ_INT(seen.seqs[0], 1);
	CHECK_EQ_INT(seen.seqs[2], 3);
	CHECK_EQ_INT(seen.types[0], CRC_JREC_CONTEXT_CREATE);
	CHECK_EQ_INT(seen.types[1], CRC_JREC_MODULE_LOAD);
	CHECK_EQ_INT(seen.types[2], CRC_JREC_STREAM_CREATE);
	CHECK_EQ_STR(seen.payloads[0], "ctx");
	CHECK_EQ_STR(seen.payloads[1], "module");
	CHECK_EQ_STR(seen.payloads[2], "");
	memset(&seen, 0, sizeof(seen));
	CHECK_OK(crc_store_journal_iterate(st, s2, jcollect, &seen));
	CHECK_EQ_INT(seen.n, 1);
	CHECK_EQ_STR(seen.payloads[0], "s2-alloc");
	/* The callback's non-zero result stops the walk and comes back. */
	memset(&seen, 0, sizeof(seen));
	seen.stop_at = 2;
	CHECK_EQ_INT(crc_store_journal_iterate(st, s1, jcollect, &seen), 42);
	CHECK_EQ_INT(seen.n, 2);
	CHECK_EQ_INT(crc_store_journal_iterate(st, 12345, jcollect, &seen), CRC_ENOTFOUND);
	CHECK_EQ_STR(crc_jrec_type_name(CRC_JREC_MODULE_LOAD), "MODULE_LOAD");
	CHECK_EQ_STR(crc_jrec_type_name(9999), "UNKNOWN");
	crc_store_close(st);
	test_rmrf(dir);
	free(dir);
}

/* --- manifest --- */

static void test_manifest(void)
{
	char *dir;
	struct crc_store *st = fresh_store(&dir);
	uint64_t session, id;
	struct crc_ckpt *ck;
	uint32_t r0, r1, r2;
	static uint8_t a[100000], b[4096], g[64];
	test_fill(a, sizeof(a), 1);
	test_fill(b, sizeof(b), 2);
	test_fill(g, sizeof(g), 3);
	struct crc_hash module;
	CHECK_OK(crc_store_session_create(st, "m", &session));
	CHECK_OK(crc_store_blob_put(st, session, "IMAGE", 5, &module));

	CHECK_OK(crc_ckpt_begin(st, session, &ck));
	struct crc_region_desc d0 = {
	    .kind = CRC_REGION_DEVICE_ALLOC, .addr = 0x600000200000ull, .size = sizeof(a) + sizeof(b)};
	struct crc_region_desc d1 = {
	    .kind = CRC_REGION_DEVICE_GLOBAL, .size = sizeof(g), .name = "_Z7counter", .module = module};
	struct crc_region_desc d2 = {.kind = CRC_REGION_HOST, .size = 0};
	CHECK_OK(crc_ckpt_region_add(ck, &d0, &r0));
	CHECK_OK(crc_ckpt_region_add(ck, &d1, &r1));
	CHECK_OK(crc_ckpt_region_add(ck, &d2, &r2));
	CHECK_EQ_INT(r2, 2);
	CHECK_OK(crc_ckpt_put_chunk(ck, r0, a, sizeof(a), NULL));
	CHECK_OK(crc_ckpt_put_chunk(ck, r0, b, sizeof(b), NULL));
	CHECK_OK(crc_ckpt_put_chunk(ck, r1, g, sizeof(g), NULL));
	CHECK_EQ_INT(crc_ckpt_put_chunk(ck, 7, g, sizeof(g), NULL), CRC_EINVAL);
	CHECK_OK(crc_ckpt_meta_set(ck, "criu.images_dir", "/old"));
	CHECK_OK(crc_ckpt_meta_set(ck, "criu.images_dir", "/var/lib/crcuda/x"));
	CHECK_OK(crc_ckpt_meta_set(ck, "note", "second \"key\""));
	CHECK_OK(crc_ckpt_commit(ck, &id));
	crc_store_close(st);

	CHECK_OK(crc_store_open(dir, 0, &st));
	struct crc_manifest *m;
	CHECK_OK(crc_store_manifest_get(st, id, &m));
	CHECK_EQ_INT(m->ckpt_id, id);
	CHECK_EQ_INT(m->session_id, session);
	CHECK(m->created_ns > 1600000000ll * 1000000000ll);
	CHECK_EQ_INT(m->nregions, 3);
	CHECK_EQ_INT(m->regions[0].kind, CRC_REGION_DEVICE_ALLOC);
	CHECK_EQ_INT(m->regions[0].addr, 0x600000200000ull);
	CHECK_EQ_INT(m->regions[0].size, sizeof(a) + sizeof(b));
	CHECK(m->regions[0].name == NULL);
	CHECK_EQ_INT(m->regions[0].nchunks, 2);
	CHECK_EQ_INT(m->regions[0].chunks[0].length, sizeof(a));
	CHECK_EQ_INT(m->regions[0].chunks[1].length, sizeof(b));
	CHECK_EQ_STR(m->regions[1].name, "_Z7counter");
	CHECK(!memcmp(m->regions[1].module.bytes, module.bytes, 16));
	CHECK_EQ_INT(m->regions[2].nchunks, 0);
	CHECK_EQ_INT(m->nmeta, 2);
	CHECK_EQ_STR(crc_manifest_meta_get(m, "criu.images_dir"), "/var/lib/crcuda/x");
	CHECK_EQ_STR(crc_manifest_meta_get(m, "note"), "second \"key\"");
	CHECK(crc_manifest_meta_get(m, "absent") == NULL);

	/* The chunks read back byte for byte, and the hash is the content's. */
	static uint8_t back[100000];
	size_t len;
	struct crc_hash h;
	CHECK_OK(crc_store_chunk_read(st, &m->regions[0].chunks[0].hash, back, sizeof(back), &len));
	CHECK_EQ_INT(len, sizeof(a));
	CHECK(!memcmp(back, a, sizeof(a)));
	crc_hash_compute(b, sizeof(b), &h);
	CHECK(!memcmp(h.bytes, m->regions[0].chunks[1].hash.bytes, 16));
	CHECK_OK(crc_store_chunk_read(st, &h, back, sizeof(back), &len));
	CHECK(!memcmp(back, b, sizeof(b)));
	CHECK_EQ_INT(crc_store_chunk_read(st, &h, back, 10, &len), CRC_EINVAL);
	CHECK_EQ_INT(len, sizeof(b));
	CHECK_OK(crc_store_chunk_read(st, &module, back, sizeof(back), &len));
	CHECK(len == 5 && !memcmp(back, "IMAGE", 5));

	/* Hex round trip. */
	char hex[CRC_HASH_HEX_LEN + 1];
	struct crc_hash h2;
	crc_hash_to_hex(&h, hex);
	CHECK_OK(crc_hash_from_hex(hex, &h2));
	CHECK(!memcmp(h.bytes, h2.bytes, 16));
	CHECK_EQ_INT(crc_hash_from_hex("xyz", &h2), CRC_EINVAL);

	/* Every cut of the encoding is refused as corrupt, never misread. */
	uint8_t *enc;
	size_t enclen;
	CHECK_OK(crc__manifest_encode(m, &enc, &enclen));
	for (size_t cut = 0; cut < enclen; cut++) {
		struct crc_manifest *bad = NULL;
		CHECK_EQ_INT(crc__manifest_decode(enc, cut, &bad), CRC_ECORRUPT);
	}
	struct crc_manifest *again;
	CHECK_OK(crc__manifest_decode(enc, enclen, &again));
	CHECK_EQ_STR(again->regions[1].name, "_Z7counter");
	crc_manifest_free(again);
	free(enc);
	crc_manifest_free(m);

	uint64_t *ids;
	size_t n;
	CHECK_OK(crc_store_manifest_list(st, &ids, &n));
	CHECK(n == 1 && ids[0] == id);
	free(ids);
	CHECK_EQ_INT(crc_store_manifest_get(st, id + 1, &m), CRC_ENOTFOUND);

	/* A region whose chunks do not add up to its size is refused, and nothing becomes visible. */
	CHECK_OK(crc_ckpt_begin(st, session, &ck));
	CHECK_OK(crc_ckpt_region_add(ck, &d0, &r0));
	CHECK_OK(crc_ckpt_put_chunk(ck, r0, a, sizeof(a), NULL));
	CHECK_EQ_INT(crc_ckpt_commit(ck, NULL), CRC_EINVAL);
	CHECK_OK(crc_store_manifest_list(st, &ids, &n));
	CHECK_EQ_INT(n, 1);
	free(ids);
	CHECK_EQ_INT(crc_ckpt_begin(st, 77, &ck), CRC_ENOTFOUND);
	crc_store_close(st);
	test_rmrf(dir);
	free(dir);
}

/* --- dedup --- */

static uint64_t commit_chunks(struct crc_store *st, uint64_t session, const uint64_t *seeds, int n,
			      size_t len)
{
	struct crc_ckpt *ck;
	uint32_t r;
	uint64_t id;
	uint8_t *buf = malloc(len);
	CHECK(buf);
	CHECK_OK(crc_ckpt_begin(st, session, &ck));
	struct crc_region_desc d = {
	    .kind = CRC_REGION_DEVICE_ALLOC, .addr = 0x600000000000ull, .size = n * len};
	CHECK_OK(crc_ckpt_region_add(ck, &d, &r));
	for (int i = 0; i < n; i++) {
		test_fill(buf, len, seeds[i]);
		CHECK_OK(crc_ckpt_put_chunk(ck, r, buf, len, NULL));
	}
	CHECK_OK(crc_ckpt_commit(ck, &id));
	free(buf);
	return id;
}

static void test_dedup(void)
{
	char *dir;
	struct crc_store *st = fresh_store(&dir);
	uint64_t session;
	int npacks;
	const size_t len = 256 << 10;
	CHECK_OK(crc_store_session_create(st, "d", &session));
	commit_chunks(st, session, (uint64_t[]){1, 2}, 2, len);
	uint64_t before = packs_on_disk(dir, &npacks);
	CHECK_EQ_INT(npacks, 1);
	CHECK(before >= 2 * len);
	/* 1 and 2 are in the store, 3 twice in this checkpoint: only one new chunk is written. */
	uint64_t id2 = commit_chunks(st, session, (uint64_t[]){1, 3, 2, 3}, 4, len);
	uint64_t after = packs_on_disk(dir, &npacks);
	CHECK_EQ_INT(npacks, 2);
	CHECK_EQ_INT(after - before, PACK_HEADER_SIZE + CHUNK_HEADER_SIZE + len);
	struct crc_store_stat ss;
	CHECK_OK(crc_store_stat(st, &ss));
	CHECK_EQ_INT(ss.chunks, 3);
	CHECK_EQ_INT(ss.chunk_bytes, 3 * len);
	CHECK_EQ_INT(ss.manifests, 2);
	/* The second manifest still names all four chunks, in order. */
	struct crc_manifest *m;
	uint8_t *buf = malloc(len), *want = malloc(len);
	CHECK_OK(crc_store_manifest_get(st, id2, &m));
	CHECK_EQ_INT(m->regions[0].nchunks, 4);
	const uint64_t seeds[] = {1, 3, 2, 3};
	for (int i = 0; i < 4; i++) {
		size_t got;
		CHECK_OK(crc_store_chunk_read(st, &m->regions[0].chunks[i].hash, buf, len, &got));
		test_fill(want, len, seeds[i]);
		CHECK(got == len && !memcmp(buf, want, len));
	}
	crc_manifest_free(m);
	/* crc_ckpt_new_bytes counts only what a checkpoint writes: a known chunk and a repeat are free. */
	struct crc_ckpt *ck;
	uint32_t r;
	struct crc_region_desc d = {.kind = CRC_REGION_DEVICE_ALLOC, .size = 3 * len};
	CHECK_OK(crc_ckpt_begin(st, session, &ck));
	CHECK_OK(crc_ckpt_region_add(ck, &d, &r));
	test_fill(buf, len, 1);
	CHECK_OK(crc_ckpt_put_chunk(ck, r, buf, len, NULL));
	CHECK_EQ_INT(crc_ckpt_new_bytes(ck), 0);
	test_fill(buf, len, 4);
	CHECK_OK(crc_ckpt_put_chunk(ck, r, buf, len, NULL));
	CHECK_OK(crc_ckpt_put_chunk(ck, r, buf, len, NULL));
	CHECK_EQ_INT(crc_ckpt_new_bytes(ck), len);
	crc_ckpt_abort(ck);
	free(buf);
	free(want);
	crc_store_close(st);
	test_rmrf(dir);
	free(dir);
}

/* --- verify --- */

struct problems {
	int n;
	int err[8];
	char id[8][64];
	char what[8][128];
};

static void collect_problem(void *arg, int err, const char *id, const char *what)
{
	struct problems *p = arg;
	if (p->n < 8) {
		p->err[p->n] = err;
		snprintf(p->id[p->n], sizeof(p->id[0]), "%s", id);
		snprintf(p->what[p->n], sizeof(p->what[0]), "%s", what);
	}
	p->n++;
}

/* Finds the only pack file holding needle (a chunk's bytes) and returns its path and the offset. */
static char *find_in_packs(const char *dir, const void *needle, size_t len, long *out_off)
{
	char *cmd, line[1024], *found = NULL;
	CHECK(asprintf(&cmd, "ls '%s'/packs/*.pack", dir) > 0);
	FILE *f = popen(cmd, "r");
	while (fgets(line, sizeof(line), f)) {
		line[strcspn(line, "\n")] = 0;
		FILE *pf = fopen(line, "rb");
		CHECK(pf);
		fseek(pf, 0, SEEK_END);
		long size = ftell(pf);
		uint8_t *data = malloc(size);
		rewind(pf);
		CHECK(fread(data, 1, size, pf) == (size_t)size);
		fclose(pf);
		uint8_t *hit = memmem(data, size, needle, len);
		if (hit) {
			CHECK(found == NULL);
			found = strdup(line);
			*out_off = hit - data;
		}
		free(data);
	}
	pclose(f);
	free(cmd);
	CHECK(found != NULL);
	return found;
}

static void flip_byte(const char *path, long off)
{
	int fd = open(path, O_RDWR);
	uint8_t c;
	CHECK(fd >= 0);
	CHECK(pread(fd, &c, 1, off) == 1);
	c ^= 0x40;
	CHECK(pwrite(fd, &c, 1, off) == 1);
	close(fd);
}

static void test_verify_flip(void)
{
	char *dir;
	struct crc_store *st = fresh_store(&dir);
	uint64_t session;
	const size_t len = 64 << 10;
	uint8_t *chunk = malloc(len), *buf = malloc(len);
	CHECK_OK(crc_store_session_create(st, "v", &session));
	uint64_t id = commit_chunks(st, session, (uint64_t[]){10, 11, 12}, 3, len);
	struct crc_verify_report rep;
	CHECK_OK(crc_store_verify(st, NULL, NULL, &rep));
	CHECK_EQ_INT(rep.chunks, 3);
	CHECK_EQ_INT(rep.bytes, 3 * len);
	CHECK_EQ_INT(rep.problems, 0);

	long off;
	test_fill(chunk, len, 11);
	char *pack = find_in_packs(dir, chunk, len, &off);
	flip_byte(pack, off + 1000);
	struct crc_hash h;
	size_t got;
	crc_hash_compute(chunk, len, &h);
	CHECK_EQ_INT(crc_store_chunk_read(st, &h, buf, len, &got), CRC_ECORRUPT);
	struct problems p = {0};
	CHECK_EQ_INT(crc_store_verify(st, collect_problem, &p, &rep), CRC_ECORRUPT);
	CHECK_EQ_INT(p.n, 1);
	CHECK_EQ_INT(p.err[0], CRC_ECORRUPT);
	char hex[CRC_HASH_HEX_LEN + 1];
	crc_hash_to_hex(&h, hex);
	CHECK_EQ_STR(p.id[0], hex);
	CHECK_EQ_INT(rep.bad_manifests, 1);
	CHECK_EQ_INT(rep.problems, 1);
	/* The other chunks of the checkpoint still read. */
	test_fill(chunk, len, 12);
	crc_hash_compute(chunk, len, &h);
	CHECK_OK(crc_store_chunk_read(st, &h, buf, len, &got));
	CHECK(!memcmp(buf, chunk, len));
	/* gc must not take a damaged checkpoint or its chunks away. */
	struct crc_manifest *m;
	CHECK_OK(crc_store_gc(st, NULL));
	CHECK_OK(crc_store_manifest_get(st, id, &m));
	crc_manifest_free(m);
	/* Flipping the byte back heals the store: the check really is over the bytes. */
	flip_byte(pack, off + 1000);
	CHECK_OK(crc_store_verify(st, NULL, NULL, &rep));
	test_fill(chunk, len, 11);
	crc_hash_compute(chunk, len, &h);
	CHECK_OK(crc_store_chunk_read(st, &h, buf, len, &got));
	CHECK(!memcmp(buf, chunk, len));
	free(pack);
	free(chunk);
	free(buf);
	crc_store_close(st);
	test_rmrf(dir);
	free(dir);
}

/* Device digests ride in the manifest (version 2 only when a chunk has one), set before or after the
 * chunk is put; a reader that does not hash returns damaged raw bytes as they are (the restore checks
 * them on the device), the hashing one refuses them. */
static void test_digests(void)
{
	char *dir;
	struct crc_store *st = fresh_store(&dir);
	uint64_t session, id;
	const size_t len = 64 << 10;
	uint8_t *chunk = malloc(len), *buf = malloc(len);
	struct crc_ckpt *ck;
	uint32_t r;
	CHECK(chunk && buf);
	CHECK_OK(crc_store_session_create(st, "d", &session));
	CHECK_OK(crc_ckpt_begin(st, session, &ck));
	struct crc_region_desc d = {
	    .kind = CRC_REGION_DEVICE_ALLOC, .addr = 0x600000000000ull, .size = 3 * len};
	CHECK_OK(crc_ckpt_region_add(ck, &d, &r));
	CHECK_EQ_INT(crc_ckpt_set_digest_at(ck, r + 1, 0, (uint64_t[]){1, 2}), CRC_EINVAL);
	CHECK_OK(crc_ckpt_set_digest_at(ck, r, 1, (uint64_t[]){0x1111, 0x2222})); /* before its put */
	for (uint32_t i = 0; i < 3; i++) {
		test_fill(chunk, len, 40 + i);
		CHECK_OK(crc_ckpt_put_chunk_at(ck, 0, r, i, chunk, len, NULL));
	}
	CHECK_OK(crc_ckpt_set_digest_at(ck, r, 2, (uint64_t[]){0x3333, 0x4444})); /* after */
	CHECK_OK(crc_ckpt_commit(ck, &id));
	struct crc_manifest *m;
	CHECK_OK(crc_store_manifest_get(st, id, &m));
	CHECK_EQ_INT(m->regions[0].nchunks, 3);
	CHECK(m->regions[0].chunks[0].digest[0] == 0 && m->regions[0].chunks[0].digest[1] == 0);
	CHECK(m->regions[0].chunks[1].digest[0] == 0x1111 && m->regions[0].chunks[1].digest[1] == 0x2222);
	CHECK(m->regions[0].chunks[2].digest[0] == 0x3333 && m->regions[0].chunks[2].digest[1] == 0x4444);
	CHECK_EQ_INT(m->regions[0].chunks[1].length, len);

	/* Version 2 with digests, every cut refused; version 1 again without any. */
	uint8_t *enc;
	size_t enclen;
	CHECK_OK(crc__manifest_encode(m, &enc, &enclen));
	CHECK_EQ_INT(enc[4], 2);
	for (size_t cut = 0; cut < enclen; cut++) {
		struct crc_manifest *bad = NULL;
		CHECK_EQ_INT(crc__manifest_decode(enc, cut, &bad), CRC_ECORRUPT);
	}
	free(enc);
	for (uint32_t i = 0; i < 3; i++)
		m->regions[0].chunks[i].digest[0] = m->regions[0].chunks[i].digest[1] = 0;
	CHECK_OK(crc__manifest_encode(m, &enc, &enclen));
	CHECK_EQ_INT(enc[4], 1);
	free(enc);

	/* A flipped byte: the hashing reader refuses the chunk, the other returns it as it is. */
	long off;
	size_t got;
	struct crc_chunk_reader *rd;
	test_fill(chunk, len, 41);
	char *pack = find_in_packs(dir, chunk, len, &off);
	flip_byte(pack, off + 777);
	CHECK_OK(crc_chunk_reader_open(st, &rd));
	CHECK_EQ_INT(crc_chunk_reader_read(rd, &m->regions[0].chunks[1].hash, buf, len, &got), CRC_ECORRUPT);
	CHECK_OK(crc_chunk_reader_read_unverified(rd, &m->regions[0].chunks[1].hash, buf, len, &got));
	CHECK_EQ_INT(got, len);
	CHECK_EQ_INT(buf[777], chunk[777] ^ 0x40);
	buf[777] = chunk[777];
	CHECK(!memcmp(buf, chunk, len));
	CHECK_EQ_INT(crc_chunk_reader_read_unverified(rd, &m->regions[0].chunks[1].hash, buf, 10, &got),
		     CRC_EINVAL);
	crc_chunk_reader_close(rd);
	free(pack);
	crc_manifest_free(m);
	free(chunk);
	free(buf);
	crc_store_close(st);
	test_rmrf(dir);
	free(dir);
}

static void test_verify_trunc(void)
{
	char *dir;
	struct crc_store *st = fresh_store(&dir);
	uint64_t session;
	const size_t len = 64 << 10;
	uint8_t *chunk = malloc(len), *buf = malloc(len);
	CHECK_OK(crc_store_session_create(st, "t", &session));
	commit_chunks(st, session, (uint64_t[]){20, 21, 22}, 3, len);
	long off;
	test_fill(chunk, len, 22);
	char *pack = find_in_packs(dir, chunk, len, &off);
	/* Cut the pack in the middle of its last chunk. */
	CHECK(truncate(pack, off + len / 2) == 0);
	struct crc_hash h;
	size_t got;
	crc_hash_compute(chunk, len, &h);
	CHECK_EQ_INT(crc_store_chunk_read(st, &h, buf, len, &got), CRC_ETRUNC);
	struct problems p = {0};
	struct crc_verify_report rep;
	CHECK_EQ_INT(crc_store_verify(st, collect_problem, &p, &rep), CRC_ECORRUPT);
	/* The pack's length and the chunk are both reported. */
	CHECK_EQ_INT(p.n, 2);
	CHECK_EQ_INT(p.err[0], CRC_ETRUNC);
	CHECK_EQ_INT(p.err[1], CRC_ETRUNC);
	CHECK_EQ_INT(rep.bad_manifests, 1);
	/* A missing pack file is reported too. */
	CHECK(unlink(pack) == 0);
	memset(&p, 0, sizeof(p));
	CHECK_EQ_INT(crc_store_verify(st, collect_problem, &p, &rep), CRC_ECORRUPT);
	CHECK_EQ_INT(p.n, 4); /* the pack, and each of the three chunks */
	free(pack);
	free(chunk);
	free(buf);
	crc_store_close(st);
	test_rmrf(dir);
	free(dir);
}

/* --- schema --- */

static void test_schema(void)
{
	char *dir;
	struct crc_store *st = fresh_store(&dir);
	crc_store_close(st);

	/* Rewrite the schema record behind the store's back, as a future crcuda would. */
	MDB_env *env;
	MDB_txn *txn;
	MDB_dbi dbi;
	CHECK_EQ_INT(mdb_env_create(&env), 0);
	CHECK_EQ_INT(mdb_env_set_maxdbs(env, 8), 0);
	CHECK_EQ_INT(mdb_env_open(env, dir, 0, 0644), 0);
	CHECK_EQ_INT(mdb_txn_begin(env, NULL, 0, &txn), 0);
	CHECK_EQ_INT(mdb_dbi_open(txn, "meta", 0, &dbi), 0);
	uint8_t v99[4] = {99, 0, 0, 0};
	MDB_val k = {14, "schema_version"}, v = {4, v99};
	CHECK_EQ_INT(mdb_put(txn, dbi, &k, &v, 0), 0);
	CHECK_EQ_INT(mdb_txn_commit(txn), 0);
	mdb_env_close(env);

	char *log;
	CHECK(asprintf(&log, "%s/log", dir) > 0);
	CHECK_OK(crc_log_set_file(log));
	CHECK_EQ_INT(crc_store_open(dir, 0, &st), CRC_ESCHEMA);
	CHECK_EQ_INT(crc_store_open(dir, CRC_STORE_CREATE, &st), CRC_ESCHEMA);
	CHECK_OK(crc_log_set_file(NULL));
	char text[4096] = {0};
	FILE *f = fopen(log, "r");
	CHECK(f && fread(text, 1, sizeof(text) - 1, f) > 0);
	fclose(f);
	CHECK(strstr(text, "schema version 99") != NULL);
	CHECK(strstr(text, "only versions 1 to 2") != NULL);

	/* No store at all: a clear CRC_ENOENT, and nothing is created. */
	char *none;
	CHECK(asprintf(&none, "%s/none", dir) > 0);
	CHECK_EQ_INT(crc_store_open(none, 0, &st), CRC_ENOENT);
	CHECK(access(none, F_OK) != 0);
	free(none);
	free(log);
	test_rmrf(dir);
	free(dir);
}

/* --- a blob pinned from the store (an import whose source left out a module image) --- */

static void test_blob_pin(void)
{
	char *dir;
	struct crc_store *st = fresh_store(&dir);
	uint64_t a, b;
	const size_t len = 64 << 10;
	struct crc_gc_report rep;
	struct crc_hash blob, h, unknown = {{1, 2, 3}};
	uint8_t *buf = malloc(len), *want = malloc(len);
	size_t got;

	CHECK_OK(crc_store_session_create(st, "a", &a));
	CHECK_OK(crc_store_session_create(st, "b", &b));
	CHECK_OK(crc_store_blob_put(st, a, "module-image", 12, &blob));
	CHECK_OK(crc_store_blob_pin(st, b, &blob, 12));
	CHECK_EQ_INT(crc_store_blob_pin(st, b, &blob, 13), CRC_EINVAL);
	CHECK_EQ_INT(crc_store_blob_pin(st, b, &unknown, 12), CRC_ENOTFOUND);
	CHECK_EQ_INT(crc_store_blob_pin(st, b + 100, &blob, 12), CRC_ENOTFOUND);
	/* Bytes a checkpoint brought, pinned to b: they outlive the checkpoint (gc keeps them), where
	 * unpinned ones go (test_gc). */
	uint64_t id = commit_chunks(st, a, (uint64_t[]){7}, 1, len);
	test_fill(want, len, 7);
	crc_hash_compute(want, len, &h);
	CHECK_OK(crc_store_blob_pin(st, b, &h, len));
	CHECK_OK(crc_store_manifest_delete(st, id));
	CHECK_OK(crc_store_gc(st, &rep));
	CHECK_EQ_INT(rep.chunks_removed, 0);
	CHECK_OK(crc_store_chunk_read(st, &h, buf, len, &got));
	CHECK(got == len && !memcmp(buf, want, len));
	free(buf);
	free(want);
	crc_store_close(st);
	test_rmrf(dir);
	free(dir);
}

/* --- gc --- */

static void test_gc(void)
{
	char *dir;
	struct crc_store *st = fresh_store(&dir);
	uint64_t session;
	const size_t len = 128 << 10;
	int npacks;
	struct crc_gc_report rep;
	struct crc_hash blob;
	CHECK_OK(crc_store_session_create(st, "g", &session));
	CHECK_OK(crc_store_blob_put(st, session, "module-image", 12, &blob));
	uint64_t id1 = commit_chunks(st, session, (uint64_t[]){1, 2}, 2, len);
	uint64_t id2 = commit_chunks(st, session, (uint64_t[]){2, 3}, 2, len);
	packs_on_disk(dir, &npacks);
	CHECK_EQ_INT(npacks, 3); /* the blob's and one per checkpoint */

	/* Nothing to collect while both checkpoints stand. */
	CHECK_OK(crc_store_gc(st, &rep));
	CHECK_EQ_INT(rep.chunks_removed, 0);
	CHECK_EQ_INT(rep.packs_removed, 0);

	/* Without checkpoint 1, chunk 1 goes; its pack stays because chunk 2 (shared) lives there. */
	CHECK_OK(crc_store_manifest_delete(st, id1));
	CHECK_EQ_INT(crc_store_manifest_delete(st, id1), CRC_ENOTFOUND);
	CHECK_OK(crc_store_gc(st, &rep));
	CHECK_EQ_INT(rep.chunks_removed, 1);
	CHECK_EQ_INT(rep.packs_removed, 0);
	CHECK_EQ_INT(rep.bytes_dead_retained, len);
	uint8_t *buf = malloc(len), *want = malloc(len);
	struct crc_hash h;
	size_t got;
	test_fill(want, len, 1);
	crc_hash_compute(want, len, &h);
	CHECK_EQ_INT(crc_store_chunk_read(st, &h, buf, len, &got), CRC_ENOTFOUND);
	for (uint64_t seed = 2; seed <= 3; seed++) {
		test_fill(want, len, seed);
		crc_hash_compute(want, len, &h);
		CHECK_OK(crc_store_chunk_read(st, &h, buf, len, &got));
		CHECK(!memcmp(buf, want, len));
	}

	/* A pack no commit names and no writer holds (a killed writer's) is removed; a live writer's
	 * pack is not, and its checkpoint commits fine afterwards. */
	char *orphan;
	CHECK(asprintf(&orphan, "%s/packs/00000000deadbeef.pack", dir) > 0);
	FILE *f = fopen(orphan, "w");
	CHECK(f && fputs("leftover", f) >= 0);
	fclose(f);
	struct crc_ckpt *ck;
	uint32_t r;
	struct crc_region_desc d = {.kind = CRC_REGION_DEVICE_ALLOC, .size = len};
	test_fill(want, len, 9);
	CHECK_OK(crc_ckpt_begin(st, session, &ck));
	CHECK_OK(crc_ckpt_region_add(ck, &d, &r));
	CHECK_OK(crc_ckpt_put_chunk(ck, r, want, len, &h));
	packs_on_disk(dir, &npacks);
	CHECK_EQ_INT(npacks, 5); /* blob + 2 committed + orphan + in progress (created at the first chunk) */
	CHECK_OK(crc_store_gc(st, &rep));
	CHECK_EQ_INT(rep.orphan_packs_removed, 1);
	CHECK(access(orphan, F_OK) != 0);
	uint64_t id3;
	CHECK_OK(crc_ckpt_commit(ck, &id3));
	CHECK_OK(crc_store_chunk_read(st, &h, buf, len, &got));
	CHECK(!memcmp(buf, want, len));

	/* Without any checkpoint, every pack but the pinned blob's goes. */
	CHECK_OK(crc_store_manifest_delete(st, id2));
	CHECK_OK(crc_store_manifest_delete(st, id3));
	CHECK_OK(crc_store_gc(st, &rep));
	CHECK_EQ_INT(rep.chunks_removed, 3);
	CHECK_EQ_INT(rep.packs_removed, 3);
	packs_on_disk(dir, &npacks);
	CHECK_EQ_INT(npacks, 1);
	CHECK_OK(crc_store_chunk_read(st, &blob, buf, len, &got));
	CHECK(got == 12 && !memcmp(buf, "module-image", 12));
	struct crc_verify_report vr;
	CHECK_OK(crc_store_verify(st, NULL, NULL, &vr));
	CHECK_EQ_INT(vr.chunks, 1);
	CHECK_EQ_INT(vr.orphan_packs, 0);
	free(orphan);
	free(buf);
	free(want);
	crc_store_close(st);
	test_rmrf(dir);
	free(dir);
}

/* crc_store_chunks_read: many chunks by several threads, each checked; a flipped byte is found. */
static void test_batch_read(void)
{
	char *dir;
	struct crc_store *st = fresh_store(&dir);
	uint64_t session;
	enum { N = 24 };
	const size_t len = 96 << 10;
	uint64_t seeds[N];
	for (int i = 0; i < N; i++)
		seeds[i] = 100 + (uint64_t)i;
	CHECK_OK(crc_store_session_create(st, "b", &session));
	uint64_t id = commit_chunks(st, session, seeds, N, len);
	struct crc_manifest *mf;
	CHECK_OK(crc_store_manifest_get(st, id, &mf));
	CHECK_EQ_INT(mf->regions[0].nchunks, N);
	struct crc_hash hashes[N];
	void *bufs[N];
	size_t lens[N];
	uint8_t *want = malloc(len);
	CHECK(want);
	for (int i = 0; i < N; i++) {
		hashes[i] = mf->regions[0].chunks[i].hash;
		bufs[i] = malloc(len);
		CHECK(bufs[i]);
		lens[i] = len;
	}
	CHECK_OK(crc_store_chunks_read(st, hashes, N, bufs, lens, 4));
	for (int i = 0; i < N; i++) {
		test_fill(want, len, seeds[i]);
		CHECK_EQ_INT(lens[i], len);
		CHECK(!memcmp(bufs[i], want, len));
	}
	lens[3] = len - 1; /* a buffer too small */
	CHECK_EQ_INT(crc_store_chunks_read(st, hashes, N, bufs, lens, 4), CRC_EINVAL);
	for (int i = 0; i < N; i++)
		lens[i] = len;
	/* One flipped byte in the pack: the batch fails with CRC_ECORRUPT. */
	char *packs;
	CHECK(asprintf(&packs, "%s/packs", dir) > 0);
	DIR *d = opendir(packs);
	struct dirent *e;
	char path[PATH_MAX] = "";
	while (d && (e = readdir(d)))
		if (strstr(e->d_name, ".pack"))
			snprintf(path, sizeof(path), "%s/%s", packs, e->d_name);
	if (d)
		closedir(d);
	CHECK(path[0]);
	flip_byte(path, 4096);
	CHECK_EQ_INT(crc_store_chunks_read(st, hashes, N, bufs, lens, 4), CRC_ECORRUPT);
	for (int i = 0; i < N; i++)
		free(bufs[i]);
	free(want);
	free(packs);
	crc_manifest_free(mf);
	crc_store_close(st);
	free(dir);
}

/* gc while the only pack on disk is a live writer's: skipping it is no error, whatever the
 * directory order (a skipped pack once leaked MDB_NOTFOUND out of gc when it came last). */
static void test_gc_live_writer_only(void)
{
	char *dir;
	struct crc_store *st = fresh_store(&dir);
	uint64_t session, id;
	const size_t len = 64 << 10;
	uint8_t *want = malloc(len);
	struct crc_ckpt *ck;
	struct crc_hash h;
	struct crc_gc_report rep;
	uint32_t r;
	int npacks;
	struct crc_region_desc d = {.kind = CRC_REGION_DEVICE_ALLOC, .size = len};
	CHECK(want);
	test_fill(want, len, 5);
	CHECK_OK(crc_store_session_create(st, "live", &session));
	CHECK_OK(crc_ckpt_begin(st, session, &ck));
	CHECK_OK(crc_ckpt_region_add(ck, &d, &r));
	CHECK_OK(crc_ckpt_put_chunk(ck, r, want, len, &h));
	packs_on_disk(dir, &npacks);
	CHECK_EQ_INT(npacks, 1);
	CHECK_OK(crc_store_gc(st, &rep));
	CHECK_EQ_INT(rep.orphan_packs_removed, 0);
	CHECK_OK(crc_ckpt_commit(ck, &id));
	free(want);
	crc_store_close(st);
	free(dir);
}

/* --- lanes: several threads putting into one checkpoint --- */

/* The checkpoint the lane tests write: a device allocation of 37 chunks of 64 KiB with repeats and a
 * short last chunk, a global of three small chunks, and an empty host region. */
#define LANE_CHUNK	  (64u << 10)
#define LANE_ALLOC_CHUNKS 37
static const struct lane_region {
	struct crc_region_desc desc;
	uint32_t nchunks;
} lane_regions[] = {
    {{.kind = CRC_REGION_DEVICE_ALLOC,
      .addr = 0x600000000000ull,
      .size = (LANE_ALLOC_CHUNKS - 1) * (uint64_t)LANE_CHUNK + 1000},
     LANE_ALLOC_CHUNKS},
    {{.kind = CRC_REGION_DEVICE_GLOBAL, .size = 3 * 100, .name = "g"}, 3},
    {{.kind = CRC_REGION_HOST, .size = 0}, 0},
};
#define LANE_REGIONS (sizeof(lane_regions) / sizeof(lane_regions[0]))

/* Chunk i of region r: its seed (seeds 1 and 2 repeat, and are in the store before) and length. */
static uint64_t lane_seed(uint32_t r, uint32_t i)
{
	return r == 0 ? (i % 5 == 0 ? 1 : i % 7 == 0 ? 2 : 1000 + i) : 2000 + i;
}
static size_t lane_len(uint32_t r, uint32_t i)
{
	if (r == 0)
		return i + 1 == LANE_ALLOC_CHUNKS ? 1000 : LANE_CHUNK;
	return 100;
}

struct lane_writer {
	struct crc_ckpt *ck;
	unsigned lane, nlanes;
	const uint32_t *region_index;
	pthread_barrier_t *start;
};

/* Puts the chunks whose position is lane modulo nlanes, last first, so that the lanes finish in an
 * order unlike the regions'. */
static void *lane_writer_main(void *arg)
{
	struct lane_writer *w = arg;
	uint8_t *buf = malloc(LANE_CHUNK);
	CHECK(buf);
	pthread_barrier_wait(w->start);
	for (uint32_t r = 0; r < LANE_REGIONS; r++) {
		for (uint32_t i = lane_regions[r].nchunks; i-- > 0;) {
			if (i % w->nlanes != w->lane)
				continue;
			size_t len = lane_len(r, i);
			test_fill(buf, len, lane_seed(r, i));
			CHECK_OK(
			    crc_ckpt_put_chunk_at(w->ck, w->lane, w->region_index[r], i, buf, len, NULL));
		}
	}
	free(buf);
	return NULL;
}

/* Writes the lane checkpoint with nlanes threads, or (nlanes 0) in order through crc_ckpt_put_chunk. */
static uint64_t write_lane_ckpt(struct crc_store *st, uint64_t session, unsigned nlanes, uint64_t *new_bytes)
{
	struct crc_ckpt *ck;
	uint32_t region_index[LANE_REGIONS];
	uint64_t id;
	CHECK_OK(crc_ckpt_begin(st, session, &ck));
	for (uint32_t r = 0; r < LANE_REGIONS; r++)
		CHECK_OK(crc_ckpt_region_add(ck, &lane_regions[r].desc, &region_index[r]));
	if (!nlanes) {
		uint8_t *buf = malloc(LANE_CHUNK);
		CHECK(buf);
		for (uint32_t r = 0; r < LANE_REGIONS; r++)
			for (uint32_t i = 0; i < lane_regions[r].nchunks; i++) {
				test_fill(buf, lane_len(r, i), lane_seed(r, i));
				CHECK_OK(crc_ckpt_put_chunk(ck, region_index[r], buf, lane_len(r, i), NULL));
			}
		free(buf);
	} else {
		pthread_t tids[CRC_CKPT_LANES_MAX];
		struct lane_writer w[CRC_CKPT_LANES_MAX];
		pthread_barrier_t start;
		CHECK_OK(crc_ckpt_set_lanes(ck, nlanes));
		CHECK(pthread_barrier_init(&start, NULL, nlanes) == 0);
		for (unsigned l = 0; l < nlanes; l++) {
			w[l] = (struct lane_writer){ck, l, nlanes, region_index, &start};
			CHECK(pthread_create(&tids[l], NULL, lane_writer_main, &w[l]) == 0);
		}
		for (unsigned l = 0; l < nlanes; l++)
			pthread_join(tids[l], NULL);
		pthread_barrier_destroy(&start);
	}
	*new_bytes = crc_ckpt_new_bytes(ck);
	CHECK_OK(crc_ckpt_meta_set(ck, "criu.images_dir", "/lanes"));
	CHECK_OK(crc_ckpt_commit(ck, &id));
	return id;
}

/* Every region of the lane checkpoint read back, byte for byte. */
static void check_lane_ckpt(struct crc_store *st, const struct crc_manifest *m)
{
	uint8_t *buf = malloc(LANE_CHUNK), *want = malloc(LANE_CHUNK);
	CHECK(buf && want);
	CHECK_EQ_INT(m->nregions, LANE_REGIONS);
	for (uint32_t r = 0; r < LANE_REGIONS; r++) {
		const struct crc_region *reg = &m->regions[r];
		CHECK_EQ_INT(reg->kind, lane_regions[r].desc.kind);
		CHECK_EQ_INT(reg->size, lane_regions[r].desc.size);
		CHECK_EQ_INT(reg->nchunks, lane_regions[r].nchunks);
		for (uint32_t i = 0; i < reg->nchunks; i++) {
			size_t got, len = lane_len(r, i);
			CHECK_OK(crc_store_chunk_read(st, &reg->chunks[i].hash, buf, LANE_CHUNK, &got));
			test_fill(want, len, lane_seed(r, i));
			CHECK(got == len && reg->chunks[i].length == len && !memcmp(buf, want, len));
		}
	}
	free(buf);
	free(want);
}

/* A store holding seeds 1 and 2 already (so that lanes meet chunks the store has). */
static struct crc_store *lane_store(char **dir, uint64_t *session)
{
	struct crc_store *st = fresh_store(dir);
	CHECK_OK(crc_store_session_create(st, "lanes", session));
	commit_chunks(st, *session, (uint64_t[]){1, 2}, 2, LANE_CHUNK);
	return st;
}

static void check_store_clean(struct crc_store *st)
{
	struct crc_verify_report vr;
	struct crc_gc_report gr;
	CHECK_OK(crc_store_verify(st, NULL, NULL, &vr));
	CHECK_EQ_INT(vr.problems, 0);
	CHECK_EQ_INT(vr.orphan_packs, 0);
	CHECK_OK(crc_store_gc(st, &gr));
	CHECK_EQ_INT(gr.chunks_removed, 0);
	CHECK_EQ_INT(gr.packs_removed + gr.orphan_packs_removed, 0);
}

/* 1, 2, 3 and 5 lanes write the same manifest as crc_ckpt_put_chunk does, and the same new bytes. */
static void test_lanes_manifest(void)
{
	struct crc_manifest *ref = NULL;
	uint64_t ref_new = 0;
	struct crc_store_stat ref_stat = {0};
	for (unsigned nlanes = 0; nlanes <= 5; nlanes++) {
		if (nlanes == 4)
			continue;
		char *dir;
		uint64_t session, new_bytes;
		struct crc_store *st = lane_store(&dir, &session);
		uint64_t id = write_lane_ckpt(st, session, nlanes, &new_bytes);
		struct crc_manifest *m;
		struct crc_store_stat ss;
		CHECK_OK(crc_store_manifest_get(st, id, &m));
		check_lane_ckpt(st, m);
		CHECK_OK(crc_store_stat(st, &ss));
		check_store_clean(st);
		if (!ref) {
			ref = m;
			ref_new = new_bytes;
			ref_stat = ss;
		} else {
			/* The same regions naming the same chunks in the same order. */
			CHECK_EQ_INT(m->nregions, ref->nregions);
			for (uint32_t r = 0; r < m->nregions; r++) {
				CHECK_EQ_INT(m->regions[r].addr, ref->regions[r].addr);
				CHECK_EQ_INT(m->regions[r].nchunks, ref->regions[r].nchunks);
				CHECK(!memcmp(m->regions[r].chunks, ref->regions[r].chunks,
					      m->regions[r].nchunks * sizeof(*m->regions[r].chunks)));
			}
			CHECK_EQ_STR(crc_manifest_meta_get(m, "criu.images_dir"), "/lanes");
			CHECK_EQ_INT(new_bytes, ref_new);
			CHECK_EQ_INT(ss.chunks, ref_stat.chunks);
			CHECK_EQ_INT(ss.chunk_bytes, ref_stat.chunk_bytes);
			crc_manifest_free(m);
		}
		crc_store_close(st);
		test_rmrf(dir);
		free(dir);
	}
	/* Seeds 1 and 2 were in the store: not new. */
	uint64_t want_new = 0;
	for (uint32_t r = 0; r < LANE_REGIONS; r++)
		for (uint32_t i = 0; i < lane_regions[r].nchunks; i++)
			if (lane_seed(r, i) >= 1000)
				want_new += lane_len(r, i);
	CHECK_EQ_INT(ref_new, want_new);
	crc_manifest_free(ref);
}

/* Four lanes put the same 16 chunks at once (each at positions of its own): each is written and
 * indexed once, and the one the store held before is not written at all. */
struct same_writer {
	struct crc_ckpt *ck;
	unsigned lane;
	uint32_t region;
	pthread_barrier_t *start;
};
#define SAME_CHUNKS 16
#define SAME_LANES  4

static void *same_writer_main(void *arg)
{
	struct same_writer *w = arg;
	uint8_t *buf = malloc(LANE_CHUNK);
	CHECK(buf);
	pthread_barrier_wait(w->start);
	for (uint32_t k = 0; k < SAME_CHUNKS; k++) {
		test_fill(buf, LANE_CHUNK, k + 1);
		CHECK_OK(crc_ckpt_put_chunk_at(w->ck, w->lane, w->region, w->lane * SAME_CHUNKS + k, buf,
					       LANE_CHUNK, NULL));
	}
	free(buf);
	return NULL;
}

static void test_lanes_dedup(void)
{
	char *dir;
	uint64_t session, id;
	struct crc_store *st = fresh_store(&dir);
	struct crc_ckpt *ck;
	uint32_t region;
	int npacks;
	CHECK_OK(crc_store_session_create(st, "same", &session));
	commit_chunks(st, session, (uint64_t[]){1}, 1, LANE_CHUNK);
	uint64_t before = packs_on_disk(dir, &npacks);
	struct crc_region_desc d = {.kind = CRC_REGION_DEVICE_ALLOC,
				    .size = (uint64_t)SAME_LANES * SAME_CHUNKS * LANE_CHUNK};
	CHECK_OK(crc_ckpt_begin(st, session, &ck));
	CHECK_OK(crc_ckpt_region_add(ck, &d, &region));
	CHECK_OK(crc_ckpt_set_lanes(ck, SAME_LANES));
	pthread_t tids[SAME_LANES];
	struct same_writer w[SAME_LANES];
	pthread_barrier_t start;
	CHECK(pthread_barrier_init(&start, NULL, SAME_LANES) == 0);
	for (unsigned l = 0; l < SAME_LANES; l++) {
		w[l] = (struct same_writer){ck, l, region, &start};
		CHECK(pthread_create(&tids[l], NULL, same_writer_main, &w[l]) == 0);
	}
	for (unsigned l = 0; l < SAME_LANES; l++)
		pthread_join(tids[l], NULL);
	pthread_barrier_destroy(&start);
	CHECK_EQ_INT(crc_ckpt_new_bytes(ck), (SAME_CHUNKS - 1) * (uint64_t)LANE_CHUNK);
	CHECK_OK(crc_ckpt_commit(ck, &id));

	/* On disk: each new chunk once, in however many lanes' packs. */
	int npacks_after;
	uint64_t after = packs_on_disk(dir, &npacks_after);
	CHECK(npacks_after > npacks);
	CHECK_EQ_INT(after - before, (uint64_t)(npacks_after - npacks) * PACK_HEADER_SIZE +
					 (SAME_CHUNKS - 1) * (uint64_t)(CHUNK_HEADER_SIZE + LANE_CHUNK));
	struct crc_store_stat ss;
	CHECK_OK(crc_store_stat(st, &ss));
	CHECK_EQ_INT(ss.chunks, SAME_CHUNKS);
	struct crc_manifest *m;
	uint8_t *buf = malloc(LANE_CHUNK), *want = malloc(LANE_CHUNK);
	CHECK_OK(crc_store_manifest_get(st, id, &m));
	CHECK_EQ_INT(m->regions[0].nchunks, SAME_LANES * SAME_CHUNKS);
	for (uint32_t i = 0; i < m->regions[0].nchunks; i++) {
		size_t got;
		CHECK_OK(crc_store_chunk_read(st, &m->regions[0].chunks[i].hash, buf, LANE_CHUNK, &got));
		test_fill(want, LANE_CHUNK, i % SAME_CHUNKS + 1);
		CHECK(got == LANE_CHUNK && !memcmp(buf, want, LANE_CHUNK));
	}
	crc_manifest_free(m);
	check_store_clean(st);
	free(buf);
	free(want);
	crc_store_close(st);
	test_rmrf(dir);
	free(dir);
}

/* An aborted multi-lane checkpoint, and one whose commit fails, leave no pack file of any lane; the
 * API refuses misuse. */
static void test_lanes_abort(void)
{
	char *dir;
	uint64_t session;
	struct crc_store *st = lane_store(&dir, &session);
	struct crc_ckpt *ck;
	uint32_t region;
	int npacks, n;
	packs_on_disk(dir, &npacks);
	uint8_t *buf = malloc(LANE_CHUNK);
	CHECK(buf);
	struct crc_region_desc d = {.kind = CRC_REGION_DEVICE_ALLOC, .size = 4ull * LANE_CHUNK};
	for (int failed_commit = 0; failed_commit <= 1; failed_commit++) {
		CHECK_OK(crc_ckpt_begin(st, session, &ck));
		CHECK_OK(crc_ckpt_region_add(ck, &d, &region));
		CHECK_EQ_INT(crc_ckpt_set_lanes(ck, 0), CRC_EINVAL);
		CHECK_EQ_INT(crc_ckpt_set_lanes(ck, CRC_CKPT_LANES_MAX + 1), CRC_EINVAL);
		CHECK_OK(crc_ckpt_set_lanes(ck, 3));
		CHECK_EQ_INT(crc_ckpt_put_chunk_at(ck, 3, region, 0, buf, LANE_CHUNK, NULL), CRC_EINVAL);
		CHECK_EQ_INT(crc_ckpt_put_chunk_at(ck, 0, region, (uint32_t)d.size, buf, LANE_CHUNK, NULL),
			     CRC_EINVAL);
		/* A chunk through each lane; index 1 is left out. */
		const uint32_t indices[] = {0, 2, 3};
		for (unsigned lane = 0; lane < 3; lane++) {
			test_fill(buf, LANE_CHUNK, 50 + lane);
			CHECK_OK(
			    crc_ckpt_put_chunk_at(ck, lane, region, indices[lane], buf, LANE_CHUNK, NULL));
		}
		CHECK_EQ_INT(crc_ckpt_set_lanes(ck, 2), CRC_EINVAL);
		packs_on_disk(dir, &n);
		CHECK_EQ_INT(n, npacks + 3);
		if (failed_commit)
			CHECK_EQ_INT(crc_ckpt_commit(ck, NULL), CRC_EINVAL);
		else
			crc_ckpt_abort(ck);
		packs_on_disk(dir, &n);
		CHECK_EQ_INT(n, npacks);
		check_store_clean(st);
	}
	/* A chunk put twice at one index fails the checkpoint. */
	CHECK_OK(crc_ckpt_begin(st, session, &ck));
	CHECK_OK(crc_ckpt_region_add(ck, &d, &region));
	CHECK_OK(crc_ckpt_put_chunk_at(ck, 0, region, 2, buf, LANE_CHUNK, NULL));
	CHECK_EQ_INT(crc_ckpt_put_chunk_at(ck, 0, region, 2, buf, LANE_CHUNK, NULL), CRC_EINVAL);
	CHECK_EQ_INT(crc_ckpt_put_chunk(ck, region, buf, LANE_CHUNK, NULL), CRC_EINVAL);
	crc_ckpt_abort(ck);
	packs_on_disk(dir, &n);
	CHECK_EQ_INT(n, npacks);
	check_store_clean(st);
	free(buf);
	crc_store_close(st);
	test_rmrf(dir);
	free(dir);
}

/* --- compression --- */

/* The index entry of a chunk (through the store's own lookup). */
static struct chunk_loc chunk_loc_of(struct crc_store *st, const struct crc_hash *h)
{
	MDB_txn *txn;
	struct chunk_loc loc;
	CHECK_EQ_INT(mdb_txn_begin(st->env, NULL, MDB_RDONLY, &txn), 0);
	CHECK_OK(crc__chunk_locate(st, txn, h, &loc));
	mdb_txn_abort(txn);
	return loc;
}

/* The schema record as stored. */
static uint32_t schema_on_disk(struct crc_store *st)
{
	MDB_txn *txn;
	MDB_val k = {14, "schema_version"}, v;
	CHECK_EQ_INT(mdb_txn_begin(st->env, NULL, MDB_RDONLY, &txn), 0);
	CHECK_EQ_INT(mdb_get(txn, st->dbi_meta, &k, &v), 0);
	CHECK_EQ_INT(v.mv_size, 4);
	uint32_t found = get_le32(v.mv_data);
	mdb_txn_abort(txn);
	return found;
}

#define CZ_LEN	  (1u << 20)
#define CZ_CHUNKS 5
/* Chunk i of the compression tests: zeros, random, half zeros and half random, a small text-like
 * one (below the probe's minimum), and float32 weights-like values (incompressible to LZ4). */
static size_t cz_fill(int i, uint8_t *p)
{
	switch (i) {
	case 0:
		memset(p, 0, CZ_LEN);
		return CZ_LEN;
	case 1:
		test_fill(p, CZ_LEN, 77);
		return CZ_LEN;
	case 2:
		memset(p, 0, CZ_LEN / 2);
		test_fill(p + CZ_LEN / 2, CZ_LEN / 2, 78);
		return CZ_LEN;
	case 3:
		for (size_t j = 0; j < 3000; j++)
			p[j] = (uint8_t)("checkpoint "[j % 11] + (j / 997));
		return 3000;
	default: {
		float *f = (float *)p;
		uint64_t x = 99;
		for (size_t j = 0; j < CZ_LEN / 4; j++) {
			x = x * 6364136223846793005ull + 1442695040888963407ull;
			f[j] = (float)((int64_t)(x >> 11) - (1ll << 52)) * 1e-17f;
		}
		return CZ_LEN;
	}
	}
}

/* Writes the five chunks as one checkpoint (region 0) and checks they read back exactly, one by one
 * and in a batch; returns the id. */
static uint64_t cz_write_check_meta(struct crc_store *st, uint64_t session, struct crc_hash *hashes,
				    uint64_t *new_bytes, const char *images_dir)
{
	uint8_t *buf = malloc(CZ_LEN), *back[CZ_CHUNKS];
	size_t lens[CZ_CHUNKS], total = 0;
	struct crc_ckpt *ck;
	uint32_t region;
	for (int i = 0; i < CZ_CHUNKS; i++)
		total += cz_fill(i, buf);
	CHECK_OK(crc_ckpt_begin(st, session, &ck));
	CHECK_OK(crc_ckpt_region_add(
	    ck, &(struct crc_region_desc){.kind = CRC_REGION_DEVICE_ALLOC, .size = total}, &region));
	for (int i = 0; i < CZ_CHUNKS; i++) {
		size_t len = cz_fill(i, buf);
		struct crc_hash want;
		crc_hash_compute(buf, len, &want);
		CHECK_OK(crc_ckpt_put_chunk(ck, region, buf, len, &hashes[i]));
		/* The address is the raw bytes' hash, whatever the encoding. */
		CHECK(!memcmp(want.bytes, hashes[i].bytes, 16));
	}
	*new_bytes = crc_ckpt_new_bytes(ck);
	if (images_dir)
		CHECK_OK(crc_ckpt_meta_set(ck, "criu.images_dir", images_dir));
	uint64_t id;
	CHECK_OK(crc_ckpt_commit(ck, &id));
	for (int i = 0; i < CZ_CHUNKS; i++) {
		size_t len = cz_fill(i, buf), got;
		back[i] = malloc(CZ_LEN);
		lens[i] = CZ_LEN;
		CHECK_OK(crc_store_chunk_read(st, &hashes[i], back[i], CZ_LEN, &got));
		CHECK_EQ_INT(got, len);
		CHECK(!memcmp(back[i], buf, len));
		memset(back[i], 0xee, CZ_LEN);
	}
	CHECK_OK(crc_store_chunks_read(st, hashes, CZ_CHUNKS, (void *const *)back, lens, 3));
	for (int i = 0; i < CZ_CHUNKS; i++) {
		size_t len = cz_fill(i, buf);
		CHECK_EQ_INT(lens[i], len);
		CHECK(!memcmp(back[i], buf, len));
		free(back[i]);
	}
	free(buf);
	return id;
}

static uint64_t cz_write_check(struct crc_store *st, uint64_t session, struct crc_hash *hashes,
			       uint64_t *new_bytes)
{
	return cz_write_check_meta(st, session, hashes, new_bytes, NULL);
}

/* Compressible chunks are stored compressed (LZ4 by default, zstd when asked), incompressible ones as
 * they are; all read back exactly; dedup and the counts go by the raw bytes. */
static void test_compress(void)
{
	char *dir;
	struct crc_hash h[CZ_CHUNKS];
	uint64_t session, new_bytes;
	unsetenv("CRCUDA_STORE_COMPRESS");
	struct crc_store *st = fresh_store(&dir);
	CHECK_EQ_INT(schema_on_disk(st), CRC_STORE_SCHEMA_VERSION);
	CHECK_OK(crc_store_session_create(st, "z", &session));
	uint64_t id = cz_write_check(st, session, h, &new_bytes);
	const uint32_t want_enc[CZ_CHUNKS] = {CHUNK_ENC_LZ4, CHUNK_ENC_RAW, CHUNK_ENC_LZ4, CHUNK_ENC_LZ4,
					      CHUNK_ENC_RAW};
	uint64_t stored = 0, logical = 0;
	for (int i = 0; i < CZ_CHUNKS; i++) {
		struct chunk_loc loc = chunk_loc_of(st, &h[i]);
		CHECK_EQ_INT(loc.encoding, want_enc[i]);
		if (loc.encoding == CHUNK_ENC_RAW)
			CHECK_EQ_INT(loc.stored, loc.length);
		else
			CHECK(loc.stored <= loc.length - loc.length / 8);
		stored += loc.stored;
		logical += loc.length;
	}
	CHECK(chunk_loc_of(st, &h[0]).stored < CZ_LEN / 100);
	CHECK(chunk_loc_of(st, &h[2]).stored < CZ_LEN * 6 / 10);
	CHECK_EQ_INT(new_bytes, logical);
	struct crc_store_stat ss;
	CHECK_OK(crc_store_stat(st, &ss));
	CHECK_EQ_INT(ss.chunk_bytes, logical);
	CHECK_EQ_INT(ss.chunk_stored_bytes, stored);
	CHECK_EQ_INT(ss.chunks_compressed, 3);
	struct crc_manifest *m;
	uint64_t mb, ms, mc;
	CHECK_OK(crc_store_manifest_get(st, id, &m));
	CHECK_OK(crc_store_manifest_stored(st, m, &mb, &ms, &mc));
	CHECK_EQ_INT(mb, logical);
	CHECK_EQ_INT(ms, stored);
	CHECK_EQ_INT(mc, 3);
	crc_manifest_free(m);
	/* The pack files hold the stored bytes, not the raw ones. */
	int npacks;
	CHECK_EQ_INT(packs_on_disk(dir, &npacks), PACK_HEADER_SIZE + CZ_CHUNKS * CHUNK_HEADER_SIZE + stored);
	struct crc_verify_report rep;
	CHECK_OK(crc_store_verify(st, NULL, NULL, &rep));
	CHECK_EQ_INT(rep.chunks, CZ_CHUNKS);
	CHECK_EQ_INT(rep.bytes, logical);
	CHECK_EQ_INT(rep.stored_bytes, stored);

	/* The same bytes again, under another policy: every chunk is found by its raw hash, nothing is
	 * written. */
	setenv("CRCUDA_STORE_COMPRESS", "off", 1);
	crc_store_close(st);
	CHECK_OK(crc_store_open(dir, 0, &st));
	struct crc_hash h2[CZ_CHUNKS];
	cz_write_check(st, session, h2, &new_bytes);
	CHECK_EQ_INT(new_bytes, 0);
	CHECK(!memcmp(h, h2, sizeof(h)));
	/* off: a new compressible chunk is stored as is. */
	uint8_t *buf = calloc(1, CZ_LEN);
	struct crc_hash hz;
	buf[5] = 1;
	CHECK_OK(crc_store_blob_put(st, session, buf, CZ_LEN, &hz));
	CHECK_EQ_INT(chunk_loc_of(st, &hz).encoding, CHUNK_ENC_RAW);
	/* zstd: compressed with zstd, read back exactly. */
	setenv("CRCUDA_STORE_COMPRESS", "zstd", 1);
	crc_store_close(st);
	CHECK_OK(crc_store_open(dir, 0, &st));
	buf[6] = 2;
	CHECK_OK(crc_store_blob_put(st, session, buf, CZ_LEN, &hz));
	struct chunk_loc loc = chunk_loc_of(st, &hz);
	CHECK_EQ_INT(loc.encoding, CHUNK_ENC_ZSTD);
	CHECK(loc.stored < CZ_LEN / 100);
	uint8_t *back = malloc(CZ_LEN);
	size_t got;
	CHECK_OK(crc_store_chunk_read(st, &hz, back, CZ_LEN, &got));
	CHECK(got == CZ_LEN && !memcmp(back, buf, CZ_LEN));
	/* A page-cache store under auto: only chunks that shrink to a quarter are compressed. */
	unsetenv("CRCUDA_STORE_COMPRESS");
	crc_store_close(st);
	CHECK_OK(crc_store_open(dir, CRC_STORE_NOSYNC, &st));
	struct crc_hash hh;
	cz_fill(2, buf);
	buf[0] = 3;
	CHECK_OK(crc_store_blob_put(st, session, buf, CZ_LEN, &hh));
	CHECK_EQ_INT(chunk_loc_of(st, &hh).encoding, CHUNK_ENC_RAW);
	memset(buf, 0, CZ_LEN);
	buf[0] = 4;
	CHECK_OK(crc_store_blob_put(st, session, buf, CZ_LEN, &hh));
	CHECK_EQ_INT(chunk_loc_of(st, &hh).encoding, CHUNK_ENC_LZ4);
	CHECK_OK(crc_store_verify(st, NULL, NULL, &rep));
	CHECK_EQ_INT(rep.problems, 0);
	free(back);
	free(buf);
	crc_store_close(st);
	test_rmrf(dir);
	free(dir);
}

/* Damaged compressed bytes: a clear CRC_ECORRUPT on read, batch read and verify, never a crash; a
 * damaged index entry too. */
static void test_compress_corrupt(void)
{
	char *dir;
	struct crc_hash h[CZ_CHUNKS];
	uint64_t session, new_bytes;
	unsetenv("CRCUDA_STORE_COMPRESS");
	struct crc_store *st = fresh_store(&dir);
	CHECK_OK(crc_store_session_create(st, "c", &session));
	cz_write_check(st, session, h, &new_bytes);
	struct chunk_loc loc = chunk_loc_of(st, &h[2]);
	CHECK_EQ_INT(loc.encoding, CHUNK_ENC_LZ4);
	char path[PATH_MAX];
	crc__pack_path(st, loc.pack, path, sizeof(path));
	uint8_t *buf = malloc(CZ_LEN), *stored = malloc(loc.stored);
	int fd = open(path, O_RDWR);
	CHECK(fd >= 0);
	CHECK_EQ_INT(pread(fd, stored, loc.stored, (off_t)loc.offset), (ssize_t)loc.stored);
	size_t got, len = CZ_LEN;
	void *bufs[1] = {buf};
	struct problems p = {0};
	struct crc_verify_report rep;
	/* Each damage: the first byte (a token: the stream's structure), one in the middle (literals),
	 * the last (the final literals), and every byte of the first 64 in turn set to 0xff. */
	long offs[3 + 64] = {0, (long)loc.stored / 2, (long)loc.stored - 1};
	for (int i = 0; i < 64; i++)
		offs[3 + i] = i;
	for (size_t i = 0; i < sizeof(offs) / sizeof(offs[0]); i++) {
		uint8_t bad = i < 3 ? stored[offs[i]] ^ 0x5a : 0xff;
		if (bad == stored[offs[i]])
			continue;
		CHECK_EQ_INT(pwrite(fd, &bad, 1, (off_t)loc.offset + offs[i]), 1);
		CHECK_EQ_INT(crc_store_chunk_read(st, &h[2], buf, CZ_LEN, &got), CRC_ECORRUPT);
		len = CZ_LEN;
		CHECK_EQ_INT(crc_store_chunks_read(st, &h[2], 1, bufs, &len, 1), CRC_ECORRUPT);
		CHECK_EQ_INT(pwrite(fd, stored + offs[i], 1, (off_t)loc.offset + offs[i]), 1);
	}
	/* verify names the chunk and says it is the compressed bytes. */
	uint8_t bad = stored[loc.stored / 2] ^ 0x5a;
	CHECK_EQ_INT(pwrite(fd, &bad, 1, (off_t)loc.offset + loc.stored / 2), 1);
	CHECK_EQ_INT(crc_store_verify(st, collect_problem, &p, &rep), CRC_ECORRUPT);
	CHECK_EQ_INT(p.n, 1);
	CHECK_EQ_INT(p.err[0], CRC_ECORRUPT);
	char hex[CRC_HASH_HEX_LEN + 1];
	crc_hash_to_hex(&h[2], hex);
	CHECK_EQ_STR(p.id[0], hex);
	CHECK(strstr(p.what[0], "compressed") != NULL);
	CHECK_EQ_INT(rep.bad_manifests, 1);
	/* Put back: the store is whole again, so the check really is over those bytes. */
	CHECK_EQ_INT(pwrite(fd, stored + loc.stored / 2, 1, (off_t)loc.offset + loc.stored / 2), 1);
	CHECK_OK(crc_store_verify(st, NULL, NULL, &rep));
	close(fd);

	/* An index entry naming an unknown encoding, or a stored length not below the length. */
	MDB_txn *txn;
	MDB_val k = {16, h[0].bytes}, v;
	uint8_t ent[CHUNK_LOC_SIZE_ENC];
	struct chunk_loc l0 = chunk_loc_of(st, &h[0]);
	const struct {
		uint32_t stored, encoding;
	} bad_ents[] = {{(uint32_t)l0.stored, 7}, {CZ_LEN, CHUNK_ENC_LZ4}, {0, CHUNK_ENC_LZ4}};
	for (size_t i = 0; i < sizeof(bad_ents) / sizeof(bad_ents[0]); i++) {
		struct chunk_loc l = l0;
		l.stored = bad_ents[i].stored;
		l.encoding = bad_ents[i].encoding;
		v = (MDB_val){crc__chunk_loc_encode(&l, ent), ent};
		CHECK_EQ_INT(v.mv_size, CHUNK_LOC_SIZE_ENC);
		CHECK_EQ_INT(mdb_txn_begin(st->env, NULL, 0, &txn), 0);
		CHECK_EQ_INT(mdb_put(txn, st->dbi_chunks, &k, &v, 0), 0);
		CHECK_EQ_INT(mdb_txn_commit(txn), 0);
		CHECK_EQ_INT(crc_store_chunk_read(st, &h[0], buf, CZ_LEN, &got), CRC_ECORRUPT);
		memset(&p, 0, sizeof(p));
		CHECK_EQ_INT(crc_store_verify(st, collect_problem, &p, &rep), CRC_ECORRUPT);
	}
	/* A stored length that is wrong but plausible: the stream does not decode to the length. */
	struct chunk_loc l = l0;
	l.stored = l0.stored - 1;
	v = (MDB_val){crc__chunk_loc_encode(&l, ent), ent};
	CHECK_EQ_INT(mdb_txn_begin(st->env, NULL, 0, &txn), 0);
	CHECK_EQ_INT(mdb_put(txn, st->dbi_chunks, &k, &v, 0), 0);
	CHECK_EQ_INT(mdb_txn_commit(txn), 0);
	CHECK_EQ_INT(crc_store_chunk_read(st, &h[0], buf, CZ_LEN, &got), CRC_ECORRUPT);
	free(stored);
	free(buf);
	crc_store_close(st);
	test_rmrf(dir);
	free(dir);
}

/* A version 1 store (before compression) opens; it stays version 1 while only raw chunks are written,
 * and becomes version 2 with its first compressed chunk. */
static void test_schema_v1(void)
{
	char *dir;
	struct crc_store *st = fresh_store(&dir);
	uint64_t session;
	CHECK_OK(crc_store_session_create(st, "v1", &session));
	uint8_t *buf = malloc(CZ_LEN);
	struct crc_hash raw, z;
	test_fill(buf, CZ_LEN, 5);
	CHECK_OK(crc_store_blob_put(st, session, buf, CZ_LEN, &raw));
	crc_store_close(st);
	MDB_env *env;
	MDB_txn *txn;
	MDB_dbi dbi;
	CHECK_EQ_INT(mdb_env_create(&env), 0);
	CHECK_EQ_INT(mdb_env_set_maxdbs(env, 8), 0);
	CHECK_EQ_INT(mdb_env_open(env, dir, 0, 0644), 0);
	CHECK_EQ_INT(mdb_txn_begin(env, NULL, 0, &txn), 0);
	CHECK_EQ_INT(mdb_dbi_open(txn, "meta", 0, &dbi), 0);
	uint8_t v1[4] = {1, 0, 0, 0};
	MDB_val k = {14, "schema_version"}, v = {4, v1};
	CHECK_EQ_INT(mdb_put(txn, dbi, &k, &v, 0), 0);
	CHECK_EQ_INT(mdb_txn_commit(txn), 0);
	mdb_env_close(env);

	unsetenv("CRCUDA_STORE_COMPRESS");
	CHECK_OK(crc_store_open(dir, 0, &st));
	CHECK_EQ_INT(schema_on_disk(st), 1);
	size_t got;
	uint8_t *back = malloc(CZ_LEN);
	CHECK_OK(crc_store_chunk_read(st, &raw, back, CZ_LEN, &got));
	CHECK(!memcmp(back, buf, CZ_LEN));
	test_fill(buf, CZ_LEN, 6);
	CHECK_OK(crc_store_blob_put(st, session, buf, CZ_LEN, &raw));
	CHECK_EQ_INT(schema_on_disk(st), 1);
	memset(buf, 0, CZ_LEN);
	CHECK_OK(crc_store_blob_put(st, session, buf, CZ_LEN, &z));
	CHECK_EQ_INT(chunk_loc_of(st, &z).encoding, CHUNK_ENC_LZ4);
	CHECK_EQ_INT(schema_on_disk(st), 2);
	crc_store_close(st);
	CHECK_OK(crc_store_open(dir, 0, &st));
	CHECK_OK(crc_store_chunk_read(st, &z, back, CZ_LEN, &got));
	CHECK(got == CZ_LEN && !memcmp(back, buf, CZ_LEN));
	free(back);
	free(buf);
	crc_store_close(st);
	test_rmrf(dir);
	free(dir);
}

/* crc_ckpt_sync: the pack files of every lane and the packs directory are synced then, before the
 * commit begins (a caller that can still back out learns of a full or failing disk there); the
 * commit afterwards still works, and reads back. */
static int sync_points, sync_dir_points, sync_commit_started;
static void sync_hook(const char *point)
{
	if (!strcmp(point, "commit-start"))
		sync_commit_started = 1;
	else if (!sync_commit_started && !strcmp(point, "pack-synced"))
		__atomic_fetch_add(&sync_points, 1, __ATOMIC_RELAXED);
	else if (!sync_commit_started && !strcmp(point, "packs-dir-synced"))
		sync_dir_points++;
}

static void test_ckpt_sync(void)
{
	char *dir;
	uint64_t session, id;
	struct crc_store *st = lane_store(&dir, &session);
	struct crc_ckpt *ck;
	struct crc_hash h[3];
	uint32_t region;
	uint8_t *buf = malloc(LANE_CHUNK), *back = malloc(LANE_CHUNK);
	size_t got;
	CHECK(buf && back);
	struct crc_region_desc d = {.kind = CRC_REGION_DEVICE_ALLOC, .size = 3ull * LANE_CHUNK};
	CHECK_EQ_INT(crc_ckpt_sync(NULL), CRC_EINVAL);
	CHECK_OK(crc_ckpt_begin(st, session, &ck));
	CHECK_OK(crc_ckpt_region_add(ck, &d, &region));
	CHECK_OK(crc_ckpt_set_lanes(ck, 3));
	for (uint32_t i = 0; i < 3; i++) {
		test_fill(buf, LANE_CHUNK, 500 + i);
		CHECK_OK(crc_ckpt_put_chunk_at(ck, i, region, i, buf, LANE_CHUNK, &h[i]));
	}
	crc__store_fault_hook = sync_hook;
	CHECK_OK(crc_ckpt_sync(ck));
	CHECK_EQ_INT(sync_points, 3); /* one pack file per lane */
	CHECK_EQ_INT(sync_dir_points, 1);
	CHECK_OK(crc_ckpt_commit(ck, &id));
	crc__store_fault_hook = NULL;
	CHECK(sync_commit_started);
	for (uint32_t i = 0; i < 3; i++) {
		test_fill(buf, LANE_CHUNK, 500 + i);
		CHECK_OK(crc_store_chunk_read(st, &h[i], back, LANE_CHUNK, &got));
		CHECK(got == LANE_CHUNK && !memcmp(buf, back, LANE_CHUNK));
	}
	check_store_clean(st);
	free(buf);
	free(back);
	crc_store_close(st);
	test_rmrf(dir);
	free(dir);
}

int main(int argc, char **argv)
{
	/* test_export_compress.sh's store: "write_compressible STORE IMAGES_DIR" writes the compression
	 * tests' checkpoint (checked as it is written) naming IMAGES_DIR as its CRIU images. */
	if (argc == 4 && !strcmp(argv[1], "write_compressible")) {
		struct crc_store *st;
		struct crc_hash h[CZ_CHUNKS];
		uint64_t session, new_bytes;
		CHECK_OK(crc_store_open(argv[2], CRC_STORE_CREATE, &st));
		CHECK_OK(crc_store_session_create(st, "export", &session));
		printf("%" PRIu64 "\n", cz_write_check_meta(st, session, h, &new_bytes, argv[3]));
		crc_store_close(st);
		return 0;
	}
	static const struct {
		const char *name;
		void (*fn)(void);
	} tests[] = {
	    {"journal", test_journal},
	    {"manifest", test_manifest},
	    {"dedup", test_dedup},
	    {"verify_flip", test_verify_flip},
	    {"verify_trunc", test_verify_trunc},
	    {"digests", test_digests},
	    {"schema", test_schema},
	    {"gc", test_gc},
	    {"blob_pin", test_blob_pin},
	    {"gc_live_writer_only", test_gc_live_writer_only},
	    {"batch_read", test_batch_read},
	    {"lanes_manifest", test_lanes_manifest},
	    {"lanes_dedup", test_lanes_dedup},
	    {"lanes_abort", test_lanes_abort},
	    {"compress", test_compress},
	    {"compress_corrupt", test_compress_corrupt},
	    {"schema_v1", test_schema_v1},
	    {"ckpt_sync", test_ckpt_sync},
	};
	for (size_t i = 0; i < sizeof(tests) / sizeof(tests[0]); i++) {
		if (argc > 1 && strcmp(argv[1], tests[i].name))
			continue;
		fprintf(stderr, "== %s\n", tests[i].name);
		tests[i].fn();
	}
	return 0;
}
