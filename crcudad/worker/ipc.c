/* CUDA IPC between sessions. Each session runs in a worker process of its own, so the driver's own
 * IPC could connect two workers, but crcuda's memory is VMM (cuMemCreate at fixed addresses), which
 * cuIpcGetMemHandle does not take. So the application's memory handle names an export of the front's
 * registry (link.h): cuIpcGetMemHandle exports the allocation as a POSIX descriptor
 * (cuMemExportToShareableHandle) and gives it to the front under a random key; cuIpcOpenMemHandle in
 * another session's worker gets the descriptor by key, imports it and maps it in that session's own VA
 * range, where the application's pointer is a device pointer like any other. Event handles name a key
 * too, under which the front keeps the driver's handle of the event. VMM memory's
 * shareable handles (POSIX descriptors) go the same way: the application's descriptor is a sealed
 * memfd that names the export's key (libcrcuda/hooks_ipc.c), imported as a handle of the backend's.
 * An export lives while the exporter holds the memory (cuMemFree, the last cuMemRelease): an importer
 * that comes later gets CUDA_ERROR_INVALID_VALUE, where natively a descriptor kept open would still
 * import it.
 *
 * A session that has another session's IPC memory open (cuIpcOpenMemHandle) is checkpointed without
 * it (the memory is the exporter's) and its restore opens the export again at the same address
 * (crc_ipc_describe, crc_ipc_restore), so the restored program shares the exporter's memory as it is
 * then, as if it had only paused; a restore where the exporter is gone fails, saying so. An exporter
 * (cuIpcGetMemHandle, a shareable handle, an interprocess event) is checkpointed once no session
 * outside its checkpoint's group holds one of its exports (the front counts GETs until CLOSE or the
 * holder's end): its exports are frozen meanwhile (another session's open waits for the checkpoint's
 * end), and a restore exports them again under the same keys, so handles given out before name the
 * restored memory and events. The group is the sessions of one CRIU dump (a process tree): VMM memory
 * imported from a shareable handle and events opened from a session of the group are described
 * (crc_ipc_describe_imports) and imported, mapped and opened again once the peer's restore exported
 * them (restore waits for it); from a session outside the group they refuse the checkpoint, saying why. */
#define LOG_PREFIX "crcudad: "
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <unistd.h>

#include "crcuda/errno.h"
#include "crcuda/log.h"
#include "link.h"
#include "worker.h"

/* After cuda.h: define and call entry points by their ABI names. */
#include "crcuda/cuda_api_undef.h"

/* The application's CUipcMemHandle. */
struct ipc_mem_wire {
	char magic[8];
	uint64_t key;
	uint64_t size;
	uint64_t session_id; /* the exporter's, for messages */
};
static const char ipc_mem_magic[8] = "crcudaIM";
_Static_assert(sizeof(struct ipc_mem_wire) <= CU_IPC_HANDLE_SIZE, "an IPC handle holds it");

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;

/* One request to the front's registry and its reply (a descriptor: *fd_out, else -1). */
static int registry_call(struct crc_ipc_msg *m, int fd_in, int *fd_out)
{
	int fds[1], nfds = 0, rc;

	if (fd_out)
		*fd_out = -1;
	pthread_mutex_lock(&registry_lock);
	rc = crc_sock_send_fds(CRC_LINK_IPC_FD, m, sizeof(*m), &fd_in, fd_in >= 0);
	if (!rc)
		rc = crc_sock_recv_fds(CRC_LINK_IPC_FD, m, sizeof(*m), fds, 1, &nfds);
	pthread_mutex_unlock(&registry_lock);
	if (rc) {
		pr_warn("the front's CUDA IPC registry does not answer: %s", crc_strerror(rc));
		return rc;
	}
	if (nfds && fd_out && !m->status)
		*fd_out = fds[0];
	else if (nfds)
		close(fds[0]);
	return m->status;
}

CUmemAllocationHandleType crc_ipc_handle_types(CUdevice dev, bool failed)
{
	static int posix_fd[CRC_MAX_DEVICES] = {0}; /* 0 unknown, 1 yes, -1 no */
	int v = 0;

	if (dev < 0 || dev >= CRC_MAX_DEVICES)
		return CU_MEM_HANDLE_TYPE_NONE;
	if (failed)
		posix_fd[dev] = -1;
	if (!posix_fd[dev])
		posix_fd[dev] = CALL(cuDeviceGetAttribute, &v,
				     CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED,
				     dev) == CUDA_SUCCESS &&
					v
				    ? 1
				    : -1;
	return posix_fd[dev] > 0 ? CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR : CU_MEM_HANDLE_TYPE_NONE;
}

void crc_ipc_unexport(uint64_t key)
{
	struct crc_ipc_msg m = {.op = CRC_IPC_DROP, .key = key};

	registry_call(&m, -1, NULL);
}

/* This session lets go of what a GET of key gave it. */
static void release_hold(uint64_t key)
{
	struct crc_ipc_msg m = {.op = CRC_IPC_CLOSE, .key = key};

	registry_call(&m, -1, NULL);
}

/* The allocation (cuMemAlloc) holding ptr, or NULL. */
static struct crc_alloc *alloc_holding(struct crc_session *s, enum crc_alloc_kind kind, uint64_t ptr)
{
	for (struct crc_alloc *a = s->allocs; a; a = a->next)
		if (a->kind == kind && ptr >= a->ptr && ptr - a->ptr < a->size)
			return a;
	return NULL;
}

/* Exports h (size bytes) under key. */
static CUresult export_as(struct crc_session *s, CUmemGenericAllocationHandle h, uint64_t size, uint64_t key)
{
	struct crc_ipc_msg m = {.op = CRC_IPC_PUT, .key = key, .size = size, .session_id = s->id};
	int fd = -1, rc;
	CUresult res =
	    CALL(cuMemExportToShareableHandle, &fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);

	if (res != CUDA_SUCCESS)
		return res;
	rc = registry_call(&m, fd, NULL);
	close(fd);
	if (rc == CRC_EEXIST)
		return CUDA_ERROR_ALREADY_MAPPED;
	if (rc)
		return rc == CRC_ENOMEM ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_OPERATING_SYSTEM;
	return CUDA_SUCCESS;
}

CUresult crc_ipc_export(struct crc_session *s, CUmemGenericAllocationHandle h, uint64_t size, uint64_t *key)
{
	uint64_t k = 0;
	CUresult res;

	if (*key)
		return CUDA_SUCCESS;
	do {
		if (getrandom(&k, sizeof(k), 0) != (ssize_t)sizeof(k))
			return CUDA_ERROR_OPERATING_SYSTEM;
	} while (!k);
	res = export_as(s, h, size, k);
	if (res == CUDA_SUCCESS)
		*key = k;
	return res;
}

CUresult crc_ipc_import(struct crc_session *s, uint64_t key, CUmemGenericAllocationHandle *h, uint64_t *size,
			uint64_t *session_id)
{
	struct crc_ipc_msg m = {.op = CRC_IPC_GET, .key = key, .requester = s->id};
	CUresult res;
	int fd, rc;

	rc = registry_call(&m, -1, &fd);
	if (rc)
		/* Freed, or its exporter is gone: natively, an invalid handle. */
		return rc == CRC_ENOTFOUND ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_OPERATING_SYSTEM;
	res = CALL(cuMemImportFromShareableHandle, h, (void *)(intptr_t)fd,
		   CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
	close(fd);
	*size = m.size;
	*session_id = m.session_id;
	return res;
}

CUresult crc_ovr_cuIpcGetMemHandle(struct crc_session *s, void *const *argv)
{
	CUipcMemHandle *out = argv[0];
	uint64_t ptr = *(CUdeviceptr *)argv[1];
	struct crc_alloc *a = alloc_holding(s, CRC_ALLOC_MEM, ptr);
	struct ipc_mem_wire w = {0};
	CUresult res;

	if (!out)
		return CUDA_ERROR_INVALID_VALUE;
	/* Only cuMemAlloc memory, as natively (VMM memory has shareable handles instead). */
	if (!a)
		return CUDA_ERROR_INVALID_VALUE;
	res = crc_ipc_export(s, a->handle, a->size, &a->ipc_key);
	if (res != CUDA_SUCCESS) {
		pr_warn("session %llu: cannot export the memory at 0x%llx as a descriptor (%d)",
			(unsigned long long)s->id, (unsigned long long)a->ptr, (int)res);
		return res == CUDA_ERROR_NOT_PERMITTED ? CUDA_ERROR_NOT_SUPPORTED : res;
	}
	memcpy(w.magic, ipc_mem_magic, sizeof(w.magic));
	w.key = a->ipc_key;
	w.size = a->size;
	w.session_id = s->id;
	memset(out, 0, sizeof(*out));
	memcpy(out->reserved, &w, sizeof(w));
	return CUDA_SUCCESS;
}

CUresult crc_ovr_cuIpcOpenMemHandle_v2(struct crc_session *s, void *const *argv)
{
	CUdeviceptr *pdptr = argv[0];
	const CUipcMemHandle *handle = argv[1];
	unsigned flags = *(unsigned *)argv[2];
	CUmemAccessDesc access = {.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
				  .location.type = CU_MEM_LOCATION_TYPE_DEVICE};
	CUmemGenericAllocationHandle h;
	struct ipc_mem_wire w;
	struct crc_alloc *a;
	uint64_t ptr, size, exporter;
	CUdevice dev;
	CUresult res;

	memcpy(&w, handle->reserved, sizeof(w));
	if (!pdptr || (flags & ~(unsigned)CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) ||
	    memcmp(w.magic, ipc_mem_magic, sizeof(w.magic)) || !w.key)
		return CUDA_ERROR_INVALID_VALUE;
	res = crc_be.cuCtxGetDevice_fn(&dev);
	if (res != CUDA_SUCCESS)
		return res;
	for (a = s->allocs; a; a = a->next) {
		/* Its own memory: the driver refuses to open it in the process that exported it. */
		if (a->kind == CRC_ALLOC_MEM && a->ipc_key == w.key)
			return CUDA_ERROR_INVALID_CONTEXT;
		/* Opened already: the same pointer, one more reference. */
		if (a->kind == CRC_ALLOC_IPC && a->ipc_key == w.key) {
			a->refs++;
			*pdptr = a->ptr;
			return CUDA_SUCCESS;
		}
	}
	res = crc_ipc_import(s, w.key, &h, &size, &exporter);
	/* A handle of ours whose memory is gone (freed, or its exporter ended): what the driver answers
	 * for the handle of freed memory (measured on the H200: tests/gpu/ipc.sh). */
	if (res == CUDA_ERROR_INVALID_VALUE)
		return CUDA_ERROR_NOT_PERMITTED;
	if (res != CUDA_SUCCESS)
		return res;
	if (crc_va_take(s, size, 0, 0, &ptr)) {
		CALL(cuMemRelease, h);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	access.location.id = dev;
	res = CALL(cuMemMap, ptr, size, 0, h, 0);
	if (res == CUDA_SUCCESS) {
		res = CALL(cuMemSetAccess, ptr, size, &access, 1);
		if (res != CUDA_SUCCESS)
			CALL(cuMemUnmap, ptr, size);
	}
	if (res == CUDA_SUCCESS && !(a = crc_alloc_add(s, CRC_ALLOC_IPC, ptr, size))) {
		CALL(cuMemUnmap, ptr, size);
		res = CUDA_ERROR_OUT_OF_MEMORY;
	}
	if (res != CUDA_SUCCESS) {
		CALL(cuMemRelease, h);
		return res;
	}
	a->handle = h;
	a->req = size;
	a->refs = 1;
	a->ipc_key = w.key;
	a->ipc_dev = dev;
	a->vhandle = s->cur_ctx;
	crc_alloc_account(s, (int64_t)size);
	pr_debug("session %llu: opened IPC memory of session %llu at 0x%llx (%llu bytes)",
		 (unsigned long long)s->id, (unsigned long long)exporter, (unsigned long long)ptr,
		 (unsigned long long)size);
	*pdptr = ptr;
	return CUDA_SUCCESS;
}

CUresult crc_ovr_cuIpcOpenMemHandle(struct crc_session *s, void *const *argv)
{
	return crc_ovr_cuIpcOpenMemHandle_v2(s, argv);
}

void crc_ipc_unmap(struct crc_session *s, struct crc_alloc *a)
{
	/* The exporter may be checkpointed once no other session holds its memory. */
	release_hold(a->ipc_key);
	CALL(cuMemUnmap, a->ptr, a->size);
	CALL(cuMemRelease, a->handle);
	crc_alloc_account(s, -(int64_t)a->size);
	crc_alloc_remove(s, a);
}

CUresult crc_ovr_cuIpcCloseMemHandle(struct crc_session *s, void *const *argv)
{
	uint64_t ptr = *(CUdeviceptr *)argv[0];

	for (struct crc_alloc *a = s->allocs; a; a = a->next) {
		if (a->kind != CRC_ALLOC_IPC || a->ptr != ptr)
			continue;
		if (--a->refs > 0)
			return CUDA_SUCCESS;
		/* Work of this session may still read it. */
		CALL(cuCtxSynchronize);
		crc_ipc_unmap(s, a);
		return CUDA_SUCCESS;
	}
	return CUDA_ERROR_INVALID_VALUE;
}

/* The application's CUipcEventHandle: the driver's handle of the exporter's event is kept in the
 * front's registry under key (a memfd holding its bytes), so that a restored exporter can give the
 * same key its new event's handle, and a restored importer open that. */
struct ipc_event_wire {
	char magic[8];
	uint64_t key;
	uint64_t session_id; /* the exporter's, for messages */
};
static const char ipc_event_magic[8] = "crcudaIE";
_Static_assert(sizeof(struct ipc_event_wire) <= CU_IPC_HANDLE_SIZE, "an IPC handle holds it");

static struct crc_ipc_event *event_in(struct crc_ipc_event *list, unsigned n, void *ev)
{
	for (unsigned i = 0; i < n; i++)
		if (list[i].ev == ev)
			return &list[i];
	return NULL;
}

static CUresult event_add(struct crc_ipc_event **list, unsigned *n, void *ev, uint64_t key, uint64_t exporter)
{
	struct crc_ipc_event *p = realloc(*list, (*n + 1) * sizeof(*p));

	if (!p)
		return CUDA_ERROR_OUT_OF_MEMORY;
	p[(*n)++] = (struct crc_ipc_event){ev, key, exporter};
	*list = p;
	return CUDA_SUCCESS;
}

static void event_remove(struct crc_ipc_event *list, unsigned *n, struct crc_ipc_event *e)
{
	*e = list[--*n];
}

/* Registers the driver's handle of ev under key. */
static CUresult export_event(struct crc_session *s, void *ev, uint64_t key)
{
	struct crc_ipc_msg m = {
	    .op = CRC_IPC_PUT, .key = key, .size = CU_IPC_HANDLE_SIZE, .session_id = s->id};
	CUipcEventHandle h;
	CUresult res = CALL(cuIpcGetEventHandle, &h, (CUevent)ev);
	int fd, rc;

	if (res != CUDA_SUCCESS)
		return res;
	fd = memfd_create("crcuda-ipc-event", MFD_CLOEXEC);
	if (fd < 0 || write(fd, h.reserved, sizeof(h.reserved)) != (ssize_t)sizeof(h.reserved)) {
		if (fd >= 0)
			close(fd);
		return CUDA_ERROR_OPERATING_SYSTEM;
	}
	rc = registry_call(&m, fd, NULL);
	close(fd);
	if (rc == CRC_EEXIST)
		return CUDA_ERROR_ALREADY_MAPPED;
	return rc ? CUDA_ERROR_OPERATING_SYSTEM : CUDA_SUCCESS;
}

CUresult crc_ovr_cuIpcGetEventHandle(struct crc_session *s, void *const *argv)
{
	CUipcEventHandle *out = argv[0];
	void *ev = *(CUevent *)argv[1];
	struct crc_ipc_event *e = event_in(s->ipc_events_out, s->n_ipc_events_out, ev);
	struct ipc_event_wire w = {0};
	uint64_t key = 0;
	CUresult res;

	if (!out)
		return CUDA_ERROR_INVALID_VALUE;
	if (!e) {
		do {
			if (getrandom(&key, sizeof(key), 0) != (ssize_t)sizeof(key))
				return CUDA_ERROR_OPERATING_SYSTEM;
		} while (!key);
		/* The driver's own checks (an event made without CU_EVENT_INTERPROCESS) come first. */
		res = export_event(s, ev, key);
		if (res == CUDA_SUCCESS)
			res = event_add(&s->ipc_events_out, &s->n_ipc_events_out, ev, key, s->id);
		if (res != CUDA_SUCCESS)
			return res;
	} else {
		key = e->key;
	}
	memcpy(w.magic, ipc_event_magic, sizeof(w.magic));
	w.key = key;
	w.session_id = s->id;
	memset(out, 0, sizeof(*out));
	memcpy(out->reserved, &w, sizeof(w));
	return CUDA_SUCCESS;
}

/* Opens the event exported under key (its handle's bytes from the registry), waiting up to wait_s for
 * it to appear. */
static CUresult open_event(struct crc_session *s, uint64_t key, double wait_s, void **ev, uint64_t *exporter)
{
	struct crc_ipc_msg m;
	CUipcEventHandle h;
	double until = crc_now_s() + wait_s;
	int fd = -1, rc;
	CUresult res;

	for (;;) {
		m = (struct crc_ipc_msg){.op = CRC_IPC_GET, .key = key, .requester = s->id};
		rc = registry_call(&m, -1, &fd);
		if (rc != CRC_ENOTFOUND || crc_now_s() >= until)
			break;
		usleep(20000);
	}
	if (rc)
		/* Its exporter is gone: natively, the handle of an event that no longer exists. */
		return rc == CRC_ENOTFOUND ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_OPERATING_SYSTEM;
	rc = pread(fd, h.reserved, sizeof(h.reserved), 0) == (ssize_t)sizeof(h.reserved) ? 0 : -1;
	close(fd);
	if (rc) {
		release_hold(key);
		return CUDA_ERROR_OPERATING_SYSTEM;
	}
	res = CALL(cuIpcOpenEventHandle, (CUevent *)ev, h);
	if (res != CUDA_SUCCESS)
		release_hold(key);
	*exporter = m.session_id;
	return res;
}

CUresult crc_ovr_cuIpcOpenEventHandle(struct crc_session *s, void *const *argv)
{
	CUevent *out = argv[0];
	const CUipcEventHandle *handle = argv[1];
	struct ipc_event_wire w;
	uint64_t exporter;
	CUresult res;

	memcpy(&w, handle->reserved, sizeof(w));
	if (!out || memcmp(w.magic, ipc_event_magic, sizeof(w.magic)) || !w.key)
		return CUDA_ERROR_INVALID_VALUE;
	res = open_event(s, w.key, 0, (void **)out, &exporter);
	if (res != CUDA_SUCCESS)
		return res;
	res = event_add(&s->ipc_events_in, &s->n_ipc_events_in, *out, w.key, exporter);
	if (res != CUDA_SUCCESS) {
		CALL(cuEventDestroy_v2, *out);
		release_hold(w.key);
		return res;
	}
	/* Not journaled: a replay could not open it again (a restore of the tree does, by key). */
	s->jdrop = true;
	return CUDA_SUCCESS;
}

static CUresult destroy_event(struct crc_session *s, void *ev)
{
	struct crc_ipc_event *e;
	CUresult res = CALL(cuEventDestroy_v2, (CUevent)ev);

	if (res != CUDA_SUCCESS)
		return res;
	if ((e = event_in(s->ipc_events_in, s->n_ipc_events_in, ev))) {
		s->jdrop = true; /* its open was not journaled */
		release_hold(e->key);
		event_remove(s->ipc_events_in, &s->n_ipc_events_in, e);
	} else if ((e = event_in(s->ipc_events_out, s->n_ipc_events_out, ev))) {
		crc_ipc_unexport(e->key);
		event_remove(s->ipc_events_out, &s->n_ipc_events_out, e);
	}
	return res;
}

CUresult crc_ovr_cuEventDestroy(struct crc_session *s, void *const *argv)
{
	return destroy_event(s, *(CUevent *)argv[0]);
}

CUresult crc_ovr_cuEventDestroy_v2(struct crc_session *s, void *const *argv)
{
	return destroy_event(s, *(CUevent *)argv[0]);
}

static bool in_ckpt_group(const struct crc_session *s, uint64_t session_id)
{
	for (unsigned i = 0; i < s->ckpt_ngroup; i++)
		if (s->ckpt_group[i] == session_id)
			return true;
	return false;
}

int crc_ipc_ckpt_check(struct crc_session *s, char *why, size_t len)
{
	bool exports = false;

	for (struct crc_alloc *a = s->allocs; a; a = a->next) {
		/* Another process's memory: restored with it when it is checkpointed too (a tree). */
		if ((a->kind == CRC_ALLOC_HANDLE || a->kind == CRC_ALLOC_MAP) && a->ipc_imported &&
		    !in_ckpt_group(s, a->ipc_exporter)) {
			snprintf(
			    why, len,
			    "checkpoint of a session that imports shareable memory from a live exporter "
			    "that is not checkpointed with it (session %llu holds session %llu's memory, "
			    "cuMemImportFromShareableHandle, %s): checkpoint both processes as one tree "
			    "(their parent); the program runs on",
			    (unsigned long long)s->id, (unsigned long long)a->ipc_exporter,
			    a->kind == CRC_ALLOC_MAP ? "mapped" : "not released");
			return -1;
		}
		exports |= (a->kind == CRC_ALLOC_MEM || a->kind == CRC_ALLOC_HANDLE) && a->ipc_key &&
			   !a->ipc_imported;
	}
	for (unsigned i = 0; i < s->n_ipc_events_in; i++) {
		if (in_ckpt_group(s, s->ipc_events_in[i].exporter))
			continue;
		snprintf(why, len,
			 "checkpoint of a session that has another process's interprocess event open "
			 "(session %llu has session %llu's, cuIpcOpenEventHandle) that is not checkpointed "
			 "with it: checkpoint both processes as one tree (their parent); the program runs on",
			 (unsigned long long)s->id, (unsigned long long)s->ipc_events_in[i].exporter);
		return -1;
	}
	exports |= s->n_ipc_events_out > 0;
	/* Its exports, while no other session has one open (but those checkpointed with it, whose restore
	 * opens them again): nobody may open one until the checkpoint ends (crc_ipc_thaw), or a restore
	 * would give the exporter new memory that they do not share. */
	if (exports && !s->ipc_frozen) {
		struct crc_ipc_msg m = {.op = CRC_IPC_FREEZE, .ngroup = s->ckpt_ngroup};
		int rc;

		_Static_assert(sizeof(s->ckpt_group) == sizeof(m.group), "a group fits the registry's");
		memcpy(m.group, s->ckpt_group, sizeof(m.group));
		rc = registry_call(&m, -1, NULL);
		if (rc == CRC_EBUSY) {
			struct crc_alloc *a;

			for (a = s->allocs; a && !(a->ipc_key == m.key && !a->ipc_imported); a = a->next)
				;
			if (!a)
				snprintf(
				    why, len,
				    "checkpoint of a session that exported an interprocess event a process "
				    "not checkpointed with it has open (session %llu, cuIpcGetEventHandle): "
				    "checkpoint both as one tree (their parent); the program runs on",
				    (unsigned long long)s->id);
			else if (a->kind == CRC_ALLOC_HANDLE)
				snprintf(why, len,
					 "checkpoint of a session that exported shareable memory a process "
					 "not checkpointed with it has imported (session %llu, "
					 "cuMemExportToShareableHandle): checkpoint both as one tree (their "
					 "parent); the program runs on",
					 (unsigned long long)s->id);
			else
				snprintf(
				    why, len,
				    "checkpoint of a session that exported IPC memory another process has "
				    "open (session %llu, cuIpcGetMemHandle of 0x%llx; natively that "
				    "process would keep memory a restore replaces): the program runs on",
				    (unsigned long long)s->id, a ? (unsigned long long)a->ptr : 0ULL);
			return -1;
		}
		if (rc) {
			snprintf(why, len, "the daemon's CUDA IPC registry does not answer: %s",
				 crc_strerror(rc));
			return -1;
		}
		s->ipc_frozen = true;
	}
	return 0;
}

void crc_ipc_thaw(struct crc_session *s)
{
	struct crc_ipc_msg m = {.op = CRC_IPC_THAW};

	if (!s->ipc_frozen)
		return;
	registry_call(&m, -1, NULL);
	s->ipc_frozen = false;
}

char *crc_ipc_describe_exports(struct crc_session *s)
{
	char *out = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&out, &len);

	if (!f)
		return NULL;
	for (struct crc_alloc *a = s->allocs; a; a = a->next) {
		if (a->kind == CRC_ALLOC_MEM && a->ipc_key)
			fprintf(f, "%llx %llx\n", (unsigned long long)a->ptr, (unsigned long long)a->ipc_key);
		/* A shareable handle's: by the handle (its virtual handle is the same after a replay). */
		if (a->kind == CRC_ALLOC_HANDLE && a->ipc_key && !a->ipc_imported)
			fprintf(f, "h %llx %llx\n", (unsigned long long)a->vhandle,
				(unsigned long long)a->ipc_key);
	}
	/* An interprocess event's: by the event (created again by the replay). */
	for (unsigned i = 0; i < s->n_ipc_events_out; i++)
		fprintf(f, "e %llx %llx\n",
			(unsigned long long)crc_find_handle(s, CRC_HT_EVENT, s->ipc_events_out[i].ev),
			(unsigned long long)s->ipc_events_out[i].key);
	if (fclose(f)) {
		free(out);
		return NULL;
	}
	return out;
}

void crc_ipc_restore_exports(struct crc_session *s, const char *desc)
{
	for (const char *r = desc; r && *r;) {
		unsigned long long addr, key;
		struct crc_alloc *a;
		int used = 0;
		CUresult res;
		bool handle = r[0] == 'h' && r[1] == ' ', event = r[0] == 'e' && r[1] == ' ';

		if (handle || event)
			r += 2;
		if (sscanf(r, "%llx %llx%n", &addr, &key, &used) < 2 || !used || r[used] != '\n') {
			pr_warn("session %llu: the checkpoint's list of exports is unreadable: not exported "
				"again",
				(unsigned long long)s->id);
			return;
		}
		r += used + 1;
		if (event) {
			union crc_slot ev = {0};
			uint32_t idx = crc_vhandle_index(addr);

			if (crc_vhandle_tag(addr) == CRC_HT_EVENT && idx && idx <= s->tables[CRC_HT_EVENT].n)
				ev = s->tables[CRC_HT_EVENT].real[idx];
			res = ev.ptr ? export_event(s, ev.ptr, key) : CUDA_ERROR_INVALID_HANDLE;
			for (double until = crc_now_s() + 5;
			     res == CUDA_ERROR_ALREADY_MAPPED && crc_now_s() < until;) {
				usleep(20000);
				res = export_event(s, ev.ptr, key);
			}
			if (res == CUDA_SUCCESS)
				res = event_add(&s->ipc_events_out, &s->n_ipc_events_out, ev.ptr, key, s->id);
			if (res != CUDA_SUCCESS)
				pr_warn(
				    "session %llu: the interprocess event 0x%llx is not exported again under "
				    "its handle (CUDA error %d)",
				    (unsigned long long)s->id, addr, (int)res);
			continue;
		}
		for (a = s->allocs; a && !(handle ? a->kind == CRC_ALLOC_HANDLE && a->vhandle == addr
						  : a->kind == CRC_ALLOC_MEM && a->ptr == addr);
		     a = a->next)
			;
		res = a ? export_as(s, a->handle, a->size, key) : CUDA_ERROR_INVALID_VALUE;
		/* The checkpointed process is gone (this one has its pid), but its worker may still be
		 * ending, its exports with it: wait for that a while (seen on an H200: tens of ms). */
		for (double until = crc_now_s() + 5;
		     res == CUDA_ERROR_ALREADY_MAPPED && crc_now_s() < until;) {
			usleep(20000);
			res = export_as(s, a->handle, a->size, key);
		}
		if (res == CUDA_SUCCESS)
			a->ipc_key = key;
		else
			/* Another copy of the session exports it (its original still runs on another
			 * host's daemon, or a restore beside this one): handles of it name that one's
			 * memory, not this one's. */
			pr_warn("session %llu: the memory at 0x%llx is not exported again under its IPC "
				"handle (%s)",
				(unsigned long long)s->id, addr,
				res == CUDA_ERROR_ALREADY_MAPPED ? "another copy of the session exports it"
								 : "the export failed");
	}
}

void crc_ipc_free(struct crc_session *s)
{
	free(s->ipc_events_out);
	free(s->ipc_events_in);
	s->ipc_events_out = s->ipc_events_in = NULL;
	s->n_ipc_events_out = s->n_ipc_events_in = 0;
}

/* "ADDR SIZE KEY REFS DEV CTX\n" per opened IPC memory (DEV the client's ordinal): NULL on memory
 * exhaustion. */
char *crc_ipc_describe(struct crc_session *s)
{
	char *out = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&out, &len);

	if (!f)
		return NULL;
	for (struct crc_alloc *a = s->allocs; a; a = a->next)
		if (a->kind == CRC_ALLOC_IPC)
			fprintf(f, "%llx %llx %llx %d %d %llx\n", (unsigned long long)a->ptr,
				(unsigned long long)a->size, (unsigned long long)a->ipc_key, a->refs,
				crc_dev_client(s, a->ipc_dev), (unsigned long long)a->vhandle);
	if (fclose(f)) {
		free(out);
		return NULL;
	}
	return out;
}

/* Imports export key, waiting up to wait_s for it to appear (its exporter being restored beside
 * this session: a process tree). */
static CUresult import_waiting(struct crc_session *s, uint64_t key, double wait_s,
			       CUmemGenericAllocationHandle *h, uint64_t *size, uint64_t *exporter)
{
	double until = crc_now_s() + wait_s;
	CUresult res;

	while ((res = crc_ipc_import(s, key, h, size, exporter)) == CUDA_ERROR_INVALID_VALUE &&
	       crc_now_s() < until)
		usleep(20000);
	return res;
}

/* Opens export key again at addr (size bytes), accessible from backend device dev. */
static CUresult reopen(struct crc_session *s, uint64_t addr, uint64_t size, uint64_t key, CUdevice dev,
		       double wait_s, CUmemGenericAllocationHandle *h)
{
	CUmemAccessDesc access = {.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
				  .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev}};
	uint64_t got_size, exporter, at;
	CUresult res = import_waiting(s, key, wait_s, h, &got_size, &exporter);

	if (res != CUDA_SUCCESS)
		return res;
	if (got_size != size || crc_va_take(s, size, 0, addr, &at) || at != addr) {
		CALL(cuMemRelease, *h);
		return CUDA_ERROR_INVALID_VALUE;
	}
	res = CALL(cuMemMap, addr, size, 0, *h, 0);
	if (res == CUDA_SUCCESS) {
		res = CALL(cuMemSetAccess, addr, size, &access, 1);
		if (res != CUDA_SUCCESS)
			CALL(cuMemUnmap, addr, size);
	}
	if (res != CUDA_SUCCESS)
		CALL(cuMemRelease, *h);
	return res;
}

int crc_ipc_restore(struct crc_session *s, const char *desc, double wait_s, char *why, size_t len)
{
	CUcontext prev;
	int rc = 0;

	if (!desc || !*desc)
		return 0;
	if (crc_session_some_ctx(s, &prev) != CUDA_SUCCESS) {
		snprintf(why, len, "no context to open the session's IPC memory in");
		return CRC_ECUDA;
	}
	for (const char *r = desc; *r && !rc;) {
		unsigned long long addr, size, key, ctx;
		int refs, dev, used = 0;
		CUmemGenericAllocationHandle h;
		struct crc_alloc *a;
		CUresult res;

		if (sscanf(r, "%llx %llx %llx %d %d %llx%n", &addr, &size, &key, &refs, &dev, &ctx, &used) <
			6 ||
		    !used || r[used] != '\n' || refs < 1) {
			snprintf(why, len, "the checkpoint's list of opened IPC memory is unreadable");
			rc = CRC_ECORRUPT;
			break;
		}
		r += used + 1;
		res = reopen(s, addr, size, key, crc_dev_backend(s, dev), wait_s, &h);
		if (res != CUDA_SUCCESS) {
			snprintf(why, len,
				 "the session had another process's IPC memory open at 0x%llx "
				 "(cuIpcOpenMemHandle), "
				 "which %s (CUDA error %d)",
				 addr,
				 res == CUDA_ERROR_INVALID_VALUE ? "its exporter no longer exports: restore "
								   "the exporter first, or keep it running"
								 : "could not be opened again",
				 (int)res);
			rc = CRC_ENOTFOUND;
			break;
		}
		a = crc_alloc_add(s, CRC_ALLOC_IPC, addr, size);
		if (!a) {
			CALL(cuMemUnmap, addr, size);
			CALL(cuMemRelease, h);
			snprintf(why, len, "out of memory");
			rc = CRC_ENOMEM;
			break;
		}
		a->handle = h;
		a->req = size;
		a->refs = refs;
		a->ipc_key = key;
		a->ipc_dev = crc_dev_backend(s, dev);
		a->vhandle = ctx;
		crc_alloc_account(s, (int64_t)size);
	}
	crc_session_ctx_back(prev);
	return rc;
}

char *crc_ipc_describe_imports(struct crc_session *s)
{
	char *out = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&out, &len);

	if (!f)
		return NULL;
	for (unsigned i = 0; i < s->n_ipc_events_in; i++)
		fprintf(f, "E %llx %llx\n",
			(unsigned long long)crc_find_handle(s, CRC_HT_EVENT, s->ipc_events_in[i].ev),
			(unsigned long long)s->ipc_events_in[i].key);
	for (struct crc_alloc *a = s->allocs; a; a = a->next) {
		if (!a->ipc_imported)
			continue;
		if (a->kind == CRC_ALLOC_HANDLE) {
			fprintf(f, "H %llx %llx %d\n", (unsigned long long)a->vhandle,
				(unsigned long long)a->ipc_key, a->refs);
		} else if (a->kind == CRC_ALLOC_MAP) {
			unsigned long long access = 0;

			for (int d = 0; d < CRC_MAX_DEVICES; d++)
				access |= (unsigned long long)(a->access[d] & 0xf) << (4 * d);
			fprintf(f, "M %llx %llx %llx %llx %llx\n", (unsigned long long)a->ptr,
				(unsigned long long)a->size, (unsigned long long)a->map_offset,
				(unsigned long long)a->ipc_key, access);
		}
	}
	if (fclose(f)) {
		free(out);
		return NULL;
	}
	return out;
}

/* The imported handle of key in the session, or NULL. */
static struct crc_alloc *imported_handle(struct crc_session *s, uint64_t key)
{
	for (struct crc_alloc *a = s->allocs; a; a = a->next)
		if (a->kind == CRC_ALLOC_HANDLE && a->ipc_imported && a->ipc_key == key)
			return a;
	return NULL;
}

/* One "H" line: the export imported under the application's virtual handle, refs times. */
static CUresult restore_import_handle(struct crc_session *s, uint64_t vhandle, uint64_t key, int refs,
				      double wait_s)
{
	CUmemGenericAllocationHandle h;
	uint64_t size, exporter;
	struct crc_alloc *a;
	CUresult res = import_waiting(s, key, wait_s, &h, &size, &exporter);

	if (res != CUDA_SUCCESS)
		return res;
	a = crc_alloc_add(s, CRC_ALLOC_HANDLE, 0, size);
	if (!a) {
		CALL(cuMemRelease, h);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	a->handle = h;
	a->vhandle = vhandle;
	a->refs = 1;
	a->ipc_imported = true;
	a->ipc_key = key;
	a->ipc_exporter = exporter;
	crc_register_at(s, vhandle, (union crc_slot){.u64 = h});
	crc_alloc_account(s, (int64_t)size);
	/* The driver counts each import of the same export in a process as one more reference to the
	 * same handle, as the application's imports did. */
	for (; a->refs < refs && res == CUDA_SUCCESS; a->refs++) {
		CUmemGenericAllocationHandle again;

		res = crc_ipc_import(s, key, &again, &size, &exporter);
		if (res == CUDA_SUCCESS && again != h) {
			CALL(cuMemRelease, again);
			res = CUDA_ERROR_UNKNOWN;
		}
	}
	return res;
}

/* One "E" line: the exporter's event opened again under the application's virtual handle. */
static CUresult restore_import_event(struct crc_session *s, uint64_t vhandle, uint64_t key, double wait_s)
{
	uint64_t exporter;
	void *ev;
	CUresult res = open_event(s, key, wait_s, &ev, &exporter);

	if (res != CUDA_SUCCESS)
		return res;
	res = event_add(&s->ipc_events_in, &s->n_ipc_events_in, ev, key, exporter);
	if (res != CUDA_SUCCESS) {
		CALL(cuEventDestroy_v2, (CUevent)ev);
		release_hold(key);
		return res;
	}
	crc_register_at(s, vhandle, (union crc_slot){.ptr = ev});
	return CUDA_SUCCESS;
}

/* One "M" line: the export mapped at addr again, with the access the application gave it. */
static CUresult restore_import_map(struct crc_session *s, uint64_t addr, uint64_t size, uint64_t offset,
				   uint64_t key, unsigned long long access, double wait_s)
{
	struct crc_alloc *owner = imported_handle(s, key), *m;
	CUmemGenericAllocationHandle h;
	uint64_t got_size, exporter;
	CUresult res = CUDA_SUCCESS;

	/* The application released its handle after mapping: a reference of the mapping's own. */
	if (owner)
		h = owner->handle, exporter = owner->ipc_exporter;
	else
		res = import_waiting(s, key, wait_s, &h, &got_size, &exporter);
	if (res != CUDA_SUCCESS)
		return res;
	res = CALL(cuMemMap, addr, size, offset, h, 0);
	if (!owner)
		CALL(cuMemRelease, h); /* the mapping holds the memory */
	if (res != CUDA_SUCCESS)
		return res;
	m = crc_alloc_add(s, CRC_ALLOC_MAP, addr, size);
	if (!m) {
		CALL(cuMemUnmap, addr, size);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	m->ipc_imported = true;
	m->ipc_key = key;
	m->ipc_exporter = exporter;
	m->map_offset = offset;
	for (int d = 0; d < CRC_MAX_DEVICES && res == CUDA_SUCCESS; d++) {
		CUmemAccessDesc desc = {
		    .flags = (CUmemAccess_flags)((access >> (4 * d)) & 0xf),
		    .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = crc_dev_backend(s, d)}};

		m->access[d] = (uint8_t)desc.flags;
		if (desc.flags != CU_MEM_ACCESS_FLAGS_PROT_NONE)
			res = CALL(cuMemSetAccess, addr, size, &desc, 1);
	}
	return res;
}

int crc_ipc_restore_imports(struct crc_session *s, const char *desc, double wait_s, char *why, size_t len)
{
	CUcontext prev;
	int rc = 0;

	if (!desc || !*desc)
		return 0;
	if (crc_session_some_ctx(s, &prev) != CUDA_SUCCESS) {
		snprintf(why, len, "no context to import the session's shareable memory in");
		return CRC_ECUDA;
	}
	/* Handles first: a mapping uses its handle's import. */
	for (int pass = 0; pass < 2 && !rc; pass++) {
		for (const char *r = desc; *r && !rc;) {
			unsigned long long v[5] = {0};
			int refs = 0, used = 0, n;
			char kind = *r;
			CUresult res = CUDA_SUCCESS;

			if (kind == 'H')
				n = sscanf(r, "H %llx %llx %d%n", &v[0], &v[1], &refs, &used) == 3;
			else if (kind == 'E')
				n = sscanf(r, "E %llx %llx%n", &v[0], &v[1], &used) == 2;
			else if (kind == 'M')
				n = sscanf(r, "M %llx %llx %llx %llx %llx%n", &v[0], &v[1], &v[2], &v[3],
					   &v[4], &used) == 5;
			else
				n = 0;
			if (!n || !used || r[used] != '\n' || (kind == 'H' && refs < 1)) {
				snprintf(why, len,
					 "the checkpoint's list of imported shareable memory is "
					 "unreadable");
				rc = CRC_ECORRUPT;
				break;
			}
			r += used + 1;
			if (kind == 'H' && pass == 0)
				res = restore_import_handle(s, v[0], v[1], refs, wait_s);
			else if (kind == 'E' && pass == 0)
				res = restore_import_event(s, v[0], v[1], wait_s);
			else if (kind == 'M' && pass == 1)
				res = restore_import_map(s, v[0], v[1], v[2], v[3], v[4], wait_s);
			if (res != CUDA_SUCCESS) {
				snprintf(why, len,
					 "the session had another process's %s (key %llx) %s, which %s (CUDA "
					 "error %d)",
					 kind == 'E' ? "interprocess event" : "shareable memory",
					 v[kind == 'M' ? 3 : 1], kind == 'M' ? "mapped" : "open",
					 res == CUDA_ERROR_INVALID_VALUE
					     ? "its exporter does not export: restore the process tree "
					       "together"
					     : "could not be imported again",
					 (int)res);
				rc = CRC_ENOTFOUND;
			}
		}
	}
	crc_session_ctx_back(prev);
	return rc;
}
