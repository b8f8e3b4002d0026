// state_rt: tests/programs/state_app written against the CUDA runtime (cudart), for checkpoint/restore
// of nvcc-built programs (tests/cr, CR_APP=cudart_state_rt_static|shared). The same kernels, options and
// checksum line: --mb --chunks --steps --ready-at --ready-file --go-file --seed. Halfway it writes the
// ready file with steps still in flight and waits for the go file.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cudart_test.h"

// The kernels are state_app's own source (same names and bodies), so the simulated device runs them with
// state_app's host implementations.
#include "../programs/state_app.cu"

// --mvar: __managed__ variables the CPU and a kernel update in turns each step (the CPU writes the step's
// word of mv_steps while earlier kernels may still run, which read other words; mv_fold folds it into
// mv_acc; the CPU reads mv_acc after the stream's work at every third step); mv_acc, mv_steps and what
// the CPU read are in the checksum.
#define MV_WORDS 64
__managed__ unsigned long long mv_acc = 0x9e3779b97f4a7c15ull;
__managed__ unsigned mv_steps[MV_WORDS];

// <<<1, 1>>>
__global__ void mv_fold(unsigned step)
{
	mv_acc = (mv_acc * 31 + mv_steps[step % MV_WORDS]) ^ step;
}

int main(int argc, char **argv)
{
	unsigned long mb = 64;
	unsigned chunks = 4, steps = 20, ready_at = ~0u, seed = 7;
	const char *ready_file = NULL, *go_file = NULL;
	bool mvar = false;
	for (int i = 1; i < argc; i += 2) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : "";
		if (!strcmp(a, "--mvar")) {
			mvar = true;
			i--;
		} else if (!strcmp(a, "--mb"))
			mb = strtoul(v, NULL, 0);
		else if (!strcmp(a, "--chunks"))
			chunks = (unsigned)strtoul(v, NULL, 0);
		else if (!strcmp(a, "--steps"))
			steps = (unsigned)strtoul(v, NULL, 0);
		else if (!strcmp(a, "--ready-at"))
			ready_at = (unsigned)strtoul(v, NULL, 0);
		else if (!strcmp(a, "--seed"))
			seed = (unsigned)strtoul(v, NULL, 0);
		else if (!strcmp(a, "--ready-file"))
			ready_file = v;
		else if (!strcmp(a, "--go-file"))
			go_file = v;
		else {
			fprintf(stderr, "state_rt: unknown option %s\n", a);
			return 2;
		}
	}
	if (ready_at == ~0u)
		ready_at = steps / 2;
	cudart_test_init("state_rt");
	unsigned long long words = ((unsigned long long)mb << 20) / 4 / chunks;
	unsigned **bufs = (unsigned **)calloc(chunks, sizeof(*bufs));
	CHECK(bufs);
	cudaStream_t stream;
	CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
	for (unsigned c = 0; c < chunks; c++) {
		CUDA_CHECK(cudaMalloc(&bufs[c], words * 4));
		state_init<<<264, 256, 0, stream>>>(bufs[c], words, seed + c);
		CUDA_CHECK_LAUNCH();
	}
	unsigned long long mv_seen = 0;
	for (unsigned step = 1; step <= steps; step++) {
		for (unsigned c = 0; c < chunks; c++) {
			state_step<<<264, 256, 0, stream>>>(bufs[c], words, step);
			CUDA_CHECK_LAUNCH();
		}
		if (mvar) {
			mv_steps[step % MV_WORDS] += step * 2654435761u ^ seed;
			mv_fold<<<1, 1, 0, stream>>>(step);
			CUDA_CHECK_LAUNCH();
			if (step % 3 == 0) {
				CUDA_CHECK(cudaStreamSynchronize(stream));
				mv_seen = mv_seen * 1000003 ^ mv_acc;
			}
		}
		if (step == ready_at && ready_file) {
			char tmp[4096];
			snprintf(tmp, sizeof(tmp), "%s.tmp", ready_file);
			FILE *f = fopen(tmp, "w");
			CHECK(f && fprintf(f, "ready %u\n", step) > 0 && !fclose(f) && !rename(tmp, ready_file));
			while (go_file && access(go_file, F_OK))
				usleep(10000);
		}
	}
	unsigned long long *dsum, part, total = 0;
	CUDA_CHECK(cudaMalloc(&dsum, sizeof(*dsum)));
	for (unsigned c = 0; c < chunks; c++) {
		CUDA_CHECK(cudaMemsetAsync(dsum, 0, sizeof(*dsum), stream));
		state_checksum<<<264, 256, 0, stream>>>(bufs[c], words, dsum);
		CUDA_CHECK_LAUNCH();
		CUDA_CHECK(cudaMemcpyAsync(&part, dsum, sizeof(part), cudaMemcpyDeviceToHost, stream));
		CUDA_CHECK(cudaStreamSynchronize(stream));
		total += part * (c + 1);
	}
	if (mvar) {
		CUDA_CHECK(cudaStreamSynchronize(stream));
		total ^= mv_acc * 7 + mv_seen;
		for (int i = 0; i < MV_WORDS; i++)
			total += (unsigned long long)mv_steps[i] << (i % 32);
	}
	printf("state_rt: mb=%lu chunks=%u steps=%u checksum=%016llx\n", mb, chunks, steps, total);
	for (unsigned c = 0; c < chunks; c++)
		CUDA_CHECK(cudaFree(bufs[c]));
	CUDA_CHECK(cudaFree(dsum));
	CUDA_CHECK(cudaStreamDestroy(stream));
	free(bufs);
	return 0;
}
