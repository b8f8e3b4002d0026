/* Control connections (crcuda/ctl.h) at the front. Sessions are listed here, from the workers' status
 * pages. A restore goes to a fresh worker with the connection itself (it becomes the restored session's
 * socket). Commands on a session (quiesce, checkpoint, commit, abort, resume) are proxied to its worker
 * over a socket pair made for this connection and that worker: the worker sees one control connection
 * per crcudactl or plugin connection, and it ending when that one ends (a checkpointer that died
 * mid-dump is noticed there). */
#define LOG_PREFIX "control: "
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "crcuda/errno.h"
#include "crcuda/log.h"
#include "crcuda/tls.h"
#include "front.h"

struct proxy {
	struct worker *w;
	int fd;
};

struct control {
	int fd;
	bool tcp;
	struct crc_peer peer;
	struct proxy proxies[4]; /* the workers this connection talked to */
};

static void list_sessions(struct control *c, const struct crc_msg_hdr *h)
{
	static const unsigned max = 1024;
	struct crc_ctl_session_wire *w = calloc(max, sizeof(*w));
	unsigned n = w ? crc_workers_list(w, max) : 0;

	crc_ctl_reply_send(c->fd, h, w ? 0 : CRC_ENOMEM, w ? NULL : "out of memory", w, n * sizeof(*w));
	free(w);
}

/* The worker's progress page, read here: the worker may be busy with that very checkpoint or restore. */
static void progress(struct control *c, const struct crc_msg_hdr *h, const uint8_t *p, size_t len)
{
	const struct crc_ctl_req *r = (const void *)p;
	struct crc_ctl_progress_wire out = {0};
	struct worker *w =
	    len >= sizeof(*r) && (r->pid || r->session_id) ? crc_worker_find(r->pid, r->session_id) : NULL;

	if (!w) {
		crc_ctl_reply_send(c->fd, h, CRC_ENOTFOUND, "no such session on this daemon", NULL, 0);
		return;
	}
	out.op = atomic_load(&w->st->progress.op);
	out.done = atomic_load(&w->st->progress.done);
	out.total = atomic_load(&w->st->progress.total);
	out.ns = atomic_load(&w->st->progress.ns);
	crc_worker_put(w);
	crc_ctl_reply_send(c->fd, h, 0, NULL, &out, sizeof(out));
}

/* The proxy socket to w for this connection, made and handed over on first use. */
static int proxy_fd(struct control *c, struct worker *w)
{
	struct proxy *free_slot = NULL;
	struct crc_link_msg m = {.kind = CRC_LINK_CONTROL, .tcp = c->tcp, .peer = c->peer};
	int sv[2], rc;

	for (unsigned i = 0; i < sizeof(c->proxies) / sizeof(c->proxies[0]); i++) {
		if (c->proxies[i].w == w) {
			crc_worker_put(w); /* the slot holds it already */
			return c->proxies[i].fd;
		}
		if (!c->proxies[i].w && !free_slot)
			free_slot = &c->proxies[i];
	}
	if (!free_slot)
		return CRC_EBUSY;
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv))
		return -errno;
	rc = crc_worker_hand(w, &m, sv[1], NULL, 0);
	if (rc) {
		close(sv[0]);
		return rc;
	}
	/* The slot keeps the caller's hold on w. */
	free_slot->w = w;
	free_slot->fd = sv[0];
	return sv[0];
}

/* Forwards one request to the session's worker and its reply back. */
static void proxy_request(struct control *c, const struct crc_msg_hdr *h, const uint8_t *p, size_t len)
{
	const struct crc_ctl_req *r = (const void *)p;
	struct worker *w;
	struct crc_msg_hdr rh;
	uint8_t *reply = NULL;
	size_t reply_len = 0;
	char why[CRC_CTL_MSG_MAX];
	int fd, rc;

	w = crc_worker_find(r->pid, r->session_id);
	if (!w) {
		if (r->pid)
			snprintf(why, sizeof(why), "no session of pid %d on this daemon", (int)r->pid);
		else
			snprintf(why, sizeof(why), "no session %llu on this daemon",
				 (unsigned long long)r->session_id);
		crc_ctl_reply_send(c->fd, h, CRC_ENOTFOUND, why, NULL, 0);
		return;
	}
	if (!c->tcp && c->peer.uid != 0 && c->peer.uid != w->peer.uid) {
		snprintf(why, sizeof(why), "session %llu belongs to uid %u",
			 (unsigned long long)w->session_id, (unsigned)w->peer.uid);
		crc_worker_put(w);
		crc_ctl_reply_send(c->fd, h, CRC_EPERM, why, NULL, 0);
		return;
	}
	fd = proxy_fd(c, w); /* keeps our hold on w on success */
	if (fd < 0) {
		crc_worker_put(w);
		snprintf(why, sizeof(why), "cannot reach the worker of session %llu: %s",
			 (unsigned long long)w->session_id, crc_strerror(fd));
		crc_ctl_reply_send(c->fd, h, CRC_EDAEMON, why, NULL, 0);
		return;
	}
	rc = crc_sock_write_all(fd, h, sizeof(*h));
	if (!rc)
		rc = crc_sock_write_all(fd, p, len);
	if (!rc)
		rc = crc_ctl_record_read(fd, &rh, &reply, &reply_len, sizeof(struct crc_ctl_reply), 1u << 20);
	if (rc) {
		snprintf(why, sizeof(why), "the worker (pid %d) of session %llu ended during the request: %s",
			 (int)w->pid, (unsigned long long)w->session_id, crc_strerror(rc));
		crc_ctl_reply_send(c->fd, h, CRC_EDAEMON, why, NULL, 0);
	} else if ((crc_sock_write_all(c->fd, &rh, sizeof(rh)) ||
		    crc_sock_write_all(c->fd, reply, reply_len)) &&
		   h->op == CRC_OP_CTL_QUIESCE && reply_len >= sizeof(struct crc_ctl_reply) &&
		   !((const struct crc_ctl_reply *)reply)->status) {
		/* Quiesced after its requester went away (a drain that waited for another process's
		 * kernel past a cancelled checkpoint): nobody knows it is stopped, so it runs on. */
		struct crc_msg_hdr rq = {
		    .len = (uint32_t)(sizeof(rq) + sizeof(*r)), .op = CRC_OP_CTL_RESUME, .seq = h->seq};

		pr_warn("session %llu: quiesced after its requester went away: resuming it",
			(unsigned long long)w->session_id);
		free(reply);
		reply = NULL;
		if (!crc_sock_write_all(fd, &rq, sizeof(rq)) && !crc_sock_write_all(fd, r, sizeof(*r)))
			crc_ctl_record_read(fd, &rh, &reply, &reply_len, sizeof(struct crc_ctl_reply),
					    1u << 20);
	}
	free(reply);
}

/* How long a restore waits for the stage request its key names to reach this front. */
#define STAGE_ROUTE_WAIT_MS 1000

/* A restore: a worker of its own takes the connection. false: the connection is handed over. */
static bool restore(struct control *c, const struct crc_msg_hdr *h, const uint8_t *p, size_t len)
{
	const struct crc_ctl_restore_wire *rw = (const void *)p;
	struct crc_link_msg m = {.kind = CRC_LINK_RESTORE, .tcp = c->tcp, .peer = c->peer};
	struct crc_peer client = c->peer;
	char why[CRC_CTL_MSG_MAX];
	struct worker *w;
	uint64_t stage_key = 0;
	uint8_t *req;
	int rc;

	if (len <= sizeof(*rw) || p[len - 1] || sizeof(*h) + len > CRC_LINK_MAX_REQ) {
		crc_ctl_reply_send(c->fd, h, CRC_EINVAL, "malformed restore request", NULL, 0);
		return true;
	}
	client.pid = rw->pid;
	/* A restore staged under its key goes to the worker that staged it (which uploads only what
	 * changed since); without one, a fresh worker restores it all. */
	w = rw->stage_key ? crc_worker_find_staged(rw->stage_key, (uid_t)c->peer.uid,
						   !(rw->flags & CRC_RESTORE_STAGE), rw->pid)
			  : NULL;
	/* A restore under a key whose stage request is on its way (crcudactl restore sends it just
	 * before it starts CRIU, which sends this) waits for it a little. */
	for (int i = 0; !w && rw->stage_key && !(rw->flags & CRC_RESTORE_STAGE) && i < STAGE_ROUTE_WAIT_MS;
	     i += 2) {
		usleep(2000);
		w = crc_worker_find_staged(rw->stage_key, (uid_t)c->peer.uid, true, rw->pid);
	}
	if (!w && (w = crc_worker_take(&client, c->tcp, true, why, sizeof(why))) &&
	    (rw->flags & CRC_RESTORE_STAGE))
		stage_key = rw->stage_key;
	if (!w) {
		crc_ctl_reply_send(c->fd, h, CRC_EDAEMON, why, NULL, 0);
		return true;
	}
	req = malloc(sizeof(*h) + len);
	if (!req) {
		crc_worker_put(w);
		crc_ctl_reply_send(c->fd, h, CRC_ENOMEM, "out of memory", NULL, 0);
		return true;
	}
	memcpy(req, h, sizeof(*h));
	memcpy(req + sizeof(*h), p, len);
	rc = crc_front_handoff(c->fd, &m, h);
	if (rc)
		close(c->fd);
	else
		rc = crc_worker_hand(w, &m, c->fd, req, sizeof(*h) + len);
	/* Only now: a restore under the key, handed before the stage, would reach the worker first. */
	if (!rc && stage_key)
		crc_worker_set_stage_key(w, stage_key);
	free(req);
	crc_worker_put(w);
	if (rc)
		pr_warn("cannot hand a restore to worker %d: %s", (int)w->pid, crc_strerror(rc));
	c->fd = -1;
	return false;
}

/* false when the connection is over (or handed over). */
static bool serve_request(struct control *c, const struct crc_msg_hdr *h, const uint8_t *p, size_t len)
{
	switch (h->op) {
	case CRC_OP_CTL_SESSIONS:
		list_sessions(c, h);
		return true;
	case CRC_OP_CTL_RESTORE:
		return restore(c, h, p, len);
	case CRC_OP_CTL_PROGRESS:
		progress(c, h, p, len);
		return true;
	default:
		break;
	}
	if (len < sizeof(struct crc_ctl_req) || h->op < CRC_OP_CTL_QUIESCE ||
	    (h->op > CRC_OP_CTL_RESUME && h->op != CRC_OP_CTL_COMMIT_WAIT && h->op != CRC_OP_CTL_COLLECTIVE &&
	     h->op != CRC_OP_CTL_SUSPEND)) {
		crc_ctl_reply_send(c->fd, h, CRC_EINVAL, "malformed control request", NULL, 0);
		return true;
	}
	proxy_request(c, h, p, len);
	return true;
}

static void *control_main(void *arg)
{
	struct control *c = arg;
	uint8_t *buf = NULL;
	struct crc_msg_hdr h;
	size_t len;
	int rc;

	atomic_fetch_add(&fr.controls, 1);
	while (!(rc = crc_ctl_record_read(c->fd, &h, &buf, &len, 0, 1u << 20)) &&
	       serve_request(c, &h, buf, len)) {
		free(buf);
		buf = NULL;
	}
	if (rc == CRC_EPROTO)
		pr_warn("control connection of pid %d: bad record length %u", (int)c->peer.pid, h.len);
	free(buf);
	if (c->fd >= 0) {
		crc_tls_drop(c->fd);
		close(c->fd);
	}
	/* The workers see their side end: what this connection left quiesced is resumed there. */
	for (unsigned i = 0; i < sizeof(c->proxies) / sizeof(c->proxies[0]); i++)
		if (c->proxies[i].w) {
			close(c->proxies[i].fd);
			crc_worker_put(c->proxies[i].w);
		}
	free(c);
	atomic_fetch_sub(&fr.controls, 1);
	return NULL;
}

void crc_front_control(int fd, bool tcp, const struct crc_peer *peer)
{
	struct control *c = calloc(1, sizeof(*c));
	pthread_t t;

	if (!c || crc_sock_write_all(fd, &fr.proto, sizeof(fr.proto))) {
		free(c);
		crc_tls_drop(fd);
		close(fd);
		return;
	}
	c->fd = fd;
	c->tcp = tcp;
	c->peer = *peer;
	if (pthread_create(&t, NULL, control_main, c)) {
		free(c);
		crc_tls_drop(fd);
		close(fd);
		return;
	}
	pthread_detach(t);
}
