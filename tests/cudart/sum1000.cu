// sum1000: one device thread (<<<1, 1>>>) sums 1..n into one value; n = 1000 gives 500500.
#include "cudart_test.h"

__global__ void sum_to(long long *out, int n)
{
	long long s = 0;

	for (int i = 1; i <= n; i++)
		s += i;
	*out = s;
}

int main(void)
{
	long long *dev, result = -1;

	cudart_test_init("sum1000");
	CUDA_CHECK(cudaMalloc(&dev, sizeof(*dev)));
	CUDA_CHECK(cudaMemset(dev, 0xff, sizeof(*dev)));
	sum_to<<<1, 1>>>(dev, 1000);
	CUDA_CHECK_LAUNCH();
	CUDA_CHECK(cudaMemcpy(&result, dev, sizeof(result), cudaMemcpyDeviceToHost));
	CHECK_EQ_INT(result, 500500);
	CUDA_CHECK(cudaFree(dev));
	return cudart_test_pass("sum1000");
}
