// ptds: built with --default-stream per-thread. Several host threads each allocate, copy in, launch
// on the default stream (their own per-thread stream), copy out and synchronise it; every thread's
// results are its own.
#include <pthread.h>

#include "cudart_test.h"

#define THREADS 8
#define N	4096
#define ROUNDS	200

__global__ void mix(unsigned int *data, unsigned int seed, int rounds, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i >= n)
		return;
	unsigned int v = data[i];
	for (int r = 0; r < rounds; r++)
		v = v * 1664525u + seed;
	data[i] = v;
}

static unsigned int expected(unsigned int seed, unsigned int i)
{
	unsigned int v = i + seed;

	for (int r = 0; r < ROUNDS; r++)
		v = v * 1664525u + seed;
	return v;
}

struct worker {
	pthread_t thread;
	unsigned int seed;
	int failed;
};

static void *work(void *arg)
{
	struct worker *w = (struct worker *)arg;
	unsigned int *host = (unsigned int *)malloc(N * sizeof(*host)), *dev;

	CHECK(host);
	for (unsigned int i = 0; i < N; i++)
		host[i] = i + w->seed;
	CUDA_CHECK(cudaMalloc(&dev, N * sizeof(*dev)));
	CUDA_CHECK(cudaMemcpyAsync(dev, host, N * sizeof(*host), cudaMemcpyHostToDevice, 0));
	for (int rep = 0; rep < 4; rep++) {
		mix<<<N / 256, 256>>>(dev, w->seed, ROUNDS / 4, N);
		CUDA_CHECK_LAUNCH();
	}
	CUDA_CHECK(cudaMemcpyAsync(host, dev, N * sizeof(*host), cudaMemcpyDeviceToHost, 0));
	CUDA_CHECK(cudaStreamSynchronize(0)); // stream 0 is this thread's own here
	for (unsigned int i = 0; i < N; i++)
		if (host[i] != expected(w->seed, i)) {
			fprintf(stderr, "ptds: seed %u: [%u] = %#x, expected %#x\n", w->seed, i, host[i],
				expected(w->seed, i));
			w->failed = 1;
			break;
		}
	CUDA_CHECK(cudaFree(dev));
	free(host);
	return NULL;
}

int main(void)
{
	struct worker workers[THREADS];
	int failed = 0;

	cudart_test_init("ptds");
	for (int t = 0; t < THREADS; t++) {
		workers[t].seed = 1000003u * (t + 1);
		workers[t].failed = 0;
		CHECK(pthread_create(&workers[t].thread, NULL, work, &workers[t]) == 0);
	}
	for (int t = 0; t < THREADS; t++) {
		CHECK(pthread_join(workers[t].thread, NULL) == 0);
		failed |= workers[t].failed;
	}
	if (failed)
		return 1;
	return cudart_test_pass("ptds");
}
