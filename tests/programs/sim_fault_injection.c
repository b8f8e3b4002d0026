/* sim_fault_injection (simulated device only; run with
 * CRCUDA_SIM_FAIL=cuMemAlloc_v2:3:2,cuLaunchKernel:1:719): exactly the third cuMemAlloc_v2 call fails
 * with error 2 and the first cuLaunchKernel with 719; every other call behaves normally. */
#include <string.h>

#include "cuda_test.h"

extern const unsigned char sim_checks_fatbin[];

int main(void)
{
	CUmodule mod;
	CUfunction add_one;
	CUdeviceptr d[4];
	int host[8], n = 8;

	cu_test_init("sim_fault_injection");
	cu_test_primary_context(NULL);
	CU_CHECK(cuMemAlloc(&d[0], 4096));
	CU_CHECK(cuMemAlloc(&d[1], 4096));
	CU_EXPECT(cuMemAlloc(&d[2], 4096), CUDA_ERROR_OUT_OF_MEMORY);
	CU_CHECK(cuMemAlloc(&d[3], 4096));

	CU_CHECK(cuModuleLoadData(&mod, sim_checks_fatbin));
	CU_CHECK(cuModuleGetFunction(&add_one, mod, "_Z7add_onePii"));
	memset(host, 0, sizeof(host));
	CU_CHECK(cuMemcpyHtoD(d[0], host, sizeof(host)));
	void *params[] = {&d[0], &n};
	CU_EXPECT(cuLaunchKernel(add_one, 1, 1, 1, 8, 1, 1, 0, NULL, params, NULL), CUDA_ERROR_LAUNCH_FAILED);
	CU_CHECK(cuLaunchKernel(add_one, 1, 1, 1, 8, 1, 1, 0, NULL, params, NULL));
	CU_CHECK(cuMemcpyDtoH(host, d[0], sizeof(host)));
	for (int i = 0; i < 8; i++)
		CHECK_EQ_INT(host[i], 1); /* the failed launch did nothing */

	CU_CHECK(cuMemFree(d[0]));
	CU_CHECK(cuMemFree(d[1]));
	CU_CHECK(cuMemFree(d[3]));
	CU_CHECK(cuModuleUnload(mod));
	CU_CHECK(cuDevicePrimaryCtxRelease(0));
	cu_test_pass("sim_fault_injection");
}
