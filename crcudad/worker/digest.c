/* Chunk digests of device memory (digest.h): the kernel embedded from digest_kernel.cu run in a
 * session's context, the same function on the host, and the simulated device's kernel. */
#define LOG_PREFIX "crcudad: "
#include <stdio.h>

#include "crcuda/errno.h"
#include "crcuda/log.h"
#include "crcuda_sim_kernel.h"
#include "digest.h"
#include "worker.h"

#include "crcuda/cuda_api_undef.h"

/* The simulated device runs the kernel here (it finds the process's own crcuda_sim_kernel_*). */
CRCUDA_SIM_KERNEL(crc_chunk_digest)
{
	const uint64_t *desc = CRCUDA_SIM_PARAM(blk, 0, const uint64_t *);
	uint64_t *out = CRCUDA_SIM_PARAM(blk, 1, uint64_t *);
	unsigned i = blk->block_idx.x;
	uint64_t addr = desc[2 * i];

	crc_digest_host((const void *)(uintptr_t)addr, desc[2 * i + 1], out + 2 * i);
}

#ifdef CRCUDA_HAVE_DIGEST_KERNEL
extern const unsigned char digest_kernel_fatbin[];
#endif

/* Chunks per launch: a bound on the descriptor buffers (8 GiB of 4 MiB chunks is 2048). */
#define DIGEST_BATCH 4096u

int crc_digest_device(CUcontext ctx, const uint64_t *desc, size_t n, uint64_t *out, double *seconds,
		      char *why, size_t why_len)
{
#ifdef CRCUDA_HAVE_DIGEST_KERNEL
	CUmodule mod = NULL;
	CUfunction fn = NULL;
	CUstream st = NULL;
	CUdeviceptr dbuf = 0;
	size_t batch = n < DIGEST_BATCH ? n : DIGEST_BATCH;
	double t0 = crc_now_s();
	CUresult res;

	*seconds = 0;
	if (!n)
		return 0;
	res = CALL(cuCtxSetCurrent, ctx);
	/* Loaded for this checkpoint and unloaded after it: the application's contexts come and go. */
	if (res == CUDA_SUCCESS)
		res = CALL(cuModuleLoadData, &mod, digest_kernel_fatbin);
	if (res == CUDA_SUCCESS)
		res = CALL(cuModuleGetFunction, &fn, mod, CRC_DIGEST_KERNEL);
	if (res == CUDA_SUCCESS)
		res = CALL(cuStreamCreate, &st, CU_STREAM_NON_BLOCKING);
	/* Descriptors, then digests: 32 bytes a chunk. */
	if (res == CUDA_SUCCESS)
		res = CALL(cuMemAlloc_v2, &dbuf, batch * 32);
	for (size_t at = 0; at < n && res == CUDA_SUCCESS; at += batch) {
		size_t k = n - at < batch ? n - at : batch;
		CUdeviceptr ddesc = dbuf, dout = dbuf + batch * 16;
		void *args[] = {&ddesc, &dout};

		res = CALL(cuMemcpyHtoDAsync_v2, ddesc, desc + 2 * at, k * 16, st);
		if (res == CUDA_SUCCESS)
			res = CALL(cuLaunchKernel, fn, (unsigned)k, 1, 1, CRC_DIGEST_THREADS, 1, 1, 0, st,
				   args, NULL);
		if (res == CUDA_SUCCESS)
			res = CALL(cuMemcpyDtoHAsync_v2, out + 2 * at, dout, k * 16, st);
		if (res == CUDA_SUCCESS)
			res = CALL(cuStreamSynchronize, st);
	}
	if (dbuf)
		CALL(cuMemFree_v2, dbuf);
	if (st)
		CALL(cuStreamDestroy_v2, st);
	if (mod)
		CALL(cuModuleUnload, mod);
	*seconds = crc_now_s() - t0;
	if (res != CUDA_SUCCESS) {
		snprintf(why, why_len, "digesting device memory failed: CUDA error %d", res);
		return CRC_ECUDA;
	}
	return 0;
#else
	(void)ctx, (void)desc, (void)n, (void)out;
	*seconds = 0;
	snprintf(why, why_len, "built without the digest kernel (no nvcc)");
	return CRC_ENOTSUP;
#endif
}
