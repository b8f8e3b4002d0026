/* TLS 1.3 through GnuTLS (crcuda/tls.h): pre-shared keys (the token, one-time handoff keys) or
 * certificates.
 *
 * GnuTLS is dlopen'ed (RTLD_LOCAL | RTLD_DEEPBIND) at first use rather than linked: libcrcuda lives
 * inside arbitrary applications, which may link another TLS stack, another GnuTLS or another nettle
 * (GnuTLS's crypto), or define symbols of those names themselves. Loaded locally, GnuTLS's symbols do
 * not join the application's global scope; with DEEPBIND, GnuTLS and its dependencies resolve their
 * own symbols first instead of an application's same-named ones; and every call from here goes through
 * a pointer from dlsym on that handle, so none of them binds to an application's definition either. An
 * application that already loaded libgnutls.so.30 shares the one copy (same soname: dlopen returns it;
 * its init is reference counted). Under the sanitizers (which refuse DEEPBIND) the flag is left out.
 * Processes that never use TCP never load it. */
#define LOG_PREFIX "tls: "
#include <dlfcn.h>
#include <errno.h>
#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "crcuda/errno.h"
#include "crcuda/log.h"
#include "crcuda/proto.h"
#include "crcuda/sock.h"
#include "crcuda/tls.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define CRC_DLOPEN_DEEPBIND 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define CRC_DLOPEN_DEEPBIND 0
#endif
#endif
#ifndef CRC_DLOPEN_DEEPBIND
#define CRC_DLOPEN_DEEPBIND RTLD_DEEPBIND
#endif

/* TLS 1.3 only, AES-GCM first (AES-NI); certificates, or a PSK with an ephemeral (EC)DH share (forward
 * secrecy). */
#define PRIORITY_X509 "NORMAL:-VERS-ALL:+VERS-TLS1.3:-CIPHER-ALL:+AES-128-GCM:+AES-256-GCM:+CHACHA20-POLY1305"
#define PRIORITY                                                                                             \
	"NORMAL:-VERS-ALL:+VERS-TLS1.3:-KX-ALL:+ECDHE-PSK:+DHE-PSK:-CIPHER-ALL:+AES-128-GCM:+AES-256-GCM:"   \
	"+CHACHA20-POLY1305"

static struct {
	int (*init)(gnutls_session_t *, unsigned int);
	void (*deinit)(gnutls_session_t);
	int (*priority_set_direct)(gnutls_session_t, const char *, const char **);
	int (*credentials_set)(gnutls_session_t, gnutls_credentials_type_t, void *);
	int (*psk_allocate_client_credentials)(gnutls_psk_client_credentials_t *);
	void (*psk_free_client_credentials)(gnutls_psk_client_credentials_t);
	int (*psk_set_client_credentials)(gnutls_psk_client_credentials_t, const char *,
					  const gnutls_datum_t *, gnutls_psk_key_flags);
	int (*psk_allocate_server_credentials)(gnutls_psk_server_credentials_t *);
	void (*psk_free_server_credentials)(gnutls_psk_server_credentials_t);
	void (*psk_set_server_credentials_function)(gnutls_psk_server_credentials_t,
						    gnutls_psk_server_credentials_function *);
	void (*transport_set_ptr)(gnutls_session_t, gnutls_transport_ptr_t);
	void (*transport_set_push_function)(gnutls_session_t, gnutls_push_func);
	void (*transport_set_pull_function)(gnutls_session_t, gnutls_pull_func);
	void (*transport_set_errno)(gnutls_session_t, int);
	void (*session_set_ptr)(gnutls_session_t, void *);
	void *(*session_get_ptr)(gnutls_session_t);
	int (*handshake)(gnutls_session_t);
	ssize_t (*record_send)(gnutls_session_t, const void *, size_t);
	int (*bye)(gnutls_session_t, gnutls_close_request_t);
	ssize_t (*record_recv)(gnutls_session_t, void *, size_t);
	size_t (*record_check_pending)(gnutls_session_t);
	const char *(*strerror)(int);
	gnutls_alert_description_t (*alert_get)(gnutls_session_t);
	int (*alert_send)(gnutls_session_t, gnutls_alert_level_t, gnutls_alert_description_t);
	int (*alert_send_appropriate)(gnutls_session_t, int);
	const char *(*alert_get_name)(gnutls_alert_description_t);
	gnutls_cipher_algorithm_t (*cipher_get)(gnutls_session_t);
	const char *(*cipher_get_name)(gnutls_cipher_algorithm_t);
	int (*rnd)(gnutls_rnd_level_t, void *, size_t);
	int (*certificate_allocate_credentials)(gnutls_certificate_credentials_t *);
	void (*certificate_free_credentials)(gnutls_certificate_credentials_t);
	int (*certificate_set_x509_key_file)(gnutls_certificate_credentials_t, const char *, const char *,
					     gnutls_x509_crt_fmt_t);
	int (*certificate_set_x509_trust_file)(gnutls_certificate_credentials_t, const char *,
					       gnutls_x509_crt_fmt_t);
	void (*certificate_server_set_request)(gnutls_session_t, gnutls_certificate_request_t);
	void (*session_set_verify_cert)(gnutls_session_t, const char *, unsigned);
	gnutls_alloc_function *malloc;
} G;

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static char load_error[256];

static void load(void)
{
	void *h = dlopen("libgnutls.so.30", RTLD_NOW | RTLD_LOCAL | CRC_DLOPEN_DEEPBIND);
	struct {
		const char *name;
		void **slot;
	} syms[] = {
#define SYM(f) {"gnutls_" #f, (void **)&G.f}
	    SYM(init),
	    SYM(deinit),
	    SYM(priority_set_direct),
	    SYM(credentials_set),
	    SYM(psk_allocate_client_credentials),
	    SYM(psk_free_client_credentials),
	    SYM(psk_set_client_credentials),
	    SYM(psk_allocate_server_credentials),
	    SYM(psk_free_server_credentials),
	    SYM(psk_set_server_credentials_function),
	    SYM(transport_set_ptr),
	    SYM(transport_set_push_function),
	    SYM(transport_set_pull_function),
	    SYM(transport_set_errno),
	    SYM(session_set_ptr),
	    SYM(session_get_ptr),
	    SYM(handshake),
	    SYM(record_send),
	    SYM(bye),
	    SYM(record_recv),
	    SYM(record_check_pending),
	    SYM(strerror),
	    SYM(alert_get),
	    SYM(alert_send),
	    SYM(alert_send_appropriate),
	    SYM(alert_get_name),
	    SYM(cipher_get),
	    SYM(cipher_get_name),
	    SYM(rnd),
	    SYM(certificate_allocate_credentials),
	    SYM(certificate_free_credentials),
	    SYM(certificate_set_x509_key_file),
	    SYM(certificate_set_x509_trust_file),
	    SYM(certificate_server_set_request),
	    SYM(session_set_verify_cert),
	    SYM(malloc),
#undef SYM
	};

	if (!h) {
		snprintf(load_error, sizeof(load_error),
			 "cannot load GnuTLS (libgnutls.so.30: Debian package libgnutls30): %s", dlerror());
		return;
	}
	for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++) {
		*syms[i].slot = dlsym(h, syms[i].name);
		if (!*syms[i].slot) {
			snprintf(load_error, sizeof(load_error),
				 "GnuTLS has no %s: too old (3.6 or later is needed)", syms[i].name);
			return;
		}
	}
}

static int loaded(char *why, size_t why_len)
{
	pthread_once(&load_once, load);
	if (!load_error[0])
		return 0;
	if (why)
		snprintf(why, why_len, "%s", load_error);
	return CRC_ENOTSUP;
}

bool crc_tls_wanted(void)
{
	const char *e = getenv("CRCUDA_INSECURE");

	return !e || !*e || !strcmp(e, "0");
}

/* ---- sessions and the descriptors they are attached to ----------------------------------------- */
struct conn {
	gnutls_session_t s;
	bool server;
	bool x509; /* cred: certificates, else a pre-shared key */
	void *cred;
	int fd;
	ino_t ino; /* the socket's: a descriptor number reused for another socket is not this one */
	uint8_t key[CRC_TLS_KEY_LEN * 4];
	size_t key_len;
	char identity[32];
	uint8_t first[4]; /* the peer's first bytes: a plaintext daemon's answer tells itself by them */
	size_t nfirst;
	/* GnuTLS writes and reads a record (16 KiB at most) per system call, and reads a record's header
	 * and body apart: on loopback that costs more than the encryption. Records of one message are
	 * gathered into one send (wbuf, while crc_tls_write_all runs), and the socket is read ahead
	 * (rbuf). Reading ahead is safe where a connection changes hands: its protocol is lock-step
	 * there (nothing follows the last record the old owner reads until the new owners' handshake). */
	uint8_t *wbuf, *rbuf;
	size_t wlen, rpos, rlen, rcap;
	bool gather;
	struct pipe *wpipe, *rpipe; /* large transfers' (below), made at the first one */
};
#define IO_BUF (64u << 10)

/* A large transfer (PIPE_MIN and more) has its socket side on a thread of its own, for the time of the
 * call: the caller's thread encrypts records while the thread sends those before them (or receives
 * while the caller decrypts), so that one connection's cipher and the kernel's copies run on two cores
 * instead of one after the other. Ciphertext passes through PIPE_BUFS buffers. A reading thread never
 * reads past the records of the message asked for (its budget: ciphertext is never shorter than the
 * plaintext it carries), so a connection that changes hands has nothing read ahead by it. */
#define PIPE_MIN  (1u << 20)
#define PIPE_BUFS 4
#define PIPE_BUF  (256u << 10)

struct pipe {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	pthread_t thread;
	bool on; /* the thread is running: push or pull goes through the buffers */
	int fd;
	uint8_t *buf[PIPE_BUFS];
	size_t len[PIPE_BUFS];
	unsigned head, count; /* the full buffers, oldest first */
	size_t pos;	      /* writing: bytes in the buffer after them; reading: bytes taken from head's */
	size_t budget;	      /* reading: bytes the thread may still read */
	bool done;	      /* writing: nothing more comes; reading: the thread ended */
	int err;	      /* the socket's errno; reading: -1 at its end */
};

/* With 4 CPUs or more (on loopback both sides' two threads are busy at once; with fewer, the threads
 * only take turns: measured no faster on 2), or as CRCUDA_TLS_IO_THREAD says (0: never, 1: always). */
static atomic_int io_threads = -1;

void crc_tls_set_io_threads(int on)
{
	atomic_store_explicit(&io_threads, on, memory_order_relaxed);
}

static bool io_threads_wanted(void)
{
	int wanted = atomic_load_explicit(&io_threads, memory_order_relaxed);

	if (wanted < 0) {
		const char *e = getenv("CRCUDA_TLS_IO_THREAD");

		wanted = e && *e ? strcmp(e, "0") != 0 : sysconf(_SC_NPROCESSORS_ONLN) >= 4;
		atomic_store_explicit(&io_threads, wanted, memory_order_relaxed);
	}
	return wanted;
}

static void pipe_free(struct pipe *p)
{
	if (!p)
		return;
	pthread_mutex_destroy(&p->lock);
	pthread_cond_destroy(&p->cond);
	for (int i = 0; i < PIPE_BUFS; i++)
		free(p->buf[i]);
	free(p);
}

static struct pipe *pipe_new(int fd)
{
	struct pipe *p = calloc(1, sizeof(*p));

	if (!p)
		return NULL;
	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->cond, NULL);
	p->fd = fd;
	for (int i = 0; i < PIPE_BUFS; i++)
		if (!(p->buf[i] = malloc(PIPE_BUF))) {
			pipe_free(p);
			return NULL;
		}
	return p;
}

/* The thread, with every signal blocked: the application's handlers stay on its own threads. */
static bool pipe_start(struct pipe *p, int fd, void *(*run)(void *))
{
	sigset_t all, old;
	bool ok;

	p->fd = fd;
	p->head = p->count = 0;
	p->pos = 0;
	p->done = false;
	p->err = 0;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	ok = !pthread_create(&p->thread, NULL, run, p);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	p->on = ok;
	return ok;
}

static void *pipe_send(void *arg)
{
	struct pipe *p = arg;

	for (;;) {
		size_t off = 0;
		unsigned idx;
		int err = 0;

		pthread_mutex_lock(&p->lock);
		while (!p->count && !p->done && !p->err)
			pthread_cond_wait(&p->cond, &p->lock);
		if (!p->count || p->err) {
			pthread_mutex_unlock(&p->lock);
			return NULL;
		}
		idx = p->head;
		pthread_mutex_unlock(&p->lock);
		while (off < p->len[idx] && !err) {
			ssize_t n = send(p->fd, p->buf[idx] + off, p->len[idx] - off, MSG_NOSIGNAL);

			if (n >= 0)
				off += (size_t)n;
			else if (errno != EINTR)
				err = errno;
		}
		pthread_mutex_lock(&p->lock);
		p->err = err;
		p->head = (p->head + 1) % PIPE_BUFS;
		p->count--;
		pthread_cond_broadcast(&p->cond);
		pthread_mutex_unlock(&p->lock);
	}
}

/* Writing: a record into the buffer being filled; a full one goes to the thread. 0 or an errno. */
static int pipe_push(struct pipe *p, const uint8_t *buf, size_t len)
{
	while (len) {
		unsigned idx;
		size_t n;
		int err;

		pthread_mutex_lock(&p->lock);
		while (p->count == PIPE_BUFS && !p->err)
			pthread_cond_wait(&p->cond, &p->lock);
		idx = (p->head + p->count) % PIPE_BUFS;
		err = p->err;
		pthread_mutex_unlock(&p->lock);
		if (err)
			return err;
		n = len < PIPE_BUF - p->pos ? len : PIPE_BUF - p->pos;
		memcpy(p->buf[idx] + p->pos, buf, n);
		p->pos += n;
		buf += n;
		len -= n;
		if (p->pos == PIPE_BUF) {
			pthread_mutex_lock(&p->lock);
			p->len[idx] = p->pos;
			p->count++;
			p->pos = 0;
			pthread_cond_broadcast(&p->cond);
			pthread_mutex_unlock(&p->lock);
		}
	}
	return 0;
}

/* Writing ends: the last buffer goes, the thread ends. 0 or an errno. */
static int pipe_end_writes(struct pipe *p)
{
	pthread_mutex_lock(&p->lock);
	while (p->pos && p->count == PIPE_BUFS && !p->err)
		pthread_cond_wait(&p->cond, &p->lock);
	if (p->pos && !p->err) {
		p->len[(p->head + p->count) % PIPE_BUFS] = p->pos;
		p->count++;
	}
	p->pos = 0;
	p->done = true;
	pthread_cond_broadcast(&p->cond);
	pthread_mutex_unlock(&p->lock);
	pthread_join(p->thread, NULL);
	p->on = false;
	return p->err;
}

static void *pipe_recv(void *arg)
{
	struct pipe *p = arg;

	for (;;) {
		unsigned idx;
		ssize_t n;

		pthread_mutex_lock(&p->lock);
		while (p->count == PIPE_BUFS)
			pthread_cond_wait(&p->cond, &p->lock);
		idx = (p->head + p->count) % PIPE_BUFS;
		pthread_mutex_unlock(&p->lock);
		do
			n = recv(p->fd, p->buf[idx], p->budget < PIPE_BUF ? p->budget : PIPE_BUF, 0);
		while (n < 0 && errno == EINTR);
		pthread_mutex_lock(&p->lock);
		if (n > 0) {
			p->len[idx] = (size_t)n;
			p->count++;
			p->budget -= (size_t)n;
		} else {
			p->err = n < 0 ? errno : -1;
		}
		if (n <= 0 || !p->budget)
			p->done = true;
		pthread_cond_broadcast(&p->cond);
		pthread_mutex_unlock(&p->lock);
		if (p->done)
			return NULL;
	}
}

/* Reading: bytes the thread received, oldest first. > 0; 0 when it ended and all were taken (*err: 0,
 * the socket's errno, or -1 for the end of the stream). */
static size_t pipe_pull(struct pipe *p, uint8_t *buf, size_t len, int *err)
{
	unsigned idx;
	size_t n;

	pthread_mutex_lock(&p->lock);
	while (!p->count && !p->done)
		pthread_cond_wait(&p->cond, &p->lock);
	*err = p->count ? 0 : p->err;
	if (!p->count) {
		pthread_mutex_unlock(&p->lock);
		return 0;
	}
	idx = p->head;
	pthread_mutex_unlock(&p->lock);
	n = len < p->len[idx] - p->pos ? len : p->len[idx] - p->pos;
	memcpy(buf, p->buf[idx] + p->pos, n);
	p->pos += n;
	if (p->pos == p->len[idx]) {
		p->pos = 0;
		pthread_mutex_lock(&p->lock);
		p->head = (p->head + 1) % PIPE_BUFS;
		p->count--;
		pthread_cond_broadcast(&p->cond);
		pthread_mutex_unlock(&p->lock);
	}
	return n;
}

/* Reading ends. A read that failed before the thread's budget was read ends the socket's reading side:
 * the thread may wait on bytes that will not come (the session is over after such an error). */
static void pipe_end_reads(struct pipe *p)
{
	pthread_mutex_lock(&p->lock);
	if (!p->done)
		shutdown(p->fd, SHUT_RD);
	p->count = 0; /* unread bytes of a failed read: the session is over */
	pthread_cond_broadcast(&p->cond);
	pthread_mutex_unlock(&p->lock);
	pthread_join(p->thread, NULL);
	p->on = false;
}

#define MAX_CONNS 256
static pthread_mutex_t conns_lock = PTHREAD_MUTEX_INITIALIZER;
static struct conn *conns[MAX_CONNS];
static atomic_int nconns;

static ino_t ino_of(int fd)
{
	struct stat st;

	return fstat(fd, &st) ? 0 : st.st_ino;
}

static void conn_free(struct conn *c)
{
	if (c->s)
		G.deinit(c->s);
	if (c->cred && c->x509)
		G.certificate_free_credentials(c->cred);
	else if (c->cred) {
		if (c->server)
			G.psk_free_server_credentials(c->cred);
		else
			G.psk_free_client_credentials(c->cred);
	}
	memset(c->key, 0, sizeof(c->key));
	free(c->wbuf);
	free(c->rbuf);
	pipe_free(c->wpipe);
	pipe_free(c->rpipe);
	free(c);
}

/* fd's session, or NULL. A session left on a descriptor that was closed and reused is dropped. */
static struct conn *lookup(int fd)
{
	struct conn *c = NULL, *stale = NULL;

	if (!atomic_load_explicit(&nconns, memory_order_acquire))
		return NULL;
	pthread_mutex_lock(&conns_lock);
	for (int i = 0; i < MAX_CONNS; i++)
		if (conns[i] && conns[i]->fd == fd) {
			c = conns[i];
			if (ino_of(fd) != c->ino) {
				stale = c;
				c = NULL;
				conns[i] = NULL;
				atomic_fetch_sub(&nconns, 1);
			}
			break;
		}
	pthread_mutex_unlock(&conns_lock);
	if (stale)
		conn_free(stale);
	return c;
}

/* With conns_lock held: frees the sessions of descriptors closed without a drop (their number now
 * names another socket, or nothing). */
static void sweep(void)
{
	for (int i = 0; i < MAX_CONNS; i++)
		if (conns[i] && ino_of(conns[i]->fd) != conns[i]->ino) {
			conn_free(conns[i]);
			conns[i] = NULL;
			atomic_fetch_sub(&nconns, 1);
		}
}

static int attach(struct conn *c)
{
	int rc = CRC_EBUSY;

	crc_tls_drop(c->fd);
	pthread_mutex_lock(&conns_lock);
	if (atomic_load(&nconns) == MAX_CONNS)
		sweep();
	for (int i = 0; i < MAX_CONNS; i++)
		if (!conns[i]) {
			conns[i] = c;
			atomic_fetch_add(&nconns, 1);
			rc = 0;
			break;
		}
	pthread_mutex_unlock(&conns_lock);
	return rc;
}

void crc_tls_drop(int fd)
{
	struct conn *c = NULL;

	if (!atomic_load_explicit(&nconns, memory_order_acquire))
		return;
	pthread_mutex_lock(&conns_lock);
	for (int i = 0; i < MAX_CONNS; i++)
		if (conns[i] && conns[i]->fd == fd) {
			c = conns[i];
			conns[i] = NULL;
			atomic_fetch_sub(&nconns, 1);
			break;
		}
	pthread_mutex_unlock(&conns_lock);
	if (c && c->rpos < c->rlen)
		pr_warn("%zu bytes read ahead on a TLS connection were not read before it changed hands",
			c->rlen - c->rpos);
	if (c)
		conn_free(c);
}

void crc_tls_move(int from, int to)
{
	struct conn *c = lookup(from);

	if (!c || from == to)
		return;
	crc_tls_drop(to);
	pthread_mutex_lock(&conns_lock);
	c->fd = to;
	c->ino = ino_of(to);
	pthread_mutex_unlock(&conns_lock);
	G.transport_set_ptr(c->s, c);
}

bool crc_tls_on(int fd)
{
	return lookup(fd) != NULL;
}

/* Under the table's lock: a thread that is not fd's owner (libcrcuda's watcher) may ask while the owner
 * drops the session. */
bool crc_tls_pending(int fd)
{
	bool pending = false;

	if (!atomic_load_explicit(&nconns, memory_order_acquire))
		return false;
	pthread_mutex_lock(&conns_lock);
	for (int i = 0; i < MAX_CONNS; i++)
		if (conns[i] && conns[i]->fd == fd) {
			pending = ino_of(fd) == conns[i]->ino && (conns[i]->rpos < conns[i]->rlen ||
								  G.record_check_pending(conns[i]->s) > 0);
			break;
		}
	pthread_mutex_unlock(&conns_lock);
	return pending;
}

const char *crc_tls_cipher(int fd)
{
	const char *n = NULL;

	pthread_mutex_lock(&conns_lock);
	for (int i = 0; i < MAX_CONNS; i++)
		if (conns[i] && conns[i]->fd == fd) {
			n = G.cipher_get_name(G.cipher_get(conns[i]->s));
			break;
		}
	pthread_mutex_unlock(&conns_lock);
	return n ? n : "";
}

int crc_tls_random(void *buf, size_t len)
{
	int rc = loaded(NULL, 0);

	if (rc)
		return rc;
	return G.rnd(GNUTLS_RND_KEY, buf, len) ? CRC_EIO : 0;
}

/* ---- transport: the socket, with MSG_NOSIGNAL, noting the peer's first bytes ------------------- */
static int send_all(int fd, const uint8_t *p, size_t len)
{
	while (len) {
		ssize_t n = send(fd, p, len, MSG_NOSIGNAL);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return errno;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* The gathered records go: 0 or an errno. */
static int flush(struct conn *c)
{
	int err = c->wlen ? send_all(c->fd, c->wbuf, c->wlen) : 0;

	c->wlen = 0;
	return err;
}

static ssize_t push(gnutls_transport_ptr_t p, const void *buf, size_t len)
{
	struct conn *c = p;
	ssize_t n;

	if (c->wpipe && c->wpipe->on) {
		int err = pipe_push(c->wpipe, buf, len);

		if (err) {
			G.transport_set_errno(c->s, err);
			return -1;
		}
		return (ssize_t)len;
	}
	if (c->gather && c->wbuf && len <= IO_BUF) {
		if (c->wlen + len > IO_BUF) {
			int err = flush(c);

			if (err) {
				G.transport_set_errno(c->s, err);
				return -1;
			}
		}
		memcpy(c->wbuf + c->wlen, buf, len);
		c->wlen += len;
		return (ssize_t)len;
	}
	n = send(c->fd, buf, len, MSG_NOSIGNAL);
	if (n < 0)
		G.transport_set_errno(c->s, errno);
	return n;
}

static ssize_t pull(gnutls_transport_ptr_t p, void *buf, size_t len)
{
	struct conn *c = p;
	ssize_t n;

	if (c->rpos == c->rlen && c->rpipe && c->rpipe->on) {
		int err;
		size_t got = pipe_pull(c->rpipe, buf, len, &err);

		if (got)
			return (ssize_t)got;
		if (err > 0) {
			G.transport_set_errno(c->s, err);
			return -1;
		}
		if (err < 0)
			return 0;
		/* The thread read its budget: the socket again, as below. */
	}
	if (c->rpos == c->rlen && c->rbuf) {
		n = recv(c->fd, c->rbuf, IO_BUF, 0);
		if (n <= 0) {
			if (n < 0)
				G.transport_set_errno(c->s, errno);
			return n;
		}
		c->rpos = 0;
		c->rlen = (size_t)n;
	}
	if (c->rpos < c->rlen) {
		n = (ssize_t)(len < c->rlen - c->rpos ? len : c->rlen - c->rpos);
		memcpy(buf, c->rbuf + c->rpos, (size_t)n);
		c->rpos += (size_t)n;
	} else {
		n = recv(c->fd, buf, len, 0);
		if (n < 0)
			G.transport_set_errno(c->s, errno);
	}
	for (ssize_t i = 0; i < n && c->nfirst < sizeof(c->first); i++)
		c->first[c->nfirst++] = ((uint8_t *)buf)[i];
	return n;
}

static int server_key(gnutls_session_t s, const char *username, gnutls_datum_t *key)
{
	struct conn *c = G.session_get_ptr(s);

	/* Another identity is another key: refused the same way as a wrong one. */
	if (!c || strcmp(username, c->identity))
		return -1;
	key->data = (*G.malloc)(c->key_len);
	if (!key->data)
		return -1;
	memcpy(key->data, c->key, c->key_len);
	key->size = (unsigned)c->key_len;
	return 0;
}

/* The failed handshake's error as a crcuda error and a sentence. */
static int handshake_error(struct conn *c, int ret, char *why, size_t why_len)
{
	static const uint8_t magic[4] = {CRC_PROTO_MAGIC & 0xff, (CRC_PROTO_MAGIC >> 8) & 0xff,
					 (CRC_PROTO_MAGIC >> 16) & 0xff, CRC_PROTO_MAGIC >> 24};

	if (c->nfirst >= 4 && !memcmp(c->first, magic, 4)) {
		snprintf(why, why_len, "the peer speaks plaintext, not TLS (started with --insecure?)");
		return CRC_ETLS;
	}
	if (c->nfirst && !c->server && c->first[0] != 0x16 && c->first[0] != 0x15) {
		snprintf(why, why_len, "the peer does not speak TLS");
		return CRC_ETLS;
	}
	switch (ret) {
	case GNUTLS_E_AGAIN:
	case GNUTLS_E_TIMEDOUT:
		snprintf(why, why_len, "no TLS handshake from the peer in time");
		return CRC_ETIMEDOUT;
	case GNUTLS_E_PREMATURE_TERMINATION:
	case GNUTLS_E_PULL_ERROR:
	case GNUTLS_E_PUSH_ERROR:
		snprintf(why, why_len, "the peer closed the connection during the TLS handshake");
		return CRC_EDAEMON;
	case GNUTLS_E_FATAL_ALERT_RECEIVED: {
		gnutls_alert_description_t a = G.alert_get(c->s);
		const char *name = G.alert_get_name(a);

		if (a == GNUTLS_A_DECRYPT_ERROR || a == GNUTLS_A_UNKNOWN_PSK_IDENTITY ||
		    a == GNUTLS_A_BAD_RECORD_MAC || a == GNUTLS_A_BAD_CERTIFICATE ||
		    a == GNUTLS_A_UNKNOWN_CA || a == GNUTLS_A_CERTIFICATE_UNKNOWN ||
		    a == GNUTLS_A_CERTIFICATE_REQUIRED || a == GNUTLS_A_HANDSHAKE_FAILURE ||
		    a == GNUTLS_A_INSUFFICIENT_SECURITY) {
			snprintf(why, why_len, "the peer refused our key (%s): wrong token?",
				 name ? name : "?");
			return CRC_EAUTH;
		}
		snprintf(why, why_len, "TLS alert from the peer: %s", name ? name : "?");
		return CRC_EPROTO;
	}
	case GNUTLS_E_CERTIFICATE_VERIFICATION_ERROR:
	case GNUTLS_E_CERTIFICATE_ERROR:
	case GNUTLS_E_NO_CERTIFICATE_FOUND:
	case GNUTLS_E_CERTIFICATE_REQUIRED:
		snprintf(why, why_len,
			 "the peer's certificate is not one the CA file trusts (or has another name): %s",
			 G.strerror(ret));
		return CRC_EAUTH;
	case GNUTLS_E_INSUFFICIENT_CREDENTIALS:
	case GNUTLS_E_NO_CIPHER_SUITES:
	case GNUTLS_E_UNKNOWN_CIPHER_SUITE:
	case GNUTLS_E_NO_COMMON_KEY_SHARE:
		snprintf(why, why_len,
			 "no common credentials (certificates on one side, the token on the other?): %s",
			 G.strerror(ret));
		return CRC_EAUTH;
	case GNUTLS_E_DECRYPTION_FAILED:
	case GNUTLS_E_ERROR_IN_FINISHED_PACKET:
	case GNUTLS_E_KEYFILE_ERROR:
	case GNUTLS_E_RECEIVED_ILLEGAL_PARAMETER:
		snprintf(why, why_len, "the peer's key is not ours (wrong token): %s", G.strerror(ret));
		return CRC_EAUTH;
	default:
		snprintf(why, why_len, "TLS handshake failed: %s", G.strerror(ret));
		return CRC_EPROTO;
	}
}

/* Certificate files of one side (and the name the peer's certificate must have, for a client). */
struct x509 {
	const char *cert, *key, *ca, *peer_name;
};

static int handshake(int fd, bool server, const char *identity, const void *key, size_t key_len,
		     const struct x509 *x, int timeout_ms, char *why, size_t why_len)
{
	char dummy[8];
	struct conn *c;
	struct timeval old, tv = {.tv_sec = timeout_ms / 1000, .tv_usec = timeout_ms % 1000 * 1000};
	socklen_t olen = sizeof(old);
	gnutls_datum_t k = {.data = (unsigned char *)key, .size = (unsigned)key_len};
	int rc, ret;

	if (!why) {
		why = dummy;
		why_len = sizeof(dummy);
	}
	why[0] = 0;
	rc = loaded(why, why_len);
	if (rc)
		return rc;
	if (!x && (!key_len || key_len > sizeof(c->key) || strlen(identity) >= sizeof(c->identity))) {
		snprintf(why, why_len, "no usable key (1 to %zu bytes)", sizeof(c->key));
		return CRC_EINVAL;
	}
	c = calloc(1, sizeof(*c));
	if (!c) {
		snprintf(why, why_len, "out of memory");
		return CRC_ENOMEM;
	}
	c->fd = fd;
	c->ino = ino_of(fd);
	c->server = server;
	c->wbuf = malloc(IO_BUF);
	c->rbuf = malloc(IO_BUF);
	c->rcap = IO_BUF;
	if (!x) {
		memcpy(c->key, key, key_len);
		c->key_len = key_len;
		snprintf(c->identity, sizeof(c->identity), "%s", identity);
	}
	/* No session tickets: nothing may follow the handshake unasked, a connection changes hands at a
	 * record boundary that both sides know. */
	ret = G.init(&c->s, (server ? GNUTLS_SERVER : GNUTLS_CLIENT) | GNUTLS_NO_TICKETS | GNUTLS_NO_SIGNAL);
	if (!ret)
		ret = G.priority_set_direct(c->s, x ? PRIORITY_X509 : PRIORITY, NULL);
	if (!ret && x) {
		/* Each side proves itself with its certificate and trusts the other's if the CA signed it
		 * (a client also checks the daemon's name: the host it connected to). */
		c->x509 = true;
		ret = G.certificate_allocate_credentials((gnutls_certificate_credentials_t *)&c->cred);
		if (!ret &&
		    (ret = G.certificate_set_x509_key_file(c->cred, x->cert, x->key, GNUTLS_X509_FMT_PEM)))
			snprintf(why, why_len, "cannot use the certificate %s with the key %s: %s", x->cert,
				 x->key, G.strerror(ret));
		if (!ret &&
		    (ret = G.certificate_set_x509_trust_file(c->cred, x->ca, GNUTLS_X509_FMT_PEM)) <= 0) {
			snprintf(why, why_len, "no CA certificate in %s%s%s", x->ca, ret ? ": " : "",
				 ret ? G.strerror(ret) : "");
			ret = ret ? ret : GNUTLS_E_FILE_ERROR;
		} else if (ret > 0) {
			ret = 0;
		}
		if (!ret)
			ret = G.credentials_set(c->s, GNUTLS_CRD_CERTIFICATE, c->cred);
		if (!ret && server)
			G.certificate_server_set_request(c->s, GNUTLS_CERT_REQUIRE);
		if (!ret)
			G.session_set_verify_cert(c->s, server ? NULL : x->peer_name, 0);
		if (ret && why[0]) {
			conn_free(c);
			return CRC_EINVAL;
		}
	} else if (!ret && server) {
		ret = G.psk_allocate_server_credentials((gnutls_psk_server_credentials_t *)&c->cred);
		if (!ret) {
			G.psk_set_server_credentials_function(c->cred, server_key);
			ret = G.credentials_set(c->s, GNUTLS_CRD_PSK, c->cred);
		}
	} else if (!ret) {
		ret = G.psk_allocate_client_credentials((gnutls_psk_client_credentials_t *)&c->cred);
		if (!ret)
			ret = G.psk_set_client_credentials(c->cred, identity, &k, GNUTLS_PSK_KEY_RAW);
		if (!ret)
			ret = G.credentials_set(c->s, GNUTLS_CRD_PSK, c->cred);
	}
	if (ret) {
		snprintf(why, why_len, "cannot set up a TLS session: %s", G.strerror(ret));
		conn_free(c);
		return CRC_EPROTO;
	}
	G.session_set_ptr(c->s, c);
	G.transport_set_ptr(c->s, c);
	G.transport_set_push_function(c->s, push);
	G.transport_set_pull_function(c->s, pull);
	/* The wait for the peer is bounded by the socket's receive timeout, as long as the handshake. */
	if (getsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &old, &olen))
		old = (struct timeval){0};
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	do
		ret = G.handshake(c->s);
	while (ret == GNUTLS_E_INTERRUPTED || ret == GNUTLS_E_WARNING_ALERT_RECEIVED);
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &old, sizeof(old));
	if (ret < 0) {
		rc = handshake_error(c, ret, why, why_len);
		/* GnuTLS leaves the alert to us. A wrong key's peer hears of it only after a delay, so
		 * that guessing a token is slow. */
		if (server && rc == CRC_EAUTH) {
			nanosleep(&(struct timespec){.tv_sec = CRC_TLS_AUTH_DELAY_MS / 1000,
						     .tv_nsec = CRC_TLS_AUTH_DELAY_MS % 1000 * 1000000L},
				  NULL);
			G.alert_send(c->s, GNUTLS_AL_FATAL, GNUTLS_A_DECRYPT_ERROR);
		} else if (rc != CRC_EDAEMON && rc != CRC_ETLS) {
			G.alert_send_appropriate(c->s, ret);
		}
		conn_free(c);
		return rc;
	}
	rc = attach(c);
	if (rc) {
		snprintf(why, why_len, "too many TLS connections in this process");
		conn_free(c);
	}
	return rc;
}

int crc_tls_client(int fd, const char *identity, const void *key, size_t key_len, int timeout_ms, char *why,
		   size_t why_len)
{
	return handshake(fd, false, identity, key, key_len, NULL, timeout_ms, why, why_len);
}

int crc_tls_server(int fd, const char *identity, const void *key, size_t key_len, int timeout_ms, char *why,
		   size_t why_len)
{
	return handshake(fd, true, identity, key, key_len, NULL, timeout_ms, why, why_len);
}

int crc_tls_check_x509(const char *cert, const char *key, const char *ca, char *why, size_t why_len)
{
	gnutls_certificate_credentials_t cred;
	int rc, ret;

	why[0] = 0;
	rc = loaded(why, why_len);
	if (rc)
		return rc;
	if (G.certificate_allocate_credentials(&cred))
		return CRC_ENOMEM;
	ret = G.certificate_set_x509_key_file(cred, cert, key, GNUTLS_X509_FMT_PEM);
	if (ret)
		snprintf(why, why_len, "cannot use the certificate %s with the key %s: %s", cert, key,
			 G.strerror(ret));
	else if ((ret = G.certificate_set_x509_trust_file(cred, ca, GNUTLS_X509_FMT_PEM)) <= 0)
		snprintf(why, why_len, "no CA certificate in %s%s%s", ca, ret ? ": " : "",
			 ret ? G.strerror(ret) : "");
	G.certificate_free_credentials(cred);
	return why[0] ? CRC_EINVAL : 0;
}

int crc_tls_server_x509(int fd, const char *cert, const char *key, const char *ca, int timeout_ms, char *why,
			size_t why_len)
{
	struct x509 x = {.cert = cert, .key = key, .ca = ca};

	return handshake(fd, true, NULL, NULL, 0, &x, timeout_ms, why, why_len);
}

/* ---- records ----------------------------------------------------------------------------------- */
static int io_error(struct conn *c, ssize_t ret)
{
	switch (ret) {
	case GNUTLS_E_FATAL_ALERT_RECEIVED: {
		/* TLS 1.3: a client's certificate is judged after its side of the handshake ended. */
		gnutls_alert_description_t a = G.alert_get(c->s);

		if (a == GNUTLS_A_BAD_CERTIFICATE || a == GNUTLS_A_UNKNOWN_CA ||
		    a == GNUTLS_A_CERTIFICATE_UNKNOWN || a == GNUTLS_A_CERTIFICATE_REQUIRED ||
		    a == GNUTLS_A_DECRYPT_ERROR)
			return CRC_EAUTH;
		pr_warn("TLS alert from the peer: %s", G.alert_get_name(a));
		return CRC_EPROTO;
	}
	case GNUTLS_E_PREMATURE_TERMINATION:
	case GNUTLS_E_PULL_ERROR:
	case GNUTLS_E_PUSH_ERROR:
		return CRC_EDAEMON;
	case GNUTLS_E_AGAIN:
		return CRC_EAGAIN;
	default:
		pr_warn("TLS record error: %s", G.strerror((int)ret));
		return CRC_EPROTO;
	}
}

int crc_tls_write_all(int fd, const void *buf, size_t len, int *rc)
{
	struct conn *c = lookup(fd);
	const char *p = buf;

	bool piped;

	if (!c)
		return 0;
	*rc = 0;
	piped = len >= PIPE_MIN && io_threads_wanted() && (c->wpipe || (c->wpipe = pipe_new(fd))) &&
		pipe_start(c->wpipe, fd, pipe_send);
	c->gather = true;
	while (len) {
		ssize_t n = G.record_send(c->s, p, len);

		if (n == GNUTLS_E_INTERRUPTED)
			continue;
		if (n < 0) {
			*rc = io_error(c, n);
			break;
		}
		p += n;
		len -= (size_t)n;
	}
	c->gather = false;
	if (piped) {
		int err = pipe_end_writes(c->wpipe);

		if (err && !*rc)
			*rc = err == EAGAIN || err == EWOULDBLOCK ? CRC_EAGAIN : CRC_EDAEMON;
	}
	if (flush(c) && !*rc)
		*rc = CRC_EDAEMON;
	return 1;
}

/* A large read's thread, with a budget of what the records of the len bytes asked for certainly take
 * from the socket beyond what this side already holds: decrypted, read ahead, or (after a read that
 * timed out) part of a record in the session (RECORD_MAX). */
#define RECORD_MAX (5 + 16384 + 256)

static bool start_reading(struct conn *c, size_t len)
{
	size_t pending = G.record_check_pending(c->s), ahead = c->rlen - c->rpos;
	size_t need = len > pending ? len - pending : 0;

	if (len < PIPE_MIN || !io_threads_wanted() || need <= ahead + RECORD_MAX + PIPE_BUF)
		return false;
	if (!c->rpipe && !(c->rpipe = pipe_new(c->fd)))
		return false;
	c->rpipe->budget = need - ahead - RECORD_MAX;
	return pipe_start(c->rpipe, c->fd, pipe_recv);
}

/* After a large read: bytes its thread read and the session did not take (none, unless the session
 * held part of a record already) are read ahead for the next read. */
static void end_reading(struct conn *c, bool failed)
{
	struct pipe *p = c->rpipe;
	size_t left = 0;

	pthread_mutex_lock(&p->lock);
	if (!failed && !p->done) {
		pr_err("a TLS read ended before its thread's budget (%zu bytes left)", p->budget);
		failed = true;
	}
	pthread_mutex_unlock(&p->lock);
	if (failed) {
		pipe_end_reads(p);
		return;
	}
	pthread_join(p->thread, NULL); /* it read its budget: the records asked for took as much */
	p->on = false;
	for (unsigned i = 0; i < p->count; i++)
		left += p->len[(p->head + i) % PIPE_BUFS];
	left -= p->count ? p->pos : 0;
	if (!left)
		return;
	if (left > c->rcap) {
		uint8_t *r = realloc(c->rbuf, left);

		if (!r) {
			pr_err("no memory for %zu bytes read ahead on a TLS connection", left);
			return;
		}
		c->rbuf = r;
		c->rcap = left;
	}
	c->rpos = 0;
	c->rlen = 0;
	for (unsigned i = 0; i < p->count; i++) {
		unsigned idx = (p->head + i) % PIPE_BUFS;
		size_t from = i ? 0 : p->pos;

		memcpy(c->rbuf + c->rlen, p->buf[idx] + from, p->len[idx] - from);
		c->rlen += p->len[idx] - from;
	}
	p->count = 0;
	p->pos = 0;
}

int crc_tls_read_all(int fd, void *buf, size_t len, int *rc)
{
	struct conn *c = lookup(fd);
	char *p = buf;

	bool piped;

	if (!c)
		return 0;
	*rc = 0;
	piped = start_reading(c, len);
	while (len) {
		ssize_t n = G.record_recv(c->s, p, len);

		if (n == GNUTLS_E_INTERRUPTED)
			continue;
		if (n == 0) {
			*rc = CRC_EDAEMON; /* close_notify: the peer is gone */
			break;
		}
		if (n < 0) {
			*rc = io_error(c, n);
			break;
		}
		p += n;
		len -= (size_t)n;
	}
	if (piped)
		end_reading(c, *rc != 0);
	return 1;
}

void crc_tls_end_writes(int fd)
{
	struct conn *c = lookup(fd);

	if (!c) {
		shutdown(fd, SHUT_WR);
		return;
	}
	/* close_notify: the peer reads the end of the stream and may still answer. */
	G.bye(c->s, GNUTLS_SHUT_WR);
	flush(c);
}

int crc_tls_read_some(int fd, void *buf, size_t len, ssize_t *got)
{
	struct conn *c = lookup(fd);

	if (!c)
		return 0;
	for (;;) {
		ssize_t n = G.record_recv(c->s, buf, len);

		if (n == GNUTLS_E_INTERRUPTED)
			continue;
		*got = n >= 0 ? n : io_error(c, n);
		return 1;
	}
}

/* ---- a client of crcudad ------------------------------------------------------------------------ */
#define CLIENT_HANDSHAKE_MS 10000

int crc_tls_client_x509(int fd, const char *server, const char *cert, const char *key, const char *ca,
			char *why, size_t why_len)
{
	char host[256] = "";
	const char *colon = server ? strrchr(server, ':') : NULL;
	struct x509 x = {.cert = cert, .key = key, .ca = ca, .peer_name = host};

	if (!ca || !*ca || !cert || !*cert || !key || !*key) {
		snprintf(why, why_len,
			 "certificates need a certificate, its key and a CA (CRCUDA_TLS_CERT, "
			 "CRCUDA_TLS_KEY and CRCUDA_TLS_CA, or --tls-cert, --tls-key and --tls-ca)");
		return CRC_EINVAL;
	}
	/* "HOST:PORT" or "[V6]:PORT": the server's certificate must name HOST. */
	if (colon && colon - server < (long)sizeof(host)) {
		size_t n = (size_t)(colon - server);

		if (n >= 2 && server[0] == '[' && server[n - 1] == ']')
			snprintf(host, sizeof(host), "%.*s", (int)(n - 2), server + 1);
		else
			snprintf(host, sizeof(host), "%.*s", (int)n, server);
	}
	return handshake(fd, false, NULL, NULL, 0, &x, CLIENT_HANDSHAKE_MS, why, why_len);
}

int crc_tls_connect(int fd, const char *server, const void *token, size_t token_len, char *why,
		    size_t why_len)
{
	const char *ca = getenv("CRCUDA_TLS_CA"), *cert = getenv("CRCUDA_TLS_CERT"),
		   *key = getenv("CRCUDA_TLS_KEY");

	if (!crc_tls_wanted())
		return 0;
	if ((ca && *ca) || (cert && *cert) || (key && *key))
		return crc_tls_client_x509(fd, server, cert, key, ca, why, why_len);
	if (!token_len) {
		snprintf(why, why_len, "no token: set CRCUDA_TOKEN or CRCUDA_TOKEN_FILE");
		return CRC_EAUTH;
	}
	return crc_tls_client(fd, CRC_TLS_ID_TOKEN, token, token_len, CLIENT_HANDSHAKE_MS, why, why_len);
}

int crc_tls_take_handoff(int fd, bool *refused, char *why, size_t why_len)
{
	struct crc_tls_handoff h;
	int rc;

	*refused = false;
	if (!crc_tls_on(fd))
		return 0;
	rc = crc_sock_read_all(fd, &h, sizeof(h));
	if (rc == CRC_EAUTH) {
		*refused = true;
		snprintf(why, why_len, "it did not accept our certificate (not one its --tls-ca signed?)");
		return rc;
	}
	if (rc) {
		snprintf(why, why_len, "crcudad closed the connection after the hello: %s", crc_strerror(rc));
		return rc;
	}
	if (h.magic != CRC_PROTO_MAGIC || h.version != CRC_PROTO_VERSION) {
		snprintf(why, why_len, "crcudad speaks protocol %#x/%u, not %#x/%u", h.magic, h.version,
			 CRC_PROTO_MAGIC, CRC_PROTO_VERSION);
		return CRC_EPROTO;
	}
	if (h.status) {
		*refused = true;
		snprintf(why, why_len, "%s", crc_strerror(h.status));
		return h.status;
	}
	crc_tls_drop(fd);
	rc = crc_tls_client(fd, CRC_TLS_ID_HANDOFF, h.key, sizeof(h.key), CLIENT_HANDSHAKE_MS, why, why_len);
	memset(h.key, 0, sizeof(h.key));
	return rc;
}
