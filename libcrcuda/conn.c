/* The connection to crcudad and the request/response machinery. */
#define LOG_PREFIX "libcrcuda: "
#include <errno.h>
#include <stddef.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include "client.h"
#include "crcuda/ctl.h"
#include "crcuda/errno.h"
#include "crcuda/log.h"
#include "crcuda/sock.h"
#include "crcuda/tls.h"

struct crc_client crc_client = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .pinned_lock = PTHREAD_MUTEX_INITIALIZER,
};

static pthread_mutex_t connect_lock = PTHREAD_MUTEX_INITIALIZER;
static __thread struct crc_thread self;

struct crc_thread *crc_self(void)
{
	if (!self.tid)
		self.tid = (uint32_t)syscall(SYS_gettid);
	return &self;
}

/* Keep host mappings out of the device VA window before anything else maps memory, so no host
 * pointer of this process can alias a device pointer (unified addressing tells copies apart by
 * address). CRCUDA_VA_BASE / CRCUDA_VA_SIZE follow the daemon's --va-base if it was moved. */
__attribute__((constructor)) static void reserve_device_window(void)
{
	const char *b = getenv("CRCUDA_VA_BASE"), *s = getenv("CRCUDA_VA_SIZE");
	uintptr_t base = b && *b ? strtoull(b, NULL, 0) : CRC_DEFAULT_VA_BASE;
	size_t size = s && *s ? strtoull(s, NULL, 0) : CRC_DEFAULT_VA_SESSION;
	void *p = mmap((void *)base, size, PROT_NONE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);

	if (p == MAP_FAILED || (uintptr_t)p != base) {
		if (p != MAP_FAILED)
			munmap(p, size);
		pr_warn("cannot reserve the device VA window %#lx+%#zx in this process", (unsigned long)base,
			size);
		return;
	}
	crc_client.va_reserved_base = base;
	crc_client.va_reserved_size = size;
}

bool crc_is_device_va(uint64_t addr)
{
	return addr - crc_client.info.va_base < crc_client.info.va_size;
}

/* The session's range must be reserved here too; it usually lies in the window of the constructor. */
static void reserve_session_range(uint64_t base, uint64_t size)
{
	void *p;

	if (base >= crc_client.va_reserved_base &&
	    base + size <= crc_client.va_reserved_base + crc_client.va_reserved_size)
		return;
	p = mmap((void *)base, size, PROT_NONE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
	if (p == MAP_FAILED || (uintptr_t)p != base) {
		if (p != MAP_FAILED)
			munmap(p, size);
		pr_warn("session VA range %#llx+%#llx overlaps host mappings of this process: copies between "
			"host and device addresses there may go the wrong way",
			(unsigned long long)base, (unsigned long long)size);
	}
}

static int read_token(char *buf, size_t cap, uint32_t *len)
{
	const char *tok = getenv("CRCUDA_TOKEN"), *file = getenv("CRCUDA_TOKEN_FILE");
	size_t n = 0;

	if (tok) {
		n = strlen(tok);
		if (n > cap)
			return CRC_EINVAL;
		memcpy(buf, tok, n);
	} else if (file) {
		int fd = open(file, O_RDONLY | O_CLOEXEC);
		ssize_t r;

		if (fd < 0) {
			pr_perror("open token file %s", file);
			return -errno;
		}
		r = read(fd, buf, cap);
		close(fd);
		if (r < 0)
			return -errno;
		n = (size_t)r;
		while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
			n--;
	}
	*len = (uint32_t)n;
	return 0;
}

static void watch_start(void);

static int handshake(void)
{
	const char *remote = getenv("CRCUDA_REMOTE");
	struct crc_hello hello = {
	    .magic = CRC_PROTO_MAGIC,
	    .version = CRC_PROTO_VERSION,
	    .pid = getpid(),
	    .uid = getuid(),
	};
	struct crc_hello_reply *r = &crc_client.info;
	struct crc_peer srv = {0};
	char path[256], why[256];
	bool refused = false;
	int fd, memfd = -1, nfds = 0, rc;

	if (remote && *remote) {
		hello.transport = CRC_TRANSPORT_TCP;
		rc = read_token(hello.token, sizeof(hello.token), &hello.token_len);
		if (rc)
			return rc;
		if (!hello.token_len) {
			pr_err("crcudad at %s refused the session: wrong or missing token (no token: set "
			       "CRCUDA_TOKEN or CRCUDA_TOKEN_FILE)",
			       remote);
			return CRC_EAUTH;
		}
		fd = crc_tcp_connect(remote);
		if (fd < 0) {
			pr_err("cannot reach crcudad at %s: %s", remote, crc_strerror(fd));
			return fd;
		}
		rc = crc_tls_connect(fd, remote, hello.token, hello.token_len, why, sizeof(why));
		if (rc == CRC_EAUTH) {
			pr_err("crcudad at %s refused the session: %s (%s)", remote,
			       getenv("CRCUDA_TLS_CA") ? "certificates not accepted"
						       : "wrong or missing token",
			       why);
			goto fail;
		}
		if (rc) {
			pr_err("no session with crcudad at %s: %s (%s)", remote, crc_strerror(rc), why);
			goto fail;
		}
		if (!crc_tls_wanted())
			pr_warn("CRCUDA_INSECURE: this process's GPU work travels to %s in plaintext",
				remote);
	} else {
		hello.transport = CRC_TRANSPORT_UNIX;
		rc = crc_sock_default_path(path, sizeof(path));
		if (rc)
			return rc;
		fd = crc_unix_connect(path);
		if (fd < 0) {
			pr_err("cannot reach crcudad at %s: %s", path, crc_strerror(fd));
			return fd;
		}
		/* Our memory goes through that process: it must be our user's, or root's (a socket
		 * another user put there is not a daemon to trust). */
		rc = crc_unix_peer(fd, &srv);
		if (!rc && srv.uid != geteuid() && srv.uid != 0) {
			pr_err(
			    "the process serving %s (pid %d) runs as uid %u, neither this process's uid %u "
			    "nor root: not using it (is the socket another user's?)",
			    path, (int)srv.pid, (unsigned)srv.uid, (unsigned)geteuid());
			rc = CRC_EPERM;
			goto fail;
		}
	}
	rc = crc_sock_write_all(fd, &hello, sizeof(hello));
	if (!rc) {
		rc = crc_tls_take_handoff(fd, &refused, why, sizeof(why));
		if (rc && refused) {
			pr_err("crcudad refused the session: %s", why);
			goto fail;
		}
		if (rc) {
			pr_err("no session with crcudad at %s: %s", remote, why);
			goto fail;
		}
	}
	/* A daemon that refuses a unix client (another uid) answers before it reads the hello, and
	 * closes: its answer is there to read even when the hello could not be written. */
	if (!rc || hello.transport == CRC_TRANSPORT_UNIX)
		rc = hello.transport == CRC_TRANSPORT_UNIX
			 ? crc_sock_recv_fds(fd, r, sizeof(*r), &memfd, 1, &nfds)
			 : crc_sock_read_all(fd, r, sizeof(*r));
	if (rc) {
		pr_err("crcudad closed the connection during the handshake%s",
		       hello.transport == CRC_TRANSPORT_TCP ? " (wrong or missing token?)" : "");
		goto fail;
	}
	if (r->magic != CRC_PROTO_MAGIC || r->version != CRC_PROTO_VERSION) {
		pr_err("crcudad speaks protocol %#x/%u, not %#x/%u", r->magic, r->version, CRC_PROTO_MAGIC,
		       CRC_PROTO_VERSION);
		rc = CRC_EPROTO;
		goto fail;
	}
	if (r->status == CRC_EPERM && hello.transport == CRC_TRANSPORT_UNIX) {
		rc = r->status;
		pr_err("crcudad at %s (uid %u) refused the session: it serves only its own user and root, "
		       "and this process runs as uid %u (start a crcudad of your own: crcudactl run does)",
		       path, (unsigned)srv.uid, (unsigned)geteuid());
		goto fail;
	}
	if (r->status) {
		rc = r->status;
		pr_err("crcudad refused the session: %s", crc_strerror(rc));
		goto fail;
	}
	if (hello.transport == CRC_TRANSPORT_UNIX) {
		if (nfds != 1) {
			rc = CRC_EPROTO;
			goto fail;
		}
		rc = crc_chan_open_shm(&crc_client.chan, fd, memfd, r->ring_size, false, false);
		close(memfd);
		memfd = -1;
		if (rc)
			goto fail;
	} else {
		crc_chan_open_tcp(&crc_client.chan, fd);
		crc_client.tcp = true;
	}
	watch_start();
	reserve_session_range(r->va_base, r->va_size);
	for (unsigned d = 0; d < r->dev_count && d < CRC_MAX_DEVICES; d++)
		crc_ctx_register(r->primary_ctx[d], (CUdevice)d, 0, true);
	pr_info("session %llu: %u device(s), VA %#llx+%#llx over %s", (unsigned long long)r->session_id,
		r->dev_count, (unsigned long long)r->va_base, (unsigned long long)r->va_size,
		crc_client.tcp ? "TCP" : "shared memory");
	return 0;
fail:
	if (memfd >= 0)
		close(memfd);
	crc_tls_drop(fd);
	close(fd);
	return rc ? rc : CRC_EPROTO;
}

/* A child forked from a client shares its connection (and rings): it may not use them, nor say goodbye
 * for the parent's session when it exits. Its CUDA calls fail, as the driver's do in such a child. So
 * does one forked while another thread of the parent was connecting (its half-made connection is the
 * parent's); one forked from a process that never connected makes a session of its own.
 * Only the forking thread lives on in the child: a lock another thread held stays held there for ever,
 * and a child that took one would hang. A non-client takes none (crc_connect answers it without its
 * lock); the channel and pinned-region locks, which some hooks take before they look at the session,
 * are made anew: nothing they guard is the child's. */
static void forked_child(void)
{
	if (crc_client.state == 0 && pthread_mutex_trylock(&connect_lock) == 0) {
		pthread_mutex_unlock(&connect_lock);
		return;
	}
	__atomic_store_n(&crc_client.state, -1, __ATOMIC_RELEASE);
	crc_client.lock = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
	crc_client.pinned_lock = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
}

/* At load, not at the first connection: a fork between that and the registration gave a child that
 * used its parent's session. */
__attribute__((constructor)) static void forked_child_register(void)
{
	if (pthread_atfork(NULL, NULL, forked_child))
		pr_warn("pthread_atfork failed: a child forked from a CUDA process would use its session");
}

CUresult crc_connect(void)
{
	int state = __atomic_load_n(&crc_client.state, __ATOMIC_ACQUIRE);

	/* Lost for good (or a forked child, where the lock may be held by a thread that is not there). */
	if (state == -1)
		return CRC_CU_DAEMON_GONE;
	pthread_mutex_lock(&connect_lock);
	state = crc_client.state;
	if (state == 0) {
		state = handshake() ? -1 : 1;
		__atomic_store_n(&crc_client.state, state, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&connect_lock);
	return state == 1 ? CUDA_SUCCESS : CRC_CU_DAEMON_GONE;
}

/* The channel failed: the daemon is gone (or broke the protocol). Everything from now on fails. */
static CUresult lost(int rc)
{
	if (__atomic_exchange_n(&crc_client.state, -1, __ATOMIC_ACQ_REL) == 1)
		pr_err("lost crcudad (%s): every CUDA call fails from now on", crc_strerror(rc));
	return CRC_CU_DAEMON_GONE;
}

/* ---- quiesce: the call gate, parking, rebinding (see struct crc_session_ctl in crcuda/proto.h) ---- */
static int park_tcp(void);
static int tcp_notices(void);

static void chan_unlock(void)
{
	struct crc_session_ctl *ctl = crc_client.chan.sctl;
	int rc;

	if (ctl)
		atomic_store_explicit(&ctl->client_busy, 0, memory_order_release);
	/* Over TLS, a notice that came right after the reply may have been read with it (the socket is
	 * read ahead): poll cannot show it to the watcher, so it is taken now. */
	else if (crc_client.tcp && crc_client.state == 1 && crc_tls_pending(crc_client.chan.fd) &&
		 (rc = tcp_notices()))
		lost(rc);
	/* A quiesce request read while this call waited for its reply: the call is complete, park. */
	else if (crc_client.quiesce_pending && (rc = park_tcp()))
		lost(rc);
	pthread_mutex_unlock(&crc_client.lock);
}

/* Sends a record with a descriptor to a new daemon session and waits for its reply (copied to out, up
 * to out_len bytes), under the held channel lock: what a restored session must be given again. */
static int reregister(uint16_t op, const void *req, size_t len, int fd, void *out, size_t out_len)
{
	const struct crc_msg_hdr *m;
	const struct crc_reply_hdr *rh;
	uint64_t seq = ++crc_client.seq;
	char byte = 0;
	void *p;
	int rc = crc_chan_reserve(&crc_client.chan, op, 0, seq, len, &p);

	if (rc)
		return rc;
	if (len)
		memcpy(p, req, len);
	if (fd >= 0)
		rc = crc_sock_send_fds(crc_client.chan.fd, &byte, 1, &fd, 1);
	if (!rc)
		rc = crc_chan_commit(&crc_client.chan);
	if (!rc)
		rc = crc_chan_next(&crc_client.chan, -1, &m);
	if (rc)
		return rc;
	rh = crc_msg_payload(m);
	if (m->seq != seq || crc_msg_payload_len(m) < sizeof(*rh))
		rc = CRC_EPROTO;
	else if (rh->result != CUDA_SUCCESS)
		rc = CRC_ECUDA;
	else if (out_len && crc_msg_payload_len(m) >= sizeof(*rh) + out_len)
		memcpy(out, rh + 1, out_len);
	crc_chan_release(&crc_client.chan);
	return rc;
}

int crc_ctl_reregister(uint16_t op, const void *req, size_t len)
{
	return reregister(op, req, len, -1, NULL, 0);
}

/* Sends a pinned region's memfd again to a new daemon session. */
int crc_pin_reregister(struct crc_pinned *pin)
{
	struct crc_pin_req req = {.client_addr = pin->addr, .bytes = pin->bytes, .flags = pin->flags};
	int rc = reregister(CRC_OP_PIN_REGISTER, &req, sizeof(req), pin->memfd, &pin->device_ptr,
			    sizeof(pin->device_ptr));

	if (rc)
		pr_err("cannot register pinned memory %#lx+%#zx with the restored session: %s",
		       (unsigned long)pin->addr, pin->bytes, crc_strerror(rc));
	else
		crc_managed_restored(pin);
	return rc;
}

/* Shares the host-function page again with a new daemon session. */
static int hostfn_reregister(void)
{
	int rc = reregister(CRC_OP_HOSTFN_REGISTER, NULL, 0, crc_hostfn_memfd(), NULL, 0);

	if (rc)
		pr_err("cannot share the host-function page with the restored session: %s", crc_strerror(rc));
	return rc;
}

/* A restored session: switch to its channel (new rings, or TCP on the same socket) and register the
 * pinned regions again. The old rings and their control page go. */
static int rebind(const struct crc_sock_notice *n, int memfd)
{
	int fd = crc_client.chan.fd, rc = 0;

	crc_stripe_close();
	crc_chan_close(&crc_client.chan);
	crc_tls_drop(fd);
	if (n->transport == CRC_TRANSPORT_TCP && memfd >= 0) {
		/* The restorer's socket brought the notice and the session's TCP socket: that takes its
		 * place, with a TLS session of our own where the notice has its key. */
		char why[256];

		if (dup3(memfd, fd, O_CLOEXEC) < 0)
			return -errno;
		if (n->flags & CRC_NOTICE_TLS) {
			rc = crc_tls_client(fd, CRC_TLS_ID_HANDOFF, n->key, sizeof(n->key), 30000, why,
					    sizeof(why));
			if (rc) {
				pr_err("no TLS session with the restored session's crcudad: %s", why);
				return rc;
			}
		}
	} else if (n->transport == CRC_TRANSPORT_TCP && (n->flags & CRC_NOTICE_TLS)) {
		return CRC_EPROTO;
	}
	if (n->transport == CRC_TRANSPORT_UNIX) {
		if (memfd < 0)
			return CRC_EPROTO;
		rc = crc_chan_open_shm(&crc_client.chan, fd, memfd, n->ring_size, false, false);
		if (rc)
			return rc;
		crc_client.tcp = false;
	} else {
		crc_chan_open_tcp(&crc_client.chan, fd);
		crc_client.tcp = true;
	}
	watch_start();
	crc_client.info.session_id = n->session_id;
	pthread_mutex_lock(&crc_client.pinned_lock);
	crc_client.rebinds++;
	for (struct crc_pinned *p = crc_client.pinned; p && !rc; p = p->next)
		if (p->memfd >= 0 && !crc_client.tcp)
			rc = crc_pin_reregister(p);
	pthread_mutex_unlock(&crc_client.pinned_lock);
	if (!rc && !crc_client.tcp && crc_hostfn_memfd() >= 0)
		rc = hostfn_reregister();
	if (!rc && !crc_client.tcp)
		rc = crc_notify_reregister();
	pr_info("rebound to restored session %llu over %s", (unsigned long long)n->session_id,
		crc_client.tcp ? "TCP" : "shared memory");
	return rc;
}

/* How long a parked client waits for its socket to be replaced after the daemon hung up
 * (CRCUDA_REBIND_WAIT_MS; tests that restore without CRIU swap the socket themselves). */
static int rebind_wait_ms(void)
{
	const char *e = getenv("CRCUDA_REBIND_WAIT_MS");

	return e && *e ? atoi(e) : 0;
}

/* ---- suspend (crcudactl suspend/resume; crcuda/proto.h, CRC_SUSPEND_SOCK_FMT) ------------------ */
/* One connection to the suspend socket: a query, or a resume with the new session's socket. 1: keep
 * waiting; 0: resumed; < 0: the resume failed after the old socket was replaced (calls fail). */
static int serve_resumer(int cfd, struct crc_suspend_reply *info)
{
	struct timeval tv = {.tv_sec = 10};
	struct crc_suspend_req req;
	struct crc_peer peer;
	int newfd = -1, nfds = 0, rc = 1;

	if (crc_unix_check_peer(cfd, &peer))
		return 1;
	setsockopt(cfd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	if (crc_sock_recv_fds(cfd, &req, sizeof(req), &newfd, 1, &nfds) || req.magic != CRC_PROTO_MAGIC) {
		if (nfds)
			close(newfd);
		return 1;
	}
	info->status = 0;
	if (req.op == CRC_SUSPEND_RESUME && nfds) {
		struct pollfd p = {.fd = newfd, .events = POLLIN};
		struct crc_sock_notice n;
		int memfd = -1, got = 0;

		/* The restored session's REBIND notice is queued on its socket, which takes the place of
		 * the old one (as after a CRIU restore). */
		rc = poll(&p, 1, 30000) == 1 ? 0 : CRC_ETIMEDOUT;
		if (!rc && dup3(newfd, crc_client.chan.fd, O_CLOEXEC) < 0)
			rc = -errno;
		if (!rc)
			rc = crc_sock_recv_fds(crc_client.chan.fd, &n, sizeof(n), &memfd, 1, &got);
		if (!rc && (n.magic != CRC_PROTO_MAGIC || n.kind != CRC_NOTICE_REBIND))
			rc = CRC_EPROTO;
		if (!rc)
			rc = rebind(&n, got ? memfd : -1);
		if (got)
			close(memfd);
		info->status = rc;
	} else if (req.op != CRC_SUSPEND_QUERY) {
		info->status = CRC_EINVAL;
	}
	if (nfds)
		close(newfd);
	send(cfd, info, sizeof(*info), MSG_NOSIGNAL);
	return rc;
}

/* The parked thread, once the worker ended with the session suspended (its ctl page says so): waits for
 * crcudactl resume, or fails when the daemon goes away. 0: resumed (rebound). */
static int suspended_wait(const struct crc_session_ctl *ctl)
{
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	struct crc_suspend_reply info = {
	    .magic = CRC_PROTO_MAGIC,
	    .session_id = crc_client.info.session_id,
	    .ckpt_id = ctl->suspend_ckpt,
	    .device_bytes = ctl->suspend_bytes,
	};
	struct crc_ctl *daemon = NULL;
	int lfd, n, rc;

	memcpy(info.store, ctl->suspend_store, sizeof(info.store));
	info.store[sizeof(info.store) - 1] = 0;
	if (crc_sock_default_path(info.daemon, sizeof(info.daemon)))
		info.daemon[0] = 0;
	n = snprintf(a.sun_path + 1, sizeof(a.sun_path) - 1, CRC_SUSPEND_SOCK_FMT, (int)getpid());
	lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (lfd < 0 ||
	    bind(lfd, (struct sockaddr *)&a, (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n)) ||
	    listen(lfd, 8)) {
		rc = -errno;
		pr_err("suspended, but cannot listen for the resume: %s", strerror(errno));
		goto out;
	}
	/* Held open while suspended: the daemon's end is the application's (its calls fail). */
	rc = crc_ctl_open(NULL, NULL, &daemon);
	if (rc)
		goto out;
	pr_info("suspended as checkpoint %llu of %s: waiting for crcudactl resume %d",
		(unsigned long long)info.ckpt_id, info.store, (int)getpid());
	for (;;) {
		struct pollfd p[2] = {{.fd = lfd, .events = POLLIN},
				      {.fd = crc_ctl_fd(daemon), .events = POLLIN | POLLRDHUP}};
		int cfd;

		if (poll(p, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			rc = -errno;
			break;
		}
		if (p[1].revents) {
			rc = CRC_EDAEMON;
			pr_err("crcudad went away while this process was suspended");
			break;
		}
		if (!(p[0].revents & POLLIN) || (cfd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC)) < 0)
			continue;
		rc = serve_resumer(cfd, &info);
		close(cfd);
		if (rc <= 0)
			break;
	}
out:
	if (lfd >= 0)
		close(lfd);
	crc_ctl_close(daemon);
	if (!rc)
		pr_info("resumed: session %llu", (unsigned long long)crc_client.info.session_id);
	return rc;
}

/* Parked with the channel lock held: until the daemon withdraws the quiesce request (resume) or a
 * REBIND notice arrives on the socket (restore). Every other thread waits on the lock meanwhile. */
static int park(struct crc_session_ctl *ctl)
{
	int fd = crc_client.chan.fd, grace_ms = rebind_wait_ms(), dead_ms = 0;

	atomic_store(&ctl->parked, 1);
	pr_debug("parked: session quiesced");
	for (;;) {
		uint32_t seq = atomic_load(&ctl->wake_seq);
		struct pollfd p = {.fd = fd, .events = POLLIN | POLLRDHUP};
		struct timespec ts = {.tv_nsec = 100 * 1000 * 1000};

		if (!atomic_load(&ctl->quiesce_req)) {
			atomic_store(&ctl->parked, 0);
			return 0;
		}
		if (poll(&p, 1, 0) > 0 && (p.revents & (POLLIN | POLLHUP | POLLRDHUP | POLLERR | POLLNVAL))) {
			struct crc_sock_notice n;
			int memfd = -1, nfds = 0, rc = CRC_EDAEMON;

			if (p.revents & POLLIN)
				rc = crc_sock_recv_fds(fd, &n, sizeof(n), &memfd, 1, &nfds);
			if (!rc) {
				if (n.magic != CRC_PROTO_MAGIC || n.kind != CRC_NOTICE_REBIND) {
					if (memfd >= 0)
						close(memfd);
					return CRC_EPROTO;
				}
				/* The old page goes with the old rings: nothing to clear. */
				rc = rebind(&n, nfds ? memfd : -1);
				if (memfd >= 0)
					close(memfd);
				return rc;
			}
			/* The worker ended on purpose (crcudactl suspend): wait for the resume. */
			if (atomic_load(&ctl->suspended))
				return suspended_wait(ctl);
			if (dead_ms >= grace_ms)
				return rc;
			dead_ms += 100;
			nanosleep(&ts, NULL);
			continue;
		}
		dead_ms = 0;
		syscall(SYS_futex, &ctl->wake_seq, FUTEX_WAIT, seq, &ts, NULL, 0);
	}
}

/* ---- TCP sessions: no shared page, the quiesce request comes on the socket ----------------------
 * (crcuda/proto.h, "quiesce of a TCP session"). It is read where the client reads anyway (waiting for
 * a reply), at the next call boundary when the watcher thread saw the socket readable, or by the
 * watcher itself when no call holds the channel (an idle client must park too). */

/* A daemon notice among the records: taken note of (channel lock held). Its op, or 0 if it is none. */
static unsigned tcp_notice(const struct crc_msg_hdr *m)
{
	if (m->op == CRC_OP_QUIESCE) {
		memset(&crc_client.quiesce, 0, sizeof(crc_client.quiesce));
		memcpy(&crc_client.quiesce, crc_msg_payload(m),
		       crc_msg_payload_len(m) < sizeof(crc_client.quiesce) ? crc_msg_payload_len(m)
									   : sizeof(crc_client.quiesce));
		crc_client.quiesce.park[sizeof(crc_client.quiesce.park) - 1] = 0;
		crc_client.quiesce_pending = true;
	} else if (m->op == CRC_OP_RESUME) {
		crc_client.quiesce_pending = false;
	} else {
		return 0;
	}
	return m->op;
}

/* With the channel lock held and no call in flight, whatever the daemon sent is a notice: reads them. */
static int tcp_notices(void)
{
	const struct crc_msg_hdr *m;
	int rc;

	atomic_store(&crc_client.rx_check, 0);
	for (;;) {
		rc = crc_chan_next(&crc_client.chan, 0, &m);
		if (rc)
			return rc == CRC_ETIMEDOUT ? 0 : rc;
		rc = tcp_notice(m) ? 0 : CRC_EPROTO;
		crc_chan_release(&crc_client.chan);
		if (rc)
			return rc;
	}
}

/* The hello of another connection of this session (a reclaim, a bulk connection): token_len bytes of
 * proof follow in hello.token. */
static struct crc_hello session_hello(uint32_t role, uint32_t token_len)
{
	return (struct crc_hello){
	    .magic = CRC_PROTO_MAGIC,
	    .version = CRC_PROTO_VERSION,
	    .pid = getpid(),
	    .uid = getuid(),
	    .transport = CRC_TRANSPORT_TCP,
	    .role = role,
	    .session_id = crc_client.info.session_id,
	    .token_len = token_len,
	};
}

/* Another connection of this session to the daemon at where, made as its first was (TLS with the
 * token) and greeted with hello; the front hands it to the session's worker. The descriptor, or a
 * negative error (why says more where it can). */
static int dial_session(const char *where, const struct crc_hello *hello, bool nodelay, char *why,
			size_t why_len)
{
	struct crc_hello_reply *r = malloc(sizeof(*r));
	char token[CRC_TOKEN_MAX];
	uint32_t token_len = 0;
	bool refused = false;
	int fd = r ? crc_tcp_connect(where) : CRC_ENOMEM, rc;

	if (fd >= 0 && nodelay)
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &(int){1}, sizeof(int));
	rc = fd < 0 ? fd : read_token(token, sizeof(token), &token_len);
	if (!rc)
		rc = crc_tls_connect(fd, where, token, token_len, why, why_len);
	memset(token, 0, sizeof(token));
	if (!rc)
		rc = crc_sock_write_all(fd, hello, sizeof(*hello));
	if (!rc)
		rc = crc_tls_take_handoff(fd, &refused, why, why_len);
	if (!rc)
		rc = crc_sock_read_all(fd, r, sizeof(*r));
	if (!rc && (r->magic != CRC_PROTO_MAGIC || r->status))
		rc = r->magic != CRC_PROTO_MAGIC ? CRC_EPROTO : r->status;
	free(r);
	if (rc && fd >= 0) {
		crc_tls_drop(fd);
		close(fd);
	}
	return rc ? rc : fd;
}

/* Takes the detached session back: a new TCP connection to the daemon it was on (addr), a hello with
 * the session id and the ticket, put in place of the park socket at fd. The connection is
 * authenticated by the token, as the first one was; the ticket proves that this process is the
 * session's client. */
static int reclaim(int fd, const struct sockaddr_storage *addr, socklen_t len, const uint8_t *ticket,
		   size_t ticket_len)
{
	struct crc_hello hello = session_hello(CRC_ROLE_CLIENT, (uint32_t)ticket_len);
	char host[NI_MAXHOST], port[NI_MAXSERV], where[NI_MAXHOST + NI_MAXSERV + 4];
	char why[256] = "";
	int nfd = CRC_EINVAL, rc;

	memcpy(hello.token, ticket, ticket_len);
	if (getnameinfo((const struct sockaddr *)addr, len, host, sizeof(host), port, sizeof(port),
			NI_NUMERICHOST | NI_NUMERICSERV) == 0) {
		snprintf(where, sizeof(where), strchr(host, ':') ? "[%s]:%s" : "%s:%s", host, port);
		nfd = dial_session(where, &hello, false, why, sizeof(why));
	}
	rc = nfd < 0 ? nfd : 0;
	if (!rc && dup3(nfd, fd, O_CLOEXEC) < 0)
		rc = -errno;
	if (!rc)
		crc_tls_move(nfd, fd);
	if (nfd >= 0) {
		if (rc)
			crc_tls_drop(nfd);
		close(nfd);
	}
	if (rc) {
		pr_err("cannot take session %llu back from crcudad after the checkpoint: %s%s%s",
		       (unsigned long long)crc_client.info.session_id, crc_strerror(rc), why[0] ? ": " : "",
		       why);
		return rc;
	}
	crc_chan_close(&crc_client.chan);
	crc_chan_open_tcp(&crc_client.chan, fd);
	pr_info("took session %llu back after the checkpoint",
		(unsigned long long)crc_client.info.session_id);
	return 0;
}

int crc_bulk_dial(unsigned index, const uint8_t key[32], char *why, size_t why_len)
{
	struct crc_hello hello = session_hello(CRC_ROLE_BULK, 32);
	const char *remote = getenv("CRCUDA_REMOTE"), *bad = getenv("CRCUDA_TEST_BULK_BAD_KEY");
	int fd;

	why[0] = 0;
	hello.bulk_index = index;
	memcpy(hello.token, key, 32);
	/* Tests: a connection that presents a wrong key (the worker refuses it). */
	if (bad && *bad && strcmp(bad, "0") && index == 0)
		hello.token[0] ^= 0x5a;
	/* Where the session's first connection went (its certificate names that host); a piece's header,
	 * then its bytes: nothing to wait for before sending either (TCP_NODELAY). */
	fd = remote && *remote ? dial_session(remote, &hello, true, why, why_len) : CRC_EINVAL;
	if (fd < 0 && !why[0])
		snprintf(why, why_len, "%s", crc_strerror(fd));
	return fd;
}

/* Parked with the channel lock held (a TCP session): acknowledges the request and, for a CRIU dump,
 * swaps the TCP connection for the park socket, then waits: on the TCP connection for RESUME; on the
 * park socket for RESUME (or its close: the checkpointer is gone), after which it takes the session
 * back, or for REBIND (restored: the socket is the new session's). */
static int park_tcp(void)
{
	struct crc_tcp_quiesce q = crc_client.quiesce;
	struct crc_tcp_quiesce_ack ack = {0};
	struct sockaddr_storage daemon;
	socklen_t dlen = sizeof(daemon);
	int fd = crc_client.chan.fd, park = -1, rc;
	void *p;

	crc_client.quiesce_pending = false;
	/* Closed before the checkpoint (CRIU cannot dump them, no TLS state is dumped); the next large
	 * copy opens them again. */
	crc_stripe_close();
	if (q.park[0] && getpeername(fd, (struct sockaddr *)&daemon, &dlen) == 0) {
		park = crc_unix_connect(q.park);
		if (park < 0)
			pr_warn("cannot connect to the checkpoint's park socket %s: %s", q.park,
				crc_strerror(park));
	}
	ack.detach = park >= 0;
	rc = crc_chan_reserve(&crc_client.chan, CRC_OP_QUIESCE_ACK, CRC_MSG_NOREPLY, ++crc_client.seq,
			      sizeof(ack), &p);
	if (!rc) {
		memcpy(p, &ack, sizeof(ack));
		rc = crc_chan_commit(&crc_client.chan);
	}
	if (!rc && park >= 0) {
		/* shutdown: the daemon sees the end even while the watcher's poll holds the socket. The TLS
		 * session ends here too: a restored process makes a new one (rebind), as does a reclaim. */
		shutdown(fd, SHUT_RDWR);
		crc_tls_drop(fd);
		rc = dup3(park, fd, O_CLOEXEC) < 0 ? -errno : 0;
	}
	if (park >= 0)
		close(park);
	if (rc)
		return rc;
	atomic_store(&crc_client.parked, 1);
	pr_debug("parked: TCP session quiesced%s", ack.detach ? ", detached" : "");
	for (;;) {
		struct pollfd pf = {.fd = fd, .events = POLLIN | POLLRDHUP};
		struct crc_sock_notice n;
		const struct crc_msg_hdr *m;
		int memfd = -1, nfds = 0;

		if (!(!ack.detach && crc_tls_pending(fd)) && poll(&pf, 1, 100) <= 0)
			continue;
		if (!ack.detach) {
			rc = crc_chan_next(&crc_client.chan, 0, &m);
			if (!rc) {
				unsigned op = tcp_notice(m);

				crc_chan_release(&crc_client.chan);
				if (op == CRC_OP_QUIESCE)
					continue;
				rc = op == CRC_OP_RESUME ? 0 : CRC_EPROTO;
			}
			break;
		}
		rc = pf.revents & POLLIN ? crc_sock_recv_fds(fd, &n, sizeof(n), &memfd, 1, &nfds)
					 : CRC_EDAEMON;
		if (!rc && n.magic == CRC_PROTO_MAGIC && n.kind == CRC_NOTICE_REBIND)
			rc = rebind(&n, nfds ? memfd : -1);
		else /* RESUME, or the checkpointer went away without a word */
			rc = reclaim(fd, &daemon, dlen, q.ticket, sizeof(q.ticket));
		if (memfd >= 0)
			close(memfd);
		break;
	}
	atomic_store(&crc_client.parked, 0);
	return rc;
}

static void sleep_ms(long ms)
{
	struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = ms % 1000 * 1000 * 1000};

	nanosleep(&ts, NULL);
}

/* Unix: only a restore writes to an idle session's socket (its REBIND notice, taken by parking); a
 * hangup (daemon gone) is the next call's to report. The control page is read with the channel lock
 * held only: a thread that rebinds (after a restore) unmaps the old one under it. */
static void watch_unix(short revents)
{
	struct crc_session_ctl *ctl;
	bool parked = false;

	if (!(revents & POLLIN) || pthread_mutex_trylock(&crc_client.lock)) {
		sleep_ms(100);
		return;
	}
	ctl = crc_client.chan.sctl;
	if (crc_client.state == 1 && !crc_client.tcp && ctl && atomic_load(&ctl->quiesce_req)) {
		int rc = park(ctl);

		if (rc)
			lost(rc);
		parked = true;
	}
	pthread_mutex_unlock(&crc_client.lock);
	if (!parked)
		sleep_ms(100);
}

/* TCP: a reply to a call in flight makes the socket readable too, and its caller reads it. Whoever
 * holds the channel next looks for notices (gate), or this thread once it is free. */
static void watch_tcp(void)
{
	atomic_store(&crc_client.rx_check, 1);
	while (atomic_load(&crc_client.rx_check)) {
		if (pthread_mutex_trylock(&crc_client.lock) == 0) {
			int rc = 0;

			if (crc_client.state == 1 && crc_client.tcp && atomic_load(&crc_client.rx_check))
				rc = tcp_notices();
			if (!rc && crc_client.quiesce_pending)
				rc = park_tcp();
			if (rc)
				lost(rc);
			pthread_mutex_unlock(&crc_client.lock);
			return;
		}
		sleep_ms(atomic_load(&crc_client.parked) ? 100 : 1);
	}
}

/* The watcher thread: the socket became readable while no call may read it.
 * TCP: a quiesce request (or another notice) for an idle client.
 * Unix: a restored client that was idle when it was dumped has a REBIND notice waiting there and its
 * (restored) control page still says quiesced: the watcher parks, which takes the notice, so that the
 * process holds its new session before its next call (and can be checkpointed again before one). */
static void *watch(void *arg)
{
	int fd = (int)(intptr_t)arg;

	for (;;) {
		struct pollfd pf = {.fd = fd, .events = POLLIN | POLLRDHUP};

		/* Started inside the handshake: the session is up once crc_connect says so (state 1). A
		 * watcher that gave up before that (it did, now and then, on a loaded machine) left an idle
		 * client deaf to a checkpoint. It ends when the session is lost (-1). */
		switch (__atomic_load_n(&crc_client.state, __ATOMIC_ACQUIRE)) {
		case 1:
			break;
		case 0:
			sleep_ms(10);
			continue;
		default:
			pthread_mutex_lock(&crc_client.lock);
			crc_client.watching = false;
			pthread_mutex_unlock(&crc_client.lock);
			return NULL;
		}
		if (poll(&pf, 1, 1000) <= 0 && !crc_tls_pending(fd))
			continue;
		if (__atomic_load_n(&crc_client.tcp, __ATOMIC_RELAXED))
			watch_tcp();
		else
			watch_unix(pf.revents);
	}
	return NULL;
}

/* With the channel lock held (or before the session is shared): one watcher per session. Signals
 * stay with the application's threads. */
static void watch_start(void)
{
	sigset_t all, old;
	pthread_t t;

	if (crc_client.watching)
		return;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	if (pthread_create(&t, NULL, watch, (void *)(intptr_t)crc_client.chan.fd) == 0) {
		pthread_detach(t);
		crc_client.watching = true;
	} else {
		pr_warn("no watcher thread: an idle client cannot be checkpointed over TCP, nor checkpointed "
			"again after a restore before its next call");
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
}

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Collective launch number n must wait: held, or beyond the cap, while they last (proto.h). */
static bool coll_blocked(struct crc_session_ctl *ctl, uint64_t n)
{
	uint64_t until = atomic_load(&ctl->coll_until), cap;

	if (!until || mono_ns() >= until)
		return false;
	if (atomic_load(&ctl->coll_hold))
		return true;
	cap = atomic_load(&ctl->coll_cap);
	return cap && n > cap;
}

/* Channel lock held, not busy: until launch n may go, or the session is to park (a quiesce, whose
 * resume or restore the gate's park then waits for). */
static void coll_wait(struct crc_session_ctl *ctl, uint64_t n)
{
	pr_debug("collective launch %llu waits for the other processes", (unsigned long long)n);
	for (;;) {
		uint32_t seq = atomic_load(&ctl->wake_seq);
		struct timespec ts = {.tv_nsec = 100 * 1000 * 1000};

		if (!coll_blocked(ctl, n) || atomic_load(&ctl->quiesce_req))
			return;
		syscall(SYS_futex, &ctl->wake_seq, FUTEX_WAIT, seq, &ts, NULL, 0);
	}
}

/* With the channel lock held: mark the call busy, or park while the session is quiesced. A collective
 * launch is counted, or waits while held or capped. */
static int gate(void)
{
	bool collective = crc_self()->collective;

	for (;;) {
		struct crc_session_ctl *ctl = crc_client.chan.sctl;
		int rc;

		if (!ctl && crc_client.tcp) {
			if (atomic_load(&crc_client.rx_check) && (rc = tcp_notices()))
				return rc;
			if (!crc_client.quiesce_pending)
				return 0;
			rc = park_tcp();
			if (rc)
				return rc;
			continue;
		}
		if (!ctl)
			return 0;
		atomic_store_explicit(&ctl->client_busy, 1, memory_order_seq_cst);
		atomic_thread_fence(memory_order_seq_cst);
		if (!atomic_load_explicit(&ctl->quiesce_req, memory_order_seq_cst)) {
			uint64_t n;

			if (!collective)
				return 0;
			/* Add, then read the hold (seq_cst): the daemon stores the hold, then reads the
			 * count. */
			n = atomic_fetch_add(&ctl->coll_launched, 1) + 1;
			if (!coll_blocked(ctl, n))
				return 0;
			atomic_fetch_sub(&ctl->coll_launched, 1);
			atomic_store_explicit(&ctl->client_busy, 0, memory_order_seq_cst);
			coll_wait(ctl, n);
			continue;
		}
		atomic_store_explicit(&ctl->client_busy, 0, memory_order_seq_cst);
		rc = park(ctl);
		if (rc)
			return rc;
	}
}

CUresult crc_ctl_begin(struct crc_call *c, uint16_t op, uint16_t flags, size_t len, void **payload)
{
	CUresult res = crc_ready();
	int rc;

	if (res != CUDA_SUCCESS)
		return res;
	pthread_mutex_lock(&crc_client.lock);
	if (crc_client.state != 1) {
		pthread_mutex_unlock(&crc_client.lock);
		return CRC_CU_DAEMON_GONE;
	}
	rc = gate();
	if (rc) {
		chan_unlock();
		return lost(rc);
	}
	memset(c, 0, sizeof(*c));
	c->op = op;
	c->seq = ++crc_client.seq;
	rc = crc_chan_reserve(&crc_client.chan, op, flags, c->seq, len, payload);
	if (rc) {
		chan_unlock();
		return rc == CRC_EINVAL ? CUDA_ERROR_INVALID_VALUE : lost(rc);
	}
	return CUDA_SUCCESS;
}

CUresult crc_ctl_with_fd(uint16_t op, const void *req, size_t len, int fd, void *out, size_t out_len)
{
	char byte = 0;
	struct crc_call c;
	void *args;
	CUresult res = crc_ctl_begin(&c, op, 0, len, &args);

	if (res != CUDA_SUCCESS)
		return res;
	if (len)
		memcpy(args, req, len);
	/* The descriptor goes on the socket first; the daemon takes it when it reaches the record. Both
	 * under the channel lock, so no other such record can slip in between. */
	if (crc_sock_send_fds(crc_client.chan.fd, &byte, 1, &fd, 1)) {
		crc_call_end(&c);
		return CRC_CU_DAEMON_GONE;
	}
	res = crc_call_wait(&c, NULL, NULL);
	if (res == CUDA_SUCCESS && out_len && c.reply_len >= out_len)
		memcpy(out, c.reply, out_len);
	crc_call_end(&c);
	return res;
}

/* Calls that run on a stream and may read or write device memory: __managed__ variables' copies here
 * must be settled before them (managed_vars.c). By name, so every variant is one. */
static bool is_gpu_work(uint16_t op)
{
	static const char *const prefixes[] = {
	    "cuLaunch",		  "cuGraphLaunch",     "cuMemcpy",	     "cuMemset",
	    "cuStreamWriteValue", "cuStreamWaitValue", "cuStreamBatchMemOp", "cuMemBatchDecompress"};
	static _Atomic signed char known[CRC_CU_COUNT]; /* 0 unknown, 1 work, -1 not */
	signed char k;

	if (op >= CRC_CU_COUNT)
		return false;
	k = atomic_load_explicit(&known[op], memory_order_relaxed);
	if (!k) {
		k = -1;
		for (size_t i = 0; i < sizeof(prefixes) / sizeof(prefixes[0]); i++)
			if (!strncmp(crc_cu_table[op].sym, prefixes[i], strlen(prefixes[i])))
				k = 1;
		atomic_store_explicit(&known[op], k, memory_order_relaxed);
	}
	return k > 0;
}

CUresult crc_call_begin(struct crc_call *c, uint16_t op, uint16_t flags, size_t len, void **args)
{
	struct crc_thread *t = crc_self();
	struct crc_call_hdr *h;
	CUresult res;

	if (is_gpu_work(op)) {
		/* Their calls are no collective launch, whatever this one is. */
		bool collective = t->collective;

		t->collective = false;
		crc_mvar_before_work();
		crc_managed_before_work();
		t->collective = collective;
	}
	res = crc_ctl_begin(c, op, flags, sizeof(*h) + len, (void **)&h);

	if (res != CUDA_SUCCESS)
		return res;
	h->ctx = t->depth ? t->ctx_stack[t->depth - 1] : 0;
	h->thread = t->tid;
	h->flags = t->ptds ? CRC_CALL_PTDS : 0;
	*args = h + 1;
	return CUDA_SUCCESS;
}

CUresult crc_call_post(struct crc_call *c)
{
	int rc = crc_chan_commit(&crc_client.chan);

	atomic_fetch_add_explicit(&crc_stat_posted, 1, memory_order_relaxed);
	chan_unlock();
	(void)c;
	return rc ? lost(rc) : CUDA_SUCCESS;
}

CUresult crc_call_post_more(struct crc_call *c)
{
	int rc = crc_chan_commit(&crc_client.chan);

	atomic_fetch_add_explicit(&crc_stat_posted, 1, memory_order_relaxed);
	(void)c;
	if (rc) {
		chan_unlock();
		return lost(rc);
	}
	return CUDA_SUCCESS;
}

CUresult crc_call_next(struct crc_call *c, uint16_t op, uint16_t flags, size_t len, void **args)
{
	struct crc_thread *t = crc_self();
	struct crc_call_hdr *h;
	int rc;

	c->op = op;
	c->seq = ++crc_client.seq;
	rc = crc_chan_reserve(&crc_client.chan, op, flags, c->seq, sizeof(*h) + len, (void **)&h);
	if (rc) {
		chan_unlock();
		return rc == CRC_EINVAL ? CUDA_ERROR_INVALID_VALUE : lost(rc);
	}
	h->ctx = t->depth ? t->ctx_stack[t->depth - 1] : 0;
	h->thread = t->tid;
	h->flags = t->ptds ? CRC_CALL_PTDS : 0;
	*args = h + 1;
	return CUDA_SUCCESS;
}

CUresult crc_call_wait(struct crc_call *c, crc_data_fn *on_data, void *arg)
{
	const struct crc_msg_hdr *m;
	const struct crc_reply_hdr *rh;
	int rc = c->sent ? 0 : crc_chan_commit(&crc_client.chan);

	atomic_fetch_add_explicit(&crc_stat_roundtrips, 1, memory_order_relaxed);
	if (rc)
		return lost(rc);
	for (;;) {
		rc = crc_chan_next(&crc_client.chan, -1, &m);
		if (rc)
			return lost(rc);
		if (crc_client.tcp && tcp_notice(m)) {
			crc_chan_release(&crc_client.chan);
			continue;
		}
		if (m->op != c->op || m->seq != c->seq) {
			crc_chan_release(&crc_client.chan);
			pr_err("reply for op %u seq %llu while waiting for op %u seq %llu", m->op,
			       (unsigned long long)m->seq, c->op, (unsigned long long)c->seq);
			return lost(CRC_EPROTO);
		}
		if (!(m->flags & CRC_MSG_MORE))
			break;
		if (on_data)
			on_data(arg, crc_msg_payload(m), crc_msg_payload_len(m));
		crc_chan_release(&crc_client.chan);
	}
	c->reply_msg = m;
	if (crc_msg_payload_len(m) < sizeof(*rh)) {
		crc_chan_release(&crc_client.chan);
		c->reply_msg = NULL;
		return lost(CRC_EPROTO);
	}
	rh = crc_msg_payload(m);
	c->reply = rh + 1;
	c->reply_len = crc_msg_payload_len(m) - sizeof(*rh);
	return (CUresult)rh->result;
}

CUresult crc_call_send(struct crc_call *c)
{
	int rc = crc_chan_commit(&crc_client.chan);

	if (rc)
		return lost(rc);
	c->sent = true;
	return CUDA_SUCCESS;
}

void crc_call_end(struct crc_call *c)
{
	if (c->reply_msg && crc_client.state == 1)
		crc_chan_release(&crc_client.chan);
	c->reply_msg = NULL;
	chan_unlock();
}

CUresult crc_rpc(uint16_t op, const void *args, size_t len, void *out, size_t out_len)
{
	struct crc_call c;
	void *p;
	CUresult res = crc_call_begin(&c, op, 0, len, &p);

	if (res != CUDA_SUCCESS)
		return res;
	if (len)
		memcpy(p, args, len);
	res = crc_call_wait(&c, NULL, NULL);
	if (res == CUDA_SUCCESS && out_len) {
		if (c.reply_len < out_len)
			res = lost(CRC_EPROTO);
		else
			memcpy(out, c.reply, out_len);
	}
	crc_call_end(&c);
	return res;
}

CUresult crc_post(uint16_t op, const void *args, size_t len)
{
	struct crc_call c;
	void *p;
	CUresult res = crc_call_begin(&c, op, CRC_MSG_NOREPLY, len, &p);

	if (res != CUDA_SUCCESS)
		return res;
	if (len)
		memcpy(p, args, len);
	return crc_call_post(&c);
}

/* Why each unsupported row is (common/cuda-api/cuda_driver.api); rows still pending have none. */
static const char *const unsupported_why[CRC_CU_COUNT] = {
#define CRC_CU_WHY(sym, why) [CRC_CU_##sym] = why,
#include "crcuda/cuda_api_why.def"
#undef CRC_CU_WHY
};

CUresult crc_not_supported(int id)
{
	static _Atomic unsigned char logged[CRC_CU_COUNT];

	if (id >= 0 && id < CRC_CU_COUNT && !atomic_exchange(&logged[id], 1))
		pr_warn("%s is not supported by crcuda (%s): returning CUDA_ERROR_NOT_SUPPORTED",
			crc_cu_table[id].sym, unsupported_why[id] ? unsupported_why[id] : "not served yet");
	return CUDA_ERROR_NOT_SUPPORTED;
}

/* Orderly goodbye, so the daemon frees the session at once rather than at socket hang-up. */
__attribute__((destructor)) static void say_bye(void)
{
	struct crc_call c;
	void *p;

	if (crc_client.state != 1)
		return;
	if (crc_ctl_begin(&c, CRC_OP_BYE, CRC_MSG_NOREPLY, 0, &p) == CUDA_SUCCESS)
		crc_call_post(&c);
}
