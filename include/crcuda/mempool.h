/* Stream-ordered memory pools (cuMemPool*, cuMemAllocAsync, cuMemAllocFromPoolAsync) as bookkeeping
 * over an allocator that knows nothing of pools: libcrcuda serves stream-ordered allocations from the
 * session's VA range (so a checkpoint carries them like any other), the simulated device from its
 * arena. The pools, their attributes and access, the devices' current pools and the live allocations
 * are kept here, in the process that calls (so CRIU carries them too). Differences from the driver, by
 * design: no memory is retained in a pool (RESERVED_MEM_* equal USED_MEM_*; the release threshold is
 * kept and answered, and has no effect), and pools that can be exported are refused (they need IPC). */
#ifndef CRCUDA_MEMPOOL_H
#define CRCUDA_MEMPOOL_H

#include <cuda.h>
#include <stdint.h>
#include <stdbool.h>

struct crc_mempool_ops {
	/* One stream-ordered allocation / free on the allocator (the stream's work before it is waited
	 * for, or ordered otherwise). */
	CUresult (*alloc)(CUdeviceptr *p, size_t bytes, CUstream stream);
	CUresult (*free)(CUdeviceptr p, CUstream stream);
	/* The devices there are, and the current context's. */
	int (*device_count)(void);
	CUresult (*current_device)(CUdevice *dev);
};

CUresult crc_mempool_device_default(CUmemoryPool *pool, CUdevice dev, const struct crc_mempool_ops *ops);
CUresult crc_mempool_device_get(CUmemoryPool *pool, CUdevice dev, const struct crc_mempool_ops *ops);
CUresult crc_mempool_device_set(CUdevice dev, CUmemoryPool pool, const struct crc_mempool_ops *ops);
CUresult crc_mempool_location_get(CUmemoryPool *pool, const CUmemLocation *loc, CUmemAllocationType type,
				  bool current, const struct crc_mempool_ops *ops);
CUresult crc_mempool_location_set(const CUmemLocation *loc, CUmemAllocationType type, CUmemoryPool pool,
				  const struct crc_mempool_ops *ops);
CUresult crc_mempool_create(CUmemoryPool *pool, const CUmemPoolProps *props,
			    const struct crc_mempool_ops *ops);
CUresult crc_mempool_destroy(CUmemoryPool pool);
/* The properties a pool was made with (a graph's allocation from it takes them). */
CUresult crc_mempool_props(CUmemoryPool pool, CUmemPoolProps *props);
CUresult crc_mempool_set_attribute(CUmemoryPool pool, CUmemPool_attribute attr, const void *value);
CUresult crc_mempool_get_attribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value);
CUresult crc_mempool_set_access(CUmemoryPool pool, const CUmemAccessDesc *map, size_t count,
				const struct crc_mempool_ops *ops);
CUresult crc_mempool_get_access(CUmemAccess_flags *flags, CUmemoryPool pool, const CUmemLocation *loc);
CUresult crc_mempool_trim(CUmemoryPool pool);
/* pool NULL: the current device's current pool (cuMemAllocAsync). */
CUresult crc_mempool_alloc(CUdeviceptr *p, size_t bytes, CUmemoryPool pool, CUstream stream,
			   const struct crc_mempool_ops *ops);
/* A pool imported from another process (props as its exporter's; origin names the exporter's pool):
 * nothing is allocated from it; crc_mempool_origin gives origin back (CUDA_ERROR_INVALID_VALUE for a
 * pool not imported). */
CUresult crc_mempool_import(CUmemoryPool *pool, const CUmemPoolProps *props, const uint64_t origin[2]);
CUresult crc_mempool_origin(CUmemoryPool pool, uint64_t origin[2]);
/* The pool of stream-ordered allocation ptr (CUDA_ERROR_NOT_FOUND: none). */
CUresult crc_mempool_owner(CUdeviceptr ptr, CUmemoryPool *pool);
/* CUDA_ERROR_NOT_FOUND: p is no stream-ordered allocation (the caller frees it its own way). */
CUresult crc_mempool_free(CUdeviceptr p, CUstream stream, const struct crc_mempool_ops *ops);

#endif
