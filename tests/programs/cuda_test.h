/* Helpers for the driver-API test programs: they run unchanged on the simulated device (label sim) and
 * on a real GPU (label gpu), check their results exactly and exit 0 (pass), 1 (fail) or 77 (skip:
 * no device or no driver). */
#ifndef CRCUDA_TESTS_CUDA_TEST_H
#define CRCUDA_TESTS_CUDA_TEST_H

#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>

#include "check.h"

static inline const char *cu_error_name(CUresult res)
{
	const char *name = NULL;

	if (cuGetErrorName(res, &name) != CUDA_SUCCESS || !name)
		return "unknown CUresult";
	return name;
}

#define CU_CHECK(call)                                                                                       \
	do {                                                                                                 \
		CUresult cu_check_res_ = (call);                                                             \
		if (cu_check_res_ != CUDA_SUCCESS) {                                                         \
			fprintf(stderr, "%s:%d: %s failed: %s (%d)\n", __FILE__, __LINE__, #call,            \
				cu_error_name(cu_check_res_), (int)cu_check_res_);                           \
			exit(1);                                                                             \
		}                                                                                            \
	} while (0)

/* The call must return exactly `want`. */
#define CU_EXPECT(call, want)                                                                                \
	do {                                                                                                 \
		CUresult cu_expect_res_ = (call);                                                            \
		if (cu_expect_res_ != (want)) {                                                              \
			fprintf(stderr, "%s:%d: %s returned %s (%d), expected %s\n", __FILE__, __LINE__,     \
				#call, cu_error_name(cu_expect_res_), (int)cu_expect_res_, #want);           \
			exit(1);                                                                             \
		}                                                                                            \
	} while (0)

/* cuInit; exits 77 when there is no device or only the toolkit's stub driver. */
static inline void cu_test_init(const char *program)
{
	CUresult res = cuInit(0);
	int count = 0;

	if (res == CUDA_ERROR_NO_DEVICE || res == CUDA_ERROR_STUB_LIBRARY ||
	    res == CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE || res == CUDA_ERROR_SYSTEM_DRIVER_MISMATCH) {
		fprintf(stderr, "%s: skipped: no usable CUDA device (cuInit: %s)\n", program,
			cu_error_name(res));
		exit(CHECK_SKIP);
	}
	CU_CHECK(res);
	CU_CHECK(cuDeviceGetCount(&count));
	if (!count) {
		fprintf(stderr, "%s: skipped: no CUDA device\n", program);
		exit(CHECK_SKIP);
	}
}

/* Retains device 0's primary context and makes it current, as cudart does. */
static inline CUcontext cu_test_primary_context(CUdevice *dev_out)
{
	CUdevice dev;
	CUcontext ctx;

	CU_CHECK(cuDeviceGet(&dev, 0));
	CU_CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
	CU_CHECK(cuCtxSetCurrent(ctx));
	if (dev_out)
		*dev_out = dev;
	return ctx;
}

static inline void cu_test_pass(const char *program)
{
	printf("%s: PASS\n", program);
	exit(0);
}

#endif
