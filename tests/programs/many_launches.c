/* many_launches: 10000 launches on one stream and 2000 spread over four streams, each adding its thread
 * count to one counter; the total must be exact. */
#include "cuda_test.h"

extern const unsigned char many_launches_fatbin[];

#define LAUNCHES 10000

int main(void)
{
	CUmodule mod;
	CUfunction increment;
	CUdeviceptr dcounter;
	CUstream stream, streams[4];
	unsigned long long counter = 0;

	cu_test_init("many_launches");
	cu_test_primary_context(NULL);
	CU_CHECK(cuModuleLoadData(&mod, many_launches_fatbin));
	CU_CHECK(cuModuleGetFunction(&increment, mod, "_Z9incrementPy"));
	CU_CHECK(cuMemAlloc(&dcounter, sizeof(counter)));
	CU_CHECK(cuMemsetD8(dcounter, 0, sizeof(counter)));
	CU_CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));

	void *params[] = {&dcounter};
	for (int i = 0; i < LAUNCHES; i++)
		CU_CHECK(cuLaunchKernel(increment, 1, 1, 1, 1, 1, 1, 0, stream, params, NULL));
	CU_CHECK(cuStreamSynchronize(stream));
	CU_CHECK(cuMemcpyDtoH(&counter, dcounter, sizeof(counter)));
	CHECK_EQ_INT(counter, LAUNCHES);

	/* Several streams at once, each launch 2 blocks of 3x4x2 threads. */
	for (int s = 0; s < 4; s++)
		CU_CHECK(cuStreamCreate(&streams[s], CU_STREAM_DEFAULT));
	for (int i = 0; i < 2000; i++)
		CU_CHECK(cuLaunchKernel(increment, 2, 1, 1, 3, 4, 2, 0, streams[i % 4], params, NULL));
	CU_CHECK(cuCtxSynchronize());
	CU_CHECK(cuMemcpyDtoH(&counter, dcounter, sizeof(counter)));
	CHECK_EQ_INT(counter, LAUNCHES + 2000ull * 48);

	for (int s = 0; s < 4; s++)
		CU_CHECK(cuStreamDestroy(streams[s]));
	CU_CHECK(cuStreamDestroy(stream));
	CU_CHECK(cuMemFree(dcounter));
	CU_CHECK(cuModuleUnload(mod));
	CU_CHECK(cuDevicePrimaryCtxRelease(0));
	cu_test_pass("many_launches");
}
