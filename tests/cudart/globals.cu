// globals: a __constant__ array set with cudaMemcpyToSymbol (whole, then one element at an offset),
// and __device__ variables with initialisers: read before the kernels, updated by them, read back
// with cudaMemcpyFromSymbol.
#include "cudart_test.h"

#define N 64

__constant__ int coeffs[4];
__device__ int table[4] = {10, 20, 30, 40};
__device__ unsigned int counter = 42;

__global__ void apply(int *out, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i >= n)
		return;
	out[i] = coeffs[i % 4] * i + table[i % 4];
	atomicAdd(&counter, 1u);
}

// <<<1, 4>>>, after apply: table[k] += coeffs[k].
__global__ void bump_table(void)
{
	table[threadIdx.x] += coeffs[threadIdx.x];
}

int main(void)
{
	const int want_coeffs[4] = {3, -1, 7, 100};
	int first[4] = {3, -1, 7, 0}, last = 100, out[N], tab[4], c3 = 0, *dev;
	unsigned int count = 0;

	cudart_test_init("globals");
	CUDA_CHECK(cudaMemcpyFromSymbol(&count, counter, sizeof(count)));
	CHECK_EQ_INT(count, 42);
	CUDA_CHECK(cudaMemcpyFromSymbol(tab, table, sizeof(tab)));
	for (int k = 0; k < 4; k++)
		CHECK_EQ_INT(tab[k], 10 * (k + 1));

	CUDA_CHECK(cudaMemcpyToSymbol(coeffs, first, sizeof(first)));
	CUDA_CHECK(cudaMemcpyToSymbol(coeffs, &last, sizeof(last), 3 * sizeof(int)));
	CUDA_CHECK(cudaMemcpyFromSymbol(&c3, coeffs, sizeof(c3), 3 * sizeof(int)));
	CHECK_EQ_INT(c3, 100);

	CUDA_CHECK(cudaMalloc(&dev, sizeof(out)));
	apply<<<2, N / 2>>>(dev, N);
	CUDA_CHECK_LAUNCH();
	bump_table<<<1, 4>>>();
	CUDA_CHECK_LAUNCH();
	CUDA_CHECK(cudaMemcpy(out, dev, sizeof(out), cudaMemcpyDeviceToHost));
	for (int i = 0; i < N; i++)
		CHECK_EQ_INT(out[i], want_coeffs[i % 4] * i + 10 * (i % 4 + 1));

	CUDA_CHECK(cudaMemcpyFromSymbol(&count, counter, sizeof(count)));
	CHECK_EQ_INT(count, 42 + N);
	CUDA_CHECK(cudaMemcpyFromSymbol(tab, table, sizeof(tab)));
	for (int k = 0; k < 4; k++)
		CHECK_EQ_INT(tab[k], 10 * (k + 1) + want_coeffs[k]);
	CUDA_CHECK(cudaFree(dev));
	return cudart_test_pass("globals");
}
