/* Managed memory on a GPU. A managed allocation is the client's memfd, mapped here at the client's
 * address and registered, so kernels reach it across the bus (zero-copy) and the program's CPU reads
 * and writes it in place. Prefetched to a GPU (cuMemPrefetchAsync), device memory takes its address
 * here instead, and the shared pages move aside (host_view), unregistered: kernels then run at the
 * GPU memory's speed. The client keeps its own mapping of the pages inaccessible meanwhile; its first
 * touch (a fault), or a prefetch to the CPU, brings the contents back into the pages and the pages
 * back to the address. A checkpoint copies the device contents into the pages, which the client's
 * process carries (CRIU); a restored session starts with every allocation in its pages. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "crcuda/log.h"
#include "worker.h"

/* After cuda.h: define and call entry points by their ABI names. */
#include "crcuda/cuda_api_undef.h"

static struct crc_pin *managed_pin(struct crc_session *s, const struct crc_managed_req *r)
{
	for (struct crc_pin *p = s->pins; p; p = p->next)
		if (p->client_addr == r->client_addr && p->bytes == r->bytes)
			return p;
	return NULL;
}

/* Moves the mapping at from to the fixed address to (which mremap replaces). */
static bool move_pages(void *from, void *to, size_t bytes)
{
	return mremap(from, bytes, bytes, MREMAP_MAYMOVE | MREMAP_FIXED, to) == to;
}

/* Copies bytes between host memory and the device address dev, on a stream of its own: the legacy
 * stream would wait for the work of every blocking stream. */
static CUresult host_device_copy(uint64_t dev, void *host, size_t bytes, bool to_device)
{
	CUstream st;
	CUresult res = CALL(cuStreamCreate, &st, CU_STREAM_NON_BLOCKING);

	if (res != CUDA_SUCCESS)
		return res;
	res = to_device ? CALL(cuMemcpyHtoDAsync_v2, dev, host, bytes, st)
			: CALL(cuMemcpyDtoHAsync_v2, host, dev, bytes, st);
	if (res == CUDA_SUCCESS)
		res = CALL(cuStreamSynchronize, st);
	CALL(cuStreamDestroy_v2, st);
	return res;
}

/* Copies between the host view and the device memory at the pin's address. */
static CUresult copy_view(struct crc_pin *p, bool to_device)
{
	return host_device_copy(p->client_addr, p->host_view, p->bytes, to_device);
}

static void unmap_device(struct crc_pin *p)
{
	CALL(cuMemUnmap, p->client_addr, p->bytes);
	CALL(cuMemAddressFree, p->client_addr, p->bytes);
}

/* The device memory at the pin's address goes. */
static void release_device(struct crc_pin *p)
{
	unmap_device(p);
	CALL(cuMemRelease, p->dmem);
	p->dmem = 0;
}

/* The pages at the address registered for the GPU, as a registration made them. */
static CUresult register_pages(struct crc_pin *p)
{
	return CALL(cuMemHostRegister_v2, p->local, p->bytes,
		    CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP);
}

/* The pages moved back from the host view to the address and registered again. */
static CUresult pages_back(struct crc_session *s, struct crc_pin *p)
{
	if (!move_pages(p->host_view, p->local, p->bytes)) {
		pr_err("session %llu: cannot move managed memory %#llx+%#llx back to its address",
		       (unsigned long long)s->id, (unsigned long long)p->client_addr,
		       (unsigned long long)p->bytes);
		return CUDA_ERROR_UNKNOWN;
	}
	p->host_view = NULL;
	return register_pages(p);
}

static CUresult to_device(struct crc_session *s, struct crc_pin *p, int dev)
{
	CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
				    .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev}};
	CUmemAccessDesc access = {.location = prop.location, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
	CUmemGenericAllocationHandle h;
	CUdeviceptr at = 0;
	size_t gran = 0;
	void *view;
	CUresult res = CALL(cuMemGetAllocationGranularity, &gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);

	if (res != CUDA_SUCCESS)
		return res;
	if (!gran || p->client_addr % gran || p->bytes % gran) {
		pr_debug("session %llu: managed memory %#llx+%#llx is not aligned to the GPU's %zu bytes",
			 (unsigned long long)s->id, (unsigned long long)p->client_addr,
			 (unsigned long long)p->bytes, gran);
		return CUDA_ERROR_NOT_SUPPORTED; /* not movable: it stays zero-copy */
	}
	res = CALL(cuMemCreate, &h, p->bytes, &prop, 0);
	if (res != CUDA_SUCCESS)
		return res == CUDA_ERROR_OUT_OF_MEMORY ? CUDA_ERROR_NOT_SUPPORTED : res;
	view = mmap(NULL, p->bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (view == MAP_FAILED) {
		CALL(cuMemRelease, h);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	CALL(cuMemHostUnregister, p->local);
	if (!move_pages(p->local, view, p->bytes)) {
		munmap(view, p->bytes);
		CALL(cuMemRelease, h);
		register_pages(p);
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	p->host_view = view;
	res = CALL(cuMemAddressReserve, &at, p->bytes, gran, p->client_addr, 0);
	if (res == CUDA_SUCCESS && at != p->client_addr) {
		pr_debug("session %llu: the driver reserves %#llx, not managed memory's %#llx",
			 (unsigned long long)s->id, (unsigned long long)at,
			 (unsigned long long)p->client_addr);
		CALL(cuMemAddressFree, at, p->bytes);
		res = CUDA_ERROR_NOT_SUPPORTED; /* the address is the driver's here */
	}
	if (res == CUDA_SUCCESS) {
		res = CALL(cuMemMap, at, p->bytes, 0, h, 0);
		if (res == CUDA_SUCCESS)
			res = CALL(cuMemSetAccess, at, p->bytes, &access, 1);
		if (res == CUDA_SUCCESS)
			res = copy_view(p, true);
		if (res != CUDA_SUCCESS)
			unmap_device(p);
	}
	if (res == CUDA_SUCCESS) {
		p->dmem = h;
		return CUDA_SUCCESS;
	}
	/* Back as it was: the pages at the address, registered. */
	CALL(cuMemRelease, h);
	if (pages_back(s, p) != CUDA_SUCCESS)
		pr_err("session %llu: managed memory %#llx+%#llx lost its mapping for the GPU",
		       (unsigned long long)s->id, (unsigned long long)p->client_addr,
		       (unsigned long long)p->bytes);
	return res == CUDA_ERROR_OUT_OF_MEMORY ? CUDA_ERROR_NOT_SUPPORTED : res;
}

static CUresult to_host(struct crc_session *s, struct crc_pin *p)
{
	CUresult res = copy_view(p, false);

	if (res != CUDA_SUCCESS)
		return res; /* still on the GPU, whole */
	release_device(p);
	/* The contents are in the shared pages now, whatever the registration says. */
	return pages_back(s, p);
}

/* A prefetch must not wait for work that waits for the program (a kernel spinning on a flag the CPU
 * sets after queueing the prefetch, as UnifiedMemoryPerf does): the session's contexts synchronise on
 * a thread of their own, and a prefetch whose wait outlasts PREFETCH_WAIT_MS leaves the memory where
 * it is (a hint not taken). The thread ends when the work does; a later wait joins it (drain_start). */
#define PREFETCH_WAIT_MS 100

struct drain_wait {
	pthread_mutex_t lock;
	pthread_cond_t done_cond;
	bool done;
	CUresult res;
	atomic_int refs;
	int n;
	CUcontext ctx[CRC_MAX_DEVICES * 4];
};

/* The drain under way, if any (drain_lock): a later wait joins it rather than start a second. */
static pthread_mutex_t drain_lock = PTHREAD_MUTEX_INITIALIZER;
static struct drain_wait *drain_current;

static void drain_wait_put(struct drain_wait *w)
{
	if (atomic_fetch_sub(&w->refs, 1) == 1) {
		pthread_mutex_destroy(&w->lock);
		pthread_cond_destroy(&w->done_cond);
		free(w);
	}
}

static void *drain_main(void *arg)
{
	struct drain_wait *w = arg;
	CUresult res = CUDA_SUCCESS;

	for (int i = 0; i < w->n && res == CUDA_SUCCESS; i++) {
		res = CALL(cuCtxSetCurrent, w->ctx[i]);
		if (res == CUDA_SUCCESS)
			res = CALL(cuCtxSynchronize);
	}
	pthread_mutex_lock(&drain_lock);
	if (drain_current == w)
		drain_current = NULL;
	pthread_mutex_unlock(&drain_lock);
	pthread_mutex_lock(&w->lock);
	w->done = true;
	w->res = res;
	pthread_cond_broadcast(&w->done_cond);
	pthread_mutex_unlock(&w->lock);
	drain_wait_put(w);
	return NULL;
}

/* A drain of the session's contexts on a thread of its own, or the one under way (*mine: started here). */
static struct drain_wait *drain_start(struct crc_session *s, bool *mine)
{
	struct crc_htable *t = &s->tables[CRC_HT_CTX];
	struct drain_wait *w;
	pthread_attr_t attr;
	pthread_t thread;

	pthread_mutex_lock(&drain_lock);
	if ((w = drain_current)) {
		atomic_fetch_add(&w->refs, 1);
		pthread_mutex_unlock(&drain_lock);
		*mine = false;
		return w;
	}
	w = calloc(1, sizeof(*w));
	if (!w) {
		pthread_mutex_unlock(&drain_lock);
		return NULL;
	}
	pthread_mutex_init(&w->lock, NULL);
	pthread_cond_init(&w->done_cond, NULL);
	atomic_init(&w->refs, 2);
	for (uint32_t i = 1; i <= t->n && w->n < (int)(sizeof(w->ctx) / sizeof(w->ctx[0])); i++)
		if (t->real[i].ptr)
			w->ctx[w->n++] = t->real[i].ptr;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	if (crc_thread_create(&thread, &attr, drain_main, w)) {
		pthread_attr_destroy(&attr);
		pthread_mutex_unlock(&drain_lock);
		drain_wait_put(w);
		drain_wait_put(w);
		return NULL;
	}
	pthread_attr_destroy(&attr);
	drain_current = w;
	pthread_mutex_unlock(&drain_lock);
	*mine = true;
	return w;
}

/* CUDA_SUCCESS once the session's work has ended, NOT_SUPPORTED when it has not within ms. A drain
 * already under way is joined; it may have begun before the latest work, so one of this wait's own
 * follows it. */
static CUresult drain_within(struct crc_session *s, int ms)
{
	struct timespec until;
	CUresult res = CUDA_ERROR_NOT_SUPPORTED;
	bool mine = false;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_nsec += (long)(ms % 1000) * 1000000L;
	until.tv_sec += ms / 1000 + until.tv_nsec / 1000000000L;
	until.tv_nsec %= 1000000000L;
	while (!mine) {
		struct drain_wait *w = drain_start(s, &mine);
		int rc = 0;

		if (!w)
			return CUDA_ERROR_OUT_OF_MEMORY;
		pthread_mutex_lock(&w->lock);
		while (!w->done && rc != ETIMEDOUT)
			rc = pthread_cond_timedwait(&w->done_cond, &w->lock, &until);
		res = w->done ? w->res : CUDA_ERROR_NOT_SUPPORTED;
		pthread_mutex_unlock(&w->lock);
		drain_wait_put(w);
		if (res != CUDA_SUCCESS)
			return res;
	}
	return res;
}

/* The client's CPU waits in a fault for the session's work to end before it touches managed memory the
 * GPU may be using (libcrcuda/hooks_mem.c), at most ms: work that waits for the CPU must not hang it. */
CUresult crc_ctl_managed_wait(struct crc_session *s, const uint8_t *args, size_t len)
{
	uint32_t ms;
	CUresult res;

	if (len < sizeof(ms))
		return CUDA_ERROR_INVALID_VALUE;
	memcpy(&ms, args, sizeof(ms));
	res = drain_within(s, (int)(ms > 600000 ? 600000 : ms));
	return res == CUDA_ERROR_NOT_SUPPORTED ? CUDA_ERROR_NOT_READY : res;
}

CUresult crc_ctl_managed_place(struct crc_session *s, const uint8_t *args, size_t len)
{
	const struct crc_managed_req *r = (const void *)args;
	struct crc_pin *p;
	CUcontext prev;
	CUresult res;

	if (len < sizeof(*r) || s->tcp)
		return CUDA_ERROR_INVALID_VALUE;
	p = managed_pin(s, r);
	if (!p || (r->device >= 0 && crc_dev_backend(s, r->device) < 0))
		return CUDA_ERROR_INVALID_VALUE;
	if (r->device >= 0 ? p->dmem != 0 : !p->dmem)
		return CUDA_SUCCESS; /* there already (a restored session starts in the pages) */
	if (p->local != (void *)(uintptr_t)p->client_addr)
		return CUDA_ERROR_NOT_SUPPORTED; /* not at the client's address here */
	/* Kernels may be using it: the session's work ends first. Back to the host it must (the CPU
	 * waits in a fault); to a GPU, only if that comes soon. */
	res = r->device >= 0 ? drain_within(s, PREFETCH_WAIT_MS) : crc_session_drain(s);
	if (res == CUDA_SUCCESS)
		res = crc_session_some_ctx(s, &prev);
	if (res != CUDA_SUCCESS)
		return res;
	res = r->device >= 0 ? to_device(s, p, crc_dev_backend(s, r->device)) : to_host(s, p);
	crc_session_ctx_back(prev);
	pr_debug("session %llu: managed memory %#llx+%#llx %s: CUDA error %d", (unsigned long long)s->id,
		 (unsigned long long)p->client_addr, (unsigned long long)p->bytes,
		 r->device >= 0 ? "to the GPU" : "back to host memory", (int)res);
	return res;
}

int crc_managed_flush(struct crc_session *s, char *why, size_t len)
{
	CUcontext prev;
	CUresult res = CUDA_SUCCESS;

	for (struct crc_pin *p = s->pins; p && res == CUDA_SUCCESS; p = p->next) {
		if (!p->dmem)
			continue;
		res = crc_session_some_ctx(s, &prev);
		if (res == CUDA_SUCCESS)
			res = copy_view(p, false);
		crc_session_ctx_back(prev);
		if (res != CUDA_SUCCESS)
			snprintf(why, len,
				 "cannot copy managed memory %#llx+%#llx from the GPU: CUDA error %d",
				 (unsigned long long)p->client_addr, (unsigned long long)p->bytes, (int)res);
	}
	return res == CUDA_SUCCESS ? 0 : -1;
}

bool crc_managed_release(struct crc_pin *p)
{
	if (!p->dmem)
		return false;
	release_device(p);
	munmap(p->host_view, p->bytes);
	p->host_view = NULL;
	return true;
}

/* A module's __managed__ variable is driver managed memory here, out of the client's reach: the client
 * keeps a copy at the same address and pulls or pushes its bytes around the GPU's work. A pull after
 * the session's work unless the client says not to (a host function's thread: the work waits for it). */
CUresult crc_ctl_mvar_copy(struct crc_session *s, bool push, const uint8_t *args, size_t len)
{
	const struct crc_mvar_req *r = (const void *)args;
	CUcontext prev;
	CUresult res;
	void *out = NULL;

	if (len < sizeof(*r) || !r->bytes || r->bytes > crc_chan_max_payload(&s->chan) ||
	    (push && len - sizeof(*r) < r->bytes))
		return CUDA_ERROR_INVALID_VALUE;
	if (!push && r->drain) {
		res = crc_session_drain(s);
		if (res != CUDA_SUCCESS)
			return res;
	}
	if (!push && !(out = crc_out(s, r->bytes)))
		return CUDA_ERROR_OUT_OF_MEMORY;
	res = crc_session_some_ctx(s, &prev);
	if (res != CUDA_SUCCESS)
		return res;
	res = host_device_copy(r->addr, push ? (void *)(r + 1) : out, r->bytes, push);
	crc_session_ctx_back(prev);
	return res;
}
