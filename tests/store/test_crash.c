/* Crash safety: a writer killed (SIGKILL) at any point of writing a checkpoint, a blob, a journal
 * record or a gc leaves the previous checkpoint intact and readable byte for byte, and verify + gc
 * bring the store back to a consistent state with no leftovers.
 *
 * The writer is a forked child that counts the store's fault points (pack created, every 256 KiB
 * piece written, chunk appended, packs synced, chunk index entries, manifest written, before and
 * after the LMDB commit, gc steps) and kills itself at point K; the parent runs K = 1, 2, ... until
 * the child finishes untouched. With the argument "lanes" the child writes its checkpoint through
 * two lanes (crc_ckpt_put_chunk_at, from one thread so that the points come in a fixed order; the
 * commit seals the lanes in parallel). */
#include <signal.h>
#include <stdatomic.h>
#include <sys/wait.h>
#include <unistd.h>

#include "crc_store.h"
#include "crcuda/errno.h"
#include "crcuda/log.h"
#include "store_internal.h"
#include "store_test.h"

#define CHUNK (1u << 20)
#define NPREV 4 /* chunks of the previous checkpoint */
#define MAX_K 400
#define BIG   (5u << 20) /* above half the writer's buffer: written straight from the caller */

static long kill_at;
static atomic_long points_seen; /* the commit's lane seals reach points from two threads */
static unsigned lanes;		/* 0: crc_ckpt_put_chunk; else that many lanes */
static uint64_t old_id;		/* a checkpoint the writer deletes before its gc */
static int report_fd = -1;

static void kill_hook(const char *point)
{
	if (atomic_fetch_add(&points_seen, 1) + 1 != kill_at)
		return;
	/* Tell the parent where we died, then die without any cleanup. */
	if (write(report_fd, point, strlen(point)) < 0)
		_exit(3);
	raise(SIGKILL);
}

static const struct crc_region_desc prev_alloc = {
    .kind = CRC_REGION_DEVICE_ALLOC, .addr = 0x600000000000ull, .size = (uint64_t)NPREV * CHUNK};

/* The previous checkpoint: NPREV chunks of seeds 100.. and a small global. */
static uint64_t write_previous(struct crc_store *st, uint64_t session)
{
	struct crc_ckpt *ck;
	uint32_t r0, r1;
	uint64_t id;
	uint8_t *buf = malloc(CHUNK);
	struct crc_region_desc g = {.kind = CRC_REGION_DEVICE_GLOBAL, .size = 100, .name = "g"};
	CHECK_OK(crc_ckpt_begin(st, session, &ck));
	CHECK_OK(crc_ckpt_region_add(ck, &prev_alloc, &r0));
	CHECK_OK(crc_ckpt_region_add(ck, &g, &r1));
	for (int i = 0; i < NPREV; i++) {
		test_fill(buf, CHUNK, 100 + i);
		CHECK_OK(crc_ckpt_put_chunk(ck, r0, buf, CHUNK, NULL));
	}
	test_fill(buf, 100, 99);
	CHECK_OK(crc_ckpt_put_chunk(ck, r1, buf, 100, NULL));
	CHECK_OK(crc_ckpt_meta_set(ck, "criu.images_dir", "/prev"));
	CHECK_OK(crc_ckpt_commit(ck, &id));
	free(buf);
	return id;
}

/* An older checkpoint with chunks of its own, for the writer's gc to remove. */
static uint64_t write_old(struct crc_store *st, uint64_t session)
{
	struct crc_ckpt *ck;
	uint32_t r;
	uint64_t id;
	uint8_t *buf = malloc(CHUNK);
	struct crc_region_desc d = {.kind = CRC_REGION_HOST, .size = 2ull * CHUNK};
	CHECK_OK(crc_ckpt_begin(st, session, &ck));
	CHECK_OK(crc_ckpt_region_add(ck, &d, &r));
	for (int i = 0; i < 2; i++) {
		test_fill(buf, CHUNK, 300 + i);
		CHECK_OK(crc_ckpt_put_chunk(ck, r, buf, CHUNK, NULL));
	}
	CHECK_OK(crc_ckpt_commit(ck, &id));
	free(buf);
	return id;
}

/* The child's work: a journal record, a blob, a new checkpoint that shares two chunks with the
 * previous one and adds three small ones (one of them twice) and a large one (written around the
 * buffer), then deleting the old checkpoint and a gc. */
static int writer(const char *dir, uint64_t session)
{
	struct crc_store *st;
	struct crc_ckpt *ck;
	struct crc_hash blob;
	uint32_t r;
	uint8_t *buf = malloc(CHUNK);
	crc__store_fault_hook = kill_hook;
	CHECK_OK(crc_store_open(dir, 0, &st));
	CHECK_OK(crc_store_journal_append(st, session, CRC_JREC_MEM_ALLOC, "next", 4, NULL));
	/* A new blob each time, so that every run passes the same kill points. */
	test_fill(buf, 3000, 1000 + (uint64_t)kill_at);
	CHECK_OK(crc_store_blob_put(st, session, buf, 3000, &blob));
	struct crc_region_desc d = {
	    .kind = CRC_REGION_DEVICE_ALLOC, .addr = 0x600000000000ull, .size = 6ull * CHUNK};
	struct crc_region_desc big = {.kind = CRC_REGION_HOST, .size = BIG};
	uint32_t rbig;
	CHECK_OK(crc_ckpt_begin(st, session, &ck));
	CHECK_OK(crc_ckpt_region_add(ck, &d, &r));
	CHECK_OK(crc_ckpt_region_add(ck, &big, &rbig));
	if (lanes)
		CHECK_OK(crc_ckpt_set_lanes(ck, lanes));
	/* Through lanes: last chunk first, lane by position. */
	const uint64_t seeds[] = {100, 200, 101, 201, 202, 200};
	for (uint32_t k = 0; k < 6; k++) {
		uint32_t i = lanes ? 5 - k : k;
		test_fill(buf, CHUNK, seeds[i]);
		CHECK_OK(lanes ? crc_ckpt_put_chunk_at(ck, i % lanes, r, i, buf, CHUNK, NULL)
			       : crc_ckpt_put_chunk(ck, r, buf, CHUNK, NULL));
	}
	uint8_t *bigbuf = malloc(BIG);
	test_fill(bigbuf, BIG, 500);
	CHECK_OK(lanes ? crc_ckpt_put_chunk_at(ck, lanes - 1, rbig, 0, bigbuf, BIG, NULL)
		       : crc_ckpt_put_chunk(ck, rbig, bigbuf, BIG, NULL));
	free(bigbuf);
	CHECK_OK(crc_ckpt_meta_set(ck, "criu.images_dir", "/next"));
	CHECK_OK(crc_ckpt_commit(ck, NULL));
	CHECK_OK(crc_store_manifest_delete(st, old_id));
	CHECK_OK(crc_store_gc(st, NULL));
	crc_store_close(st);
	free(buf);
	return 0;
}

/* Checks a region's chunks against the seeds that made them, byte for byte. */
static void check_region(struct crc_store *st, const struct crc_region *r, const uint64_t *seeds, int n,
			 size_t len)
{
	uint8_t *buf = malloc(len), *want = malloc(len);
	CHECK_EQ_INT(r->nchunks, n);
	for (int i = 0; i < n; i++) {
		size_t got;
		CHECK_EQ_INT(r->chunks[i].length, len);
		CHECK_OK(crc_store_chunk_read(st, &r->chunks[i].hash, buf, len, &got));
		test_fill(want, len, seeds[i]);
		CHECK(got == len && !memcmp(buf, want, len));
	}
	free(buf);
	free(want);
}

static void check_previous(struct crc_store *st, uint64_t prev, uint64_t session)
{
	struct crc_manifest *m;
	CHECK_OK(crc_store_manifest_get(st, prev, &m));
	CHECK_EQ_INT(m->session_id, session);
	CHECK_EQ_INT(m->nregions, 2);
	CHECK_EQ_INT(m->regions[0].addr, prev_alloc.addr);
	CHECK_EQ_INT(m->regions[0].size, prev_alloc.size);
	check_region(st, &m->regions[0], (uint64_t[]){100, 101, 102, 103}, NPREV, CHUNK);
	CHECK_EQ_STR(m->regions[1].name, "g");
	check_region(st, &m->regions[1], (uint64_t[]){99}, 1, 100);
	CHECK_EQ_STR(crc_manifest_meta_get(m, "criu.images_dir"), "/prev");
	crc_manifest_free(m);
}

static int count_records(void *arg, uint64_t seq, uint32_t type, const void *payload, uint32_t len)
{
	(void)seq, (void)type, (void)payload, (void)len;
	(*(int *)arg)++;
	return 0;
}

int main(int argc, char **argv)
{
	char *dir = test_tmpdir("crash");
	struct crc_store *st;
	uint64_t session, prev;
	char names[MAX_K][48];
	int ndistinct = 0, completed_at = 0;
	CHECK_OK(crc_store_open(dir, CRC_STORE_CREATE, &st));
	CHECK_OK(crc_store_session_create(st, "crash", &session));
	CHECK_OK(crc_store_journal_append(st, session, CRC_JREC_CONTEXT_CREATE, "ctx", 3, NULL));
	prev = write_previous(st, session);
	old_id = write_old(st, session);
	crc_store_close(st);
	/* The killed children's store errors are expected noise. */
	crc_log_set_level(CRC_LOG_ERROR);
	if (argc > 1 && !strcmp(argv[1], "lanes"))
		lanes = 2;

	for (kill_at = 1; kill_at <= MAX_K; kill_at++) {
		int fds[2];
		CHECK(pipe(fds) == 0);
		fflush(NULL);
		pid_t pid = fork();
		CHECK(pid >= 0);
		if (pid == 0) {
			close(fds[0]);
			report_fd = fds[1];
			_exit(writer(dir, session));
		}
		close(fds[1]);
		char point[48] = {0};
		CHECK(read(fds[0], point, sizeof(point) - 1) >= 0);
		close(fds[0]);
		int status;
		CHECK(waitpid(pid, &status, 0) == pid);
		bool killed = WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
		if (!killed) {
			CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
			completed_at = (int)kill_at;
		} else {
			snprintf(names[ndistinct++], sizeof(names[0]), "%s", point);
		}

		/* After the crash: the previous checkpoint is whole, byte for byte. */
		CHECK_OK(crc_store_open(dir, 0, &st));
		check_previous(st, prev, session);
		uint64_t *ids;
		size_t n;
		CHECK_OK(crc_store_manifest_list(st, &ids, &n));
		CHECK(n >= 1 && n <= 3);
		CHECK_EQ_INT(ids[0], prev);
		uint64_t new_id = 0;
		bool old_there = false;
		for (size_t i = 1; i < n; i++) {
			struct crc_manifest *m;
			CHECK_OK(crc_store_manifest_get(st, ids[i], &m));
			if (ids[i] == old_id) {
				/* Not yet deleted: whole. */
				old_there = true;
				check_region(st, &m->regions[0], (uint64_t[]){300, 301}, 2, CHUNK);
			} else {
				/* The new checkpoint committed before the kill: it must be whole too. */
				new_id = ids[i];
				check_region(st, &m->regions[0], (uint64_t[]){100, 200, 101, 201, 202, 200},
					     6, CHUNK);
				check_region(st, &m->regions[1], (uint64_t[]){500}, 1, BIG);
			}
			crc_manifest_free(m);
		}
		int records = 0;
		CHECK_OK(crc_store_journal_iterate(st, session, count_records, &records));
		/* Each child's journal record commits before its first kill point: none is lost. */
		CHECK_EQ_INT(records, 1 + kill_at);
		/* verify (orphans allowed, no damage), gc, then verify finds nothing left over. */
		struct crc_verify_report vr;
		struct crc_gc_report gr;
		CHECK_OK(crc_store_verify(st, NULL, NULL, &vr));
		CHECK_OK(crc_store_gc(st, &gr));
		CHECK_OK(crc_store_verify(st, NULL, NULL, &vr));
		CHECK_EQ_INT(vr.orphan_packs, 0);
		CHECK_EQ_INT(vr.problems, 0);
		check_previous(st, prev, session);

		/* Back to the starting state for the next kill point. */
		if (new_id)
			CHECK_OK(crc_store_manifest_delete(st, new_id));
		free(ids);
		CHECK_OK(crc_store_gc(st, &gr));
		if (!old_there)
			old_id = write_old(st, session);
		struct crc_store_stat ss;
		CHECK_OK(crc_store_stat(st, &ss));
		CHECK_EQ_INT(ss.manifests, 2);
		check_previous(st, prev, session);
		crc_store_close(st);
		if (completed_at)
			break;
	}
	CHECK(completed_at > 0);
	int distinct_names = 0;
	for (int i = 0; i < ndistinct; i++) {
		bool dup = false;
		for (int j = 0; j < i; j++)
			dup |= !strcmp(names[i], names[j]);
		distinct_names += !dup;
	}
	printf("crash test%s: killed the writer at %d points (%d kinds of point), it completed at %d\n",
	       lanes ? " (lanes)" : "", ndistinct, distinct_names, completed_at);
	for (int i = 0; i < ndistinct; i++)
		printf("  %3d %s\n", i + 1, names[i]);
	CHECK(ndistinct >= 30);
	test_rmrf(dir);
	free(dir);
	return 0;
}
