/* fwd_loop: a driver-API client for the forwarding tests.
 *   fwd_loop hold MIB     allocate MIB of device memory, print "ready", then copy in and out of it
 *                         until a call fails: exit 3 on that error (the daemon went away), never hang.
 *   fwd_loop meminfo      print the free device memory (cuMemGetInfo) and exit 0.
 *   fwd_loop smoke        init and one round trip; exit 0, or 1 with the error.
 *   fwd_loop wait MS      launch a kernel that runs MS milliseconds, print "waiting", then wait for it
 *                         in cuCtxSynchronize: exit 3 with the error it returns (the daemon or the
 *                         worker went away meanwhile), 0 when the kernel ended. */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern const unsigned char backlog_fatbin[];

static const char *name(CUresult r)
{
	const char *s = NULL;

	cuGetErrorName(r, &s);
	return s ? s : "?";
}

#define TRY(call)                                                                                            \
	do {                                                                                                 \
		CUresult r_ = (call);                                                                        \
		if (r_ != CUDA_SUCCESS) {                                                                    \
			fprintf(stderr, "fwd_loop: %s: %s (%d)\n", #call, name(r_), (int)r_);                \
			return 3;                                                                            \
		}                                                                                            \
	} while (0)

int main(int argc, char **argv)
{
	CUdevice dev;
	CUcontext ctx;
	size_t free_bytes, total;

	if (argc < 2)
		return 2;
	TRY(cuInit(0));
	TRY(cuDeviceGet(&dev, 0));
	TRY(cuDevicePrimaryCtxRetain(&ctx, dev));
	TRY(cuCtxSetCurrent(ctx));
	if (!strcmp(argv[1], "meminfo")) {
		TRY(cuMemGetInfo(&free_bytes, &total));
		printf("%zu\n", free_bytes);
		return 0;
	}
	if (!strcmp(argv[1], "smoke")) {
		TRY(cuMemGetInfo(&free_bytes, &total));
		return 0;
	}
	if (!strcmp(argv[1], "wait") && argc == 3) {
		unsigned ms = (unsigned)strtoul(argv[2], NULL, 0);
		void *args[] = {&ms};
		CUmodule mod;
		CUfunction spin;
		CUresult r;

		TRY(cuModuleLoadData(&mod, backlog_fatbin));
		TRY(cuModuleGetFunction(&spin, mod, "backlog_spin"));
		TRY(cuLaunchKernel(spin, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL));
		printf("waiting\n");
		fflush(stdout);
		r = cuCtxSynchronize();
		fprintf(stderr, "fwd_loop: cuCtxSynchronize: %s (%d)\n", name(r), (int)r);
		return r == CUDA_SUCCESS ? 0 : 3;
	}
	if (!strcmp(argv[1], "hold") && argc == 3) {
		size_t bytes = strtoull(argv[2], NULL, 0) << 20, n = 1 << 20;
		CUdeviceptr d;
		char *buf = malloc(n);

		CUresult r;

		if (!buf)
			return 2;
		TRY(cuMemAlloc(&d, bytes));
		memset(buf, 0x5a, n);
		printf("ready\n");
		fflush(stdout);
		do {
			r = cuMemcpyHtoD(d, buf, n);
			if (r == CUDA_SUCCESS)
				r = cuMemcpyDtoH(buf, d, n);
			usleep(1000);
		} while (r == CUDA_SUCCESS);
		fprintf(stderr, "fwd_loop: copy: %s (%d)\n", name(r), (int)r);
		free(buf);
		return 3;
	}
	return 2;
}
