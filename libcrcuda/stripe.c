/* Striped copies of TCP sessions (crcuda/proto.h, "striped copies"): one TLS stream is bounded by one
 * core's encryption on each side, so a large copy between host memory and the device moves its bytes
 * over several bulk connections of the session at once, a thread per connection, while its request and
 * reply keep their place on the main connection (results and stream order as before).
 *
 * CRCUDA_TLS_STREAMS: connections per copy (0 or 1: none). Default: min(4, CPUs/2) over TLS, none over
 * plaintext TCP (CRCUDA_INSECURE) unless set. CRCUDA_TLS_STRIPE_MIN: the smallest copy striped
 * (bytes, default 4 MiB); CRCUDA_TLS_STRIPE_PIECE: bytes per piece (default 512 KiB). */
#define LOG_PREFIX "libcrcuda: "
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "client.h"
#include "crcuda/errno.h"
#include "crcuda/log.h"
#include "crcuda/sock.h"
#include "crcuda/tls.h"

/* Opens or copies that failed on the bulk connections: after this many, copies stay on the main
 * connection (a daemon without them, a network that drops them). */
#define MAX_FAILURES 3

/* The bulk connections: used and closed under the channel lock, opened under open_lock. */
static struct {
	int fd[CRC_BULK_MAX];
	unsigned n;	   /* open (0: none) */
	uint64_t gen;	   /* bumped by each close: an open that raced a park is dropped */
	uint64_t copies;   /* copy ids */
	unsigned failures; /* see MAX_FAILURES */
	pthread_mutex_t open_lock;
} bulk = {.open_lock = PTHREAD_MUTEX_INITIALIZER};

static long env_num(const char *name, long dflt)
{
	const char *e = getenv(name);

	return e && *e ? strtol(e, NULL, 0) : dflt;
}

static unsigned streams_wanted(void)
{
	long cpus = sysconf(_SC_NPROCESSORS_ONLN), n;

	n = env_num("CRCUDA_TLS_STREAMS", !crc_tls_wanted() ? 0 : cpus / 2 < 4 ? cpus / 2 : 4);
	if (n < 2)
		return 0;
	return n > CRC_BULK_MAX ? CRC_BULK_MAX : (unsigned)n;
}

static uint32_t piece_bytes(void)
{
	/* Under 1 MiB: a TLS transfer that large would start an I/O thread of its own (common/tls.c). */
	long p = env_num("CRCUDA_TLS_STRIPE_PIECE", 512 << 10);

	return p < (long)CRC_STRIPE_PIECE_MIN	? CRC_STRIPE_PIECE_MIN
	       : p > (long)CRC_STRIPE_PIECE_MAX ? CRC_STRIPE_PIECE_MAX
						: (uint32_t)p;
}

void crc_stripe_close(void)
{
	for (unsigned i = 0; i < bulk.n; i++) {
		shutdown(bulk.fd[i], SHUT_RDWR);
		crc_tls_drop(bulk.fd[i]);
		close(bulk.fd[i]);
	}
	bulk.n = 0;
	bulk.gen++;
}

static void failed(const char *what, const char *why)
{
	bulk.failures++;
	pr_warn("%s%s%s; %s", what, why && *why ? ": " : "", why ? why : "",
		bulk.failures >= MAX_FAILURES ? "large copies stay on the main connection from now on"
					      : "this copy goes over the main connection");
}

/* The session's bulk connections, opened if need be (no lock held). true: open. */
static bool bulk_open(unsigned want)
{
	struct crc_bulk_open_req req = {.streams = want};
	struct crc_bulk_open_reply rep;
	int fds[CRC_BULK_MAX];
	unsigned got = 0;
	struct crc_call c;
	char why[256] = "";
	uint64_t gen;
	void *args;
	CUresult res;
	bool ok;

	pthread_mutex_lock(&bulk.open_lock);
	pthread_mutex_lock(&crc_client.lock);
	ok = bulk.n > 0;
	gen = bulk.gen;
	pthread_mutex_unlock(&crc_client.lock);
	if (ok || bulk.failures >= MAX_FAILURES) {
		pthread_mutex_unlock(&bulk.open_lock);
		return ok;
	}
	res = crc_ctl_begin(&c, CRC_OP_BULK_OPEN, 0, sizeof(req), &args);
	if (res == CUDA_SUCCESS) {
		memcpy(args, &req, sizeof(req));
		res = crc_call_wait(&c, NULL, NULL);
		if (res == CUDA_SUCCESS && c.reply_len >= sizeof(rep))
			memcpy(&rep, c.reply, sizeof(rep));
		else if (res == CUDA_SUCCESS)
			res = CUDA_ERROR_UNKNOWN;
		crc_call_end(&c);
	}
	if (res == CUDA_SUCCESS && (rep.streams < 2 || rep.streams > CRC_BULK_MAX))
		res = CUDA_ERROR_UNKNOWN;
	if (res == CRC_CU_DAEMON_GONE) { /* the copy says so */
		pthread_mutex_unlock(&bulk.open_lock);
		return false;
	}
	if (res != CUDA_SUCCESS) {
		if (res == CUDA_ERROR_NOT_SUPPORTED)
			bulk.failures = MAX_FAILURES; /* a daemon without them */
		snprintf(why, sizeof(why), "CUDA error %d", (int)res);
		failed("crcudad grants no bulk connections", why);
		pthread_mutex_unlock(&bulk.open_lock);
		return false;
	}
	/* Dialled under the channel lock: a checkpoint's quiesce parks after that (CRIU cannot dump a
	 * connection half made), and a park since the grant (gen) spent the key. */
	pthread_mutex_lock(&crc_client.lock);
	for (; bulk.gen == gen && crc_client.state == 1 && got < rep.streams; got++) {
		fds[got] = crc_bulk_dial(got, rep.key, why, sizeof(why));
		if (fds[got] < 0)
			break;
	}
	memset(rep.key, 0, sizeof(rep.key));
	ok = got == rep.streams && bulk.gen == gen && !bulk.n;
	if (ok) {
		memcpy(bulk.fd, fds, got * sizeof(fds[0]));
		bulk.n = got;
	}
	pthread_mutex_unlock(&crc_client.lock);
	if (!ok) {
		for (unsigned i = 0; i < got; i++) {
			crc_tls_drop(fds[i]);
			close(fds[i]);
		}
		if (got < rep.streams && why[0])
			failed("cannot open a bulk connection to crcudad", why);
	} else {
		pr_debug("%u bulk connections open", got);
	}
	pthread_mutex_unlock(&bulk.open_lock);
	return ok;
}

/* One copy's pieces, a thread per connection. */
struct stripe_job {
	bool to_device;
	uint8_t *host;
	uint64_t bytes, piece, npieces, copy_id;
	unsigned streams;
	int fd[CRC_BULK_MAX];
	_Atomic bool failed;
	_Atomic int32_t status; /* a piece the worker could not read from the device */
};

struct stripe_conn {
	struct stripe_job *job;
	unsigned index;
};

static void job_fail(struct stripe_job *j)
{
	/* The other side's threads, and ours, stop at once. */
	if (!atomic_exchange(&j->failed, true))
		for (unsigned i = 0; i < j->streams; i++)
			shutdown(j->fd[i], SHUT_RDWR);
}

static void *stripe_conn_run(void *arg)
{
	struct stripe_conn *sc = arg;
	struct stripe_job *j = sc->job;
	int fd = j->fd[sc->index], rc = 0;

	for (uint64_t k = sc->index; k < j->npieces && !rc && !atomic_load(&j->failed); k += j->streams) {
		uint64_t off = k * j->piece, len = j->bytes - off < j->piece ? j->bytes - off : j->piece;
		struct crc_stripe_piece h = {
		    .magic = CRC_STRIPE_MAGIC, .copy_id = j->copy_id, .offset = off, .bytes = len};

		if (j->to_device) {
			rc = crc_sock_write_all(fd, &h, sizeof(h));
			if (!rc)
				rc = crc_sock_write_all(fd, j->host + off, len);
			continue;
		}
		rc = crc_sock_read_all(fd, &h, sizeof(h));
		if (!rc && (h.magic != CRC_STRIPE_MAGIC || h.copy_id != j->copy_id || h.offset != off ||
			    h.bytes != (h.status ? 0 : len)))
			rc = CRC_EPROTO;
		if (!rc && h.status)
			atomic_store(&j->status, h.status);
		else if (!rc)
			rc = crc_sock_read_all(fd, j->host + off, len);
	}
	if (rc) {
		if (!atomic_load(&j->failed))
			pr_warn("bulk connection %u failed mid-copy: %s", sc->index, crc_strerror(rc));
		job_fail(j);
	}
	return NULL;
}

enum crc_stripe_outcome crc_stripe_copy(uint64_t dst, uint64_t src, size_t bytes, CUstream stream, bool async,
					bool to_device, uint64_t mvar_gen, CUresult *res)
{
	struct stripe_job j = {.to_device = to_device, .bytes = bytes};
	struct stripe_conn conns[CRC_BULK_MAX];
	pthread_t threads[CRC_BULK_MAX];
	struct crc_copy_req *r;
	struct crc_stripe_req *sr;
	struct crc_call c;
	unsigned want = streams_wanted(), started = 0;
	sigset_t all, old;
	bool retry;

	if (want < 2 || bytes < (uint64_t)env_num("CRCUDA_TLS_STRIPE_MIN", 4 << 20) ||
	    bulk.failures >= MAX_FAILURES || !bulk_open(want))
		return CRC_STRIPE_NO;
	*res = crc_call_begin(&c, to_device ? CRC_CU_cuMemcpyHtoD_v2 : CRC_CU_cuMemcpyDtoH_v2, 0,
			      sizeof(*r) + sizeof(*sr), (void **)&r);
	if (*res != CUDA_SUCCESS)
		return CRC_STRIPE_DONE;
	if (mvar_gen != UINT64_MAX && crc_restore_generation() != mvar_gen) {
		crc_call_end(&c);
		return CRC_STRIPE_AGAIN;
	}
	/* Closed by a park while this call waited at the gate: the usual way. */
	if (bulk.n < 2) {
		crc_call_end(&c);
		return CRC_STRIPE_NO;
	}
	j.streams = bulk.n;
	j.piece = piece_bytes();
	j.npieces = (bytes + j.piece - 1) / j.piece;
	j.copy_id = ++bulk.copies;
	j.host = (uint8_t *)(uintptr_t)(to_device ? src : dst);
	memcpy(j.fd, bulk.fd, sizeof(j.fd));
	*r = (struct crc_copy_req){.dst = dst,
				   .src = src,
				   .bytes = bytes,
				   .stream = (uintptr_t)stream,
				   .dst_loc = to_device ? CRC_LOC_DEVICE : CRC_LOC_STRIPED,
				   .src_loc = to_device ? CRC_LOC_STRIPED : CRC_LOC_DEVICE,
				   .async = async};
	sr = (struct crc_stripe_req *)(r + 1);
	*sr = (struct crc_stripe_req){.streams = j.streams, .piece = (uint32_t)j.piece, .copy_id = j.copy_id};
	*res = crc_call_send(&c);
	if (*res != CUDA_SUCCESS) {
		crc_call_end(&c);
		return CRC_STRIPE_DONE;
	}
	/* Signals stay with the application's threads. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	for (; started < j.streams; started++) {
		conns[started] = (struct stripe_conn){.job = &j, .index = started};
		if (pthread_create(&threads[started], NULL, stripe_conn_run, &conns[started]))
			break;
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (started < j.streams)
		job_fail(&j);
	/* The worker answers once every piece moved (or its connections failed: ours fail with them). */
	*res = crc_call_wait(&c, NULL, NULL);
	if (*res != CUDA_SUCCESS)
		job_fail(&j); /* no thread may wait for pieces that will not come */
	for (unsigned i = 0; i < started; i++)
		pthread_join(threads[i], NULL);
	if (*res == CUDA_SUCCESS && atomic_load(&j.status))
		*res = (CUresult)atomic_load(&j.status);
	retry = *res == (CUresult)CRC_CU_BULK_FAILED || (atomic_load(&j.failed) && *res == CUDA_SUCCESS);
	if (atomic_load(&j.failed) || *res == (CUresult)CRC_CU_BULK_FAILED)
		crc_stripe_close();
	if (retry)
		failed("a striped copy failed on its bulk connections", NULL);
	crc_call_end(&c);
	return retry ? CRC_STRIPE_NO : CRC_STRIPE_DONE;
}
