/* Stream-ordered memory pools as bookkeeping (crcuda/mempool.h). A pool handle is the address of its
 * record; records are never freed (allocations may outlive their pool's destruction), and a handle is
 * checked against the list of records before it is used. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "crcuda/log.h"
#include "crcuda/mempool.h"

#define MAX_DEVICES 32

struct pool {
	CUmemPoolProps props;
	int follow, opportunistic, internal; /* the reuse attributes */
	cuuint64_t release_threshold, used, used_high, reserved_high;
	unsigned char access[MAX_DEVICES]; /* CUmemAccess_flags */
	bool is_default, destroyed;
	/* Imported from another process (cuMemPoolImportFromShareableHandle): its pointers can be
	 * imported, nothing allocated; origin names the exporter's pool. */
	bool imported;
	uint64_t origin[2];
	struct pool *next;
};

struct live {
	CUdeviceptr p;
	size_t bytes;
	struct pool *pool;
	struct live *next;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct pool *pools;		   /* every record */
static struct pool *defaults[MAX_DEVICES]; /* made on first use */
static struct pool *current[MAX_DEVICES];
static struct live *lives;

static bool device_ok(CUdevice dev, const struct crc_mempool_ops *ops)
{
	return dev >= 0 && dev < MAX_DEVICES && dev < ops->device_count();
}

static struct pool *pool_new(const CUmemPoolProps *props)
{
	struct pool *p = calloc(1, sizeof(*p));

	if (!p)
		return NULL;
	p->props = *props;
	p->follow = p->opportunistic = p->internal = 1;
	p->access[props->location.id] = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	p->next = pools;
	pools = p;
	return p;
}

/* Under the lock: the live record of a handle, or NULL. */
static struct pool *pool_of(CUmemoryPool h)
{
	for (struct pool *p = pools; p; p = p->next)
		if ((CUmemoryPool)p == h && !p->destroyed)
			return p;
	return NULL;
}

static struct pool *default_of(CUdevice dev)
{
	if (!defaults[dev]) {
		CUmemPoolProps props = {.allocType = CU_MEM_ALLOCATION_TYPE_PINNED,
					.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev}};

		defaults[dev] = pool_new(&props);
		if (defaults[dev])
			defaults[dev]->is_default = true;
	}
	return defaults[dev];
}

/* A device's default pool, or (cur) its current one. */
static CUresult device_pool(CUmemoryPool *pool, CUdevice dev, bool cur, const struct crc_mempool_ops *ops)
{
	if (!pool)
		return CUDA_ERROR_INVALID_VALUE;
	if (!device_ok(dev, ops))
		return CUDA_ERROR_INVALID_DEVICE;
	pthread_mutex_lock(&lock);
	*pool = (CUmemoryPool)(cur && current[dev] ? current[dev] : default_of(dev));
	pthread_mutex_unlock(&lock);
	return *pool ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult crc_mempool_device_default(CUmemoryPool *pool, CUdevice dev, const struct crc_mempool_ops *ops)
{
	return device_pool(pool, dev, false, ops);
}

CUresult crc_mempool_device_get(CUmemoryPool *pool, CUdevice dev, const struct crc_mempool_ops *ops)
{
	return device_pool(pool, dev, true, ops);
}

CUresult crc_mempool_device_set(CUdevice dev, CUmemoryPool h, const struct crc_mempool_ops *ops)
{
	struct pool *p;
	CUresult res = CUDA_SUCCESS;

	if (!device_ok(dev, ops))
		return CUDA_ERROR_INVALID_DEVICE;
	pthread_mutex_lock(&lock);
	p = pool_of(h);
	if (!p || p->props.location.id != dev)
		res = CUDA_ERROR_INVALID_VALUE;
	else
		current[dev] = p;
	pthread_mutex_unlock(&lock);
	return res;
}

/* The device of a location the pools here serve: device memory of a device there is. */
static CUresult location_device(const CUmemLocation *loc, CUmemAllocationType type, CUdevice *dev,
				const struct crc_mempool_ops *ops)
{
	if (!loc || type != CU_MEM_ALLOCATION_TYPE_PINNED)
		return CUDA_ERROR_INVALID_VALUE;
	if (loc->type != CU_MEM_LOCATION_TYPE_DEVICE) {
		pr_warn("memory pools of host memory are not supported under crcuda yet");
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	*dev = loc->id;
	return device_ok(*dev, ops) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

CUresult crc_mempool_location_get(CUmemoryPool *pool, const CUmemLocation *loc, CUmemAllocationType type,
				  bool cur, const struct crc_mempool_ops *ops)
{
	CUdevice dev;
	CUresult res = location_device(loc, type, &dev, ops);

	if (res != CUDA_SUCCESS)
		return res;
	return device_pool(pool, dev, cur, ops);
}

CUresult crc_mempool_location_set(const CUmemLocation *loc, CUmemAllocationType type, CUmemoryPool pool,
				  const struct crc_mempool_ops *ops)
{
	CUdevice dev;
	CUresult res = location_device(loc, type, &dev, ops);

	return res == CUDA_SUCCESS ? crc_mempool_device_set(dev, pool, ops) : res;
}

CUresult crc_mempool_create(CUmemoryPool *pool, const CUmemPoolProps *props,
			    const struct crc_mempool_ops *ops)
{
	struct pool *p;

	if (!pool || !props || props->allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
	    props->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
		return CUDA_ERROR_INVALID_VALUE;
	if (!device_ok(props->location.id, ops))
		return CUDA_ERROR_INVALID_VALUE; /* as the driver answers (H100, driver 580) */
	/* POSIX descriptors are shared as crcuda's own (libcrcuda/hooks_ipc.c); fabric and Win32 handles
	 * would need the driver's bytes in this process. */
	if (props->handleTypes & ~(unsigned)CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) {
		pr_warn("memory pools exported as handles of types %#x are not supported under crcuda (POSIX "
			"file descriptors are)",
			(unsigned)props->handleTypes);
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	pthread_mutex_lock(&lock);
	p = pool_new(props);
	pthread_mutex_unlock(&lock);
	if (!p)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*pool = (CUmemoryPool)p;
	return CUDA_SUCCESS;
}

CUresult crc_mempool_import(CUmemoryPool *pool, const CUmemPoolProps *props, const uint64_t origin[2])
{
	struct pool *p;

	if (!pool || !props)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&lock);
	p = pool_new(props);
	if (p) {
		p->imported = true;
		p->origin[0] = origin[0];
		p->origin[1] = origin[1];
	}
	pthread_mutex_unlock(&lock);
	if (!p)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*pool = (CUmemoryPool)p;
	return CUDA_SUCCESS;
}

CUresult crc_mempool_origin(CUmemoryPool h, uint64_t origin[2])
{
	struct pool *p;
	CUresult res = CUDA_ERROR_INVALID_VALUE;

	pthread_mutex_lock(&lock);
	p = pool_of(h);
	if (p && p->imported) {
		origin[0] = p->origin[0];
		origin[1] = p->origin[1];
		res = CUDA_SUCCESS;
	}
	pthread_mutex_unlock(&lock);
	return res;
}

CUresult crc_mempool_owner(CUdeviceptr ptr, CUmemoryPool *pool)
{
	CUresult res = CUDA_ERROR_NOT_FOUND;

	pthread_mutex_lock(&lock);
	for (struct live *l = lives; l; l = l->next)
		if (l->p == ptr) {
			*pool = (CUmemoryPool)l->pool;
			res = CUDA_SUCCESS;
			break;
		}
	pthread_mutex_unlock(&lock);
	return res;
}

CUresult crc_mempool_props(CUmemoryPool h, CUmemPoolProps *props)
{
	struct pool *p;

	pthread_mutex_lock(&lock);
	p = pool_of(h);
	if (p)
		*props = p->props;
	pthread_mutex_unlock(&lock);
	return p ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult crc_mempool_destroy(CUmemoryPool h)
{
	struct pool *p;
	CUresult res = CUDA_SUCCESS;

	pthread_mutex_lock(&lock);
	p = pool_of(h);
	if (!p || p->is_default) {
		res = CUDA_ERROR_INVALID_VALUE;
	} else {
		p->destroyed = true;
		for (int d = 0; d < MAX_DEVICES; d++)
			if (current[d] == p)
				current[d] = NULL;
	}
	pthread_mutex_unlock(&lock);
	return res;
}

CUresult crc_mempool_set_attribute(CUmemoryPool h, CUmemPool_attribute attr, const void *value)
{
	struct pool *p;
	CUresult res = CUDA_SUCCESS;

	if (!value)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&lock);
	p = pool_of(h);
	switch (p ? (int)attr : -1) {
	case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
		p->follow = *(const int *)value;
		break;
	case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
		p->opportunistic = *(const int *)value;
		break;
	case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
		p->internal = *(const int *)value;
		break;
	case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
		p->release_threshold = *(const cuuint64_t *)value;
		break;
	case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
	case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
		/* Only a reset to zero: the high-water mark starts again from what is in use. */
		if (*(const cuuint64_t *)value)
			res = CUDA_ERROR_INVALID_VALUE;
		else if (attr == CU_MEMPOOL_ATTR_USED_MEM_HIGH)
			p->used_high = p->used;
		else
			p->reserved_high = p->used;
		break;
	default:
		res = CUDA_ERROR_INVALID_VALUE;
	}
	pthread_mutex_unlock(&lock);
	return res;
}

CUresult crc_mempool_get_attribute(CUmemoryPool h, CUmemPool_attribute attr, void *value)
{
	struct pool *p;
	CUresult res = CUDA_SUCCESS;

	if (!value)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&lock);
	p = pool_of(h);
	switch (p ? (int)attr : -1) {
	case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
		*(int *)value = p->follow;
		break;
	case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
		*(int *)value = p->opportunistic;
		break;
	case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
		*(int *)value = p->internal;
		break;
	case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
		*(cuuint64_t *)value = p->release_threshold;
		break;
	case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT:
	case CU_MEMPOOL_ATTR_USED_MEM_CURRENT:
		*(cuuint64_t *)value = p->used;
		break;
	case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
		*(cuuint64_t *)value = p->reserved_high;
		break;
	case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
		*(cuuint64_t *)value = p->used_high;
		break;
	default:
		res = CUDA_ERROR_INVALID_VALUE;
	}
	pthread_mutex_unlock(&lock);
	return res;
}

CUresult crc_mempool_set_access(CUmemoryPool h, const CUmemAccessDesc *map, size_t count,
				const struct crc_mempool_ops *ops)
{
	struct pool *p;
	CUresult res = CUDA_SUCCESS;

	if (!map && count)
		return CUDA_ERROR_INVALID_VALUE;
	for (size_t i = 0; i < count; i++)
		if (map[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
		    !device_ok(map[i].location.id, ops) || map[i].flags > CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
			return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&lock);
	p = pool_of(h);
	for (size_t i = 0; p && i < count; i++)
		/* The pool's own device keeps read-write access. */
		if (map[i].location.id == p->props.location.id &&
		    map[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
			p = NULL;
	for (size_t i = 0; p && i < count; i++)
		p->access[map[i].location.id] = (unsigned char)map[i].flags;
	if (!p)
		res = CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_unlock(&lock);
	return res;
}

CUresult crc_mempool_get_access(CUmemAccess_flags *flags, CUmemoryPool h, const CUmemLocation *loc)
{
	struct pool *p;
	CUresult res = CUDA_SUCCESS;

	if (!flags || !loc || loc->type != CU_MEM_LOCATION_TYPE_DEVICE || loc->id < 0 ||
	    loc->id >= MAX_DEVICES)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&lock);
	p = pool_of(h);
	if (p)
		*flags = (CUmemAccess_flags)p->access[loc->id];
	else
		res = CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_unlock(&lock);
	return res;
}

CUresult crc_mempool_trim(CUmemoryPool h)
{
	bool ok;

	pthread_mutex_lock(&lock);
	ok = pool_of(h) != NULL;
	pthread_mutex_unlock(&lock);
	return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult crc_mempool_alloc(CUdeviceptr *ptr, size_t bytes, CUmemoryPool h, CUstream stream,
			   const struct crc_mempool_ops *ops)
{
	struct live *l;
	struct pool *p;
	CUresult res;

	if (!ptr || !bytes)
		return CUDA_ERROR_INVALID_VALUE;
	if (!h) {
		CUdevice dev;

		res = ops->current_device(&dev);
		if (res == CUDA_SUCCESS)
			res = crc_mempool_device_get(&h, dev, ops);
		if (res != CUDA_SUCCESS)
			return res;
	}
	pthread_mutex_lock(&lock);
	p = pool_of(h);
	pthread_mutex_unlock(&lock);
	if (!p || p->imported)
		return CUDA_ERROR_INVALID_VALUE;
	l = malloc(sizeof(*l));
	if (!l)
		return CUDA_ERROR_OUT_OF_MEMORY;
	res = ops->alloc(ptr, bytes, stream);
	if (res != CUDA_SUCCESS) {
		free(l);
		return res;
	}
	pthread_mutex_lock(&lock);
	*l = (struct live){*ptr, bytes, p, lives};
	lives = l;
	p->used += bytes;
	if (p->used > p->used_high)
		p->used_high = p->used;
	if (p->used > p->reserved_high)
		p->reserved_high = p->used;
	pthread_mutex_unlock(&lock);
	return CUDA_SUCCESS;
}

CUresult crc_mempool_free(CUdeviceptr ptr, CUstream stream, const struct crc_mempool_ops *ops)
{
	struct live *l = NULL;

	pthread_mutex_lock(&lock);
	for (struct live **pp = &lives; *pp; pp = &(*pp)->next)
		if ((*pp)->p == ptr) {
			l = *pp;
			*pp = l->next;
			l->pool->used -= l->bytes;
			break;
		}
	pthread_mutex_unlock(&lock);
	if (!l)
		return CUDA_ERROR_NOT_FOUND;
	free(l);
	return ops->free(ptr, stream);
}
