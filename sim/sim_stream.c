/* Streams, events, copies and memsets of the simulated device.
 *
 * Each stream is an in-order queue drained by its own worker thread, so work really runs
 * asynchronously. Ordering between streams is expressed by wait ops queued ahead of the work: for
 * the legacy NULL stream, one per blocking stream with pending work; for a blocking stream, one on
 * the legacy stream; for cuStreamWaitEvent, one on the event's latest record. Every wait refers to
 * work submitted earlier, so waits cannot form a cycle. */
#define LOG_PREFIX "sim: "

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "crcuda/copy2d.h"
#include "crcuda/memops.h"
#include "crcuda/log.h"
#include "sim.h"

#define SIM_PRIORITY_LEAST    0
#define SIM_PRIORITY_GREATEST (-5)

static void stream_unref(struct CUstream_st *s)
{
	if (atomic_fetch_sub(&s->refs, 1) != 1)
		return;
	pthread_mutex_destroy(&s->lock);
	pthread_cond_destroy(&s->work_cond);
	pthread_cond_destroy(&s->done_cond);
	free(s);
}

static void event_unref(struct CUevent_st *e)
{
	if (atomic_fetch_sub(&e->refs, 1) != 1)
		return;
	sim_capture_event_free(e);
	if (e->st == &e->own) {
		pthread_mutex_destroy(&e->own.lock);
		pthread_cond_destroy(&e->own.cond);
	} else {
		/* Shared with other processes, which may still use it: only unmapped here. */
		munmap(e->st, sizeof(*e->st));
		close(e->shared_fd);
	}
	free(e);
}

/* An interprocess event's state page: a new one (fd < 0) or another process's (its memfd). NULL on
 * failure. */
static struct sim_event_state *event_state_map(int fd, bool init)
{
	struct sim_event_state *st = mmap(NULL, sizeof(*st), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	pthread_mutexattr_t ma;
	pthread_condattr_t ca;

	if (st == MAP_FAILED)
		return NULL;
	if (init) {
		pthread_mutexattr_init(&ma);
		pthread_mutexattr_setpshared(&ma, PTHREAD_PROCESS_SHARED);
		pthread_mutex_init(&st->lock, &ma);
		pthread_mutexattr_destroy(&ma);
		pthread_condattr_init(&ca);
		pthread_condattr_setpshared(&ca, PTHREAD_PROCESS_SHARED);
		pthread_cond_init(&st->cond, &ca);
		pthread_condattr_destroy(&ca);
	}
	return st;
}

void sim_event_ref(struct CUevent_st *e)
{
	atomic_fetch_add(&e->refs, 1);
}

void sim_event_unref(struct CUevent_st *e)
{
	event_unref(e);
}

static void *host_kernel_global(const struct crcuda_sim_block *blk, const char *name, size_t *size)
{
	return sim_host_kernel_global(blk, name, size);
}

static void run_kernel(struct sim_op *op)
{
	struct crcuda_sim_block blk = {
	    .abi_version = CRCUDA_SIM_KERNEL_ABI_VERSION,
	    .kernel_name = op->kernel.func->name,
	    .grid_dim = op->kernel.grid,
	    .block_dim = op->kernel.block,
	    .dynamic_shared_bytes = op->kernel.shared_bytes,
	    .params = op->kernel.param_ptrs,
	    .param_count = op->kernel.param_count,
	    .global = host_kernel_global,
	    .sim_private = op->kernel.func,
	    .trap = sim_trap,
	    .resource = sim_resource,
	    .set_conditional = sim_set_conditional,
	    .launch_private = op->kernel.conds,
	};
	void *shared = op->kernel.shared_bytes ? malloc(op->kernel.shared_bytes) : NULL;

	blk.dynamic_shared = shared;
	for (unsigned z = 0; z < blk.grid_dim.z; z++)
		for (unsigned y = 0; y < blk.grid_dim.y; y++)
			for (unsigned x = 0; x < blk.grid_dim.x; x++) {
				blk.block_idx = (struct crcuda_sim_dim3){x, y, z};
				/* A fault stops the kernel, as it stops a grid on a GPU. */
				if (!atomic_load(&sim_sticky_error))
					op->kernel.host_fn(&blk);
			}
	free(shared);
}

static void run_set(struct sim_op *op)
{
	for (size_t row = 0; row < op->set.rows; row++) {
		uint8_t *dst = (uint8_t *)op->set.dst + row * op->set.pitch;

		switch (op->set.elem_size) {
		case 1:
			memset(dst, (int)(op->set.value & 0xff), op->set.count);
			break;
		case 2:
			for (size_t i = 0; i < op->set.count; i++)
				((uint16_t *)dst)[i] = (uint16_t)op->set.value;
			break;
		default:
			for (size_t i = 0; i < op->set.count; i++)
				((uint32_t *)dst)[i] = op->set.value;
			break;
		}
	}
}

static void run_op(struct sim_op *op)
{
	switch (op->kind) {
	case SIM_OP_COPY:
		memmove(op->copy.dst, op->copy.src, op->copy.bytes);
		break;
	case SIM_OP_SET:
		run_set(op);
		break;
	case SIM_OP_KERNEL:
		run_kernel(op);
		free(op->kernel.param_buffer);
		free(op->kernel.param_ptrs);
		sim_conds_unref(op->kernel.conds);
		break;
	case SIM_OP_EVENT_RECORD: {
		struct CUevent_st *e = op->event.event;

		pthread_mutex_lock(&e->st->lock);
		if (op->event.generation > e->st->completed_gen) {
			e->st->completed_gen = op->event.generation;
			clock_gettime(CLOCK_MONOTONIC, &e->st->when);
		}
		pthread_cond_broadcast(&e->st->cond);
		pthread_mutex_unlock(&e->st->lock);
		event_unref(e);
		break;
	}
	case SIM_OP_WAIT_EVENT: {
		struct CUevent_st *e = op->event.event;

		pthread_mutex_lock(&e->st->lock);
		while (e->st->completed_gen < op->event.generation)
			pthread_cond_wait(&e->st->cond, &e->st->lock);
		pthread_mutex_unlock(&e->st->lock);
		event_unref(e);
		break;
	}
	case SIM_OP_WAIT_STREAM: {
		struct CUstream_st *other = op->wait_stream.stream;

		pthread_mutex_lock(&other->lock);
		while (other->completed < op->wait_stream.seq)
			pthread_cond_wait(&other->done_cond, &other->lock);
		pthread_mutex_unlock(&other->lock);
		stream_unref(other);
		break;
	}
	case SIM_OP_HOST_FUNC:
		op->host_func.fn(op->host_func.data);
		break;
	}
}

void sim_op_run(struct sim_op *op)
{
	run_op(op);
	free(op);
}

/* An op dropped without being queued (a failed submission, a captured op). */
void sim_op_free(struct sim_op *op)
{
	switch (op->kind) {
	case SIM_OP_KERNEL:
		free(op->kernel.param_buffer);
		free(op->kernel.param_ptrs);
		sim_conds_unref(op->kernel.conds);
		break;
	case SIM_OP_EVENT_RECORD:
		/* A record that will not run completes anyway, so that nobody waits for it forever. */
		run_op(op);
		break;
	case SIM_OP_WAIT_EVENT:
		event_unref(op->event.event);
		break;
	case SIM_OP_WAIT_STREAM:
		stream_unref(op->wait_stream.stream);
		break;
	default:
		break;
	}
	free(op);
}

static void *stream_worker(void *arg)
{
	struct CUstream_st *s = arg;

	pthread_mutex_lock(&s->lock);
	for (;;) {
		struct sim_op *op;

		while (!s->head && !s->stopping)
			pthread_cond_wait(&s->work_cond, &s->lock);
		if (!s->head)
			break;
		op = s->head;
		s->head = op->next;
		if (!s->head)
			s->tail = NULL;
		if (op->kind == SIM_OP_EVENT_RECORD) {
			/* Under the stream's lock (stream before event is the lock order), so that whoever
			 * sees the event complete also sees the stream reach it, and the reverse, as on a
			 * GPU. */
			run_op(op);
		} else {
			pthread_mutex_unlock(&s->lock);
			run_op(op);
			pthread_mutex_lock(&s->lock);
		}
		s->completed++;
		pthread_cond_broadcast(&s->done_cond);
		free(op);
	}
	pthread_mutex_unlock(&s->lock);
	return NULL;
}

CUresult sim_stream_create(struct CUctx_st *ctx, unsigned flags, int priority, bool legacy,
			   struct CUstream_st **out)
{
	struct CUstream_st *s = calloc(1, sizeof(*s));

	if (!s)
		return CUDA_ERROR_OUT_OF_MEMORY;
	s->magic = SIM_MAGIC_STREAM;
	s->ctx = ctx;
	s->flags = flags;
	s->priority = priority;
	s->is_legacy = legacy;
	s->id = sim_next_id();
	atomic_init(&s->refs, 1);
	pthread_mutex_init(&s->lock, NULL);
	pthread_cond_init(&s->work_cond, NULL);
	pthread_cond_init(&s->done_cond, NULL);
	if (pthread_create(&s->worker, NULL, stream_worker, s)) {
		stream_unref(s);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	if (!legacy) {
		pthread_mutex_lock(&sim_lock);
		s->next_in_ctx = ctx->streams;
		ctx->streams = s;
		pthread_mutex_unlock(&sim_lock);
	}
	*out = s;
	return CUDA_SUCCESS;
}

/* Drains the stream, stops its worker and drops it (the struct lives on while waits hold it). */
void sim_stream_destroy(struct CUstream_st *s)
{
	sim_capture_stream_gone(s);
	pthread_mutex_lock(&sim_lock);
	for (struct CUstream_st **p = &s->ctx->streams; *p; p = &(*p)->next_in_ctx) {
		if (*p == s) {
			*p = s->next_in_ctx;
			break;
		}
	}
	pthread_mutex_unlock(&sim_lock);
	pthread_mutex_lock(&s->lock);
	s->stopping = true;
	pthread_cond_signal(&s->work_cond);
	pthread_mutex_unlock(&s->lock);
	pthread_join(s->worker, NULL);
	s->magic = SIM_MAGIC_DEAD;
	stream_unref(s);
}

/* Appends op and returns its sequence number; the stream's lock is not held on entry. */
static uint64_t stream_enqueue(struct CUstream_st *s, struct sim_op *op)
{
	uint64_t seq;

	op->next = NULL;
	pthread_mutex_lock(&s->lock);
	if (s->tail)
		s->tail->next = op;
	else
		s->head = op;
	s->tail = op;
	seq = ++s->submitted;
	pthread_cond_signal(&s->work_cond);
	pthread_mutex_unlock(&s->lock);
	return seq;
}

/* Queues on s a wait for other's work submitted so far, if any is still pending. */
static void stream_wait_for(struct CUstream_st *s, struct CUstream_st *other)
{
	struct sim_op *wait;
	uint64_t seq;
	bool pending;

	pthread_mutex_lock(&other->lock);
	seq = other->submitted;
	pending = other->completed < seq;
	pthread_mutex_unlock(&other->lock);
	if (!pending)
		return;
	wait = calloc(1, sizeof(*wait));
	if (!wait) {
		/* Degrade to waiting here: slower, still correct. */
		pthread_mutex_lock(&other->lock);
		while (other->completed < seq)
			pthread_cond_wait(&other->done_cond, &other->lock);
		pthread_mutex_unlock(&other->lock);
		return;
	}
	atomic_fetch_add(&other->refs, 1);
	wait->kind = SIM_OP_WAIT_STREAM;
	wait->wait_stream.stream = other;
	wait->wait_stream.seq = seq;
	stream_enqueue(s, wait);
}

/* Queues op (owning it, also on failure); *seq (may be NULL) gets its sequence number, 0 when the
 * stream captures and the op became a graph node (nothing to wait for). */
static CUresult stream_submit(struct CUstream_st *s, struct sim_op *op, uint64_t *seq)
{
	struct CUctx_st *ctx = s->ctx;
	CUresult res;

	if (seq)
		*seq = 0;
	if (atomic_load(&s->capturing) && sim_capture_take(s, op, &res))
		return res;
	if (s->is_legacy) {
		/* Captured work never takes part in the legacy stream's implicit waits; work on the
		 * legacy stream while a blocking stream captures is an error, as natively. */
		res = sim_capture_check_legacy(ctx);
		if (res != CUDA_SUCCESS) {
			sim_op_free(op);
			return res;
		}
		pthread_mutex_lock(&sim_lock);
		for (struct CUstream_st *t = ctx->streams; t; t = t->next_in_ctx)
			if (!(t->flags & CU_STREAM_NON_BLOCKING))
				stream_wait_for(s, t);
		pthread_mutex_unlock(&sim_lock);
	} else if (!(s->flags & CU_STREAM_NON_BLOCKING)) {
		stream_wait_for(s, ctx->legacy_stream);
	}
	if (seq)
		*seq = stream_enqueue(s, op);
	else
		stream_enqueue(s, op);
	return CUDA_SUCCESS;
}

CUresult sim_stream_submit(struct CUstream_st *s, struct sim_op *op)
{
	return stream_submit(s, op, NULL);
}

static void stream_wait_seq(struct CUstream_st *s, uint64_t seq)
{
	pthread_mutex_lock(&s->lock);
	while (s->completed < seq)
		pthread_cond_wait(&s->done_cond, &s->lock);
	pthread_mutex_unlock(&s->lock);
}

void sim_stream_wait_idle(struct CUstream_st *s)
{
	uint64_t seq;

	pthread_mutex_lock(&s->lock);
	seq = s->submitted;
	pthread_mutex_unlock(&s->lock);
	stream_wait_seq(s, seq);
}

void sim_ctx_wait_idle(struct CUctx_st *ctx)
{
	struct CUstream_st *streams[256];
	unsigned count = 0;
	bool more;

	/* Snapshot under the lock (holding references), wait outside it. */
	do {
		more = false;
		pthread_mutex_lock(&sim_lock);
		for (struct CUstream_st *t = ctx->streams; t; t = t->next_in_ctx) {
			if (count == sizeof(streams) / sizeof(streams[0])) {
				more = true;
				break;
			}
			atomic_fetch_add(&t->refs, 1);
			streams[count++] = t;
		}
		pthread_mutex_unlock(&sim_lock);
		for (unsigned i = 0; i < count; i++) {
			sim_stream_wait_idle(streams[i]);
			stream_unref(streams[i]);
		}
		count = 0;
	} while (more);
	if (ctx->legacy_stream)
		sim_stream_wait_idle(ctx->legacy_stream);
}

/* The calling thread's per-thread default stream in ctx, created on first use. */
static CUresult per_thread_stream(struct CUctx_st *ctx, struct CUstream_st **out)
{
	pthread_t self = pthread_self();
	struct CUstream_st *s;
	CUresult res;

	pthread_mutex_lock(&sim_lock);
	for (s = ctx->streams; s; s = s->next_in_ctx)
		if (s->is_per_thread && pthread_equal(s->worker_owner, self))
			break;
	pthread_mutex_unlock(&sim_lock);
	if (s) {
		*out = s;
		return CUDA_SUCCESS;
	}
	/* The per-thread stream is a blocking stream: it synchronises with the legacy one. */
	res = sim_stream_create(ctx, CU_STREAM_DEFAULT, 0, false, &s);
	if (res != CUDA_SUCCESS)
		return res;
	s->is_per_thread = true;
	s->worker_owner = self;
	*out = s;
	return CUDA_SUCCESS;
}

CUresult sim_stream_resolve(CUstream handle, bool per_thread, struct CUstream_st **out)
{
	struct CUctx_st *ctx;
	CUresult res;

	if (handle == CU_STREAM_LEGACY || (!handle && !per_thread) || handle == CU_STREAM_PER_THREAD ||
	    !handle) {
		res = sim_ctx_require(&ctx);
		if (res != CUDA_SUCCESS)
			return res;
		if (handle == CU_STREAM_PER_THREAD || (!handle && per_thread))
			return per_thread_stream(ctx, out);
		*out = ctx->legacy_stream;
		return CUDA_SUCCESS;
	}
	if (handle->magic != SIM_MAGIC_STREAM || !handle->ctx->active)
		return CUDA_ERROR_INVALID_HANDLE;
	*out = handle;
	return CUDA_SUCCESS;
}

/* ---- stream entry points ---- */

static CUresult stream_create(CUstream *ph, unsigned flags, int priority)
{
	struct CUctx_st *ctx;
	CUresult res;

	if (!ph || (flags & ~(unsigned)CU_STREAM_NON_BLOCKING))
		return CUDA_ERROR_INVALID_VALUE;
	res = sim_ctx_require(&ctx);
	if (res != CUDA_SUCCESS)
		return res;
	if (priority > SIM_PRIORITY_LEAST)
		priority = SIM_PRIORITY_LEAST;
	if (priority < SIM_PRIORITY_GREATEST)
		priority = SIM_PRIORITY_GREATEST;
	return sim_stream_create(ctx, flags, priority, false, ph);
}

CUresult cuStreamCreate(CUstream *ph, unsigned int flags)
{
	SIM_ENTER(cuStreamCreate);
	return stream_create(ph, flags, 0);
}

CUresult cuStreamCreateWithPriority(CUstream *ph, unsigned int flags, int priority)
{
	SIM_ENTER(cuStreamCreateWithPriority);
	return stream_create(ph, flags, priority);
}

CUresult cuStreamDestroy_v2(CUstream h)
{
	SIM_ENTER(cuStreamDestroy_v2);
	if (!h || h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD || h->magic != SIM_MAGIC_STREAM ||
	    h->is_per_thread)
		return CUDA_ERROR_INVALID_HANDLE;
	sim_stream_destroy(h);
	return CUDA_SUCCESS;
}

static CUresult stream_synchronize(bool pt, CUstream h)
{
	struct CUstream_st *s;
	CUresult res = sim_stream_resolve(h, pt, &s);

	/* Waiting for a capturing stream is not allowed (and would wait for nothing). */
	if (res == CUDA_SUCCESS && atomic_load(&s->capturing))
		res = sim_capture_check_sync(s);
	if (res == CUDA_SUCCESS)
		sim_stream_wait_idle(s);
	return res == CUDA_SUCCESS && atomic_load(&sim_sticky_error)
		   ? (CUresult)atomic_load(&sim_sticky_error)
		   : res;
}
SIM_STREAM_API_PAIR(cuStreamSynchronize, cuStreamSynchronize_ptsz, stream_synchronize, (CUstream h), h)

static CUresult stream_query(bool pt, CUstream h)
{
	struct CUstream_st *s;
	CUresult res = sim_stream_resolve(h, pt, &s);
	bool idle;

	if (res == CUDA_SUCCESS && atomic_load(&s->capturing))
		res = sim_capture_check_sync(s);
	if (res != CUDA_SUCCESS)
		return res;
	pthread_mutex_lock(&s->lock);
	idle = s->completed == s->submitted;
	pthread_mutex_unlock(&s->lock);
	return idle ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}
SIM_STREAM_API_PAIR(cuStreamQuery, cuStreamQuery_ptsz, stream_query, (CUstream h), h)

static CUresult stream_wait_event(bool pt, CUstream h, CUevent e, unsigned flags)
{
	struct CUstream_st *s;
	CUresult res = sim_stream_resolve(h, pt, &s);
	struct sim_op *op;
	uint64_t gen;

	if (res != CUDA_SUCCESS)
		return res;
	if (!e || e->magic != SIM_MAGIC_EVENT)
		return CUDA_ERROR_INVALID_HANDLE;
	if (flags & ~(unsigned)CU_EVENT_WAIT_EXTERNAL)
		return CUDA_ERROR_INVALID_VALUE;
	if (sim_capture_wait_event(s, e, flags, &res))
		return res;
	pthread_mutex_lock(&e->st->lock);
	gen = e->st->recorded_gen;
	pthread_mutex_unlock(&e->st->lock);
	op = calloc(1, sizeof(*op));
	if (!op)
		return CUDA_ERROR_OUT_OF_MEMORY;
	atomic_fetch_add(&e->refs, 1);
	op->kind = SIM_OP_WAIT_EVENT;
	op->event.event = e;
	op->event.generation = gen;
	return stream_submit(s, op, NULL);
}
SIM_STREAM_API_PAIR(cuStreamWaitEvent, cuStreamWaitEvent_ptsz, stream_wait_event,
		    (CUstream h, CUevent e, unsigned int flags), h, e, flags)

static CUresult stream_get_flags(bool pt, CUstream h, unsigned *flags)
{
	struct CUstream_st *s;
	CUresult res = sim_stream_resolve(h, pt, &s);

	if (res == CUDA_SUCCESS && !flags)
		res = CUDA_ERROR_INVALID_VALUE;
	if (res == CUDA_SUCCESS)
		*flags = s->flags;
	return res;
}
SIM_STREAM_API_PAIR(cuStreamGetFlags, cuStreamGetFlags_ptsz, stream_get_flags,
		    (CUstream h, unsigned int *flags), h, flags)

static CUresult stream_get_priority(bool pt, CUstream h, int *priority)
{
	struct CUstream_st *s;
	CUresult res = sim_stream_resolve(h, pt, &s);

	if (res == CUDA_SUCCESS && !priority)
		res = CUDA_ERROR_INVALID_VALUE;
	if (res == CUDA_SUCCESS)
		*priority = s->priority;
	return res;
}
SIM_STREAM_API_PAIR(cuStreamGetPriority, cuStreamGetPriority_ptsz, stream_get_priority,
		    (CUstream h, int *priority), h, priority)

static CUresult stream_get_ctx(bool pt, CUstream h, CUcontext *pctx)
{
	struct CUstream_st *s;
	CUresult res = sim_stream_resolve(h, pt, &s);

	if (res == CUDA_SUCCESS && !pctx)
		res = CUDA_ERROR_INVALID_VALUE;
	if (res == CUDA_SUCCESS)
		*pctx = s->ctx;
	return res;
}
SIM_STREAM_API_PAIR(cuStreamGetCtx, cuStreamGetCtx_ptsz, stream_get_ctx, (CUstream h, CUcontext *pctx), h,
		    pctx)

static CUresult stream_get_ctx_v2(bool pt, CUstream h, CUcontext *pctx, CUgreenCtx *pgreen)
{
	CUresult res = stream_get_ctx(pt, h, pctx);

	if (res == CUDA_SUCCESS && pgreen) {
		struct CUctx_st *c = *pctx;

		/* A green context's: the green context, and the device's primary context. */
		*pgreen = c->green;
		if (c->green)
			*pctx = c->base;
	}
	return res;
}

static CUresult stream_get_green_ctx(bool pt, CUstream h, CUgreenCtx *pgreen)
{
	CUcontext ctx;
	CUresult res;

	if (!pgreen)
		return CUDA_ERROR_INVALID_VALUE;
	res = stream_get_ctx(pt, h, &ctx);
	if (res == CUDA_SUCCESS)
		*pgreen = ctx->green;
	return res;
}

CUresult cuStreamGetGreenCtx(CUstream h, CUgreenCtx *pgreen)
{
	SIM_ENTER(cuStreamGetGreenCtx);
	return stream_get_green_ctx(false, h, pgreen);
}
SIM_STREAM_API_PAIR(cuStreamGetCtx_v2, cuStreamGetCtx_v2_ptsz, stream_get_ctx_v2,
		    (CUstream h, CUcontext *pctx, CUgreenCtx *pgreen), h, pctx, pgreen)

static CUresult stream_get_id(bool pt, CUstream h, unsigned long long *id)
{
	struct CUstream_st *s;
	CUresult res = sim_stream_resolve(h, pt, &s);

	if (res == CUDA_SUCCESS && !id)
		res = CUDA_ERROR_INVALID_VALUE;
	if (res == CUDA_SUCCESS)
		*id = s->id;
	return res;
}
SIM_STREAM_API_PAIR(cuStreamGetId, cuStreamGetId_ptsz, stream_get_id, (CUstream h, unsigned long long *id), h,
		    id)

static CUresult stream_get_device(bool pt, CUstream h, CUdevice *dev)
{
	struct CUstream_st *s;
	CUresult res = sim_stream_resolve(h, pt, &s);

	if (res == CUDA_SUCCESS && !dev)
		res = CUDA_ERROR_INVALID_VALUE;
	if (res == CUDA_SUCCESS)
		*dev = s->ctx->dev->ordinal;
	return res;
}
SIM_STREAM_API_PAIR(cuStreamGetDevice, cuStreamGetDevice_ptsz, stream_get_device, (CUstream h, CUdevice *dev),
		    h, dev)

static CUresult launch_host_func(bool pt, CUstream h, CUhostFn fn, void *data)
{
	struct CUstream_st *s;
	CUresult res = sim_stream_resolve(h, pt, &s);
	struct sim_op *op;

	if (res != CUDA_SUCCESS)
		return res;
	if (!fn)
		return CUDA_ERROR_INVALID_VALUE;
	op = calloc(1, sizeof(*op));
	if (!op)
		return CUDA_ERROR_OUT_OF_MEMORY;
	op->kind = SIM_OP_HOST_FUNC;
	op->host_func.fn = fn;
	op->host_func.data = data;
	return stream_submit(s, op, NULL);
}
SIM_STREAM_API_PAIR(cuLaunchHostFunc, cuLaunchHostFunc_ptsz, launch_host_func,
		    (CUstream h, CUhostFn fn, void *data), h, fn, data)

/* ---- events ---- */

CUresult cuEventCreate(CUevent *ph, unsigned int flags)
{
	struct CUevent_st *e;

	SIM_ENTER(cuEventCreate);
	if (!ph ||
	    (flags & ~(unsigned)(CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS)))
		return CUDA_ERROR_INVALID_VALUE;
	if ((flags & CU_EVENT_INTERPROCESS) && !(flags & CU_EVENT_DISABLE_TIMING))
		return CUDA_ERROR_INVALID_VALUE;
	if (!sim_ctx_current())
		return CUDA_ERROR_INVALID_CONTEXT;
	e = calloc(1, sizeof(*e));
	if (!e)
		return CUDA_ERROR_OUT_OF_MEMORY;
	e->magic = SIM_MAGIC_EVENT;
	e->flags = flags;
	atomic_init(&e->refs, 1);
	e->st = &e->own;
	e->shared_fd = -1;
	if (flags & CU_EVENT_INTERPROCESS) {
		e->shared_fd = memfd_create("crcuda-sim-ipc-event", MFD_CLOEXEC);
		if (e->shared_fd < 0 || ftruncate(e->shared_fd, sizeof(*e->st)) ||
		    !(e->st = event_state_map(e->shared_fd, true))) {
			if (e->shared_fd >= 0)
				close(e->shared_fd);
			free(e);
			return CUDA_ERROR_OUT_OF_MEMORY;
		}
	} else {
		pthread_mutex_init(&e->own.lock, NULL);
		pthread_cond_init(&e->own.cond, NULL);
	}
	*ph = e;
	return CUDA_SUCCESS;
}

/* The handle names the exporter's state page: its pid and the descriptor of the page's memfd there,
 * which another process of the same user opens through /proc. */
struct sim_ipc_event_wire {
	char magic[8];
	int32_t pid, fd;
};
static const char sim_ipc_event_magic[8] = "simIPCev";

CUresult cuIpcGetEventHandle(CUipcEventHandle *pHandle, CUevent e)
{
	struct sim_ipc_event_wire w = {.pid = getpid()};

	SIM_ENTER(cuIpcGetEventHandle);
	if (!pHandle)
		return CUDA_ERROR_INVALID_VALUE;
	if (!e || e->magic != SIM_MAGIC_EVENT)
		return CUDA_ERROR_INVALID_HANDLE;
	if (!(e->flags & CU_EVENT_INTERPROCESS) || e->shared_fd < 0)
		return CUDA_ERROR_INVALID_VALUE;
	memcpy(w.magic, sim_ipc_event_magic, sizeof(w.magic));
	w.fd = e->shared_fd;
	memset(pHandle, 0, sizeof(*pHandle));
	memcpy(pHandle->reserved, &w, sizeof(w));
	return CUDA_SUCCESS;
}

CUresult cuIpcOpenEventHandle(CUevent *phEvent, CUipcEventHandle handle)
{
	struct sim_ipc_event_wire w;
	struct CUevent_st *e;
	char path[64];
	struct stat st;
	int fd;

	SIM_ENTER(cuIpcOpenEventHandle);
	memcpy(&w, handle.reserved, sizeof(w));
	if (!phEvent || memcmp(w.magic, sim_ipc_event_magic, sizeof(w.magic)))
		return CUDA_ERROR_INVALID_VALUE;
	if (!sim_ctx_current())
		return CUDA_ERROR_INVALID_CONTEXT;
	/* As the driver: an event handle of this very process is not opened here. */
	if (w.pid == getpid())
		return CUDA_ERROR_INVALID_CONTEXT;
	snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)w.pid, (int)w.fd);
	fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return CUDA_ERROR_INVALID_VALUE; /* the exporter (or its event) is gone */
	if (fstat(fd, &st) || (size_t)st.st_size != sizeof(struct sim_event_state)) {
		close(fd);
		return CUDA_ERROR_INVALID_VALUE;
	}
	e = calloc(1, sizeof(*e));
	if (!e || !(e->st = event_state_map(fd, false))) {
		free(e);
		close(fd);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	e->magic = SIM_MAGIC_EVENT;
	e->flags = CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING;
	atomic_init(&e->refs, 1);
	e->shared_fd = fd;
	*phEvent = e;
	return CUDA_SUCCESS;
}

CUresult cuEventDestroy_v2(CUevent e)
{
	SIM_ENTER(cuEventDestroy_v2);
	if (!e || e->magic != SIM_MAGIC_EVENT)
		return CUDA_ERROR_INVALID_HANDLE;
	e->magic = SIM_MAGIC_DEAD;
	event_unref(e);
	return CUDA_SUCCESS;
}

static CUresult event_record(bool pt, CUevent e, CUstream h, unsigned flags)
{
	struct CUstream_st *s;
	CUresult res;
	struct sim_op *op;

	if (!e || e->magic != SIM_MAGIC_EVENT)
		return CUDA_ERROR_INVALID_HANDLE;
	if (flags & ~(unsigned)CU_EVENT_RECORD_EXTERNAL)
		return CUDA_ERROR_INVALID_VALUE;
	res = sim_stream_resolve(h, pt, &s);
	if (res != CUDA_SUCCESS)
		return res;
	if (sim_capture_event_record(s, e, flags, &res))
		return res;
	op = calloc(1, sizeof(*op));
	if (!op)
		return CUDA_ERROR_OUT_OF_MEMORY;
	atomic_fetch_add(&e->refs, 1);
	op->kind = SIM_OP_EVENT_RECORD;
	op->event.event = e;
	pthread_mutex_lock(&e->st->lock);
	op->event.generation = ++e->st->recorded_gen;
	pthread_mutex_unlock(&e->st->lock);
	return stream_submit(s, op, NULL);
}

static CUresult event_record_default(bool pt, CUevent e, CUstream h)
{
	return event_record(pt, e, h, 0);
}
SIM_STREAM_API_PAIR(cuEventRecord, cuEventRecord_ptsz, event_record_default, (CUevent e, CUstream h), e, h)
SIM_STREAM_API_PAIR(cuEventRecordWithFlags, cuEventRecordWithFlags_ptsz, event_record,
		    (CUevent e, CUstream h, unsigned int flags), e, h, flags)

CUresult cuEventQuery(CUevent e)
{
	bool done;

	SIM_ENTER(cuEventQuery);
	if (!e || e->magic != SIM_MAGIC_EVENT)
		return CUDA_ERROR_INVALID_HANDLE;
	pthread_mutex_lock(&e->st->lock);
	done = e->st->completed_gen >= e->st->recorded_gen;
	pthread_mutex_unlock(&e->st->lock);
	return done ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

CUresult cuEventSynchronize(CUevent e)
{
	SIM_ENTER(cuEventSynchronize);
	if (!e || e->magic != SIM_MAGIC_EVENT)
		return CUDA_ERROR_INVALID_HANDLE;
	pthread_mutex_lock(&e->st->lock);
	for (uint64_t target = e->st->recorded_gen; e->st->completed_gen < target;)
		pthread_cond_wait(&e->st->cond, &e->st->lock);
	pthread_mutex_unlock(&e->st->lock);
	return CUDA_SUCCESS;
}

static CUresult event_elapsed_time(float *ms, CUevent start, CUevent end)
{
	struct timespec t0, t1;
	CUresult res = CUDA_SUCCESS;

	if (!ms)
		return CUDA_ERROR_INVALID_VALUE;
	if (!start || !end || start->magic != SIM_MAGIC_EVENT || end->magic != SIM_MAGIC_EVENT ||
	    (start->flags & CU_EVENT_DISABLE_TIMING) || (end->flags & CU_EVENT_DISABLE_TIMING))
		return CUDA_ERROR_INVALID_HANDLE;
	pthread_mutex_lock(&start->st->lock);
	if (!start->st->completed_gen)
		res = CUDA_ERROR_INVALID_HANDLE;
	else if (start->st->completed_gen < start->st->recorded_gen)
		res = CUDA_ERROR_NOT_READY;
	t0 = start->st->when;
	pthread_mutex_unlock(&start->st->lock);
	pthread_mutex_lock(&end->st->lock);
	if (res == CUDA_SUCCESS && !end->st->completed_gen)
		res = CUDA_ERROR_INVALID_HANDLE;
	else if (res == CUDA_SUCCESS && end->st->completed_gen < end->st->recorded_gen)
		res = CUDA_ERROR_NOT_READY;
	t1 = end->st->when;
	pthread_mutex_unlock(&end->st->lock);
	if (res == CUDA_SUCCESS)
		*ms =
		    (float)((double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6);
	return res;
}

CUresult cuEventElapsedTime_v2(float *ms, CUevent start, CUevent end)
{
	SIM_ENTER(cuEventElapsedTime_v2);
	return event_elapsed_time(ms, start, end);
}

CUresult cuEventElapsedTime(float *ms, CUevent start, CUevent end)
{
	SIM_ENTER(cuEventElapsedTime);
	return event_elapsed_time(ms, start, end);
}

/* ---- copies and memsets ---- */

/* Queues a copy; waits for it when synchronous, or when host memory is pageable (the driver
 * stages those copies before returning, so the caller may reuse the buffer at once). */
static CUresult submit_copy(bool pt, CUstream h, void *dst, const void *src, size_t bytes, bool async,
			    bool pageable)
{
	struct CUstream_st *s;
	CUresult res = sim_stream_resolve(h, pt, &s);
	struct sim_op *op;
	uint64_t seq;

	if (res == CUDA_SUCCESS && !async)
		res = sim_capture_check_sync(s);
	if (res != CUDA_SUCCESS)
		return res;
	if (!bytes)
		return CUDA_SUCCESS;
	op = calloc(1, sizeof(*op));
	if (!op)
		return CUDA_ERROR_OUT_OF_MEMORY;
	op->kind = SIM_OP_COPY;
	op->copy.dst = dst;
	op->copy.src = src;
	op->copy.bytes = bytes;
	res = stream_submit(s, op, &seq);
	if (res == CUDA_SUCCESS && (!async || pageable))
		stream_wait_seq(s, seq); /* seq 0 (captured): nothing to wait for */
	return res;
}

static bool host_side_pageable(const void *host, size_t bytes)
{
	return !sim_mem_is_pinned_host(host, bytes);
}

static CUresult memcpy_htod(bool pt, CUstream h, CUdeviceptr dst, const void *src, size_t bytes, bool async)
{
	CUresult res;

	if (!bytes)
		return CUDA_SUCCESS;
	if (!src)
		return CUDA_ERROR_INVALID_VALUE;
	res = sim_mem_check_device(dst, bytes, true);
	if (res != CUDA_SUCCESS)
		return res;
	return submit_copy(pt, h, (void *)(uintptr_t)dst, src, bytes, async, host_side_pageable(src, bytes));
}

static CUresult memcpy_dtoh(bool pt, CUstream h, void *dst, CUdeviceptr src, size_t bytes, bool async)
{
	CUresult res;

	if (!bytes)
		return CUDA_SUCCESS;
	if (!dst)
		return CUDA_ERROR_INVALID_VALUE;
	res = sim_mem_check_device(src, bytes, false);
	if (res != CUDA_SUCCESS)
		return res;
	return submit_copy(pt, h, dst, (const void *)(uintptr_t)src, bytes, async,
			   host_side_pageable(dst, bytes));
}

static CUresult memcpy_dtod(bool pt, CUstream h, CUdeviceptr dst, CUdeviceptr src, size_t bytes, bool async)
{
	CUresult res;

	if (!bytes)
		return CUDA_SUCCESS;
	res = sim_mem_check_device(dst, bytes, true);
	if (res == CUDA_SUCCESS)
		res = sim_mem_check_device(src, bytes, false);
	if (res != CUDA_SUCCESS)
		return res;
	return submit_copy(pt, h, (void *)(uintptr_t)dst, (const void *)(uintptr_t)src, bytes, async, false);
}

/* Unified addressing: each side is device memory or host memory by its address. */
static CUresult memcpy_unified(bool pt, CUstream h, CUdeviceptr dst, CUdeviceptr src, size_t bytes,
			       bool async)
{
	CUresult res;
	bool pageable;

	if (!bytes)
		return CUDA_SUCCESS;
	res = sim_mem_check_any(dst, bytes, true);
	if (res == CUDA_SUCCESS)
		res = sim_mem_check_any(src, bytes, false);
	if (res != CUDA_SUCCESS)
		return res;
	pageable = !sim_mem_find(dst, bytes, NULL) || !sim_mem_find(src, bytes, NULL);
	return submit_copy(pt, h, (void *)(uintptr_t)dst, (const void *)(uintptr_t)src, bytes, async,
			   pageable);
}

static CUresult htod_sync(bool pt, CUdeviceptr dst, const void *src, size_t n)
{
	return memcpy_htod(pt, NULL, dst, src, n, false);
}
static CUresult dtoh_sync(bool pt, void *dst, CUdeviceptr src, size_t n)
{
	return memcpy_dtoh(pt, NULL, dst, src, n, false);
}
static CUresult dtod_sync(bool pt, CUdeviceptr dst, CUdeviceptr src, size_t n)
{
	return memcpy_dtod(pt, NULL, dst, src, n, false);
}
static CUresult unified_sync(bool pt, CUdeviceptr dst, CUdeviceptr src, size_t n)
{
	return memcpy_unified(pt, NULL, dst, src, n, false);
}
static CUresult htod_async(bool pt, CUdeviceptr dst, const void *src, size_t n, CUstream h)
{
	return memcpy_htod(pt, h, dst, src, n, true);
}
static CUresult dtoh_async(bool pt, void *dst, CUdeviceptr src, size_t n, CUstream h)
{
	return memcpy_dtoh(pt, h, dst, src, n, true);
}
static CUresult dtod_async(bool pt, CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream h)
{
	return memcpy_dtod(pt, h, dst, src, n, true);
}
static CUresult unified_async(bool pt, CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream h)
{
	return memcpy_unified(pt, h, dst, src, n, true);
}

SIM_STREAM_API_PAIR(cuMemcpyHtoD_v2, cuMemcpyHtoD_v2_ptds, htod_sync,
		    (CUdeviceptr dst, const void *src, size_t bytes), dst, src, bytes)
SIM_STREAM_API_PAIR(cuMemcpyDtoH_v2, cuMemcpyDtoH_v2_ptds, dtoh_sync,
		    (void *dst, CUdeviceptr src, size_t bytes), dst, src, bytes)
SIM_STREAM_API_PAIR(cuMemcpyDtoD_v2, cuMemcpyDtoD_v2_ptds, dtod_sync,
		    (CUdeviceptr dst, CUdeviceptr src, size_t bytes), dst, src, bytes)
SIM_STREAM_API_PAIR(cuMemcpy, cuMemcpy_ptds, unified_sync, (CUdeviceptr dst, CUdeviceptr src, size_t bytes),
		    dst, src, bytes)
SIM_STREAM_API_PAIR(cuMemcpyHtoDAsync_v2, cuMemcpyHtoDAsync_v2_ptsz, htod_async,
		    (CUdeviceptr dst, const void *src, size_t bytes, CUstream h), dst, src, bytes, h)
SIM_STREAM_API_PAIR(cuMemcpyDtoHAsync_v2, cuMemcpyDtoHAsync_v2_ptsz, dtoh_async,
		    (void *dst, CUdeviceptr src, size_t bytes, CUstream h), dst, src, bytes, h)
SIM_STREAM_API_PAIR(cuMemcpyDtoDAsync_v2, cuMemcpyDtoDAsync_v2_ptsz, dtod_async,
		    (CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream h), dst, src, bytes, h)
SIM_STREAM_API_PAIR(cuMemcpyAsync, cuMemcpyAsync_ptsz, unified_async,
		    (CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream h), dst, src, bytes, h)

/* 2D copies, row by row over the unified copy (crcuda/copy2d.h). */
struct copy2d_on {
	bool pt, async;
	CUstream h;
};

static CUresult copy2d_row(uint64_t dst, uint64_t src, size_t bytes, bool last, void *arg)
{
	const struct copy2d_on *on = arg;

	return memcpy_unified(on->pt, on->h, dst, src, bytes, on->async || !last);
}

/* Into a sparse array: the bytes bound for unmapped tiles are dropped; the rest goes asynchronously,
 * a synchronous copy waiting for the stream at the end. */
struct sparse_on {
	bool pt;
	CUstream h;
	CUarray a;
};

static CUresult sparse_row(uint64_t dst, uint64_t src, size_t bytes, bool last, void *arg)
{
	const struct sparse_on *on = arg;
	CUresult res = CUDA_SUCCESS;

	(void)last;
	while (bytes && res == CUDA_SUCCESS) {
		size_t run;
		bool mapped;

		sim_array_sparse_run(on->a, dst, bytes, &run, &mapped);
		if (mapped)
			res = memcpy_unified(on->pt, on->h, dst, src, run, true);
		dst += run;
		src += run;
		bytes -= run;
	}
	return res;
}

CUresult sim_copy3d(bool pt, const CUDA_MEMCPY3D *p, CUstream h, bool async)
{
	struct copy2d_on on = {pt, async, h};
	CUDA_MEMCPY3D linear;
	CUresult res;

	if (!crc_copy3d_has_array(p))
		return crc_copy3d_rows(p, copy2d_row, &on);
	res = sim_array_resolve(p, &linear);
	if (res == CUDA_SUCCESS && p->dstMemoryType == CU_MEMORYTYPE_ARRAY && sim_array_sparse(p->dstArray)) {
		struct sparse_on so = {pt, h, p->dstArray};

		res = crc_copy3d_rows(&linear, sparse_row, &so);
		return res == CUDA_SUCCESS && !async ? stream_synchronize(pt, h) : res;
	}
	return res == CUDA_SUCCESS ? crc_copy3d_rows(&linear, copy2d_row, &on) : res;
}

static CUresult copy2d(bool pt, const CUDA_MEMCPY2D *p, CUstream h, bool async)
{
	struct copy2d_on on = {pt, async, h};
	CUDA_MEMCPY3D p3;

	if (!p || (p->srcMemoryType != CU_MEMORYTYPE_ARRAY && p->dstMemoryType != CU_MEMORYTYPE_ARRAY))
		return crc_copy2d_rows(p, copy2d_row, &on);
	p3 = crc_copy2d_as_3d(p);
	return sim_copy3d(pt, &p3, h, async);
}

static CUresult copy2d_sync(bool pt, const CUDA_MEMCPY2D *p)
{
	return copy2d(pt, p, NULL, false);
}

static CUresult copy2d_async(bool pt, const CUDA_MEMCPY2D *p, CUstream h)
{
	return copy2d(pt, p, h, true);
}

static CUresult copy3d_sync(bool pt, const CUDA_MEMCPY3D *p)
{
	return sim_copy3d(pt, p, NULL, false);
}

static CUresult copy3d_async(bool pt, const CUDA_MEMCPY3D *p, CUstream h)
{
	return sim_copy3d(pt, p, h, true);
}

static CUresult batch_v2(bool pt, CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count,
			 CUmemcpyAttributes *attrs, size_t *idxs, size_t nattrs, CUstream h)
{
	struct copy2d_on on = {pt, true, h};

	return crc_copy_batch(dsts, srcs, sizes, count, attrs, idxs, nattrs, h, copy2d_row, &on, NULL);
}

static CUresult batch_v1(bool pt, CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count,
			 CUmemcpyAttributes *attrs, size_t *idxs, size_t nattrs, size_t *fail, CUstream h)
{
	struct copy2d_on on = {pt, true, h};

	return crc_copy_batch(dsts, srcs, sizes, count, attrs, idxs, nattrs, h, copy2d_row, &on, fail);
}

SIM_STREAM_API_PAIR(cuMemcpyBatchAsync_v2, cuMemcpyBatchAsync_v2_ptsz, batch_v2,
		    (CUdeviceptr * dsts, CUdeviceptr *srcs, size_t *sizes, size_t count,
		     CUmemcpyAttributes *attrs, size_t *idxs, size_t nattrs, CUstream h),
		    dsts, srcs, sizes, count, attrs, idxs, nattrs, h)
SIM_STREAM_API_PAIR(cuMemcpyBatchAsync, cuMemcpyBatchAsync_ptsz, batch_v1,
		    (CUdeviceptr * dsts, CUdeviceptr *srcs, size_t *sizes, size_t count,
		     CUmemcpyAttributes *attrs, size_t *idxs, size_t nattrs, size_t *fail, CUstream h),
		    dsts, srcs, sizes, count, attrs, idxs, nattrs, fail, h)
static CUresult copy3d_peer(bool pt, const CUDA_MEMCPY3D_PEER *p, CUstream h, bool async)
{
	CUDA_MEMCPY3D c;

	if (!p)
		return CUDA_ERROR_INVALID_VALUE;
	c = crc_copy3d_of_peer(p);
	return sim_copy3d(pt, &c, h, async);
}

static CUresult copy3d_peer_sync(bool pt, const CUDA_MEMCPY3D_PEER *p)
{
	return copy3d_peer(pt, p, NULL, false);
}

static CUresult copy3d_peer_async(bool pt, const CUDA_MEMCPY3D_PEER *p, CUstream h)
{
	return copy3d_peer(pt, p, h, true);
}

struct copy3d_batch_on {
	bool pt;
	CUstream h;
};

static CUresult copy3d_batch_one(const CUDA_MEMCPY3D *p, void *arg)
{
	const struct copy3d_batch_on *on = arg;

	return sim_copy3d(on->pt, p, on->h, true);
}

static CUresult copy3d_batch_v2(bool pt, size_t n, CUDA_MEMCPY3D_BATCH_OP *ops, unsigned long long flags,
				CUstream h)
{
	struct copy3d_batch_on on = {pt, h};

	return crc_copy3d_batch(n, ops, flags, h, cuArray3DGetDescriptor_v2, copy3d_batch_one, &on, NULL);
}

static CUresult copy3d_batch_v1(bool pt, size_t n, CUDA_MEMCPY3D_BATCH_OP *ops, size_t *fail,
				unsigned long long flags, CUstream h)
{
	struct copy3d_batch_on on = {pt, h};

	return crc_copy3d_batch(n, ops, flags, h, cuArray3DGetDescriptor_v2, copy3d_batch_one, &on, fail);
}

SIM_STREAM_API_PAIR(cuMemcpy3DBatchAsync_v2, cuMemcpy3DBatchAsync_v2_ptsz, copy3d_batch_v2,
		    (size_t n, CUDA_MEMCPY3D_BATCH_OP *ops, unsigned long long flags, CUstream h), n, ops,
		    flags, h)
SIM_STREAM_API_PAIR(cuMemcpy3DBatchAsync, cuMemcpy3DBatchAsync_ptsz, copy3d_batch_v1,
		    (size_t n, CUDA_MEMCPY3D_BATCH_OP *ops, size_t *fail, unsigned long long flags,
		     CUstream h),
		    n, ops, fail, flags, h)
SIM_STREAM_API_PAIR(cuMemcpy3DPeer, cuMemcpy3DPeer_ptds, copy3d_peer_sync, (const CUDA_MEMCPY3D_PEER *p), p)
SIM_STREAM_API_PAIR(cuMemcpy3DPeerAsync, cuMemcpy3DPeerAsync_ptsz, copy3d_peer_async,
		    (const CUDA_MEMCPY3D_PEER *p, CUstream h), p, h)
SIM_STREAM_API_PAIR(cuMemcpy3D_v2, cuMemcpy3D_v2_ptds, copy3d_sync, (const CUDA_MEMCPY3D *p), p)
SIM_STREAM_API_PAIR(cuMemcpy3DAsync_v2, cuMemcpy3DAsync_v2_ptsz, copy3d_async,
		    (const CUDA_MEMCPY3D *p, CUstream h), p, h)
SIM_STREAM_API_PAIR(cuMemcpy2D_v2, cuMemcpy2D_v2_ptds, copy2d_sync, (const CUDA_MEMCPY2D *p), p)
SIM_STREAM_API_PAIR(cuMemcpy2DUnaligned_v2, cuMemcpy2DUnaligned_v2_ptds, copy2d_sync,
		    (const CUDA_MEMCPY2D *p), p)
SIM_STREAM_API_PAIR(cuMemcpy2DAsync_v2, cuMemcpy2DAsync_v2_ptsz, copy2d_async,
		    (const CUDA_MEMCPY2D *p, CUstream h), p, h)

static CUresult memset_2d(bool pt, CUstream h, CUdeviceptr dst, size_t pitch, uint32_t value,
			  unsigned elem_size, size_t width, size_t height, bool async)
{
	struct CUstream_st *s;
	struct sim_op *op;
	CUresult res;
	uint64_t seq;
	size_t row_bytes = width * elem_size;

	if (!width || !height)
		return CUDA_SUCCESS;
	if (dst % elem_size || (height > 1 && (pitch < row_bytes || pitch % elem_size)))
		return CUDA_ERROR_INVALID_VALUE;
	res = sim_mem_check_device(dst, (height - 1) * pitch + row_bytes, true);
	if (res == CUDA_SUCCESS)
		res = sim_stream_resolve(h, pt, &s);
	if (res == CUDA_SUCCESS && !async)
		res = sim_capture_check_sync(s);
	if (res != CUDA_SUCCESS)
		return res;
	op = calloc(1, sizeof(*op));
	if (!op)
		return CUDA_ERROR_OUT_OF_MEMORY;
	op->kind = SIM_OP_SET;
	op->set.dst = (void *)(uintptr_t)dst;
	op->set.value = value;
	op->set.elem_size = elem_size;
	op->set.count = width;
	op->set.rows = height;
	op->set.pitch = pitch;
	res = stream_submit(s, op, &seq);
	if (res == CUDA_SUCCESS && !async)
		stream_wait_seq(s, seq);
	return res;
}

static CUresult d8(bool pt, CUdeviceptr dst, unsigned char v, size_t n)
{
	return memset_2d(pt, NULL, dst, 0, v, 1, n, 1, false);
}
static CUresult d16(bool pt, CUdeviceptr dst, unsigned short v, size_t n)
{
	return memset_2d(pt, NULL, dst, 0, v, 2, n, 1, false);
}
static CUresult d32(bool pt, CUdeviceptr dst, unsigned int v, size_t n)
{
	return memset_2d(pt, NULL, dst, 0, v, 4, n, 1, false);
}
static CUresult d8_async(bool pt, CUdeviceptr dst, unsigned char v, size_t n, CUstream h)
{
	return memset_2d(pt, h, dst, 0, v, 1, n, 1, true);
}
static CUresult d16_async(bool pt, CUdeviceptr dst, unsigned short v, size_t n, CUstream h)
{
	return memset_2d(pt, h, dst, 0, v, 2, n, 1, true);
}
static CUresult d32_async(bool pt, CUdeviceptr dst, unsigned int v, size_t n, CUstream h)
{
	return memset_2d(pt, h, dst, 0, v, 4, n, 1, true);
}
static CUresult d2d8(bool pt, CUdeviceptr dst, size_t pitch, unsigned char v, size_t w, size_t hgt)
{
	return memset_2d(pt, NULL, dst, pitch, v, 1, w, hgt, false);
}
static CUresult d2d16(bool pt, CUdeviceptr dst, size_t pitch, unsigned short v, size_t w, size_t hgt)
{
	return memset_2d(pt, NULL, dst, pitch, v, 2, w, hgt, false);
}
static CUresult d2d32(bool pt, CUdeviceptr dst, size_t pitch, unsigned int v, size_t w, size_t hgt)
{
	return memset_2d(pt, NULL, dst, pitch, v, 4, w, hgt, false);
}
static CUresult d2d8_async(bool pt, CUdeviceptr dst, size_t pitch, unsigned char v, size_t w, size_t hgt,
			   CUstream h)
{
	return memset_2d(pt, h, dst, pitch, v, 1, w, hgt, true);
}
static CUresult d2d16_async(bool pt, CUdeviceptr dst, size_t pitch, unsigned short v, size_t w, size_t hgt,
			    CUstream h)
{
	return memset_2d(pt, h, dst, pitch, v, 2, w, hgt, true);
}
static CUresult d2d32_async(bool pt, CUdeviceptr dst, size_t pitch, unsigned int v, size_t w, size_t hgt,
			    CUstream h)
{
	return memset_2d(pt, h, dst, pitch, v, 4, w, hgt, true);
}

SIM_STREAM_API_PAIR(cuMemsetD8_v2, cuMemsetD8_v2_ptds, d8, (CUdeviceptr dst, unsigned char v, size_t n), dst,
		    v, n)
SIM_STREAM_API_PAIR(cuMemsetD16_v2, cuMemsetD16_v2_ptds, d16, (CUdeviceptr dst, unsigned short v, size_t n),
		    dst, v, n)
SIM_STREAM_API_PAIR(cuMemsetD32_v2, cuMemsetD32_v2_ptds, d32, (CUdeviceptr dst, unsigned int v, size_t n),
		    dst, v, n)
SIM_STREAM_API_PAIR(cuMemsetD8Async, cuMemsetD8Async_ptsz, d8_async,
		    (CUdeviceptr dst, unsigned char v, size_t n, CUstream h), dst, v, n, h)
SIM_STREAM_API_PAIR(cuMemsetD16Async, cuMemsetD16Async_ptsz, d16_async,
		    (CUdeviceptr dst, unsigned short v, size_t n, CUstream h), dst, v, n, h)
SIM_STREAM_API_PAIR(cuMemsetD32Async, cuMemsetD32Async_ptsz, d32_async,
		    (CUdeviceptr dst, unsigned int v, size_t n, CUstream h), dst, v, n, h)
SIM_STREAM_API_PAIR(cuMemsetD2D8_v2, cuMemsetD2D8_v2_ptds, d2d8,
		    (CUdeviceptr dst, size_t pitch, unsigned char v, size_t w, size_t hgt), dst, pitch, v, w,
		    hgt)
SIM_STREAM_API_PAIR(cuMemsetD2D16_v2, cuMemsetD2D16_v2_ptds, d2d16,
		    (CUdeviceptr dst, size_t pitch, unsigned short v, size_t w, size_t hgt), dst, pitch, v, w,
		    hgt)
SIM_STREAM_API_PAIR(cuMemsetD2D32_v2, cuMemsetD2D32_v2_ptds, d2d32,
		    (CUdeviceptr dst, size_t pitch, unsigned int v, size_t w, size_t hgt), dst, pitch, v, w,
		    hgt)
SIM_STREAM_API_PAIR(cuMemsetD2D8Async, cuMemsetD2D8Async_ptsz, d2d8_async,
		    (CUdeviceptr dst, size_t pitch, unsigned char v, size_t w, size_t hgt, CUstream h), dst,
		    pitch, v, w, hgt, h)
SIM_STREAM_API_PAIR(cuMemsetD2D16Async, cuMemsetD2D16Async_ptsz, d2d16_async,
		    (CUdeviceptr dst, size_t pitch, unsigned short v, size_t w, size_t hgt, CUstream h), dst,
		    pitch, v, w, hgt, h)
SIM_STREAM_API_PAIR(cuMemsetD2D32Async, cuMemsetD2D32Async_ptsz, d2d32_async,
		    (CUdeviceptr dst, size_t pitch, unsigned int v, size_t w, size_t hgt, CUstream h), dst,
		    pitch, v, w, hgt, h)

/* ---- stream attributes: kept and answered; none changes how the simulated device runs ---- */
static bool stream_attr_ok(CUstreamAttrID attr)
{
	return attr == CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW ||
	       attr == CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY || attr == CU_LAUNCH_ATTRIBUTE_PRIORITY ||
	       attr == CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP || attr == CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN;
}

/* The stream of an attribute call, locked; its error otherwise. */
static CUresult attr_stream(bool pt, CUstream h, CUstreamAttrID attr, const void *v, struct CUstream_st **s)
{
	CUresult res = sim_stream_resolve(h, pt, s);

	if (res != CUDA_SUCCESS)
		return res;
	if (!v || !stream_attr_ok(attr))
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&(*s)->lock);
	return CUDA_SUCCESS;
}

static CUresult stream_set_attr(bool pt, CUstream h, CUstreamAttrID attr, const CUstreamAttrValue *v)
{
	struct CUstream_st *s;
	CUresult res = attr_stream(pt, h, attr, v, &s);

	if (res != CUDA_SUCCESS)
		return res;
	s->attrs[attr] = *v;
	s->attrs_set |= 1u << attr;
	if (attr == CU_LAUNCH_ATTRIBUTE_PRIORITY)
		s->priority = v->priority;
	pthread_mutex_unlock(&s->lock);
	return CUDA_SUCCESS;
}

static CUresult stream_get_attr(bool pt, CUstream h, CUstreamAttrID attr, CUstreamAttrValue *v)
{
	struct CUstream_st *s;
	CUresult res = attr_stream(pt, h, attr, v, &s);

	if (res != CUDA_SUCCESS)
		return res;
	if (s->attrs_set >> attr & 1)
		*v = s->attrs[attr];
	else
		memset(v, 0, sizeof(*v));
	if (attr == CU_LAUNCH_ATTRIBUTE_PRIORITY)
		v->priority = s->priority;
	if (attr == CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY && !(s->attrs_set >> attr & 1))
		v->syncPolicy = CU_SYNC_POLICY_AUTO;
	pthread_mutex_unlock(&s->lock);
	return CUDA_SUCCESS;
}

SIM_STREAM_API_PAIR(cuStreamSetAttribute, cuStreamSetAttribute_ptsz, stream_set_attr,
		    (CUstream h, CUstreamAttrID attr, const CUstreamAttrValue *v), h, attr, v)
SIM_STREAM_API_PAIR(cuStreamGetAttribute, cuStreamGetAttribute_ptsz, stream_get_attr,
		    (CUstream h, CUstreamAttrID attr, CUstreamAttrValue *v), h, attr, v)

/* ---- stream memory operations: a wait or a write of a 32/64-bit word, in stream order ---- */
struct memop {
	bool write, wide;
	uint64_t addr, value;
	unsigned flags;
};

static bool memop_satisfied(const struct memop *m)
{
	uint64_t v = m->wide ? __atomic_load_n((uint64_t *)(uintptr_t)m->addr, __ATOMIC_ACQUIRE)
			     : __atomic_load_n((uint32_t *)(uintptr_t)m->addr, __ATOMIC_ACQUIRE);
	uint64_t want = m->value;

	switch (m->flags & 0xf) {
	case CU_STREAM_WAIT_VALUE_GEQ:
		return m->wide ? (int64_t)(v - want) >= 0 : (int32_t)(uint32_t)(v - want) >= 0;
	case CU_STREAM_WAIT_VALUE_EQ:
		return v == want;
	case CU_STREAM_WAIT_VALUE_AND:
		return (v & want) != 0;
	case CU_STREAM_WAIT_VALUE_NOR:
		return m->wide ? ~(v | want) != 0 : (uint32_t) ~(v | want) != 0;
	default:
		return true;
	}
}

void CUDA_CB sim_memop_run(void *arg)
{
	struct memop *m = arg;

	if (m->write) {
		if (m->wide)
			__atomic_store_n((uint64_t *)(uintptr_t)m->addr, m->value, __ATOMIC_RELEASE);
		else
			__atomic_store_n((uint32_t *)(uintptr_t)m->addr, (uint32_t)m->value,
					 __ATOMIC_RELEASE);
	} else {
		struct timespec ts = {0, 20000};

		while (!memop_satisfied(m))
			nanosleep(&ts, NULL);
	}
	free(m);
}

static CUresult memop_submit(bool pt, CUstream h, bool write, bool wide, CUdeviceptr addr, uint64_t value,
			     unsigned flags)
{
	struct memop *m;
	CUresult res;

	if (!addr || addr % (wide ? 8 : 4) || sim_mem_check_any(addr, wide ? 8 : 4, write) != CUDA_SUCCESS)
		return CUDA_ERROR_INVALID_VALUE;
	if (!wide)
		value &= 0xffffffffu; /* a 32-bit operation's value (a batch's union holds 64 bits) */
	if (!write && (flags & 0xf) > CU_STREAM_WAIT_VALUE_NOR)
		return CUDA_ERROR_INVALID_VALUE;
	m = malloc(sizeof(*m));
	if (!m)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*m = (struct memop){write, wide, addr, value, flags};
	res = launch_host_func(pt, h, sim_memop_run, m);
	if (res != CUDA_SUCCESS)
		free(m);
	return res;
}

void *sim_memop_make(bool write, bool wide, CUdeviceptr addr, uint64_t value, unsigned flags, CUresult *res)
{
	struct memop *m;

	*res = CUDA_ERROR_INVALID_VALUE;
	if (!addr || addr % (wide ? 8 : 4) || sim_mem_check_any(addr, wide ? 8 : 4, write) != CUDA_SUCCESS ||
	    (!write && (flags & 0xf) > CU_STREAM_WAIT_VALUE_NOR))
		return NULL;
	m = malloc(sizeof(*m));
	*res = m ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
	if (m)
		*m = (struct memop){write, wide, addr, wide ? value : value & 0xffffffffu, flags};
	return m;
}

void sim_memop_params(const void *data, CUstreamBatchMemOpParams *out)
{
	const struct memop *m = data;

	memset(out, 0, sizeof(*out));
	if (m->write) {
		out->operation = m->wide ? CU_STREAM_MEM_OP_WRITE_VALUE_64 : CU_STREAM_MEM_OP_WRITE_VALUE_32;
		out->writeValue.address = m->addr;
		out->writeValue.value64 = m->value;
		out->writeValue.flags = m->flags;
	} else {
		out->operation = m->wide ? CU_STREAM_MEM_OP_WAIT_VALUE_64 : CU_STREAM_MEM_OP_WAIT_VALUE_32;
		out->waitValue.address = m->addr;
		out->waitValue.value64 = m->value;
		out->waitValue.flags = m->flags;
	}
}

static CUresult wait32(bool pt, CUstream h, CUdeviceptr addr, cuuint32_t value, unsigned flags)
{
	return memop_submit(pt, h, false, false, addr, value, flags);
}
static CUresult wait64(bool pt, CUstream h, CUdeviceptr addr, cuuint64_t value, unsigned flags)
{
	return memop_submit(pt, h, false, true, addr, value, flags);
}
static CUresult write32(bool pt, CUstream h, CUdeviceptr addr, cuuint32_t value, unsigned flags)
{
	return memop_submit(pt, h, true, false, addr, value, flags);
}
static CUresult write64(bool pt, CUstream h, CUdeviceptr addr, cuuint64_t value, unsigned flags)
{
	return memop_submit(pt, h, true, true, addr, value, flags);
}

SIM_STREAM_API_PAIR(cuStreamWaitValue32_v2, cuStreamWaitValue32_v2_ptsz, wait32,
		    (CUstream h, CUdeviceptr addr, cuuint32_t value, unsigned int flags), h, addr, value,
		    flags)
SIM_STREAM_API_PAIR(cuStreamWaitValue64_v2, cuStreamWaitValue64_v2_ptsz, wait64,
		    (CUstream h, CUdeviceptr addr, cuuint64_t value, unsigned int flags), h, addr, value,
		    flags)
SIM_STREAM_API_PAIR(cuStreamWriteValue32_v2, cuStreamWriteValue32_v2_ptsz, write32,
		    (CUstream h, CUdeviceptr addr, cuuint32_t value, unsigned int flags), h, addr, value,
		    flags)
SIM_STREAM_API_PAIR(cuStreamWriteValue64_v2, cuStreamWriteValue64_v2_ptsz, write64,
		    (CUstream h, CUdeviceptr addr, cuuint64_t value, unsigned int flags), h, addr, value,
		    flags)

/* A batch: its operations in order (crcuda/memops.h). */
struct memop_on {
	bool pt;
	CUstream h;
};

static CUresult memop_wait(void *ctx, bool wide, CUdeviceptr addr, cuuint64_t value, unsigned flags)
{
	const struct memop_on *on = ctx;

	return memop_submit(on->pt, on->h, false, wide, addr, value, flags);
}

static CUresult memop_write(void *ctx, bool wide, CUdeviceptr addr, cuuint64_t value, unsigned flags)
{
	const struct memop_on *on = ctx;

	return memop_submit(on->pt, on->h, true, wide, addr, value, flags);
}

static const struct crc_memop_fns memop_fns = {memop_wait, memop_write};

static CUresult batch_memop(bool pt, CUstream h, unsigned count, CUstreamBatchMemOpParams *ops,
			    unsigned flags)
{
	struct memop_on on = {pt, h};

	return crc_batch_memops(count, ops, flags, &memop_fns, &on);
}

SIM_STREAM_API_PAIR(cuStreamBatchMemOp_v2, cuStreamBatchMemOp_v2_ptsz, batch_memop,
		    (CUstream h, unsigned int count, CUstreamBatchMemOpParams *ops, unsigned int flags), h,
		    count, ops, flags)
