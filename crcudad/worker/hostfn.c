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
#include <unistd.h>

#include "crcuda/log.h"
#include "worker.h"

#include "crcuda/cuda_api_undef.h"

#define CALL(sym, ...) (crc_be.sym##_fn ? crc_be.sym##_fn(__VA_ARGS__) : CUDA_ERROR_NOT_SUPPORTED)

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

static void CUDA_CB trampoline(void *p)
{
	struct crc_hostfn_arg *a = p;
	struct crc_session *s = a->s;
	struct crc_hostfn_page *pg;
	uint32_t seq;

	pthread_mutex_lock(&hostfn_lock);
	pg = s->hostfn;
	if (!pg) {
		pr_err("session %llu: a host function ran before the client shared its page; skipped",
		       (unsigned long long)s->id);
		goto out;
	}
	pg->fn = a->fn;
	pg->data = a->data;
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
out:
	pthread_mutex_unlock(&hostfn_lock);
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

void crc_hostfn_free(struct crc_session *s)
{
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
