/* device_globals: a __device__ with an initialiser, a zero-initialised __device__ array and a
 * __constant__ array written with cuMemcpyHtoD at the address cuModuleGetGlobal gives; kernels update
 * and read them, and the host reads them back. */
#include <string.h>

#include "cuda_test.h"

extern const unsigned char device_globals_fatbin[];

int main(void)
{
	CUmodule mod;
	CUfunction update, read_back;
	CUdeviceptr counter, history, zeroed, coefficients, dout;
	size_t bytes;
	int value, hist[4], out[5], rounds = 3;
	unsigned long long zero_words[8];
	const int coef[4] = {11, -2, 300, 4000};

	cu_test_init("device_globals");
	cu_test_primary_context(NULL);
	CU_CHECK(cuModuleLoadData(&mod, device_globals_fatbin));
	CU_CHECK(cuModuleGetFunction(&update, mod, "_Z14update_globalsi"));
	CU_CHECK(cuModuleGetFunction(&read_back, mod, "_Z12read_globalsPi"));

	CU_CHECK(cuModuleGetGlobal(&counter, &bytes, mod, "counter"));
	CHECK_EQ_INT(bytes, sizeof(int));
	CU_CHECK(cuModuleGetGlobal(&history, &bytes, mod, "history"));
	CHECK_EQ_INT(bytes, 4 * sizeof(int));
	CU_CHECK(cuModuleGetGlobal(&zeroed, &bytes, mod, "zeroed"));
	CHECK_EQ_INT(bytes, sizeof(zero_words));
	CU_CHECK(cuModuleGetGlobal(&coefficients, &bytes, mod, "coefficients"));
	CHECK_EQ_INT(bytes, sizeof(coef));
	CU_EXPECT(cuModuleGetGlobal(&dout, &bytes, mod, "no_such_global"), CUDA_ERROR_NOT_FOUND);

	/* Initial values come from the image. */
	CU_CHECK(cuMemcpyDtoH(&value, counter, sizeof(value)));
	CHECK_EQ_INT(value, 42);
	CU_CHECK(cuMemcpyDtoH(hist, history, sizeof(hist)));
	for (int i = 0; i < 4; i++)
		CHECK_EQ_INT(hist[i], 7 + i);
	CU_CHECK(cuMemcpyDtoH(zero_words, zeroed, sizeof(zero_words)));
	for (int i = 0; i < 8; i++)
		CHECK_EQ_INT(zero_words[i], 0);

	CU_CHECK(cuMemcpyHtoD(coefficients, coef, sizeof(coef)));
	void *update_params[] = {&rounds};
	CU_CHECK(cuLaunchKernel(update, 1, 1, 1, 32, 1, 1, 0, NULL, update_params, NULL));
	CU_CHECK(cuLaunchKernel(update, 1, 1, 1, 32, 1, 1, 0, NULL, update_params, NULL));
	CU_CHECK(cuMemAlloc(&dout, sizeof(out)));
	void *read_params[] = {&dout};
	CU_CHECK(cuLaunchKernel(read_back, 1, 1, 1, 32, 1, 1, 0, NULL, read_params, NULL));
	CU_CHECK(cuMemcpyDtoH(out, dout, sizeof(out)));

	CU_CHECK(cuMemcpyDtoH(&value, counter, sizeof(value)));
	CHECK_EQ_INT(value, 42 + 2 * rounds * coef[0]);
	CHECK_EQ_INT(out[0], value);
	CU_CHECK(cuMemcpyDtoH(hist, history, sizeof(hist)));
	for (int i = 0; i < 4; i++) {
		CHECK_EQ_INT(hist[i], 7 + i + 2 * coef[i]);
		CHECK_EQ_INT(out[1 + i], hist[i] + coef[i]);
	}
	CU_CHECK(cuMemcpyDtoH(zero_words, zeroed, sizeof(zero_words)));
	for (int i = 0; i < 8; i++)
		CHECK_EQ_INT(zero_words[i], 2ull * (unsigned long long)(i + 1) << 32);

	/* A global is device memory like any other: memset it, copy between globals. */
	CU_CHECK(cuMemsetD32(counter, 0, 1));
	CU_CHECK(cuMemcpyDtoD(history, coefficients, sizeof(coef)));
	CU_CHECK(cuMemcpyDtoH(&value, counter, sizeof(value)));
	CHECK_EQ_INT(value, 0);
	CU_CHECK(cuMemcpyDtoH(hist, history, sizeof(hist)));
	CHECK(!memcmp(hist, coef, sizeof(coef)));

	CU_CHECK(cuMemFree(dout));
	CU_CHECK(cuModuleUnload(mod));
	CU_CHECK(cuDevicePrimaryCtxRelease(0));
	cu_test_pass("device_globals");
}
