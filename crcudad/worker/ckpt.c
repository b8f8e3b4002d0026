/* Checkpoint of a session: quiesce at a call boundary (the control page, see crcuda/proto.h), copy
 * every allocation and device global into the store through pinned staging buffers (copies in flight
 * on a private stream while another thread hashes and writes), commit. Restore is in restore.c. */
#define LOG_PREFIX "crcudad: "
#include <errno.h>
#include <inttypes.h>
#include <linux/futex.h>
#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "crcuda/errno.h"
#include "crcuda/log.h"
#include "crcuda/modimage.h"
#include "worker.h"

/* After cuda.h: define and call entry points by their ABI names. */
#include "crcuda/cuda_api_undef.h"

#define STAGING_BYTES		 (64u << 20) /* one device-to-host copy */
#define STAGING_BUFS_MIN	 4
#define STAGING_BUFS_MAX	 8
#define STORE_CHUNK		 (4u << 20) /* bytes per store chunk: dedup granularity, a writer's unit */
#define CKPT_WRITERS_DEFAULT_MAX 8	    /* hashing + writing threads (store lanes): half the CPUs, 2..8 */
#define CKPT_WRITERS_MAX	 16
_Static_assert(CKPT_WRITERS_MAX <= CRC_CKPT_LANES_MAX, "a store lane per writer");

double crc_now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- quiesce ------------------------------------------------------------------------------------ */
/* Every live context of the session finishes its work. */
CUresult crc_session_drain(struct crc_session *s)
{
	struct crc_htable *t = &s->tables[CRC_HT_CTX];
	CUresult first = CUDA_SUCCESS;

	for (uint32_t i = 1; i <= t->n; i++) {
		CUresult res;

		if (!t->real[i].ptr)
			continue;
		res = CALL(cuCtxSetCurrent, t->real[i].ptr);
		if (res == CUDA_SUCCESS)
			res = CALL(cuCtxSynchronize);
		if (res != CUDA_SUCCESS && first == CUDA_SUCCESS)
			first = res;
	}
	s->cur_ctx = UINT64_MAX;
	return first;
}

/* A restored client takes its REBIND notice from the socket right after the restore (libcrcuda's
 * watcher thread). Quiesced and dumped before it did, the notice would be dumped with the socket and
 * the checkpoint refused (the plugin checks): give it a moment, until the daemon's bytes on the
 * socket are read (SIOCOUTQ counts what the peer has not taken yet). */
#define REBIND_TAKEN_WAIT_S 3.0
static void wait_notice_taken(struct crc_session *s)
{
	double until = crc_now_s() + REBIND_TAKEN_WAIT_S;
	int unread = 0;

	while (ioctl(s->fd, SIOCOUTQ, &unread) == 0 && unread > 0 && crc_now_s() < until) {
		struct timespec ts = {.tv_nsec = 5 * 1000 * 1000};

		nanosleep(&ts, NULL);
	}
	if (unread > 0)
		pr_warn("session %llu: its client has not taken its restored session yet",
			(unsigned long long)s->id);
}

/* The client stopped at a call boundary (its posted records served): 0, or an error said with
 * crc_session_cmd_done. */
static int park(struct crc_session *s, double deadline, int timeout_ms)
{
	struct crc_session_ctl *ctl = s->chan.sctl;

	if (!s->tcp)
		wait_notice_taken(s);
	if (s->tcp) {
		/* No shared page: the client is asked on its socket (tcp_park.c). */
		int rc = crc_tcp_quiesce(s, deadline, s->cmd_len ? s->cmd_arg : "");

		if (rc)
			return rc;
	} else {
		atomic_store_explicit(&ctl->quiesce_req, 1, memory_order_seq_cst);
		atomic_thread_fence(memory_order_seq_cst);
	}
	for (; ctl;) {
		/* Dekker with the client's gate: after the fence, busy == 0 means any later call sees the
		 * request and parks; what it posted before is in the ring. */
		if (!atomic_load_explicit(&ctl->client_busy, memory_order_seq_cst)) {
			/* Looked at, not taken: a record taken here and not served would be lost (the
			 * next crc_chan_next takes the one after it), a launch the client counts as done. */
			int rc = crc_chan_pending(&s->chan);

			if (rc == CRC_EAGAIN)
				break;
			if (rc) {
				crc_session_cmd_done(s, CRC_EDAEMON, "the client of session %llu went away",
						     (unsigned long long)s->id);
				return CRC_EDAEMON;
			}
			/* A record is waiting: crc_session_serve_one serves it. */
		}
		if (!crc_session_serve_one(s, 10)) {
			crc_session_cmd_done(s, CRC_EDAEMON, "the client of session %llu went away",
					     (unsigned long long)s->id);
			return CRC_EDAEMON;
		}
		if (crc_now_s() > deadline) {
			crc_ckpt_resume(s);
			crc_session_cmd_done(
			    s, CRC_ETIMEDOUT,
			    "session %llu (pid %d) did not reach a call boundary within %d ms",
			    (unsigned long long)s->id, (int)s->peer.pid, timeout_ms > 0 ? timeout_ms : 30000);
			return CRC_ETIMEDOUT;
		}
	}
	return 0;
}

/* ---- collective launches (crcuda/ctl.h, crc_ctl_collective) --------------------------------------- */
#define COLL_TTL_DEFAULT_MS 120000

static void wake_client(struct crc_session_ctl *ctl)
{
	atomic_fetch_add(&ctl->wake_seq, 1);
	syscall(SYS_futex, &ctl->wake_seq, FUTEX_WAKE, 1 << 30, NULL, NULL, 0);
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int crc_coll_control(struct crc_session *s, struct crc_ctl_coll_wire *w, char *why, size_t len)
{
	struct crc_session_ctl *ctl = s->chan.sctl;
	uint64_t until = now_ns() + (uint64_t)(w->ttl_ms ? w->ttl_ms : COLL_TTL_DEFAULT_MS) * 1000000u;

	if (s->tcp || !ctl) {
		snprintf(why, len,
			 "session %llu is a TCP session: its collective launches are not counted (a process "
			 "tree with collectives is checkpointed over unix sockets only)",
			 (unsigned long long)s->id);
		return CRC_ENOTSUP;
	}
	switch (w->action) {
	case CRC_CTL_COLL_HOLD:
		atomic_store(&ctl->coll_until, until);
		atomic_store(&ctl->coll_hold, 1);
		/* seq_cst against the client's add-then-read: a launch either is in this count or sees
		 * the hold (and takes its 1 back; the count may then be one too high, which the cap lets
		 * it reach). */
		atomic_store(&s->coll_at_hold, atomic_load(&ctl->coll_launched));
		break;
	case CRC_CTL_COLL_CAP:
		atomic_store(&ctl->coll_cap, w->target);
		atomic_store(&ctl->coll_until, until);
		atomic_store(&ctl->coll_hold, 0);
		/* A client that launched none takes no part in the collectives (a launcher). */
		atomic_store(&s->coll_target, atomic_load(&s->coll_at_hold) ? w->target : 0);
		wake_client(ctl);
		break;
	case CRC_CTL_COLL_RELEASE:
		atomic_store(&ctl->coll_hold, 0);
		atomic_store(&ctl->coll_cap, 0);
		atomic_store(&ctl->coll_until, 0);
		atomic_store(&s->coll_target, 0);
		wake_client(ctl);
		break;
	default:
		snprintf(why, len, "unknown collective action %u", w->action);
		return CRC_EINVAL;
	}
	w->launched = atomic_load(&ctl->coll_launched);
	return 0;
}

/* A capped session runs on until it has launched its peers' count of collectives, so that the kernels
 * they wait for are launched before anyone drains. */
static int reach_collective_target(struct crc_session *s, double deadline, int timeout_ms)
{
	struct crc_session_ctl *ctl = s->chan.sctl;
	uint64_t target = atomic_load(&s->coll_target);

	while (ctl && target && atomic_load(&ctl->coll_launched) < target &&
	       now_ns() < atomic_load(&ctl->coll_until)) {
		if (!crc_session_serve_one(s, 10)) {
			crc_session_cmd_done(s, CRC_EDAEMON, "the client of session %llu went away",
					     (unsigned long long)s->id);
			return CRC_EDAEMON;
		}
		if (crc_now_s() > deadline) {
			crc_session_cmd_done(
			    s, CRC_ETIMEDOUT,
			    "session %llu (pid %d) launched %llu collective kernels within %d ms, not the "
			    "%llu "
			    "the other processes of its tree launched (a process that stopped taking part in "
			    "their collectives?): the program runs on",
			    (unsigned long long)s->id, (int)s->peer.pid,
			    (unsigned long long)atomic_load(&ctl->coll_launched),
			    timeout_ms > 0 ? timeout_ms : 30000, (unsigned long long)target);
			return CRC_ETIMEDOUT;
		}
	}
	return 0;
}

/* How long a checkpoint waits for a stream capture to end (captures are short: a model step). */
#define CAPTURE_WAIT_S 2.0

int crc_ckpt_quiesce(struct crc_session *s, int timeout_ms)
{
	char why[CRC_CTL_MSG_MAX];
	double deadline = crc_now_s() + (timeout_ms > 0 ? timeout_ms : 30000) / 1000.0,
	       capture_by = crc_now_s() + CAPTURE_WAIT_S;
	CUresult res;
	int rc = reach_collective_target(s, deadline, timeout_ms);

	if (!rc)
		rc = park(s, deadline, timeout_ms);
	if (rc)
		return rc;
	/* Before draining: a synchronise during a stream capture would invalidate the application's
	 * capture (and leave it error 900). The program runs on until its capture ends (served here, a
	 * moment at a time), for CAPTURE_WAIT_S at most; then the checkpoint is refused, untouched. Over
	 * TCP it is refused at once. */
	while (crc_graph_capturing(s, why, sizeof(why))) {
		if (s->tcp || crc_now_s() > capture_by || crc_now_s() > deadline) {
			crc_ckpt_resume(s);
			crc_session_cmd_done(s, CRC_ENOTSUP, "%s", why);
			return CRC_ENOTSUP;
		}
		crc_ckpt_resume(s);
		for (double until = crc_now_s() + 0.02; crc_now_s() < until;) {
			if (!crc_session_serve_one(s, 5)) {
				crc_session_cmd_done(s, CRC_EDAEMON, "the client of session %llu went away",
						     (unsigned long long)s->id);
				return CRC_EDAEMON;
			}
		}
		rc = park(s, deadline, timeout_ms);
		if (rc)
			return rc;
	}
	res = crc_session_drain(s);
	if (res != CUDA_SUCCESS) {
		/* The error belongs to the application: it sees it at its next synchronising call. */
		if (s->deferred == CUDA_SUCCESS)
			s->deferred = res;
		pr_warn("session %llu: draining the streams gave CUDA error %d", (unsigned long long)s->id,
			res);
	}
	s->state = CRC_CTL_QUIESCED;
	pr_info("session %llu: quiesced (%zu journal records)", (unsigned long long)s->id, s->njrec);
	crc_session_cmd_done(s, 0, NULL);
	return 0;
}

void crc_ckpt_resume(struct crc_session *s)
{
	struct crc_session_ctl *ctl = s->chan.sctl;

	/* No notice on the socket: a parked client leaves when it sees the request withdrawn, so nothing
	 * stays unread there for a later park to mistake. */
	if (ctl) {
		atomic_store_explicit(&ctl->quiesce_req, 0, memory_order_seq_cst);
		wake_client(ctl);
	} else if (s->tcp) {
		crc_tcp_resume(s, false);
	}
	s->state = CRC_CTL_RUNNING;
	crc_ipc_thaw(s);
	pr_info("session %llu: resumed", (unsigned long long)s->id);
}

/* ---- checkpoint --------------------------------------------------------------------------------- */
/* A staging buffer filled by one device-to-host copy: a piece of a region, written out as store
 * chunks that the writers take one by one. */
struct copy_job {
	uint32_t region;
	uint64_t region_off; /* where the buffer's bytes start in the region */
	size_t len;
	uint32_t nchunks, taken, left; /* store chunks: all, handed to writers, not written yet */
	struct crc_inc_entry *ent;     /* the chunks' digests, whose store hashes the writers fill in */
};

/* The pipeline: the session thread issues device-to-host copies into free staging buffers and queues
 * them; several writer threads, each with a store lane of its own, take the queued buffers' chunks in
 * order, wait for the copy's event, then hash and write them. A buffer is free again once all its
 * chunks are written. */
struct pipeline {
	struct crc_ckpt *ck;
	CUcontext ctx;
	unsigned nbufs;
	void *buf[STAGING_BUFS_MAX];
	bool pinned;
	CUevent ev[STAGING_BUFS_MAX];	 /* a buffer's copy is done */
	CUevent start[STAGING_BUFS_MAX]; /* ... and began (the copy engine's time, for the stats) */
	double copy_ms;			 /* sum of the copies' device times */
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct copy_job job[STAGING_BUFS_MAX];
	int q[STAGING_BUFS_MAX]; /* queued buffers, in copy order */
	unsigned qhead, qlen;
	bool free_buf[STAGING_BUFS_MAX];
	bool done;
	int err;
	char why[256]; /* the first error's */
};

struct writer {
	struct pipeline *p;
	unsigned lane;
};

/* Records the first error (under p->lock). */
static void pipeline_fail(struct pipeline *p, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void pipeline_fail(struct pipeline *p, int rc, const char *fmt, ...)
{
	va_list ap;

	if (p->err)
		return;
	p->err = rc;
	va_start(ap, fmt);
	vsnprintf(p->why, sizeof(p->why), fmt, ap);
	va_end(ap);
}

static void *writer_main(void *arg)
{
	struct writer *w = arg;
	struct pipeline *p = w->p;

	CALL(cuCtxSetCurrent, p->ctx);
	pthread_mutex_lock(&p->lock);
	for (;;) {
		while (!p->qlen && !p->done)
			pthread_cond_wait(&p->cond, &p->lock);
		if (!p->qlen)
			break;
		int b = p->q[p->qhead];
		struct copy_job *j = &p->job[b];
		uint32_t k = j->taken++;
		bool skip = p->err != 0; /* the checkpoint failed: only free the buffers */

		if (j->taken == j->nchunks) {
			p->qhead = (p->qhead + 1) % p->nbufs;
			p->qlen--;
		}
		pthread_mutex_unlock(&p->lock);

		/* The job stays as it is until its last chunk is written. */
		size_t off = (size_t)k * STORE_CHUNK;
		size_t n = j->len - off < STORE_CHUNK ? j->len - off : STORE_CHUNK;
		CUresult res = skip || !p->pinned ? CUDA_SUCCESS : CALL(cuEventSynchronize, p->ev[b]);
		float ms = 0;
		int rc = 0;

		/* The first writer of a buffer times its copy. */
		if (!k && res == CUDA_SUCCESS && p->pinned && !skip &&
		    CALL(cuEventElapsedTime, &ms, p->start[b], p->ev[b]) != CUDA_SUCCESS)
			ms = 0;

		if (!skip && res == CUDA_SUCCESS)
			rc = crc_ckpt_put_chunk_at(
			    p->ck, w->lane, j->region, (uint32_t)((j->region_off + off) / STORE_CHUNK),
			    (uint8_t *)p->buf[b] + off, n, j->ent ? &j->ent[k].hash : NULL);
		if (!skip && res == CUDA_SUCCESS && !rc)
			crc_progress_add(n);
		pthread_mutex_lock(&p->lock);
		p->copy_ms += ms;
		if (res != CUDA_SUCCESS)
			pipeline_fail(p, CRC_ECUDA, "copying device memory to the host failed: CUDA error %d",
				      res);
		else if (rc)
			pipeline_fail(p, rc, "writing to the store failed: %s", crc_strerror(rc));
		if (!--j->left) {
			p->free_buf[b] = true;
			pthread_cond_broadcast(&p->cond);
		}
	}
	pthread_mutex_unlock(&p->lock);
	return NULL;
}

/* Writer threads (lanes): CRCUDA_CKPT_WRITERS, else half the CPUs between 2 and 8 (on the H200's
 * 16-CPU machine 8 writers put 8 GiB into the page cache 1.6x faster than 4: bench/store --lanes). */
static unsigned ckpt_writers(void)
{
	const char *env = getenv("CRCUDA_CKPT_WRITERS");
	long cpus = sysconf(_SC_NPROCESSORS_ONLN) / 2, n;
	unsigned def = cpus < 2				 ? 2
		       : cpus > CKPT_WRITERS_DEFAULT_MAX ? CKPT_WRITERS_DEFAULT_MAX
							 : (unsigned)cpus;
	char *end;

	if (!env || !*env)
		return def;
	n = strtol(env, &end, 10);
	if (*end || n < 1 || n > CKPT_WRITERS_MAX) {
		pr_warn("CRCUDA_CKPT_WRITERS=%s: not 1..%d, using %u", env, CKPT_WRITERS_MAX, def);
		return def;
	}
	return (unsigned)n;
}

/* The pinned staging buffers, kept from one checkpoint to the next (allocating 512 MiB of pinned
 * memory costs about 0.2 s, which an incremental checkpoint would otherwise pay each time). They
 * belong to the context they were allocated in: freed before the application destroys a context
 * (crc_staging_free from crc_session_execute) and when the session ends. CRCUDA_CKPT_STAGING_KEEP=0
 * frees them after each checkpoint. */
static CUresult staging_get(struct crc_session *s, CUcontext ctx, unsigned n, void **buf)
{
	struct crc_staging *g = &s->staging;
	CUresult res = CUDA_SUCCESS;

	if (g->n && (g->ctx != ctx || g->n < n))
		crc_staging_free(s);
	CALL(cuCtxSetCurrent, ctx);
	while (g->n < n && res == CUDA_SUCCESS) {
		res = crc_pinned_alloc(&g->buf[g->n], STAGING_BYTES);
		if (res == CUDA_SUCCESS)
			g->n++;
	}
	g->ctx = ctx;
	if (res != CUDA_SUCCESS) {
		crc_staging_free(s);
		CALL(cuCtxSetCurrent, ctx);
		return res;
	}
	memcpy(buf, g->buf, n * sizeof(*buf));
	return CUDA_SUCCESS;
}

void crc_staging_free(struct crc_session *s)
{
	struct crc_staging *g = &s->staging;

	if (!g->n)
		return;
	CALL(cuCtxSetCurrent, g->ctx);
	for (unsigned b = 0; b < g->n; b++)
		crc_pinned_free(g->buf[b]);
	g->n = 0;
	g->ctx = NULL;
}

static bool staging_keep(void)
{
	const char *v = getenv("CRCUDA_CKPT_STAGING_KEEP");

	return !v || strcmp(v, "0");
}

struct region_src {
	uint64_t addr, size;
	int dev;	/* the daemon device whose context copies it (crc_addr_group) */
	bool digest;	/* its chunks are digested on the device: copied only when changed */
	uint32_t index; /* the checkpoint's region */
};

/* Bytes of a region to copy: from region_off (a chunk boundary), at addr on the device. */
struct copy_run {
	uint64_t addr, region_off, len;
	uint32_t region;
	struct crc_inc_entry *ent; /* the digests of its chunks, or NULL */
};

static int copy_runs(struct crc_session *s, struct crc_ckpt *ck, CUcontext ctx, const struct copy_run *r,
		     size_t n, double *copy_seconds, char *why, size_t why_len)
{
	struct pipeline p = {.ck = ck, .ctx = ctx, .pinned = true};
	struct writer w[CKPT_WRITERS_MAX];
	pthread_t tids[CKPT_WRITERS_MAX];
	unsigned nwriters = ckpt_writers(), started = 0;
	CUstream st = NULL;
	int rc = 0;
	CUresult res;

	/* Two buffers beyond one per writer keep copies ahead of the writers. */
	p.nbufs = nwriters + 2 < STAGING_BUFS_MIN   ? STAGING_BUFS_MIN
		  : nwriters + 2 > STAGING_BUFS_MAX ? STAGING_BUFS_MAX
						    : nwriters + 2;
	pthread_mutex_init(&p.lock, NULL);
	pthread_cond_init(&p.cond, NULL);
	/* May run on the background drain's thread: the session thread's current context is its own. */
	if (ctx)
		CALL(cuCtxSetCurrent, ctx);
	res = CALL(cuStreamCreate, &st, CU_STREAM_NON_BLOCKING);
	if (res == CUDA_SUCCESS)
		res = staging_get(s, ctx, p.nbufs, p.buf);
	for (unsigned b = 0; b < p.nbufs; b++) {
		p.free_buf[b] = true;
		if (res == CUDA_SUCCESS)
			res = CALL(cuEventCreate, &p.ev[b], CU_EVENT_DEFAULT);
		if (res == CUDA_SUCCESS)
			res = CALL(cuEventCreate, &p.start[b], CU_EVENT_DEFAULT);
	}
	if (res != CUDA_SUCCESS) {
		/* No pinned memory: synchronous copies into plain buffers, still pipelined with writing. */
		pr_warn("session %llu: no pinned staging (CUDA error %d): copying synchronously",
			(unsigned long long)s->id, res);
		p.pinned = false;
		crc_staging_free(s);
		CALL(cuCtxSetCurrent, ctx);
		for (unsigned b = 0; b < p.nbufs; b++) {
			if (p.ev[b])
				CALL(cuEventDestroy_v2, p.ev[b]);
			if (p.start[b])
				CALL(cuEventDestroy_v2, p.start[b]);
			p.ev[b] = p.start[b] = NULL;
			p.buf[b] = malloc(STAGING_BYTES);
			if (!p.buf[b])
				rc = CRC_ENOMEM;
		}
	}
	for (unsigned i = 0; !rc && i < nwriters; i++) {
		w[i] = (struct writer){&p, i};
		if (!crc_thread_create(&tids[started], NULL, writer_main, &w[i]))
			started++;
	}
	if (!rc && !started)
		rc = CRC_ENOMEM;
	if (rc) {
		snprintf(why, why_len, "cannot set up the staging buffers");
		goto out;
	}
	if (started < nwriters)
		pr_warn("session %llu: %u of %u checkpoint writers started", (unsigned long long)s->id,
			started, nwriters);
	for (size_t i = 0; i < n && !rc; i++) {
		for (uint64_t off = 0; off < r[i].len && !rc; off += STAGING_BYTES) {
			size_t len = r[i].len - off < STAGING_BYTES ? r[i].len - off : STAGING_BYTES;
			unsigned b;

			pthread_mutex_lock(&p.lock);
			for (;;) {
				for (b = 0; b < p.nbufs && !p.free_buf[b]; b++)
					;
				if (b < p.nbufs || p.err)
					break;
				pthread_cond_wait(&p.cond, &p.lock);
			}
			rc = p.err;
			if (!rc)
				p.free_buf[b] = false;
			pthread_mutex_unlock(&p.lock);
			if (rc)
				break;
			if (p.pinned) {
				res = CALL(cuEventRecord, p.start[b], st);
				if (res == CUDA_SUCCESS)
					res = CALL(cuMemcpyDtoHAsync_v2, p.buf[b], r[i].addr + off, len, st);
				if (res == CUDA_SUCCESS)
					res = CALL(cuEventRecord, p.ev[b], st);
			} else {
				double t0 = crc_now_s();

				res = CALL(cuMemcpyDtoH_v2, p.buf[b], r[i].addr + off, len);
				pthread_mutex_lock(&p.lock);
				p.copy_ms += (crc_now_s() - t0) * 1e3;
				pthread_mutex_unlock(&p.lock);
			}
			if (res != CUDA_SUCCESS) {
				rc = CRC_ECUDA;
				snprintf(why, why_len,
					 "copying %#" PRIx64 "+%zu from the device failed: CUDA error %d",
					 r[i].addr + off, len, res);
				break;
			}
			uint32_t nchunks = (uint32_t)((len + STORE_CHUNK - 1) / STORE_CHUNK);

			pthread_mutex_lock(&p.lock);
			p.job[b] = (struct copy_job){.region = r[i].region,
						     .region_off = r[i].region_off + off,
						     .len = len,
						     .nchunks = nchunks,
						     .left = nchunks,
						     .ent = r[i].ent ? r[i].ent + off / STORE_CHUNK : NULL};
			p.q[(p.qhead + p.qlen) % p.nbufs] = (int)b;
			p.qlen++;
			pthread_cond_broadcast(&p.cond);
			pthread_mutex_unlock(&p.lock);
		}
	}
	pthread_mutex_lock(&p.lock);
	p.done = true;
	pthread_cond_broadcast(&p.cond);
	pthread_mutex_unlock(&p.lock);
	for (unsigned i = 0; i < started; i++)
		pthread_join(tids[i], NULL);
	if (!rc && p.err) {
		rc = p.err;
		snprintf(why, why_len, "%s", p.why);
	}
out:
	if (p.pinned && !staging_keep())
		crc_staging_free(s);
	for (unsigned b = 0; b < p.nbufs; b++) {
		if (!p.pinned)
			free(p.buf[b]);
		if (p.ev[b])
			CALL(cuEventDestroy_v2, p.ev[b]);
		if (p.start[b])
			CALL(cuEventDestroy_v2, p.start[b]);
	}
	if (st)
		CALL(cuStreamDestroy_v2, st);
	*copy_seconds = p.copy_ms / 1e3;
	pthread_mutex_destroy(&p.lock);
	pthread_cond_destroy(&p.cond);
	return rc;
}

/* ---- incremental: only the chunks that changed since the last checkpoint are copied ---------------- */
void crc_inc_clear(struct crc_inc_table *t)
{
	free(t->e);
	*t = (struct crc_inc_table){0};
}

static int by_digest(const void *a, const void *b)
{
	const struct crc_inc_entry *x = a, *y = b;

	if (x->digest[0] != y->digest[0])
		return x->digest[0] < y->digest[0] ? -1 : 1;
	return x->digest[1] < y->digest[1] ? -1 : x->digest[1] > y->digest[1];
}

static const struct crc_inc_entry *inc_find(const struct crc_inc_table *t, const uint64_t digest[2])
{
	struct crc_inc_entry key = {.digest = {digest[0], digest[1]}};

	return t->n ? bsearch(&key, t->e, t->n, sizeof(key), by_digest) : NULL;
}

/* A checkpoint committed: the next one names what has not changed since this one. */
static void inc_adopt(struct crc_session *s)
{
	crc_inc_clear(&s->inc_prev);
	s->inc_prev = s->inc_next;
	s->inc_next = (struct crc_inc_table){0};
	if (s->inc_prev.n)
		qsort(s->inc_prev.e, s->inc_prev.n, sizeof(*s->inc_prev.e), by_digest);
}

/* Room for n more entries at the end of t (valid until the next call). */
static struct crc_inc_entry *inc_grow(struct crc_inc_table *t, size_t n)
{
	if (t->n + n > t->cap) {
		size_t cap = t->cap ? t->cap : 256;
		struct crc_inc_entry *e;

		while (cap < t->n + n)
			cap *= 2;
		if (!(e = realloc(t->e, cap * sizeof(*e))))
			return NULL;
		t->e = e;
		t->cap = cap;
	}
	return t->e + t->n;
}

/* CRCUDA_CKPT_INCREMENTAL=0 copies everything every time. */
static bool incremental_on(void)
{
	const char *v = getenv("CRCUDA_CKPT_INCREMENTAL");

	return !v || strcmp(v, "0");
}

/* Is a mapping of the application's readable from device dev? (A kernel that read memory it may not
 * would fault the application's context.) */
static bool map_readable(uint64_t addr, int dev)
{
	CUmemLocation loc = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev};
	unsigned long long flags = 0;

	return dev >= 0 && CALL(cuMemGetAccess, &flags, &loc, addr) == CUDA_SUCCESS &&
	       (flags == CU_MEM_ACCESS_FLAGS_PROT_READ || flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
}

static uint64_t chunks_of(uint64_t size)
{
	return (size + STORE_CHUNK - 1) / STORE_CHUNK;
}

/* ---- background drain: the application runs on while its snapshot goes to the store -------------- */
/* A checkpoint asked for with CRC_CTL_CKPT_BACKGROUND copies what changed into free device memory (a
 * snapshot, at device bandwidth) and returns; this thread copies the snapshot to the store while the
 * application runs on, then commits once the commit was asked for (crc_ckpt_commit_session hands it
 * over and answers at once). */
struct bg_group {
	CUcontext ctx;
	CUdeviceptr snap;
	struct copy_run *runs; /* their addresses in the snapshot */
	size_t nruns;
};

struct crc_bg {
	pthread_t tid;
	bool started;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct crc_session *s;
	struct bg_group g[CRC_MAX_DEVICES + 1];
	unsigned ng;
	uint64_t bytes;
	bool drained;	   /* copied (or failed), the snapshots freed */
	bool commit_asked; /* ck, store and the commit's arguments are the thread's */
	bool abort;
	struct crc_ckpt *ck;
	struct crc_store *store;
	char *args;
	size_t args_len;
	bool done;   /* committed or failed: rc, id, why */
	int waiters; /* crc_bg_wait callers still reading it: crc_bg_end frees it after them */
	int rc;
	uint64_t id;
	double drain_seconds;
	char why[CRC_CTL_MSG_MAX];
};

/* CRCUDA_CKPT_SNAPSHOT=0: background checkpoints copy before they return, as others do. */
static bool snapshot_on(void)
{
	const char *v = getenv("CRCUDA_CKPT_SNAPSHOT");

	return !v || strcmp(v, "0");
}

/* Copies the runs into a snapshot of free device memory and hands them to the session's coming
 * background drain: 0, or 1 when there is no room for it (the caller copies them now), or an error. */
static int bg_snapshot(struct crc_session *s, CUcontext ctx, struct copy_run *runs, size_t nruns, char *why,
		       size_t why_len)
{
	struct crc_bg *bg = s->bg;
	uint64_t need = 0, off = 0;
	size_t free_b = 0, total = 0;
	CUdeviceptr snap = 0;
	CUstream st = NULL;
	CUresult res;

	for (size_t i = 0; i < nruns; i++)
		need += runs[i].len;
	if (!need || !snapshot_on() || !bg || bg->ng == sizeof(bg->g) / sizeof(bg->g[0]))
		return 1;
	res = CALL(cuCtxSetCurrent, ctx);
	if (res == CUDA_SUCCESS)
		res = CALL(cuMemGetInfo_v2, &free_b, &total);
	/* Room left for the application beside it: a sixteenth of the device, 256 MiB at least (a
	 * failed allocation of its waits for the drain, see crc_bg_release). */
	uint64_t keep = total / 16 > (256u << 20) ? total / 16 : (256u << 20);

	if (res != CUDA_SUCCESS || free_b < need + keep)
		return 1;
	if (CALL(cuMemAlloc_v2, &snap, need) != CUDA_SUCCESS)
		return 1;
	res = CALL(cuStreamCreate, &st, CU_STREAM_NON_BLOCKING);
	for (size_t i = 0; i < nruns && res == CUDA_SUCCESS; i++) {
		res = CALL(cuMemcpyDtoDAsync_v2, snap + off, runs[i].addr, runs[i].len, st);
		runs[i].addr = snap + off;
		off += runs[i].len;
	}
	if (res == CUDA_SUCCESS)
		res = CALL(cuStreamSynchronize, st);
	if (st)
		CALL(cuStreamDestroy_v2, st);
	if (res != CUDA_SUCCESS) {
		CALL(cuMemFree_v2, snap);
		snprintf(why, why_len, "snapshotting device memory failed: CUDA error %d", res);
		return CRC_ECUDA;
	}
	bg->g[bg->ng++] = (struct bg_group){ctx, snap, runs, nruns};
	bg->bytes += need;
	return 0;
}

static int bg_apply_commit_args(struct crc_ckpt *ck, const char *args, size_t len);

static void *bg_main(void *arg)
{
	struct crc_bg *bg = arg;
	struct crc_session *s = bg->s;
	double t0 = crc_now_s(), secs;
	int rc = 0;

	crc_test_delay("CRCUDA_TEST_DRAIN_DELAY_MS"); /* the application runs first */
	for (unsigned i = 0; i < bg->ng; i++) {
		if (!rc && !bg->abort)
			rc = copy_runs(s, bg->ck, bg->g[i].ctx, bg->g[i].runs, bg->g[i].nruns, &secs, bg->why,
				       sizeof(bg->why));
		CALL(cuCtxSetCurrent, bg->g[i].ctx);
		CALL(cuMemFree_v2, bg->g[i].snap);
	}
	crc_progress_end();
	pthread_mutex_lock(&bg->lock);
	bg->drained = true;
	bg->rc = rc;
	bg->drain_seconds = crc_now_s() - t0;
	pthread_cond_broadcast(&bg->cond);
	while (!bg->commit_asked && !bg->abort)
		pthread_cond_wait(&bg->cond, &bg->lock);
	pthread_mutex_unlock(&bg->lock);
	if (!bg->abort && bg->commit_asked) {
		if (!rc && (rc = bg_apply_commit_args(bg->ck, bg->args, bg->args_len)))
			snprintf(bg->why, sizeof(bg->why), "cannot set the checkpoint's metadata: %s",
				 crc_strerror(rc));
		if (!rc && (rc = crc_ckpt_commit(bg->ck, &bg->id)))
			snprintf(bg->why, sizeof(bg->why), "committing the checkpoint failed: %s",
				 crc_strerror(rc));
		else if (rc)
			crc_ckpt_abort(bg->ck);
		bg->ck = NULL;
		if (!rc) {
			inc_adopt(s);
			pr_info("session %llu: checkpoint %" PRIu64 " committed to %s (%" PRIu64
				" bytes drained in the background in %.3f s)",
				(unsigned long long)s->id, bg->id, s->store_dir, bg->bytes,
				bg->drain_seconds);
		} else {
			pr_warn("session %llu: background checkpoint failed: %s", (unsigned long long)s->id,
				bg->why);
		}
		crc_inc_clear(&s->inc_next);
		crc_store_close(bg->store);
		bg->store = NULL;
	}
	pthread_mutex_lock(&bg->lock);
	bg->rc = rc ? rc : bg->abort ? CRC_ECANCELED : 0;
	if (bg->abort && !bg->why[0])
		snprintf(bg->why, sizeof(bg->why), "the checkpoint was aborted");
	bg->done = true;
	pthread_cond_broadcast(&bg->cond);
	pthread_mutex_unlock(&bg->lock);
	return NULL;
}

/* Ends the session's background checkpoint: committed if it was asked to be, else aborted. Keeps its
 * result for crc_bg_wait. */
void crc_bg_end(struct crc_session *s)
{
	struct crc_bg *bg = s->bg;

	if (!bg)
		return;
	pthread_mutex_lock(&bg->lock);
	if (!bg->commit_asked)
		bg->abort = true;
	pthread_cond_broadcast(&bg->cond);
	pthread_mutex_unlock(&bg->lock);
	if (bg->started) {
		pthread_join(bg->tid, NULL);
	} else {
		for (unsigned i = 0; i < bg->ng; i++) {
			CALL(cuCtxSetCurrent, bg->g[i].ctx);
			CALL(cuMemFree_v2, bg->g[i].snap);
		}
		s->cur_ctx = UINT64_MAX;
	}
	/* A commit-wait woken by the end (or by this, for one never started) may still be reading. */
	pthread_mutex_lock(&bg->lock);
	if (!bg->done) {
		bg->done = true;
		bg->rc = CRC_ECANCELED;
		snprintf(bg->why, sizeof(bg->why), "the checkpoint was abandoned before its copy began");
	}
	pthread_cond_broadcast(&bg->cond);
	while (bg->waiters)
		pthread_cond_wait(&bg->cond, &bg->lock);
	pthread_mutex_unlock(&bg->lock);
	for (unsigned i = 0; i < bg->ng; i++)
		free(bg->g[i].runs);
	/* Handed over by a commit and not committed: the thread's to abort (it did); else the session's. */
	if (bg->commit_asked && bg->ck)
		crc_ckpt_abort(bg->ck);
	if (bg->commit_asked)
		crc_store_close(bg->store);
	free(bg->args);
	pthread_mutex_lock(&s->ctl_lock);
	if (bg->started) {
		s->bg_last_rc = bg->rc;
		s->bg_last_id = bg->id;
		snprintf(s->bg_last_why, sizeof(s->bg_last_why), "%s", bg->why);
	}
	s->bg = NULL;
	pthread_cond_broadcast(&s->ctl_cond);
	pthread_mutex_unlock(&s->ctl_lock);
	pthread_mutex_destroy(&bg->lock);
	pthread_cond_destroy(&bg->cond);
	free(bg);
}

bool crc_bg_release(struct crc_session *s)
{
	struct crc_bg *bg = s->bg;
	bool held;

	if (!bg || !bg->started)
		return false;
	pthread_mutex_lock(&bg->lock);
	held = !bg->drained;
	while (!bg->drained)
		pthread_cond_wait(&bg->cond, &bg->lock);
	pthread_mutex_unlock(&bg->lock);
	return held;
}

int crc_bg_wait(struct crc_session *s, int timeout_ms, uint64_t *id, char *why, size_t why_len)
{
	struct timespec until;
	struct crc_bg *bg;
	int rc;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += (timeout_ms > 0 ? timeout_ms : 600000) / 1000;
	pthread_mutex_lock(&s->ctl_lock);
	bg = s->bg;
	if (bg) {
		/* Its lock is taken under ctl_lock nowhere else: no order to break. */
		pthread_mutex_lock(&bg->lock);
		bg->waiters++;
		pthread_mutex_unlock(&s->ctl_lock);
		while (!bg->done && pthread_cond_timedwait(&bg->cond, &bg->lock, &until) != ETIMEDOUT)
			;
		rc = bg->done ? bg->rc : CRC_ETIMEDOUT;
		*id = bg->id;
		snprintf(why, why_len, "%s",
			 bg->done ? bg->why : "the background checkpoint is still draining");
		bg->waiters--;
		pthread_cond_broadcast(&bg->cond);
		pthread_mutex_unlock(&bg->lock);
		return rc;
	}
	rc = s->bg_last_rc;
	*id = s->bg_last_id;
	snprintf(why, why_len, "%s", s->bg_last_why);
	if (!rc && !*id) {
		rc = CRC_ENOTFOUND;
		snprintf(why, why_len, "session %llu has no background checkpoint",
			 (unsigned long long)s->id);
	}
	pthread_mutex_unlock(&s->ctl_lock);
	return rc;
}

/* The regions of one device (src[i].dev == dev) into the checkpoint: their chunks digested on the
 * device; those the last checkpoint holds are named by hash, the rest copied. */
static int ckpt_group(struct crc_session *s, CUcontext ctx, const struct region_src *src, size_t n, int dev,
		      struct crc_ctl_ckpt_wire *stats, char *why, size_t why_len)
{
	size_t nch = 0, nruns = 0, k = 0;
	uint64_t *desc = NULL, *dig = NULL;
	struct copy_run *runs;
	struct crc_inc_entry *ent = NULL;
	double secs = 0;
	int rc = 0;

	for (size_t i = 0; i < n; i++)
		if (src[i].dev == dev) {
			nruns += src[i].digest ? chunks_of(src[i].size) : 1;
			nch += src[i].digest ? chunks_of(src[i].size) : 0;
		}
	if (!nruns)
		return 0;
	if (!(runs = malloc(nruns * sizeof(*runs))))
		return CRC_ENOMEM;
	if (nch && incremental_on()) {
		desc = malloc(nch * 16);
		dig = malloc(nch * 16);
		ent = inc_grow(&s->inc_next, nch);
		if (!desc || !dig || !ent)
			rc = CRC_ENOMEM;
		for (size_t i = 0; !rc && i < n; i++)
			for (uint64_t off = 0; src[i].dev == dev && src[i].digest && off < src[i].size;
			     off += STORE_CHUNK, k++) {
				desc[2 * k] = src[i].addr + off;
				desc[2 * k + 1] =
				    src[i].size - off < STORE_CHUNK ? src[i].size - off : STORE_CHUNK;
			}
		if (!rc) {
			rc = crc_digest_device(ctx, desc, nch, dig, &secs, why, why_len);
			stats->digest_seconds += secs;
			s->cur_ctx = UINT64_MAX;
			if (rc) {
				/* Then everything is copied: slower, as exact. */
				pr_warn("session %llu: %s: copying all of device memory",
					(unsigned long long)s->id, why);
				why[0] = 0;
				rc = 0;
				ent = NULL;
			}
		}
	}
	nruns = k = 0;
	for (size_t i = 0; !rc && i < n; i++) {
		if (src[i].dev != dev)
			continue;
		if (!ent || !src[i].digest) {
			runs[nruns++] = (struct copy_run){src[i].addr, 0, src[i].size, src[i].index, NULL};
			stats->copied_bytes += src[i].size;
			continue;
		}
		for (uint64_t off = 0; !rc && off < src[i].size; off += STORE_CHUNK, k++) {
			uint64_t len = desc[2 * k + 1];
			const struct crc_inc_entry *old = inc_find(&s->inc_prev, dig + 2 * k);

			ent[k] = (struct crc_inc_entry){.digest = {dig[2 * k], dig[2 * k + 1]}, .len = len};
			/* The restore checks the uploaded bytes against it on the device. */
			if ((rc = crc_ckpt_set_digest_at(s->ckpt, src[i].index, (uint32_t)(off / STORE_CHUNK),
							 dig + 2 * k)))
				break;
			if (old && old->len == len) {
				rc = crc_ckpt_ref_chunk_at(s->ckpt, 0, src[i].index,
							   (uint32_t)(off / STORE_CHUNK), &old->hash, len);
				if (!rc) {
					ent[k].hash = old->hash;
					crc_progress_add(len); /* unchanged: done */
					continue;
				}
				if (rc != CRC_ENOTFOUND)
					break;
				rc = 0;
			}
			/* Changed (or collected since): copied, with the run before it if that ends here. */
			stats->copied_bytes += len;
			if (nruns && runs[nruns - 1].ent && runs[nruns - 1].region == src[i].index &&
			    runs[nruns - 1].region_off + runs[nruns - 1].len == off)
				runs[nruns - 1].len += len;
			else
				runs[nruns++] =
				    (struct copy_run){src[i].addr + off, off, len, src[i].index, ent + k};
		}
	}
	if (rc && !why[0])
		snprintf(why, why_len, "naming unchanged memory in the store failed: %s", crc_strerror(rc));
	/* A background checkpoint snapshots the runs and drains them later (1: no room, copy now). */
	if (!rc && s->bg && !(rc = bg_snapshot(s, ctx, runs, nruns, why, why_len))) {
		stats->snapshot_bytes = s->bg->bytes;
		runs = NULL;
	} else if (rc == 1) {
		rc = 0;
	}
	if (!rc && runs && nruns)
		rc = copy_runs(s, s->ckpt, ctx, runs, nruns, &secs, why, why_len);
	s->cur_ctx = UINT64_MAX;
	stats->copy_seconds += secs;
	if (!rc && ent)
		s->inc_next.n += nch;
	free(runs);
	free(desc);
	free(dig);
	return rc;
}

/* Writes the journal records and images the store does not hold yet (a store session per daemon
 * session and store). */
static int flush_journal(struct crc_session *s, char *why, size_t why_len)
{
	struct crc_jrec_in *in;
	int rc;

	if (!s->store_session) {
		char name[64];

		snprintf(name, sizeof(name), "crcudad session %llu pid %d", (unsigned long long)s->id,
			 (int)s->peer.pid);
		rc = crc_store_session_create(s->store, name, &s->store_session);
		if (rc) {
			snprintf(why, why_len, "cannot create a store session: %s", crc_strerror(rc));
			return rc;
		}
		s->jflushed = s->images_flushed = 0;
		s->journal_seq = 0;
	}
	for (; s->images_flushed < s->nimages; s->images_flushed++) {
		const struct crc_image *im = &s->images[s->images_flushed];
		struct crc_hash h;

		rc = crc_store_blob_put(s->store, s->store_session, im->bytes, im->len, &h);
		if (rc) {
			snprintf(why, why_len, "cannot store a module image: %s", crc_strerror(rc));
			return rc;
		}
	}
	if (s->jflushed == s->njrec)
		return 0;
	in = calloc(s->njrec - s->jflushed, sizeof(*in));
	if (!in)
		return CRC_ENOMEM;
	for (size_t i = s->jflushed; i < s->njrec; i++)
		in[i - s->jflushed] =
		    (struct crc_jrec_in){s->jrec[i].type, s->jrec[i].len, s->jrec[i].payload};
	rc = crc_store_journal_append_batch(s->store, s->store_session, in, s->njrec - s->jflushed,
					    &s->journal_seq);
	free(in);
	if (rc) {
		snprintf(why, why_len, "cannot write the journal: %s", crc_strerror(rc));
		return rc;
	}
	s->jflushed = s->njrec;
	return 0;
}

static struct crc_image *module_image(struct crc_session *s, uint64_t vhandle)
{
	for (size_t i = 0; i < s->nmodimgs; i++)
		if (s->modimgs[i].vhandle == vhandle)
			return &s->images[s->modimgs[i].image];
	return NULL;
}

static bool handle_live(struct crc_session *s, uint64_t vh)
{
	unsigned tag = crc_vhandle_tag(vh);
	uint32_t idx = crc_vhandle_index(vh);

	return tag != CRC_HT_NONE && idx <= s->tables[tag].n && s->tables[tag].real[idx].ptr;
}

/* A device global's address and size in a module or library (virtual handle). */
CUresult crc_global_of(struct crc_session *s, uint64_t vh, const char *name, CUdeviceptr *addr, size_t *size)
{
	unsigned tag = crc_vhandle_tag(vh);
	uint32_t idx = crc_vhandle_index(vh);

	if ((tag != CRC_HT_MODULE && tag != CRC_HT_LIBRARY) || !handle_live(s, vh))
		return CUDA_ERROR_INVALID_HANDLE;
	if (tag == CRC_HT_LIBRARY) {
		CUresult res = CALL(cuLibraryGetGlobal, addr, size, s->tables[tag].real[idx].ptr, name);

		/* A __managed__ variable, where the driver names it only so. */
		if (res != CUDA_SUCCESS)
			res = CALL(cuLibraryGetManaged, addr, size, s->tables[tag].real[idx].ptr, name);
		return res;
	}
	return CALL(cuModuleGetGlobal_v2, addr, size, s->tables[tag].real[idx].ptr, name);
}

/* The context copies run in: the session's first live one. */
CUcontext crc_session_ctx(struct crc_session *s)
{
	struct crc_htable *t = &s->tables[CRC_HT_CTX];

	for (uint32_t i = 1; i <= t->n; i++)
		if (t->real[i].ptr)
			return t->real[i].ptr;
	return NULL;
}

int crc_session_dev_ctxs(struct crc_session *s, CUcontext ctx[CRC_MAX_DEVICES])
{
	struct crc_htable *t = &s->tables[CRC_HT_CTX];
	int n = 0;

	memset(ctx, 0, CRC_MAX_DEVICES * sizeof(*ctx));
	for (uint32_t i = 1; i <= t->n; i++) {
		CUdevice dev;

		if (t->real[i].ptr && CALL(cuCtxSetCurrent, t->real[i].ptr) == CUDA_SUCCESS &&
		    CALL(cuCtxGetDevice, &dev) == CUDA_SUCCESS && dev >= 0 && dev < CRC_MAX_DEVICES &&
		    !ctx[dev]) {
			ctx[dev] = t->real[i].ptr;
			n++;
		}
	}
	s->cur_ctx = UINT64_MAX;
	return n;
}

int crc_addr_group(uint64_t addr, CUcontext ctx[CRC_MAX_DEVICES])
{
	int dev = -1, first = -1;

	for (int d = CRC_MAX_DEVICES - 1; d >= 0; d--)
		if (ctx[d])
			first = d;
	if (CALL(cuPointerGetAttribute, &dev, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, addr) != CUDA_SUCCESS ||
	    dev < 0 || dev >= CRC_MAX_DEVICES || !ctx[dev])
		return first;
	return dev;
}

static int target_sm(void)
{
	const struct crc_dev_info *d = &crcd.proto.devs[0];

	return d->attrs[CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR] * 10 +
	       d->attrs[CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR];
}

/* An image's globals (im->globals): read from its symbol table the first time. 0, or -1 when the image
 * has none to read (then it is not asked again) or memory ran out (asked again next time). */
static int image_globals(struct crc_image *im)
{
	struct crc_modinfo mi;
	size_t n;

	if (im->globals_state)
		return im->globals_state > 0 ? 0 : -1;
	if (crc_modinfo_from_image(im->bytes, im->len, (uint32_t)target_sm(), &mi)) {
		im->globals_state = -1;
		return -1;
	}
	n = mi.nglobals;
	im->globals = calloc(n ? n : 1, sizeof(*im->globals));
	for (size_t g = 0; im->globals && g < n; g++) {
		if (!(im->globals[g] = strdup(mi.globals[g].name))) {
			for (size_t k = 0; k < g; k++)
				free(im->globals[k]);
			free(im->globals);
			im->globals = NULL;
		}
	}
	crc_modinfo_free(&mi);
	if (!im->globals)
		return -1;
	im->nglobals = n;
	im->globals_state = 1;
	return 0;
}

static int by_mark(const void *a, const void *b)
{
	uint64_t x = ((const uint64_t *)a)[0], y = ((const uint64_t *)b)[0];

	return x < y ? -1 : x > y;
}

char *crc_events_recorded(const struct crc_session *s)
{
	const struct crc_htable *t = &s->tables[CRC_HT_EVENT];
	uint64_t(*ev)[2] = NULL; /* {mark, handle} */
	size_t n = 0, off = 0, cap;
	char *list;

	for (uint32_t i = 1; i < s->event_marks_cap && i <= t->n; i++)
		n += s->event_marks[i] && t->real[i].ptr;
	cap = n * 24 + 1;
	list = malloc(cap);
	if (n && !(ev = malloc(n * sizeof(*ev)))) {
		free(list);
		return NULL;
	}
	if (!list)
		return NULL;
	n = 0;
	for (uint32_t i = 1; i < s->event_marks_cap && i <= t->n; i++)
		if (s->event_marks[i] && t->real[i].ptr) {
			ev[n][0] = s->event_marks[i];
			ev[n++][1] = crc_vhandle(CRC_HT_EVENT, i);
		}
	if (n)
		qsort(ev, n, sizeof(*ev), by_mark);
	list[0] = '\0';
	for (size_t k = 0; k < n; k++)
		off += (size_t)snprintf(list + off, cap - off, "%s%#" PRIx64, k ? "," : "", ev[k][1]);
	free(ev);
	return list;
}

int crc_ckpt_run(struct crc_session *s, const char *store_dir, unsigned flags)
{
	struct crc_ctl_ckpt_wire stats = {0};
	struct region_src *src = NULL;
	size_t n = 0, cap = 0;
	char why[CRC_CTL_MSG_MAX] = "", val[256], *graphs = NULL;
	CUcontext ctx = crc_session_ctx(s), dctx[CRC_MAX_DEVICES];
	double t0 = crc_now_s();
	int rc;

	/* The last background checkpoint first: committed (or failed) before this one starts. */
	crc_bg_end(s);
	if (flags & CRC_CTL_CKPT_BACKGROUND) {
		s->bg = calloc(1, sizeof(*s->bg));
		if (s->bg) {
			s->bg->s = s;
			pthread_mutex_init(&s->bg->lock, NULL);
			pthread_cond_init(&s->bg->cond, NULL);
		}
	}
	if (s->force_mismatch) {
		crc_bg_end(s);
		crc_session_cmd_done(s, CRC_EINVAL,
				     "session %llu's journal is incomplete (out of memory earlier)",
				     (unsigned long long)s->id);
		return CRC_EINVAL;
	}
	/* The graphs first: what cannot be described refuses the checkpoint before any copying. A
	 * restored session checkpointed before the client's first call rebuilds its graphs now. */
	if (s->graphs_pending && crc_graph_restore_pending(s))
		snprintf(why, sizeof(why), "the restored session's CUDA graphs could not be rebuilt");
	if (why[0] || crc_ipc_ckpt_check(s, why, sizeof(why)) || crc_managed_flush(s, why, sizeof(why)) ||
	    !(graphs = crc_graph_describe(s, why, sizeof(why)))) {
		crc_session_cmd_done(s, CRC_ENOTSUP, "%s", why);
		return CRC_ENOTSUP;
	}
	if (s->store_dir && strcmp(s->store_dir, store_dir)) {
		free(s->store_dir);
		s->store_dir = NULL;
		s->store_session = 0;
		crc_inc_clear(&s->inc_prev); /* its chunks are in the other store */
	}
	if (!s->store_dir && !(s->store_dir = strdup(store_dir))) {
		free(graphs);
		crc_session_cmd_done(s, CRC_ENOMEM, "out of memory");
		return CRC_ENOMEM;
	}
	rc = crc_store_open(store_dir, CRC_STORE_CREATE, &s->store);
	if (rc) {
		free(graphs);
		crc_session_cmd_done(s, rc, "cannot open the store %s: %s", store_dir, crc_strerror(rc));
		return rc;
	}
	rc = flush_journal(s, why, sizeof(why));
	if (!rc)
		rc = crc_ckpt_begin(s->store, s->store_session, &s->ckpt);
	if (rc) {
		if (!why[0])
			snprintf(why, sizeof(why), "cannot begin a checkpoint: %s", crc_strerror(rc));
		goto fail;
	}
#define ADD_REGION(desc, a, sz)                                                                              \
	do {                                                                                                 \
		uint32_t ri_;                                                                                \
		if (n == cap) {                                                                              \
			cap = cap ? cap * 2 : 64;                                                            \
			src = realloc(src, cap * sizeof(*src));                                              \
			if (!src) {                                                                          \
				rc = CRC_ENOMEM;                                                             \
				goto fail;                                                                   \
			}                                                                                    \
		}                                                                                            \
		rc = crc_ckpt_region_add(s->ckpt, (desc), &ri_);                                             \
		if (rc)                                                                                      \
			goto fail;                                                                           \
		src[n] = (struct region_src){(a), (sz), 0, false, ri_};                                      \
		n++;                                                                                         \
	} while (0)
	/* Allocations: the layer's cuMemAlloc* and the application's own cuMemMap mappings. */
	for (struct crc_alloc *a = s->allocs; a; a = a->next) {
		/* Imported memory is its exporter's, which its own checkpoint copies. */
		if ((a->kind != CRC_ALLOC_MEM && a->kind != CRC_ALLOC_MAP) || a->ipc_imported)
			continue;
		struct crc_region_desc d = {.kind = CRC_REGION_DEVICE_ALLOC, .addr = a->ptr, .size = a->size};

		ADD_REGION(&d, a->ptr, a->size);
		/* Digested where a kernel may read it: the layer's own allocations (mapped and made
		 * accessible by the worker), the application's mappings where it did (checked below). */
		src[n - 1].digest = !(a->ptr % 16);
		stats.allocations++;
		stats.device_bytes += a->size;
	}
	/* Device globals of every live module and library, from the symbol tables of their images. */
	if (ctx)
		CALL(cuCtxSetCurrent, ctx);
	s->cur_ctx = UINT64_MAX;
	for (size_t m = 0; m < s->nmodimgs; m++) {
		uint64_t vh = s->modimgs[m].vhandle;
		struct crc_image *im = module_image(s, vh);

		if (!im || !handle_live(s, vh) || image_globals(im))
			continue; /* unloaded, or no symbol table to read */
		stats.modules++;
		for (size_t g = 0; g < im->nglobals; g++) {
			CUdeviceptr addr = 0;
			size_t size = 0;
			char name[512];

			/* __managed__ ones too: the program's copies (libcrcuda/managed_vars.c) may be
			 * stale, so the daemon's bytes are the ones to keep. */
			if (crc_global_of(s, vh, im->globals[g], &addr, &size) != CUDA_SUCCESS || !size)
				continue;
			snprintf(name, sizeof(name), "%s@%#" PRIx64, im->globals[g], vh);
			struct crc_region_desc d = {.kind = CRC_REGION_DEVICE_GLOBAL,
						    .addr = addr,
						    .size = size,
						    .name = name,
						    .module = im->hash};

			ADD_REGION(&d, addr, size);
			stats.globals++;
			stats.device_bytes += size;
		}
	}
#undef ADD_REGION
	/* Each device's memory is copied in a context of that device: VMM memory is accessible only
	 * where cuMemSetAccess made it so. */
	crc_session_dev_ctxs(s, dctx);
	for (size_t i = 0; i < n; i++) {
		src[i].dev = crc_addr_group(src[i].addr, dctx);
		if (src[i].dev < 0)
			src[i].digest = false;
	}
	for (struct crc_alloc *a = s->allocs; a; a = a->next)
		for (size_t i = 0; a->kind == CRC_ALLOC_MAP && i < n; i++)
			if (src[i].addr == a->ptr && src[i].digest)
				src[i].digest = map_readable(a->ptr, src[i].dev);
	crc_inc_clear(&s->inc_next);
	rc = crc_ckpt_set_lanes(s->ckpt, ckpt_writers());
	crc_progress_start(CRC_CTL_PROGRESS_CHECKPOINT, stats.device_bytes);
	for (int d = -1; d < CRC_MAX_DEVICES && !rc; d++)
		rc = ckpt_group(s, d >= 0 ? dctx[d] : ctx, src, n, d, &stats, why, sizeof(why));
	if (!rc)
		rc = crc_arrays_ckpt(s, s->ckpt, why, sizeof(why));
	if (rc)
		goto fail;
		/* What restore needs besides the journal. */
#define META(k, ...)                                                                                         \
	do {                                                                                                 \
		snprintf(val, sizeof(val), __VA_ARGS__);                                                     \
		rc = crc_ckpt_meta_set(s->ckpt, (k), val);                                                   \
		if (rc)                                                                                      \
			goto fail;                                                                           \
	} while (0)
	META("crcuda.version", "%s", CRCUDA_VERSION); /* the worker that wrote it */
	META("crcuda.session", "%" PRIu64, s->store_session);
	META("crcuda.journal_seq", "%" PRIu64, s->journal_seq);
	META("crcuda.va_base", "%#" PRIx64, s->va_base);
	META("crcuda.va_size", "%#" PRIx64, s->va_size);
	META("crcuda.daemon_session", "%llu", (unsigned long long)s->id);
	META("crcuda.pid", "%d", (int)s->peer.pid);
	/* An error of posted work the application has not yet been told of: it is told after a restore. */
	if (s->deferred != CUDA_SUCCESS)
		META("crcuda.deferred_error", "%d", (int)s->deferred);
	{
		/* The devices the session has contexts on, by the client's ordinal: restore checks --gpu
		 * against them. crcuda.device* are device 0's (older checkpoints have only those). */
		int used = 0;
		char list[CRC_MAX_DEVICES * 4] = "", key[64];
		size_t off = 0;

		for (int d = 0; d < crcd.dev_count && d < CRC_MAX_DEVICES; d++)
			if (dctx[d])
				used = crc_dev_client(s, d) + 1 > used ? crc_dev_client(s, d) + 1 : used;
		if (!used)
			used = 1;
		for (int i = 0; i < used; i++) {
			int bd = crc_dev_backend(s, i);
			char u[33];

			for (int k = 0; k < 16; k++)
				sprintf(u + 2 * k, "%02x", crcd.proto.devs[bd].uuid[k]);
			off += (size_t)snprintf(list + off, sizeof(list) - off, "%s%d", i ? "," : "", bd);
			if (i == 0) {
				META("crcuda.device", "%d", bd);
				META("crcuda.device_name", "%s", crcd.proto.devs[bd].name);
				META("crcuda.device_uuid", "%s", u);
			}
			snprintf(key, sizeof(key), "crcuda.device.%d", i);
			META(key, "%d %s %s", bd, u, crcd.proto.devs[bd].name);
		}
		META("crcuda.devices", "%s", list);
	}
	{
		/* Next index of each handle table: restored handles never reuse a dead one's index. */
		char hv[CRC_HT_COUNT * 12] = "";
		size_t off = 0;

		for (unsigned t = 1; t < CRC_HT_COUNT; t++)
			off += (size_t)snprintf(hv + off, sizeof(hv) - off, "%s%u", t > 1 ? "," : "",
						s->tables[t].n);
		rc = crc_ckpt_meta_set(s->ckpt, "crcuda.handles", hv);
		if (rc)
			goto fail;
	}
	{
		char *events = crc_events_recorded(s);

		rc = events ? crc_ckpt_meta_set(s->ckpt, "crcuda.recorded_events", events) : CRC_ENOMEM;
		free(events);
		if (rc)
			goto fail;
	}
	rc = crc_ckpt_meta_set(s->ckpt, "crcuda.graphs", graphs);
	if (rc)
		goto fail;
	{
		char *objs = crc_texobjs_describe(s);

		rc = objs ? crc_ckpt_meta_set(s->ckpt, "crcuda.texobjects", objs) : CRC_ENOMEM;
		free(objs);
		if (rc)
			goto fail;
	}
	{
		char *opens = crc_ipc_describe(s), *exports = crc_ipc_describe_exports(s),
		     *imports = crc_ipc_describe_imports(s);

		rc = opens && exports && imports ? crc_ckpt_meta_set(s->ckpt, "crcuda.ipc_opens", opens)
						 : CRC_ENOMEM;
		if (!rc)
			rc = crc_ckpt_meta_set(s->ckpt, "crcuda.ipc_exports", exports);
		if (!rc && *imports)
			rc = crc_ckpt_meta_set(s->ckpt, "crcuda.ipc_imports", imports);
		free(opens);
		free(exports);
		free(imports);
		if (rc)
			goto fail;
	}
#undef META
	free(src);
	free(graphs);
	src = NULL;
	graphs = NULL;
	stats.seconds = crc_now_s() - t0;
	stats.new_bytes = crc_ckpt_new_bytes(s->ckpt);
	if (s->bg && !s->bg->ng)
		crc_bg_end(s); /* nothing snapshotted: an ordinary checkpoint */
	/* The packs on disk before the answer: the commit comes after CRIU's dump, when the application
	 * may be killed whatever the commit's fate, so a full or failing disk must fail the checkpoint
	 * here, while the application can still run on. (A background copy syncs at its commit: the
	 * application runs on then.) */
	if (!s->bg && (rc = crc_ckpt_sync(s->ckpt))) {
		snprintf(why, sizeof(why), "writing the checkpoint to the store %s failed: %s", store_dir,
			 crc_strerror(rc));
		goto fail;
	}
	if (!s->bg)
		crc_progress_end();
	if (s->bg) {
		s->bg->ck = s->ckpt;
		s->bg->store = s->store;
		if (crc_thread_create(&s->bg->tid, NULL, bg_main, s->bg)) {
			rc = CRC_ENOMEM;
			snprintf(why, sizeof(why), "cannot start the background drain");
			goto fail;
		}
		s->bg->started = true;
	}
	memcpy(s->cmd_out, &stats, sizeof(stats));
	s->cmd_out_len = sizeof(stats);
	s->state = CRC_CTL_CHECKPOINTED;
	pr_info("session %llu: checkpoint of %" PRIu64 " bytes (%" PRIu64 " allocations, %" PRIu64
		" globals), %" PRIu64 " copied (digests %.3f s), in %.3f s (%.2f GB/s; the copies alone "
		"%.3f s, %.2f GB/s)",
		(unsigned long long)s->id, stats.device_bytes, stats.allocations, stats.globals,
		stats.copied_bytes, stats.digest_seconds, stats.seconds,
		stats.seconds > 0 ? (double)stats.device_bytes / stats.seconds / 1e9 : 0.0,
		stats.copy_seconds,
		stats.copy_seconds > 0 ? (double)stats.device_bytes / stats.copy_seconds / 1e9 : 0.0);
	crc_session_cmd_done(s, 0, NULL);
	return 0;
fail:
	crc_progress_end();
	crc_bg_end(s);
	free(src);
	free(graphs);
	crc_ckpt_abort(s->ckpt);
	s->ckpt = NULL;
	crc_store_close(s->store);
	s->store = NULL;
	if (!why[0])
		snprintf(why, sizeof(why), "checkpoint failed: %s", crc_strerror(rc));
	crc_session_cmd_done(s, rc, "%s", why);
	return rc;
}

/* The commit's arguments: the image directory, then key=value strings, then an empty string. */
static int bg_apply_commit_args(struct crc_ckpt *ck, const char *args, size_t len)
{
	const char *p = args, *end = args + len;
	int rc = 0;

	if (len && *p)
		rc = crc_ckpt_meta_set(ck, "criu.images_dir", p);
	p += strlen(p) + 1;
	while (!rc && p < end && *p) {
		char key[256];
		const char *eq = strchr(p, '=');

		if (eq && (size_t)(eq - p) < sizeof(key)) {
			memcpy(key, p, (size_t)(eq - p));
			key[eq - p] = 0;
			rc = crc_ckpt_meta_set(ck, key, eq + 1);
		}
		p += strlen(p) + 1;
	}
	return rc;
}

int crc_ckpt_commit_session(struct crc_session *s, const char *args, size_t len)
{
	uint64_t id = 0;
	int rc = 0;

	if (s->bg) {
		/* Committed by the drain once it is done: the answer is id 0, crc_bg_wait tells the end. */
		struct crc_bg *bg = s->bg;
		char *copy = malloc(len ? len : 1);

		if (!copy) {
			crc_session_cmd_done(s, CRC_ENOMEM, "out of memory");
			return CRC_ENOMEM;
		}
		memcpy(copy, args, len);
		pthread_mutex_lock(&bg->lock);
		bg->args = copy;
		bg->args_len = len;
		bg->commit_asked = true;
		pthread_cond_broadcast(&bg->cond);
		pthread_mutex_unlock(&bg->lock);
		s->ckpt = NULL;
		s->store = NULL;
		s->state = CRC_CTL_QUIESCED;
		memcpy(s->cmd_out, &id, sizeof(id));
		s->cmd_out_len = sizeof(id);
		pr_info("session %llu: commit once the background drain is done", (unsigned long long)s->id);
		crc_session_cmd_done(s, 0, NULL);
		return 0;
	}
	rc = bg_apply_commit_args(s->ckpt, args, len);
	if (rc) {
		crc_session_cmd_done(s, rc, "cannot set the checkpoint's metadata: %s", crc_strerror(rc));
		return rc;
	}
	rc = crc_ckpt_commit(s->ckpt, &id);
	s->ckpt = NULL;
	if (!rc)
		inc_adopt(s);
	crc_inc_clear(&s->inc_next);
	crc_store_close(s->store);
	s->store = NULL;
	s->state = CRC_CTL_QUIESCED;
	if (rc) {
		crc_session_cmd_done(s, rc, "committing the checkpoint failed: %s", crc_strerror(rc));
		return rc;
	}
	memcpy(s->cmd_out, &id, sizeof(id));
	s->cmd_out_len = sizeof(id);
	pr_info("session %llu: checkpoint %" PRIu64 " committed to %s", (unsigned long long)s->id, id,
		s->store_dir);
	crc_session_cmd_done(s, 0, NULL);
	return 0;
}

void crc_ckpt_abort_session(struct crc_session *s)
{
	crc_bg_end(s); /* not asked to commit: it stops */
	if (s->ckpt) {
		crc_ckpt_abort(s->ckpt);
		s->ckpt = NULL;
		pr_info("session %llu: checkpoint aborted", (unsigned long long)s->id);
	}
	crc_inc_clear(&s->inc_next);
	crc_store_close(s->store);
	s->store = NULL;
	if (s->state == CRC_CTL_CHECKPOINTED)
		s->state = CRC_CTL_QUIESCED;
}
