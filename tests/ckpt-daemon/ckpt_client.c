/* A client for the daemon-side checkpoint tests: builds state (a module with globals, buffers with a
 * known pattern, a stream, an event, pinned memory), writes its buffers' addresses to READY, waits for
 * GO, then checks that everything is still there and still works. A helper thread takes a
 * replacement daemon socket from $CKPT_SWAP_SOCK and puts it in place of the one libcrcuda holds, as
 * CRIU's restore would. --busy: another thread keeps making long calls until GO. --churn N: first
 * creates and destroys N events, N streams and N allocations (a long session's journal). --deferred:
 * last, a launch the device refuses (2048 threads a block); natively it answers the error, under the
 * layer it is posted and its error comes at the next synchronising call, which must see it exactly
 * once, also across a checkpoint and a restore.
 *   ckpt_client READY GO [--busy] [--churn N] [--deferred] */
#include <cuda.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

extern const unsigned char device_globals_fatbin[];

#define NBUF 3
static const size_t sizes[NBUF] = {3u << 20, 8u << 20, 65536};

#define CK(call)                                                                                             \
	do {                                                                                                 \
		CUresult r_ = (call);                                                                        \
		if (r_ != CUDA_SUCCESS) {                                                                    \
			fprintf(stderr, "ckpt_client: %s:%d: %s: error %d\n", __FILE__, __LINE__, #call,     \
				r_);                                                                         \
			exit(3);                                                                             \
		}                                                                                            \
	} while (0)

static unsigned char pattern(int b, size_t i)
{
	return (unsigned char)(i * 131 + (size_t)b * 7 + (i >> 12));
}

static const char *go_file;
/* --mutate FILE: once FILE exists, one byte of buffer 1's second 4 MiB chunk is flipped (FILE.done
 * says so); an incremental checkpoint must copy that chunk alone. */
#define MUTATED_BUF 1
#define MUTATED_AT  ((4u << 20) + 12345)
static CUcontext ctx;

static int exists(const char *p)
{
	struct stat st;

	return stat(p, &st) == 0;
}

/* Receives a socket and dup2()s it over the one connected to the daemon's socket path. */
static void *swapper(void *arg)
{
	const char *path = arg, *daemon = getenv("CRCUDA_SOCKET");
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	int l = socket(AF_UNIX, SOCK_STREAM, 0), c, fd = -1;
	char buf[CMSG_SPACE(sizeof(int))], byte;
	struct iovec iov = {&byte, 1};
	struct msghdr m = {
	    .msg_iov = &iov, .msg_iovlen = 1, .msg_control = buf, .msg_controllen = sizeof(buf)};

	snprintf(a.sun_path, sizeof(a.sun_path), "%s", path);
	unlink(path);
	if (bind(l, (struct sockaddr *)&a, sizeof(a)) || listen(l, 1))
		return NULL;
	c = accept(l, NULL, NULL);
	if (c < 0 || recvmsg(c, &m, 0) != 1 || !CMSG_FIRSTHDR(&m))
		return NULL;
	memcpy(&fd, CMSG_DATA(CMSG_FIRSTHDR(&m)), sizeof(int));
	for (int old = 0; old < 1024; old++) {
		struct sockaddr_un peer;
		socklen_t len = sizeof(peer);

		if (old == fd || old == c || old == l || getpeername(old, (struct sockaddr *)&peer, &len) ||
		    peer.sun_family != AF_UNIX || strcmp(peer.sun_path, daemon))
			continue;
		dup2(fd, old);
		fprintf(stderr, "ckpt_client: daemon socket %d replaced\n", old);
	}
	close(fd);
	close(c);
	close(l);
	return NULL;
}

static long busy_rounds;
static CUdeviceptr busy_buf;

static void *busy_main(void *arg)
{
	void *host = malloc(sizes[1]);

	(void)arg;
	CK(cuCtxSetCurrent(ctx));
	while (!exists(go_file)) {
		CK(cuMemcpyDtoH(host, busy_buf, sizes[1]));
		CK(cuCtxSynchronize());
		busy_rounds++;
	}
	free(host);
	return NULL;
}

int main(int argc, char **argv)
{
	CUdeviceptr buf[NBUF], scratch, counter, coef;
	size_t counter_size, coef_size;
	CUdevice dev;
	CUmodule mod;
	CUfunction update;
	CUstream stream, gone;
	CUevent ev, start;
	float ms;
	unsigned char *host, *pinned;
	int coefs[4] = {3, 1, 4, 1}, value, rounds = 2, churn = 0;
	bool busy_thread = false, deferred = false, posted_error = false, mutated = false;
	const char *mutate = NULL;
	pthread_t swap, busy;
	FILE *f;
	void *kargs[] = {&rounds};

	if (argc < 3) {
		fprintf(stderr, "usage: ckpt_client READY GO [--busy] [--churn N] [--deferred]\n");
		return 2;
	}
	for (int i = 3; i < argc; i++) {
		if (!strcmp(argv[i], "--busy"))
			busy_thread = true;
		else if (!strcmp(argv[i], "--deferred"))
			deferred = true;
		else if (!strcmp(argv[i], "--churn") && i + 1 < argc)
			churn = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--mutate") && i + 1 < argc)
			mutate = argv[++i];
	}
	go_file = argv[2];
	if (getenv("CKPT_SWAP_SOCK"))
		pthread_create(&swap, NULL, swapper, getenv("CKPT_SWAP_SOCK"));
	CK(cuInit(0));
	CK(cuDeviceGet(&dev, 0));
	CK(cuDevicePrimaryCtxRetain(&ctx, dev));
	CK(cuCtxSetCurrent(ctx));
	CK(cuModuleLoadData(&mod, device_globals_fatbin));
	CK(cuModuleGetFunction(&update, mod, "_Z14update_globalsi"));
	CK(cuModuleGetGlobal(&coef, &coef_size, mod, "coefficients"));
	CK(cuModuleGetGlobal(&counter, &counter_size, mod, "counter"));
	CK(cuMemcpyHtoD(coef, coefs, sizeof(coefs)));
	for (int i = 0; i < churn; i++) {
		CUevent e;
		CUstream st;
		CUdeviceptr p;

		CK(cuEventCreate(&e, 0));
		CK(cuStreamCreate(&st, 0));
		CK(cuMemAlloc(&p, 4096));
		CK(cuEventRecord(e, st));
		CK(cuEventDestroy(e));
		CK(cuStreamDestroy(st));
		CK(cuMemFree(p));
	}
	/* Objects that die before the checkpoint: replay must skip them. */
	CK(cuMemAlloc(&scratch, 1 << 20));
	CK(cuStreamCreate(&gone, 0));
	CK(cuStreamDestroy(gone));
	for (int b = 0; b < NBUF; b++) {
		CK(cuMemAlloc(&buf[b], sizes[b]));
		host = malloc(sizes[b]);
		for (size_t i = 0; i < sizes[b]; i++)
			host[i] = pattern(b, i);
		CK(cuMemcpyHtoD(buf[b], host, sizes[b]));
		free(host);
	}
	CK(cuMemFree(scratch));
	CK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
	CK(cuEventCreate(&ev, 0));
	CK(cuEventCreate(&start, 0));
	CK(cuMemAllocHost((void **)&pinned, 1 << 20));
	for (size_t i = 0; i < 1 << 20; i++)
		pinned[i] = pattern(9, i);
	CK(cuEventRecord(start, stream));
	CK(cuLaunchKernel(update, 1, 1, 1, 32, 1, 1, 0, stream, kargs, NULL));
	CK(cuEventRecord(ev, stream));
	CK(cuStreamSynchronize(stream));
	CK(cuEventElapsedTime(&ms, start, ev));
	CK(cuMemcpyDtoH(&value, counter, sizeof(value)));
	if (value != 42 + rounds * 3) {
		fprintf(stderr, "ckpt_client: counter %d before the checkpoint\n", value);
		return 1;
	}
	busy_buf = buf[1];
	if (deferred) {
		CUresult r = cuLaunchKernel(update, 1, 1, 1, 2048, 1, 1, 0, stream, kargs, NULL);

		if (r != CUDA_SUCCESS && r != CUDA_ERROR_INVALID_VALUE)
			CK(r);
		posted_error = r == CUDA_SUCCESS;
		printf("ckpt_client: the refused launch answered %d\n", r);
	}
	if (busy_thread)
		pthread_create(&busy, NULL, busy_main, NULL);
	{
		char tmp[4096];

		snprintf(tmp, sizeof(tmp), "%s.tmp", argv[1]);
		f = fopen(tmp, "w");
		for (int b = 0; b < NBUF; b++)
			fprintf(f, "%#llx %zu %d\n", (unsigned long long)buf[b], sizes[b], b);
		fprintf(f, "pid %d\n", (int)getpid());
		fclose(f);
		rename(tmp, argv[1]);
	}
	while (!exists(go_file)) {
		if (mutate && !mutated && exists(mutate)) {
			unsigned char flipped = (unsigned char)~pattern(MUTATED_BUF, MUTATED_AT);
			char done[4096];

			CK(cuMemcpyHtoD(buf[MUTATED_BUF] + MUTATED_AT, &flipped, 1));
			snprintf(done, sizeof(done), "%s.done", mutate);
			fclose(fopen(done, "w"));
			mutated = true;
		}
		usleep(20000);
	}
	if (posted_error) {
		CUresult r = cuCtxSynchronize();

		if (r != CUDA_ERROR_INVALID_VALUE) {
			fprintf(stderr, "ckpt_client: the posted launch's error was not reported (%d)\n", r);
			return 1;
		}
		printf("ckpt_client: the posted launch's error came at the synchronisation\n");
		CK(cuCtxSynchronize());
	}
	/* Events recorded before the checkpoint are still recorded (and complete): they time. */
	CK(cuEventQuery(ev));
	CK(cuEventElapsedTime(&ms, start, ev));
	if (!(ms >= 0)) {
		fprintf(stderr, "ckpt_client: elapsed time %f between events recorded in order\n", ms);
		return 1;
	}
	/* After the checkpoint (and maybe a restore): same addresses, same bytes, same module state. */
	for (int b = 0; b < NBUF; b++) {
		host = malloc(sizes[b]);
		CK(cuMemcpyDtoH(host, buf[b], sizes[b]));
		for (size_t i = 0; i < sizes[b]; i++) {
			unsigned char want = pattern(b, i);

			if (mutated && b == MUTATED_BUF && i == MUTATED_AT)
				want = (unsigned char)~want;
			if (host[i] != want) {
				fprintf(stderr, "ckpt_client: buffer %d byte %zu: %u, expected %u\n", b, i,
					host[i], want);
				return 1;
			}
		}
		free(host);
	}
	CK(cuMemcpyDtoH(&value, counter, sizeof(value)));
	if (value != 42 + rounds * 3) {
		fprintf(stderr, "ckpt_client: counter %d after the checkpoint, expected %d\n", value,
			42 + rounds * 3);
		return 1;
	}
	/* The module's function, the stream and the event still work, and __constant__ data came back. */
	CK(cuLaunchKernel(update, 1, 1, 1, 32, 1, 1, 0, stream, kargs, NULL));
	CK(cuEventRecord(ev, stream));
	CK(cuEventSynchronize(ev));
	CK(cuMemcpyDtoH(&value, counter, sizeof(value)));
	if (value != 42 + 2 * rounds * 3) {
		fprintf(stderr, "ckpt_client: counter %d after one more launch, expected %d\n", value,
			42 + 2 * rounds * 3);
		return 1;
	}
	/* Pinned memory works with the (possibly new) session. */
	CK(cuMemcpyHtoD(buf[2], pinned, sizes[2]));
	CK(cuMemcpyDtoH(pinned + sizes[2], buf[2], sizes[2]));
	if (memcmp(pinned, pinned + sizes[2], sizes[2])) {
		fprintf(stderr, "ckpt_client: pinned round trip differs\n");
		return 1;
	}
	if (busy_thread) {
		pthread_join(busy, NULL);
		printf("busy rounds %ld\n", busy_rounds);
	}
	printf("ckpt_client: OK\n");
	return 0;
}
