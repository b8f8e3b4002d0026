/* cuOccupancyMaxPotentialBlockSize[WithFlags] from cuOccupancyMaxActiveBlocksPerMultiprocessor: the search
 * NVIDIA documents for it (cuda_occupancy.h), over block sizes from the largest allowed down to one
 * warp, keeping the one with the most threads resident per multiprocessor. The application's
 * callback for the dynamic shared memory of a block size runs in the calling process. Shared by
 * libcrcuda (whose queries go to the daemon) and the simulated device. */
#ifndef CRCUDA_OCCUPANCY_H
#define CRCUDA_OCCUPANCY_H

#include <cuda.h>
#include <stddef.h>

struct crc_occupancy_query {
	CUresult (*max_blocks)(int *blocks, CUfunction f, int block_size, size_t smem, unsigned flags);
	CUresult (*func_attr)(int *v, CUfunction_attribute a, CUfunction f);
	CUresult (*dev_attr)(int *v, CUdevice_attribute a); /* of the current context's device */
};

static inline CUresult crc_occupancy_block_size(int *min_grid, int *block_size, CUfunction f,
						CUoccupancyB2DSize smem_of, size_t smem, int limit,
						unsigned flags, const struct crc_occupancy_query *q)
{
	int func_max = 0, dev_max = 0, warp = 0, sms = 0, sm_threads = 0, best = 0, best_blocks = 0, most = 0;
	CUresult res;

	if (!min_grid || !block_size || !f || limit < 0)
		return CUDA_ERROR_INVALID_VALUE;
	if ((res = q->func_attr(&func_max, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, f)) != CUDA_SUCCESS ||
	    (res = q->dev_attr(&dev_max, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK)) != CUDA_SUCCESS ||
	    (res = q->dev_attr(&warp, CU_DEVICE_ATTRIBUTE_WARP_SIZE)) != CUDA_SUCCESS ||
	    (res = q->dev_attr(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)) != CUDA_SUCCESS ||
	    (res = q->dev_attr(&sm_threads, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR)) !=
		CUDA_SUCCESS)
		return res;
	int max = func_max < dev_max ? func_max : dev_max;

	if (limit > 0 && limit < max)
		max = limit;
	if (warp <= 0 || max <= 0)
		return CUDA_ERROR_INVALID_VALUE;
	for (int aligned = (max + warp - 1) / warp * warp; aligned > 0; aligned -= warp) {
		int size = aligned < max ? aligned : max, blocks = 0;

		res = q->max_blocks(&blocks, f, size, smem_of ? smem_of(size) : smem, flags);
		if (res != CUDA_SUCCESS)
			return res;
		if (blocks * size > most) {
			most = blocks * size;
			best = size;
			best_blocks = blocks;
		}
		if (most == sm_threads)
			break;
	}
	*min_grid = best_blocks * sms;
	*block_size = best;
	return CUDA_SUCCESS;
}

#endif
