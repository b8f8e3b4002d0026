/* Hooks: device memory (served by the daemon in the session's VA range), VMM, copies and pinned host
 * memory. Pageable host data travels in the records, in chunks that the daemon consumes while the
 * client writes the next; pinned memory (unix sessions) is a memfd the daemon maps and registers, so
 * it copies to and from it directly and asynchronously. */
#define LOG_PREFIX "libcrcuda: "
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include "client.h"
#include "crcuda/copy2d.h"
#include "crcuda/errno.h"
#include "crcuda/log.h"
#include "crcuda/mempool.h"
#include "crcuda/sock.h"

/* ---- allocation ------------------------------------------------------------------------------------ */
CUresult crc_hook_cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
	return crc_fwd_cuMemAlloc_v2(dptr, bytesize);
}

CUresult crc_hook_cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes, size_t Height,
				     unsigned int ElementSizeBytes)
{
	return crc_fwd_cuMemAllocPitch_v2(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
}

static CUresult managed_free(void *p);
static const struct crc_mempool_ops pool_ops;

CUresult crc_hook_cuMemFree_v2(CUdeviceptr dptr)
{
	struct crc_pinned *pin = crc_pinned_find((void *)(uintptr_t)dptr, 1);

	CUresult res;

	if (pin && pin->managed && pin->addr == dptr)
		return managed_free((void *)(uintptr_t)dptr);
	/* A pointer imported from another process's pool is closed. */
	if (crc_pool_import_free(dptr, NULL, false, &res))
		return res;
	/* Graph memory stays while its graphs need it (graph_mem.c). */
	if (crc_graph_mem_owns(dptr))
		return CUDA_SUCCESS;
	/* A stream-ordered allocation leaves its pool's books too. */
	res = crc_mempool_free(dptr, NULL, &pool_ops);
	return res == CUDA_ERROR_NOT_FOUND ? crc_fwd_cuMemFree_v2(dptr) : res;
}

/* ---- stream-ordered allocation and memory pools --------------------------------------------------- */
/* Served from the same VA range as cuMemAlloc, ordered by waiting for the stream; the pools are
 * bookkeeping here (crcuda/mempool.h). On a capturing stream (cuBLAS's workspace, PyTorch's private
 * pools) an allocation is the graph's own memory (a mem alloc or free node, graph_mem.c), which
 * waiting would invalidate. */
static CUresult pool_alloc(CUdeviceptr *p, size_t bytes, CUstream stream)
{
	CUresult res = crc_fwd_cuStreamSynchronize(stream);

	return res == CUDA_SUCCESS ? crc_fwd_cuMemAlloc_v2(p, bytes) : res;
}

static CUresult pool_free(CUdeviceptr p, CUstream stream)
{
	CUresult res = crc_fwd_cuStreamSynchronize(stream);

	return res == CUDA_SUCCESS ? crc_fwd_cuMemFree_v2(p) : res;
}

static int pool_devices(void)
{
	return (int)crc_client.info.dev_count;
}

static CUresult pool_device(CUdevice *dev)
{
	return crc_ctx_device(0, dev);
}

static const struct crc_mempool_ops pool_ops = {pool_alloc, pool_free, pool_devices, pool_device};

/* On a capturing stream the allocation is graph memory (graph_mem.c), with the pool's properties (the
 * current device's default pool's when none is named). */
static CUresult captured_alloc(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream)
{
	CUmemPoolProps props = {.allocType = CU_MEM_ALLOCATION_TYPE_PINNED,
				.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE}};
	CUresult res = pool ? crc_mempool_props(pool, &props) : crc_ctx_device(0, &props.location.id);

	return res == CUDA_SUCCESS ? crc_graph_mem_capture_alloc(dptr, bytesize, &props, hStream) : res;
}

CUresult crc_hook_cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
	CUresult res = crc_ready();

	if (res != CUDA_SUCCESS)
		return res;
	if (crc_capturing_on(hStream))
		return captured_alloc(dptr, bytesize, NULL, hStream);
	return crc_mempool_alloc(dptr, bytesize, NULL, hStream, &pool_ops);
}

CUresult crc_hook_cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
					  CUstream hStream)
{
	CUresult res = crc_ready();

	if (res != CUDA_SUCCESS)
		return res;
	if (crc_capturing_on(hStream))
		return captured_alloc(dptr, bytesize, pool, hStream);
	return crc_mempool_alloc(dptr, bytesize, pool, hStream, &pool_ops);
}

CUresult crc_hook_cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)
{
	CUresult res;

	if (crc_graph_mem_owns(dptr))
		return crc_capturing_on(hStream) ? crc_graph_mem_capture_free(dptr, hStream) : CUDA_SUCCESS;
	if (crc_pool_import_free(dptr, hStream, true, &res))
		return res;
	if (crc_capturing_on(hStream))
		return crc_fwd_cuMemFreeAsync(dptr, hStream);
	res = crc_mempool_free(dptr, hStream, &pool_ops);
	return res == CUDA_ERROR_NOT_FOUND ? pool_free(dptr, hStream) : res;
}

CUresult crc_hook_cuDeviceGetDefaultMemPool(CUmemoryPool *pool_out, CUdevice dev)
{
	CUresult res = crc_ready();

	return res == CUDA_SUCCESS ? crc_mempool_device_default(pool_out, dev, &pool_ops) : res;
}

CUresult crc_hook_cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice dev)
{
	CUresult res = crc_ready();

	return res == CUDA_SUCCESS ? crc_mempool_device_get(pool, dev, &pool_ops) : res;
}

CUresult crc_hook_cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool)
{
	CUresult res = crc_ready();

	return res == CUDA_SUCCESS ? crc_mempool_device_set(dev, pool, &pool_ops) : res;
}

CUresult crc_hook_cuMemGetDefaultMemPool(CUmemoryPool *pool_out, CUmemLocation *location,
					 CUmemAllocationType type)
{
	CUresult res = crc_ready();

	return res == CUDA_SUCCESS ? crc_mempool_location_get(pool_out, location, type, false, &pool_ops)
				   : res;
}

CUresult crc_hook_cuMemGetMemPool(CUmemoryPool *pool_out, CUmemLocation *location, CUmemAllocationType type)
{
	CUresult res = crc_ready();

	return res == CUDA_SUCCESS ? crc_mempool_location_get(pool_out, location, type, true, &pool_ops)
				   : res;
}

CUresult crc_hook_cuMemSetMemPool(CUmemLocation *location, CUmemAllocationType type, CUmemoryPool pool)
{
	CUresult res = crc_ready();

	return res == CUDA_SUCCESS ? crc_mempool_location_set(location, type, pool, &pool_ops) : res;
}

CUresult crc_hook_cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *poolProps)
{
	CUresult res = crc_ready();

	return res == CUDA_SUCCESS ? crc_mempool_create(pool, poolProps, &pool_ops) : res;
}

CUresult crc_hook_cuMemPoolDestroy(CUmemoryPool pool)
{
	return crc_mempool_destroy(pool);
}

CUresult crc_hook_cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
	return crc_mempool_set_attribute(pool, attr, value);
}

CUresult crc_hook_cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
	return crc_mempool_get_attribute(pool, attr, value);
}

CUresult crc_hook_cuMemPoolSetAccess(CUmemoryPool pool, const CUmemAccessDesc *map, size_t count)
{
	CUresult res = crc_ready();

	return res == CUDA_SUCCESS ? crc_mempool_set_access(pool, map, count, &pool_ops) : res;
}

CUresult crc_hook_cuMemPoolGetAccess(CUmemAccess_flags *flags, CUmemoryPool memPool, CUmemLocation *location)
{
	return crc_mempool_get_access(flags, memPool, location);
}

CUresult crc_hook_cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep)
{
	(void)minBytesToKeep;
	return crc_mempool_trim(pool);
}

/* The application's reservations outside the session range (at hints it chose): device memory,
 * although this process maps them PROT_NONE. */
static struct device_range {
	uint64_t base, size;
	bool held; /* this process maps it PROT_NONE (the range was free here) */
	struct device_range *next;
} * app_ranges;
static pthread_mutex_t app_ranges_lock = PTHREAD_MUTEX_INITIALIZER;

static bool in_app_range(uint64_t addr)
{
	bool found = false;

	pthread_mutex_lock(&app_ranges_lock);
	for (struct device_range *r = app_ranges; r && !found; r = r->next)
		found = addr - r->base < r->size;
	pthread_mutex_unlock(&app_ranges_lock);
	return found;
}

void crc_device_range_keep(uint64_t base, size_t size)
{
	struct device_range *r;
	void *p;

	/* Graph-owned memory comes back at the same addresses, graph after graph. */
	pthread_mutex_lock(&app_ranges_lock);
	for (r = app_ranges; r; r = r->next)
		if (base >= r->base && base - r->base + size <= r->size)
			break;
	pthread_mutex_unlock(&app_ranges_lock);
	if (r)
		return;
	r = malloc(sizeof(*r));
	p = mmap((void *)(uintptr_t)base, size, PROT_NONE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);

	if (p != MAP_FAILED && p != (void *)(uintptr_t)base) {
		munmap(p, size);
		p = MAP_FAILED;
	}
	if (p == MAP_FAILED)
		pr_warn("device range %#llx+%#zx overlaps host mappings of this process",
			(unsigned long long)base, size);
	if (r) {
		*r = (struct device_range){base, size, p != MAP_FAILED, NULL};
		pthread_mutex_lock(&app_ranges_lock);
		r->next = app_ranges;
		app_ranges = r;
		pthread_mutex_unlock(&app_ranges_lock);
	}
}

CUresult crc_hook_cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
				      unsigned long long flags)
{
	CUresult res = crc_fwd_cuMemAddressReserve(ptr, size, alignment, addr, flags);

	/* Outside the session range (the application chose the address): keep host mappings off it
	 * here too, as the window is kept free. */
	if (res == CUDA_SUCCESS && !crc_is_device_va(*ptr))
		crc_device_range_keep(*ptr, size);
	return res;
}

CUresult crc_hook_cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
	CUresult res = crc_fwd_cuMemAddressFree(ptr, size);

	if (res != CUDA_SUCCESS)
		return res;
	pthread_mutex_lock(&app_ranges_lock);
	for (struct device_range **pr = &app_ranges; *pr; pr = &(*pr)->next) {
		if ((*pr)->base == ptr) {
			struct device_range *r = *pr;

			/* Only what this process mapped itself: never the application's own memory. */
			if (r->held)
				munmap((void *)(uintptr_t)r->base, r->size);
			*pr = r->next;
			free(r);
			break;
		}
	}
	pthread_mutex_unlock(&app_ranges_lock);
	return res;
}

CUresult crc_hook_cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
			      const CUmemAllocationProp *prop, unsigned long long flags)
{
	struct crc_vmm_create_req r = {.size = size, .flags = flags};
	uint64_t h;
	CUresult res;

	if (!handle || !prop)
		return CUDA_ERROR_INVALID_VALUE;
	r.type = prop->type;
	r.location_type = prop->location.type;
	r.location_id = prop->location.id;
	r.handle_types = prop->requestedHandleTypes;
	r.compression = prop->allocFlags.compressionType;
	r.gpu_direct_rdma = prop->allocFlags.gpuDirectRDMACapable;
	r.usage = prop->allocFlags.usage;
	res = crc_rpc(CRC_CU_cuMemCreate, &r, sizeof(r), &h, sizeof(h));
	if (res == CUDA_SUCCESS)
		*handle = h;
	return res;
}

/* The reply is the properties in the request's layout (crc_vmm_create_req), device ordinals the client's. */
CUresult crc_hook_cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop,
							 CUmemGenericAllocationHandle handle)
{
	uint64_t h = handle;
	struct crc_vmm_create_req r;
	CUresult res;

	if (!prop)
		return CUDA_ERROR_INVALID_VALUE;
	res = crc_rpc(CRC_CU_cuMemGetAllocationPropertiesFromHandle, &h, sizeof(h), &r, sizeof(r));
	if (res != CUDA_SUCCESS)
		return res;
	*prop = (CUmemAllocationProp){
	    .type = (CUmemAllocationType)r.type,
	    .requestedHandleTypes = (CUmemAllocationHandleType)r.handle_types,
	    .location = {.type = (CUmemLocationType)r.location_type, .id = r.location_id}};
	prop->allocFlags.compressionType = r.compression;
	prop->allocFlags.gpuDirectRDMACapable = r.gpu_direct_rdma;
	prop->allocFlags.usage = r.usage;
	return CUDA_SUCCESS;
}

CUresult crc_hook_cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr)
{
	uint64_t a = (uintptr_t)addr, h;
	CUresult res;

	if (!handle)
		return CUDA_ERROR_INVALID_VALUE;
	res = crc_rpc(CRC_CU_cuMemRetainAllocationHandle, &a, sizeof(a), &h, sizeof(h));
	if (res == CUDA_SUCCESS)
		*handle = h;
	return res;
}

CUresult crc_hook_cuMemRelease(CUmemGenericAllocationHandle handle)
{
	return crc_fwd_cuMemRelease(handle);
}

CUresult crc_hook_cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
			   unsigned long long flags)
{
	return crc_fwd_cuMemMap(ptr, size, offset, handle, flags);
}

CUresult crc_hook_cuMemUnmap(CUdeviceptr ptr, size_t size)
{
	return crc_fwd_cuMemUnmap(ptr, size);
}

/* ---- copies -------------------------------------------------------------------------------------- */
uint32_t crc_locate(uint64_t addr, size_t bytes)
{
	struct crc_pinned *pin;

	if (crc_is_device_va(addr) || in_app_range(addr) || crc_mvar_contains(addr, bytes))
		return CRC_LOC_DEVICE;
	pin = crc_pinned_find((const void *)(uintptr_t)addr, bytes);
	if (pin && pin->managed)
		return CRC_LOC_DEVICE; /* on the GPU or in shared pages: the daemon reaches it either way */
	if (pin)
		return !crc_client.tcp && pin->memfd != -2 ? CRC_LOC_PINNED : CRC_LOC_INLINE;
	/* Unified addressing: what is not mapped in this process is device memory (module globals,
	 * the application's own reservations) or nothing at all, which the daemon then refuses. */
	if (msync((void *)(uintptr_t)(addr & ~4095ull), 1, MS_ASYNC) && errno == ENOMEM)
		return CRC_LOC_DEVICE;
	return CRC_LOC_INLINE;
}

struct dtoh_sink {
	uint8_t *dst;
	uint64_t bytes;
};

static void dtoh_chunk(void *arg, const void *data, size_t len)
{
	struct dtoh_sink *sink = arg;
	const struct crc_copy_data *d = data;

	if (len < sizeof(*d) || d->bytes > len - sizeof(*d) || d->offset + d->bytes > sink->bytes)
		return;
	memcpy(sink->dst + d->offset, d + 1, d->bytes);
}

static CUresult copy(uint64_t dst, uint64_t src, size_t bytes, CUstream stream, bool async);

static CUresult copy_async(uint64_t dst, uint64_t src, size_t bytes, CUstream stream)
{
	return copy(dst, src, bytes, stream, true);
}

/* A copy with a pageable side on a capturing stream: the graph will run it later, in the daemon. */
static bool captured_pageable(uint32_t dl, uint32_t sl, CUstream stream)
{
	return (dl == CRC_LOC_INLINE || sl == CRC_LOC_INLINE) && !crc_client.tcp && crc_capturing_on(stream);
}

/* Any direction, any memory. Pageable host sources go out in chunks (posted, several in flight, the
 * last one waited for unless async); pageable destinations come back in chunks. */
#define CRC_CU_AGAIN ((CUresult)0x7fff0001) /* not a CUDA error: begin the copy again */

/* A __managed__ variable's copy here names the variable in the daemon, where a restore may move it:
 * a copy that translated one before a restore bound begins again (mvar_gen: the generation it
 * translated in, or UINT64_MAX for none). */
static CUresult begin_copy(struct crc_call *c, uint16_t op, uint16_t flags, size_t len, void **args,
			   uint64_t mvar_gen)
{
	CUresult res = crc_call_begin(c, op, flags, len, args);

	if (res == CUDA_SUCCESS && mvar_gen != UINT64_MAX && crc_restore_generation() != mvar_gen) {
		crc_call_end(c);
		return CRC_CU_AGAIN;
	}
	return res;
}

static CUresult copy_once(uint64_t dst, uint64_t src, size_t bytes, CUstream stream, bool async);

static CUresult copy(uint64_t dst, uint64_t src, size_t bytes, CUstream stream, bool async)
{
	CUresult res;

	while ((res = copy_once(dst, src, bytes, stream, async)) == CRC_CU_AGAIN)
		;
	return res;
}

static CUresult copy_once(uint64_t dst, uint64_t src, size_t bytes, CUstream stream, bool async)
{
	uint32_t dl = crc_locate(dst, bytes), sl = crc_locate(src, bytes);
	uint64_t mvar_gen = UINT64_MAX;
	struct crc_copy_req *r;
	struct crc_call c;
	CUresult res;

	if (!bytes)
		return CUDA_SUCCESS;
	if ((dl == CRC_LOC_DEVICE && crc_mvar_contains(dst, bytes)) ||
	    (sl == CRC_LOC_DEVICE && crc_mvar_contains(src, bytes))) {
		mvar_gen = crc_restore_generation();
		dst = dl == CRC_LOC_DEVICE ? crc_mvar_device_addr(dst) : dst;
		src = sl == CRC_LOC_DEVICE ? crc_mvar_device_addr(src) : src;
	}
	if (async && captured_pageable(dl, sl, stream))
		return crc_stage_capture(stream, dst, src, bytes, copy_async);
	if (dl != CRC_LOC_DEVICE && sl != CRC_LOC_DEVICE && (dl == CRC_LOC_INLINE || sl == CRC_LOC_INLINE)) {
		/* Host to host (page-locked memory is mapped here too: unified addressing lets a program name
		 * it as a device pointer, as XLA does): after the stream's earlier work, which may write the
		 * source. */
		res = async ? crc_fwd_cuStreamSynchronize(stream) : crc_fwd_cuCtxSynchronize();
		if (res == CUDA_SUCCESS)
			memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, bytes);
		return res;
	}
	/* TCP: large copies over the session's bulk connections too (stripe.c). */
	if (crc_client.tcp && ((dl == CRC_LOC_INLINE && sl == CRC_LOC_DEVICE) ||
			       (sl == CRC_LOC_INLINE && dl == CRC_LOC_DEVICE))) {
		switch (
		    crc_stripe_copy(dst, src, bytes, stream, async, sl == CRC_LOC_INLINE, mvar_gen, &res)) {
		case CRC_STRIPE_DONE:
			return res;
		case CRC_STRIPE_AGAIN:
			return CRC_CU_AGAIN;
		case CRC_STRIPE_NO:
			break;
		}
	}
	if (dl == CRC_LOC_INLINE) {
		struct dtoh_sink sink = {(uint8_t *)(uintptr_t)dst, bytes};

		if (sl != CRC_LOC_DEVICE)
			return CUDA_ERROR_INVALID_VALUE;
		res = begin_copy(&c, CRC_CU_cuMemcpyDtoH_v2, 0, sizeof(*r), (void **)&r, mvar_gen);
		if (res != CUDA_SUCCESS)
			return res;
		*r = (struct crc_copy_req){.dst = dst,
					   .src = src,
					   .bytes = bytes,
					   .stream = (uintptr_t)stream,
					   .dst_loc = dl,
					   .src_loc = sl,
					   .async = async};
		res = crc_call_wait(&c, dtoh_chunk, &sink);
		crc_call_end(&c);
		return res;
	}
	if (sl == CRC_LOC_INLINE) {
		size_t max =
		    crc_chan_max_payload(&crc_client.chan) - sizeof(struct crc_call_hdr) - sizeof(*r);
		size_t chunk = max < CRC_COPY_CHUNK ? max : CRC_COPY_CHUNK;

		for (size_t off = 0; off < bytes; off += chunk) {
			size_t n = bytes - off < chunk ? bytes - off : chunk;
			bool last = off + n == bytes;

			/* Every chunk under one hold of the channel: the copy is one call for a quiesce. */
			res =
			    off ? crc_call_next(&c, CRC_CU_cuMemcpyHtoD_v2,
						last && !async ? 0 : CRC_MSG_NOREPLY, sizeof(*r) + n,
						(void **)&r)
				: begin_copy(&c, CRC_CU_cuMemcpyHtoD_v2, last && !async ? 0 : CRC_MSG_NOREPLY,
					     sizeof(*r) + n, (void **)&r, mvar_gen);
			if (res != CUDA_SUCCESS)
				return res;
			*r = (struct crc_copy_req){.dst = dst + off,
						   .bytes = n,
						   .stream = (uintptr_t)stream,
						   .dst_loc = dl,
						   .src_loc = sl,
						   .async = async};
			memcpy(r + 1, (const uint8_t *)(uintptr_t)src + off, n);
			if (!last) {
				res = crc_call_post_more(&c);
				if (res != CUDA_SUCCESS)
					return res;
				continue;
			}
			if (async) {
				res = crc_call_post(&c);
				if (res != CUDA_SUCCESS)
					return res;
				continue;
			}
			res = crc_call_wait(&c, NULL, NULL);
			crc_call_end(&c);
			return res;
		}
		return CUDA_SUCCESS;
	}
	/* Device and pinned memory: the daemon reaches both; async ones are posted. */
	res = begin_copy(&c, CRC_CU_cuMemcpyHtoD_v2, async ? CRC_MSG_NOREPLY : 0, sizeof(*r), (void **)&r,
			 mvar_gen);
	if (res != CUDA_SUCCESS)
		return res;
	*r = (struct crc_copy_req){.dst = dst,
				   .src = src,
				   .bytes = bytes,
				   .stream = (uintptr_t)stream,
				   .dst_loc = dl,
				   .src_loc = sl,
				   .async = async};
	if (async)
		return crc_call_post(&c);
	res = crc_call_wait(&c, NULL, NULL);
	crc_call_end(&c);
	return res;
}

/* 2D copies: row by row over copy() (crcuda/copy2d.h), so each row goes the way its memory needs. */
struct copy2d_on {
	CUstream stream;
	bool async;
};

static CUresult copy2d_row(uint64_t dst, uint64_t src, size_t bytes, bool last, void *arg)
{
	const struct copy2d_on *on = arg;

	return copy(dst, src, bytes, on->stream, on->async || !last);
}

static CUresult copy_2d(const CUDA_MEMCPY2D *p, CUstream stream, bool async)
{
	struct copy2d_on on = {stream, async};
	CUresult res;

	if (!__atomic_load_n(&crc_initialized, __ATOMIC_ACQUIRE))
		return CUDA_ERROR_NOT_INITIALIZED;
	if (p && (p->srcMemoryType == CU_MEMORYTYPE_ARRAY || p->dstMemoryType == CU_MEMORYTYPE_ARRAY)) {
		CUDA_MEMCPY3D p3 = crc_copy2d_as_3d(p);

		return crc_array_copy3d(&p3, stream, async);
	}
	res = crc_copy2d_rows(p, copy2d_row, &on);
	return res;
}

CUresult crc_hook_cuMemcpy2D_v2(const CUDA_MEMCPY2D *pCopy)
{
	return copy_2d(pCopy, NULL, false);
}

CUresult crc_hook_cuMemcpy2DUnaligned_v2(const CUDA_MEMCPY2D *pCopy)
{
	return copy_2d(pCopy, NULL, false);
}

CUresult crc_hook_cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D *pCopy, CUstream hStream)
{
	return copy_2d(pCopy, hStream, true);
}

static CUresult copy_3d(const CUDA_MEMCPY3D *p, CUstream stream, bool async)
{
	struct copy2d_on on = {stream, async};
	CUresult res;

	if (!__atomic_load_n(&crc_initialized, __ATOMIC_ACQUIRE))
		return CUDA_ERROR_NOT_INITIALIZED;
	if (crc_copy3d_has_array(p))
		return crc_array_copy3d(p, stream, async);
	res = crc_copy3d_rows(p, copy2d_row, &on);
	return res;
}

static CUresult copy_3d_peer(const CUDA_MEMCPY3D_PEER *p, CUstream stream, bool async)
{
	CUDA_MEMCPY3D c;

	if (!p)
		return CUDA_ERROR_INVALID_VALUE;
	c = crc_copy3d_of_peer(p);
	return copy_3d(&c, stream, async);
}

CUresult crc_hook_cuMemcpy3DPeer(const CUDA_MEMCPY3D_PEER *pCopy)
{
	return copy_3d_peer(pCopy, NULL, false);
}

CUresult crc_hook_cuMemcpy3DPeerAsync(const CUDA_MEMCPY3D_PEER *pCopy, CUstream hStream)
{
	return copy_3d_peer(pCopy, hStream, true);
}

static CUresult array_descr(CUDA_ARRAY3D_DESCRIPTOR *d, CUarray array)
{
	return crc_fwd_cuArray3DGetDescriptor_v2(d, array);
}

static CUresult copy_3d_on(const CUDA_MEMCPY3D *p, void *stream)
{
	return copy_3d(p, (CUstream)stream, true);
}

CUresult crc_hook_cuMemcpy3DBatchAsync_v2(size_t numOps, CUDA_MEMCPY3D_BATCH_OP *opList,
					  unsigned long long flags, CUstream hStream)
{
	return crc_copy3d_batch(numOps, opList, flags, hStream, array_descr, copy_3d_on, hStream, NULL);
}

CUresult crc_hook_cuMemcpy3DBatchAsync(size_t numOps, CUDA_MEMCPY3D_BATCH_OP *opList, size_t *failIdx,
				       unsigned long long flags, CUstream hStream)
{
	return crc_copy3d_batch(numOps, opList, flags, hStream, array_descr, copy_3d_on, hStream, failIdx);
}

CUresult crc_hook_cuMemcpyBatchAsync_v2(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count,
					CUmemcpyAttributes *attrs, size_t *attrIdxs, size_t numAttrs,
					CUstream hStream)
{
	struct copy2d_on on = {hStream, true};

	return crc_copy_batch(dsts, srcs, sizes, count, attrs, attrIdxs, numAttrs, hStream, copy2d_row, &on,
			      NULL);
}

CUresult crc_hook_cuMemcpyBatchAsync(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count,
				     CUmemcpyAttributes *attrs, size_t *attrIdxs, size_t numAttrs,
				     size_t *failIdx, CUstream hStream)
{
	struct copy2d_on on = {hStream, true};

	return crc_copy_batch(dsts, srcs, sizes, count, attrs, attrIdxs, numAttrs, hStream, copy2d_row, &on,
			      failIdx);
}

CUresult crc_hook_cuMemcpy3D_v2(const CUDA_MEMCPY3D *pCopy)
{
	return copy_3d(pCopy, NULL, false);
}

CUresult crc_hook_cuMemcpy3DAsync_v2(const CUDA_MEMCPY3D *pCopy, CUstream hStream)
{
	return copy_3d(pCopy, hStream, true);
}

static CUresult check_copy(uint64_t dst, uint64_t src, size_t n)
{
	if (!__atomic_load_n(&crc_initialized, __ATOMIC_ACQUIRE))
		return CUDA_ERROR_NOT_INITIALIZED;
	return (dst && src) || !n ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

#define COPY(dst, src, n, stream, async)                                                                     \
	do {                                                                                                 \
		CUresult check_ = check_copy((uintptr_t)(dst), (uintptr_t)(src), (n));                       \
		return check_ != CUDA_SUCCESS                                                                \
			   ? check_                                                                          \
			   : copy((uintptr_t)(dst), (uintptr_t)(src), (n), (stream), (async));               \
	} while (0)

CUresult crc_hook_cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
{
	COPY(dstDevice, srcHost, ByteCount, NULL, false);
}

CUresult crc_hook_cuMemcpyDtoH_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{
	COPY(dstHost, srcDevice, ByteCount, NULL, false);
}

CUresult crc_hook_cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount,
				       CUstream hStream)
{
	COPY(dstDevice, srcHost, ByteCount, hStream, true);
}

CUresult crc_hook_cuMemcpyDtoHAsync_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount,
				       CUstream hStream)
{
	COPY(dstHost, srcDevice, ByteCount, hStream, true);
}

CUresult crc_hook_cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount)
{
	COPY(dst, src, ByteCount, NULL, false);
}

CUresult crc_hook_cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream)
{
	COPY(dst, src, ByteCount, hStream, true);
}

/* ---- pinned host memory -------------------------------------------------------------------------- */
/* Shares the region (its memfd at the client's address) with the daemon, which maps and registers it. */
static CUresult pin_register(int fd, const struct crc_pin_req *req, struct crc_pin_reply *reply)
{
	return crc_ctl_with_fd(CRC_OP_PIN_REGISTER, req, sizeof(*req), fd, reply, sizeof(*reply));
}

/* A control request of len bytes, waited for; no reply data. */
static CUresult ctl_request(uint16_t op, const void *req, size_t len)
{
	struct crc_call c;
	void *args;
	CUresult res = crc_ctl_begin(&c, op, 0, len, &args);

	if (res == CUDA_SUCCESS) {
		memcpy(args, req, len);
		res = crc_call_wait(&c, NULL, NULL);
		crc_call_end(&c);
	}
	return res;
}

static CUresult pin_unregister(uintptr_t addr, size_t bytes)
{
	struct crc_pin_req req = {.client_addr = addr, .bytes = bytes};

	return ctl_request(CRC_OP_PIN_UNREGISTER, &req, sizeof(req));
}

/* The daemon maps the region at the client's address where that is free in its process, and then the
 * memory's device pointer (UVA) is the client's pointer, as natively: programs pass the host pointer
 * of mapped page-locked memory to kernels. Where the address was taken there, the region moves here to
 * the daemon's address if that is free here. Returns the region's address, moved or not. */
static void *pin_align_addresses(int fd, void *p, size_t size, struct crc_pin_req *req,
				 struct crc_pin_reply *reply)
{
	void *q = (void *)(uintptr_t)reply->device_ptr;
	struct crc_pin_reply moved = {0};

	if (!q || q == p)
		return p;
	q = mmap(q, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED_NOREPLACE, fd, 0);
	if (q == MAP_FAILED)
		return p;
	if ((uintptr_t)q != reply->device_ptr || pin_unregister((uintptr_t)p, size) != CUDA_SUCCESS) {
		munmap(q, size);
		return p;
	}
	req->client_addr = (uintptr_t)q;
	if (pin_register(fd, req, &moved) == CUDA_SUCCESS) {
		munmap(p, size);
		*reply = moved;
		return q;
	}
	/* Not at the new address: back at the old one, as it was. */
	munmap(q, size);
	req->client_addr = (uintptr_t)p;
	if (pin_register(fd, req, &moved) == CUDA_SUCCESS)
		*reply = moved;
	else
		reply->device_ptr = 0; /* not registered: the caller's check fails it */
	return p;
}

/* The rebinds so far: a registration made before a restore bound is the old session's only. */
uint64_t crc_restore_generation(void)
{
	uint64_t g;

	pthread_mutex_lock(&crc_client.pinned_lock);
	g = crc_client.rebinds;
	pthread_mutex_unlock(&crc_client.pinned_lock);
	return g;
}

/* Lists a region registered in generation gen. A restore bound since then (the process was
 * checkpointed between the registration and here) did not see it in the list: it is registered with
 * the restored session now. Once listed, a later rebind registers it itself. */
static CUresult pin_insert(struct crc_pinned *pin, uint64_t gen)
{
	bool stale;

	pthread_mutex_lock(&crc_client.pinned_lock);
	pin->next = crc_client.pinned;
	crc_client.pinned = pin;
	stale = gen != crc_client.rebinds;
	pthread_mutex_unlock(&crc_client.pinned_lock);
	if (stale && pin->memfd >= 0 && !crc_client.tcp && crc_pin_reregister(pin))
		return CUDA_ERROR_UNKNOWN;
	return CUDA_SUCCESS;
}

/* Unregisters a region taken off the list in generation gen: a restore bound since then never had it. */
static CUresult pin_forget(const struct crc_pinned *pin, uint64_t gen)
{
	CUresult res = pin_unregister(pin->addr, pin->bytes);

	return res == CUDA_ERROR_INVALID_VALUE && crc_restore_generation() != gen ? CUDA_SUCCESS : res;
}

/* Tests (CRCUDA_TEST_PIN_PAUSE=DIR): the allocation stops between its registration and its listing,
 * DIR/ready made, until DIR/go exists, so that a test checkpoints the process right there. */
static void test_pin_pause(void)
{
	const char *dir = getenv("CRCUDA_TEST_PIN_PAUSE");
	char path[512];
	int fd;

	if (!dir || !*dir)
		return;
	snprintf(path, sizeof(path), "%s/ready", dir);
	fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
	if (fd >= 0)
		close(fd);
	snprintf(path, sizeof(path), "%s/go", dir);
	while (access(path, F_OK))
		usleep(10000);
}

/* The memfd mapped at an address aligned to align (a power of two). */
static void *map_aligned(int fd, size_t size, size_t align)
{
	uint8_t *span;
	uintptr_t at;
	void *p;

	if (align <= 4096)
		return mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	span = mmap(NULL, size + align, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (span == MAP_FAILED)
		return MAP_FAILED;
	at = ((uintptr_t)span + align - 1) & ~(uintptr_t)(align - 1);
	p = mmap((void *)at, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0);
	if (p == MAP_FAILED) {
		munmap(span, size + align);
		return MAP_FAILED;
	}
	if (at > (uintptr_t)span)
		munmap(span, at - (uintptr_t)span);
	munmap((void *)(at + size), (uintptr_t)span + align - at);
	return p;
}

/* Page-locked memory: size rounded up to align (pages at least), at an address aligned to it. */
static CUresult pinned_alloc(void **pp, size_t bytes, unsigned flags, size_t align)
{
	uint64_t gen = crc_restore_generation();
	struct crc_pinned *pin;
	struct crc_pin_req req = {.bytes = bytes, .flags = flags};
	struct crc_pin_reply reply = {0};
	size_t size;
	CUresult res = crc_ready();
	int fd = -1;
	void *p;

	if (res != CUDA_SUCCESS)
		return res;
	if (!pp || !bytes)
		return CUDA_ERROR_INVALID_VALUE;
	if (align < 4096)
		align = 4096;
	size = (bytes + align - 1) & ~(align - 1);
	if (crc_client.tcp && (flags & CU_MEMHOSTALLOC_DEVICEMAP)) {
		/* A remote GPU cannot reach this host's memory. */
		pr_warn("cuMemHostAlloc(CU_MEMHOSTALLOC_DEVICEMAP) is not supported with a remote GPU");
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	pin = calloc(1, sizeof(*pin));
	if (!pin)
		return CUDA_ERROR_OUT_OF_MEMORY;
	if (!crc_client.tcp) {
		fd = memfd_create("crcuda-pinned", MFD_CLOEXEC);
		if (fd < 0 || ftruncate(fd, (off_t)size))
			goto oom;
		p = map_aligned(fd, size, align);
	} else {
		/* Over TCP pinned memory is plain memory; its data travels in the records. */
		p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	}
	if (p == MAP_FAILED)
		goto oom;
	req.client_addr = (uintptr_t)p;
	req.bytes = size;
	if (fd >= 0) {
		res = pin_register(fd, &req, &reply);
		if (res != CUDA_SUCCESS)
			goto fail_map;
		p = pin_align_addresses(fd, p, size, &req, &reply);
		if (!reply.device_ptr) {
			res = CUDA_ERROR_OUT_OF_MEMORY;
			goto fail_map;
		}
	}
	pin->addr = (uintptr_t)p;
	pin->bytes = size;
	pin->flags = flags;
	pin->device_ptr = reply.device_ptr;
	pin->memfd = fd; /* kept: a restored session gets it again (REBIND) */
	test_pin_pause();
	res = pin_insert(pin, gen);
	if (res == CUDA_SUCCESS)
		*pp = p;
	return res;
fail_map:
	munmap(p, size);
	free(pin);
	if (fd >= 0)
		close(fd);
	return res;
oom:
	if (fd >= 0)
		close(fd);
	free(pin);
	return CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult crc_hook_cuMemAllocHost_v2(void **pp, size_t bytesize)
{
	return pinned_alloc(pp, bytesize, 0, 0);
}

/* The CUDA 2.0 symbol: a 32-bit size, host memory (no device pointer involved). */
CUresult crc_hook_cuMemAllocHost(void **pp, unsigned int bytesize)
{
	return pinned_alloc(pp, bytesize, 0, 0);
}

CUresult crc_hook_cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags)
{
	return pinned_alloc(pp, bytesize, Flags, 0);
}

/* Takes the allocation (not a registration) at p off the list, managed or not as asked. */
static struct crc_pinned *pinned_take(void *p, bool managed, uint64_t *gen)
{
	struct crc_pinned *r = NULL;

	pthread_mutex_lock(&crc_client.pinned_lock);
	*gen = crc_client.rebinds;
	for (struct crc_pinned **pp = &crc_client.pinned; *pp; pp = &(*pp)->next) {
		if ((*pp)->addr == (uintptr_t)p && !(*pp)->registered_at && (*pp)->managed == managed) {
			r = *pp;
			*pp = r->next;
			break;
		}
	}
	pthread_mutex_unlock(&crc_client.pinned_lock);
	return r;
}

static CUresult pinned_free(void *p, bool managed)
{
	uint64_t gen;
	struct crc_pinned *pin = pinned_take(p, managed, &gen);
	CUresult res = CUDA_SUCCESS;

	if (!pin)
		return CUDA_ERROR_INVALID_VALUE;
	if (!crc_client.tcp)
		res = pin_forget(pin, gen);
	munmap(p, pin->bytes);
	if (pin->memfd >= 0)
		close(pin->memfd);
	free(pin);
	return res;
}

CUresult crc_hook_cuMemFreeHost(void *p)
{
	return pinned_free(p, false);
}

/* ---- managed memory ------------------------------------------------------------------------------- */
/* Page-locked memory shared with the daemon at the same address in both processes: the program reads
 * and writes it directly, kernels reach it through the mapping (as mapped page-locked memory), and a
 * checkpoint carries it with the process's own memory. An allocation of MANAGED_GRANULE or more is
 * aligned to it and a multiple of it, so that a prefetch to a GPU can place it in the GPU's memory at
 * the same address (crcudad/worker/managed.c): kernels then run at that memory's speed, and its pages here
 * are inaccessible until the CPU touches them (the fault brings the contents back, after the session's
 * work) or a prefetch to the CPU. CRCUDA_MANAGED_ON_GPU=0 keeps all of it in the shared pages, as does
 * a process that runs host functions (crc_managed_stay_home). */
/* The driver reserves device address ranges at a given address only in 32 MiB blocks (measured on
 * an H100 with driver 580: hints for smaller ranges, or not 32 MiB aligned, are not taken). */
#define MANAGED_GRANULE (32u << 20)

static pthread_mutex_t managed_move_lock = PTHREAD_MUTEX_INITIALIZER;
static void managed_exposed_now(void);
static bool managed_home; /* host functions run: nothing goes to a GPU any more (managed_move_lock) */
static struct sigaction managed_old_segv;
static pthread_once_t managed_fault_once = PTHREAD_ONCE_INIT;

static bool managed_may_move(void)
{
	const char *e = getenv("CRCUDA_MANAGED_ON_GPU");

	return !crc_client.tcp && !(e && !strcmp(e, "0"));
}

static CUresult managed_place(struct crc_pinned *pin, int device)
{
	struct crc_managed_req req = {.client_addr = pin->addr, .bytes = pin->bytes, .device = device};

	return ctl_request(CRC_OP_MANAGED_PLACE, &req, sizeof(req));
}

/* Back in the shared pages, accessible here (managed_move_lock held). */
static CUresult managed_to_host(struct crc_pinned *pin)
{
	CUresult res;

	if (!__atomic_load_n(&pin->on_device, __ATOMIC_ACQUIRE))
		return CUDA_SUCCESS;
	res = managed_place(pin, -1);
	if (res == CUDA_SUCCESS && !mprotect((void *)pin->addr, pin->bytes, PROT_READ | PROT_WRITE)) {
		__atomic_store_n(&pin->on_device, false, __ATOMIC_RELEASE);
		managed_exposed_now();
	}
	return res;
}

/* Serialised access. Managed memory in its pages is the same memory for the CPU and the GPU, but the
 * CPU's and the GPU's atomics on it are not atomic with each other across the bus (measured: the
 * systemWideAtomics sample loses updates), where natively the driver moves pages between them. So
 * once GPU work is sent, each such allocation becomes inaccessible here, and the CPU's first touch
 * waits for the session's work to end before it goes on. The wait is bounded: work that waits for the
 * CPU (a kernel spinning on a flag in the allocation) would never end. An allocation whose wait
 * outlasts the bound is shared at once from then on, as before; so is memory attached to the host.
 * CRCUDA_MANAGED_WAIT_MS sets the bound (default 10000; 0: never wait, always shared). */
#define MANAGED_WAIT_MS_DEFAULT 10000
/* Some serialised allocation may be accessible here: set by whatever makes one so. */
static atomic_bool managed_exposed;

static void managed_exposed_now(void)
{
	atomic_store_explicit(&managed_exposed, true, memory_order_release);
}

static uint32_t managed_wait_ms(void)
{
	static int ms = -1;

	if (ms < 0) {
		const char *e = getenv("CRCUDA_MANAGED_WAIT_MS");

		ms = e && *e ? atoi(e) : MANAGED_WAIT_MS_DEFAULT;
		if (ms < 0)
			ms = 0;
	}
	return (uint32_t)ms;
}

static bool serialised(const struct crc_pinned *pin)
{
	return pin->managed && !pin->concurrent && !pin->attach_host && !pin->on_device &&
	       managed_wait_ms() > 0;
}

void crc_managed_before_work(void)
{
	if (!atomic_exchange_explicit(&managed_exposed, false, memory_order_acq_rel))
		return;
	pthread_mutex_lock(&crc_client.pinned_lock);
	for (struct crc_pinned *pin = crc_client.pinned; pin; pin = pin->next)
		if (serialised(pin) && !pin->gpu_owned && !mprotect((void *)pin->addr, pin->bytes, PROT_NONE))
			pin->gpu_owned = true;
	pthread_mutex_unlock(&crc_client.pinned_lock);
}

/* The CPU touched a serialised allocation the GPU may be using: true once it is accessible again. */
static bool managed_touch(struct crc_pinned *pin)
{
	static atomic_bool warned;
	uint32_t ms = managed_wait_ms();
	bool done = false;

	pthread_mutex_lock(&managed_move_lock);
	pthread_mutex_lock(&crc_client.pinned_lock);
	if (pin->gpu_owned) {
		CUresult res = CUDA_SUCCESS;

		pthread_mutex_unlock(&crc_client.pinned_lock);
		/* A host function's thread does not wait: its stream's work waits for it. */
		if (!crc_on_hostfn_thread())
			res = ctl_request(CRC_OP_MANAGED_WAIT, &ms, sizeof(ms));
		pthread_mutex_lock(&crc_client.pinned_lock);
		if (res != CUDA_SUCCESS) {
			pin->concurrent = true;
			if (!atomic_exchange(&warned, true))
				pr_warn(
				    "the CPU touched managed memory %#lx+%#zx while the GPU's work went on "
				    "for %u ms: the two share it at once from now on (CUDA error %d)",
				    (unsigned long)pin->addr, pin->bytes, ms, (int)res);
		}
		if (pin->gpu_owned && !mprotect((void *)pin->addr, pin->bytes, PROT_READ | PROT_WRITE)) {
			pin->gpu_owned = false;
			managed_exposed_now();
		}
		done = !pin->gpu_owned;
	}
	pthread_mutex_unlock(&crc_client.pinned_lock);
	pthread_mutex_unlock(&managed_move_lock);
	return done;
}

/* The CPU touched managed memory that is on a GPU: brought back, and the access runs again. Any
 * other fault goes where it would have gone. */
static void managed_fault(int sig, siginfo_t *si, void *uc)
{
	int saved_errno = errno;
	struct crc_pinned *pin;

	if (crc_mvar_fault(si->si_addr, uc))
		return;
	pin = crc_pinned_find(si->si_addr, 1);
	if (pin && pin->managed && managed_touch(pin)) {
		errno = saved_errno;
		return;
	}
	if (pin && pin->managed && __atomic_load_n(&pin->on_device, __ATOMIC_ACQUIRE)) {
		CUresult res;

		pthread_mutex_lock(&managed_move_lock);
		res = managed_to_host(pin);
		pthread_mutex_unlock(&managed_move_lock);
		if (res == CUDA_SUCCESS) {
			errno = saved_errno;
			return;
		}
		pr_err("managed memory %#lx+%#zx cannot come back from the GPU: CUDA error %d",
		       (unsigned long)pin->addr, pin->bytes, (int)res);
	}
	errno = saved_errno;
	if (managed_old_segv.sa_flags & SA_SIGINFO) {
		managed_old_segv.sa_sigaction(sig, si, uc);
	} else if (managed_old_segv.sa_handler != SIG_DFL && managed_old_segv.sa_handler != SIG_IGN) {
		managed_old_segv.sa_handler(sig);
	} else {
		signal(SIGSEGV, SIG_DFL); /* the access faults again and ends the process, as natively */
	}
}

static void managed_fault_setup(void)
{
	struct sigaction sa = {.sa_sigaction = managed_fault,
			       .sa_flags = SA_SIGINFO | SA_RESTART | SA_NODEFER};

	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGSEGV, &sa, &managed_old_segv))
		pr_warn("cannot catch SIGSEGV: managed memory stays in host memory");
}

void crc_managed_fault_install(void)
{
	pthread_once(&managed_fault_once, managed_fault_setup);
}

/* A prefetch to a GPU: the whole allocation into that GPU's memory, where it can go. */
static CUresult managed_to_device(struct crc_pinned *pin, int device)
{
	CUresult res;

	if (pin->addr % MANAGED_GRANULE || pin->bytes % MANAGED_GRANULE || !managed_may_move())
		return CUDA_SUCCESS; /* a hint: it stays in the shared pages */
	crc_managed_fault_install();
	pthread_mutex_lock(&managed_move_lock);
	if (managed_home || __atomic_load_n(&pin->on_device, __ATOMIC_ACQUIRE)) {
		pthread_mutex_unlock(&managed_move_lock);
		return CUDA_SUCCESS;
	}
	/* No CPU write may land in the pages while they move, nor after: the GPU's copy is the one. */
	pthread_mutex_lock(&crc_client.pinned_lock);
	pin->gpu_owned = false;
	pthread_mutex_unlock(&crc_client.pinned_lock);
	if (mprotect((void *)pin->addr, pin->bytes, PROT_NONE)) {
		managed_exposed_now();
		pthread_mutex_unlock(&managed_move_lock);
		return CUDA_SUCCESS;
	}
	__atomic_store_n(&pin->on_device, true, __ATOMIC_RELEASE);
	res = managed_place(pin, device);
	if (res != CUDA_SUCCESS) {
		__atomic_store_n(&pin->on_device, false, __ATOMIC_RELEASE);
		mprotect((void *)pin->addr, pin->bytes, PROT_READ | PROT_WRITE);
		managed_exposed_now();
		if (res == CUDA_ERROR_NOT_SUPPORTED || res == CUDA_ERROR_INVALID_VALUE)
			res = CUDA_SUCCESS; /* stays where it is (an older daemon, no room): still correct */
	}
	pthread_mutex_unlock(&managed_move_lock);
	return res;
}

void crc_managed_stay_home(void)
{
	pthread_mutex_lock(&managed_move_lock);
	managed_home = true;
	for (;;) {
		struct crc_pinned *pin;

		pthread_mutex_lock(&crc_client.pinned_lock);
		for (pin = crc_client.pinned; pin; pin = pin->next)
			if (pin->managed && __atomic_load_n(&pin->on_device, __ATOMIC_ACQUIRE))
				break;
		pthread_mutex_unlock(&crc_client.pinned_lock);
		if (!pin || managed_to_host(pin) != CUDA_SUCCESS)
			break;
	}
	pthread_mutex_unlock(&managed_move_lock);
}

void crc_managed_restored(struct crc_pinned *pin)
{
	if (pin->managed && __atomic_load_n(&pin->on_device, __ATOMIC_ACQUIRE) &&
	    !mprotect((void *)pin->addr, pin->bytes, PROT_READ | PROT_WRITE))
		__atomic_store_n(&pin->on_device, false, __ATOMIC_RELEASE);
	if (pin->managed)
		managed_exposed_now();
}

static CUresult managed_free(void *p)
{
	CUresult res = crc_fwd_cuCtxSynchronize();

	return res == CUDA_SUCCESS ? pinned_free(p, true) : res;
}

CUresult crc_hook_cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
	struct crc_pinned *pin;
	void *p;
	CUresult res;

	if (!dptr || (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST))
		return CUDA_ERROR_INVALID_VALUE;
	if (crc_client.tcp) {
		pr_warn("managed memory is not supported with a remote GPU: the GPU cannot reach this host");
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	res = pinned_alloc(&p, bytesize, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP,
			   bytesize >= MANAGED_GRANULE && managed_may_move() ? MANAGED_GRANULE : 0);
	if (res != CUDA_SUCCESS)
		return res;
	pin = crc_pinned_find(p, 1);
	if (!pin || pin->device_ptr != (uintptr_t)p) {
		pr_warn("managed memory of %zu bytes could not be placed at the same address in the daemon",
			bytesize);
		pinned_free(p, false);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	crc_uvm_advice_init(&pin->advice);
	pin->attach_host = flags == CU_MEM_ATTACH_HOST;
	pin->managed = true;
	crc_managed_fault_install();
	managed_exposed_now();
	*dptr = (uintptr_t)p;
	return CUDA_SUCCESS;
}

/* The managed region holding [ptr, ptr + count), or NULL. */
static struct crc_pinned *managed_find(CUdeviceptr ptr, size_t count)
{
	struct crc_pinned *pin = count ? crc_pinned_find((void *)(uintptr_t)ptr, count) : NULL;

	return pin && pin->managed ? pin : NULL;
}

static CUresult managed_advise(CUdeviceptr ptr, size_t count, CUmem_advise advice, int device)
{
	struct crc_pinned *pin = managed_find(ptr, count);
	CUresult res;

	if (!pin)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&crc_client.pinned_lock);
	res = crc_uvm_advise(&pin->advice, advice, device, (int)crc_client.info.dev_count);
	pthread_mutex_unlock(&crc_client.pinned_lock);
	return res;
}

CUresult crc_hook_cuMemAdvise(CUdeviceptr devPtr, size_t count, CUmem_advise advice, CUdevice device)
{
	return managed_advise(devPtr, count, advice, device);
}

CUresult crc_hook_cuMemAdvise_v2(CUdeviceptr devPtr, size_t count, CUmem_advise advice,
				 CUmemLocation location)
{
	return managed_advise(devPtr, count, advice, crc_uvm_location(location));
}

/* Stream-ordered, and nothing to move: the stream must exist, the range be managed. */
static CUresult managed_on_stream(CUdeviceptr ptr, size_t count, CUstream stream, int prefetch_to)
{
	struct crc_pinned *pin = managed_find(ptr, count);
	CUresult res = crc_fwd_cuStreamQuery(stream);

	if (res == CUDA_ERROR_NOT_READY)
		res = CUDA_SUCCESS;
	if (res != CUDA_SUCCESS)
		return res;
	if (!pin)
		return CUDA_ERROR_INVALID_VALUE;
	if (prefetch_to == -3)
		return CUDA_SUCCESS;
	pthread_mutex_lock(&crc_client.pinned_lock);
	res = crc_uvm_prefetch(&pin->advice, prefetch_to, (int)crc_client.info.dev_count);
	pthread_mutex_unlock(&crc_client.pinned_lock);
	if (res == CUDA_SUCCESS && prefetch_to >= 0)
		res = managed_to_device(pin, prefetch_to);
	if (res == CUDA_SUCCESS && prefetch_to == CU_DEVICE_CPU) {
		pthread_mutex_lock(&managed_move_lock);
		res = managed_to_host(pin);
		pthread_mutex_unlock(&managed_move_lock);
	}
	return res;
}

CUresult crc_hook_cuMemPrefetchAsync(CUdeviceptr devPtr, size_t count, CUdevice dstDevice, CUstream hStream)
{
	return managed_on_stream(devPtr, count, hStream, dstDevice == -3 ? CU_DEVICE_INVALID : dstDevice);
}

/* Where a v2 prefetch goes, as managed_on_stream takes it. */
static int prefetch_target(CUmemLocation location)
{
	int to = crc_uvm_location(location);

	return to == -3 ? CU_DEVICE_INVALID : to;
}

CUresult crc_hook_cuMemPrefetchAsync_v2(CUdeviceptr devPtr, size_t count, CUmemLocation location,
					unsigned int flags, CUstream hStream)
{
	if (flags)
		return CUDA_ERROR_INVALID_VALUE;
	return managed_on_stream(devPtr, count, hStream, prefetch_target(location));
}

/* Batches: the shape, the stream (not the legacy one), every range managed; then each prefetch. */
static CUresult managed_batch(CUdeviceptr *dptrs, size_t *sizes, size_t count, CUmemLocation *locs,
			      size_t *idxs, size_t nlocs, unsigned long long flags, CUstream s,
			      bool with_locations)
{
	CUresult res = crc_uvm_batch_check(dptrs, sizes, count, locs, idxs, nlocs, flags, with_locations);

	if (res == CUDA_SUCCESS && (s == CU_STREAM_LEGACY || (!s && !crc_self()->ptds)))
		res = CUDA_ERROR_INVALID_VALUE;
	for (size_t i = 0; res == CUDA_SUCCESS && i < count; i++)
		res = managed_find(dptrs[i], sizes[i]) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
	/* -3: no prefetch (a discard). */
	for (size_t i = 0; res == CUDA_SUCCESS && i < count; i++)
		res = managed_on_stream(
		    dptrs[i], sizes[i], s,
		    with_locations ? prefetch_target(crc_uvm_batch_location(i, locs, idxs, nlocs)) : -3);
	return res;
}

CUresult crc_hook_cuMemPrefetchBatchAsync(CUdeviceptr *dptrs, size_t *sizes, size_t count,
					  CUmemLocation *prefetchLocs, size_t *prefetchLocIdxs,
					  size_t numPrefetchLocs, unsigned long long flags, CUstream hStream)
{
	return managed_batch(dptrs, sizes, count, prefetchLocs, prefetchLocIdxs, numPrefetchLocs, flags,
			     hStream, true);
}

/* Discarded contents may read as anything: keeping them is one answer. */
CUresult crc_hook_cuMemDiscardBatchAsync(CUdeviceptr *dptrs, size_t *sizes, size_t count,
					 unsigned long long flags, CUstream hStream)
{
	return managed_batch(dptrs, sizes, count, NULL, NULL, 0, flags, hStream, false);
}

CUresult crc_hook_cuMemDiscardAndPrefetchBatchAsync(CUdeviceptr *dptrs, size_t *sizes, size_t count,
						    CUmemLocation *prefetchLocs, size_t *prefetchLocIdxs,
						    size_t numPrefetchLocs, unsigned long long flags,
						    CUstream hStream)
{
	return managed_batch(dptrs, sizes, count, prefetchLocs, prefetchLocIdxs, numPrefetchLocs, flags,
			     hStream, true);
}

CUresult crc_hook_cuStreamAttachMemAsync(CUstream hStream, CUdeviceptr dptr, size_t length,
					 unsigned int flags)
{
	struct crc_pinned *pin;
	CUresult res;

	if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST && flags != CU_MEM_ATTACH_SINGLE)
		return CUDA_ERROR_INVALID_VALUE;
	res = managed_on_stream(dptr, length ? length : 1, hStream, -3);
	pin = res == CUDA_SUCCESS ? managed_find(dptr, length ? length : 1) : NULL;
	if (pin) {
		/* Attached to the host, the GPU does not use it: the CPU needs no wait. */
		pthread_mutex_lock(&crc_client.pinned_lock);
		pin->attach_host = flags == CU_MEM_ATTACH_HOST;
		pthread_mutex_unlock(&crc_client.pinned_lock);
		managed_exposed_now();
	}
	return res;
}

CUresult crc_hook_cuMemRangeGetAttribute(void *data, size_t dataSize, CUmem_range_attribute attribute,
					 CUdeviceptr devPtr, size_t count)
{
	struct crc_pinned *pin = managed_find(devPtr, count);
	CUresult res;

	if (!pin)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&crc_client.pinned_lock);
	res = crc_uvm_range_attribute(&pin->advice, data, dataSize, attribute);
	pthread_mutex_unlock(&crc_client.pinned_lock);
	return res;
}

CUresult crc_hook_cuMemRangeGetAttributes(void **data, size_t *dataSizes, CUmem_range_attribute *attributes,
					  size_t numAttributes, CUdeviceptr devPtr, size_t count)
{
	CUresult res =
	    data && dataSizes && attributes && numAttributes ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;

	for (size_t i = 0; i < numAttributes && res == CUDA_SUCCESS; i++)
		res = crc_hook_cuMemRangeGetAttribute(data[i], dataSizes[i], attributes[i], devPtr, count);
	return res;
}

CUresult crc_hook_cuMemHostGetDevicePointer_v2(CUdeviceptr *pdptr, void *p, unsigned int Flags)
{
	struct crc_pinned *pin = crc_pinned_find(p, 1);

	if (!pdptr || Flags)
		return CUDA_ERROR_INVALID_VALUE;
	if (!pin || !pin->device_ptr)
		return CUDA_ERROR_INVALID_VALUE;
	*pdptr = pin->device_ptr + ((uintptr_t)p - pin->addr);
	return CUDA_SUCCESS;
}

/* The application's own memory. Where it is private writable memory (the heap, an anonymous mapping, a
 * library's static data), its pages are moved in place onto a memfd (same address, same bytes) that the
 * daemon then maps and registers like cuMemAllocHost memory: kernels reach it mapped, copies go as from
 * page-locked memory and CRIU carries it. Other memory (a shared mapping, the stack, over TCP) stays
 * where it is: copies
 * take the pageable path, synchronously, and a mapping into device space is refused. The move copies
 * the pages: a write by another thread to them during the call would be lost (programs register
 * memory before they use it with the GPU). A process forked later shares those pages, not copies. */
/* The memfd that registered pages of the program's own move onto (share_in_place). */
#define REGISTERED_MEMFD "crcuda-registered"

static bool pinned_overlaps(uintptr_t a, uintptr_t end)
{
	bool hit = false;

	pthread_mutex_lock(&crc_client.pinned_lock);
	for (struct crc_pinned *r = crc_client.pinned; r && !hit; r = r->next)
		hit = a < r->addr + r->bytes && r->addr < end;
	pthread_mutex_unlock(&crc_client.pinned_lock);
	return hit;
}

/* [a, end) lies in private read-write mappings (the heap and the stack included), or in pages an
 * earlier registration moved onto a memfd of ours (they stay there: NPP registers the same stack
 * variable call after call). */
static bool private_writable(uintptr_t a, uintptr_t end, char *what, size_t what_len)
{
	FILE *f = fopen("/proc/self/maps", "re");
	char line[512];
	uintptr_t covered = a;

	if (!f)
		return false;
	while (covered < end && fgets(line, sizeof(line), f)) {
		unsigned long lo, hi, off, inode;
		char perms[8] = "", path[256] = "";

		if (sscanf(line, "%lx-%lx %7s %lx %*s %lu %255s", &lo, &hi, perms, &off, &inode, path) < 5)
			continue;
		if (hi <= covered || lo > covered)
			continue;
		/* Private writable memory: anonymous, the heap, the stack, or a file's copy-on-write data (a
		 * library's static buffers and stack variables, which NPP registers); not a device's memory.
		 */
		if ((strcmp(perms, "rw-p") &&
		     (strcmp(perms, "rw-s") || strcmp(path, "/memfd:" REGISTERED_MEMFD))) ||
		    (path[0] == '[' && strcmp(path, "[heap]") && strcmp(path, "[stack]")) ||
		    (inode && !strncmp(path, "/dev/", 5))) {
			snprintf(what, what_len, "%lx-%lx %s %s", lo, hi, perms,
				 path[0] ? path : "(anonymous)");
			break;
		}
		covered = hi;
	}
	fclose(f);
	if (covered < end && !what[0])
		snprintf(what, what_len, "%#lx: not mapped", (unsigned long)covered);
	return covered >= end;
}

/* Moves [a, a + len) onto a new memfd in place; its fd, or -1 (nothing changed). */
static int share_in_place(uintptr_t a, size_t len)
{
	int fd = memfd_create(REGISTERED_MEMFD, MFD_CLOEXEC);
	void *copy;

	if (fd < 0)
		return -1;
	if (ftruncate(fd, (off_t)len) ||
	    (copy = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED) {
		close(fd);
		return -1;
	}
	/* Whole pages, past the ends of the program's objects: read by the kernel, which no checker of the
	 * program's own accesses (ASan's redzones) mistakes for a read of them. */
	struct iovec to = {copy, len}, from = {(void *)a, len};

	if (process_vm_readv(getpid(), &to, 1, &from, 1, 0) != (ssize_t)len)
		memcpy(copy, (void *)a, len);
	munmap(copy, len);
	/* MAP_FIXED replaces the pages in one step: the same bytes at the same address from here on. */
	if (mmap((void *)a, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) != (void *)a) {
		close(fd);
		return -1;
	}
	return fd;
}

/* share_in_place from another thread while this one waits without touching its stack: the pages may
 * hold this thread's own stack (a registered local variable), where a write between the copy and the
 * remap would be lost. The wait is a loop in registers. */
struct mover {
	uintptr_t a;
	size_t len;
	int fd;
	atomic_int ready, done;
};

static void *mover_main(void *arg)
{
	struct mover *m = arg;

	while (!atomic_load_explicit(&m->ready, memory_order_acquire))
		;
	m->fd = share_in_place(m->a, m->len);
	atomic_store_explicit(&m->done, 1, memory_order_release);
	return NULL;
}

static void wait_without_stack(atomic_int *flag)
{
#if defined(__x86_64__)
	__asm__ volatile("1: pause\n\tcmpl $0, (%0)\n\tje 1b" : : "r"(flag) : "memory", "cc");
#elif defined(__aarch64__)
	__asm__ volatile("1: yield\n\tldar w9, [%0]\n\tcbz w9, 1b" : : "r"(flag) : "memory", "w9");
#else
	while (!atomic_load_explicit(flag, memory_order_acquire))
		;
#endif
}

static int share_in_place_safely(uintptr_t a, size_t len)
{
	struct mover *m = calloc(1, sizeof(*m));
	pthread_t t;
	int fd;

	if (!m)
		return -1;
	m->a = a;
	m->len = len;
	m->fd = -1;
	if (pthread_create(&t, NULL, mover_main, m)) {
		free(m);
		return -1;
	}
	atomic_store_explicit(&m->ready, 1, memory_order_release);
	wait_without_stack(&m->done);
	pthread_join(t, NULL);
	fd = m->fd;
	free(m);
	return fd;
}

CUresult crc_hook_cuMemHostRegister_v2(void *p, size_t bytesize, unsigned int Flags)
{
	uintptr_t a = (uintptr_t)p & ~(uintptr_t)4095,
		  end = ((uintptr_t)p + bytesize + 4095) & ~(uintptr_t)4095;
	struct crc_pinned *pin;
	CUresult res = crc_ready();
	uint64_t gen = crc_restore_generation();
	int fd = -1;

	if (res != CUDA_SUCCESS)
		return res;
	if (!p || !bytesize || (uintptr_t)p + bytesize < (uintptr_t)p)
		return CUDA_ERROR_INVALID_VALUE;
	if (pinned_overlaps(a, end))
		return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
	char what[320] = "";

	if (!crc_client.tcp && private_writable(a, end, what, sizeof(what)))
		fd = share_in_place_safely(a, end - a);
	if (fd < 0 && (Flags & CU_MEMHOSTREGISTER_DEVICEMAP)) {
		pr_warn("cuMemHostRegister: %p+%#zx cannot be shared with the daemon (%s): it cannot be "
			"mapped into device space under crcuda",
			p, bytesize,
			crc_client.tcp ? "a remote GPU"
			: what[0]      ? what
				       : "cannot move its pages");
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	pin = calloc(1, sizeof(*pin));
	if (!pin) {
		if (fd >= 0)
			close(fd);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	*pin = (struct crc_pinned){.addr = (uintptr_t)p, .bytes = bytesize, .flags = Flags, .memfd = -2};
	if (fd >= 0) {
		struct crc_pin_req req = {.client_addr = a, .bytes = end - a, .flags = Flags};
		struct crc_pin_reply reply = {0};

		res = pin_register(fd, &req, &reply);
		if (res != CUDA_SUCCESS) {
			close(fd);
			free(pin);
			return res;
		}
		*pin = (struct crc_pinned){
		    .addr = a, .bytes = end - a, .flags = Flags, .device_ptr = reply.device_ptr, .memfd = fd};
	}
	pin->registered_at = (uintptr_t)p;
	return pin_insert(pin, gen);
}

/* The CUDA 4.0 symbol: the same call. */
CUresult crc_hook_cuMemHostRegister(void *p, size_t bytesize, unsigned int Flags)
{
	return crc_hook_cuMemHostRegister_v2(p, bytesize, Flags);
}

CUresult crc_hook_cuMemHostUnregister(void *p)
{
	struct crc_pinned *pin = NULL;
	CUresult res = CUDA_SUCCESS;
	uint64_t gen;

	pthread_mutex_lock(&crc_client.pinned_lock);
	gen = crc_client.rebinds;
	for (struct crc_pinned **pp = &crc_client.pinned; *pp; pp = &(*pp)->next)
		if ((*pp)->registered_at && (*pp)->registered_at == (uintptr_t)p) {
			pin = *pp;
			*pp = pin->next;
			break;
		}
	pthread_mutex_unlock(&crc_client.pinned_lock);
	if (!pin)
		return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
	/* The pages stay on their memfd, where the program keeps using them. */
	if (pin->memfd >= 0) {
		res = pin_forget(pin, gen);
		close(pin->memfd);
	}
	free(pin);
	return res;
}

/* ---- pointer attributes ------------------------------------------------------------------------- */
static size_t attr_size(CUpointer_attribute a)
{
	switch (a) {
	case CU_POINTER_ATTRIBUTE_CONTEXT:
	case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
	case CU_POINTER_ATTRIBUTE_HOST_POINTER:
	case CU_POINTER_ATTRIBUTE_BUFFER_ID:
	case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
	case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
	case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
	case CU_POINTER_ATTRIBUTE_MAPPING_SIZE:
	case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR:
	case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID:
		return 8;
	case CU_POINTER_ATTRIBUTE_P2P_TOKENS:
		return sizeof(CUDA_POINTER_ATTRIBUTE_P2P_TOKENS);
	case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
		return sizeof(CUmemoryPool);
	default:
		return 4;
	}
}

/* Host memory of this process: answered here. */
static CUresult host_pointer_attribute(void *data, CUpointer_attribute a, const struct crc_pinned *pin,
				       uint64_t ptr)
{
	uint64_t off = ptr - pin->addr;

	switch (a) {
	case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
		*(unsigned *)data = pin->managed ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_HOST_POINTER:
		*(void **)data = (void *)(uintptr_t)ptr;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
		if (!pin->device_ptr)
			return CUDA_ERROR_INVALID_VALUE;
		*(CUdeviceptr *)data = pin->device_ptr + off;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_CONTEXT:
		*(CUcontext *)data = (CUcontext)(uintptr_t)crc_current_ctx();
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_IS_MANAGED:
		*(unsigned *)data = pin->managed;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: {
		CUdevice dev;

		if (crc_ctx_device(0, &dev) != CUDA_SUCCESS)
			return CUDA_ERROR_INVALID_VALUE;
		*(int *)data = dev;
		return CUDA_SUCCESS;
	}
	case CU_POINTER_ATTRIBUTE_MAPPED:
		*(unsigned *)data = 1;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
		*(uint64_t *)data = pin->addr;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
		*(uint64_t *)data = pin->bytes;
		return CUDA_SUCCESS;
	default:
		return CUDA_ERROR_NOT_SUPPORTED;
	}
}

/* Page-locked memory answered here: over TCP, or the application's own (cuMemHostRegister); what the
 * daemon shares by memfd it answers itself. */
static struct crc_pinned *local_pinned(CUdeviceptr ptr)
{
	struct crc_pinned *pin = crc_pinned_find((void *)(uintptr_t)ptr, 1);

	return pin && (pin->memfd < 0 || pin->managed) ? pin : NULL;
}

CUresult crc_hook_cuPointerGetAttribute(void *data, CUpointer_attribute attribute, CUdeviceptr ptr)
{
	struct crc_pinned *pin = local_pinned(ptr);
	uint64_t req[2] = {ptr, (uint64_t)attribute}, out[2] = {0};
	CUresult res;

	if (!data)
		return CUDA_ERROR_INVALID_VALUE;
	if (pin)
		return host_pointer_attribute(data, attribute, pin, ptr);
	res = crc_rpc(CRC_CU_cuPointerGetAttribute, req, sizeof(req), out, sizeof(out));
	if (res != CUDA_SUCCESS)
		return res;
	/* A memory pool's handle would be the daemon's: only "none" is answered. */
	if (attribute == CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE && out[0])
		return crc_not_supported(CRC_CU_cuPointerGetAttribute);
	memcpy(data, out, attr_size(attribute));
	return CUDA_SUCCESS;
}

#define PTRATTRS_MAX 64 /* the daemon's limit per call */

/* One round trip for the whole array: the daemon answers each attribute as the driver's array form
 * does (values of attributes that do not apply are zero, not errors). Host memory of this process is
 * answered here, attributes it cannot answer with zeros. */
CUresult crc_hook_cuPointerGetAttributes(unsigned int numAttributes, CUpointer_attribute *attributes,
					 void **data, CUdeviceptr ptr)
{
	struct crc_pinned *pin = local_pinned(ptr);
	uint64_t req[2 + PTRATTRS_MAX], out[2 * PTRATTRS_MAX];
	CUresult res;

	if (!attributes || !data || !numAttributes || numAttributes > PTRATTRS_MAX)
		return CUDA_ERROR_INVALID_VALUE;
	for (unsigned i = 0; i < numAttributes; i++)
		if (!data[i])
			return CUDA_ERROR_INVALID_VALUE;
	if (pin) {
		for (unsigned i = 0; i < numAttributes; i++)
			if (host_pointer_attribute(data[i], attributes[i], pin, ptr) != CUDA_SUCCESS)
				memset(data[i], 0, attr_size(attributes[i]));
		return CUDA_SUCCESS;
	}
	req[0] = ptr;
	req[1] = numAttributes;
	for (unsigned i = 0; i < numAttributes; i++)
		req[2 + i] = (uint64_t)attributes[i];
	res = crc_rpc(CRC_CU_cuPointerGetAttributes, req, (2 + numAttributes) * 8, out, numAttributes * 16);
	for (unsigned i = 0; res == CUDA_SUCCESS && i < numAttributes; i++) {
		/* A memory pool's handle is the daemon's, not the application's: none is reported. */
		if (attributes[i] == CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE)
			memset(data[i], 0, sizeof(CUmemoryPool));
		else
			memcpy(data[i], out + 2 * i, attr_size(attributes[i]));
	}
	return res;
}

/* Only SYNC_MEMOPS is settable, an unsigned int: its value travels, the driver refuses the other
 * attributes (the daemon asks it). The daemon keeps cuMemAlloc memory's setting, which the journal
 * carries over a checkpoint. */
CUresult crc_hook_cuPointerSetAttribute(const void *value, CUpointer_attribute attribute, CUdeviceptr ptr)
{
	uint64_t req[3] = {ptr, (uint64_t)attribute, 0};
	CUresult res = crc_ready();

	if (res != CUDA_SUCCESS)
		return res;
	/* The driver answers INVALID_VALUE for any other attribute (measured, H200, driver 580); the
	 * daemon's would see the VMM mapping behind cuMemAlloc memory and answer NOT_SUPPORTED. */
	if (!value || attribute != CU_POINTER_ATTRIBUTE_SYNC_MEMOPS)
		return CUDA_ERROR_INVALID_VALUE;
	req[2] = *(const unsigned *)value;
	return crc_rpc(CRC_CU_cuPointerSetAttribute, req, sizeof(req), NULL, 0);
}

/* The parameters travel as they are (their device addresses name the same memory in the worker); a
 * round trip, for the driver's submission error and its index. Whether the device decompresses at all
 * is the driver's answer. */
CUresult crc_hook_cuMemBatchDecompressAsync(CUmemDecompressParams *paramsArray, size_t count,
					    unsigned int flags, size_t *errorIndex, CUstream stream)
{
	struct crc_call c;
	struct crc_decompress_req *r;
	CUresult res = crc_ready();

	if (res != CUDA_SUCCESS)
		return res;
	if (count > CRC_DECOMPRESS_MAX)
		return CUDA_ERROR_INVALID_VALUE;
	res = crc_call_begin(&c, CRC_CU_cuMemBatchDecompressAsync, 0,
			     sizeof(*r) + (paramsArray ? count * sizeof(*paramsArray) : 0), (void **)&r);
	if (res != CUDA_SUCCESS)
		return res;
	*r = (struct crc_decompress_req){.stream = (uintptr_t)stream,
					 .count = count,
					 .flags = flags,
					 .want_index = errorIndex != NULL,
					 .null_array = !paramsArray,
					 .index = errorIndex ? *errorIndex : 0};
	if (count && paramsArray)
		memcpy(r + 1, paramsArray, count * sizeof(*paramsArray));
	res = crc_call_wait(&c, NULL, NULL);
	if (errorIndex && c.reply_len >= 8)
		memcpy(errorIndex, c.reply, sizeof(*errorIndex));
	crc_call_end(&c);
	return res;
}

/* cuMemSetAccess carries an array: one record with count descriptors. */
CUresult crc_hook_cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count)
{
	struct crc_call c;
	uint64_t *p;
	CUresult res;

	if (!desc || !count || count > 64)
		return CUDA_ERROR_INVALID_VALUE;
	res = crc_call_begin(&c, CRC_CU_cuMemSetAccess, 0, 24 + count * sizeof(*desc), (void **)&p);
	if (res != CUDA_SUCCESS)
		return res;
	p[0] = ptr;
	p[1] = size;
	p[2] = count;
	memcpy(p + 3, desc, count * sizeof(*desc));
	res = crc_call_wait(&c, NULL, NULL);
	crc_call_end(&c);
	return res;
}
