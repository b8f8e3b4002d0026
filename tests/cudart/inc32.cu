// inc32: 32 doubles, each incremented by one thread of a <<<1, 32>>> launch (the program crcuda
// started from): copy in, launch, copy out, check.
#include "cudart_test.h"

#define N 32

__global__ void inc(double *a)
{
	a[threadIdx.x] += 1.0;
}

int main(void)
{
	double host[N], *dev;

	cudart_test_init("inc32");
	for (int i = 0; i < N; i++)
		host[i] = i * 0.5;
	CUDA_CHECK(cudaMalloc(&dev, sizeof(host)));
	CUDA_CHECK(cudaMemcpy(dev, host, sizeof(host), cudaMemcpyHostToDevice));
	inc<<<1, N>>>(dev);
	CUDA_CHECK_LAUNCH();
	CUDA_CHECK(cudaMemcpy(host, dev, sizeof(host), cudaMemcpyDeviceToHost));
	for (int i = 0; i < N; i++)
		CHECK(host[i] == i * 0.5 + 1.0);
	CUDA_CHECK(cudaFree(dev));
	return cudart_test_pass("inc32");
}
