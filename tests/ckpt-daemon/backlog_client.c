/* A client whose posted calls are still waiting in the ring when a checkpoint quiesces it: it launches
 * a kernel that holds its stream, then an async copy from pageable memory on that stream (the daemon
 * waits for the stream before it lets the copy's record go), then LAUNCHES launches that each add one
 * to a counter, and goes idle (READY). A quiesce now finds the client idle and the launches waiting:
 * every one must run, before the checkpoint or after, exactly once.
 *   backlog_client READY GO */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

extern const unsigned char backlog_fatbin[];

#define LAUNCHES 2000
#define SPIN_MS	 400

#define CK(call)                                                                                             \
	do {                                                                                                 \
		CUresult r_ = (call);                                                                        \
		if (r_ != CUDA_SUCCESS) {                                                                    \
			fprintf(stderr, "backlog_client: %s:%d: %s: error %d\n", __FILE__, __LINE__, #call,  \
				r_);                                                                         \
			exit(3);                                                                             \
		}                                                                                            \
	} while (0)

int main(int argc, char **argv)
{
	CUcontext ctx;
	CUmodule mod;
	CUfunction spin, bump;
	CUdeviceptr counter, scratch;
	CUstream stream;
	unsigned ms = SPIN_MS, word = 7;
	unsigned long long value = 0;
	void *spin_args[] = {&ms}, *bump_args[] = {&counter};
	struct stat st;
	FILE *f;

	if (argc != 3) {
		fprintf(stderr, "usage: backlog_client READY GO\n");
		return 2;
	}
	CK(cuInit(0));
	CK(cuDevicePrimaryCtxRetain(&ctx, 0));
	CK(cuCtxSetCurrent(ctx));
	CK(cuModuleLoadData(&mod, backlog_fatbin));
	CK(cuModuleGetFunction(&spin, mod, "backlog_spin"));
	CK(cuModuleGetFunction(&bump, mod, "backlog_bump"));
	CK(cuMemAlloc(&counter, sizeof(value)));
	CK(cuMemAlloc(&scratch, sizeof(word)));
	CK(cuMemsetD8(counter, 0, sizeof(value)));
	CK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));

	CK(cuLaunchKernel(spin, 1, 1, 1, 1, 1, 1, 0, stream, spin_args, NULL));
	CK(cuMemcpyHtoDAsync(scratch, &word, sizeof(word), stream));
	for (int i = 0; i < LAUNCHES; i++)
		CK(cuLaunchKernel(bump, 1, 1, 1, 1, 1, 1, 0, stream, bump_args, NULL));

	f = fopen(argv[1], "w");
	if (!f)
		return 2;
	fprintf(f, "pid %d\n", (int)getpid());
	fclose(f);
	while (stat(argv[2], &st))
		usleep(20000);

	CK(cuStreamSynchronize(stream));
	CK(cuMemcpyDtoH(&value, counter, sizeof(value)));
	if (value != LAUNCHES) {
		fprintf(stderr, "backlog_client: %llu of %d launches ran\n", value, LAUNCHES);
		return 1;
	}
	printf("backlog_client: OK (%d launches)\n", LAUNCHES);
	return 0;
}
