/* cuLaunchCooperativeKernelMultiDevice (deprecated) over the public driver API: the arguments checked
 * as the driver documents them, then one cooperative launch per entry, in its stream's context; unless
 * the flags say otherwise, every launch waits for the prior work of all the streams and the later work
 * of every stream waits for all the launches (events). Shared by libcrcuda (whose cooperative launch
 * path serves each launch) and the simulated device. CUDA 13 has no multi-grid group, so a kernel
 * cannot tell one launch per device from the driver's joint launch. */
#ifndef CRCUDA_COOP_MULTI_H
#define CRCUDA_COOP_MULTI_H

#include <cuda.h>

#define CRC_COOP_MULTI_MAX 64 /* more devices than crcuda serves */

static inline CUresult crc_coop_multi_stream_dev(CUstream s, CUcontext *ctx, CUdevice *dev)
{
	CUresult res = cuStreamGetCtx(s, ctx);

	if (res == CUDA_SUCCESS)
		res = cuCtxPushCurrent(*ctx);
	if (res != CUDA_SUCCESS)
		return res;
	res = cuCtxGetDevice(dev);
	cuCtxPopCurrent(NULL);
	return res;
}

/* Every stream waits for what each of them has queued so far (n > 1). */
static inline CUresult crc_coop_multi_join(const CUcontext *ctx, const CUDA_LAUNCH_PARAMS *l, unsigned n)
{
	CUevent ev[CRC_COOP_MULTI_MAX] = {0};
	CUresult res = CUDA_SUCCESS;
	unsigned made = 0;

	for (; made < n && res == CUDA_SUCCESS; made++) {
		res = cuCtxPushCurrent(ctx[made]);
		if (res != CUDA_SUCCESS)
			break;
		res = cuEventCreate(&ev[made], CU_EVENT_DISABLE_TIMING);
		if (res == CUDA_SUCCESS)
			res = cuEventRecord(ev[made], l[made].hStream);
		cuCtxPopCurrent(NULL);
	}
	for (unsigned j = 0; j < n && res == CUDA_SUCCESS; j++)
		for (unsigned i = 0; i < n && res == CUDA_SUCCESS; i++)
			if (i != j)
				res = cuStreamWaitEvent(l[j].hStream, ev[i], 0);
	for (unsigned i = 0; i < made; i++)
		if (ev[i])
			cuEventDestroy(ev[i]);
	return res;
}

static inline CUresult crc_coop_multi(CUDA_LAUNCH_PARAMS *l, unsigned n, unsigned flags)
{
	CUcontext ctx[CRC_COOP_MULTI_MAX];
	CUdevice dev[CRC_COOP_MULTI_MAX];
	int count = 0, multi = 0;
	CUresult res;

	if (!l || !n ||
	    (flags & ~(unsigned)(CUDA_COOPERATIVE_LAUNCH_MULTI_DEVICE_NO_PRE_LAUNCH_SYNC |
				 CUDA_COOPERATIVE_LAUNCH_MULTI_DEVICE_NO_POST_LAUNCH_SYNC)))
		return CUDA_ERROR_INVALID_VALUE;
	res = cuDeviceGetCount(&count);
	if (res != CUDA_SUCCESS)
		return res;
	if (n > (unsigned)count || n > CRC_COOP_MULTI_MAX)
		return CUDA_ERROR_INVALID_VALUE;
	for (unsigned i = 0; i < n; i++) {
		/* The same shape everywhere; a stream of its own (not the NULL, legacy or per-thread one). */
		if (l[i].gridDimX != l[0].gridDimX || l[i].gridDimY != l[0].gridDimY ||
		    l[i].gridDimZ != l[0].gridDimZ || l[i].blockDimX != l[0].blockDimX ||
		    l[i].blockDimY != l[0].blockDimY || l[i].blockDimZ != l[0].blockDimZ ||
		    l[i].sharedMemBytes != l[0].sharedMemBytes || !l[i].function)
			return CUDA_ERROR_INVALID_VALUE;
		if (!l[i].hStream || l[i].hStream == CU_STREAM_LEGACY || l[i].hStream == CU_STREAM_PER_THREAD)
			return CUDA_ERROR_INVALID_HANDLE;
		res = crc_coop_multi_stream_dev(l[i].hStream, &ctx[i], &dev[i]);
		if (res != CUDA_SUCCESS)
			return res;
		for (unsigned j = 0; j < i; j++)
			if (dev[j] == dev[i])
				return CUDA_ERROR_INVALID_DEVICE;
		res =
		    cuDeviceGetAttribute(&multi, CU_DEVICE_ATTRIBUTE_COOPERATIVE_MULTI_DEVICE_LAUNCH, dev[i]);
		if (res != CUDA_SUCCESS)
			return res;
		if (!multi)
			return CUDA_ERROR_NOT_SUPPORTED;
	}
	if (n > 1 && !(flags & CUDA_COOPERATIVE_LAUNCH_MULTI_DEVICE_NO_PRE_LAUNCH_SYNC))
		res = crc_coop_multi_join(ctx, l, n);
	for (unsigned i = 0; i < n && res == CUDA_SUCCESS; i++) {
		res = cuCtxPushCurrent(ctx[i]);
		if (res != CUDA_SUCCESS)
			break;
		res = cuLaunchCooperativeKernel(l[i].function, l[i].gridDimX, l[i].gridDimY, l[i].gridDimZ,
						l[i].blockDimX, l[i].blockDimY, l[i].blockDimZ,
						l[i].sharedMemBytes, l[i].hStream, l[i].kernelParams);
		cuCtxPopCurrent(NULL);
	}
	if (res == CUDA_SUCCESS && n > 1 &&
	    !(flags & CUDA_COOPERATIVE_LAUNCH_MULTI_DEVICE_NO_POST_LAUNCH_SYNC))
		res = crc_coop_multi_join(ctx, l, n);
	return res;
}

#endif
