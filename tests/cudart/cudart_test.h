/* Helpers for the CUDA runtime test programs (tests/cudart/<program>.cu): each program checks its own results
 * exactly and exits 0 (pass), 1 (fail) or 77 (skip: no device or no usable driver). They are plain
 * cudart programs, nvcc-built, with nothing of crcuda in them. */
#ifndef CRCUDA_TESTS_CUDART_TEST_H
#define CRCUDA_TESTS_CUDART_TEST_H

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#include "check.h" /* CHECK, CHECK_EQ_INT: the project's test assertions */

#define CUDA_CHECK(call)                                                                                     \
	do {                                                                                                 \
		cudaError_t cuda_check_err_ = (call);                                                        \
		if (cuda_check_err_ != cudaSuccess) {                                                        \
			fprintf(stderr, "%s:%d: %s failed: %s (%d)\n", __FILE__, __LINE__, #call,            \
				cudaGetErrorName(cuda_check_err_), (int)cuda_check_err_);                    \
			exit(1);                                                                             \
		}                                                                                            \
	} while (0)

/* A launch: its configuration error now, its execution error at the next synchronisation. */
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())

/* Exits 77 when cudart finds no device or no usable driver, as a GPU-less machine reports it. */
static inline void cudart_test_init(const char *program)
{
	int count = 0;
	cudaError_t err = cudaGetDeviceCount(&count);

	switch (err) {
	case cudaSuccess:
		break;
	case cudaErrorNoDevice:
	case cudaErrorInsufficientDriver:
	case cudaErrorStubLibrary:
	case cudaErrorSystemDriverMismatch:
	case cudaErrorCompatNotSupportedOnDevice:
	case cudaErrorDevicesUnavailable:
		fprintf(stderr, "%s: skipped: no usable CUDA device (cudaGetDeviceCount: %s)\n", program,
			cudaGetErrorName(err));
		exit(CHECK_SKIP);
	default:
		fprintf(stderr, "%s: cudaGetDeviceCount failed: %s (%d)\n", program, cudaGetErrorName(err),
			(int)err);
		exit(1);
	}
	if (!count) {
		fprintf(stderr, "%s: skipped: no CUDA device\n", program);
		exit(CHECK_SKIP);
	}
	CUDA_CHECK(cudaSetDevice(0));
}

static inline int cudart_test_pass(const char *program)
{
	printf("%s: PASS\n", program);
	return 0;
}

#endif
