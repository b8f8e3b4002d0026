/* The workers: started with posix_spawn (crcudad-worker, link.h), kept warm in a pool, assigned one
 * application each, found by pid or session id, reaped when their link hangs up. */
#define LOG_PREFIX "crcudad: "
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "crcuda/errno.h"
#include "crcuda/log.h"
#include "crcuda/tls.h"
#include "front.h"

extern char **environ;

static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static struct worker *workers;
static uint64_t next_session_id;
static double spawn_failed_at; /* a worker that could not initialise: the pool waits a while */

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void worker_free(struct worker *w)
{
	if (w->link >= 0)
		close(w->link);
	if (w->st)
		munmap(w->st, sizeof(*w->st));
	free(w);
}

/* A new worker process, linked in (reg_lock held). NULL with errno-style rc in *rc. */
static struct worker *spawn(int *rc)
{
	struct worker *w = calloc(1, sizeof(*w));
	char base[32], size[32], ring[32], level[16];
	char *argv[12];
	int sv[2] = {-1, -1}, ipc[2] = {-1, -1}, memfd = -1, child_link = -1, child_memfd = -1,
	    child_ipc = -1, n = 0;
	posix_spawn_file_actions_t fa;

	*rc = CRC_ENOMEM;
	if (!w)
		return NULL;
	w->link = -1;
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) ||
	    socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, ipc) ||
	    (memfd = memfd_create("crcuda-worker-status", MFD_CLOEXEC)) < 0 ||
	    ftruncate(memfd, sizeof(*w->st))) {
		*rc = -errno;
		goto fail;
	}
	w->st = mmap(NULL, sizeof(*w->st), PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
	if (w->st == MAP_FAILED) {
		w->st = NULL;
		*rc = -errno;
		goto fail;
	}
	/* The device facts the first worker found: the next ones need not query them again. */
	w->st->proto = fr.proto;
	/* Above the numbers they are given as in the child, so that the dup2 there clears close-on-exec. */
	child_link = fcntl(sv[1], F_DUPFD_CLOEXEC, 10);
	child_memfd = fcntl(memfd, F_DUPFD_CLOEXEC, 10);
	child_ipc = fcntl(ipc[1], F_DUPFD_CLOEXEC, 10);
	if (child_link < 0 || child_memfd < 0 || child_ipc < 0) {
		*rc = -errno;
		goto fail;
	}
	snprintf(base, sizeof(base), "%#llx", (unsigned long long)fr.va_base);
	snprintf(size, sizeof(size), "%#llx", (unsigned long long)fr.va_session);
	snprintf(ring, sizeof(ring), "%zu", fr.ring_size);
	argv[n++] = "crcudad-worker";
	argv[n++] = "--backend-lib", argv[n++] = fr.backend_lib;
	argv[n++] = "--va-base", argv[n++] = base;
	argv[n++] = "--va-session", argv[n++] = size;
	argv[n++] = "--ring-size", argv[n++] = ring;
	snprintf(level, sizeof(level), "%d", fr.log_level);
	argv[n++] = "--log-level", argv[n++] = level;
	argv[n] = NULL;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, child_link, CRC_LINK_FD);
	posix_spawn_file_actions_adddup2(&fa, child_memfd, CRC_LINK_STATUS_FD);
	posix_spawn_file_actions_adddup2(&fa, child_ipc, CRC_LINK_IPC_FD);
	*rc = -posix_spawn(&w->pid, fr.worker_exe, &fa, NULL, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	if (*rc)
		goto fail;
	close(sv[1]);
	close(ipc[1]);
	close(child_link);
	close(child_memfd);
	close(child_ipc);
	close(memfd);
	w->link = sv[0];
	if (crc_ipc_serve_worker(ipc[0]))
		pr_warn("worker %d: no CUDA IPC registry thread: its IPC calls will fail", (int)w->pid);
	w->next = workers;
	workers = w;
	pr_debug("worker %d started", (int)w->pid);
	return w;
fail:
	pr_err("cannot start a worker (%s): %s", fr.worker_exe, crc_strerror(*rc));
	for (int i = 0; i < 2; i++) {
		if (sv[i] >= 0)
			close(sv[i]);
		if (ipc[i] >= 0)
			close(ipc[i]);
	}
	if (memfd >= 0)
		close(memfd);
	if (child_link >= 0)
		close(child_link);
	if (child_memfd >= 0)
		close(child_memfd);
	if (child_ipc >= 0)
		close(child_ipc);
	worker_free(w);
	return NULL;
}

int crc_workers_start(void)
{
	struct worker *w;
	int rc;
	uint32_t phase;

	pthread_mutex_lock(&reg_lock);
	w = spawn(&rc);
	pthread_mutex_unlock(&reg_lock);
	if (!w)
		return rc;
	/* Its device facts answer every control hello; it stays as the pool's first. */
	while ((phase = atomic_load(&w->st->phase)) == CRC_WORKER_STARTING) {
		struct pollfd p = {.fd = w->link, .events = POLLIN};

		if (poll(&p, 1, 20) > 0 && (p.revents & (POLLHUP | POLLERR)))
			break;
	}
	phase = atomic_load(&w->st->phase);
	if (phase != CRC_WORKER_READY) {
		pr_err("the first worker could not start: %s",
		       w->st->error[0] ? w->st->error : "it exited (see the lines above)");
		crc_workers_stop();
		return CRC_EDAEMON;
	}
	fr.proto = w->st->proto;
	if (fr.proto.init_result)
		pr_warn("the backend's cuInit failed (%d): clients will get that error",
			fr.proto.init_result);
	for (uint32_t d = 0; d < fr.proto.dev_count && d < CRC_MAX_DEVICES; d++)
		pr_info("device %u: %s, %llu MiB, %s", d, fr.proto.devs[d].name,
			(unsigned long long)(fr.proto.devs[d].total_mem >> 20), fr.proto.devs[d].pci_bus_id);
	return 0;
}

static void describe_exit(struct worker *w, int status)
{
	char how[64];

	if (WIFSIGNALED(status))
		snprintf(how, sizeof(how), "killed by signal %d", WTERMSIG(status));
	else
		snprintf(how, sizeof(how), "exit status %d", WEXITSTATUS(status));
	if (!w->assigned)
		pr_warn("pool worker %d ended (%s)%s%s", (int)w->pid, how, w->st->error[0] ? ": " : "",
			w->st->error);
	else if (WIFSIGNALED(status) || WEXITSTATUS(status))
		pr_warn("worker %d of session %llu (pid %d) died (%s): its application gets an error",
			(int)w->pid, (unsigned long long)w->session_id, (int)w->peer.pid, how);
	else
		pr_info("worker %d of session %llu ended", (int)w->pid, (unsigned long long)w->session_id);
}

void crc_workers_tend(void)
{
	unsigned idle = 0;
	bool moving = false;
	int rc;

	pthread_mutex_lock(&reg_lock);
	for (struct worker **pp = &workers, *w; (w = *pp);) {
		struct pollfd p = {.fd = w->link, .events = POLLIN};
		int status;

		if (!w->gone && poll(&p, 1, 0) > 0 && (p.revents & (POLLHUP | POLLERR | POLLIN)) &&
		    waitpid(w->pid, &status, 0) == w->pid) {
			w->gone = true;
			describe_exit(w, status);
			if (!w->assigned && atomic_load(&w->st->phase) != CRC_WORKER_READY)
				spawn_failed_at = now_s();
		}
		if (w->gone && !w->refs) {
			*pp = w->next;
			worker_free(w);
			continue;
		}
		idle += !w->gone && !w->assigned;
		moving |= !w->gone && (atomic_load(&w->st->progress.active) || atomic_load(&w->st->restores));
		pp = &w->next;
	}
	/* Not while a worker moves device memory or restores: a worker making itself ready (cuInit, its
	 * context, its pinned staging) beside a restore's upload held it to 66-72% of pinned H2D on an H200
	 * host, where the same upload a moment later reached 77-81% (bench/checkpoint.sh). A restore counts
	 * from its request: the pool's worker it takes is replaced only once it is done. An application
	 * that comes meanwhile gets a worker started for it (crc_worker_take). */
	while (!moving && idle < fr.pool && now_s() - spawn_failed_at > 5 && spawn(&rc))
		idle++;
	pthread_mutex_unlock(&reg_lock);
}

unsigned crc_workers_pollfds(int *fds, unsigned max)
{
	unsigned n = 0;

	pthread_mutex_lock(&reg_lock);
	for (struct worker *w = workers; w && n < max; w = w->next)
		if (!w->gone)
			fds[n++] = w->link;
	pthread_mutex_unlock(&reg_lock);
	return n;
}

struct worker *crc_worker_take(const struct crc_peer *peer, bool tcp, bool restore, char *why, size_t why_len)
{
	struct worker *best = NULL;
	int rc;

	pthread_mutex_lock(&reg_lock);
	/* A warm one (initialised) first, else one still starting, else a new one. */
	for (struct worker *w = workers; w; w = w->next) {
		uint32_t phase = atomic_load(&w->st->phase);

		if (w->gone || w->assigned || (phase != CRC_WORKER_READY && phase != CRC_WORKER_STARTING))
			continue;
		if (!best || phase == CRC_WORKER_READY)
			best = w;
		if (phase == CRC_WORKER_READY)
			break;
	}
	if (!best)
		best = spawn(&rc);
	if (!best) {
		snprintf(why, why_len, "cannot start a GPU worker: %s", crc_strerror(rc));
	} else {
		best->assigned = true;
		best->session_id = ++next_session_id;
		best->peer = *peer;
		best->tcp = tcp;
		best->restore = restore;
		best->refs++;
	}
	pthread_mutex_unlock(&reg_lock);
	return best;
}

/* Its session as the front knows it, before the worker has published it. */
static bool worker_live(const struct worker *w)
{
	return !w->gone && w->assigned && atomic_load(&w->st->phase) == CRC_WORKER_SERVING;
}

struct worker *crc_worker_find(pid_t pid, uint64_t session_id)
{
	struct worker *found = NULL;

	pthread_mutex_lock(&reg_lock);
	for (struct worker *w = workers; w; w = w->next) {
		if (!worker_live(w) || (pid ? w->peer.pid != pid : w->session_id != session_id))
			continue;
		/* By pid: the newest (an exec keeps the pid; the older session is going away). */
		if (!found || w->session_id > found->session_id)
			found = w;
	}
	if (found)
		found->refs++;
	pthread_mutex_unlock(&reg_lock);
	return found;
}

struct worker *crc_worker_find_staged(uint64_t key, uid_t uid, bool take, pid_t pid)
{
	struct worker *found = NULL;

	pthread_mutex_lock(&reg_lock);
	for (struct worker *w = workers; w && !found; w = w->next)
		if (!w->gone && w->assigned && key && w->stage_key == key && (!uid || w->peer.uid == uid))
			found = w;
	if (found) {
		found->refs++;
		if (take) {
			found->stage_key = 0;
			found->peer.pid = pid;
		}
	}
	pthread_mutex_unlock(&reg_lock);
	return found;
}

void crc_worker_set_stage_key(struct worker *w, uint64_t key)
{
	pthread_mutex_lock(&reg_lock);
	w->stage_key = key;
	pthread_mutex_unlock(&reg_lock);
}

void crc_worker_put(struct worker *w)
{
	pthread_mutex_lock(&reg_lock);
	w->refs--;
	pthread_mutex_unlock(&reg_lock);
}

int crc_front_handoff(int fd, struct crc_link_msg *m, const struct crc_msg_hdr *req)
{
	struct crc_tls_handoff h = {.magic = CRC_PROTO_MAGIC, .version = CRC_PROTO_VERSION};
	int rc;

	if (!crc_tls_on(fd))
		return 0;
	rc = crc_tls_random(h.key, sizeof(h.key));
	if (!rc && req) {
		struct crc_msg_hdr hh = {.op = CRC_OP_CTL_HANDOFF, .seq = req->seq};

		rc = crc_ctl_reply_send(fd, &hh, 0, NULL, h.key, sizeof(h.key));
	}
	if (!rc && !req)
		rc = crc_sock_write_all(fd, &h, sizeof(h));
	if (!rc) {
		memcpy(m->key, h.key, sizeof(m->key));
		m->tls = 1;
	}
	crc_tls_drop(fd);
	memset(h.key, 0, sizeof(h.key));
	return rc;
}

int crc_worker_hand(struct worker *w, struct crc_link_msg *m, int fd, const void *extra, size_t extra_len)
{
	size_t len = sizeof(*m) + extra_len;
	uint8_t *buf;
	int rc;

	if (extra_len > CRC_LINK_MAX_REQ || !(buf = malloc(len))) {
		close(fd);
		return extra_len > CRC_LINK_MAX_REQ ? CRC_EINVAL : CRC_ENOMEM;
	}
	m->session_id = w->session_id;
	m->req_len = (uint32_t)extra_len;
	memcpy(buf, m, sizeof(*m));
	if (extra_len)
		memcpy(buf + sizeof(*m), extra, extra_len);
	rc = crc_sock_send_fds(w->link, buf, len, &fd, 1);
	free(buf);
	close(fd);
	return rc;
}

bool crc_worker_session(const struct worker *w, struct crc_ctl_session_wire *out)
{
	uint32_t s0, s1;

	if (!worker_live(w))
		return false;
	do {
		s0 = atomic_load_explicit(&w->st->seq, memory_order_acquire);
		*out = w->st->session;
		atomic_thread_fence(memory_order_acquire);
		s1 = atomic_load_explicit(&w->st->seq, memory_order_acquire);
	} while (s0 != s1 || (s0 & 1));
	if (out->session_id != w->session_id) {
		/* Not published yet: what the front knows. */
		*out = (struct crc_ctl_session_wire){
		    .session_id = w->session_id,
		    .pid = w->peer.pid,
		    .uid = w->peer.uid,
		    .va_base = fr.va_base,
		    .va_size = fr.va_session,
		    .state = w->restore ? CRC_CTL_RESTORING : CRC_CTL_RUNNING,
		    .transport = w->tcp ? CRC_TRANSPORT_TCP : CRC_TRANSPORT_UNIX,
		};
	}
	out->worker_pid = w->pid;
	return true;
}

unsigned crc_workers_list(struct crc_ctl_session_wire *out, unsigned max)
{
	unsigned n = 0;

	pthread_mutex_lock(&reg_lock);
	for (struct worker *w = workers; w && n < max; w = w->next)
		if (crc_worker_session(w, &out[n]) && out[n].state != CRC_CTL_RESTORING)
			n++;
	pthread_mutex_unlock(&reg_lock);
	return n;
}

unsigned crc_workers_busy(void)
{
	unsigned n = 0;

	pthread_mutex_lock(&reg_lock);
	for (struct worker *w = workers; w; w = w->next)
		n += !w->gone && w->assigned;
	pthread_mutex_unlock(&reg_lock);
	return n;
}

void crc_workers_stop(void)
{
	pthread_mutex_lock(&reg_lock);
	for (struct worker *w = workers; w; w = w->next)
		if (!w->gone) {
			int status;

			kill(w->pid, SIGTERM);
			waitpid(w->pid, &status, 0);
			w->gone = true;
		}
	pthread_mutex_unlock(&reg_lock);
}
