/* Host functions: graph host nodes and cuLaunchHostFunc. The driver here calls a trampoline, which asks
 * the client to run the application's function (struct crc_hostfn_page, shared memory and futexes) and
 * waits until it returned, so what the stream or graph does after it waits too, as natively. */
#define LOG_PREFIX "crcudad: "
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "crcuda/log.h"
#include "worker.h"

#include "crcuda/cuda_api_undef.h"

/* What a trampoline runs: the application's function and argument. Kept for the session's life (a
 * graph node may run it any number of times), except a launch's own, freed once it ran. */
struct crc_hostfn_arg {
	struct crc_session *s;
	uint64_t fn, data;
	bool once;
	bool userobj;	  /* a user object's destroy callback */
	_Atomic bool ran; /* ... which has run: the object is gone */
	struct crc_hostfn_arg *next;
};

static pthread_mutex_t hostfn_lock = PTHREAD_MUTEX_INITIALIZER; /* one call to the client at a time */

/* Has the client run fn(data) (CRC_HOSTFN_CALL) or deliver what the payload holds, and waits until it
 * did. False where there is no page yet. */
static bool client_run(struct crc_session *s, uint32_t kind, uint64_t fn, uint64_t data, uint64_t arg,
		       const void *payload, size_t len)
{
	struct crc_hostfn_page *pg;
	uint32_t seq;

	pthread_mutex_lock(&hostfn_lock);
	pg = s->hostfn;
	if (!pg) {
		pthread_mutex_unlock(&hostfn_lock);
		return false;
	}
	pg->kind = kind;
	pg->fn = fn;
	pg->data = data;
	pg->arg = arg;
	if (len > CRC_HOSTFN_PAYLOAD)
		len = CRC_HOSTFN_PAYLOAD;
	pg->len = len;
	if (len)
		memcpy(pg->payload, payload, len);
	seq = atomic_load_explicit(&pg->req, memory_order_relaxed) + 1;
	atomic_store_explicit(&pg->req, seq, memory_order_release);
	crc_futex_wake(&pg->req);
	for (;;) {
		uint32_t done = atomic_load_explicit(&pg->done, memory_order_acquire);

		if (done == seq)
			break;
		crc_futex_wait(&pg->done, done, 100);
		/* The client gone (its work then ends with the session) or another page shared. */
		if ((kill(s->peer.pid, 0) && errno == ESRCH) || s->hostfn != pg)
			break;
	}
	pthread_mutex_unlock(&hostfn_lock);
	return true;
}

static void CUDA_CB trampoline(void *p)
{
	struct crc_hostfn_arg *a = p;
	struct crc_session *s = a->s;

	if (!client_run(s, CRC_HOSTFN_CALL, a->fn, a->data, 0, NULL, 0))
		pr_err("session %llu: a host function ran before the client shared its page; skipped",
		       (unsigned long long)s->id);
	if (a->once)
		free(a);
	else
		atomic_store(&a->ran, true);
}

/* A trampoline argument for fn(data); once: freed after its one run. NULL on memory exhaustion. */
static struct crc_hostfn_arg *arg_new(struct crc_session *s, uint64_t fn, uint64_t data, bool once)
{
	struct crc_hostfn_arg *a = calloc(1, sizeof(*a));

	if (!a)
		return NULL;
	*a = (struct crc_hostfn_arg){.s = s, .fn = fn, .data = data, .once = once};
	if (!once) {
		a->next = s->hostfn_args;
		s->hostfn_args = a;
	}
	return a;
}

CUresult crc_hostfn_node_params(struct crc_session *s, uint64_t fn, uint64_t data, CUDA_HOST_NODE_PARAMS *p)
{
	struct crc_hostfn_arg *a = arg_new(s, fn, data, false);

	if (!a)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*p = (CUDA_HOST_NODE_PARAMS){.fn = trampoline, .userData = a};
	return CUDA_SUCCESS;
}

bool crc_hostfn_of(const CUDA_HOST_NODE_PARAMS *p, uint64_t *fn, uint64_t *data)
{
	const struct crc_hostfn_arg *a = p->userData;

	if (p->fn != trampoline || !a)
		return false;
	*fn = a->fn;
	*data = a->data;
	return true;
}

static void notify_free(struct crc_session *s);

void crc_hostfn_free(struct crc_session *s)
{
	notify_free(s);
	while (s->hostfn_args) {
		struct crc_hostfn_arg *a = s->hostfn_args;

		s->hostfn_args = a->next;
		free(a);
	}
	if (s->hostfn)
		munmap(s->hostfn, CRC_HOSTFN_PAGE_SIZE);
	s->hostfn = NULL;
}

/* CRC_OP_HOSTFN_REGISTER: the client's page (its memfd on the socket). */
CUresult crc_ctl_hostfn_register(struct crc_session *s)
{
	struct crc_hostfn_page *pg, *old;
	int memfd = -1, nfds = 0;
	char byte;

	if (s->tcp || crc_sock_recv_fds(s->fd, &byte, 1, &memfd, 1, &nfds) || nfds != 1)
		return CUDA_ERROR_INVALID_VALUE;
	pg = mmap(NULL, CRC_HOSTFN_PAGE_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
	close(memfd);
	if (pg == MAP_FAILED)
		return CUDA_ERROR_OUT_OF_MEMORY;
	if (pg->magic != CRC_HOSTFN_MAGIC) {
		munmap(pg, CRC_HOSTFN_PAGE_SIZE);
		return CUDA_ERROR_INVALID_VALUE;
	}
	pthread_mutex_lock(&hostfn_lock);
	old = s->hostfn;
	s->hostfn = pg;
	pthread_mutex_unlock(&hostfn_lock);
	if (old)
		munmap(old, CRC_HOSTFN_PAGE_SIZE);
	return CUDA_SUCCESS;
}

/* cuLaunchHostFunc: posted; the stream runs the function when it gets there. Captured, it becomes a
 * host node, which runs it at every launch: then the argument stays. */
CUresult crc_raw_hostfn_launch(struct crc_session *s, const struct crc_call_hdr *h, const uint8_t *args,
			       size_t len)
{
	const struct crc_hostfn_req *r = (const void *)args;
	struct crc_hostfn_arg *a;
	union crc_slot st;
	CUresult res;

	if (len < sizeof(*r) || !r->fn)
		return CUDA_ERROR_INVALID_VALUE;
	res = crc_translate(s, h, CRC_HT_STREAM, r->stream, &st);
	if (res != CUDA_SUCCESS)
		return res;
	a = arg_new(s, r->fn, r->data, !crc_stream_capturing(st.ptr));
	if (!a)
		return CUDA_ERROR_OUT_OF_MEMORY;
	res = CALL(cuLaunchHostFunc, st.ptr, trampoline, a);
	if (res != CUDA_SUCCESS && a->once)
		free(a);
	return res;
}

/* A user object whose destroy callback, run by the driver through a trampoline when the last reference
 * goes, is the application's destroy(ptr). *arg tells whether it still lives. */
CUresult crc_hostfn_userobj_make(struct crc_session *s, uint64_t destroy, uint64_t ptr, unsigned refs,
				 unsigned flags, CUuserObject *obj, struct crc_hostfn_arg **arg)
{
	struct crc_hostfn_arg *a;
	CUresult res;

	if (s->tcp)
		return CUDA_ERROR_NOT_SUPPORTED;
	a = arg_new(s, destroy, ptr, false);
	if (!a)
		return CUDA_ERROR_OUT_OF_MEMORY;
	res = CALL(cuUserObjectCreate, obj, a, trampoline, refs, flags);
	atomic_store(&a->ran, res != CUDA_SUCCESS); /* never made: not a live object */
	*arg = a;
	return res;
}

bool crc_hostfn_alive(const struct crc_hostfn_arg *a)
{
	return !atomic_load(&a->ran);
}

/* cuUserObjectCreate: recorded for checkpoints (graph.c), which carry user objects and the graphs'
 * references to them. */
CUresult crc_raw_userobj_create(struct crc_session *s, const struct crc_call_hdr *h, const uint8_t *args,
				size_t len)
{
	const struct crc_userobj_req *r = (const void *)args;
	struct crc_hostfn_arg *a;
	CUuserObject obj = NULL;
	uint64_t *out;
	CUresult res;

	(void)h;
	if (len < sizeof(*r) || !r->destroy)
		return CUDA_ERROR_INVALID_VALUE;
	res = crc_hostfn_userobj_make(s, r->destroy, r->ptr, r->refs, r->flags, &obj, &a);
	if (res != CUDA_SUCCESS)
		return res;
	out = crc_out(s, 8);
	if (!out)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*out = crc_register(s, CRC_HT_USEROBJECT, (union crc_slot){.ptr = obj});
	return crc_graph_userobj_made(s, *out, r->destroy, r->ptr, r->flags, r->refs, a);
}

/* ---- the application's driver callbacks: log lines, async notifications -------------------------
 * The worker registers a trampoline of its own with its driver for each of the application's
 * registrations (crc_notify_req: the client's id); the trampoline has the client deliver what the
 * driver gave (the page's payload) to the application's function, as a host function runs. A
 * registration's struct stays until the session ends (a driver call may still hold it after an
 * unregistration); `live` says whether it delivers. */
struct crc_notify_reg {
	struct crc_session *s;
	uint64_t id;
	uint32_t type;
	int device;
	void *handle; /* the driver's */
	_Atomic bool live;
	struct crc_notify_reg *next;
};

static void CUDA_CB log_trampoline(void *data, CUlogLevel level, char *message, size_t length)
{
	struct crc_notify_reg *r = data;

	if (atomic_load(&r->live) && message)
		client_run(r->s, CRC_HOSTFN_LOG, 0, r->id, (uint64_t)level, message, length);
}

static void async_trampoline(CUasyncNotificationInfo *info, void *data, CUasyncCallbackHandle h)
{
	struct crc_notify_reg *r = data;

	(void)h;
	if (atomic_load(&r->live) && info)
		client_run(r->s, CRC_HOSTFN_ASYNC, 0, r->id, (uint64_t)(int64_t)r->device, info,
			   sizeof(*info));
}

static CUresult notify_unregister(struct crc_notify_reg *r, uint32_t type, int device)
{
	void *h = r ? r->handle : NULL;

	if (type == CRC_NOTIFY_LOGS)
		return CALL(cuLogsUnregisterCallback, (CUlogsCallbackHandle)h);
	return CALL(cuDeviceUnregisterAsyncNotification, device, (CUasyncCallbackHandle)h);
}

static void notify_free(struct crc_session *s)
{
	while (s->notify) {
		struct crc_notify_reg *r = s->notify;

		if (atomic_load(&r->live) && r->handle)
			notify_unregister(r, r->type, r->device);
		s->notify = r->next;
		free(r);
	}
}

/* CRC_OP_NOTIFY_REGISTER / CRC_OP_NOTIFY_UNREGISTER. */
CUresult crc_ctl_notify(struct crc_session *s, bool reg, const uint8_t *args, size_t len)
{
	struct crc_notify_req q;
	struct crc_notify_reg *r;
	CUresult res;

	if (len < sizeof(q))
		return CUDA_ERROR_INVALID_VALUE;
	memcpy(&q, args, sizeof(q));
	if (q.type != CRC_NOTIFY_LOGS && q.type != CRC_NOTIFY_ASYNC)
		return CUDA_ERROR_INVALID_VALUE;
	if (!reg) {
		for (r = s->notify; r; r = r->next)
			if (atomic_load(&r->live) && r->id == q.id && r->type == q.type)
				break;
		res = notify_unregister(r, q.type, q.device);
		if (res == CUDA_SUCCESS && r)
			atomic_store(&r->live, false);
		return res;
	}
	if (s->tcp)
		return CUDA_ERROR_NOT_SUPPORTED;
	r = calloc(1, sizeof(*r));
	if (!r)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*r = (struct crc_notify_reg){.s = s, .id = q.id, .type = q.type, .device = q.device};
	atomic_store(&r->live, true);
	/* Linked first: a driver may call it before registering returns. */
	r->next = s->notify;
	s->notify = r;
	if (q.type == CRC_NOTIFY_LOGS)
		res = CALL(cuLogsRegisterCallback, q.flags & CRC_NOTIFY_NO_FN ? NULL : log_trampoline, r,
			   q.flags & CRC_NOTIFY_NO_OUT ? NULL : (CUlogsCallbackHandle *)&r->handle);
	else
		res = CALL(cuDeviceRegisterAsyncNotification, q.device,
			   q.flags & CRC_NOTIFY_NO_FN ? NULL : async_trampoline, r,
			   q.flags & CRC_NOTIFY_NO_OUT ? NULL : (CUasyncCallbackHandle *)&r->handle);
	if (res != CUDA_SUCCESS)
		atomic_store(&r->live, false);
	return res;
}

/* cuLogsDumpToMemory / cuLogsDumpToFile (crc_logs_req): the driver's dump, the NULLs as the application
 * passed them; a file is dumped into a memfd of this process, and its bytes go back. */
CUresult crc_raw_logs(struct crc_session *s, const struct crc_call_hdr *h, const uint8_t *args, size_t len)
{
	struct crc_logs_req r;
	CUlogIterator it;
	CUlogIterator *pit;
	char *buf = NULL;
	size_t bytes = 0;
	uint8_t *out;
	CUresult res;

	(void)h;
	if (len < sizeof(r))
		return CUDA_ERROR_INVALID_VALUE;
	memcpy(&r, args, sizeof(r));
	s->jdrop = true;
	it = r.iterator;
	pit = r.flags & CRC_LOGS_ITERATOR ? &it : NULL;
	if (s->msg->op == CRC_CU_cuLogsDumpToMemory) {
		size_t size = r.size < CRC_LOGS_MAX ? r.size : CRC_LOGS_MAX;

		if ((r.flags & CRC_LOGS_BUFFER) && !(buf = calloc(1, size ? size : 1)))
			return CUDA_ERROR_OUT_OF_MEMORY;
		res = CALL(cuLogsDumpToMemory, pit, buf, r.flags & CRC_LOGS_SIZE ? &size : NULL, r.api_flags);
		if (res == CUDA_SUCCESS && buf && (r.flags & CRC_LOGS_SIZE)) {
			size_t cap = r.size < CRC_LOGS_MAX ? r.size : CRC_LOGS_MAX;

			bytes = size < cap ? size + 1 : cap;
		}
		r.size = size;
	} else {
		char path[64];
		int fd = -1;
		struct stat st;

		r.flags &= ~(uint32_t)CRC_LOGS_APPENDED;
		if (r.flags & CRC_LOGS_BUFFER) {
			fd = memfd_create("crcuda-logs", MFD_CLOEXEC);
			if (fd < 0 || write(fd, "\1", 1) != 1) {
				if (fd >= 0)
					close(fd);
				return CUDA_ERROR_OUT_OF_MEMORY;
			}
			snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
		}
		res = CALL(cuLogsDumpToFile, pit, fd >= 0 ? path : NULL, r.api_flags);
		if (fd >= 0 && res == CUDA_SUCCESS && !fstat(fd, &st) && st.st_size > 0) {
			size_t n = (size_t)st.st_size < CRC_LOGS_MAX ? (size_t)st.st_size : CRC_LOGS_MAX;

			buf = malloc(n);
			if (!buf || pread(fd, buf, n, 0) != (ssize_t)n) {
				close(fd);
				free(buf);
				return CUDA_ERROR_OUT_OF_MEMORY;
			}
			bytes = n;
			/* The byte written first still there: the driver appended. */
			if (buf[0] == '\1') {
				r.flags |= CRC_LOGS_APPENDED;
				memmove(buf, buf + 1, --bytes);
			}
		}
		if (fd >= 0)
			close(fd);
	}
	r.iterator = it;
	r.bytes = bytes;
	out = crc_out(s, sizeof(r) + bytes);
	if (!out) {
		free(buf);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	memcpy(out, &r, sizeof(r));
	if (bytes)
		memcpy(out + sizeof(r), buf, bytes);
	free(buf);
	return res;
}
