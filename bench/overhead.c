/* bench/overhead: the costs the forwarding layer adds, measured by one driver-API program that runs
 * unchanged natively and under crcuda (bench/overhead.sh runs both and prints them side by side).
 * Prints "name value unit" lines:
 *   roundtrip_us        cuCtxSynchronize on an idle context (a call that must reach the GPU owner)
 *   launch_rate         empty-kernel launches per second, queued on one stream, then synchronized
 *   graph_launch_rate   cuGraphLaunch of a captured graph of 8 empty kernels, per second, likewise
 *   h2d_pinned_gbs ...  1 GiB copies, pinned (cuMemAllocHost) and pageable (malloc), each way
 *   h2d_registered_gbs  the same from and to malloc'd memory the program registered (cuMemHostRegister)
 *   managed_*_gbs       managed memory (at most 256 MiB): the CPU writes it and a kernel reads it, a
 *                       kernel writes it and the CPU reads it, and a loop of kernels over it once
 *                       prefetched to the GPU (read + written bytes per second); results checked
 * Each figure is the best of several repetitions. Options: --size-mb N (copy size, default 1024),
 * --launches N (default 200000), --syncs N (default 20000). */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

extern const unsigned char overhead_fatbin[];

#define CK(call)                                                                                             \
	do {                                                                                                 \
		CUresult ck_res_ = (call);                                                                   \
		if (ck_res_ != CUDA_SUCCESS) {                                                               \
			const char *ck_name_ = "?";                                                          \
			cuGetErrorName(ck_res_, &ck_name_);                                                  \
			fprintf(stderr, "overhead: %s failed: %s (%d)\n", #call, ck_name_, (int)ck_res_);    \
			exit(1);                                                                             \
		}                                                                                            \
	} while (0)

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double best_copy_gbs(CUdeviceptr dev, void *host, size_t bytes, int to_device, CUstream s)
{
	double best = 0;
	for (int rep = 0; rep < 4; rep++) {
		double t0 = now_s();
		if (to_device)
			CK(cuMemcpyHtoDAsync(dev, host, bytes, s));
		else
			CK(cuMemcpyDtoHAsync(host, dev, bytes, s));
		CK(cuStreamSynchronize(s));
		double gbs = (double)bytes / (now_s() - t0) / 1e9;
		if (rep > 0 && gbs > best) /* the first repetition warms up */
			best = gbs;
	}
	return best;
}

/* Registered memory: the program's own page-aligned buffer, as fast as pinned memory is the goal. */
static void bench_registered(CUdeviceptr dbuf, size_t bytes, CUstream s)
{
	void *reg = NULL;

	if (posix_memalign(&reg, 4096, bytes))
		exit(1);
	memset(reg, 3, bytes);
	CK(cuMemHostRegister(reg, bytes, 0));
	printf("h2d_registered_gbs %.2f GB/s\n", best_copy_gbs(dbuf, reg, bytes, 1, s));
	memset(reg, 0, bytes);
	printf("d2h_registered_gbs %.2f GB/s\n", best_copy_gbs(dbuf, reg, bytes, 0, s));
	for (size_t i = 0; i < bytes; i += bytes / 16)
		if (((unsigned char *)reg)[i] != 3) {
			fprintf(stderr,
				"overhead: D2H copy into registered memory returned wrong bytes at %zu\n", i);
			exit(1);
		}
	CK(cuMemHostUnregister(reg));
	free(reg);
}

static void launch_on(CUfunction f, CUstream s, void **params)
{
	CK(cuLaunchKernel(f, 1024, 1, 1, 256, 1, 1, 0, s, params, NULL));
}

static void check_sum(const char *what, unsigned long long got, unsigned long long want)
{
	if (got != want) {
		fprintf(stderr, "overhead: %s: sum %#llx, expected %#llx\n", what, got, want);
		exit(1);
	}
}

/* Managed memory: who touches it in turn (CPU then GPU, GPU then CPU), and kernels over memory
 * prefetched to the GPU; every phase's result checked. */
static void bench_managed(CUmodule mod, size_t bytes, CUstream s)
{
	CUfunction fill, step, sum;
	CUdeviceptr m, out;
	CUdevice dev;
	unsigned long long n = bytes / sizeof(unsigned), got, v = 0;
	const int steps = 20, reps = 3;
	double best_in = 0, best_out = 0, best_loop = 0;

	CK(cuModuleGetFunction(&fill, mod, "fill_kernel"));
	CK(cuModuleGetFunction(&step, mod, "step_kernel"));
	CK(cuModuleGetFunction(&sum, mod, "sum_kernel"));
	CK(cuCtxGetDevice(&dev));
	CK(cuMemAllocManaged(&m, bytes, CU_MEM_ATTACH_GLOBAL));
	CK(cuMemAlloc(&out, sizeof(got)));
	unsigned *a = (unsigned *)(uintptr_t)m;
	void *sum_params[] = {&m, &n, &out}, *fill_params[] = {&m, &n, &v}, *step_params[] = {&m, &n};
	const unsigned long long triangle = n * (n - 1) / 2;

	for (unsigned rep = 0; rep <= (unsigned)reps; rep++) {
		double t0 = now_s();
		for (unsigned long long i = 0; i < n; i++)
			a[i] = rep + (unsigned)i;
		CK(cuMemsetD32Async(out, 0, 2, s));
		launch_on(sum, s, sum_params);
		CK(cuStreamSynchronize(s));
		double gbs = (double)bytes / (now_s() - t0) / 1e9;
		CK(cuMemcpyDtoH(&got, out, sizeof(got)));
		check_sum("CPU writes, kernel reads", got, n * rep + triangle);
		if (rep > 0 && gbs > best_in)
			best_in = gbs;

		v = 7ull * rep;
		t0 = now_s();
		launch_on(fill, s, fill_params);
		CK(cuStreamSynchronize(s));
		got = 0;
		for (unsigned long long i = 0; i < n; i++)
			got += a[i];
		gbs = (double)bytes / (now_s() - t0) / 1e9;
		check_sum("kernel writes, CPU reads", got, n * v + triangle);
		if (rep > 0 && gbs > best_out)
			best_out = gbs;
	}
	printf("managed_cpu_to_kernel_gbs %.2f GB/s\n", best_in);
	printf("managed_kernel_to_cpu_gbs %.2f GB/s\n", best_out);

	CUmemLocation gpu = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev};
	CK(cuMemPrefetchAsync(m, bytes, gpu, 0, s));
	CK(cuStreamSynchronize(s));
	for (int rep = 0; rep < reps; rep++) {
		double t0 = now_s();
		for (int k = 0; k < steps; k++)
			launch_on(step, s, step_params);
		CK(cuStreamSynchronize(s));
		double gbs = 2.0 * steps * (double)bytes / (now_s() - t0) / 1e9;
		if (gbs > best_loop)
			best_loop = gbs;
	}
	/* The CPU reads the kernels' results where they left them. */
	for (unsigned long long i = 0; i < n; i += n / 61 + 1) {
		unsigned want = (unsigned)v + (unsigned)i;
		for (int k = 0; k < steps * reps; k++)
			want = want * 3u + 1u;
		if (a[i] != want) {
			fprintf(stderr,
				"overhead: managed element %llu is %#x after the loop, expected %#x\n", i,
				a[i], want);
			exit(1);
		}
	}
	printf("managed_prefetched_loop_gbs %.2f GB/s\n", best_loop);
	CK(cuMemFree(m));
	CK(cuMemFree(out));
}

int main(int argc, char **argv)
{
	size_t size_mb = 1024;
	long launches = 200000, syncs = 20000;
	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--size-mb"))
			size_mb = strtoul(argv[i + 1], NULL, 0);
		else if (!strcmp(argv[i], "--launches"))
			launches = strtol(argv[i + 1], NULL, 0);
		else if (!strcmp(argv[i], "--syncs"))
			syncs = strtol(argv[i + 1], NULL, 0);
		else {
			fprintf(stderr, "usage: overhead [--size-mb N] [--launches N] [--syncs N]\n");
			return 2;
		}
	}
	CUdevice dev;
	CUcontext ctx;
	CUmodule mod;
	CUfunction empty, touch;
	CUstream s;
	CK(cuInit(0));
	CK(cuDeviceGet(&dev, 0));
	CK(cuDevicePrimaryCtxRetain(&ctx, dev));
	CK(cuCtxSetCurrent(ctx));
	CK(cuModuleLoadData(&mod, overhead_fatbin));
	CK(cuModuleGetFunction(&empty, mod, "empty_kernel"));
	CK(cuModuleGetFunction(&touch, mod, "touch_kernel"));
	CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));

	/* Round trip. */
	double best_rt = 1e9;
	for (int rep = 0; rep < 3; rep++) {
		double t0 = now_s();
		for (long i = 0; i < syncs; i++)
			CK(cuCtxSynchronize());
		double us = (now_s() - t0) / (double)syncs * 1e6;
		if (us < best_rt)
			best_rt = us;
	}
	printf("roundtrip_us %.3f us\n", best_rt);

	/* Launch rate: empty kernels queued back to back. */
	double best_rate = 0;
	for (int rep = 0; rep < 3; rep++) {
		double t0 = now_s();
		for (long i = 0; i < launches; i++)
			CK(cuLaunchKernel(empty, 1, 1, 1, 1, 1, 1, 0, s, NULL, NULL));
		CK(cuStreamSynchronize(s));
		double rate = (double)launches / (now_s() - t0);
		if (rate > best_rate)
			best_rate = rate;
	}
	printf("launch_rate %.0f launches/s\n", best_rate);

	/* Graph launches: one call runs a captured graph of 8 kernels. */
	CUgraph graph;
	CUgraphExec exec;
	CK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
	for (int k = 0; k < 8; k++)
		CK(cuLaunchKernel(empty, 1, 1, 1, 1, 1, 1, 0, s, NULL, NULL));
	CK(cuStreamEndCapture(s, &graph));
	CK(cuGraphInstantiateWithFlags(&exec, graph, 0));
	best_rate = 0;
	for (int rep = 0; rep < 3; rep++) {
		double t0 = now_s();
		for (long i = 0; i < launches / 8; i++)
			CK(cuGraphLaunch(exec, s));
		CK(cuStreamSynchronize(s));
		double rate = (double)(launches / 8) / (now_s() - t0);
		if (rate > best_rate)
			best_rate = rate;
	}
	CK(cuGraphExecDestroy(exec));
	CK(cuGraphDestroy(graph));
	printf("graph_launch_rate %.0f graphs/s\n", best_rate);

	/* A launch with parameters whose effect is checked: the bench measures a working layer. */
	CUdeviceptr flag;
	int v = 0x5eed, got = 0;
	CK(cuMemAlloc(&flag, sizeof(int)));
	void *params[] = {&flag, &v};
	CK(cuLaunchKernel(touch, 1, 1, 1, 32, 1, 1, 0, s, params, NULL));
	CK(cuStreamSynchronize(s));
	CK(cuMemcpyDtoH(&got, flag, sizeof(got)));
	if (got != v) {
		fprintf(stderr, "overhead: touch_kernel wrote %#x, expected %#x\n", got, v);
		return 1;
	}

	/* Copy bandwidth. */
	size_t bytes = size_mb << 20;
	CUdeviceptr dbuf;
	void *pinned, *pageable = malloc(bytes);
	CK(cuMemAlloc(&dbuf, bytes));
	CK(cuMemAllocHost(&pinned, bytes));
	if (!pageable)
		return 1;
	memset(pinned, 1, bytes);
	memset(pageable, 2, bytes);
	printf("h2d_pinned_gbs %.2f GB/s\n", best_copy_gbs(dbuf, pinned, bytes, 1, s));
	printf("d2h_pinned_gbs %.2f GB/s\n", best_copy_gbs(dbuf, pinned, bytes, 0, s));
	printf("h2d_pageable_gbs %.2f GB/s\n", best_copy_gbs(dbuf, pageable, bytes, 1, s));
	printf("d2h_pageable_gbs %.2f GB/s\n", best_copy_gbs(dbuf, pageable, bytes, 0, s));
	/* The last copy brought back what the pageable H2D wrote: check a few bytes of it. */
	for (size_t i = 0; i < bytes; i += bytes / 16)
		if (((unsigned char *)pageable)[i] != 2) {
			fprintf(stderr, "overhead: D2H copy returned wrong bytes at %zu\n", i);
			return 1;
		}
	bench_registered(dbuf, bytes, s);
	bench_managed(mod, bytes < (256u << 20) ? bytes : (256u << 20), s);

	CK(cuMemFreeHost(pinned));
	CK(cuMemFree(dbuf));
	CK(cuMemFree(flag));
	free(pageable);
	CK(cuStreamDestroy(s));
	CK(cuModuleUnload(mod));
	CK(cuDevicePrimaryCtxRelease(dev));
	return 0;
}
