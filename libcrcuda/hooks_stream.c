/* Hooks: streams and events (created by the daemon, described here for the local getters), host
 * callbacks. */
#define LOG_PREFIX "libcrcuda: "
#include "client.h"
#include "crcuda/log.h"

CUresult crc_hook_cuStreamCreateWithPriority(CUstream *phStream, unsigned int flags, int priority)
{
	CUresult res = crc_fwd_cuStreamCreateWithPriority(phStream, flags, priority);

	if (res == CUDA_SUCCESS)
		crc_stream_store((uintptr_t)*phStream, crc_current_ctx(), flags, priority);
	return res;
}

CUresult crc_hook_cuStreamCreate(CUstream *phStream, unsigned int Flags)
{
	return crc_hook_cuStreamCreateWithPriority(phStream, Flags, 0);
}

CUresult crc_hook_cuStreamDestroy_v2(CUstream hStream)
{
	CUresult res = crc_fwd_cuStreamDestroy_v2(hStream);

	if (res == CUDA_SUCCESS)
		crc_stream_forget((uintptr_t)hStream);
	return res;
}

CUresult crc_hook_cuStreamDestroy(CUstream hStream)
{
	return crc_hook_cuStreamDestroy_v2(hStream);
}

CUresult crc_hook_cuEventCreate(CUevent *phEvent, unsigned int Flags)
{
	return crc_fwd_cuEventCreate(phEvent, Flags);
}

CUresult crc_hook_cuEventDestroy_v2(CUevent hEvent)
{
	return crc_fwd_cuEventDestroy_v2(hEvent);
}

CUresult crc_hook_cuEventDestroy(CUevent hEvent)
{
	return crc_hook_cuEventDestroy_v2(hEvent);
}

/* Host functions run in the application, which the daemon cannot call into: wait for the stream's
 * earlier work, then run the function here, before later work is queued. Ordering holds; the
 * caller blocks where the driver would not. */
CUresult crc_hook_cuLaunchHostFunc(CUstream hStream, CUhostFn fn, void *userData)
{
	CUresult res;

	if (!fn)
		return CUDA_ERROR_INVALID_VALUE;
	if (crc_capture_refuses_host_fn(hStream))
		return CUDA_ERROR_NOT_SUPPORTED;
	res = crc_fwd_cuStreamSynchronize(hStream);
	if (res == CUDA_SUCCESS)
		fn(userData);
	return res;
}

CUresult crc_hook_cuStreamAddCallback(CUstream hStream, CUstreamCallback callback, void *userData,
				      unsigned int flags)
{
	CUresult res;

	if (!callback || flags)
		return CUDA_ERROR_INVALID_VALUE;
	if (crc_capture_refuses_host_fn(hStream))
		return CUDA_ERROR_NOT_SUPPORTED;
	res = crc_fwd_cuStreamSynchronize(hStream);
	if (res == CRC_CU_DAEMON_GONE)
		return res;
	callback(hStream, res, userData);
	return CUDA_SUCCESS;
}
