// streams_events: a dependency chain across three non-blocking streams, ordered only by events.
// Stream a fills `a` slowly (one increment at a time), b waits for it and derives `b`, c waits for
// both and combines them; timing events bracket the chain. Without the waits, b and c would read
// stale values.
#include "cudart_test.h"

#define N	4096
#define ROUNDS	2000
#define THREADS 256

__global__ void busy_fill(volatile int *a, int rounds, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i >= n)
		return;
	for (int r = 0; r < rounds; r++)
		a[i] = a[i] + 1;
	a[i] = a[i] + i;
}

__global__ void derive(const int *a, int *b, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n)
		b[i] = 2 * a[i] + 1;
}

__global__ void subtract(const int *a, const int *b, int *c, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n)
		c[i] = b[i] - a[i];
}

int main(void)
{
	const int blocks = (N + THREADS - 1) / THREADS;
	static int host[N];
	cudaStream_t sa, sb, sc;
	cudaEvent_t start, stop, a_done, b_done;
	int *a, *b, *c;
	float ms = -1.0f;

	cudart_test_init("streams_events");
	CUDA_CHECK(cudaStreamCreateWithFlags(&sa, cudaStreamNonBlocking));
	CUDA_CHECK(cudaStreamCreateWithFlags(&sb, cudaStreamNonBlocking));
	CUDA_CHECK(cudaStreamCreateWithFlags(&sc, cudaStreamNonBlocking));
	CUDA_CHECK(cudaEventCreate(&start));
	CUDA_CHECK(cudaEventCreate(&stop));
	CUDA_CHECK(cudaEventCreateWithFlags(&a_done, cudaEventDisableTiming));
	CUDA_CHECK(cudaEventCreateWithFlags(&b_done, cudaEventDisableTiming));
	CUDA_CHECK(cudaMalloc(&a, N * sizeof(int)));
	CUDA_CHECK(cudaMalloc(&b, N * sizeof(int)));
	CUDA_CHECK(cudaMalloc(&c, N * sizeof(int)));
	CUDA_CHECK(cudaMemset(b, 0, N * sizeof(int)));
	CUDA_CHECK(cudaMemset(c, 0, N * sizeof(int)));
	CUDA_CHECK(cudaDeviceSynchronize());

	CUDA_CHECK(cudaEventRecord(start, sa));
	CUDA_CHECK(cudaMemsetAsync(a, 0, N * sizeof(int), sa));
	busy_fill<<<blocks, THREADS, 0, sa>>>(a, ROUNDS, N);
	CUDA_CHECK_LAUNCH();
	CUDA_CHECK(cudaEventRecord(a_done, sa));

	CUDA_CHECK(cudaStreamWaitEvent(sb, a_done, 0));
	derive<<<blocks, THREADS, 0, sb>>>(a, b, N);
	CUDA_CHECK_LAUNCH();
	CUDA_CHECK(cudaEventRecord(b_done, sb));

	CUDA_CHECK(cudaStreamWaitEvent(sc, a_done, 0));
	CUDA_CHECK(cudaStreamWaitEvent(sc, b_done, 0));
	subtract<<<blocks, THREADS, 0, sc>>>(a, b, c, N);
	CUDA_CHECK_LAUNCH();
	CUDA_CHECK(cudaMemcpyAsync(host, c, sizeof(host), cudaMemcpyDeviceToHost, sc));
	CUDA_CHECK(cudaEventRecord(stop, sc));

	CUDA_CHECK(cudaEventSynchronize(stop));
	CUDA_CHECK(cudaEventQuery(stop));
	CUDA_CHECK(cudaStreamQuery(sc));
	CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
	CHECK(ms >= 0.0f);
	// c = b - a = (2a + 1) - a = a + 1 = ROUNDS + i + 1
	for (int i = 0; i < N; i++)
		CHECK_EQ_INT(host[i], ROUNDS + i + 1);

	CUDA_CHECK(cudaStreamSynchronize(sa));
	CUDA_CHECK(cudaStreamSynchronize(sb));
	CUDA_CHECK(cudaFree(a));
	CUDA_CHECK(cudaFree(b));
	CUDA_CHECK(cudaFree(c));
	CUDA_CHECK(cudaEventDestroy(start));
	CUDA_CHECK(cudaEventDestroy(stop));
	CUDA_CHECK(cudaEventDestroy(a_done));
	CUDA_CHECK(cudaEventDestroy(b_done));
	CUDA_CHECK(cudaStreamDestroy(sa));
	CUDA_CHECK(cudaStreamDestroy(sb));
	CUDA_CHECK(cudaStreamDestroy(sc));
	printf("streams_events: chain took %.3f ms\n", ms);
	return cudart_test_pass("streams_events");
}
