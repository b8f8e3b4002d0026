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

static pthread_mutex_t ipc_events_lock = PTHREAD_MUTEX_INITIALIZER;
static uintptr_t *ipc_events;
static size_t n_ipc_events, cap_ipc_events;
static _Atomic size_t any_ipc_events; /* n_ipc_events, read without the lock on every record */

CUresult crc_ipc_event_note(uintptr_t event)
{
	CUresult res = CUDA_SUCCESS;

	pthread_mutex_lock(&ipc_events_lock);
	if (n_ipc_events == cap_ipc_events) {
		size_t cap = cap_ipc_events ? 2 * cap_ipc_events : 16;
		uintptr_t *p = realloc(ipc_events, cap * sizeof(*p));

		if (p) {
			ipc_events = p;
			cap_ipc_events = cap;
		} else {
			res = CUDA_ERROR_OUT_OF_MEMORY;
		}
	}
	if (res == CUDA_SUCCESS)
		ipc_events[n_ipc_events++] = event;
	any_ipc_events = n_ipc_events;
	pthread_mutex_unlock(&ipc_events_lock);
	return res;
}

void crc_ipc_event_forget(uintptr_t event)
{
	if (!any_ipc_events)
		return;
	pthread_mutex_lock(&ipc_events_lock);
	for (size_t i = 0; i < n_ipc_events; i++) {
		if (ipc_events[i] == event) {
			ipc_events[i] = ipc_events[--n_ipc_events];
			break;
		}
	}
	any_ipc_events = n_ipc_events;
	pthread_mutex_unlock(&ipc_events_lock);
}

static bool is_ipc_event(uintptr_t event)
{
	bool found = false;

	if (!any_ipc_events)
		return false;
	pthread_mutex_lock(&ipc_events_lock);
	for (size_t i = 0; i < n_ipc_events && !found; i++)
		found = ipc_events[i] == event;
	pthread_mutex_unlock(&ipc_events_lock);
	return found;
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
	fd = memfd_create("crcuda-shareable-handle", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return CUDA_ERROR_OPERATING_SYSTEM;
	if (pwrite(fd, &w, sizeof(w), 0) != (ssize_t)sizeof(w) ||
	    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL)) {
		close(fd);
		return CUDA_ERROR_OPERATING_SYSTEM;
	}
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
