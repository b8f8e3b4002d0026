/* bench/store [--lanes N] [SIZE [DIR]]: writes SIZE bytes (default 4 GiB; suffixes K, M, G) as 4 MiB
 * chunks through the store (one checkpoint, committed: pack files fsync'd, then the LMDB commit),
 * reads them back with every hash checked, and compares each with a plain sequential write (4 MiB
 * write()s, one fsync) and read of the same bytes into one file in the same directory, same run.
 * Running as root it drops the page cache before each read, so reads come from the disk;
 * otherwise it says the reads may come from the cache. With --lanes N it writes the same checkpoint
 * again into a fresh store from N threads, one store lane each (crc_ckpt_put_chunk_at, as crcudad's
 * checkpoint writers do), checks that it names the same chunks, and compares it with the one-thread
 * write. CRCUDA_STORE_SYNC=0 leaves out the store's fsyncs (the plain write keeps its fsync).
 * BENCH_STORE_DATA=half-zeros makes the first half of every chunk zeros (compressible: the store's
 * compression, CRCUDA_STORE_COMPRESS, then writes about half the bytes; compare with =off); the
 * default is random bytes, which the store stores as they are. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "crc_store.h"
#include "crcuda/errno.h"

#define CHUNK (4u << 20)
#define POOL  (64u << 20) /* distinct data, recycled with a per-chunk stamp so no chunk repeats */

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static uint64_t parse_size(const char *s)
{
	char *end;
	uint64_t v = strtoull(s, &end, 10);
	switch (*end) {
	case 'G':
	case 'g':
		return v << 30;
	case 'M':
	case 'm':
		return v << 20;
	case 'K':
	case 'k':
		return v << 10;
	default:
		return v;
	}
}

static uint8_t *pool;
static bool half_zeros; /* BENCH_STORE_DATA=half-zeros */

/* Chunk i's bytes: a slice of the random pool with i stamped at the front (and, with half_zeros, the
 * rest of its first half zeros). */
static const uint8_t *chunk_bytes(uint64_t i, uint8_t *scratch)
{
	memcpy(scratch, pool + (i * CHUNK) % POOL, CHUNK);
	if (half_zeros)
		memset(scratch, 0, CHUNK / 2);
	memcpy(scratch, &i, sizeof(i));
	return scratch;
}

static bool drop_caches(void)
{
	sync();
	int fd = open("/proc/sys/vm/drop_caches", O_WRONLY);
	if (fd < 0)
		return false;
	bool ok = write(fd, "3", 1) == 1;
	close(fd);
	return ok;
}

_Noreturn static void die(const char *what, int rc)
{
	fprintf(stderr, "bench/store: %s: %s\n", what,
		rc < 0 && rc > -4096 ? strerror(-rc) : crc_strerror(rc));
	exit(1);
}

/* One lane's thread: takes the next chunk in order (as crcudad's writers take a staging buffer's). */
struct lane_writer {
	struct crc_ckpt *ck;
	unsigned lane;
	uint32_t region;
	uint64_t nchunks;
	atomic_uint_fast64_t *next;
};

static void *lane_writer_main(void *arg)
{
	struct lane_writer *w = arg;
	uint8_t *scratch = aligned_alloc(4096, CHUNK);
	if (!scratch)
		die("malloc", CRC_ENOMEM);
	for (uint64_t i; (i = atomic_fetch_add(w->next, 1)) < w->nchunks;) {
		int rc = crc_ckpt_put_chunk_at(w->ck, w->lane, w->region, (uint32_t)i,
					       chunk_bytes(i, scratch), CHUNK, NULL);
		if (rc)
			die("crc_ckpt_put_chunk_at", rc);
	}
	free(scratch);
	return NULL;
}

/* Writes the checkpoint (one region of nchunks chunks) into a new store in dir and commits it;
 * lanes 0: crc_ckpt_put_chunk from this thread, else that many threads. Returns the seconds taken. */
static double store_write(const char *dir, uint64_t nchunks, unsigned lanes, uint8_t *scratch,
			  uint64_t *out_id)
{
	struct crc_store *st;
	struct crc_ckpt *ck;
	uint64_t session;
	uint32_t region;
	int rc;
	if ((rc = crc_store_open(dir, CRC_STORE_CREATE, &st)) ||
	    (rc = crc_store_session_create(st, "bench", &session)))
		die("opening the store", rc);
	double t0 = now();
	struct crc_region_desc d = {
	    .kind = CRC_REGION_DEVICE_ALLOC, .addr = 0x600000000000ull, .size = nchunks * CHUNK};
	if ((rc = crc_ckpt_begin(st, session, &ck)) || (rc = crc_ckpt_region_add(ck, &d, &region)) ||
	    (lanes && (rc = crc_ckpt_set_lanes(ck, lanes))))
		die("crc_ckpt_begin", rc);
	if (!lanes) {
		for (uint64_t i = 0; i < nchunks; i++)
			if ((rc = crc_ckpt_put_chunk(ck, region, chunk_bytes(i, scratch), CHUNK, NULL)))
				die("crc_ckpt_put_chunk", rc);
	} else {
		pthread_t tids[CRC_CKPT_LANES_MAX];
		struct lane_writer w[CRC_CKPT_LANES_MAX];
		atomic_uint_fast64_t next = 0;
		for (unsigned l = 0; l < lanes; l++) {
			w[l] = (struct lane_writer){ck, l, region, nchunks, &next};
			if (pthread_create(&tids[l], NULL, lane_writer_main, &w[l]))
				die("pthread_create", CRC_ENOMEM);
		}
		for (unsigned l = 0; l < lanes; l++)
			pthread_join(tids[l], NULL);
	}
	if ((rc = crc_ckpt_commit(ck, out_id)))
		die("crc_ckpt_commit", rc);
	double t = now() - t0;
	crc_store_close(st);
	return t;
}

/* The chunk list of a store's checkpoint. */
static struct crc_manifest *manifest_of(const char *dir, uint64_t id)
{
	struct crc_store *st;
	struct crc_manifest *m;
	int rc;
	if ((rc = crc_store_open(dir, 0, &st)) || (rc = crc_store_manifest_get(st, id, &m)))
		die("reading a manifest back", rc);
	crc_store_close(st);
	return m;
}

/* Sequential write of every chunk + fsync, then sequential read checking every byte (the same check
 * the store run does). */
static void plain_run(const char *path, uint64_t nchunks, uint8_t *scratch, uint8_t *back, bool *dropped,
		      double *out_w, double *out_r)
{
	double t0 = now();
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0)
		die("creating the plain file", -errno);
	for (uint64_t i = 0; i < nchunks; i++)
		if (write(fd, chunk_bytes(i, scratch), CHUNK) != CHUNK)
			die("plain write", -errno);
	if (fsync(fd))
		die("plain fsync", -errno);
	close(fd);
	*out_w = now() - t0;
	*dropped &= drop_caches();
	t0 = now();
	fd = open(path, O_RDONLY);
	for (uint64_t i = 0; i < nchunks; i++) {
		if (read(fd, back, CHUNK) != CHUNK)
			die("plain read", -errno);
		if (memcmp(back, chunk_bytes(i, scratch), CHUNK))
			die("plain read back differs", CRC_ECORRUPT);
	}
	close(fd);
	*out_r = now() - t0;
	unlink(path);
}

int main(int argc, char **argv)
{
	unsigned lanes = 0;
	if (argc > 2 && !strcmp(argv[1], "--lanes")) {
		lanes = (unsigned)atoi(argv[2]);
		if (lanes < 1 || lanes > CRC_CKPT_LANES_MAX) {
			fprintf(stderr, "bench/store: --lanes takes 1..%d\n", CRC_CKPT_LANES_MAX);
			return 2;
		}
		argc -= 2;
		argv += 2;
	}
	const char *data_kind = getenv("BENCH_STORE_DATA");
	half_zeros = data_kind && !strcmp(data_kind, "half-zeros");
	uint64_t size = argc > 1 ? parse_size(argv[1]) : 4ull << 30;
	const char *base = argc > 2 ? argv[2] : "/var/tmp";
	uint64_t nchunks = (size + CHUNK - 1) / CHUNK;
	size = nchunks * CHUNK;
	char dir[4096], plain[4200], cmd[4300];
	snprintf(dir, sizeof(dir), "%s/crcuda-bench-store-XXXXXX", base);
	if (!mkdtemp(dir))
		die("mkdtemp", -errno);
	snprintf(plain, sizeof(plain), "%s/plain.bin", dir);
	uint8_t *scratch = aligned_alloc(4096, CHUNK), *back = aligned_alloc(4096, CHUNK);
	pool = aligned_alloc(4096, POOL);
	if (!scratch || !back || !pool)
		die("malloc", CRC_ENOMEM);
	uint64_t x = 88172645463325252ull;
	for (size_t i = 0; i < POOL / 8; i++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		memcpy(pool + 8 * i, &x, 8);
	}
	bool dropped = true;

	double plain_w, plain_r, plain_w2, plain_r2;
	plain_run(plain, nchunks, scratch, back, &dropped, &plain_w, &plain_r);
	double t0;

	/* Store: one checkpoint, one region, nchunks chunks; commit includes the fsyncs. */
	struct crc_store *st;
	uint64_t id;
	int rc;
	snprintf(cmd, sizeof(cmd), "%s/store", dir);
	double store_w = store_write(cmd, nchunks, 0, scratch, &id);
	dropped &= drop_caches();
	t0 = now();
	struct crc_manifest *m;
	if ((rc = crc_store_open(cmd, 0, &st)) || (rc = crc_store_manifest_get(st, id, &m)))
		die("reopening the store", rc);
	for (uint32_t i = 0; i < m->regions[0].nchunks; i++) {
		size_t got;
		if ((rc = crc_store_chunk_read(st, &m->regions[0].chunks[i].hash, back, CHUNK, &got)))
			die("crc_store_chunk_read", rc);
		if (memcmp(back, chunk_bytes(i, scratch), CHUNK))
			die("chunk read back differs", CRC_ECORRUPT);
	}
	double store_r = now() - t0;
	struct crc_store_stat ss;
	if ((rc = crc_store_stat(st, &ss)))
		die("crc_store_stat", rc);
	crc_store_close(st);
	double lanes_w = 0;
	if (lanes) {
		/* The same checkpoint from several threads, into a store of its own; same chunks. */
		char lanes_dir[4300];
		uint64_t lanes_id;
		snprintf(lanes_dir, sizeof(lanes_dir), "%s/store-lanes", dir);
		dropped &= drop_caches();
		lanes_w = store_write(lanes_dir, nchunks, lanes, scratch, &lanes_id);
		struct crc_manifest *lm = manifest_of(lanes_dir, lanes_id);
		if (lm->regions[0].nchunks != m->regions[0].nchunks ||
		    memcmp(lm->regions[0].chunks, m->regions[0].chunks,
			   m->regions[0].nchunks * sizeof(*m->regions[0].chunks)))
			die("the lanes' checkpoint names other chunks", CRC_ECORRUPT);
		crc_manifest_free(lm);
		snprintf(cmd, sizeof(cmd), "rm -rf '%s/store-lanes'", dir);
		if (system(cmd))
			die("removing the bench store", -EIO);
	}
	crc_manifest_free(m);
	/* The plain run again, after the store's: the disk's speed drifts (first writes to fresh blocks of
	 * a virtual disk are slower), so each side is compared with the plain run's better figure. */
	snprintf(cmd, sizeof(cmd), "rm -rf '%s/store'", dir);
	if (system(cmd))
		die("removing the bench store", -EIO);
	plain_run(plain, nchunks, scratch, back, &dropped, &plain_w2, &plain_r2);
	printf("  plain runs: write %.2f s then %.2f s, read %.2f s then %.2f s\n", plain_w, plain_w2,
	       plain_r, plain_r2);
	plain_w = plain_w2 < plain_w ? plain_w2 : plain_w;
	plain_r = plain_r2 < plain_r ? plain_r2 : plain_r;

	double gib = size / (double)(1u << 30);
	printf("bench/store: %.2f GiB in %" PRIu64 " chunks of %u MiB, in %s\n", gib, nchunks, CHUNK >> 20,
	       dir);
	printf("  measured: write = all write()s + fsync (store: + LMDB commit); read = %s\n",
	       dropped ? "after dropping the page cache (from disk)"
		       : "WITHOUT dropping the page cache (not root): may come from memory");
	printf("  both reads compare every byte with the source; the store's also hashes each chunk "
	       "(XXH3-128)\n");
	printf("  data: %s; the store holds %.2f GiB as %.2f GiB (%" PRIu64
	       " chunks compressed; CRCUDA_STORE_COMPRESS=%s)\n",
	       half_zeros ? "half zeros, half random" : "random", ss.chunk_bytes / (double)(1u << 30),
	       ss.chunk_stored_bytes / (double)(1u << 30), ss.chunks_compressed,
	       getenv("CRCUDA_STORE_COMPRESS") ? getenv("CRCUDA_STORE_COMPRESS") : "auto");
	printf("  %-22s %8.2f s %8.0f MiB/s\n", "plain write+fsync", plain_w, size / plain_w / (1 << 20));
	printf("  %-22s %8.2f s %8.0f MiB/s   %5.1f%% of plain\n", "store write+commit", store_w,
	       size / store_w / (1 << 20), 100 * plain_w / store_w);
	if (lanes) {
		char what[32];
		snprintf(what, sizeof(what), "store write, %u lanes", lanes);
		printf("  %-22s %8.2f s %8.0f MiB/s   %5.1f%% of plain, %.2fx one lane\n", what, lanes_w,
		       size / lanes_w / (1 << 20), 100 * plain_w / lanes_w, store_w / lanes_w);
	}
	printf("  %-22s %8.2f s %8.0f MiB/s\n", "plain read", plain_r, size / plain_r / (1 << 20));
	printf("  %-22s %8.2f s %8.0f MiB/s   %5.1f%% of plain\n", "store read+verify", store_r,
	       size / store_r / (1 << 20), 100 * plain_r / store_r);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd))
		fprintf(stderr, "bench/store: could not remove %s\n", dir);
	free(scratch);
	free(back);
	free(pool);
	return 0;
}
