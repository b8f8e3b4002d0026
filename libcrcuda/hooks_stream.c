/* Hooks: streams and events (created by the daemon, described here for the local getters), host
 * callbacks. */
#define LOG_PREFIX "libcrcuda: "
#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "client.h"
#include "crcuda/memops.h"
#include "crcuda/log.h"

CUresult crc_hook_cuStreamCreateWithPriority(CUstream *phStream, unsigned int flags, int priority)
{
	CUresult res = crc_fwd_cuStreamCreateWithPriority(phStream, flags, priority);

	if (res == CUDA_SUCCESS)
		crc_stream_store((uintptr_t)*phStream, crc_current_ctx(), flags, priority);
	return res;
}

CUresult crc_hook_cuStreamCreate(CUstream *phStream, unsigned int Flags)
{
	return crc_hook_cuStreamCreateWithPriority(phStream, Flags, 0);
}

CUresult crc_hook_cuStreamDestroy_v2(CUstream hStream)
{
	CUresult res = crc_fwd_cuStreamDestroy_v2(hStream);

	if (res == CUDA_SUCCESS)
		crc_stream_forget((uintptr_t)hStream);
	return res;
}

CUresult crc_hook_cuStreamDestroy(CUstream hStream)
{
	return crc_hook_cuStreamDestroy_v2(hStream);
}

CUresult crc_hook_cuEventCreate(CUevent *phEvent, unsigned int Flags)
{
	CUresult res = crc_fwd_cuEventCreate(phEvent, Flags);

	if (res == CUDA_SUCCESS && (Flags & CU_EVENT_INTERPROCESS))
		res = crc_ipc_event_note((uintptr_t)*phEvent);
	return res;
}

CUresult crc_hook_cuEventDestroy_v2(CUevent hEvent)
{
	CUresult res = crc_fwd_cuEventDestroy_v2(hEvent);

	if (res == CUDA_SUCCESS)
		crc_ipc_event_forget((uintptr_t)hEvent);
	return res;
}

CUresult crc_hook_cuEventDestroy(CUevent hEvent)
{
	return crc_hook_cuEventDestroy_v2(hEvent);
}

/* ---- host functions ----------------------------------------------------------------------------- */
/* The daemon's driver runs host functions (cuLaunchHostFunc, graph host nodes) through a page this
 * process shares with it (struct crc_hostfn_page): a thread here waits on it, runs each function and
 * says when it returned. The page is this process's own memfd, mapped for its whole life, so CRIU
 * keeps it and a restored session gets it again (crc_hostfn_reregister). */
static struct crc_hostfn_page *hostfn_page;
static int hostfn_memfd = -1;
static pthread_once_t hostfn_once = PTHREAD_ONCE_INIT;

static __thread bool on_hostfn_thread;

bool crc_on_hostfn_thread(void)
{
	return on_hostfn_thread;
}

static void *hostfn_loop(void *arg)
{
	struct crc_hostfn_page *pg = arg;

	on_hostfn_thread = true;
	for (;;) {
		uint32_t req = atomic_load_explicit(&pg->req, memory_order_acquire);

		if (req == atomic_load_explicit(&pg->done, memory_order_relaxed)) {
			crc_futex_wait(&pg->req, req, 1000);
			continue;
		}
		if (pg->kind == CRC_HOSTFN_CALL)
			((CUhostFn)(uintptr_t)pg->fn)((void *)(uintptr_t)pg->data);
		else
			crc_notify_deliver(pg);
		atomic_store_explicit(&pg->done, req, memory_order_release);
		crc_futex_wake(&pg->done);
	}
	return NULL;
}

static void hostfn_setup(void)
{
	int fd = memfd_create("crcuda-hostfn", MFD_CLOEXEC);
	struct crc_hostfn_page *pg;
	pthread_attr_t attr;
	pthread_t t;

	if (fd < 0 || ftruncate(fd, CRC_HOSTFN_PAGE_SIZE))
		goto fail;
	pg = mmap(NULL, CRC_HOSTFN_PAGE_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (pg == MAP_FAILED)
		goto fail;
	pg->magic = CRC_HOSTFN_MAGIC;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	if (pthread_create(&t, &attr, hostfn_loop, pg)) {
		pthread_attr_destroy(&attr);
		munmap(pg, CRC_HOSTFN_PAGE_SIZE);
		goto fail;
	}
	pthread_attr_destroy(&attr);
	hostfn_memfd = fd;
	hostfn_page = pg;
	return;
fail:
	if (fd >= 0)
		close(fd);
	pr_err("cannot set up host functions: %s", strerror(errno));
}

/* Shares the page with the session. */
static CUresult hostfn_share(void)
{
	return crc_ctl_with_fd(CRC_OP_HOSTFN_REGISTER, NULL, 0, hostfn_memfd, NULL, 0);
}

/* The page, shared with the session; NULL where there cannot be one (over TCP, or it failed). */
struct crc_hostfn_page *crc_hostfn_ready(void)
{
	static atomic_bool shared;
	static pthread_mutex_t share_lock = PTHREAD_MUTEX_INITIALIZER;

	if (crc_client.tcp)
		return NULL;
	pthread_once(&hostfn_once, hostfn_setup);
	if (!hostfn_page)
		return NULL;
	if (!atomic_load(&shared)) {
		/* A host function cannot wait for the session (the stream waits for it): managed memory it
		 * touches must never be on a GPU. */
		crc_managed_stay_home();
		pthread_mutex_lock(&share_lock);
		if (!atomic_load(&shared) && hostfn_share() == CUDA_SUCCESS)
			atomic_store(&shared, true);
		pthread_mutex_unlock(&share_lock);
	}
	return atomic_load(&shared) ? hostfn_page : NULL;
}

int crc_hostfn_memfd(void)
{
	return hostfn_page ? hostfn_memfd : -1;
}

/* Over TCP the daemon cannot reach this process's memory: the stream's earlier work is waited for and
 * the function runs here, before later work is queued. Ordering holds; the caller blocks where the
 * driver would not. */
CUresult crc_hook_cuLaunchHostFunc(CUstream hStream, CUhostFn fn, void *userData)
{
	struct crc_hostfn_req r = {
	    .stream = (uintptr_t)hStream, .fn = (uintptr_t)fn, .data = (uintptr_t)userData};
	struct crc_call c;
	void *args;
	CUresult res;

	if (!fn)
		return CUDA_ERROR_INVALID_VALUE;
	if (!crc_hostfn_ready()) {
		if (crc_capture_refuses_host_fn(hStream))
			return CUDA_ERROR_NOT_SUPPORTED;
		res = crc_fwd_cuStreamSynchronize(hStream);
		if (res == CUDA_SUCCESS)
			fn(userData);
		return res;
	}
	res = crc_call_begin(&c, CRC_CU_cuLaunchHostFunc, CRC_MSG_NOREPLY, sizeof(r), &args);
	if (res != CUDA_SUCCESS)
		return res;
	memcpy(args, &r, sizeof(r));
	return crc_call_post(&c);
}

CUresult crc_hook_cuStreamAddCallback(CUstream hStream, CUstreamCallback callback, void *userData,
				      unsigned int flags)
{
	CUresult res;

	if (!callback || flags)
		return CUDA_ERROR_INVALID_VALUE;
	if (crc_capture_refuses_host_fn(hStream))
		return CUDA_ERROR_NOT_SUPPORTED;
	res = crc_fwd_cuStreamSynchronize(hStream);
	if (res == CRC_CU_DAEMON_GONE)
		return res;
	callback(hStream, res, userData);
	return CUDA_SUCCESS;
}

/* ---- stream attributes: set in the daemon (and journaled, so a restore sets them again) ---------- */
_Static_assert(sizeof(CUstreamAttrValue) <= CRC_STREAM_ATTR_VALUE_BYTES, "crc_stream_attr_req holds a value");

CUresult crc_hook_cuStreamSetAttribute(CUstream hStream, CUstreamAttrID attr, const CUstreamAttrValue *value)
{
	struct crc_stream_attr_req r = {.stream = (uintptr_t)hStream, .attr = (uint32_t)attr};

	if (!value)
		return CUDA_ERROR_INVALID_VALUE;
	memcpy(r.value, value, sizeof(*value));
	return crc_rpc(CRC_CU_cuStreamSetAttribute, &r, sizeof(r), NULL, 0);
}

CUresult crc_hook_cuStreamGetAttribute(CUstream hStream, CUstreamAttrID attr, CUstreamAttrValue *value_out)
{
	struct crc_stream_attr_req r = {.stream = (uintptr_t)hStream, .attr = (uint32_t)attr};

	if (!value_out)
		return CUDA_ERROR_INVALID_VALUE;
	return crc_rpc(CRC_CU_cuStreamGetAttribute, &r, sizeof(r), value_out, sizeof(*value_out));
}

/* ---- a batch of stream memory operations: each one in order, as the single-operation calls ---------- */
static CUresult memop_wait(void *stream, bool wide, CUdeviceptr addr, cuuint64_t value, unsigned flags)
{
	return wide ? crc_fwd_cuStreamWaitValue64_v2(stream, addr, value, flags)
		    : crc_fwd_cuStreamWaitValue32_v2(stream, addr, (cuuint32_t)value, flags);
}

static CUresult memop_write(void *stream, bool wide, CUdeviceptr addr, cuuint64_t value, unsigned flags)
{
	return wide ? crc_fwd_cuStreamWriteValue64_v2(stream, addr, value, flags)
		    : crc_fwd_cuStreamWriteValue32_v2(stream, addr, (cuuint32_t)value, flags);
}

static const struct crc_memop_fns memop_fns = {memop_wait, memop_write};

CUresult crc_hook_cuStreamBatchMemOp_v2(CUstream stream, unsigned int count,
					CUstreamBatchMemOpParams *paramArray, unsigned int flags)
{
	return crc_batch_memops(count, paramArray, flags, &memop_fns, stream);
}

CUresult crc_hook_cuStreamBatchMemOp(CUstream stream, unsigned int count,
				     CUstreamBatchMemOpParams *paramArray, unsigned int flags)
{
	return crc_hook_cuStreamBatchMemOp_v2(stream, count, paramArray, flags);
}
