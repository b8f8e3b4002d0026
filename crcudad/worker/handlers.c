/* Hand-written daemon handlers: device memory in the session's VA range, copies, modules, function
 * lookups with their parameter layout, launches, VMM, pinned host memory shared with the client, and
 * the cleanup of a finished session. */
#define LOG_PREFIX "crcudad: "
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "crcuda/errno.h"
#include "crcuda/log.h"
#include "worker.h"

/* After cuda.h: define and call entry points by their ABI names. */
#include "crcuda/cuda_api_undef.h"

#define BE(sym) (crc_be.sym##_fn ? crc_be.sym##_fn : NULL)

static uint64_t round_up(uint64_t v, uint64_t a)
{
	return (v + a - 1) / a * a;
}

static struct crc_alloc *alloc_add(struct crc_session *s, enum crc_alloc_kind kind, uint64_t ptr,
				   uint64_t size)
{
	struct crc_alloc *a = calloc(1, sizeof(*a));

	if (!a)
		return NULL;
	a->kind = kind;
	a->ptr = ptr;
	a->size = size;
	a->next = s->allocs;
	s->allocs = a;
	return a;
}

static struct crc_alloc *alloc_find(struct crc_session *s, enum crc_alloc_kind kind, uint64_t ptr)
{
	for (struct crc_alloc *a = s->allocs; a; a = a->next)
		if (a->kind == kind && a->ptr == ptr)
			return a;
	return NULL;
}

static void alloc_remove(struct crc_session *s, struct crc_alloc *victim)
{
	for (struct crc_alloc **p = &s->allocs; *p; p = &(*p)->next) {
		if (*p == victim) {
			*p = victim->next;
			free(victim);
			return;
		}
	}
}

struct crc_alloc *crc_alloc_add(struct crc_session *s, enum crc_alloc_kind kind, uint64_t ptr, uint64_t size)
{
	return alloc_add(s, kind, ptr, size);
}

void crc_alloc_remove(struct crc_session *s, struct crc_alloc *a)
{
	alloc_remove(s, a);
}

static void account(struct crc_session *s, int64_t bytes)
{
	/* Under the lock: the status page reads it from another thread. */
	pthread_mutex_lock(&crcd.lock);
	s->mapped_bytes += (uint64_t)bytes;
	pthread_mutex_unlock(&crcd.lock);
	crc_worker_publish();
}

void crc_alloc_account(struct crc_session *s, int64_t bytes)
{
	account(s, bytes);
}

/* ---- the VA range ------------------------------------------------------------------------------- */
static int cmp_u64pair(const void *a, const void *b)
{
	const uint64_t *x = a, *y = b;

	return x[0] < y[0] ? -1 : x[0] > y[0];
}

/* First fit among the holes of the session range. A hint inside the range is honoured when free. */
int crc_va_take(struct crc_session *s, uint64_t size, uint64_t align, uint64_t hint, uint64_t *out)
{
	uint64_t(*used)[2] = NULL, cur, end = s->va_base + s->va_size;
	size_t n = 0, cap = 0;
	int rc = CRC_ENOSPC;

	if (align < CRC_GRANULE)
		align = CRC_GRANULE;
	for (struct crc_alloc *a = s->allocs; a; a = a->next) {
		if (a->kind == CRC_ALLOC_MEM || a->kind == CRC_ALLOC_IPC ||
		    (a->kind == CRC_ALLOC_RESERVE && a->in_window)) {
			if (n == cap) {
				void *p = realloc(used, (cap = cap ? cap * 2 : 32) * sizeof(*used));

				if (!p) {
					free(used);
					return CRC_ENOMEM;
				}
				used = p;
			}
			used[n][0] = a->ptr;
			used[n][1] = a->ptr + a->size;
			n++;
		}
	}
	if (n)
		qsort(used, n, sizeof(*used), cmp_u64pair);
	if (hint && hint >= s->va_base && hint + size <= end && hint % align == 0) {
		bool free_at_hint = true;

		for (size_t i = 0; i < n; i++)
			free_at_hint &= used[i][1] <= hint || used[i][0] >= hint + size;
		if (free_at_hint) {
			*out = hint;
			free(used);
			return 0;
		}
	}
	cur = round_up(s->va_base, align);
	for (size_t i = 0; i <= n; i++) {
		uint64_t hole_end = i < n ? used[i][0] : end;

		if (cur + size <= hole_end) {
			*out = cur;
			rc = 0;
			break;
		}
		if (i < n && used[i][1] > cur)
			cur = round_up(used[i][1], align);
	}
	free(used);
	return rc;
}

static CUresult current_device(CUdevice *dev)
{
	return crc_be.cuCtxGetDevice_fn(dev);
}

/* cuMemCreate + cuMemMap + cuMemSetAccess at a chosen address of the session range. */
static CUresult map_new(struct crc_session *s, uint64_t bytes, uint64_t *out)
{
	CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
				    .location.type = CU_MEM_LOCATION_TYPE_DEVICE};
	CUmemAccessDesc access = {.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
	CUmemGenericAllocationHandle h;
	uint64_t size = round_up(bytes ? bytes : 1, CRC_GRANULE), ptr;
	struct crc_alloc *a;
	CUdevice dev;
	CUresult res = current_device(&dev);

	if (res != CUDA_SUCCESS)
		return res;
	/* Replay asks for the address the allocation had. */
	if (crc_va_take(s, size, 0, s->force_addr, &ptr) || (s->force_addr && ptr != s->force_addr))
		return CUDA_ERROR_OUT_OF_MEMORY;
	prop.location.id = dev;
	prop.requestedHandleTypes = crc_ipc_handle_types(dev, false);
	access.location = prop.location;
	res = CALL(cuMemCreate, &h, size, &prop, 0);
	if (res != CUDA_SUCCESS && res != CUDA_ERROR_OUT_OF_MEMORY && prop.requestedHandleTypes) {
		/* A device that says it can but will not: its memory is not exportable (IPC refused). */
		pr_warn("device %d: cuMemCreate of exportable memory failed (%d): its memory is made without "
			"a shareable handle type from now on, and CUDA IPC of it is refused",
			(int)dev, (int)res);
		prop.requestedHandleTypes = crc_ipc_handle_types(dev, true);
		res = CALL(cuMemCreate, &h, size, &prop, 0);
	}
	if (res != CUDA_SUCCESS)
		return res;
	res = CALL(cuMemMap, ptr, size, 0, h, 0);
	if (res == CUDA_SUCCESS) {
		res = CALL(cuMemSetAccess, ptr, size, &access, 1);
		if (res != CUDA_SUCCESS)
			CALL(cuMemUnmap, ptr, size);
	}
	if (res != CUDA_SUCCESS || !(a = alloc_add(s, CRC_ALLOC_MEM, ptr, size))) {
		CALL(cuMemRelease, h);
		return res != CUDA_SUCCESS ? res : CUDA_ERROR_OUT_OF_MEMORY;
	}
	a->handle = h;
	a->req = bytes;
	a->vhandle = s->cur_ctx; /* the context cuPointerGetAttribute reports */
	account(s, (int64_t)size);
	s->jaddr = ptr;
	s->jsize = size;
	*out = ptr;
	return CUDA_SUCCESS;
}

static void unmap_alloc(struct crc_session *s, struct crc_alloc *a)
{
	if (a->ipc_key)
		crc_ipc_unexport(a->ipc_key);
	CALL(cuMemUnmap, a->ptr, a->size);
	CALL(cuMemRelease, a->handle);
	account(s, -(int64_t)a->size);
	alloc_remove(s, a);
}

CUresult crc_ovr_cuMemAlloc_v2(struct crc_session *s, void *const *argv)
{
	CUdeviceptr *dptr = argv[0];
	size_t bytes = *(size_t *)argv[1];
	uint64_t ptr;
	CUresult res;

	if (!dptr || !bytes)
		return CUDA_ERROR_INVALID_VALUE;
	res = map_new(s, bytes, &ptr);
	if (res == CUDA_SUCCESS)
		*dptr = ptr;
	return res;
}

CUresult crc_ovr_cuMemAllocPitch_v2(struct crc_session *s, void *const *argv)
{
	CUdeviceptr *dptr = argv[0];
	size_t *pitch = argv[1], width = *(size_t *)argv[2], height = *(size_t *)argv[3];
	unsigned elem = *(unsigned *)argv[4];
	uint64_t ptr, p;
	CUresult res;

	if (!dptr || !pitch || !width || !height || (elem != 4 && elem != 8 && elem != 16))
		return CUDA_ERROR_INVALID_VALUE;
	p = round_up(width, 512);
	res = map_new(s, p * height, &ptr);
	if (res == CUDA_SUCCESS) {
		*dptr = ptr;
		*pitch = p;
	}
	return res;
}

CUresult crc_ovr_cuMemFree_v2(struct crc_session *s, void *const *argv)
{
	uint64_t ptr = *(CUdeviceptr *)argv[0];
	struct crc_alloc *a;

	if (!ptr)
		return CUDA_SUCCESS;
	a = alloc_find(s, CRC_ALLOC_MEM, ptr);
	if (!a)
		return CUDA_ERROR_INVALID_VALUE;
	/* cuMemFree waits for the work that may still use the memory. */
	CALL(cuCtxSynchronize);
	unmap_alloc(s, a);
	return CUDA_SUCCESS;
}

/* With no hint: inside the session range. With one: at the hint, which the application chose and so
 * can ask for again after a restore; the backend may move it, as the driver does. */
CUresult crc_ovr_cuMemAddressReserve(struct crc_session *s, void *const *argv)
{
	CUdeviceptr *ptr = argv[0];
	size_t size = *(size_t *)argv[1], align = *(size_t *)argv[2];
	uint64_t hint = *(CUdeviceptr *)argv[3], got;
	unsigned long long flags = *(unsigned long long *)argv[4];
	struct crc_alloc *a;
	bool in_window = !hint || (hint >= s->va_base && hint < s->va_base + s->va_size);
	CUresult res;

	if (!ptr || !size || size % CRC_GRANULE || hint % CRC_GRANULE || flags || (align & (align - 1)))
		return CUDA_ERROR_INVALID_VALUE;
	if (in_window) {
		if (crc_va_take(s, size, align, hint ? hint : s->force_addr, &got) ||
		    (!hint && s->force_addr && got != s->force_addr))
			return CUDA_ERROR_OUT_OF_MEMORY;
	} else {
		CUdeviceptr p;

		res = CALL(cuMemAddressReserve, &p, size, align, hint, 0);
		if (res != CUDA_SUCCESS)
			return res;
		got = p;
	}
	a = alloc_add(s, CRC_ALLOC_RESERVE, got, size);
	if (!a)
		return CUDA_ERROR_OUT_OF_MEMORY;
	a->in_window = in_window;
	s->jaddr = got;
	s->jsize = size;
	*ptr = got;
	return CUDA_SUCCESS;
}

CUresult crc_ovr_cuMemAddressFree(struct crc_session *s, void *const *argv)
{
	uint64_t ptr = *(CUdeviceptr *)argv[0];
	size_t size = *(size_t *)argv[1];
	struct crc_alloc *a = alloc_find(s, CRC_ALLOC_RESERVE, ptr);

	if (!a || a->size != size)
		return CUDA_ERROR_INVALID_VALUE;
	if (!a->in_window) {
		CUresult res = CALL(cuMemAddressFree, ptr, size);

		if (res != CUDA_SUCCESS)
			return res;
	}
	alloc_remove(s, a);
	return CUDA_SUCCESS;
}

CUresult crc_ovr_cuMemMap(struct crc_session *s, void *const *argv)
{
	uint64_t ptr = *(CUdeviceptr *)argv[0];
	size_t size = *(size_t *)argv[1], offset = *(size_t *)argv[2];
	CUmemGenericAllocationHandle h = *(CUmemGenericAllocationHandle *)argv[3];
	unsigned long long flags = *(unsigned long long *)argv[4];
	CUresult res = CALL(cuMemMap, ptr, size, offset, h, flags);
	struct crc_alloc *m, *owner;

	if (res != CUDA_SUCCESS)
		return res;
	m = alloc_add(s, CRC_ALLOC_MAP, ptr, size);
	if (!m)
		return CUDA_ERROR_OUT_OF_MEMORY;
	m->map_offset = offset;
	/* Another process's memory (a shareable handle): nothing a replay could map again (a restore
	 * of the tree maps it again, crc_ipc_restore_imports). */
	for (owner = s->allocs; owner; owner = owner->next)
		if (owner->kind == CRC_ALLOC_HANDLE && owner->handle == h && owner->ipc_imported) {
			m->ipc_imported = true;
			m->ipc_key = owner->ipc_key;
			m->ipc_exporter = owner->ipc_exporter;
			s->jdrop = true;
		}
	return res;
}

/* [ptr, ptr + size) lies in mappings of imported memory only (their records are not journaled). */
static bool imported_range(struct crc_session *s, uint64_t ptr, uint64_t size)
{
	bool any = false;

	for (struct crc_alloc *a = s->allocs; a; a = a->next) {
		if (a->kind != CRC_ALLOC_MAP || a->ptr >= ptr + size || a->ptr + a->size <= ptr)
			continue;
		if (!a->ipc_imported)
			return false;
		any = true;
	}
	return any;
}

CUresult crc_ovr_cuMemUnmap(struct crc_session *s, void *const *argv)
{
	uint64_t ptr = *(CUdeviceptr *)argv[0];
	size_t size = *(size_t *)argv[1];
	bool imported = imported_range(s, ptr, size);
	CUresult res = CALL(cuMemUnmap, ptr, size);

	if (res == CUDA_SUCCESS) {
		struct crc_alloc *a, *next;

		s->jdrop |= imported;
		for (a = s->allocs; a; a = next) {
			next = a->next;
			if (a->kind == CRC_ALLOC_MAP && a->ptr >= ptr && a->ptr + a->size <= ptr + size)
				alloc_remove(s, a);
		}
	}
	return res;
}

static struct crc_alloc *handle_find(struct crc_session *s, CUmemGenericAllocationHandle h)
{
	for (struct crc_alloc *a = s->allocs; a; a = a->next)
		if (a->kind == CRC_ALLOC_HANDLE && a->handle == h)
			return a;
	return NULL;
}

CUresult crc_ovr_cuMemRelease(struct crc_session *s, void *const *argv)
{
	CUmemGenericAllocationHandle h = *(CUmemGenericAllocationHandle *)argv[0];
	struct crc_alloc *a = handle_find(s, h);
	CUresult res;

	if (!a)
		return CUDA_ERROR_INVALID_VALUE;
	res = CALL(cuMemRelease, h);
	if (res == CUDA_SUCCESS && a->ipc_imported)
		s->jdrop = true; /* its import was not journaled */
	if (res == CUDA_SUCCESS && --a->refs == 0) {
		/* Exported: importers that have not imported it yet cannot any more (see ipc.c). */
		if (a->ipc_key && !a->ipc_imported)
			crc_ipc_unexport(a->ipc_key);
		crc_forget(s, a->vhandle);
		account(s, -(int64_t)a->size);
		alloc_remove(s, a);
	}
	return res;
}

/* A handle created or retained: the same virtual handle for the same allocation. */
static CUresult reply_mem_handle(struct crc_session *s, CUmemGenericAllocationHandle h, uint64_t size)
{
	struct crc_alloc *a = handle_find(s, h);
	uint64_t *out;

	if (!a) {
		a = alloc_add(s, CRC_ALLOC_HANDLE, 0, size);
		if (!a)
			return CUDA_ERROR_OUT_OF_MEMORY;
		a->handle = h;
		a->vhandle = crc_register(s, CRC_HT_MEMHANDLE, (union crc_slot){.u64 = h});
		account(s, (int64_t)size);
	}
	a->refs++;
	out = crc_out(s, 8);
	if (!out)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*out = a->vhandle;
	return CUDA_SUCCESS;
}

CUresult crc_raw_vmm_create(struct crc_session *s, const struct crc_call_hdr *h, const uint8_t *args,
			    size_t len)
{
	const struct crc_vmm_create_req *r = (const void *)args;
	CUmemAllocationProp prop = {0};
	CUmemGenericAllocationHandle mh;
	CUresult res;

	(void)h;
	if (len < sizeof(*r))
		return CUDA_ERROR_INVALID_VALUE;
	prop.type = (CUmemAllocationType)r->type;
	prop.location.type = (CUmemLocationType)r->location_type;
	prop.location.id = prop.location.type == CU_MEM_LOCATION_TYPE_DEVICE
			       ? crc_dev_backend(s, r->location_id)
			       : r->location_id;
	prop.requestedHandleTypes = (CUmemAllocationHandleType)r->handle_types;
	prop.allocFlags.compressionType = r->compression;
	prop.allocFlags.gpuDirectRDMACapable = r->gpu_direct_rdma;
	prop.allocFlags.usage = r->usage;
	res = CALL(cuMemCreate, &mh, r->size, &prop, r->flags);
	return res == CUDA_SUCCESS ? reply_mem_handle(s, mh, r->size) : res;
}

/* A raw request's leading argument, one virtual handle of type tag: its real value. A request too
 * short to hold it is CUDA_ERROR_INVALID_VALUE; otherwise what the translation says. */
static CUresult first_handle(struct crc_session *s, const struct crc_call_hdr *h, const uint8_t *args,
			     size_t len, enum crc_handle_tag tag, union crc_slot *out)
{
	uint64_t v;

	if (len < sizeof(v))
		return CUDA_ERROR_INVALID_VALUE;
	memcpy(&v, args, sizeof(v));
	return crc_translate(s, h, tag, v, out);
}

CUresult crc_raw_vmm_props(struct crc_session *s, const struct crc_call_hdr *h, const uint8_t *args,
			   size_t len)
{
	CUmemAllocationProp prop = {0};
	struct crc_vmm_create_req *out;
	union crc_slot mh;
	CUresult res = first_handle(s, h, args, len, CRC_HT_MEMHANDLE, &mh);

	if (res == CUDA_SUCCESS)
		res =
		    CALL(cuMemGetAllocationPropertiesFromHandle, &prop, (CUmemGenericAllocationHandle)mh.u64);
	if (res != CUDA_SUCCESS)
		return res;
	out = crc_out(s, sizeof(*out));
	if (!out)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*out = (struct crc_vmm_create_req){.type = prop.type,
					   .location_type = prop.location.type,
					   .location_id = prop.location.type == CU_MEM_LOCATION_TYPE_DEVICE
							      ? crc_dev_client(s, prop.location.id)
							      : prop.location.id,
					   .handle_types = prop.requestedHandleTypes,
					   .compression = prop.allocFlags.compressionType,
					   .gpu_direct_rdma = prop.allocFlags.gpuDirectRDMACapable,
					   .usage = prop.allocFlags.usage};
	return CUDA_SUCCESS;
}

CUresult crc_raw_vmm_retain(struct crc_session *s, const struct crc_call_hdr *h, const uint8_t *args,
			    size_t len)
{
	CUmemGenericAllocationHandle mh;
	uint64_t addr;
	CUresult res;

	(void)h;
	if (len < 8)
		return CUDA_ERROR_INVALID_VALUE;
	memcpy(&addr, args, 8);
	res = CALL(cuMemRetainAllocationHandle, &mh, (void *)(uintptr_t)addr);
	if (res != CUDA_SUCCESS)
		return res;
	if (!handle_find(s, mh)) {
		/* Memory of a cuMemAlloc: not the application's handle to retain. */
		CALL(cuMemRelease, mh);
		return CUDA_ERROR_INVALID_VALUE;
	}
	return reply_mem_handle(s, mh, 0);
}

CUresult crc_ovr_cuDevicePrimaryCtxRetain(struct crc_session *s, void *const *argv)
{
	CUcontext *pctx = argv[0];
	CUdevice dev = *(CUdevice *)argv[1];
	struct crc_call_hdr h = {0};
	union crc_slot real;
	CUresult res;

	if (!pctx)
		return CUDA_ERROR_INVALID_VALUE;
	if (dev < 0 || dev >= crcd.dev_count)
		return CUDA_ERROR_INVALID_DEVICE;
	res = crc_translate(s, &h, CRC_HT_CTX, crc_vhandle(CRC_HT_CTX, (uint32_t)dev + 1), &real);
	if (res == CUDA_SUCCESS)
		*pctx = real.ptr;
	return res;
}

/* ---- pinned host memory ------------------------------------------------------------------------- */
static struct crc_pin *pin_find(struct crc_session *s, uint64_t addr, uint64_t bytes)
{
	for (struct crc_pin *p = s->pins; p; p = p->next)
		if (addr >= p->client_addr && addr - p->client_addr < p->bytes &&
		    bytes <= p->bytes - (addr - p->client_addr))
			return p;
	return NULL;
}

uint64_t crc_pin_local(struct crc_session *s, uint64_t addr, uint64_t bytes)
{
	struct crc_pin *p = pin_find(s, addr, bytes);

	return p ? (uintptr_t)p->local + (addr - p->client_addr) : 0;
}

uint64_t crc_pin_client(struct crc_session *s, uint64_t local)
{
	for (struct crc_pin *p = s->pins; p; p = p->next)
		if (local - (uintptr_t)p->local < p->bytes)
			return p->client_addr + (local - (uintptr_t)p->local);
	return 0;
}

CUresult crc_session_some_ctx(struct crc_session *s, CUcontext *prev)
{
	CUcontext any = NULL;
	CUresult res;

	if (CALL(cuCtxGetCurrent, prev) != CUDA_SUCCESS)
		*prev = NULL;
	if (*prev)
		return CUDA_SUCCESS;
	res = crc_session_primary_ctx(s, &any);
	return res == CUDA_SUCCESS ? CALL(cuCtxSetCurrent, any) : res;
}

void crc_session_ctx_back(CUcontext prev)
{
	if (!prev)
		CALL(cuCtxSetCurrent, NULL);
}

CUresult crc_ctl_pin_register(struct crc_session *s, const uint8_t *args, size_t len)
{
	const struct crc_pin_req *r = (const void *)args;
	struct crc_pin_reply *out;
	struct crc_pin *p;
	unsigned reg_flags = CU_MEMHOSTREGISTER_PORTABLE;
	CUcontext prev;
	int memfd = -1, nfds = 0;
	char byte;
	void *local;
	CUresult res;

	if (len < sizeof(*r) || s->tcp)
		return CUDA_ERROR_INVALID_VALUE;
	/* The client sent the memfd on the socket before this record. */
	if (crc_sock_recv_fds(s->fd, &byte, 1, &memfd, 1, &nfds) || nfds != 1)
		return CUDA_ERROR_INVALID_VALUE;
	/* Registered already (the client registers again what a restore may not have seen): the same. */
	for (p = s->pins; p; p = p->next)
		if (p->client_addr == r->client_addr && p->bytes == r->bytes) {
			close(memfd);
			out = crc_out(s, sizeof(*out));
			if (!out)
				return CUDA_ERROR_OUT_OF_MEMORY;
			out->device_ptr = p->device_ptr;
			return CUDA_SUCCESS;
		}
	/* At the client's own address where it is free here: then the device pointer of the memory (UVA)
	 * is the client's pointer, as natively, and kernels can use it. */
	local = mmap((void *)(uintptr_t)r->client_addr, r->bytes, PROT_READ | PROT_WRITE,
		     MAP_SHARED | MAP_FIXED_NOREPLACE, memfd, 0);
	if (local != MAP_FAILED && local != (void *)(uintptr_t)r->client_addr) {
		munmap(local, r->bytes); /* a kernel without MAP_FIXED_NOREPLACE took it as a hint */
		local = MAP_FAILED;
	}
	if (local == MAP_FAILED)
		local = mmap(NULL, r->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
	close(memfd);
	if (local == MAP_FAILED)
		return CUDA_ERROR_OUT_OF_MEMORY;
	p = calloc(1, sizeof(*p));
	if (!p) {
		munmap(local, r->bytes);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	/* Mapped whatever the flags: with unified addressing all page-locked memory is (the driver's
	 * cuMemHostGetDevicePointer and pointer attributes answer for it). Registering needs a context:
	 * a restored session whose program had made none yet (a checkpoint before its first kernel) has
	 * none current, and any of the session's does (the registration is portable). */
	reg_flags |= CU_MEMHOSTREGISTER_DEVICEMAP;
	res = crc_session_some_ctx(s, &prev);
	if (res == CUDA_SUCCESS)
		res = CALL(cuMemHostRegister_v2, local, r->bytes, reg_flags);
	if (res == CUDA_SUCCESS)
		res = CALL(cuMemHostGetDevicePointer_v2, (CUdeviceptr *)&p->device_ptr, local, 0);
	crc_session_ctx_back(prev);
	if (res != CUDA_SUCCESS) {
		pr_warn("session %llu: cannot register the client's page-locked memory %#llx+%#llx: CUDA "
			"error %d",
			(unsigned long long)s->id, (unsigned long long)r->client_addr,
			(unsigned long long)r->bytes, (int)res);
		munmap(local, r->bytes);
		free(p);
		return res;
	}
	p->client_addr = r->client_addr;
	p->bytes = r->bytes;
	p->local = local;
	p->next = s->pins;
	s->pins = p;
	out = crc_out(s, sizeof(*out));
	if (out)
		out->device_ptr = p->device_ptr;
	return CUDA_SUCCESS;
}

static void pin_drop(struct crc_pin *p)
{
	if (!crc_managed_release(p)) {
		CALL(cuMemHostUnregister, p->local);
		munmap(p->local, p->bytes);
	}
	free(p);
}

CUresult crc_ctl_pin_unregister(struct crc_session *s, const uint8_t *args, size_t len)
{
	const struct crc_pin_req *r = (const void *)args;

	if (len < sizeof(*r))
		return CUDA_ERROR_INVALID_VALUE;
	for (struct crc_pin **pp = &s->pins; *pp; pp = &(*pp)->next) {
		if ((*pp)->client_addr == r->client_addr) {
			struct crc_pin *p = *pp;

			*pp = p->next;
			CALL(cuCtxSynchronize);
			pin_drop(p);
			return CUDA_SUCCESS;
		}
	}
	return CUDA_ERROR_INVALID_VALUE;
}

/* ---- copies ------------------------------------------------------------------------------------- */
/* One side of a copy as a daemon address; is_host set for host memory. */
static CUresult copy_side(struct crc_session *s, uint32_t loc, uint64_t addr, uint64_t bytes,
			  const uint8_t *inl, uint64_t *out, bool *is_host)
{
	struct crc_pin *p;

	switch (loc) {
	case CRC_LOC_DEVICE:
		*out = addr;
		*is_host = false;
		return CUDA_SUCCESS;
	case CRC_LOC_INLINE:
		*out = (uintptr_t)inl;
		*is_host = true;
		return CUDA_SUCCESS;
	case CRC_LOC_PINNED:
		p = pin_find(s, addr, bytes);
		if (!p)
			return CUDA_ERROR_INVALID_VALUE;
		*out = (uintptr_t)p->local + (addr - p->client_addr);
		*is_host = true;
		return CUDA_SUCCESS;
	}
	return CUDA_ERROR_INVALID_VALUE;
}

static CUresult copy_one(uint64_t dst, bool dst_host, uint64_t src, bool src_host, uint64_t n, CUstream st,
			 bool async)
{
	if (dst_host && src_host) {
		memcpy((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n);
		return CUDA_SUCCESS;
	}
	if (!dst_host && !src_host)
		return async ? CALL(cuMemcpyDtoDAsync_v2, dst, src, n, st)
			     : CALL(cuMemcpyDtoD_v2, dst, src, n);
	if (dst_host)
		return async ? CALL(cuMemcpyDtoHAsync_v2, (void *)(uintptr_t)dst, src, n, st)
			     : CALL(cuMemcpyDtoH_v2, (void *)(uintptr_t)dst, src, n);
	return async ? CALL(cuMemcpyHtoDAsync_v2, dst, (const void *)(uintptr_t)src, n, st)
		     : CALL(cuMemcpyHtoD_v2, dst, (const void *)(uintptr_t)src, n);
}

/* The shared rings page-locked, once per session (its first copy to pageable client memory): the
 * driver then copies from the device straight into the response ring by DMA, where pageable memory
 * costs it a staging copy of its own (measured on the H200: pageable D2H at 0.39x native before). */
static void pin_rings(struct crc_session *s)
{
	CUresult res;

	if (s->chan.tcp || !s->chan.shm || s->rings_pinned || s->rings_pin_failed)
		return;
	res = CALL(cuMemHostRegister_v2, s->chan.shm, s->chan.shm_size, CU_MEMHOSTREGISTER_PORTABLE);
	if (res == CUDA_SUCCESS) {
		s->rings_pinned = s->chan.shm;
	} else {
		s->rings_pin_failed = true;
		pr_info(
		    "session %llu: rings not page-locked (CUDA error %d): copies to the client are staged",
		    (unsigned long long)s->id, res);
	}
}

/* Device to pageable client memory: the bytes go back in data records, a chunk at a time, each
 * copied by the backend straight into the response ring. */
static CUresult copy_to_client(struct crc_session *s, uint64_t src, uint64_t n, CUstream st, bool async)
{
	size_t max = crc_chan_max_payload(&s->chan) - sizeof(struct crc_copy_data);
	size_t chunk = max < CRC_COPY_CHUNK ? max : CRC_COPY_CHUNK;
	CUresult res = CUDA_SUCCESS;

	pin_rings(s);

	for (uint64_t off = 0; off < n && res == CUDA_SUCCESS; off += chunk) {
		uint64_t len = n - off < chunk ? n - off : chunk;
		struct crc_copy_data *d;

		if (crc_chan_reserve(&s->chan, s->msg->op, CRC_MSG_MORE, s->msg->seq, sizeof(*d) + len,
				     (void **)&d))
			return CUDA_ERROR_UNKNOWN;
		d->offset = off;
		d->bytes = len;
		res = async ? CALL(cuMemcpyDtoHAsync_v2, d + 1, src + off, len, st)
			    : CALL(cuMemcpyDtoH_v2, d + 1, src + off, len);
		/* The record goes out once its bytes are there. */
		if (res == CUDA_SUCCESS && async)
			res = CALL(cuStreamSynchronize, st);
		if (res != CUDA_SUCCESS)
			d->bytes = 0;
		if (crc_chan_commit(&s->chan))
			return CUDA_ERROR_UNKNOWN;
	}
	return res;
}

bool crc_stream_capturing(CUstream st)
{
	CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;

	return CALL(cuStreamIsCapturing, st, &status) == CUDA_SUCCESS &&
	       status != CU_STREAM_CAPTURE_STATUS_NONE;
}

CUresult crc_raw_copy(struct crc_session *s, const struct crc_call_hdr *h, const uint8_t *args, size_t len)
{
	const struct crc_copy_req *r = (const void *)args;
	uint64_t dst, src;
	bool dst_host, src_host;
	union crc_slot st;
	CUresult res;

	if (len < sizeof(*r) || (r->src_loc == CRC_LOC_INLINE && len - sizeof(*r) < r->bytes))
		return CUDA_ERROR_INVALID_VALUE;
	res = crc_translate(s, h, CRC_HT_STREAM, r->stream, &st);
	if (res != CUDA_SUCCESS)
		return res;
	/* Pageable client memory passes through the ring, which a captured copy would read (or write)
	 * again each time its graph runs, long after the record is gone. */
	if ((r->src_loc == CRC_LOC_INLINE || r->dst_loc == CRC_LOC_INLINE || r->src_loc == CRC_LOC_STRIPED ||
	     r->dst_loc == CRC_LOC_STRIPED) &&
	    crc_stream_capturing(st.ptr)) {
		pr_warn("a copy between pageable host memory and the device on a capturing stream is not "
			"supported under crcuda; use page-locked memory (cuMemAllocHost)");
		return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
	}
	if (r->src_loc == CRC_LOC_STRIPED || r->dst_loc == CRC_LOC_STRIPED)
		return crc_stripe_copy(s, r, (const uint8_t *)(r + 1), len - sizeof(*r), st.ptr);
	if (r->dst_loc == CRC_LOC_INLINE) {
		if (r->src_loc != CRC_LOC_DEVICE)
			return CUDA_ERROR_INVALID_VALUE;
		return copy_to_client(s, r->src, r->bytes, st.ptr, r->async);
	}
	res = copy_side(s, r->dst_loc, r->dst, r->bytes, NULL, &dst, &dst_host);
	if (res == CUDA_SUCCESS)
		res = copy_side(s, r->src_loc, r->src, r->bytes, (const uint8_t *)(r + 1), &src, &src_host);
	if (res != CUDA_SUCCESS)
		return res;
	res = copy_one(dst, dst_host, src, src_host, r->bytes, st.ptr, r->async);
	/* The bytes of pageable client memory are in this record, which the ring reuses as soon as it is
	 * released. Once the rings are page-locked (pin_rings) the driver reads them by DMA when the
	 * stream gets to the copy, long after that: a later record's bytes would be copied. The copy is
	 * complete before the record goes, as the driver's own copies from pageable memory wait for the
	 * stream (CUDA's "API synchronization behavior"). */
	if (res == CUDA_SUCCESS && r->async && r->src_loc == CRC_LOC_INLINE && !dst_host)
		res = CALL(cuStreamSynchronize, st.ptr);
	return res;
}

/* ---- modules ------------------------------------------------------------------------------------ */
CUresult crc_raw_load(struct crc_session *s, const struct crc_call_hdr *h, const uint8_t *args, size_t len)
{
	const struct crc_load_req *r = (const void *)args;
	union crc_slot obj = {0};
	uint64_t *out;
	CUresult res;

	(void)h;
	if (len < sizeof(*r) || len - sizeof(*r) < r->chunk || r->offset != s->image_len ||
	    r->offset + r->chunk > r->image_bytes || r->image_bytes > (1ull << 34))
		return CUDA_ERROR_INVALID_VALUE;
	if (s->image_cap < r->image_bytes) {
		uint8_t *p = realloc(s->image, r->image_bytes);

		if (!p)
			return CUDA_ERROR_OUT_OF_MEMORY;
		s->image = p;
		s->image_cap = r->image_bytes;
	}
	memcpy(s->image + r->offset, r + 1, r->chunk);
	s->image_len += r->chunk;
	if (s->image_len < r->image_bytes)
		return CUDA_SUCCESS; /* more records to come */
	s->image_len = 0;
	if (s->msg->op == CRC_CU_cuLibraryLoadData) {
		res = CALL(cuLibraryLoadData, (CUlibrary *)&obj.ptr, s->image, NULL, NULL, 0, NULL, NULL, 0);
		if (res == CUDA_SUCCESS)
			obj.u64 = crc_register(s, CRC_HT_LIBRARY, obj);
	} else {
		res = CALL(cuModuleLoadData, (CUmodule *)&obj.ptr, s->image);
		if (res == CUDA_SUCCESS)
			obj.u64 = crc_register(s, CRC_HT_MODULE, obj);
	}
	if (res != CUDA_SUCCESS)
		return res;
	/* The journal keeps the image (once per content) for checkpoints. */
	s->jimage = crc_journal_image(s, s->image, r->image_bytes);
	out = crc_out(s, 8);
	if (!out)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*out = obj.u64;
	return CUDA_SUCCESS;
}

/* Forgets the function and kernel handles that belong to a module or library about to be unloaded:
 * the driver reuses their addresses for the next load, and an old handle found again by address
 * would bring the old function's cached parameter layout with it. */
static void forget_members(struct crc_session *s, CUmodule mod, CUlibrary lib)
{
	struct crc_htable *fn = &s->tables[CRC_HT_FUNC], *kn = &s->tables[CRC_HT_KERNEL];

	if (lib && CALL(cuLibraryGetModule, &mod, lib) != CUDA_SUCCESS)
		mod = NULL;
	/* A library's module handed out by cuLibraryGetModule goes with the library: the session's
	 * cleanup must not unload it a second time. */
	if (lib && mod) {
		uint64_t v = crc_find_handle(s, CRC_HT_MODULE, mod);

		if (v)
			crc_forget(s, v);
	}
	for (uint32_t i = 1; i <= fn->n; i++) {
		CUmodule owner = NULL;

		if (fn->real[i].ptr && mod &&
		    CALL(cuFuncGetModule, &owner, fn->real[i].ptr) == CUDA_SUCCESS && owner == mod)
			crc_forget(s, crc_vhandle(CRC_HT_FUNC, i));
	}
	for (uint32_t i = 1; lib && i <= kn->n; i++) {
		CUlibrary owner = NULL;

		if (kn->real[i].ptr && CALL(cuKernelGetLibrary, &owner, kn->real[i].ptr) == CUDA_SUCCESS &&
		    owner == lib)
			crc_forget(s, crc_vhandle(CRC_HT_KERNEL, i));
	}
}

CUresult crc_ovr_cuModuleUnload(struct crc_session *s, void *const *argv)
{
	CUmodule mod = *(CUmodule *)argv[0];

	forget_members(s, mod, NULL);
	return CALL(cuModuleUnload, mod);
}

CUresult crc_ovr_cuLibraryUnload(struct crc_session *s, void *const *argv)
{
	CUlibrary lib = *(CUlibrary *)argv[0];

	forget_members(s, NULL, lib);
	return CALL(cuLibraryUnload, lib);
}

/* Parameter layout from the backend (CUDA 12.4+); UINT32_MAX when it cannot say. */
static void param_layout(CUfunction f, CUkernel k, struct crc_getfn_reply *r, struct crc_session *s)
{
	r->nparams = 0;
	r->param_bytes = 0;
	for (unsigned i = 0; i < CRC_MAX_KPARAMS; i++) {
		size_t off = 0, size = 0;
		CUresult res = k ? CALL(cuKernelGetParamInfo, k, i, &off, &size)
				 : CALL(cuFuncGetParamInfo, f, i, &off, &size);
		struct crc_kparam_wire *w;

		if (res == CUDA_ERROR_INVALID_VALUE)
			return;
		if (res != CUDA_SUCCESS) {
			r->nparams = UINT32_MAX;
			return;
		}
		w = crc_out(s, sizeof(*w));
		if (!w) {
			r->nparams = UINT32_MAX;
			return;
		}
		w->offset = (uint32_t)off;
		w->size = (uint32_t)size;
		r->nparams++;
		if (off + size > r->param_bytes)
			r->param_bytes = (uint32_t)(off + size);
	}
}

CUresult crc_raw_getfn(struct crc_session *s, const struct crc_call_hdr *h, const uint8_t *args, size_t len)
{
	const struct crc_getfn_req *r = (const void *)args;
	const char *name = (const char *)(r + 1);
	unsigned owner_tag, tag;
	struct crc_getfn_reply *reply;
	union crc_slot owner, obj = {0};
	size_t reply_off;
	CUdevice dev = 0;
	CUresult res;

	if (len < sizeof(*r) || len - sizeof(*r) < r->name_len || (r->name_len && name[r->name_len - 1]))
		return CUDA_ERROR_INVALID_VALUE;
	switch (s->msg->op) {
	case CRC_CU_cuModuleGetFunction:
		owner_tag = CRC_HT_MODULE, tag = CRC_HT_FUNC;
		break;
	case CRC_CU_cuLibraryGetKernel:
		owner_tag = CRC_HT_LIBRARY, tag = CRC_HT_KERNEL;
		break;
	default:
		owner_tag = CRC_HT_KERNEL, tag = CRC_HT_FUNC;
	}
	if (!r->owner)
		return CUDA_ERROR_INVALID_HANDLE;
	res = crc_translate(s, h, owner_tag, r->owner, &owner);
	if (res != CUDA_SUCCESS)
		return res;
	if (owner_tag != CRC_HT_KERNEL && !r->name_len)
		return CUDA_ERROR_INVALID_VALUE;
	if (owner_tag == CRC_HT_MODULE)
		res = CALL(cuModuleGetFunction, (CUfunction *)&obj.ptr, owner.ptr, name);
	else if (owner_tag == CRC_HT_LIBRARY)
		res = CALL(cuLibraryGetKernel, (CUkernel *)&obj.ptr, owner.ptr, name);
	else
		res = CALL(cuKernelGetFunction, (CUfunction *)&obj.ptr, owner.ptr);
	if (res != CUDA_SUCCESS)
		return res;
	reply = crc_out(s, sizeof(*reply));
	if (!reply)
		return CUDA_ERROR_OUT_OF_MEMORY;
	reply_off = (uint8_t *)reply - s->out;
	reply->handle = crc_find_handle(s, tag, obj.ptr);
	if (!reply->handle)
		reply->handle = crc_register(s, tag, obj);
	if (tag == CRC_HT_FUNC) {
		union crc_slot mod = {0};

		if (CALL(cuFuncGetModule, (CUmodule *)&mod.ptr, obj.ptr) == CUDA_SUCCESS && mod.ptr) {
			reply->owner = crc_find_handle(s, CRC_HT_MODULE, mod.ptr);
			if (!reply->owner)
				reply->owner = crc_register(s, CRC_HT_MODULE, mod);
		}
	} else {
		reply->owner = r->owner;
	}
	current_device(&dev);
	for (int a = 0; a < CU_FUNC_ATTRIBUTE_MAX && a < CRC_FUNC_ATTR_SLOTS; a++) {
		int v = 0;

		if (tag == CRC_HT_KERNEL)
			CALL(cuKernelGetAttribute, &v, (CUfunction_attribute)a, obj.ptr, dev);
		else
			CALL(cuFuncGetAttribute, &v, (CUfunction_attribute)a, obj.ptr);
		reply->attrs[a] = v;
	}
	{
		struct crc_getfn_reply tmp = *reply;

		param_layout(tag == CRC_HT_FUNC ? obj.ptr : NULL, tag == CRC_HT_KERNEL ? obj.ptr : NULL, &tmp,
			     s);
		/* crc_out may have moved the buffer. */
		reply = (struct crc_getfn_reply *)(s->out + reply_off);
		reply->nparams = tmp.nparams;
		reply->param_bytes = tmp.param_bytes;
		if (tmp.nparams == UINT32_MAX)
			s->out_len = reply_off + crc_align8(sizeof(*reply));
	}
	return CUDA_SUCCESS;
}

/* The names of a module's functions (struct crc_module_functions_reply): through the driver's tools
 * table where it has one (the real driver counts functions that lazy loading has not loaded yet, which
 * cuModuleGetFunctionCount does not), else cuModuleEnumerateFunctions. */
static const CUuuid tools_module_table = {
    {0x6e, 0x16, 0x3f, 0xbe, 0xb9, 0x58, 0x44, 0x4d, 0x83, 0x5c, 0xe1, 0x82, 0xaf, 0xf1, 0x99, 0x1e}};

/* The names, packed, as the reply carries them after its header. */
struct names_out {
	char *buf;
	size_t len, cap;
	uint32_t count;
	bool oom;
};

static void name_put(void *arg, CUfunction f, const char *name)
{
	struct names_out *o = arg;
	size_t n = name ? strlen(name) + 1 : 0;

	(void)f;
	if (!n || o->oom)
		return;
	if (o->len + n > o->cap) {
		size_t cap = o->cap ? o->cap * 2 : 4096;
		char *p;

		while (cap < o->len + n)
			cap *= 2;
		p = realloc(o->buf, cap);
		if (!p) {
			o->oom = true;
			return;
		}
		o->buf = p;
		o->cap = cap;
	}
	memcpy(o->buf + o->len, name, n);
	o->len += n;
	o->count++;
}

/* The names in the reply (struct crc_module_functions_reply), then freed. */
static CUresult names_reply(struct crc_session *s, struct names_out *o)
{
	struct crc_module_functions_reply *r = o->oom ? NULL : crc_out(s, sizeof(*r) + o->len);

	if (r) {
		r->count = o->count;
		r->bytes = (uint32_t)o->len;
		memcpy(r + 1, o->buf, o->len);
	}
	free(o->buf);
	return r ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult crc_raw_module_functions(struct crc_session *s, const struct crc_call_hdr *h, const uint8_t *args,
				  size_t len)
{
	struct names_out o = {0};
	const void **table = NULL;
	union crc_slot mod;
	CUresult res = first_handle(s, h, args, len, CRC_HT_MODULE, &mod);

	if (res != CUDA_SUCCESS)
		return res;
	if (CALL(cuGetExportTable, (const void **)&table, &tools_module_table) == CUDA_SUCCESS && table &&
	    (uintptr_t)table[0] > 7 * sizeof(void *)) {
		int (*each)(CUcontext, CUmodule, void (*)(void *, CUfunction, const char *), void *) =
		    (int (*)(CUcontext, CUmodule, void (*)(void *, CUfunction, const char *),
			     void *))table[7];
		CUcontext ctx = NULL;

		CALL(cuCtxGetCurrent, &ctx);
		if (each(ctx, mod.ptr, name_put, &o) < 0) {
			free(o.buf);
			return CUDA_ERROR_INVALID_HANDLE;
		}
	} else {
		unsigned n = 0;
		CUfunction *fs;

		res = CALL(cuModuleGetFunctionCount, &n, mod.ptr);
		if (res != CUDA_SUCCESS)
			return res;
		fs = calloc(n ? n : 1, sizeof(*fs));
		if (!fs)
			return CUDA_ERROR_OUT_OF_MEMORY;
		res = CALL(cuModuleEnumerateFunctions, fs, n, mod.ptr);
		for (unsigned i = 0; res == CUDA_SUCCESS && i < n; i++) {
			const char *name = NULL;

			if (CALL(cuFuncGetName, &name, fs[i]) == CUDA_SUCCESS)
				name_put(&o, fs[i], name);
		}
		free(fs);
		if (res != CUDA_SUCCESS) {
			free(o.buf);
			return res;
		}
	}
	return names_reply(s, &o);
}

/* The names of a library's kernels (struct crc_module_functions_reply). */
CUresult crc_raw_library_kernels(struct crc_session *s, const struct crc_call_hdr *h, const uint8_t *args,
				 size_t len)
{
	struct names_out o = {0};
	union crc_slot lib;
	unsigned n = 0;
	CUkernel *ks;
	CUresult res = first_handle(s, h, args, len, CRC_HT_LIBRARY, &lib);

	if (res == CUDA_SUCCESS)
		res = CALL(cuLibraryGetKernelCount, &n, lib.ptr);
	if (res != CUDA_SUCCESS)
		return res;
	ks = calloc(n ? n : 1, sizeof(*ks));
	if (!ks)
		return CUDA_ERROR_OUT_OF_MEMORY;
	res = CALL(cuLibraryEnumerateKernels, ks, n, lib.ptr);
	for (unsigned i = 0; res == CUDA_SUCCESS && i < n; i++) {
		const char *name = NULL;

		res = CALL(cuKernelGetName, &name, ks[i]);
		if (res == CUDA_SUCCESS)
			name_put(&o, NULL, name);
	}
	free(ks);
	if (res != CUDA_SUCCESS) {
		free(o.buf);
		return res;
	}
	return names_reply(s, &o);
}

/* ---- launches ----------------------------------------------------------------------------------- */
/* The CUlaunchConfig a launch request describes (cuLaunchKernelEx, occupancy with a configuration). */
static CUlaunchConfig launch_config(const struct crc_launch_req *r, CUstream stream, CUlaunchAttribute *attrs)
{
	return (CUlaunchConfig){.gridDimX = r->grid[0],
				.gridDimY = r->grid[1],
				.gridDimZ = r->grid[2],
				.blockDimX = r->block[0],
				.blockDimY = r->block[1],
				.blockDimZ = r->block[2],
				.sharedMemBytes = r->shared_bytes,
				.hStream = stream,
				.attrs = attrs,
				.numAttrs = r->nattrs};
}

CUresult crc_launch_decode(struct crc_session *s, const struct crc_call_hdr *h, const uint8_t *args,
			   size_t len, struct crc_launch_args *la)
{
	const struct crc_launch_req *r = (const void *)args;
	const struct crc_kparam_wire *pw = (const void *)(r + 1);
	union crc_slot f, st;
	uint32_t n;
	CUresult res;

	if (len < sizeof(*r))
		return CUDA_ERROR_INVALID_VALUE;
	n = r->nparams == UINT32_MAX ? 0 : r->nparams;
	/* The attributes follow the parameter bytes at the next 8-byte boundary. */
	if (n > CRC_MAX_KPARAMS || len - sizeof(*r) < n * sizeof(*pw) + crc_align8(r->param_bytes) +
							  (uint64_t)r->nattrs * sizeof(CUlaunchAttribute))
		return CUDA_ERROR_INVALID_VALUE;
	la->req = r;
	la->buf = (const uint8_t *)(pw + n);
	la->buf_size = r->param_bytes;
	res = crc_translate(s, h, CRC_HT_FUNC, r->func, &f);
	if (res == CUDA_SUCCESS)
		res = crc_translate(s, h, CRC_HT_STREAM, r->stream, &st);
	if (res != CUDA_SUCCESS)
		return res;
	if (!f.ptr)
		return CUDA_ERROR_INVALID_HANDLE;
	la->func = f.ptr;
	la->stream = st.ptr;
	la->kp = NULL;
	la->ex = NULL;
	if (r->nparams == UINT32_MAX) {
		la->extra[0] = CU_LAUNCH_PARAM_BUFFER_POINTER;
		la->extra[1] = (void *)la->buf;
		la->extra[2] = CU_LAUNCH_PARAM_BUFFER_SIZE;
		la->extra[3] = &la->buf_size;
		la->extra[4] = CU_LAUNCH_PARAM_END;
		la->ex = la->extra;
	} else {
		for (uint32_t i = 0; i < n; i++) {
			if ((uint64_t)pw[i].offset + pw[i].size > r->param_bytes)
				return CUDA_ERROR_INVALID_VALUE;
			la->params[i] = (void *)(la->buf + pw[i].offset);
		}
		la->kp = la->params;
	}
	return CUDA_SUCCESS;
}

CUresult crc_raw_launch(struct crc_session *s, const struct crc_call_hdr *h, const uint8_t *args, size_t len)
{
	struct crc_launch_args la;
	const struct crc_launch_req *r;
	CUresult res = crc_launch_decode(s, h, args, len, &la);

	if (res != CUDA_SUCCESS)
		return res;
	r = la.req;
	if (s->msg->op == CRC_CU_cuLaunchKernelEx) {
		CUlaunchAttribute attrs[16];
		CUlaunchConfig cfg = launch_config(r, la.stream, attrs);

		if (r->nattrs > 16)
			return CUDA_ERROR_INVALID_VALUE;
		memcpy(attrs, la.buf + crc_align8(r->param_bytes), r->nattrs * sizeof(*attrs));
		return CALL(cuLaunchKernelEx, &cfg, la.func, la.kp, la.ex);
	}
	if (r->cooperative)
		return CALL(cuLaunchCooperativeKernel, la.func, r->grid[0], r->grid[1], r->grid[2],
			    r->block[0], r->block[1], r->block[2], r->shared_bytes, la.stream, la.kp);
	return CALL(cuLaunchKernel, la.func, r->grid[0], r->grid[1], r->grid[2], r->block[0], r->block[1],
		    r->block[2], r->shared_bytes, la.stream, la.kp, la.ex);
}

/* Occupancy with a launch configuration: a launch request without parameters, one int back. */
CUresult crc_raw_occupancy(struct crc_session *s, const struct crc_call_hdr *h, const uint8_t *args,
			   size_t len)
{
	const struct crc_launch_req *r = (const void *)args;
	CUlaunchAttribute attrs[16];
	union crc_slot f, st;
	CUresult res;
	int v = 0, *out;

	if (len < sizeof(*r) || r->nattrs > 16 || len - sizeof(*r) < r->nattrs * sizeof(CUlaunchAttribute))
		return CUDA_ERROR_INVALID_VALUE;
	res = crc_translate(s, h, CRC_HT_FUNC, r->func, &f);
	if (res == CUDA_SUCCESS)
		res = crc_translate(s, h, CRC_HT_STREAM, r->stream, &st);
	if (res != CUDA_SUCCESS)
		return res;
	memcpy(attrs, r + 1, r->nattrs * sizeof(*attrs));
	CUlaunchConfig cfg = launch_config(r, st.ptr, attrs);
	res = s->msg->op == CRC_CU_cuOccupancyMaxActiveClusters
		  ? CALL(cuOccupancyMaxActiveClusters, &v, f.ptr, &cfg)
		  : CALL(cuOccupancyMaxPotentialClusterSize, &v, f.ptr, &cfg);
	out = crc_out(s, sizeof(*out));
	if (!out)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*out = v;
	return res;
}

/* ---- cleanup ------------------------------------------------------------------------------------ */
void crc_session_release_resources(struct crc_session *s)
{
	struct crc_htable *t;

	/* Let running work finish in every context the session used. */
	t = &s->tables[CRC_HT_CTX];
	for (uint32_t i = 1; i <= t->n; i++) {
		if (t->real[i].ptr && CALL(cuCtxSetCurrent, t->real[i].ptr) == CUDA_SUCCESS)
			CALL(cuCtxSynchronize);
	}
	t = &s->tables[CRC_HT_STREAM];
	for (uint32_t i = 1; i <= t->n; i++)
		if (t->real[i].ptr)
			CALL(cuStreamDestroy_v2, t->real[i].ptr);
	for (unsigned i = 0; i < s->n_ptstreams; i++)
		CALL(cuStreamDestroy_v2, s->ptstreams[i].stream);
	t = &s->tables[CRC_HT_EVENT];
	for (uint32_t i = 1; i <= t->n; i++)
		if (t->real[i].ptr)
			CALL(cuEventDestroy_v2, t->real[i].ptr);
	while (s->allocs) {
		struct crc_alloc *a = s->allocs;

		switch (a->kind) {
		case CRC_ALLOC_MEM:
			unmap_alloc(s, a);
			continue;
		case CRC_ALLOC_IPC:
			crc_ipc_unmap(s, a);
			continue;
		case CRC_ALLOC_MAP:
			CALL(cuMemUnmap, a->ptr, a->size);
			break;
		case CRC_ALLOC_HANDLE:
			while (a->refs-- > 0)
				CALL(cuMemRelease, a->handle);
			account(s, -(int64_t)a->size);
			break;
		case CRC_ALLOC_RESERVE:
			if (!a->in_window)
				CALL(cuMemAddressFree, a->ptr, a->size);
			break;
		}
		alloc_remove(s, a);
	}
	if (s->rings_pinned) {
		CALL(cuMemHostUnregister, s->rings_pinned);
		s->rings_pinned = NULL;
	}
	while (s->pins) {
		struct crc_pin *p = s->pins;

		s->pins = p->next;
		pin_drop(p);
	}
	crc_graph_release(s);
	t = &s->tables[CRC_HT_MODULE];
	for (uint32_t i = 1; i <= t->n; i++)
		if (t->real[i].ptr)
			CALL(cuModuleUnload, t->real[i].ptr);
	t = &s->tables[CRC_HT_LIBRARY];
	for (uint32_t i = 1; i <= t->n; i++)
		if (t->real[i].ptr)
			CALL(cuLibraryUnload, t->real[i].ptr);
	CALL(cuCtxSetCurrent, NULL);
	t = &s->tables[CRC_HT_CTX];
	for (uint32_t i = 1; i <= t->n; i++) {
		if (!t->real[i].ptr)
			continue;
		if (i <= (uint32_t)crcd.dev_count)
			CALL(cuDevicePrimaryCtxRelease_v2, (CUdevice)s->dev_map[i - 1]);
		else
			CALL(cuCtxDestroy_v2, t->real[i].ptr);
		t->real[i].ptr = NULL;
	}
}

/* ---- VMM access, pointer attributes ------------------------------------------------------------- */
/* Access to mappings of imported memory is not journaled: kept with the mappings (the application's
 * device ordinals), which a restore of the tree sets again. */
static void note_imported_access(struct crc_session *s, uint64_t ptr, uint64_t size, const CUmemAccessDesc *d,
				 unsigned n)
{
	for (struct crc_alloc *a = s->allocs; a; a = a->next) {
		if (a->kind != CRC_ALLOC_MAP || !a->ipc_imported || a->ptr >= ptr + size ||
		    a->ptr + a->size <= ptr)
			continue;
		for (unsigned i = 0; i < n; i++)
			if (d[i].location.type == CU_MEM_LOCATION_TYPE_DEVICE && d[i].location.id >= 0 &&
			    d[i].location.id < CRC_MAX_DEVICES)
				a->access[d[i].location.id] = (uint8_t)d[i].flags;
	}
}

CUresult crc_raw_vmm_access(struct crc_session *s, const struct crc_call_hdr *h, const uint8_t *args,
			    size_t len)
{
	uint64_t w[3];
	CUmemAccessDesc d[64];

	(void)h;
	if (len < sizeof(w))
		return CUDA_ERROR_INVALID_VALUE;
	memcpy(w, args, sizeof(w));
	if (w[2] > 64 || len - sizeof(w) < w[2] * sizeof(CUmemAccessDesc))
		return CUDA_ERROR_INVALID_VALUE;
	memcpy(d, args + sizeof(w), w[2] * sizeof(*d));
	s->jdrop = imported_range(s, w[0], w[1]);
	if (s->jdrop)
		note_imported_access(s, w[0], w[1], d, (unsigned)w[2]);
	for (uint64_t i = 0; i < w[2]; i++)
		if (d[i].location.type == CU_MEM_LOCATION_TYPE_DEVICE)
			d[i].location.id = crc_dev_backend(s, d[i].location.id);
	return CALL(cuMemSetAccess, w[0], w[1], d, w[2]);
}

/* cuMemExportToShareableHandle of an application's handle (a POSIX descriptor: the client makes the
 * application's own descriptor of the reply, crcuda/proto.h). */
CUresult crc_raw_vmm_export(struct crc_session *s, const struct crc_call_hdr *h, const uint8_t *args,
			    size_t len)
{
	struct crc_shareable_wire *out;
	struct crc_alloc *a;
	union crc_slot mh;
	CUresult res;

	/* A short request and an unknown handle alike: not a handle of this session. */
	if (first_handle(s, h, args, len, CRC_HT_MEMHANDLE, &mh) != CUDA_SUCCESS)
		return CUDA_ERROR_INVALID_VALUE;
	a = handle_find(s, (CUmemGenericAllocationHandle)mh.u64);
	if (!a)
		return CUDA_ERROR_INVALID_VALUE;
	res = crc_ipc_export(s, a->handle, a->size, &a->ipc_key);
	if (res != CUDA_SUCCESS)
		return res;
	out = crc_out(s, sizeof(*out));
	if (!out)
		return CUDA_ERROR_OUT_OF_MEMORY;
	memset(out, 0, sizeof(*out));
	memcpy(out->magic, CRC_SHAREABLE_MAGIC, sizeof(out->magic));
	out->key = a->ipc_key;
	out->size = a->size;
	out->session_id = s->id;
	return CUDA_SUCCESS;
}

/* cuMemImportFromShareableHandle: the export the application's descriptor names, by its key. Not
 * journaled (a replay could not import it again): a checkpoint is refused while it is held. */
CUresult crc_raw_vmm_import(struct crc_session *s, const struct crc_call_hdr *h, const uint8_t *args,
			    size_t len)
{
	CUmemGenericAllocationHandle mh;
	uint64_t key, size, exporter;
	struct crc_alloc *a;
	CUresult res;

	(void)h;
	if (len < sizeof(key))
		return CUDA_ERROR_INVALID_VALUE;
	memcpy(&key, args, sizeof(key));
	res = crc_ipc_import(s, key, &mh, &size, &exporter);
	if (res != CUDA_SUCCESS)
		return res;
	s->jdrop = true;
	a = handle_find(s, mh);
	if (a && !a->ipc_imported) {
		/* Its own export: the driver gives this process's handle back, one more reference. */
		return reply_mem_handle(s, mh, size);
	}
	res = reply_mem_handle(s, mh, size);
	if (res == CUDA_SUCCESS && (a = handle_find(s, mh))) {
		a->ipc_imported = true;
		a->ipc_key = key;
		a->ipc_exporter = exporter;
	}
	return res;
}

/* Stream attributes (crc_stream_attr_req). A set is journaled (CONTEXT_SET): a restore sets it again. */
CUresult crc_raw_stream_attr(struct crc_session *s, const struct crc_call_hdr *h, const uint8_t *args,
			     size_t len)
{
	struct crc_stream_attr_req r;
	CUstreamAttrValue v, *out;
	union crc_slot st;
	CUresult res;

	if (len < sizeof(r))
		return CUDA_ERROR_INVALID_VALUE;
	memcpy(&r, args, sizeof(r));
	memcpy(&v, r.value, sizeof(v));
	res = crc_translate(s, h, CRC_HT_STREAM, r.stream, &st);
	if (res != CUDA_SUCCESS)
		return res;
	if (s->msg->op == CRC_CU_cuStreamSetAttribute)
		return CALL(cuStreamSetAttribute, st.ptr, (CUstreamAttrID)r.attr, &v);
	res = CALL(cuStreamGetAttribute, st.ptr, (CUstreamAttrID)r.attr, &v);
	if (res == CUDA_SUCCESS) {
		out = crc_out(s, sizeof(*out));
		if (!out)
			return CUDA_ERROR_OUT_OF_MEMORY;
		*out = v;
	}
	return res;
}

/* ---- the JIT linker: one whole link per request (crc_link_req), answered with logs and image ---- */
#define LINK_LOG_MAX (1u << 20)

static size_t link_pad8(size_t n)
{
	return (n + 7) & ~(size_t)7;
}

CUresult crc_raw_link(struct crc_session *s, const struct crc_call_hdr *h, const uint8_t *args, size_t len)
{
	struct crc_link_req q;
	CUjit_option opts[40];
	void *vals[40];
	size_t info_cap = 0, err_cap = 0, off = sizeof(q), image_len = 0;
	char *info = NULL, *err = NULL;
	unsigned n = 0, wall = ~0u, threads = ~0u, info_size = ~0u, err_size = ~0u;
	struct crc_link_reply *r;
	CUlinkState state = NULL;
	void *image = NULL;
	CUresult res;
	uint8_t *o;

	(void)h;
	if (len < sizeof(q))
		return CUDA_ERROR_INVALID_VALUE;
	memcpy(&q, args, sizeof(q));
	if (q.nopts > 32 || len - off < q.nopts * sizeof(struct crc_link_opt))
		return CUDA_ERROR_INVALID_VALUE;
	for (unsigned i = 0; i < q.nopts; i++, off += sizeof(struct crc_link_opt)) {
		struct crc_link_opt op;

		memcpy(&op, args + off, sizeof(op));
		opts[n] = (CUjit_option)op.option;
		vals[n] = (void *)(uintptr_t)op.value;
		if (op.option == CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES)
			info_cap = op.value < LINK_LOG_MAX ? op.value : LINK_LOG_MAX, info_size = n;
		else if (op.option == CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES)
			err_cap = op.value < LINK_LOG_MAX ? op.value : LINK_LOG_MAX, err_size = n;
		else if (op.option == CU_JIT_WALL_TIME)
			wall = n;
		else if (op.option == CU_JIT_THREADS_PER_BLOCK)
			threads = n;
		n++;
	}
	info = calloc(1, info_cap + 1);
	err = calloc(1, err_cap + 1);
	if (!info || !err) {
		res = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	/* The log buffers are this process's; their sizes as the application gave them (capped). */
	for (unsigned i = 0; i < n; i++) {
		if (opts[i] == CU_JIT_INFO_LOG_BUFFER)
			vals[i] = info;
		else if (opts[i] == CU_JIT_ERROR_LOG_BUFFER)
			vals[i] = err;
		else if (i == info_size)
			vals[i] = (void *)(uintptr_t)info_cap;
		else if (i == err_size)
			vals[i] = (void *)(uintptr_t)err_cap;
	}
	res = CALL(cuLinkCreate_v2, n, opts, vals, &state);
	for (unsigned k = 0; res == CUDA_SUCCESS && k < q.ninputs; k++) {
		struct crc_link_input in;
		char name[256];

		if (len - off < sizeof(in)) {
			res = CUDA_ERROR_INVALID_VALUE;
			break;
		}
		memcpy(&in, args + off, sizeof(in));
		off += sizeof(in);
		if (len - off < link_pad8(in.name_len) || len - off - link_pad8(in.name_len) < in.size) {
			res = CUDA_ERROR_INVALID_VALUE;
			break;
		}
		snprintf(name, sizeof(name), "%.*s", (int)in.name_len, (const char *)args + off);
		off += link_pad8(in.name_len);
		res = CALL(cuLinkAddData_v2, state, (CUjitInputType)in.type, (void *)(args + off), in.size,
			   name, 0, NULL, NULL);
		off += link_pad8(in.size);
	}
	if (res == CUDA_SUCCESS)
		res = CALL(cuLinkComplete, state, &image, &image_len);
	info[info_cap] = err[err_cap] = '\0';
	o = crc_out(s, sizeof(*r) + link_pad8(strlen(info)) + link_pad8(strlen(err)) + link_pad8(image_len));
	if (!o) {
		res = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	r = (struct crc_link_reply *)o;
	*r = (struct crc_link_reply){.result = res,
				     .info_len = strlen(info),
				     .error_len = strlen(err),
				     .image_len = res == CUDA_SUCCESS ? image_len : 0};
	if (wall != ~0u)
		memcpy(&r->wall_time, &vals[wall], sizeof(r->wall_time));
	if (threads != ~0u)
		r->threads_per_block = (uint32_t)(uintptr_t)vals[threads];
	o += sizeof(*r);
	memcpy(o, info, r->info_len);
	o += link_pad8(r->info_len);
	memcpy(o, err, r->error_len);
	o += link_pad8(r->error_len);
	if (r->image_len)
		memcpy(o, image, r->image_len);
	res = CUDA_SUCCESS; /* the link's result travels in the reply, with its logs */
out:
	if (state)
		CALL(cuLinkDestroy, state);
	free(info);
	free(err);
	return res;
}
