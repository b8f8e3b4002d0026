/* peer_ring: a data-parallel job in miniature, the shape NCCL gives PyTorch DDP. A parent that makes no
 * CUDA call (a launcher, torchrun) forks RANKS processes; each makes VMM memory (cuMemCreate, exportable
 * as a POSIX descriptor) holding a flag and two inboxes, and passes its descriptor to the previous rank
 * over a unix socket (SCM_RIGHTS); each imports the next rank's and maps it. Every step, a rank runs
 * ring_step on its data, then the collective coll_ring_exchange: it writes its data into the next
 * rank's inbox, raises the next rank's flag and waits until the previous rank raised its own, which the
 * previous rank's kernel of the same step does. So no rank's kernel of step s completes before every
 * rank launched its kernel of step s. Every SYNC steps a rank synchronises (a loss printed), then
 * sleeps SLEEP_US.
 *
 *   peer_ring [--ranks R] [--steps N] [--words W] [--sync K] [--sleep-us U] [--events]
 *
 * --events: each rank also passes an interprocess event (cuIpcGetEventHandle) to the next rank, records
 * it at each sync point and waits there for the previous rank's (cuIpcOpenEventHandle).
 *
 * The parent prints "rank R: N steps, checksum X" for each rank in rank order; runs natively, under the
 * layer and after a checkpoint of the process tree at any instant print the same. Exit 0 pass, 1 fail,
 * 77 no device. With more ranks than devices, ranks share devices (a spinning kernel then waits for
 * another process's time slice). */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cuda_test.h"
#include "ipc_share.h"

extern const unsigned char peer_ring_fatbin[];

#define RANKS_MAX  8
#define FLAG_BYTES 256u /* the flag's own line, before the inboxes */

struct opts {
	int ranks, steps, words, sync, sleep_us;
	bool events; /* each step waits for the previous rank's interprocess event too */
};

/* This rank's memory, or the next rank's, mapped here: flag, inbox 0, inbox 1. */
struct ring_buf {
	CUdeviceptr base;
	size_t size;
	CUmemGenericAllocationHandle handle;
};

static uint64_t fnv1a(const void *p, size_t n)
{
	const unsigned char *b = p;
	uint64_t h = 1469598103934665603ull;

	for (size_t i = 0; i < n; i++)
		h = (h ^ b[i]) * 1099511628211ull;
	return h;
}

static bool read_all(int fd, void *buf, size_t len)
{
	for (size_t got = 0; got < len;) {
		ssize_t n = read(fd, (char *)buf + got, len - got);

		if (n <= 0)
			return false;
		got += (size_t)n;
	}
	return true;
}

/* A rank: to_next talks to the next rank (its descriptor comes from there), from_prev to the
 * previous one (this rank's descriptor goes there). Its result line goes to out. */
static int run_rank(const struct opts *o, int rank, int to_next, int from_prev, int out)
{
	char who[32], line[128];
	CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
				    .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE},
				    .requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR};
	struct ring_buf mine = {0}, next = {0};
	size_t gran = 0, bytes = (size_t)o->words * sizeof(uint32_t);
	CUfunction step_fn, exchange_fn;
	CUevent my_event = NULL, prev_event = NULL;
	CUdeviceptr data;
	CUcontext ctx;
	CUmodule mod;
	CUdevice dev;
	uint32_t *host;
	int count, fd;

	snprintf(who, sizeof(who), "peer_ring rank %d", rank);
	cu_test_init(who);
	CU_CHECK(cuDeviceGetCount(&count));
	CU_CHECK(cuDeviceGet(&dev, rank % count));
	CU_CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
	CU_CHECK(cuCtxSetCurrent(ctx));
	CU_CHECK(cuModuleLoadData(&mod, peer_ring_fatbin));
	CU_CHECK(cuModuleGetFunction(&step_fn, mod, "ring_step"));
	CU_CHECK(cuModuleGetFunction(&exchange_fn, mod, "coll_ring_exchange"));

	prop.location.id = dev;
	CU_CHECK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
	mine.size = (FLAG_BYTES + 2 * bytes + gran - 1) / gran * gran;
	CU_CHECK(cuMemCreate(&mine.handle, mine.size, &prop, 0));
	mine.base = vmm_map_on(mine.handle, mine.size, dev);
	/* Zeroed before the previous rank gets it: its first write must not be wiped. */
	CU_CHECK(cuMemsetD8(mine.base, 0, mine.size));
	CU_CHECK(cuCtxSynchronize());
	CU_CHECK(cuMemExportToShareableHandle(&fd, mine.handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
	fdpass_send(from_prev, fd, who);
	close(fd);
	fd = fdpass_recv(to_next, who);
	CU_CHECK(cuMemImportFromShareableHandle(&next.handle, (void *)(intptr_t)fd,
						CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
	close(fd);
	/* --events: this rank's interprocess event goes to the next rank, the previous rank's comes. */
	if (o->events) {
		CUipcEventHandle h;

		CU_CHECK(cuEventCreate(&my_event, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING));
		CU_CHECK(cuIpcGetEventHandle(&h, my_event));
		CHECK(write(to_next, &h, sizeof(h)) == (ssize_t)sizeof(h));
		CHECK(read_all(from_prev, &h, sizeof(h)));
		CU_CHECK(cuIpcOpenEventHandle(&prev_event, h));
	}
	next.size = mine.size;
	next.base = vmm_map_on(next.handle, next.size, dev);

	CU_CHECK(cuMemAlloc(&data, bytes));
	CU_CHECK(cuMemsetD32(data, 0x9e3779b9u ^ (unsigned)rank, (size_t)o->words));
	for (int s = 0; s < o->steps; s++) {
		unsigned salt = (unsigned)(s * o->ranks + rank), step = (unsigned)s;
		CUdeviceptr next_inbox = next.base + FLAG_BYTES + (size_t)(s % 2) * bytes,
			    my_inbox = mine.base + FLAG_BYTES + (size_t)(s % 2) * bytes,
			    next_flag = next.base, my_flag = mine.base;
		void *step_args[] = {&data, (void *)&o->words, &salt};
		void *exchange_args[] = {&data,	   &next_inbox,	      &next_flag, &my_inbox,
					 &my_flag, (void *)&o->words, &step};

		CU_CHECK(cuLaunchKernel(step_fn, 1, 1, 1, 256, 1, 1, 0, NULL, step_args, NULL));
		CU_CHECK(cuLaunchKernel(exchange_fn, 1, 1, 1, 256, 1, 1, 0, NULL, exchange_args, NULL));
		if ((s + 1) % o->sync == 0) {
			CU_CHECK(cuStreamSynchronize(NULL));
			/* Only here: the previous rank's last record is at most of this sync point (its
			 * next one waits for exchanges of ours not launched yet), so the wait ends. */
			if (o->events) {
				CU_CHECK(cuEventRecord(my_event, NULL));
				CU_CHECK(cuStreamWaitEvent(NULL, prev_event, 0));
			}
			if (o->sleep_us)
				usleep((useconds_t)o->sleep_us);
		}
	}
	host = malloc(bytes);
	CHECK(host);
	CU_CHECK(cuMemcpyDtoH(host, data, bytes));
	snprintf(line, sizeof(line), "rank %d: %d steps, checksum %016llx\n", rank, o->steps,
		 (unsigned long long)fnv1a(host, bytes));
	CHECK(write(out, line, strlen(line)) == (ssize_t)strlen(line));
	free(host);
	CU_CHECK(cuMemFree(data));
	if (o->events) {
		CU_CHECK(cuEventDestroy(prev_event));
		CU_CHECK(cuEventDestroy(my_event));
	}
	CU_CHECK(cuMemUnmap(next.base, next.size));
	CU_CHECK(cuMemAddressFree(next.base, next.size));
	CU_CHECK(cuMemRelease(next.handle));
	CU_CHECK(cuMemUnmap(mine.base, mine.size));
	CU_CHECK(cuMemAddressFree(mine.base, mine.size));
	CU_CHECK(cuMemRelease(mine.handle));
	CU_CHECK(cuModuleUnload(mod));
	CU_CHECK(cuDevicePrimaryCtxRelease(dev));
	return 0;
}

static int opt_int(int argc, char **argv, int *i, int lo, int hi)
{
	long v;
	char *end;

	if (*i + 1 >= argc) {
		fprintf(stderr, "peer_ring: %s needs a value\n", argv[*i]);
		exit(2);
	}
	v = strtol(argv[++*i], &end, 10);
	if (*end || v < lo || v > hi) {
		fprintf(stderr, "peer_ring: %s %s: not in %d..%d\n", argv[*i - 1], argv[*i], lo, hi);
		exit(2);
	}
	return (int)v;
}

int main(int argc, char **argv)
{
	struct opts o = {.ranks = 2, .steps = 200, .words = 4096, .sync = 4, .sleep_us = 0};
	int links[RANKS_MAX][2], outs[RANKS_MAX][2], status, rc = 0, skipped = 0;
	pid_t pids[RANKS_MAX];

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--ranks"))
			o.ranks = opt_int(argc, argv, &i, 2, RANKS_MAX);
		else if (!strcmp(argv[i], "--steps"))
			o.steps = opt_int(argc, argv, &i, 1, 1 << 24);
		else if (!strcmp(argv[i], "--words"))
			o.words = opt_int(argc, argv, &i, 1, 1 << 24);
		else if (!strcmp(argv[i], "--sync"))
			o.sync = opt_int(argc, argv, &i, 1, 1 << 24);
		else if (!strcmp(argv[i], "--sleep-us"))
			o.sleep_us = opt_int(argc, argv, &i, 0, 10000000);
		else if (!strcmp(argv[i], "--events"))
			o.events = true;
		else {
			fprintf(stderr, "usage: peer_ring [--ranks R] [--steps N] [--words W] [--sync K] "
					"[--sleep-us U] [--events]\n");
			return 2;
		}
	}
	/* Link r joins rank r (end 0) and rank r + 1 (end 1). */
	for (int r = 0; r < o.ranks; r++)
		CHECK(!socketpair(AF_UNIX, SOCK_STREAM, 0, links[r]) && !pipe(outs[r]));
	fflush(stdout);
	for (int r = 0; r < o.ranks; r++) {
		pids[r] = fork();
		CHECK(pids[r] >= 0);
		if (!pids[r]) {
			int prev = (r + o.ranks - 1) % o.ranks;

			for (int k = 0; k < o.ranks; k++) {
				if (k != r)
					close(links[k][0]), close(outs[k][1]);
				if (k != prev)
					close(links[k][1]);
				close(outs[k][0]);
			}
			_exit(run_rank(&o, r, links[r][0], links[prev][1], outs[r][1]));
		}
	}
	for (int r = 0; r < o.ranks; r++)
		close(links[r][0]), close(links[r][1]), close(outs[r][1]);
	for (int r = 0; r < o.ranks; r++) {
		char buf[256];
		ssize_t n = 0, got;

		while (n < (ssize_t)sizeof(buf) - 1 &&
		       (got = read(outs[r][0], buf + n, sizeof(buf) - 1 - (size_t)n)) > 0)
			n += got;
		buf[n] = 0;
		CHECK(waitpid(pids[r], &status, 0) == pids[r]);
		if (WIFEXITED(status) && WEXITSTATUS(status) == CHECK_SKIP) {
			skipped++;
			continue;
		}
		if (!WIFEXITED(status) || WEXITSTATUS(status) || !n) {
			fprintf(stderr, "peer_ring: rank %d failed (status %#x)\n", r, status);
			rc = 1;
			continue;
		}
		fputs(buf, stdout);
	}
	if (skipped == o.ranks)
		return CHECK_SKIP;
	return rc || skipped ? 1 : 0;
}
