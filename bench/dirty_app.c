/* dirty_app: device memory of which a chosen share changes between checkpoints, and a thread that
 * measures how long the program stands still. bench/incremental.sh drives it.
 *   dirty_app --mb N --dir DIR [--ticker 0]
 * --mb MiB in 4 MiB chunks (allocations of 256 MiB), each chunk filled with a word of its own. It
 * writes DIR/ready, then serves commands: DIR/cmd.K holds "dirty P" (rewrite P% of the chunks,
 * spread evenly, with this round's words), "gap" (the longest time a cuCtxSynchronize loop in
 * another thread waited since the last "gap", in ms), "sum" (a checksum of all the device memory) or
 * "exit"; the answer goes to DIR/reply.K. The same commands give the same checksum natively, under
 * crcuda and after a restore. For live migration (bench/migrate.sh): "churn P" starts a thread that
 * rewrites P% of the chunks per second, one chunk at a time in a fixed order (write k: chunk
 * k mod chunks, with a word of k's own), "halt" stops it and answers how many writes it made
 * ("churned N"), and "churn-steps N" makes the next N of those writes at once: a run that churned N
 * and one that did churn-steps N hold the same memory, whatever the timing. */
#include <cuda.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define CHUNK	  (4ull << 20)
#define PER_ALLOC 64 /* chunks */

#define CK(x)                                                                                                \
	do {                                                                                                 \
		CUresult r_ = (x);                                                                           \
		if (r_ != CUDA_SUCCESS) {                                                                    \
			fprintf(stderr, "dirty_app: %s: CUDA error %d\n", #x, r_);                           \
			exit(1);                                                                             \
		}                                                                                            \
	} while (0)

static CUcontext ctx;
static _Atomic uint64_t max_gap_ns;
static _Atomic int stop;
/* churn */
static CUdeviceptr *alloc;
static uint64_t nchunks;
static _Atomic uint64_t churned;
static _Atomic int churn_stop;
static unsigned churn_pct;

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The program's view of a pause: the longest wait between two synchronisations' returns. */
static void *ticker(void *arg)
{
	uint64_t last;

	(void)arg;
	CK(cuCtxSetCurrent(ctx));
	last = now_ns();
	while (!atomic_load(&stop)) {
		CK(cuCtxSynchronize());
		uint64_t t = now_ns(), gap = t - last;

		if (gap > atomic_load(&max_gap_ns))
			atomic_store(&max_gap_ns, gap);
		last = t;
		usleep(100);
	}
	return NULL;
}

static unsigned word_of(unsigned round, uint64_t chunk)
{
	return (unsigned)(round * 2654435761u ^ (unsigned)chunk * 40503u ^ 0x5bd1e995u);
}

#define CHUNK_PTR(c) (alloc[(c) / PER_ALLOC] + ((c) % PER_ALLOC) * CHUNK)

/* Churn write k: the same bytes whoever makes it. */
static void churn_write(uint64_t k)
{
	uint64_t c = k % nchunks;

	CK(cuMemsetD32(CHUNK_PTR(c), word_of((unsigned)(k + 1000000u), c), CHUNK / 4));
	CK(cuCtxSynchronize());
}

static void *churn(void *arg)
{
	double per_s = (double)nchunks * churn_pct / 100.0;
	uint64_t start = now_ns(), done = 0;

	(void)arg;
	CK(cuCtxSetCurrent(ctx));
	while (!atomic_load(&churn_stop)) {
		/* Writes due by now, at the rate asked for. */
		uint64_t due = (uint64_t)((now_ns() - start) / 1e9 * per_s);

		if (done < due) {
			churn_write(atomic_load(&churned));
			atomic_fetch_add(&churned, 1);
			done++;
		} else {
			usleep(1000);
		}
	}
	return NULL;
}

int main(int argc, char **argv)
{
	uint64_t mb = 256, *ck_round;
	const char *dir = NULL;
	int tick = 1; /* --ticker 0: no synchronising thread (NVIDIA's checkpoint failed with one, 304) */
	size_t nallocs;
	unsigned round = 0;
	pthread_t tid, churn_tid;
	bool churning = false;
	char path[4096];

	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--mb"))
			mb = strtoull(argv[i + 1], NULL, 10);
		else if (!strcmp(argv[i], "--dir"))
			dir = argv[i + 1];
		else if (!strcmp(argv[i], "--ticker"))
			tick = atoi(argv[i + 1]);
	}
	if (!dir || mb < 4) {
		fprintf(stderr, "usage: dirty_app --mb N --dir DIR\n");
		return 2;
	}
	nchunks = mb / 4;
	nallocs = (nchunks + PER_ALLOC - 1) / PER_ALLOC;
	alloc = calloc(nallocs, sizeof(*alloc));
	ck_round = calloc(nchunks, sizeof(*ck_round));
	CK(cuInit(0));
	CUdevice dev;
	CK(cuDeviceGet(&dev, 0));
	CK(cuDevicePrimaryCtxRetain(&ctx, dev));
	CK(cuCtxSetCurrent(ctx));
	for (size_t a = 0; a < nallocs; a++) {
		uint64_t n = nchunks - a * PER_ALLOC < PER_ALLOC ? nchunks - a * PER_ALLOC : PER_ALLOC;

		CK(cuMemAlloc(&alloc[a], n * CHUNK));
	}
	for (uint64_t c = 0; c < nchunks; c++)
		CK(cuMemsetD32(CHUNK_PTR(c), word_of(0, c), CHUNK / 4));
	CK(cuCtxSynchronize());
	if (tick)
		pthread_create(&tid, NULL, ticker, NULL);
	snprintf(path, sizeof(path), "%s/ready", dir);
	fclose(fopen(path, "w"));
	for (unsigned k = 0;; k++) {
		char cmd[64] = "", reply[128] = "";
		FILE *f;

		snprintf(path, sizeof(path), "%s/cmd.%u", dir, k);
		while (!(f = fopen(path, "r")))
			usleep(2000);
		if (!fgets(cmd, sizeof(cmd), f))
			cmd[0] = 0;
		fclose(f);
		if (!strncmp(cmd, "dirty ", 6)) {
			unsigned p = (unsigned)atoi(cmd + 6), n = 0;

			round++;
			/* Chunk c changes when the running share p% crosses a whole number there. */
			for (uint64_t c = 0; c < nchunks; c++)
				if ((c + 1) * p / 100 > c * p / 100) {
					CK(cuMemsetD32(CHUNK_PTR(c), word_of(round, c), CHUNK / 4));
					n++;
				}
			CK(cuCtxSynchronize());
			snprintf(reply, sizeof(reply), "dirty %u of %llu chunks\n", n,
				 (unsigned long long)nchunks);
		} else if (!strncmp(cmd, "churn-steps ", 12)) {
			uint64_t n = strtoull(cmd + 12, NULL, 10);

			for (uint64_t i = 0; i < n; i++)
				churn_write(atomic_fetch_add(&churned, 1));
			snprintf(reply, sizeof(reply), "churned %llu\n",
				 (unsigned long long)atomic_load(&churned));
		} else if (!strncmp(cmd, "churn ", 6) && !churning) {
			churn_pct = (unsigned)atoi(cmd + 6);
			atomic_store(&churn_stop, 0);
			pthread_create(&churn_tid, NULL, churn, NULL);
			churning = true;
			snprintf(reply, sizeof(reply), "churning %u%%/s\n", churn_pct);
		} else if (!strncmp(cmd, "halt", 4)) {
			if (churning) {
				atomic_store(&churn_stop, 1);
				pthread_join(churn_tid, NULL);
				churning = false;
			}
			snprintf(reply, sizeof(reply), "churned %llu\n",
				 (unsigned long long)atomic_load(&churned));
		} else if (!strncmp(cmd, "gap", 3)) {
			snprintf(reply, sizeof(reply), "gap_ms %.3f\n",
				 atomic_exchange(&max_gap_ns, 0) / 1e6);
		} else if (!strncmp(cmd, "sum", 3)) {
			uint32_t *host = malloc(CHUNK);
			uint64_t h = 1469598103934665603ull;

			for (uint64_t c = 0; c < nchunks; c++) {
				CK(cuMemcpyDtoH(host, CHUNK_PTR(c), CHUNK));
				for (size_t i = 0; i < CHUNK / 4; i++)
					h = (h ^ host[i]) * 1099511628211ull;
			}
			free(host);
			snprintf(reply, sizeof(reply), "checksum=%016llx\n", (unsigned long long)h);
			printf("%s", reply);
			fflush(stdout);
		} else if (!strncmp(cmd, "exit", 4)) {
			atomic_store(&stop, 1);
			if (tick)
				pthread_join(tid, NULL);
			snprintf(reply, sizeof(reply), "bye\n");
		} else {
			snprintf(reply, sizeof(reply), "unknown command: %s\n", cmd);
		}
		char tmp[4200];
		snprintf(path, sizeof(path), "%s/reply.%u", dir, k);
		snprintf(tmp, sizeof(tmp), "%s.tmp", path);
		f = fopen(tmp, "w");
		fputs(reply, f);
		fclose(f);
		rename(tmp, path);
		if (!strncmp(reply, "bye", 3))
			return 0;
	}
}
