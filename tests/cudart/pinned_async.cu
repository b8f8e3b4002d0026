// pinned_async: page-locked host buffers (cudaMallocHost), cudaMemcpyAsync both ways on one stream
// around a kernel, one synchronisation at the end.
#include "cudart_test.h"

#define N	(1 << 20)
#define THREADS 256

__global__ void affine(unsigned int *data, unsigned int mul, unsigned int add, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n)
		data[i] = data[i] * mul + add;
}

int main(void)
{
	unsigned int *in, *out, *dev;
	cudaStream_t s;

	cudart_test_init("pinned_async");
	CUDA_CHECK(cudaMallocHost(&in, N * sizeof(*in)));
	CUDA_CHECK(cudaMallocHost(&out, N * sizeof(*out)));
	CUDA_CHECK(cudaMalloc(&dev, N * sizeof(*dev)));
	CUDA_CHECK(cudaStreamCreate(&s));
	for (unsigned int i = 0; i < N; i++) {
		in[i] = i ^ 0x5a5a5a5au;
		out[i] = 0xdeadbeefu;
	}

	CUDA_CHECK(cudaMemcpyAsync(dev, in, N * sizeof(*in), cudaMemcpyHostToDevice, s));
	affine<<<N / THREADS, THREADS, 0, s>>>(dev, 2654435761u, 12345u, N);
	CUDA_CHECK_LAUNCH();
	CUDA_CHECK(cudaMemcpyAsync(out, dev, N * sizeof(*out), cudaMemcpyDeviceToHost, s));
	CUDA_CHECK(cudaStreamSynchronize(s));

	for (unsigned int i = 0; i < N; i++)
		if (out[i] != (i ^ 0x5a5a5a5au) * 2654435761u + 12345u) {
			fprintf(stderr, "pinned_async: out[%u] = %#x, expected %#x\n", i, out[i],
				(i ^ 0x5a5a5a5au) * 2654435761u + 12345u);
			return 1;
		}
	CUDA_CHECK(cudaStreamDestroy(s));
	CUDA_CHECK(cudaFree(dev));
	CUDA_CHECK(cudaFreeHost(in));
	CUDA_CHECK(cudaFreeHost(out));
	return cudart_test_pass("pinned_async");
}
