// cuBLAS SGEMM against a CPU reference (issue 5, GPU machine): C = alpha * A * B + beta * C for
// column-major A (m x k), B (k x n), with inputs from a fixed formula. cuBLAS carries its own cudart
// and calls the driver directly, so this exercises both under the layer. GPU only: the simulated
// device has no host implementations of cuBLAS's kernels.
#include <cublas_v2.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cudart_test.h"

#define CUBLAS_CHECK(call)                                                                         \
	do {                                                                                       \
		cublasStatus_t st_ = (call);                                                       \
		if (st_ != CUBLAS_STATUS_SUCCESS) {                                                \
			fprintf(stderr, "%s:%d: %s failed: cuBLAS status %d\n", __FILE__, __LINE__, #call, \
				(int)st_);                                                         \
			exit(1);                                                                   \
		}                                                                                  \
	} while (0)

int main(int argc, char **argv)
{
	// --pedantic: CUBLAS_PEDANTIC_MATH (a different cuBLAS path). The default math mode of SGEMM is
	// plain FP32 (no TF32 unless asked), so the tolerance below holds in both.
	const bool pedantic = argc > 1 && !strcmp(argv[1], "--pedantic");
	const int m = 384, n = 256, k = 320;
	const float alpha = 1.5f, beta = -0.5f;
	cudart_test_init("sgemm");
	float *a = (float *)malloc(sizeof(float) * m * k), *b = (float *)malloc(sizeof(float) * k * n);
	float *c = (float *)malloc(sizeof(float) * m * n), *out = (float *)malloc(sizeof(float) * m * n);
	if (!a || !b || !c || !out)
		return 1;
	for (int i = 0; i < m * k; i++)
		a[i] = (float)((i * 37) % 101 - 50) / 64.0f;
	for (int i = 0; i < k * n; i++)
		b[i] = (float)((i * 53) % 89 - 44) / 32.0f;
	for (int i = 0; i < m * n; i++)
		c[i] = (float)(i % 17) / 8.0f;

	float *da, *db, *dc;
	CUDA_CHECK(cudaMalloc(&da, sizeof(float) * m * k));
	CUDA_CHECK(cudaMalloc(&db, sizeof(float) * k * n));
	CUDA_CHECK(cudaMalloc(&dc, sizeof(float) * m * n));
	CUDA_CHECK(cudaMemcpy(da, a, sizeof(float) * m * k, cudaMemcpyHostToDevice));
	CUDA_CHECK(cudaMemcpy(db, b, sizeof(float) * k * n, cudaMemcpyHostToDevice));
	CUDA_CHECK(cudaMemcpy(dc, c, sizeof(float) * m * n, cudaMemcpyHostToDevice));
	cublasHandle_t h;
	CUBLAS_CHECK(cublasCreate(&h));
	if (pedantic)
		CUBLAS_CHECK(cublasSetMathMode(h, CUBLAS_PEDANTIC_MATH));
	CUBLAS_CHECK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha, da, m, db, k, &beta, dc, m));
	CUDA_CHECK(cudaMemcpy(out, dc, sizeof(float) * m * n, cudaMemcpyDeviceToHost));
	CUBLAS_CHECK(cublasDestroy(h));

	double worst = 0;
	for (int j = 0; j < n; j++)
		for (int i = 0; i < m; i++) {
			double ref = 0, mag = 0;
			for (int p = 0; p < k; p++) {
				ref += (double)a[i + p * m] * b[p + j * k];
				mag += fabs((double)a[i + p * m] * b[p + j * k]);
			}
			ref = alpha * ref + beta * c[i + j * m];
			double err = fabs(out[i + j * m] - ref) / (mag * alpha + fabs(beta * c[i + j * m]) + 1e-30);
			if (err > worst)
				worst = err;
		}
	// FP32 with k = 320 terms: a relative error (to the sum of magnitudes) well under 1e-5.
	if (worst > 1e-5) {
		fprintf(stderr, "sgemm: worst relative error %.3g\n", worst);
		return 1;
	}
	printf("sgemm%s: %dx%dx%d ok, worst relative error %.3g\n", pedantic ? " (pedantic math)" : "", m, n, k,
	       worst);
	CUDA_CHECK(cudaFree(da));
	CUDA_CHECK(cudaFree(db));
	CUDA_CHECK(cudaFree(dc));
	free(a), free(b), free(c), free(out);
	return 0;
}
