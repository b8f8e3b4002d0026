/* Striped copies of TCP sessions (crcuda/proto.h, "striped copies"): a large copy between the client's
 * host memory and the device travels in pieces over several bulk connections at once, one thread per
 * connection here (each with its own TLS session: one core's encryption bounds one stream), while the
 * session thread copies the pieces to or from the device in order, through a ring of page-locked
 * staging slots. */
#define LOG_PREFIX "crcudad: "
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "crcuda/errno.h"
#include "crcuda/log.h"
#include "crcuda/tls.h"
#include "worker.h"

/* ---- the connections ---------------------------------------------------------------------------- */
static void bulk_close_locked(struct crc_session *s)
{
	for (unsigned i = 0; i < CRC_BULK_MAX; i++) {
		if (s->bulk_fd[i] < 0)
			continue;
		shutdown(s->bulk_fd[i], SHUT_RDWR);
		crc_tls_drop(s->bulk_fd[i]);
		close(s->bulk_fd[i]);
		s->bulk_fd[i] = -1;
	}
	s->bulk_want = 0;
	s->bulk_key_live = false;
	memset(s->bulk_key, 0, sizeof(s->bulk_key));
}

void crc_bulk_close(struct crc_session *s)
{
	pthread_mutex_lock(&s->ctl_lock);
	bulk_close_locked(s);
	pthread_mutex_unlock(&s->ctl_lock);
}

CUresult crc_ctl_bulk_open(struct crc_session *s, const uint8_t *args, size_t len)
{
	struct crc_bulk_open_req req;
	struct crc_bulk_open_reply *out;
	unsigned n;

	if (len < sizeof(req))
		return CUDA_ERROR_INVALID_VALUE;
	memcpy(&req, args, sizeof(req));
	if (!s->tcp)
		return CUDA_ERROR_NOT_SUPPORTED;
	n = req.streams > CRC_BULK_MAX ? CRC_BULK_MAX : req.streams;
	if (n < 2)
		return CUDA_ERROR_INVALID_VALUE;
	out = crc_out(s, sizeof(*out));
	if (!out)
		return CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_lock(&s->ctl_lock);
	bulk_close_locked(s);
	if (crc_tls_random(s->bulk_key, sizeof(s->bulk_key))) {
		pthread_mutex_unlock(&s->ctl_lock);
		return CUDA_ERROR_UNKNOWN;
	}
	s->bulk_want = n;
	s->bulk_key_live = true;
	memset(out, 0, sizeof(*out));
	out->streams = n;
	memcpy(out->key, s->bulk_key, sizeof(out->key));
	pthread_mutex_unlock(&s->ctl_lock);
	pr_debug("session %llu: %u bulk connections granted", (unsigned long long)s->id, n);
	return CUDA_SUCCESS;
}

int crc_bulk_attach(int fd, const struct crc_hello *hello)
{
	struct crc_session *s = NULL;
	struct crc_hello_reply *r = calloc(1, sizeof(*r));
	unsigned i = hello->bulk_index, have = 0, want = 0;
	int rc = CRC_ENOTFOUND;

	if (!r)
		return CRC_ENOMEM;
	r->magic = CRC_PROTO_MAGIC;
	r->version = CRC_PROTO_VERSION;
	r->session_id = hello->session_id;
	pthread_mutex_lock(&crcd.lock);
	if (crcd.session && crcd.session->id == hello->session_id)
		s = crcd.session;
	if (s) {
		pthread_mutex_lock(&s->ctl_lock);
		if (!s->bulk_key_live)
			rc = CRC_EBUSY;
		else if (!crc_const_time_equal(hello->token, hello->token_len, s->bulk_key,
					       sizeof(s->bulk_key)))
			rc = CRC_EAUTH;
		else if (i >= s->bulk_want || s->bulk_fd[i] >= 0)
			rc = CRC_EINVAL;
		else
			rc = crc_sock_write_all(fd, r, sizeof(*r));
		if (!rc) {
			s->bulk_fd[i] = fd;
			want = s->bulk_want;
			for (unsigned k = 0; k < want; k++)
				have += s->bulk_fd[k] >= 0;
			/* One-time: spent once every connection it was for is in. */
			if (have == s->bulk_want) {
				s->bulk_key_live = false;
				memset(s->bulk_key, 0, sizeof(s->bulk_key));
			}
		}
		pthread_mutex_unlock(&s->ctl_lock);
	}
	pthread_mutex_unlock(&crcd.lock);
	free(r);
	if (rc == CRC_EAUTH)
		pr_warn("refusing a bulk connection for session %llu from pid %d: wrong key",
			(unsigned long long)hello->session_id, (int)hello->pid);
	else if (rc)
		pr_warn("refusing bulk connection %u for session %llu from pid %d: %s", i,
			(unsigned long long)hello->session_id, (int)hello->pid, crc_strerror(rc));
	else if (have == want)
		pr_info("session %llu: %u bulk connections in", (unsigned long long)hello->session_id, have);
	return rc;
}

/* ---- a striped copy -------------------------------------------------------------------------------- */
struct stripe_job {
	bool to_device; /* the pieces come from the client */
	unsigned streams, slots;
	int fd[CRC_BULK_MAX];
	uint8_t *stage;
	uint64_t piece, bytes, npieces, copy_id;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	/* to_device: pieces copied to the device (their slots free); else pieces in their slots. */
	uint64_t ready;
	uint64_t done[CRC_BULK_MAX]; /* pieces each connection moved, in its order */
	bool failed;
	uint64_t err_from; /* from the client's side: pieces from here on carry err instead of bytes */
	CUresult err;
	uint64_t break_after; /* tests: connection 0 breaks after this many pieces (0: never) */
};

struct stripe_conn {
	struct stripe_job *job;
	unsigned index;
};

static uint64_t piece_len(const struct stripe_job *j, uint64_t k)
{
	uint64_t off = k * j->piece;

	return j->bytes - off < j->piece ? j->bytes - off : j->piece;
}

static uint8_t *slot(const struct stripe_job *j, uint64_t k)
{
	return j->stage + (k % j->slots) * j->piece;
}

/* With the job's lock held: the copy cannot go on; every connection's reads and writes fail now. */
static void fail_locked(struct stripe_job *j)
{
	j->failed = true;
	for (unsigned i = 0; i < j->streams; i++)
		shutdown(j->fd[i], SHUT_RDWR);
	pthread_cond_broadcast(&j->cond);
}

/* CRCUDA_TEST_BULK_BREAK=N[:d2h]: the first striped copy of this worker (to the client with :d2h) breaks
 * its first bulk connection after N pieces of it (a connection lost mid-copy, for tests). */
static uint64_t test_break_after(bool to_device)
{
	static atomic_bool used;
	const char *e = getenv("CRCUDA_TEST_BULK_BREAK");
	char *end;
	uint64_t n;

	if (!e || !*e)
		return 0;
	n = strtoull(e, &end, 0);
	if (to_device == !strcmp(end, ":d2h") || atomic_exchange(&used, true))
		return 0;
	return n;
}

static void *stripe_conn_run(void *arg)
{
	struct stripe_conn *sc = arg;
	struct stripe_job *j = sc->job;
	int fd = j->fd[sc->index];

	for (uint64_t k = sc->index; k < j->npieces; k += j->streams) {
		struct crc_stripe_piece h = {.magic = CRC_STRIPE_MAGIC, .copy_id = j->copy_id};
		uint64_t len = piece_len(j, k);
		bool failed;
		int rc;

		h.offset = k * j->piece;
		pthread_mutex_lock(&j->lock);
		if (j->to_device)
			while (!j->failed && k >= j->ready + j->slots)
				pthread_cond_wait(&j->cond, &j->lock);
		else
			while (!j->failed && j->ready <= k)
				pthread_cond_wait(&j->cond, &j->lock);
		failed = j->failed;
		if (!j->to_device && k >= j->err_from)
			h.status = (int32_t)j->err;
		pthread_mutex_unlock(&j->lock);
		if (failed)
			break;
		if (j->to_device) {
			rc = crc_sock_read_all(fd, &h, sizeof(h));
			if (!rc && (h.magic != CRC_STRIPE_MAGIC || h.copy_id != j->copy_id ||
				    h.offset != k * j->piece || h.bytes != len)) {
				pr_warn("bulk connection %u: piece %llu is not the one expected", sc->index,
					(unsigned long long)k);
				rc = CRC_EPROTO;
			}
			if (!rc)
				rc = crc_sock_read_all(fd, slot(j, k), len);
		} else {
			h.bytes = h.status ? 0 : len;
			rc = crc_sock_write_all(fd, &h, sizeof(h));
			if (!rc && h.bytes)
				rc = crc_sock_write_all(fd, slot(j, k), len);
		}
		if (!rc && sc->index == 0 && j->break_after && k / j->streams + 1 >= j->break_after) {
			pr_warn("CRCUDA_TEST_BULK_BREAK: breaking bulk connection 0 mid-copy");
			shutdown(fd, SHUT_RDWR);
			rc = CRC_EDAEMON;
		}
		pthread_mutex_lock(&j->lock);
		if (rc) {
			if (!j->failed)
				pr_warn("bulk connection %u failed mid-copy: %s", sc->index,
					crc_strerror(rc));
			fail_locked(j);
		} else {
			j->done[sc->index]++;
			pthread_cond_broadcast(&j->cond);
		}
		pthread_mutex_unlock(&j->lock);
		if (rc)
			break;
	}
	return NULL;
}

/* The staging ring: slots pieces, page-locked where the driver lets it (copies by DMA). */
static uint8_t *stage(struct crc_session *s, size_t bytes)
{
	void *p;

	if (s->stripe_stage_bytes >= bytes)
		return s->stripe_stage;
	crc_stripe_free(s);
	bytes = (bytes + 4095) & ~(size_t)4095;
	p = aligned_alloc(4096, bytes);
	if (!p)
		return NULL;
	s->stripe_stage = p;
	s->stripe_stage_bytes = bytes;
	s->stripe_stage_pinned =
	    CALL(cuMemHostRegister_v2, p, bytes, CU_MEMHOSTREGISTER_PORTABLE) == CUDA_SUCCESS;
	return p;
}

void crc_stripe_free(struct crc_session *s)
{
	if (s->stripe_stage_pinned)
		CALL(cuMemHostUnregister, s->stripe_stage);
	free(s->stripe_stage);
	s->stripe_stage = NULL;
	s->stripe_stage_bytes = 0;
	s->stripe_stage_pinned = false;
}

/* The session thread's half: pieces to the device as they come, or from it into free slots. */
static CUresult device_side(struct stripe_job *j, uint64_t dev, CUstream st, bool async)
{
	CUresult res = CUDA_SUCCESS;

	for (uint64_t k = 0; k < j->npieces; k++) {
		uint64_t len = piece_len(j, k), off = k * j->piece;
		bool failed;

		pthread_mutex_lock(&j->lock);
		if (j->to_device)
			while (!j->failed && j->done[k % j->streams] <= k / j->streams)
				pthread_cond_wait(&j->cond, &j->lock);
		else
			while (!j->failed && k >= j->slots &&
			       j->done[(k - j->slots) % j->streams] <= (k - j->slots) / j->streams)
				pthread_cond_wait(&j->cond, &j->lock);
		failed = j->failed;
		pthread_mutex_unlock(&j->lock);
		if (failed)
			break;
		/* After a device error the pieces still move (the connections stay in step), unused. */
		if (res == CUDA_SUCCESS && j->to_device)
			res = async ? CALL(cuMemcpyHtoDAsync_v2, dev + off, slot(j, k), len, st)
				    : CALL(cuMemcpyHtoD_v2, dev + off, slot(j, k), len);
		else if (res == CUDA_SUCCESS)
			res = async ? CALL(cuMemcpyDtoHAsync_v2, slot(j, k), dev + off, len, st)
				    : CALL(cuMemcpyDtoH_v2, slot(j, k), dev + off, len);
		/* The slot is used again soon: its copy must be over. */
		if (res == CUDA_SUCCESS && async)
			res = CALL(cuStreamSynchronize, st);
		pthread_mutex_lock(&j->lock);
		if (res != CUDA_SUCCESS && j->err_from == UINT64_MAX) {
			j->err_from = k;
			j->err = res;
		}
		j->ready = k + 1;
		pthread_cond_broadcast(&j->cond);
		pthread_mutex_unlock(&j->lock);
	}
	return res;
}

CUresult crc_stripe_copy(struct crc_session *s, const struct crc_copy_req *r, const uint8_t *extra,
			 size_t extra_len, CUstream st)
{
	struct stripe_job j = {.err_from = UINT64_MAX};
	struct stripe_conn conns[CRC_BULK_MAX];
	pthread_t threads[CRC_BULK_MAX];
	struct crc_stripe_req sr;
	unsigned started = 0, have = 0;
	uint64_t dev;
	CUresult res;

	s->stripe_handled = true;
	j.to_device = r->src_loc == CRC_LOC_STRIPED;
	if (extra_len < sizeof(sr) || (j.to_device ? r->dst_loc : r->src_loc) != CRC_LOC_DEVICE) {
		crc_bulk_close(s);
		return CUDA_ERROR_INVALID_VALUE;
	}
	memcpy(&sr, extra, sizeof(sr));
	pthread_mutex_lock(&s->ctl_lock);
	for (unsigned i = 0; i < CRC_BULK_MAX; i++) {
		j.fd[i] = s->bulk_fd[i];
		have += s->bulk_fd[i] >= 0;
	}
	pthread_mutex_unlock(&s->ctl_lock);
	if (sr.streams < 2 || sr.streams > CRC_BULK_MAX || sr.streams != have ||
	    sr.piece < CRC_STRIPE_PIECE_MIN || sr.piece > CRC_STRIPE_PIECE_MAX) {
		pr_warn("session %llu: a striped copy over %u connections (%u here) in pieces of %u bytes: "
			"refused",
			(unsigned long long)s->id, sr.streams, have, sr.piece);
		crc_bulk_close(s);
		return (CUresult)CRC_CU_BULK_FAILED;
	}
	j.streams = sr.streams;
	j.slots = 2 * j.streams;
	j.piece = sr.piece;
	j.bytes = r->bytes;
	j.npieces = (r->bytes + j.piece - 1) / j.piece;
	j.copy_id = sr.copy_id;
	j.break_after = test_break_after(j.to_device);
	dev = j.to_device ? r->dst : r->src;
	j.stage = stage(s, (size_t)j.slots * j.piece);
	if (!j.stage) {
		crc_bulk_close(s);
		return (CUresult)CRC_CU_BULK_FAILED;
	}
	pthread_mutex_init(&j.lock, NULL);
	pthread_cond_init(&j.cond, NULL);
	for (unsigned i = 0; i < j.streams; i++) {
		conns[i] = (struct stripe_conn){.job = &j, .index = i};
		if (crc_thread_create(&threads[i], NULL, stripe_conn_run, &conns[i]))
			break;
		started++;
	}
	if (started < j.streams) {
		pthread_mutex_lock(&j.lock);
		fail_locked(&j);
		pthread_mutex_unlock(&j.lock);
	}
	res = device_side(&j, dev, st, r->async);
	for (unsigned i = 0; i < started; i++)
		pthread_join(threads[i], NULL);
	pthread_mutex_destroy(&j.lock);
	pthread_cond_destroy(&j.cond);
	if (j.failed) {
		crc_bulk_close(s);
		pr_warn(
		    "session %llu: a striped copy of %llu bytes failed on its bulk connections: the client "
		    "copies again over its main connection",
		    (unsigned long long)s->id, (unsigned long long)r->bytes);
		return (CUresult)CRC_CU_BULK_FAILED;
	}
	s->stripe_copies++;
	s->stripe_bytes += r->bytes;
	return res;
}

CUresult crc_stripe_after(struct crc_session *s, const struct crc_msg_hdr *m, CUresult res)
{
	const struct crc_copy_req *r;

	if (s->stripe_handled || (m->op != CRC_CU_cuMemcpyHtoD_v2 && m->op != CRC_CU_cuMemcpyDtoH_v2) ||
	    crc_msg_payload_len(m) < sizeof(struct crc_call_hdr) + sizeof(*r))
		return res;
	r = (const void *)((const uint8_t *)crc_msg_payload(m) + sizeof(struct crc_call_hdr));
	if (r->src_loc != CRC_LOC_STRIPED && r->dst_loc != CRC_LOC_STRIPED)
		return res;
	/* Refused before its pieces moved: the client's threads must not wait for them. */
	crc_bulk_close(s);
	return res == CUDA_SUCCESS ? (CUresult)CRC_CU_BULK_FAILED : res;
}
