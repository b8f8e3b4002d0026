/* fault_app MODE: a program that fails on purpose, as a user's buggy program would, to show that its
 * failure stays its own (one GPU worker per application) and looks as it does natively.
 *   assert  a kernel's device-side assert fails: the synchronize and every later call return 710
 *   oob     a kernel writes out of bounds: 700, likewise sticky
 *   oom     allocates twice the device's memory: CUDA_ERROR_OUT_OF_MEMORY, then works on normally
 *   hold    allocates 64 MiB, prints "ready", then sets and synchronises it every 10 ms until a call fails
 *           (its GPU worker killed under the layer; a lost GPU natively)
 * Prints "fault_app: MODE: NAME (CODE)" with the error seen; exit 0 when the program saw what a native
 * run sees (the error, sticky where it must be), 1 otherwise. */
#include <string.h>
#include <unistd.h>

#include "cuda_test.h"

extern const unsigned char fault_app_fatbin[];

static int kernel_fault(const char *mode, CUmodule mod)
{
	CUfunction f;
	CUdeviceptr flag, probe;
	CUresult sync, later;
	int one = 1;
	long long offset = 1ll << 40; /* 4 TiB past a 4-byte allocation */

	CU_CHECK(cuMemAlloc(&flag, sizeof(int)));
	CU_CHECK(cuMemcpyHtoD(flag, &one, sizeof(one)));
	if (!strcmp(mode, "assert")) {
		void *params[] = {&flag};

		CU_CHECK(cuModuleGetFunction(&f, mod, "fault_assert"));
		CU_CHECK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL));
	} else {
		void *params[] = {&flag, &offset};

		CU_CHECK(cuModuleGetFunction(&f, mod, "fault_oob"));
		CU_CHECK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL));
	}
	sync = cuCtxSynchronize();
	later = cuMemAlloc(&probe, 4096);
	printf("fault_app: %s: %s (%d), later call: %s (%d)\n", mode, cu_error_name(sync), (int)sync,
	       cu_error_name(later), (int)later);
	fflush(stdout);
	/* Natively the error is sticky: the context is lost for this process. */
	return sync != CUDA_SUCCESS && later == sync ? 0 : 1;
}

static int out_of_memory(void)
{
	CUdevice dev;
	CUdeviceptr huge, small;
	size_t total;
	CUresult res;
	unsigned char buf[4096];

	CU_CHECK(cuCtxGetDevice(&dev));
	CU_CHECK(cuDeviceTotalMem(&total, dev));
	res = cuMemAlloc(&huge, 2 * total);
	printf("fault_app: oom: %s (%d)\n", cu_error_name(res), (int)res);
	fflush(stdout);
	if (res != CUDA_ERROR_OUT_OF_MEMORY)
		return 1;
	/* Not sticky: the program goes on. */
	CU_CHECK(cuMemAlloc(&small, sizeof(buf)));
	CU_CHECK(cuMemsetD8(small, 0x5a, sizeof(buf)));
	CU_CHECK(cuMemcpyDtoH(buf, small, sizeof(buf)));
	for (size_t i = 0; i < sizeof(buf); i++)
		CHECK(buf[i] == 0x5a);
	return 0;
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "";
	CUdevice dev;
	CUcontext ctx;
	CUmodule mod;
	CUdeviceptr held;

	if (strcmp(mode, "assert") && strcmp(mode, "oob") && strcmp(mode, "oom") && strcmp(mode, "hold")) {
		fprintf(stderr, "usage: fault_app assert|oob|oom|hold\n");
		return 2;
	}
	cu_test_init("fault_app");
	CU_CHECK(cuDeviceGet(&dev, 0));
	CU_CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
	CU_CHECK(cuCtxSetCurrent(ctx));
	if (!strcmp(mode, "oom"))
		return out_of_memory();
	if (!strcmp(mode, "hold")) {
		CUresult res;

		CU_CHECK(cuMemAlloc(&held, 64 << 20));
		printf("ready\n");
		fflush(stdout);
		do {
			usleep(10 * 1000);
			res = cuMemsetD8(held, 1, 64 << 20);
			if (res == CUDA_SUCCESS)
				res = cuCtxSynchronize();
		} while (res == CUDA_SUCCESS);
		printf("fault_app: hold: %s (%d)\n", cu_error_name(res), (int)res);
		return 0;
	}
	CU_CHECK(cuModuleLoadData(&mod, fault_app_fatbin));
	return kernel_fault(mode, mod);
}
