// many_launches: 10000 back-to-back launches of a one-thread kernel, each adding its own argument,
// so a lost, repeated or reordered-with-wrong-arguments launch changes the total.
#include "cudart_test.h"

#define LAUNCHES 10000

__global__ void add(unsigned long long *counter, unsigned int value)
{
	*counter += value;
}

int main(void)
{
	unsigned long long *dev, total = 0;

	cudart_test_init("many_launches");
	CUDA_CHECK(cudaMalloc(&dev, sizeof(*dev)));
	CUDA_CHECK(cudaMemset(dev, 0, sizeof(*dev)));
	for (unsigned int i = 1; i <= LAUNCHES; i++)
		add<<<1, 1>>>(dev, i);
	CUDA_CHECK_LAUNCH();
	CUDA_CHECK(cudaDeviceSynchronize());
	CUDA_CHECK(cudaMemcpy(&total, dev, sizeof(total), cudaMemcpyDeviceToHost));
	CHECK_EQ_INT(total, (unsigned long long)LAUNCHES * (LAUNCHES + 1) / 2);
	CUDA_CHECK(cudaFree(dev));
	return cudart_test_pass("many_launches");
}
