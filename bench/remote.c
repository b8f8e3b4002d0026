/* bench/remote: what a remote GPU costs per call and per byte, for bench/remote.sh (run over TLS and
 * over plaintext TCP). Prints "name value unit" lines:
 *   roundtrip_us    a synchronous call with no work (cuCtxSynchronize): one round trip to the daemon
 *   h2d_pinned_gbs  cuMemcpyHtoD from page-locked memory (cuMemAllocHost), GB/s
 *   d2h_pinned_gbs  cuMemcpyDtoH into page-locked memory, GB/s (the bytes are checked)
 * Each figure is the best of --reps repetitions. Options: --size-mb N (copy size, default 256),
 * --calls N (round trips per repetition, default 5000), --reps N (default 5). */
#include <cuda.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CHECK(call)                                                                                          \
	do {                                                                                                 \
		CUresult r_ = (call);                                                                        \
		if (r_ != CUDA_SUCCESS) {                                                                    \
			const char *n_ = NULL;                                                               \
			cuGetErrorName(r_, &n_);                                                             \
			fprintf(stderr, "remote: %s failed: %s (%d)\n", #call, n_ ? n_ : "?", (int)r_);      \
			exit(1);                                                                             \
		}                                                                                            \
	} while (0)

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
	size_t size_mb = 256, bytes;
	long calls = 5000, reps = 5;
	double best_rt = 1e30, best_h2d = 0, best_d2h = 0;
	uint64_t *src, *dst;
	CUdeviceptr dbuf;
	CUcontext ctx;
	CUdevice dev;

	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--size-mb"))
			size_mb = strtoul(argv[i + 1], NULL, 0);
		else if (!strcmp(argv[i], "--calls"))
			calls = strtol(argv[i + 1], NULL, 0);
		else if (!strcmp(argv[i], "--reps"))
			reps = strtol(argv[i + 1], NULL, 0);
		else {
			fprintf(stderr, "usage: remote [--size-mb N] [--calls N] [--reps N]\n");
			return 2;
		}
	}
	if (!size_mb || calls <= 0 || reps <= 0) {
		fprintf(stderr, "remote: --size-mb, --calls and --reps must be positive\n");
		return 2;
	}
	bytes = size_mb << 20;
	CHECK(cuInit(0));
	CHECK(cuDeviceGet(&dev, 0));
	CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
	CHECK(cuCtxSetCurrent(ctx));
	CHECK(cuMemAlloc(&dbuf, bytes));
	CHECK(cuMemAllocHost((void **)&src, bytes));
	CHECK(cuMemAllocHost((void **)&dst, bytes));
	for (size_t i = 0; i < bytes / 8; i++)
		src[i] = i * 0x9e3779b97f4a7c15ull;
	for (long r = 0; r < reps; r++) {
		double t = now(), dt;

		for (long i = 0; i < calls; i++)
			CHECK(cuCtxSynchronize());
		dt = (now() - t) / (double)calls * 1e6;
		best_rt = dt < best_rt ? dt : best_rt;
		t = now();
		CHECK(cuMemcpyHtoD(dbuf, src, bytes));
		dt = now() - t;
		best_h2d = (double)bytes / dt / 1e9 > best_h2d ? (double)bytes / dt / 1e9 : best_h2d;
		memset(dst, 0, bytes);
		t = now();
		CHECK(cuMemcpyDtoH(dst, dbuf, bytes));
		dt = now() - t;
		best_d2h = (double)bytes / dt / 1e9 > best_d2h ? (double)bytes / dt / 1e9 : best_d2h;
		if (memcmp(src, dst, bytes)) {
			fprintf(stderr, "remote: the bytes copied back differ from those sent\n");
			return 1;
		}
	}
	printf("roundtrip_us %.2f us\n", best_rt);
	printf("h2d_pinned_gbs %.3f GB/s\n", best_h2d);
	printf("d2h_pinned_gbs %.3f GB/s\n", best_d2h);
	CHECK(cuMemFreeHost(src));
	CHECK(cuMemFreeHost(dst));
	CHECK(cuMemFree(dbuf));
	CHECK(cuDevicePrimaryCtxRelease(dev));
	return 0;
}
