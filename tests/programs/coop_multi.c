/* coop_multi: cuLaunchCooperativeKernelMultiDevice (deprecated) on every device (one entry each: its
 * primary context, module, stream and memory): each device's kernel counts the bytes of its buffer
 * equal to a value, with and without the flags that drop the launches' synchronisation; each count is
 * checked. The refusals (NULL list, no entry, a bad flag, more entries than devices, the NULL stream, a
 * shape that differs, one device twice) are printed, so natively and under the layer must print the
 * same (sim_forward_coop_multi, with two simulated devices; tests/gpu/layer.sh). */
#include <string.h>

#include "cuda_test.h"

/* Deprecated since CUDA 11.3, still exported. */
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

extern const unsigned char memset_fatbin[];

#define MAXDEV 8
#define BYTES  4096

int main(void)
{
	int ndev = 0, multi = 0;
	CUcontext ctx[MAXDEV];
	CUmodule mod[MAXDEV];
	CUfunction f[MAXDEV];
	CUstream st[MAXDEV];
	CUdeviceptr buf[MAXDEV], cnt[MAXDEV];
	unsigned long long n = BYTES;
	unsigned char value = 0x5a;
	void *params[MAXDEV][4];
	CUDA_LAUNCH_PARAMS l[MAXDEV + 1], bad[2];
	CUresult res;

	cu_test_init("coop_multi");
	CU_CHECK(cuDeviceGetCount(&ndev));
	if (ndev > MAXDEV)
		ndev = MAXDEV;
	CU_CHECK(cuDeviceGetAttribute(&multi, CU_DEVICE_ATTRIBUTE_COOPERATIVE_MULTI_DEVICE_LAUNCH, 0));
	printf("coop_multi: %d device(s), multi-device cooperative launch %d\n", ndev, multi);
	for (int d = 0; d < ndev; d++) {
		CUdevice dev;

		CU_CHECK(cuDeviceGet(&dev, d));
		CU_CHECK(cuDevicePrimaryCtxRetain(&ctx[d], dev));
		CU_CHECK(cuCtxSetCurrent(ctx[d]));
		CU_CHECK(cuModuleLoadData(&mod[d], memset_fatbin));
		CU_CHECK(cuModuleGetFunction(&f[d], mod[d], "_Z11count_bytesPKhyhPj"));
		CU_CHECK(cuStreamCreate(&st[d], CU_STREAM_NON_BLOCKING));
		CU_CHECK(cuMemAlloc(&buf[d], BYTES));
		CU_CHECK(cuMemAlloc(&cnt[d], sizeof(unsigned)));
		/* Device d's buffer holds 256 * (d + 1) bytes equal to the value. */
		CU_CHECK(cuMemsetD8(buf[d], 0, BYTES));
		CU_CHECK(cuMemsetD8(buf[d], value, 256 * (size_t)(d + 1)));
		params[d][0] = &buf[d];
		params[d][1] = &n;
		params[d][2] = &value;
		params[d][3] = &cnt[d];
		l[d] = (CUDA_LAUNCH_PARAMS){.function = f[d],
					    .gridDimX = BYTES / 256,
					    .gridDimY = 1,
					    .gridDimZ = 1,
					    .blockDimX = 256,
					    .blockDimY = 1,
					    .blockDimZ = 1,
					    .hStream = st[d],
					    .kernelParams = params[d]};
	}
	for (unsigned flags = 0; flags < 4; flags++) {
		for (int d = 0; d < ndev; d++) {
			CU_CHECK(cuCtxSetCurrent(ctx[d]));
			CU_CHECK(cuMemsetD32(cnt[d], 0, 1));
		}
		res = cuLaunchCooperativeKernelMultiDevice(l, (unsigned)ndev, flags);
		printf("coop_multi: flags %u: %s", flags, cu_error_name(res));
		CHECK(res == CUDA_SUCCESS || (!multi && res == CUDA_ERROR_NOT_SUPPORTED));
		for (int d = 0; res == CUDA_SUCCESS && d < ndev; d++) {
			unsigned got = 0;

			CU_CHECK(cuCtxSetCurrent(ctx[d]));
			CU_CHECK(cuStreamSynchronize(st[d]));
			CU_CHECK(cuMemcpyDtoH(&got, cnt[d], sizeof(got)));
			printf(", device %d counted %u", d, got);
			CHECK(got == 256u * (unsigned)(d + 1));
		}
		printf("\n");
	}

	/* Refusals. */
	res = cuLaunchCooperativeKernelMultiDevice(NULL, 1, 0);
	CHECK(res != CUDA_SUCCESS);
	printf("coop_multi: NULL list: %s\n", cu_error_name(res));
	res = cuLaunchCooperativeKernelMultiDevice(l, 0, 0);
	CHECK(res != CUDA_SUCCESS);
	printf("coop_multi: no entry: %s\n", cu_error_name(res));
	res = cuLaunchCooperativeKernelMultiDevice(l, 1, 4);
	CHECK(res != CUDA_SUCCESS);
	printf("coop_multi: flag 4: %s\n", cu_error_name(res));
	l[ndev] = l[0];
	res = cuLaunchCooperativeKernelMultiDevice(l, (unsigned)ndev + 1, 0);
	CHECK(res != CUDA_SUCCESS);
	printf("coop_multi: more entries than devices: %s\n", cu_error_name(res));
	bad[0] = l[0];
	bad[0].hStream = NULL;
	res = cuLaunchCooperativeKernelMultiDevice(bad, 1, 0);
	CHECK(res != CUDA_SUCCESS);
	printf("coop_multi: NULL stream: %s\n", cu_error_name(res));
	if (ndev > 1) {
		bad[0] = l[0];
		bad[1] = l[1];
		bad[1].gridDimX = 1;
		res = cuLaunchCooperativeKernelMultiDevice(bad, 2, 0);
		CHECK(res != CUDA_SUCCESS);
		printf("coop_multi: shapes differ: %s\n", cu_error_name(res));
		bad[1] = l[0];
		res = cuLaunchCooperativeKernelMultiDevice(bad, 2, 0);
		CHECK(res != CUDA_SUCCESS);
		printf("coop_multi: one device twice: %s\n", cu_error_name(res));
	}
	for (int d = 0; d < ndev; d++) {
		CU_CHECK(cuCtxSetCurrent(ctx[d]));
		CU_CHECK(cuMemFree(buf[d]));
		CU_CHECK(cuMemFree(cnt[d]));
		CU_CHECK(cuStreamDestroy(st[d]));
		CU_CHECK(cuModuleUnload(mod[d]));
	}
	cu_test_pass("coop_multi");
}
