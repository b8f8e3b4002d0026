/* Memory of the simulated device.
 *
 * Device memory is host memory at device-like addresses: each device has an arena reserved
 * PROT_NONE at SIM_ARENA_BASE + ordinal TiB, and cuMemAlloc (and module globals) commit pages in it
 * and give them back on free, so a stale or host pointer used as device memory faults or is refused.
 * VMM reservations are separate PROT_NONE ranges, at the requested address when it is free;
 * cuMemCreate makes a memfd and cuMemMap maps it MAP_SHARED into a reservation, inaccessible until
 * cuMemSetAccess. Every range a kernel or copy may touch is in one sorted registry, which is how
 * pointer arguments are checked. */
#define LOG_PREFIX "sim: "

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "crcuda/log.h"
#include "crcuda/mempool.h"
#include "sim.h"

#define SIM_PAGE	    4096ull
#define SIM_MAX_PITCH_ALIGN 512ull

struct sim_vmm_alloc {
	int fd;
	size_t size;
	struct sim_device *dev;
	int refs; /* the handle itself plus one per mapping or retain; guarded by mem_lock */
	unsigned long long id;
	CUmemAllocationProp prop;
	struct sim_vmm_alloc *next;
};

struct sim_reservation {
	uintptr_t base;
	size_t size;
	struct sim_reservation *next;
};

static pthread_mutex_t mem_lock = PTHREAD_MUTEX_INITIALIZER;
static struct sim_range *ranges; /* sorted by base, non-overlapping */
static size_t range_count, range_cap;
static struct sim_reservation *reservations;
static struct sim_vmm_alloc *vmm_allocs;

static size_t round_up(size_t value, size_t align)
{
	return (value + align - 1) / align * align;
}

/* ---- the registry (mem_lock held) ---- */

/* Index of the last range with base <= addr, or -1. */
static ssize_t range_floor(uintptr_t addr)
{
	ssize_t lo = 0, hi = (ssize_t)range_count - 1, found = -1;

	while (lo <= hi) {
		ssize_t mid = (lo + hi) / 2;

		if (ranges[mid].base <= addr) {
			found = mid;
			lo = mid + 1;
		} else {
			hi = mid - 1;
		}
	}
	return found;
}

static int range_insert(const struct sim_range *r)
{
	ssize_t at = range_floor(r->base) + 1;

	if (range_count == range_cap) {
		size_t cap = range_cap ? range_cap * 2 : 64;
		struct sim_range *grown = realloc(ranges, cap * sizeof(*ranges));

		if (!grown)
			return -1;
		ranges = grown;
		range_cap = cap;
	}
	memmove(&ranges[at + 1], &ranges[at], (range_count - (size_t)at) * sizeof(*ranges));
	ranges[at] = *r;
	range_count++;
	return 0;
}

static void range_remove_at(size_t index)
{
	memmove(&ranges[index], &ranges[index + 1], (range_count - index - 1) * sizeof(*ranges));
	range_count--;
}

/* The range holding addr, or NULL. */
static struct sim_range *range_holding(uintptr_t addr)
{
	ssize_t i = range_floor(addr);

	if (i < 0 || addr - ranges[i].base >= ranges[i].size)
		return NULL;
	return &ranges[i];
}

/* Whether [addr, addr + bytes) is covered by ranges; VMM mappings side by side count as one. */
static struct sim_range *range_covering(uintptr_t addr, size_t bytes)
{
	ssize_t i = range_floor(addr);
	uintptr_t end = addr + (bytes ? bytes : 1);

	if (end < addr || i < 0 || addr - ranges[i].base >= ranges[i].size)
		return NULL;
	for (size_t j = (size_t)i; j < range_count; j++) {
		if (end <= ranges[j].base + ranges[j].size)
			return &ranges[i];
		if (ranges[j].kind != SIM_RANGE_VMM || j + 1 == range_count ||
		    ranges[j + 1].kind != SIM_RANGE_VMM ||
		    ranges[j + 1].base != ranges[j].base + ranges[j].size)
			return NULL;
	}
	return NULL;
}

static bool in_device_window(uintptr_t addr)
{
	for (int i = 0; i < sim_device_count; i++)
		if (addr - sim_devices[i].arena_base < sim_devices[i].arena_size)
			return true;
	for (struct sim_reservation *r = reservations; r; r = r->next)
		if (addr - r->base < r->size)
			return true;
	return false;
}

bool sim_mem_find(uintptr_t ptr, size_t bytes, struct sim_range *out)
{
	struct sim_range *r;

	pthread_mutex_lock(&mem_lock);
	r = range_covering(ptr, bytes);
	if (r && out)
		*out = *r;
	pthread_mutex_unlock(&mem_lock);
	return r != NULL;
}

static CUresult check_range_access(const struct sim_range *r, bool write)
{
	if (r->kind != SIM_RANGE_VMM)
		return CUDA_SUCCESS;
	if (r->flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE ||
	    (!write && r->flags == CU_MEM_ACCESS_FLAGS_PROT_READ))
		return CUDA_SUCCESS;
	return CUDA_ERROR_INVALID_VALUE;
}

CUresult sim_mem_check_device(CUdeviceptr ptr, size_t bytes, bool write)
{
	struct sim_range r;

	if (!sim_mem_find(ptr, bytes, &r)) {
		pr_debug("0x%llx (+%zu) is not device memory", (unsigned long long)ptr, bytes);
		return CUDA_ERROR_INVALID_VALUE;
	}
	return check_range_access(&r, write);
}

CUresult sim_mem_check_any(uintptr_t ptr, size_t bytes, bool write)
{
	struct sim_range *r;
	CUresult res = CUDA_SUCCESS;

	pthread_mutex_lock(&mem_lock);
	r = range_covering(ptr, bytes);
	if (r)
		res = check_range_access(r, write);
	else if (in_device_window(ptr) || !ptr)
		res = CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_unlock(&mem_lock);
	return res;
}

bool sim_mem_is_pinned_host(const void *ptr, size_t bytes)
{
	struct sim_range r;

	return sim_mem_find((uintptr_t)ptr, bytes, &r) &&
	       (r.kind == SIM_RANGE_HOST_ALLOC || r.kind == SIM_RANGE_HOST_REGISTERED);
}

/* ---- device arenas ---- */

CUresult sim_mem_init_device(struct sim_device *dev)
{
	uintptr_t want = SIM_ARENA_BASE + (uintptr_t)dev->ordinal * SIM_ARENA_SIZE;
	void *got = mmap((void *)want, SIM_ARENA_SIZE, PROT_NONE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);

	if (got != MAP_FAILED && (uintptr_t)got != want) {
		munmap(got, SIM_ARENA_SIZE);
		got = MAP_FAILED;
	}
	if (got == MAP_FAILED) {
		/* Something else sits there; any address keeps device and host pointers apart. */
		pr_warn("device %d: cannot reserve the arena at 0x%lx, using another address", dev->ordinal,
			(unsigned long)want);
		got =
		    mmap(NULL, SIM_ARENA_SIZE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		if (got == MAP_FAILED) {
			pr_perror("device %d: cannot reserve a device arena", dev->ordinal);
			return CUDA_ERROR_OUT_OF_MEMORY;
		}
	}
	dev->arena_base = (uintptr_t)got;
	dev->arena_size = SIM_ARENA_SIZE;
	return CUDA_SUCCESS;
}

/* Lowest free gap of `bytes` at `align` in dev's arena (mem_lock held); 0 if none. */
static uintptr_t arena_find_gap(struct sim_device *dev, size_t bytes, size_t align)
{
	uintptr_t cursor = dev->arena_base, end = dev->arena_base + dev->arena_size;
	ssize_t i = range_floor(dev->arena_base);

	for (size_t j = i < 0 ? 0 : (size_t)i; j < range_count; j++) {
		const struct sim_range *r = &ranges[j];

		if (r->base + r->size <= cursor)
			continue;
		if (r->base >= end)
			break;
		if (round_up(cursor, align) + bytes <= r->base)
			break;
		cursor = r->base + r->size;
	}
	cursor = round_up(cursor, align);
	return cursor + bytes <= end ? cursor : 0;
}

CUresult sim_mem_alloc_device(struct CUctx_st *ctx, size_t bytes, enum sim_range_kind kind, CUdeviceptr *out)
{
	struct sim_device *dev = ctx->dev;
	size_t size = round_up(bytes, SIM_PAGE);
	size_t align = size >= SIM_GRANULARITY ? SIM_GRANULARITY : SIM_PAGE;
	struct sim_range r = {
	    .size = size, .requested = bytes, .kind = kind, .ctx = sim_ctx_base(ctx), .dev = dev};
	uintptr_t addr;

	if (!bytes)
		return CUDA_ERROR_INVALID_VALUE;
	if (size < bytes)
		return CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_lock(&mem_lock);
	if (atomic_load(&dev->used_mem) + size > dev->total_mem)
		goto fail_oom;
	addr = arena_find_gap(dev, size, align);
	if (!addr)
		goto fail_oom;
	if (mmap((void *)addr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1,
		 0) == MAP_FAILED) {
		pr_perror("cannot commit %zu bytes of device memory", size);
		goto fail_oom;
	}
	r.base = addr;
	r.buffer_id = sim_next_id();
	if (range_insert(&r)) {
		mmap((void *)addr, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE,
		     -1, 0);
		goto fail_oom;
	}
	atomic_fetch_add(&dev->used_mem, size);
	pthread_mutex_unlock(&mem_lock);
	*out = addr;
	sim_budget_check(dev);
	return CUDA_SUCCESS;

fail_oom:
	pthread_mutex_unlock(&mem_lock);
	return CUDA_ERROR_OUT_OF_MEMORY;
}

/* Gives the pages back and leaves the addresses PROT_NONE, so a stale pointer faults. */
static void decommit(uintptr_t base, size_t size)
{
	if (mmap((void *)base, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1,
		 0) == MAP_FAILED)
		pr_perror("cannot decommit device memory at 0x%lx", (unsigned long)base);
}

CUresult sim_mem_free_device(CUdeviceptr ptr, enum sim_range_kind kind)
{
	ssize_t i;
	struct sim_range r;

	pthread_mutex_lock(&mem_lock);
	i = range_floor(ptr);
	if (i < 0 || ranges[i].base != ptr || ranges[i].kind != kind) {
		pthread_mutex_unlock(&mem_lock);
		return CUDA_ERROR_INVALID_VALUE;
	}
	r = ranges[i];
	range_remove_at((size_t)i);
	pthread_mutex_unlock(&mem_lock);
	decommit(r.base, r.size);
	atomic_fetch_sub(&r.dev->used_mem, r.size);
	return CUDA_SUCCESS;
}

void sim_mem_free_ctx(struct CUctx_st *ctx)
{
	pthread_mutex_lock(&mem_lock);
	for (size_t i = 0; i < range_count;) {
		struct sim_range r = ranges[i];

		/* Page-locked host memory outlives its context here (as portable memory does): it only
		 * forgets the context, which is freed. */
		if (r.ctx == ctx && (r.kind == SIM_RANGE_HOST_ALLOC || r.kind == SIM_RANGE_HOST_REGISTERED))
			ranges[i].ctx = NULL;
		if (r.ctx != ctx || (r.kind != SIM_RANGE_DEVICE && r.kind != SIM_RANGE_GLOBAL)) {
			i++;
			continue;
		}
		range_remove_at(i);
		decommit(r.base, r.size);
		atomic_fetch_sub(&r.dev->used_mem, r.size);
	}
	pthread_mutex_unlock(&mem_lock);
}

CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
	struct CUctx_st *ctx;
	CUresult res;

	SIM_ENTER(cuMemAlloc_v2);
	if ((res = sim_capture_check_unsafe()))
		return res;
	if (!dptr)
		return CUDA_ERROR_INVALID_VALUE;
	res = sim_ctx_require(&ctx);
	if (res != CUDA_SUCCESS)
		return res;
	return sim_mem_alloc_device(ctx, bytesize, SIM_RANGE_DEVICE, dptr);
}

CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height,
			    unsigned int element_size)
{
	struct CUctx_st *ctx;
	CUresult res;
	size_t row;

	SIM_ENTER(cuMemAllocPitch_v2);
	if (!dptr || !pitch || !width || !height ||
	    (element_size != 4 && element_size != 8 && element_size != 16))
		return CUDA_ERROR_INVALID_VALUE;
	res = sim_ctx_require(&ctx);
	if (res != CUDA_SUCCESS)
		return res;
	row = round_up(width, SIM_MAX_PITCH_ALIGN);
	if (height > SIZE_MAX / row)
		return CUDA_ERROR_OUT_OF_MEMORY;
	res = sim_mem_alloc_device(ctx, row * height, SIM_RANGE_DEVICE, dptr);
	if (res == CUDA_SUCCESS)
		*pitch = row;
	return res;
}

static CUresult host_range_take(void *p, enum sim_range_kind kind, struct sim_range *out);

static const struct crc_mempool_ops pool_ops;

/* cuMemFree of device memory (stream-ordered allocations' books are the caller's). */
static CUresult device_free(CUdeviceptr dptr)
{
	struct sim_range r;

	if (!sim_mem_find(dptr, 1, &r) || r.base != dptr || r.kind != SIM_RANGE_DEVICE)
		return CUDA_ERROR_INVALID_VALUE;
	/* Like the driver, freeing waits for the context's work, which may still use the memory. */
	sim_ctx_wait_idle(r.ctx);
	return sim_mem_free_device(dptr, SIM_RANGE_DEVICE);
}

CUresult cuMemFree_v2(CUdeviceptr dptr)
{
	struct sim_range r;
	CUresult res;

	SIM_ENTER(cuMemFree_v2);
	if ((res = sim_capture_check_unsafe()))
		return res;
	if (!dptr)
		return CUDA_SUCCESS;
	if (sim_graph_mem_owns(dptr))
		return CUDA_SUCCESS; /* the graphs' to free */
	if (sim_mem_find(dptr, 1, &r) && r.base == dptr && r.kind == SIM_RANGE_MANAGED) {
		sim_ctx_wait_idle(r.ctx);
		if (host_range_take((void *)(uintptr_t)dptr, SIM_RANGE_MANAGED, &r) == CUDA_SUCCESS)
			munmap((void *)r.base, r.size);
		return CUDA_SUCCESS;
	}
	res = crc_mempool_free(dptr, NULL, &pool_ops);
	return res == CUDA_ERROR_NOT_FOUND ? device_free(dptr) : res;
}

CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total_bytes)
{
	struct CUctx_st *ctx;
	CUresult res;
	size_t used;

	SIM_ENTER(cuMemGetInfo_v2);
	if (!free_bytes || !total_bytes)
		return CUDA_ERROR_INVALID_VALUE;
	res = sim_ctx_require(&ctx);
	if (res != CUDA_SUCCESS)
		return res;
	used = atomic_load(&ctx->dev->used_mem);
	*total_bytes = ctx->dev->total_mem;
	*free_bytes = used < ctx->dev->total_mem ? ctx->dev->total_mem - used : 0;
	return CUDA_SUCCESS;
}

CUresult cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
	struct sim_range r;

	SIM_ENTER(cuMemGetAddressRange_v2);
	if (!sim_mem_find(dptr, 1, &r))
		return CUDA_ERROR_NOT_FOUND;
	if (pbase)
		*pbase = r.base;
	if (psize)
		*psize = r.size;
	return CUDA_SUCCESS;
}

/* ---- pinned host memory ---- */

static CUresult host_alloc_kind(void **pp, size_t bytesize, unsigned flags, enum sim_range_kind kind);
static CUresult host_range_take(void *p, enum sim_range_kind kind, struct sim_range *out);

static CUresult host_alloc(void **pp, size_t bytesize, unsigned flags)
{
	if (flags & ~(CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_WRITECOMBINED))
		return CUDA_ERROR_INVALID_VALUE;
	return host_alloc_kind(pp, bytesize, flags, SIM_RANGE_HOST_ALLOC);
}

/* ---- managed memory: host memory the device reaches, as pinned memory is; the advice is kept ---- */
CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
	SIM_ENTER(cuMemAllocManaged);
	if (!dptr || (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST))
		return CUDA_ERROR_INVALID_VALUE;
	return host_alloc_kind((void **)dptr, bytesize, flags, SIM_RANGE_MANAGED);
}

/* The managed range holding [ptr, ptr + count): fn applied to its advice under the lock. */
static CUresult managed_apply(CUdeviceptr ptr, size_t count, CUresult (*fn)(struct crc_uvm_advice *, void *),
			      void *arg)
{
	ssize_t i;
	CUresult res = CUDA_ERROR_INVALID_VALUE;

	pthread_mutex_lock(&mem_lock);
	i = range_floor(ptr);
	if (count && i >= 0 && ranges[i].kind == SIM_RANGE_MANAGED && ptr - ranges[i].base < ranges[i].size &&
	    count <= ranges[i].size - (ptr - ranges[i].base))
		res = fn(&ranges[i].advice, arg);
	pthread_mutex_unlock(&mem_lock);
	return res;
}

struct advise_arg {
	CUmem_advise advice;
	int device;
};

static CUresult advise_fn(struct crc_uvm_advice *a, void *arg)
{
	const struct advise_arg *x = arg;

	return crc_uvm_advise(a, x->advice, x->device, sim_device_count);
}

static CUresult prefetch_fn(struct crc_uvm_advice *a, void *arg)
{
	return crc_uvm_prefetch(a, *(int *)arg, sim_device_count);
}

static CUresult attach_fn(struct crc_uvm_advice *a, void *arg)
{
	(void)a;
	(void)arg;
	return CUDA_SUCCESS;
}

struct range_attr_arg {
	void *data;
	size_t size;
	CUmem_range_attribute attr;
};

static CUresult range_attr_fn(struct crc_uvm_advice *a, void *arg)
{
	const struct range_attr_arg *x = arg;

	return crc_uvm_range_attribute(a, x->data, x->size, x->attr);
}

CUresult cuMemAdvise(CUdeviceptr ptr, size_t count, CUmem_advise advice, CUdevice device)
{
	struct advise_arg x = {advice, device};

	SIM_ENTER(cuMemAdvise);
	return managed_apply(ptr, count, advise_fn, &x);
}

CUresult cuMemAdvise_v2(CUdeviceptr ptr, size_t count, CUmem_advise advice, CUmemLocation location)
{
	struct advise_arg x = {advice, crc_uvm_location(location)};

	SIM_ENTER(cuMemAdvise_v2);
	return managed_apply(ptr, count, advise_fn, &x);
}

static CUresult prefetch(bool pt, CUdeviceptr ptr, size_t count, int device, CUstream h)
{
	struct CUstream_st *s;
	CUresult res = sim_stream_resolve(h, pt, &s);

	return res == CUDA_SUCCESS ? managed_apply(ptr, count, prefetch_fn, &device) : res;
}

static CUresult prefetch_v1(bool pt, CUdeviceptr ptr, size_t count, CUdevice device, CUstream h)
{
	return prefetch(pt, ptr, count, device, h);
}

static CUresult prefetch_v2(bool pt, CUdeviceptr ptr, size_t count, CUmemLocation location, unsigned flags,
			    CUstream h)
{
	return flags ? CUDA_ERROR_INVALID_VALUE : prefetch(pt, ptr, count, crc_uvm_location(location), h);
}

static CUresult attach(bool pt, CUstream h, CUdeviceptr ptr, size_t length, unsigned flags)
{
	struct CUstream_st *s;
	CUresult res = sim_stream_resolve(h, pt, &s);

	if (res != CUDA_SUCCESS)
		return res;
	if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST && flags != CU_MEM_ATTACH_SINGLE)
		return CUDA_ERROR_INVALID_VALUE;
	return managed_apply(ptr, length ? length : 1, attach_fn, NULL);
}

/* Batches: the shape, the stream (not the legacy one), every range managed; then each prefetch. */
static CUresult batch(bool pt, CUdeviceptr *dptrs, size_t *sizes, size_t count, CUmemLocation *locs,
		      size_t *idxs, size_t nlocs, unsigned long long flags, CUstream h, bool with_locations)
{
	struct CUstream_st *s;
	CUresult res = crc_uvm_batch_check(dptrs, sizes, count, locs, idxs, nlocs, flags, with_locations);

	if (res == CUDA_SUCCESS && (h == CU_STREAM_LEGACY || (!h && !pt)))
		res = CUDA_ERROR_INVALID_VALUE;
	if (res == CUDA_SUCCESS)
		res = sim_stream_resolve(h, pt, &s);
	for (size_t i = 0; res == CUDA_SUCCESS && i < count; i++)
		res = managed_apply(dptrs[i], sizes[i], attach_fn, NULL);
	for (size_t i = 0; res == CUDA_SUCCESS && with_locations && i < count; i++) {
		int device = crc_uvm_location(crc_uvm_batch_location(i, locs, idxs, nlocs));

		res = managed_apply(dptrs[i], sizes[i], prefetch_fn, &device);
	}
	return res;
}

static CUresult prefetch_batch(bool pt, CUdeviceptr *dptrs, size_t *sizes, size_t count, CUmemLocation *locs,
			       size_t *idxs, size_t nlocs, unsigned long long flags, CUstream h)
{
	return batch(pt, dptrs, sizes, count, locs, idxs, nlocs, flags, h, true);
}

static CUresult discard_batch(bool pt, CUdeviceptr *dptrs, size_t *sizes, size_t count,
			      unsigned long long flags, CUstream h)
{
	return batch(pt, dptrs, sizes, count, NULL, NULL, 0, flags, h, false);
}

SIM_STREAM_API_PAIR(cuMemPrefetchBatchAsync, cuMemPrefetchBatchAsync_ptsz, prefetch_batch,
		    (CUdeviceptr * dptrs, size_t *sizes, size_t count, CUmemLocation *locs, size_t *idxs,
		     size_t nlocs, unsigned long long flags, CUstream h),
		    dptrs, sizes, count, locs, idxs, nlocs, flags, h)
SIM_STREAM_API_PAIR(cuMemDiscardAndPrefetchBatchAsync, cuMemDiscardAndPrefetchBatchAsync_ptsz, prefetch_batch,
		    (CUdeviceptr * dptrs, size_t *sizes, size_t count, CUmemLocation *locs, size_t *idxs,
		     size_t nlocs, unsigned long long flags, CUstream h),
		    dptrs, sizes, count, locs, idxs, nlocs, flags, h)
SIM_STREAM_API_PAIR(cuMemDiscardBatchAsync, cuMemDiscardBatchAsync_ptsz, discard_batch,
		    (CUdeviceptr * dptrs, size_t *sizes, size_t count, unsigned long long flags, CUstream h),
		    dptrs, sizes, count, flags, h)
SIM_STREAM_API_PAIR(cuMemPrefetchAsync, cuMemPrefetchAsync_ptsz, prefetch_v1,
		    (CUdeviceptr ptr, size_t count, CUdevice device, CUstream h), ptr, count, device, h)
SIM_STREAM_API_PAIR(cuMemPrefetchAsync_v2, cuMemPrefetchAsync_v2_ptsz, prefetch_v2,
		    (CUdeviceptr ptr, size_t count, CUmemLocation location, unsigned flags, CUstream h), ptr,
		    count, location, flags, h)
SIM_STREAM_API_PAIR(cuStreamAttachMemAsync, cuStreamAttachMemAsync_ptsz, attach,
		    (CUstream h, CUdeviceptr ptr, size_t length, unsigned flags), h, ptr, length, flags)

CUresult cuMemRangeGetAttribute(void *data, size_t size, CUmem_range_attribute attr, CUdeviceptr ptr,
				size_t count)
{
	struct range_attr_arg x = {data, size, attr};

	SIM_ENTER(cuMemRangeGetAttribute);
	return managed_apply(ptr, count, range_attr_fn, &x);
}

CUresult cuMemRangeGetAttributes(void **data, size_t *sizes, CUmem_range_attribute *attrs, size_t n,
				 CUdeviceptr ptr, size_t count)
{
	CUresult res = data && sizes && attrs && n ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;

	SIM_ENTER(cuMemRangeGetAttributes);
	for (size_t i = 0; i < n && res == CUDA_SUCCESS; i++) {
		struct range_attr_arg x = {data[i], sizes[i], attrs[i]};

		res = managed_apply(ptr, count, range_attr_fn, &x);
	}
	return res;
}

/* Host memory the device reaches, owned by ctx (NULL: by none, as a library's managed variables). */
static CUresult host_alloc_in(struct CUctx_st *ctx, void **pp, size_t bytesize, unsigned flags,
			      enum sim_range_kind kind)
{
	size_t size = round_up(bytesize, SIM_PAGE);
	struct sim_range r = {.size = size, .requested = bytesize, .kind = kind, .flags = flags};
	void *mem;

	if (!pp || !bytesize)
		return CUDA_ERROR_INVALID_VALUE;
	crc_uvm_advice_init(&r.advice);
	mem = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (mem == MAP_FAILED)
		return CUDA_ERROR_OUT_OF_MEMORY;
	r.base = (uintptr_t)mem;
	r.ctx = sim_ctx_base(ctx);
	r.dev = ctx ? ctx->dev : 0;
	r.buffer_id = sim_next_id();
	pthread_mutex_lock(&mem_lock);
	if (range_insert(&r)) {
		pthread_mutex_unlock(&mem_lock);
		munmap(mem, size);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	pthread_mutex_unlock(&mem_lock);
	*pp = mem;
	return CUDA_SUCCESS;
}

static CUresult host_alloc_kind(void **pp, size_t bytesize, unsigned flags, enum sim_range_kind kind)
{
	struct CUctx_st *ctx;
	CUresult res;

	if (!pp || !bytesize)
		return CUDA_ERROR_INVALID_VALUE;
	res = sim_ctx_require(&ctx);
	return res == CUDA_SUCCESS ? host_alloc_in(ctx, pp, bytesize, flags, kind) : res;
}

/* __managed__ variables of a module or library: managed memory, as cuMemAllocManaged makes it, of no
 * context (a library's are shared by every context). */
CUresult sim_mem_alloc_managed(size_t bytes, CUdeviceptr *out)
{
	return host_alloc_in(NULL, (void **)out, bytes, CU_MEM_ATTACH_GLOBAL, SIM_RANGE_MANAGED);
}

void sim_mem_free_managed(CUdeviceptr p)
{
	struct sim_range r;

	if (host_range_take((void *)(uintptr_t)p, SIM_RANGE_MANAGED, &r) == CUDA_SUCCESS)
		munmap((void *)r.base, r.size);
}

CUresult cuMemAllocHost_v2(void **pp, size_t bytesize)
{
	SIM_ENTER(cuMemAllocHost_v2);
	CUresult res = sim_capture_check_unsafe();
	return res ? res : host_alloc(pp, bytesize, 0);
}

CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int flags)
{
	SIM_ENTER(cuMemHostAlloc);
	CUresult res = sim_capture_check_unsafe();
	return res ? res : host_alloc(pp, bytesize, flags);
}

/* Removes the pinned range starting at p of the given kind; its copy goes to *out. */
static CUresult host_range_take(void *p, enum sim_range_kind kind, struct sim_range *out)
{
	ssize_t i;

	pthread_mutex_lock(&mem_lock);
	i = range_floor((uintptr_t)p);
	if (i < 0 || ranges[i].base != (uintptr_t)p || ranges[i].kind != kind) {
		pthread_mutex_unlock(&mem_lock);
		return CUDA_ERROR_INVALID_VALUE;
	}
	*out = ranges[i];
	range_remove_at((size_t)i);
	pthread_mutex_unlock(&mem_lock);
	return CUDA_SUCCESS;
}

CUresult cuMemFreeHost(void *p)
{
	struct sim_range r;
	CUresult res;

	SIM_ENTER(cuMemFreeHost);
	if ((res = sim_capture_check_unsafe()))
		return res;
	if (sim_mem_find((uintptr_t)p, 1, &r) && r.ctx && r.ctx->active)
		sim_ctx_wait_idle(r.ctx);
	res = host_range_take(p, SIM_RANGE_HOST_ALLOC, &r);
	if (res == CUDA_SUCCESS)
		munmap((void *)r.base, r.size);
	return res;
}

CUresult cuMemHostRegister_v2(void *p, size_t bytesize, unsigned int flags)
{
	struct CUctx_st *ctx;
	CUresult res;
	struct sim_range r = {
	    .base = (uintptr_t)p, .size = bytesize, .kind = SIM_RANGE_HOST_REGISTERED, .flags = flags};
	ssize_t i;

	SIM_ENTER(cuMemHostRegister_v2);
	if ((res = sim_capture_check_unsafe()))
		return res;
	if (!p || !bytesize)
		return CUDA_ERROR_INVALID_VALUE;
	res = sim_ctx_require(&ctx);
	if (res != CUDA_SUCCESS)
		return res;
	r.ctx = sim_ctx_base(ctx);
	r.dev = ctx->dev;
	r.buffer_id = sim_next_id();
	pthread_mutex_lock(&mem_lock);
	if (in_device_window(r.base)) {
		res = CUDA_ERROR_INVALID_VALUE;
		goto out;
	}
	i = range_floor(r.base + bytesize - 1);
	if (i >= 0 && ranges[i].base + ranges[i].size > r.base) {
		res = CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
		goto out;
	}
	if (range_insert(&r))
		res = CUDA_ERROR_OUT_OF_MEMORY;
out:
	pthread_mutex_unlock(&mem_lock);
	return res;
}

CUresult cuMemHostUnregister(void *p)
{
	struct sim_range r;

	SIM_ENTER(cuMemHostUnregister);
	CUresult res = sim_capture_check_unsafe();
	if (res)
		return res;
	if (sim_mem_find((uintptr_t)p, 1, &r) && r.ctx && r.ctx->active)
		sim_ctx_wait_idle(r.ctx);
	if (host_range_take(p, SIM_RANGE_HOST_REGISTERED, &r) != CUDA_SUCCESS)
		return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
	return CUDA_SUCCESS;
}

CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *pdptr, void *p, unsigned int flags)
{
	struct sim_range r;

	SIM_ENTER(cuMemHostGetDevicePointer_v2);
	if (!pdptr || flags)
		return CUDA_ERROR_INVALID_VALUE;
	if (!sim_mem_find((uintptr_t)p, 1, &r) ||
	    (r.kind != SIM_RANGE_HOST_ALLOC && r.kind != SIM_RANGE_HOST_REGISTERED))
		return CUDA_ERROR_INVALID_VALUE;
	/* Unified addressing: the device sees pinned memory at its host address. */
	*pdptr = (CUdeviceptr)(uintptr_t)p;
	return CUDA_SUCCESS;
}

CUresult cuMemHostGetFlags(unsigned int *flags, void *p)
{
	struct sim_range r;

	SIM_ENTER(cuMemHostGetFlags);
	if (!flags)
		return CUDA_ERROR_INVALID_VALUE;
	if (!sim_mem_find((uintptr_t)p, 1, &r) ||
	    (r.kind != SIM_RANGE_HOST_ALLOC && r.kind != SIM_RANGE_HOST_REGISTERED))
		return CUDA_ERROR_INVALID_VALUE;
	*flags = r.flags;
	return CUDA_SUCCESS;
}

/* ---- pointer attributes ---- */

/* As the driver answers, measured on an H200 (driver 580) with tests/programs/pointer_attrs: a
 * cuMemAlloc range is the size asked for, its mapping that size rounded to 2 MiB, as is a page-locked
 * host allocation's mapping; P2P tokens exist for device memory only. */
static CUresult pointer_attribute(void *data, CUpointer_attribute attr, const struct sim_range *r,
				  CUdeviceptr ptr)
{
	bool host = r->kind == SIM_RANGE_HOST_ALLOC || r->kind == SIM_RANGE_HOST_REGISTERED;
	bool managed = r->kind == SIM_RANGE_MANAGED;
	bool allocated = r->kind == SIM_RANGE_DEVICE || r->kind == SIM_RANGE_HOST_ALLOC;

	switch (attr) {
	case CU_POINTER_ATTRIBUTE_CONTEXT:
		*(CUcontext *)data = r->kind == SIM_RANGE_VMM ? NULL : r->ctx;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
		*(unsigned *)data = host ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
		*(CUdeviceptr *)data = ptr;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_HOST_POINTER:
		if (!host && !managed)
			return CUDA_ERROR_INVALID_VALUE;
		*(void **)data = (void *)(uintptr_t)ptr;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_P2P_TOKENS:
		if (host)
			return CUDA_ERROR_INVALID_VALUE;
		*(CUDA_POINTER_ATTRIBUTE_P2P_TOKENS *)data =
		    (CUDA_POINTER_ATTRIBUTE_P2P_TOKENS){.p2pToken = r->buffer_id, .vaSpaceToken = 1};
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
		/* Unset: 1 for VMM mappings and cuMemAlloc memory of 2 MiB or more, 0 for the rest
		 * (measured on an H100 and an H200 host, driver 580.159.04: 1 MiB answers 0, 3 MiB 1;
		 * another H200 host answered 0 for both). */
		*(int *)data = r->sync_set ? (int)r->sync_memops
					   : r->kind == SIM_RANGE_VMM ||
						 (r->kind == SIM_RANGE_DEVICE && r->requested >= (2u << 20));
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_BUFFER_ID:
		*(unsigned long long *)data = r->buffer_id;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_IS_MANAGED:
		*(int *)data = managed;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE:
	case CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE:
		*(int *)data = r->kind == SIM_RANGE_DEVICE;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
		*(int *)data = r->dev ? r->dev->ordinal : 0;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
		*(int *)data = r->kind == SIM_RANGE_DEVICE;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
	case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR:
		*(CUdeviceptr *)data = r->base;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
		*(size_t *)data = r->kind == SIM_RANGE_DEVICE ? r->requested : r->size;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_MAPPING_SIZE:
		*(size_t *)data = allocated ? round_up(r->size, 2u << 20) : r->size;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_MAPPED:
		*(int *)data = 1;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
		*(unsigned long long *)data =
		    r->kind == SIM_RANGE_VMM ? r->vmm->prop.requestedHandleTypes : 0;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS:
		*(unsigned *)data = r->kind == SIM_RANGE_VMM
					? r->flags
					: (unsigned)CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
		*(CUmemoryPool *)data = NULL;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID:
		*(unsigned long long *)data = r->buffer_id;
		return CUDA_SUCCESS;
	default:
		return CUDA_ERROR_INVALID_VALUE;
	}
}

CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attribute, CUdeviceptr ptr)
{
	struct sim_range r;

	SIM_ENTER(cuPointerGetAttribute);
	if (!data)
		return CUDA_ERROR_INVALID_VALUE;
	if (!sim_mem_find(ptr, 1, &r))
		return CUDA_ERROR_INVALID_VALUE;
	return pointer_attribute(data, attribute, &r, ptr);
}

/* A device without a decompression engine (none is simulated): the arguments checked, then refused
 * as a whole (no entry's fault). */
static CUresult decompress(bool pt, CUmemDecompressParams *params, size_t count, unsigned flags,
			   size_t *index, CUstream h)
{
	struct CUstream_st *s;
	CUresult res;

	if (index)
		*index = SIZE_MAX;
	if (!params || !count || flags)
		return CUDA_ERROR_INVALID_VALUE;
	res = sim_stream_resolve(h, pt, &s);
	return res == CUDA_SUCCESS ? CUDA_ERROR_NOT_SUPPORTED : res;
}

CUresult cuMemBatchDecompressAsync(CUmemDecompressParams *paramsArray, size_t count, unsigned int flags,
				   size_t *errorIndex, CUstream stream)
{
	SIM_ENTER(cuMemBatchDecompressAsync);
	return decompress(false, paramsArray, count, flags, errorIndex, stream);
}

CUresult cuMemBatchDecompressAsync_ptsz(CUmemDecompressParams *paramsArray, size_t count, unsigned int flags,
					size_t *errorIndex, CUstream stream)
{
	SIM_ENTER(cuMemBatchDecompressAsync_ptsz);
	return decompress(true, paramsArray, count, flags, errorIndex, stream);
}

/* SYNC_MEMOPS is the one settable attribute (an unsigned int, read as a bool); the others, a NULL
 * value and memory the device does not know are refused. */
CUresult cuPointerSetAttribute(const void *value, CUpointer_attribute attribute, CUdeviceptr ptr)
{
	struct sim_range *r;

	SIM_ENTER(cuPointerSetAttribute);
	if (!value || attribute != CU_POINTER_ATTRIBUTE_SYNC_MEMOPS)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&mem_lock);
	r = range_covering(ptr, 1);
	if (r) {
		r->sync_set = true;
		r->sync_memops = *(const unsigned *)value != 0;
	}
	pthread_mutex_unlock(&mem_lock);
	return r ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuPointerGetAttributes(unsigned int count, CUpointer_attribute *attributes, void **data,
				CUdeviceptr ptr)
{
	struct sim_range r;
	bool known;

	SIM_ENTER(cuPointerGetAttributes);
	if (!attributes || !data)
		return CUDA_ERROR_INVALID_VALUE;
	known = sim_mem_find(ptr, 1, &r);
	for (unsigned i = 0; i < count; i++) {
		/* The array form refuses P2P tokens (measured). */
		if (attributes[i] == CU_POINTER_ATTRIBUTE_P2P_TOKENS)
			return CUDA_ERROR_INVALID_VALUE;
	}
	for (unsigned i = 0; i < count; i++) {
		if (!data[i])
			continue;
		if (known && pointer_attribute(data[i], attributes[i], &r, ptr) == CUDA_SUCCESS)
			continue;
		/* Unknown memory (a pageable host pointer) reads as zeros, as with the driver. */
		switch (attributes[i]) {
		case CU_POINTER_ATTRIBUTE_CONTEXT:
		case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
			*(void **)data[i] = NULL;
			break;
		case CU_POINTER_ATTRIBUTE_HOST_POINTER: /* the pointer itself, for host memory */
			*(void **)data[i] = known ? NULL : (void *)(uintptr_t)ptr;
			break;
		case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
		case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
		case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR:
		case CU_POINTER_ATTRIBUTE_BUFFER_ID:
		case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID:
		case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
		case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
		case CU_POINTER_ATTRIBUTE_MAPPING_SIZE:
			*(unsigned long long *)data[i] = 0;
			break;
		case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
			*(int *)data[i] = -2;
			break;
		default:
			*(unsigned *)data[i] = 0;
			break;
		}
	}
	return CUDA_SUCCESS;
}

/* ---- virtual memory management ---- */

static bool valid_device_location(const CUmemLocation *loc)
{
	return loc->type == CU_MEM_LOCATION_TYPE_DEVICE && sim_device_get(loc->id);
}

CUresult cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop,
				       CUmemAllocationGranularity_flags option)
{
	SIM_ENTER(cuMemGetAllocationGranularity);
	if (!granularity || !prop || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED ||
	    !valid_device_location(&prop->location) ||
	    (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM && option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED))
		return CUDA_ERROR_INVALID_VALUE;
	*granularity = SIM_GRANULARITY;
	return CUDA_SUCCESS;
}

/* A PROT_NONE reservation of size at addr, or NULL when that range is not free. */
static void *reserve_at(uintptr_t addr, size_t size)
{
	void *got = mmap((void *)addr, size, PROT_NONE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);

	if (got == MAP_FAILED)
		return NULL;
	if ((uintptr_t)got != addr) { /* kernels before 4.17 treat the flag as a hint */
		munmap(got, size);
		return NULL;
	}
	return got;
}

/* Anywhere, aligned: over-reserve, then trim both ends. */
static void *reserve_anywhere(size_t size, size_t align)
{
	size_t span = size + align;
	uint8_t *got = mmap(NULL, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	uintptr_t start;

	if (got == MAP_FAILED)
		return NULL;
	start = round_up((uintptr_t)got, align);
	if (start > (uintptr_t)got)
		munmap(got, start - (uintptr_t)got);
	if ((uintptr_t)got + span > start + size)
		munmap((void *)(start + size), (uintptr_t)got + span - (start + size));
	return (void *)start;
}

CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
			     unsigned long long flags)
{
	struct sim_reservation *res;
	void *base = NULL;

	SIM_ENTER(cuMemAddressReserve);
	if (!ptr || !size || size % SIM_GRANULARITY || addr % SIM_GRANULARITY || flags ||
	    (alignment && (alignment & (alignment - 1))))
		return CUDA_ERROR_INVALID_VALUE;
	if (alignment < SIM_GRANULARITY)
		alignment = SIM_GRANULARITY;
	res = calloc(1, sizeof(*res));
	if (!res)
		return CUDA_ERROR_OUT_OF_MEMORY;
	if (addr && addr % alignment == 0)
		base = reserve_at(addr, size);
	if (!base) {
		/* Like the driver: a hint that cannot be had is silently replaced. */
		if (addr)
			pr_debug("VA hint 0x%llx (+%zu) is taken; reserving elsewhere",
				 (unsigned long long)addr, size);
		base = reserve_anywhere(size, alignment);
	}
	if (!base) {
		free(res);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	res->base = (uintptr_t)base;
	res->size = size;
	pthread_mutex_lock(&mem_lock);
	res->next = reservations;
	reservations = res;
	pthread_mutex_unlock(&mem_lock);
	*ptr = (CUdeviceptr)res->base;
	return CUDA_SUCCESS;
}

static struct sim_reservation *reservation_holding(uintptr_t addr, size_t size)
{
	for (struct sim_reservation *r = reservations; r; r = r->next)
		if (addr >= r->base && addr - r->base <= r->size && size <= r->size - (addr - r->base))
			return r;
	return NULL;
}

static void vmm_alloc_unref(struct sim_vmm_alloc *alloc)
{
	if (--alloc->refs)
		return;
	for (struct sim_vmm_alloc **p = &vmm_allocs; *p; p = &(*p)->next) {
		if (*p == alloc) {
			*p = alloc->next;
			break;
		}
	}
	close(alloc->fd);
	atomic_fetch_sub(&alloc->dev->used_mem, alloc->size);
	free(alloc);
}

/* Drops every mapping inside [base, base + size), restoring the reservation (mem_lock held). */
static void unmap_ranges_in(uintptr_t base, size_t size)
{
	for (size_t i = 0; i < range_count;) {
		struct sim_range r = ranges[i];

		if (r.kind != SIM_RANGE_VMM || r.base < base || r.base - base >= size) {
			i++;
			continue;
		}
		range_remove_at(i);
		decommit(r.base, r.size);
		vmm_alloc_unref(r.vmm);
	}
}

CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
	struct sim_reservation **p, *res = NULL;

	SIM_ENTER(cuMemAddressFree);
	pthread_mutex_lock(&mem_lock);
	for (p = &reservations; *p; p = &(*p)->next) {
		if ((*p)->base == ptr && (*p)->size == size) {
			res = *p;
			*p = res->next;
			break;
		}
	}
	if (res)
		unmap_ranges_in(res->base, res->size);
	pthread_mutex_unlock(&mem_lock);
	if (!res)
		return CUDA_ERROR_INVALID_VALUE;
	munmap((void *)res->base, res->size);
	free(res);
	return CUDA_SUCCESS;
}

CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
		     unsigned long long flags)
{
	struct sim_vmm_alloc *alloc;
	struct sim_device *dev;

	SIM_ENTER(cuMemCreate);
	if (!handle || !prop || !size || size % SIM_GRANULARITY || flags ||
	    prop->type != CU_MEM_ALLOCATION_TYPE_PINNED || !valid_device_location(&prop->location))
		return CUDA_ERROR_INVALID_VALUE;
	if (prop->requestedHandleTypes & ~(unsigned)CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
		return CUDA_ERROR_NOT_SUPPORTED;
	dev = sim_device_get(prop->location.id);
	alloc = calloc(1, sizeof(*alloc));
	if (!alloc)
		return CUDA_ERROR_OUT_OF_MEMORY;
	if (atomic_fetch_add(&dev->used_mem, size) + size > dev->total_mem)
		goto fail_accounted;
	alloc->fd = memfd_create("crcuda-sim-vmm", MFD_CLOEXEC);
	if (alloc->fd < 0)
		goto fail_accounted;
	if (ftruncate(alloc->fd, (off_t)size)) {
		close(alloc->fd);
		goto fail_accounted;
	}
	alloc->size = size;
	alloc->dev = dev;
	alloc->refs = 1;
	alloc->id = sim_next_id();
	alloc->prop = *prop;
	pthread_mutex_lock(&mem_lock);
	alloc->next = vmm_allocs;
	vmm_allocs = alloc;
	pthread_mutex_unlock(&mem_lock);
	*handle = (CUmemGenericAllocationHandle)(uintptr_t)alloc;
	sim_budget_check(dev);
	return CUDA_SUCCESS;

fail_accounted:
	atomic_fetch_sub(&dev->used_mem, size);
	free(alloc);
	return CUDA_ERROR_OUT_OF_MEMORY;
}

/* The live allocation behind a handle (mem_lock held), or NULL. */
static struct sim_vmm_alloc *vmm_alloc_lookup(CUmemGenericAllocationHandle handle)
{
	for (struct sim_vmm_alloc *a = vmm_allocs; a; a = a->next)
		if ((CUmemGenericAllocationHandle)(uintptr_t)a == handle)
			return a;
	return NULL;
}

/* Shareable handles: the POSIX descriptor is a duplicate of the allocation's memfd, so an importer, in
 * this process or another, maps the same pages. */
CUresult cuMemExportToShareableHandle(void *shareableHandle, CUmemGenericAllocationHandle handle,
				      CUmemAllocationHandleType handleType, unsigned long long flags)
{
	struct sim_vmm_alloc *alloc;
	CUresult res = CUDA_SUCCESS;

	SIM_ENTER(cuMemExportToShareableHandle);
	if (!shareableHandle || flags)
		return CUDA_ERROR_INVALID_VALUE;
	if (handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
		return CUDA_ERROR_NOT_SUPPORTED;
	pthread_mutex_lock(&mem_lock);
	alloc = vmm_alloc_lookup(handle);
	if (!alloc)
		res = CUDA_ERROR_INVALID_VALUE;
	else if (!(alloc->prop.requestedHandleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR))
		res = CUDA_ERROR_NOT_PERMITTED; /* not made exportable */
	else if ((*(int *)shareableHandle = fcntl(alloc->fd, F_DUPFD_CLOEXEC, 0)) < 0)
		res = CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_unlock(&mem_lock);
	return res;
}

CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle, void *osHandle,
					CUmemAllocationHandleType shHandleType)
{
	int fd = (int)(intptr_t)osHandle;
	struct sim_vmm_alloc *alloc;
	struct stat st;

	SIM_ENTER(cuMemImportFromShareableHandle);
	if (!handle)
		return CUDA_ERROR_INVALID_VALUE;
	if (shHandleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
		return CUDA_ERROR_NOT_SUPPORTED;
	/* A sim allocation's memfd: a regular file whose size is a multiple of the granularity. */
	if (fd < 0 || fstat(fd, &st) || !S_ISREG(st.st_mode) || !st.st_size || st.st_size % SIM_GRANULARITY)
		return CUDA_ERROR_INVALID_VALUE;
	alloc = calloc(1, sizeof(*alloc));
	if (!alloc)
		return CUDA_ERROR_OUT_OF_MEMORY;
	alloc->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
	if (alloc->fd < 0) {
		free(alloc);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	/* The exporter's device is not in the descriptor: device 0's memory accounts for it. */
	alloc->size = (size_t)st.st_size;
	alloc->dev = sim_device_get(0);
	alloc->refs = 1;
	alloc->id = sim_next_id();
	alloc->prop = (CUmemAllocationProp){.type = CU_MEM_ALLOCATION_TYPE_PINNED,
					    .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0},
					    .requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR};
	atomic_fetch_add(&alloc->dev->used_mem, alloc->size);
	pthread_mutex_lock(&mem_lock);
	alloc->next = vmm_allocs;
	vmm_allocs = alloc;
	pthread_mutex_unlock(&mem_lock);
	*handle = (CUmemGenericAllocationHandle)(uintptr_t)alloc;
	return CUDA_SUCCESS;
}

int sim_vmm_tile_pool(CUmemGenericAllocationHandle handle, size_t *size)
{
	struct sim_vmm_alloc *alloc;
	int rc;

	pthread_mutex_lock(&mem_lock);
	alloc = vmm_alloc_lookup(handle);
	rc = !alloc ? -1 : !(alloc->prop.allocFlags.usage & CU_MEM_CREATE_USAGE_TILE_POOL) ? -2 : 0;
	if (alloc)
		*size = alloc->size;
	pthread_mutex_unlock(&mem_lock);
	return rc;
}

CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
	struct sim_vmm_alloc *alloc;

	SIM_ENTER(cuMemRelease);
	pthread_mutex_lock(&mem_lock);
	alloc = vmm_alloc_lookup(handle);
	if (alloc)
		vmm_alloc_unref(alloc);
	pthread_mutex_unlock(&mem_lock);
	return alloc ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
		  unsigned long long flags)
{
	struct sim_vmm_alloc *alloc;
	struct sim_range r = {.base = ptr, .size = size, .kind = SIM_RANGE_VMM};
	CUresult res = CUDA_SUCCESS;
	ssize_t i;

	SIM_ENTER(cuMemMap);
	if (!size || flags || ptr % SIM_GRANULARITY || size % SIM_GRANULARITY || offset % SIM_GRANULARITY)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&mem_lock);
	alloc = vmm_alloc_lookup(handle);
	if (!alloc) {
		res = CUDA_ERROR_INVALID_HANDLE;
		goto out;
	}
	if (offset > alloc->size || size > alloc->size - offset || !reservation_holding(ptr, size)) {
		res = CUDA_ERROR_INVALID_VALUE;
		goto out;
	}
	i = range_floor(ptr + size - 1);
	if (i >= 0 && ranges[i].base + ranges[i].size > ptr) {
		res = CUDA_ERROR_INVALID_VALUE; /* already mapped */
		goto out;
	}
	if (mmap((void *)ptr, size, PROT_NONE, MAP_SHARED | MAP_FIXED, alloc->fd, (off_t)offset) ==
	    MAP_FAILED) {
		pr_perror("cuMemMap at 0x%llx", (unsigned long long)ptr);
		res = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	r.dev = alloc->dev;
	r.vmm = alloc;
	r.vmm_offset = offset;
	r.buffer_id = alloc->id;
	r.flags = CU_MEM_ACCESS_FLAGS_PROT_NONE;
	if (range_insert(&r)) {
		decommit(ptr, size);
		res = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	alloc->refs++;
out:
	pthread_mutex_unlock(&mem_lock);
	return res;
}

CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
	CUresult res = CUDA_SUCCESS;

	SIM_ENTER(cuMemUnmap);
	if (!size || ptr % SIM_GRANULARITY || size % SIM_GRANULARITY)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&mem_lock);
	if (!range_covering(ptr, size))
		res = CUDA_ERROR_INVALID_VALUE;
	else
		unmap_ranges_in(ptr, size);
	pthread_mutex_unlock(&mem_lock);
	return res;
}

CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count)
{
	unsigned flags = CU_MEM_ACCESS_FLAGS_PROT_NONE;
	CUresult res = CUDA_SUCCESS;
	int prot;

	SIM_ENTER(cuMemSetAccess);
	if (!size || !desc || !count)
		return CUDA_ERROR_INVALID_VALUE;
	for (size_t i = 0; i < count; i++) {
		if (!valid_device_location(&desc[i].location) ||
		    (desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_NONE &&
		     desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READ &&
		     desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE))
			return CUDA_ERROR_INVALID_VALUE;
		/* One CPU stands in for every device: the widest access granted wins. */
		if (desc[i].flags > flags)
			flags = desc[i].flags;
	}
	prot = flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE ? PROT_READ | PROT_WRITE
	       : flags == CU_MEM_ACCESS_FLAGS_PROT_READ	   ? PROT_READ
							   : PROT_NONE;
	pthread_mutex_lock(&mem_lock);
	if (!range_covering(ptr, size)) {
		res = CUDA_ERROR_INVALID_VALUE;
		goto out;
	}
	if (mprotect((void *)ptr, size, prot)) {
		pr_perror("cuMemSetAccess at 0x%llx", (unsigned long long)ptr);
		res = CUDA_ERROR_INVALID_VALUE;
		goto out;
	}
	for (ssize_t i = range_floor(ptr); i >= 0 && (size_t)i < range_count && ranges[i].base < ptr + size;
	     i++)
		ranges[i].flags = flags;
out:
	pthread_mutex_unlock(&mem_lock);
	return res;
}

CUresult cuMemGetAccess(unsigned long long *flags, const CUmemLocation *location, CUdeviceptr ptr)
{
	struct sim_range r;

	SIM_ENTER(cuMemGetAccess);
	if (!flags || !location || !valid_device_location(location))
		return CUDA_ERROR_INVALID_VALUE;
	if (!sim_mem_find(ptr, 1, &r) || r.kind != SIM_RANGE_VMM)
		return CUDA_ERROR_INVALID_VALUE;
	*flags = r.flags;
	return CUDA_SUCCESS;
}

CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr)
{
	struct sim_range *r;
	CUresult res = CUDA_SUCCESS;

	SIM_ENTER(cuMemRetainAllocationHandle);
	if (!handle)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&mem_lock);
	r = range_holding((uintptr_t)addr);
	if (!r || r->kind != SIM_RANGE_VMM) {
		res = CUDA_ERROR_INVALID_VALUE;
	} else {
		r->vmm->refs++;
		*handle = (CUmemGenericAllocationHandle)(uintptr_t)r->vmm;
	}
	pthread_mutex_unlock(&mem_lock);
	return res;
}

CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop,
						CUmemGenericAllocationHandle handle)
{
	struct sim_vmm_alloc *alloc;

	SIM_ENTER(cuMemGetAllocationPropertiesFromHandle);
	if (!prop)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&mem_lock);
	alloc = vmm_alloc_lookup(handle);
	if (alloc) {
		*prop = alloc->prop;
		prop->allocFlags.usage =
		    0; /* not answered back (measured, H100, driver 580: a tile pool's) */
	}
	pthread_mutex_unlock(&mem_lock);
	return alloc ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* ---- stream-ordered allocation and memory pools: bookkeeping over the arena (crcuda/mempool.h) ---- */
static CUresult pool_alloc(CUdeviceptr *p, size_t bytes, CUstream stream)
{
	CUresult res = cuStreamSynchronize(stream);

	return res == CUDA_SUCCESS ? cuMemAlloc_v2(p, bytes) : res;
}

static CUresult pool_free(CUdeviceptr p, CUstream stream)
{
	CUresult res = cuStreamSynchronize(stream);

	return res == CUDA_SUCCESS ? device_free(p) : res;
}

static int pool_devices(void)
{
	return sim_device_count;
}

static const struct crc_mempool_ops pool_ops = {pool_alloc, pool_free, pool_devices, cuCtxGetDevice};

/* On a capturing stream: graph memory, with the pool's properties (the current device's default pool's
 * when none is named). */
static bool captured_mem(CUstream h, CUmemoryPool pool, size_t bytes, CUdeviceptr *dptr, CUresult *res)
{
	CUmemPoolProps props = {.allocType = CU_MEM_ALLOCATION_TYPE_PINNED,
				.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE}};
	struct CUstream_st *s;

	if (sim_stream_resolve(h, false, &s) != CUDA_SUCCESS || !atomic_load(&s->capturing))
		return false;
	*res = pool ? crc_mempool_props(pool, &props) : cuCtxGetDevice(&props.location.id);
	if (*res != CUDA_SUCCESS)
		return true;
	return sim_capture_mem(s, &props, bytes, dptr, res);
}

CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream h)
{
	CUresult res;

	SIM_ENTER(cuMemAllocAsync);
	if (captured_mem(h, NULL, bytesize, dptr, &res))
		return res;
	return crc_mempool_alloc(dptr, bytesize, NULL, h, &pool_ops);
}

CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream h)
{
	CUresult res;

	SIM_ENTER(cuMemAllocFromPoolAsync);
	if (captured_mem(h, pool, bytesize, dptr, &res))
		return res;
	return crc_mempool_alloc(dptr, bytesize, pool, h, &pool_ops);
}

/* Graph memory is the graphs' to free: outside them a free leaves it be; on a capturing stream it is a
 * free node. */
CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream h)
{
	struct CUstream_st *s;
	CUresult res;

	SIM_ENTER(cuMemFreeAsync);
	if (sim_graph_mem_owns(dptr)) {
		if (sim_stream_resolve(h, false, &s) == CUDA_SUCCESS &&
		    sim_capture_mem(s, NULL, 0, &dptr, &res))
			return res;
		return CUDA_SUCCESS;
	}
	res = crc_mempool_free(dptr, h, &pool_ops);
	return res == CUDA_ERROR_NOT_FOUND ? pool_free(dptr, h) : res;
}

CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool_out, CUdevice dev)
{
	SIM_ENTER(cuDeviceGetDefaultMemPool);
	return crc_mempool_device_default(pool_out, dev, &pool_ops);
}

CUresult cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice dev)
{
	SIM_ENTER(cuDeviceGetMemPool);
	return crc_mempool_device_get(pool, dev, &pool_ops);
}

CUresult cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool)
{
	SIM_ENTER(cuDeviceSetMemPool);
	return crc_mempool_device_set(dev, pool, &pool_ops);
}

CUresult cuMemGetDefaultMemPool(CUmemoryPool *pool_out, CUmemLocation *location, CUmemAllocationType type)
{
	SIM_ENTER(cuMemGetDefaultMemPool);
	return crc_mempool_location_get(pool_out, location, type, false, &pool_ops);
}

CUresult cuMemGetMemPool(CUmemoryPool *pool_out, CUmemLocation *location, CUmemAllocationType type)
{
	SIM_ENTER(cuMemGetMemPool);
	return crc_mempool_location_get(pool_out, location, type, true, &pool_ops);
}

CUresult cuMemSetMemPool(CUmemLocation *location, CUmemAllocationType type, CUmemoryPool pool)
{
	SIM_ENTER(cuMemSetMemPool);
	return crc_mempool_location_set(location, type, pool, &pool_ops);
}

CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *props)
{
	SIM_ENTER(cuMemPoolCreate);
	return crc_mempool_create(pool, props, &pool_ops);
}

CUresult cuMemPoolDestroy(CUmemoryPool pool)
{
	SIM_ENTER(cuMemPoolDestroy);
	return crc_mempool_destroy(pool);
}

CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
	SIM_ENTER(cuMemPoolSetAttribute);
	return crc_mempool_set_attribute(pool, attr, value);
}

CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
	SIM_ENTER(cuMemPoolGetAttribute);
	return crc_mempool_get_attribute(pool, attr, value);
}

CUresult cuMemPoolSetAccess(CUmemoryPool pool, const CUmemAccessDesc *map, size_t count)
{
	SIM_ENTER(cuMemPoolSetAccess);
	return crc_mempool_set_access(pool, map, count, &pool_ops);
}

CUresult cuMemPoolGetAccess(CUmemAccess_flags *flags, CUmemoryPool pool, CUmemLocation *location)
{
	SIM_ENTER(cuMemPoolGetAccess);
	return crc_mempool_get_access(flags, pool, location);
}

CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t keep)
{
	SIM_ENTER(cuMemPoolTrimTo);
	(void)keep;
	return crc_mempool_trim(pool);
}
