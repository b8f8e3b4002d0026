/* Hooks: CUDA IPC. VMM memory's shareable handles (POSIX descriptors): the daemon exports the memory
 * into its registry under a key (crcudad/worker/ipc.c), and the application's descriptor is a sealed
 * memfd holding the key (struct crc_shareable_wire), which the application may pass to another process
 * like the driver's own (SCM_RIGHTS); an import there reads the key back and the daemon imports the
 * export for that process's session.
 *
 * Interprocess events. A record is posted to the daemon like other stream work, so it may reach
 * the driver after cuEventRecord has returned; another process that waits on the event as soon as it
 * hears of the record (simpleIPC's shape) would then wait on the record before it. So a record of an
 * interprocess event waits for the daemon to have made it, as the driver's call does. */
#define LOG_PREFIX "libcrcuda: "
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "client.h"
#include "crcuda/cuda_marshal_specs.h"
#include "crcuda/mempool.h"

/* A set of addresses under a lock, with an emptiness check without it for the hot paths (every event
 * record, every free asks). */
struct addr_set {
	pthread_mutex_t lock;
	uintptr_t *v;
	size_t n, cap;
	_Atomic size_t any; /* n, read without the lock */
};

static CUresult addr_set_add(struct addr_set *set, uintptr_t a)
{
	CUresult res = CUDA_SUCCESS;

	pthread_mutex_lock(&set->lock);
	if (set->n == set->cap) {
		size_t cap = set->cap ? 2 * set->cap : 16;
		uintptr_t *p = realloc(set->v, cap * sizeof(*p));

		if (p) {
			set->v = p;
			set->cap = cap;
		} else {
			res = CUDA_ERROR_OUT_OF_MEMORY;
		}
	}
	if (res == CUDA_SUCCESS)
		set->v[set->n++] = a;
	set->any = set->n;
	pthread_mutex_unlock(&set->lock);
	return res;
}

/* Whether a was in the set (taken out if take). */
static bool addr_set_find(struct addr_set *set, uintptr_t a, bool take)
{
	bool found = false;

	if (!set->any)
		return false;
	pthread_mutex_lock(&set->lock);
	for (size_t i = 0; i < set->n && !found; i++) {
		if (set->v[i] == a) {
			found = true;
			if (take)
				set->v[i] = set->v[--set->n];
		}
	}
	set->any = set->n;
	pthread_mutex_unlock(&set->lock);
	return found;
}

static struct addr_set ipc_events = {.lock = PTHREAD_MUTEX_INITIALIZER};

CUresult crc_ipc_event_note(uintptr_t event)
{
	return addr_set_add(&ipc_events, event);
}

void crc_ipc_event_forget(uintptr_t event)
{
	addr_set_find(&ipc_events, event, true);
}

static bool is_ipc_event(uintptr_t event)
{
	return addr_set_find(&ipc_events, event, false);
}

CUresult crc_hook_cuIpcOpenEventHandle(CUevent *phEvent, CUipcEventHandle handle)
{
	CUresult res = crc_fwd_cuIpcOpenEventHandle(phEvent, handle);

	if (res == CUDA_SUCCESS && crc_ipc_event_note((uintptr_t)*phEvent) != CUDA_SUCCESS) {
		crc_fwd_cuEventDestroy_v2(*phEvent);
		res = CUDA_ERROR_OUT_OF_MEMORY;
	}
	return res;
}

CUresult crc_hook_cuEventRecord(CUevent hEvent, CUstream hStream)
{
	const void *argv[] = {&hEvent, &hStream};

	if (!is_ipc_event((uintptr_t)hEvent))
		return crc_fwd_cuEventRecord(hEvent, hStream);
	return crc_fwd_call(CRC_CU_cuEventRecord, false, 2, spec_cuEventRecord, argv);
}

CUresult crc_hook_cuEventRecordWithFlags(CUevent hEvent, CUstream hStream, unsigned int flags)
{
	const void *argv[] = {&hEvent, &hStream, &flags};

	if (!is_ipc_event((uintptr_t)hEvent))
		return crc_fwd_cuEventRecordWithFlags(hEvent, hStream, flags);
	return crc_fwd_call(CRC_CU_cuEventRecordWithFlags, false, 3, spec_cuEventRecordWithFlags, argv);
}

/* A descriptor the application may pass to another process: a memfd holding len bytes of data, sealed
 * so that nobody can change them. -1 on failure. */
static int sealed_memfd(const char *name, const void *data, size_t len)
{
	int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);

	if (fd >= 0 && (pwrite(fd, data, len, 0) != (ssize_t)len ||
			fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL))) {
		close(fd);
		fd = -1;
	}
	return fd;
}

CUresult crc_hook_cuMemExportToShareableHandle(void *shareableHandle, CUmemGenericAllocationHandle handle,
					       CUmemAllocationHandleType handleType, unsigned long long flags)
{
	struct crc_shareable_wire w;
	uint64_t h = handle;
	CUresult res;
	int fd;

	if (!shareableHandle || flags)
		return CUDA_ERROR_INVALID_VALUE;
	/* Fabric handles (and Win32's) would need the driver's own bytes in this process. */
	if (handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
		return CUDA_ERROR_NOT_SUPPORTED;
	res = crc_rpc(CRC_CU_cuMemExportToShareableHandle, &h, sizeof(h), &w, sizeof(w));
	if (res != CUDA_SUCCESS)
		return res;
	fd = sealed_memfd("crcuda-shareable-handle", &w, sizeof(w));
	if (fd < 0)
		return CUDA_ERROR_OPERATING_SYSTEM;
	*(int *)shareableHandle = fd;
	return CUDA_SUCCESS;
}

CUresult crc_hook_cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle, void *osHandle,
						 CUmemAllocationHandleType shHandleType)
{
	int fd = (int)(intptr_t)osHandle;
	struct crc_shareable_wire w;
	uint64_t h;
	CUresult res;

	if (!handle)
		return CUDA_ERROR_INVALID_VALUE;
	if (shHandleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
		return CUDA_ERROR_NOT_SUPPORTED;
	/* Only a descriptor this layer made names memory. */
	if (fd < 0 || pread(fd, &w, sizeof(w), 0) != (ssize_t)sizeof(w) ||
	    memcmp(w.magic, CRC_SHAREABLE_MAGIC, sizeof(w.magic)) || !w.key)
		return CUDA_ERROR_INVALID_VALUE;
	res = crc_rpc(CRC_CU_cuMemImportFromShareableHandle, &w.key, sizeof(w.key), &h, sizeof(h));
	if (res == CUDA_SUCCESS)
		*handle = h;
	return res;
}

/* ---- memory pools shared between processes --------------------------------------------------------
 * A pool made with POSIX descriptor handles is exported as a sealed memfd naming it (this process's
 * pid and the pool) and holding its properties; the importer gets a pool of its own that only imports
 * pointers. A pointer's export data is the IPC handle of its memory (cuIpcGetMemHandle: the worker's
 * registry shares it) with its pool's name in the bytes the handle leaves free, so that an import into
 * another pool fails, as natively. The importer's pointer is IPC memory it opened: freeing it closes
 * it. */
#define POOL_SHARE_MAGIC "crcudaMP"
#define POOL_PTR_MAGIC	 "crcudaPP"
#define POOL_TAG_AT	 40 /* in the 64 bytes of export data; crcuda's IPC handle uses the first 32 */

struct pool_share_wire {
	char magic[8];
	uint64_t origin[2]; /* the exporter's pid and pool */
	CUmemPoolProps props;
};

struct pool_ptr_tag {
	char magic[8];
	uint64_t origin[2];
};
_Static_assert(POOL_TAG_AT + sizeof(struct pool_ptr_tag) <= sizeof(CUmemPoolPtrExportData), "the tag fits");

static struct addr_set pool_imports = {.lock = PTHREAD_MUTEX_INITIALIZER};

CUresult crc_hook_cuMemPoolExportToShareableHandle(void *handle_out, CUmemoryPool pool,
						   CUmemAllocationHandleType handleType,
						   unsigned long long flags)
{
	struct pool_share_wire w = {.magic = POOL_SHARE_MAGIC,
				    .origin = {(uint64_t)getpid(), (uintptr_t)pool}};
	int fd;

	if (!handle_out || flags || crc_mempool_props(pool, &w.props) != CUDA_SUCCESS)
		return CUDA_ERROR_INVALID_VALUE;
	if (handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
		return CUDA_ERROR_NOT_SUPPORTED;
	if (!(w.props.handleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR))
		return CUDA_ERROR_INVALID_VALUE;
	fd = sealed_memfd("crcuda-pool-handle", &w, sizeof(w));
	if (fd < 0)
		return CUDA_ERROR_OPERATING_SYSTEM;
	*(int *)handle_out = fd;
	return CUDA_SUCCESS;
}

CUresult crc_hook_cuMemPoolImportFromShareableHandle(CUmemoryPool *pool_out, void *handle,
						     CUmemAllocationHandleType handleType,
						     unsigned long long flags)
{
	int fd = (int)(intptr_t)handle;
	struct pool_share_wire w;

	if (!pool_out || flags)
		return CUDA_ERROR_INVALID_VALUE;
	if (handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
		return CUDA_ERROR_NOT_SUPPORTED;
	/* Only a descriptor this layer made names a pool. */
	if (fd < 0 || pread(fd, &w, sizeof(w), 0) != (ssize_t)sizeof(w) ||
	    memcmp(w.magic, POOL_SHARE_MAGIC, sizeof(w.magic)))
		return CUDA_ERROR_INVALID_VALUE;
	return crc_mempool_import(pool_out, &w.props, w.origin);
}

CUresult crc_hook_cuMemPoolExportPointer(CUmemPoolPtrExportData *out, CUdeviceptr ptr)
{
	struct pool_ptr_tag tag = {.magic = POOL_PTR_MAGIC, .origin = {(uint64_t)getpid()}};
	CUmemoryPool pool;
	CUipcMemHandle h;
	CUresult res;

	if (!out || crc_mempool_owner(ptr, &pool) != CUDA_SUCCESS)
		return CUDA_ERROR_INVALID_VALUE;
	res = crc_fwd_cuIpcGetMemHandle(&h, ptr);
	if (res != CUDA_SUCCESS)
		return res;
	tag.origin[1] = (uintptr_t)pool;
	memcpy(out->reserved, h.reserved, sizeof(out->reserved));
	memcpy(out->reserved + POOL_TAG_AT, &tag, sizeof(tag));
	return CUDA_SUCCESS;
}

CUresult crc_hook_cuMemPoolImportPointer(CUdeviceptr *ptr_out, CUmemoryPool pool,
					 CUmemPoolPtrExportData *data)
{
	uint64_t origin[2];
	struct pool_ptr_tag tag;
	CUipcMemHandle h;
	CUresult res;

	if (!ptr_out || !data || crc_mempool_origin(pool, origin) != CUDA_SUCCESS)
		return CUDA_ERROR_INVALID_VALUE;
	memcpy(&tag, data->reserved + POOL_TAG_AT, sizeof(tag));
	/* Export data of another pool's pointer. */
	if (memcmp(tag.magic, POOL_PTR_MAGIC, sizeof(tag.magic)) || tag.origin[0] != origin[0] ||
	    tag.origin[1] != origin[1])
		return CUDA_ERROR_INVALID_VALUE;
	memcpy(h.reserved, data->reserved, sizeof(h.reserved));
	memset(h.reserved + POOL_TAG_AT, 0, sizeof(tag));
	res = crc_fwd_cuIpcOpenMemHandle_v2(ptr_out, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
	if (res == CUDA_SUCCESS && (res = addr_set_add(&pool_imports, *ptr_out)) != CUDA_SUCCESS)
		crc_fwd_cuIpcCloseMemHandle(*ptr_out);
	return res;
}

bool crc_pool_import_free(CUdeviceptr ptr, CUstream stream, bool async, CUresult *res)
{
	if (!addr_set_find(&pool_imports, ptr, true))
		return false;
	/* Stream-ordered: the work queued before the free may still read it. */
	*res = async ? crc_fwd_cuStreamSynchronize(stream) : CUDA_SUCCESS;
	if (*res == CUDA_SUCCESS)
		*res = crc_fwd_cuIpcCloseMemHandle(ptr);
	return true;
}
