/* Control connections (crcuda/ctl.h) the front handed over: quiesce, checkpoint, commit, abort and
 * resume of this worker's session (the front proxies them), and a restore (the connection is then the
 * restored session's). Listing sessions is the front's. One thread per connection; commands on a session run
 * on that session's own thread (it owns the session's backend state), the control thread waits. */
#define LOG_PREFIX "control: "
#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "crcuda/errno.h"
#include "crcuda/log.h"
#include "worker.h"

struct control {
	int fd;
	bool tcp;
	struct crc_peer peer;
	/* The request the front read before handing the connection over (pending: its body, or NULL). */
	struct crc_msg_hdr pending_h;
	uint8_t *pending;
	size_t pending_len;
	uint64_t stage_key;  /* a restore staged on this connection: dropped when it closes */
	bool restoring;	     /* counted in crcd.restoring (its restore is pending, or it stages) */
	bool stage_expected; /* its handed-over request stages: counted (crc_restore_stage_expect) */
};

/* The handed-over stage request will not come to stage (or has): not waited for any more. */
static void stage_expected_done(struct control *c)
{
	if (c->stage_expected)
		crc_restore_stage_expect(-1);
	c->stage_expected = false;
}

/* This connection's restore is done: the worker may go idle (unless it stages: then when it closes). */
static void restoring_done(struct control *c)
{
	if (!c->restoring)
		return;
	pthread_mutex_lock(&crcd.lock);
	crcd.restoring--;
	pthread_mutex_unlock(&crcd.lock);
	c->restoring = false;
}

/* The session of pid (or id), held (refs) until session_put. */
static struct crc_session *session_get(const struct control *c, int32_t pid, uint64_t id, char *why,
				       size_t why_len)
{
	struct crc_session *s;

	pthread_mutex_lock(&crcd.lock);
	s = crcd.session;
	if (s && (s->state == CRC_CTL_RESTORING || (pid ? s->peer.pid != pid : s->id != id)))
		s = NULL;
	if (s && !c->tcp && c->peer.uid != 0 && c->peer.uid != s->peer.uid) {
		snprintf(why, why_len, "session %llu belongs to uid %u", (unsigned long long)s->id,
			 (unsigned)s->peer.uid);
		s = NULL;
	} else if (s) {
		pthread_mutex_lock(&s->ctl_lock);
		s->refs++;
		pthread_mutex_unlock(&s->ctl_lock);
	} else if (pid) {
		snprintf(why, why_len, "no session of pid %d on this daemon", (int)pid);
	} else {
		snprintf(why, why_len, "no session %llu on this daemon", (unsigned long long)id);
	}
	pthread_mutex_unlock(&crcd.lock);
	return s;
}

static void session_put(struct crc_session *s)
{
	pthread_mutex_lock(&s->ctl_lock);
	s->refs--;
	pthread_cond_broadcast(&s->ctl_cond);
	pthread_mutex_unlock(&s->ctl_lock);
}

/* Hands a command to the session thread and waits for it. */
static int run_command(struct crc_session *s, int op, const void *arg, size_t len, int timeout_ms, char *why,
		       size_t why_len, void *out, size_t *out_len)
{
	int rc;

	pthread_mutex_lock(&s->ctl_lock);
	if (s->ending) {
		pthread_mutex_unlock(&s->ctl_lock);
		snprintf(why, why_len, "session %llu is ending", (unsigned long long)s->id);
		return CRC_EDAEMON;
	}
	if (s->cmd && !s->cmd_done) {
		pthread_mutex_unlock(&s->ctl_lock);
		snprintf(why, why_len, "another control command is running on session %llu",
			 (unsigned long long)s->id);
		return CRC_EBUSY;
	}
	s->cmd = op;
	s->cmd_arg = arg;
	s->cmd_len = len;
	s->cmd_timeout_ms = timeout_ms;
	s->cmd_done = false;
	s->cmd_msg[0] = 0;
	s->cmd_out_len = 0;
	pthread_cond_broadcast(&s->ctl_cond);
	while (!s->cmd_done)
		pthread_cond_wait(&s->ctl_cond, &s->ctl_lock);
	rc = s->cmd_rc;
	snprintf(why, why_len, "%s", s->cmd_msg);
	if (out && out_len) {
		memcpy(out, s->cmd_out, s->cmd_out_len);
		*out_len = s->cmd_out_len;
	}
	s->cmd = 0;
	pthread_mutex_unlock(&s->ctl_lock);
	return rc;
}

/* A checkpoint's request may name, after the store directory, the sessions checkpointed with this
 * one: "group=ID,ID,..." (crc_ctl_checkpoint_group). */
static void set_group(struct crc_session *s)
{
	const char *arg = s->cmd_arg, *g;
	size_t first = strnlen(arg, s->cmd_len) + 1;

	s->ckpt_ngroup = 0;
	if (first >= s->cmd_len || strncmp(arg + first, "group=", 6))
		return;
	for (g = arg + first + 6; *g && s->ckpt_ngroup < sizeof(s->ckpt_group) / sizeof(s->ckpt_group[0]);) {
		char *end;
		unsigned long long id = strtoull(g, &end, 10);

		if (end == g)
			break;
		s->ckpt_group[s->ckpt_ngroup++] = id;
		g = *end == ',' ? end + 1 : end;
	}
}

/* The session, quiesced and committed to the store, ends so that its GPU memory is freed; its client
 * stays parked and waits for a resume (crcuda/proto.h, struct crc_session_ctl). arg: the checkpoint id,
 * then the store directory (NUL-terminated, checked by serve_request). */
static void suspend(struct crc_session *s, const uint8_t *arg, size_t len)
{
	struct crc_session_ctl *ctl = s->chan.sctl;
	const char *store = (const char *)arg + sizeof(uint64_t);
	uint64_t id;

	if (s->tcp || !ctl) {
		crc_session_cmd_done(
		    s, CRC_ENOTSUP,
		    "session %llu is a TCP session: suspend serves local (unix) sessions only",
		    (unsigned long long)s->id);
		return;
	}
	if (s->state != CRC_CTL_QUIESCED || s->ckpt || s->bg) {
		crc_session_cmd_done(
		    s, CRC_EINVAL, "session %llu is %s: quiesce it and commit its checkpoint first",
		    (unsigned long long)s->id, s->state == CRC_CTL_RUNNING ? "running" : "checkpointing");
		return;
	}
	if (len - sizeof(id) > CRC_SUSPEND_STORE_MAX) {
		crc_session_cmd_done(s, CRC_EINVAL, "store directory too long");
		return;
	}
	memcpy(&id, arg, sizeof(id));
	ctl->suspend_ckpt = id;
	ctl->suspend_bytes = s->mapped_bytes;
	snprintf(ctl->suspend_store, sizeof(ctl->suspend_store), "%s", store);
	atomic_store_explicit(&ctl->suspended, 1, memory_order_seq_cst);
	s->suspended = true;
	pr_info("session %llu: suspended as checkpoint %llu of %s; ending", (unsigned long long)s->id,
		(unsigned long long)id, store);
	crc_session_cmd_done(s, 0, NULL);
}

/* On the session thread: the command a control thread handed over. */
void crc_session_command(struct crc_session *s)
{
	int op, rc = 0;

	crc_upload_wait(s); /* a checkpoint of a lazily restored session needs its memory resident */
	pthread_mutex_lock(&s->ctl_lock);
	op = s->cmd;
	pthread_mutex_unlock(&s->ctl_lock);
	s->cmd_rc = 0;
	s->cmd_msg[0] = 0;
	switch (op) {
	case CRC_OP_CTL_QUIESCE:
		if (s->state == CRC_CTL_RUNNING)
			rc = crc_ckpt_quiesce(s, s->cmd_timeout_ms);
		else
			crc_session_cmd_done(s, 0, NULL);
		break;
	case CRC_OP_CTL_CHECKPOINT:
		if (s->state != CRC_CTL_QUIESCED) {
			crc_session_cmd_done(
			    s, CRC_EINVAL, "session %llu is %s: quiesce it first", (unsigned long long)s->id,
			    s->state == CRC_CTL_CHECKPOINTED ? "checkpointed (commit or abort first)"
							     : "running");
			break;
		}
		set_group(s);
		rc = crc_ckpt_run(s, s->cmd_arg, (unsigned)s->cmd_timeout_ms);
		break;
	case CRC_OP_CTL_COMMIT:
		if (s->state != CRC_CTL_CHECKPOINTED) {
			crc_session_cmd_done(s, CRC_EINVAL, "session %llu has no checkpoint to commit",
					     (unsigned long long)s->id);
			break;
		}
		rc = crc_ckpt_commit_session(s, s->cmd_arg, s->cmd_len);
		break;
	case CRC_OP_CTL_ABORT:
		crc_ckpt_abort_session(s);
		crc_session_cmd_done(s, 0, NULL);
		break;
	case CRC_OP_CTL_RESUME:
		if (s->state == CRC_CTL_CHECKPOINTED)
			crc_ckpt_abort_session(s);
		if (s->state != CRC_CTL_RUNNING)
			crc_ckpt_resume(s);
		/* The tree's checkpoint is over: collective launches go on too. */
		{
			struct crc_ctl_coll_wire w = {.action = CRC_CTL_COLL_RELEASE};
			char ignored[8];

			if (!s->tcp)
				crc_coll_control(s, &w, ignored, sizeof(ignored));
		}
		/* Released: its detached client is being killed, nothing will take the session back. */
		if (s->detached && s->cmd_timeout_ms < 0)
			s->reclaim_by = 0;
		s->quiesced_by = NULL;
		crc_session_cmd_done(s, 0, NULL);
		break;
	case CRC_OP_CTL_SUSPEND:
		suspend(s, s->cmd_arg, s->cmd_len);
		break;
	default:
		crc_session_cmd_done(s, CRC_EINVAL, "unknown control op %d", op);
	}
	(void)rc;
	pthread_mutex_lock(&s->ctl_lock);
	s->cmd_done = true;
	pthread_cond_broadcast(&s->ctl_cond);
	pthread_mutex_unlock(&s->ctl_lock);
}

/* Returns false when the connection is over (restore hands it to a session). */
static bool serve_request(struct control *c, const struct crc_msg_hdr *h, const uint8_t *p, size_t len)
{
	char why[CRC_CTL_MSG_MAX] = "";
	uint8_t out[128];
	size_t out_len = 0;
	struct crc_session *s;
	const struct crc_ctl_req *r = (const void *)p;
	int rc;

	if (h->op == CRC_OP_CTL_RESTORE) {
		struct crc_ctl_restore_wire w;
		const char *store = (const char *)p + sizeof(w), *uuids = NULL;

		rc = 0;
		if (len <= sizeof(w) || p[len - 1]) {
			rc = CRC_EINVAL;
			snprintf(why, sizeof(why), "malformed restore request");
		} else {
			memcpy(&w, p, sizeof(w));
			/* After the store directory, --gpu by UUID (crc_ctl_restore). */
			if (sizeof(w) + strlen(store) + 1 < len)
				uuids = store + strlen(store) + 1;
			if (uuids)
				rc = crc_restore_gpus_by_uuid(&w, uuids, why, sizeof(why));
			if (!rc && (w.flags & CRC_RESTORE_STAGE)) {
				/* Staged: the connection stays, and what is staged lives as long as it does.
				 */
				rc = crc_restore_stage(c->tcp, &c->peer, &w, store, c->stage_expected, why,
						       sizeof(why));
				c->stage_expected = false;
				if (!rc)
					c->stage_key = w.stage_key;
				/* The worker stays while the stager does (even where this failed): the
				 * restore it routes here under the key restores afresh then. */
				crc_ctl_reply_send(c->fd, h, rc, rc ? why : NULL, NULL, 0);
				return true;
			}
			if (!rc)
				rc = crc_restore(c->fd, c->tcp, &c->peer, h, &w, store, why, sizeof(why));
		}
		stage_expected_done(c);
		if (rc)
			crc_ctl_reply_send(c->fd, h, rc, why, NULL, 0);
		restoring_done(c);
		/* Restored: the connection belongs to the session now (crc_restore replied). Failed: the
		 * reply said why, and this worker, with nothing left to do, goes (closing it). */
		return rc != 0;
	}
	if (len < sizeof(*r) || h->op < CRC_OP_CTL_QUIESCE ||
	    (h->op > CRC_OP_CTL_RESUME && h->op != CRC_OP_CTL_COMMIT_WAIT && h->op != CRC_OP_CTL_COLLECTIVE &&
	     h->op != CRC_OP_CTL_SUSPEND) ||
	    (h->op == CRC_OP_CTL_COLLECTIVE && len != sizeof(*r) + sizeof(struct crc_ctl_coll_wire))) {
		crc_ctl_reply_send(c->fd, h, CRC_EINVAL, "malformed control request", NULL, 0);
		return true;
	}
	if (h->op == CRC_OP_CTL_COLLECTIVE) {
		struct crc_ctl_coll_wire w;

		memcpy(&w, p + sizeof(*r), sizeof(w));
		s = session_get(c, r->pid, r->session_id, why, sizeof(why));
		rc = s ? crc_coll_control(s, &w, why, sizeof(why)) : CRC_ENOTFOUND;
		if (s)
			session_put(s);
		crc_ctl_reply_send(c->fd, h, rc, rc ? why : NULL, &w, rc ? 0 : sizeof(w));
		return true;
	}
	/* String arguments (store dir, commit's image dir and metadata, a quiesce's park path) must end
	 * inside the request. */
	if (((h->op == CRC_OP_CTL_CHECKPOINT || h->op == CRC_OP_CTL_COMMIT) && len == sizeof(*r)) ||
	    (h->op == CRC_OP_CTL_SUSPEND && len <= sizeof(*r) + sizeof(uint64_t) + 1) ||
	    (len > sizeof(*r) && p[len - 1])) {
		crc_ctl_reply_send(c->fd, h, CRC_EINVAL, "malformed control request (strings)", NULL, 0);
		return true;
	}
	s = session_get(c, r->pid, r->session_id, why, sizeof(why));
	if (!s) {
		crc_ctl_reply_send(c->fd, h, CRC_ENOTFOUND, why, NULL, 0);
		return true;
	}
	if (h->op == CRC_OP_CTL_COMMIT_WAIT) {
		/* Here, not on the session thread: that one serves the application meanwhile. */
		uint64_t id = 0;

		rc = crc_bg_wait(s, r->timeout_ms, &id, why, sizeof(why));
		memcpy(out, &id, sizeof(id));
		out_len = sizeof(id);
	} else {
		rc = run_command(s, h->op, p + sizeof(*r), len - sizeof(*r), r->timeout_ms, why, sizeof(why),
				 out, &out_len);
	}
	/* A detached client waits for this connection's owner (the CRIU plugin): if it drops, resume. */
	if (!rc && h->op == CRC_OP_CTL_QUIESCE && s->detached)
		s->quiesced_by = c;
	/* Replied before the hold goes: a suspended session's worker exits once nothing holds it. */
	crc_ctl_reply_send(c->fd, h, rc, rc ? why : NULL, out, rc ? 0 : out_len);
	session_put(s);
	return true;
}

/* The session this connection left detached and quiesced (its owner died mid-dump): resumed, so that
 * it ends unless its client takes it back (that one sees the park socket close and does). */
static void resume_orphan(struct control *c)
{
	char why[CRC_CTL_MSG_MAX];
	struct crc_session *s = NULL;

	pthread_mutex_lock(&crcd.lock);
	if (crcd.session && crcd.session->quiesced_by == c) {
		s = crcd.session;
		s->quiesced_by = NULL;
		pthread_mutex_lock(&s->ctl_lock);
		s->refs++;
		pthread_mutex_unlock(&s->ctl_lock);
	}
	pthread_mutex_unlock(&crcd.lock);
	if (!s)
		return;
	pr_warn("session %llu: its checkpointer went away mid-dump: resuming it", (unsigned long long)s->id);
	run_command(s, CRC_OP_CTL_RESUME, NULL, 0, 0, why, sizeof(why), NULL, NULL);
	session_put(s);
}

/* One request: from the front's hand-over, else read off the connection. false: the connection ended. */
static bool next_request(struct control *c, struct crc_msg_hdr *h, uint8_t **buf, size_t *len)
{
	int rc;

	free(*buf);
	*buf = NULL;
	if (c->pending) {
		*h = c->pending_h;
		*buf = c->pending;
		*len = c->pending_len;
		c->pending = NULL;
		return true;
	}
	rc = crc_ctl_record_read(c->fd, h, buf, len, 0, 1u << 20);
	if (rc == CRC_EPROTO)
		pr_warn("control connection of pid %d: bad record length %u", (int)c->peer.pid, h->len);
	return !rc;
}

static void *control_main(void *arg)
{
	struct control *c = arg;
	uint8_t *buf = NULL;
	bool keep_fd = false;
	struct crc_msg_hdr h;
	size_t len;

	while (next_request(c, &h, &buf, &len))
		if (!serve_request(c, &h, buf, len)) {
			keep_fd = true;
			break;
		}
	free(buf);
	free(c->pending);
	if (!keep_fd)
		close(c->fd);
	stage_expected_done(c);
	if (c->stage_key)
		crc_restore_stage_drop(c->stage_key);
	restoring_done(c);
	resume_orphan(c);
	free(c);
	return NULL;
}

/* The request handed over with the connection stages a restore. */
static bool pending_stages(const struct control *c)
{
	struct crc_ctl_restore_wire w;

	if (c->pending_h.op != CRC_OP_CTL_RESTORE || c->pending_len < sizeof(w))
		return false;
	memcpy(&w, c->pending, sizeof(w));
	return w.flags & CRC_RESTORE_STAGE;
}

void crc_control_start(int fd, bool tcp, const struct crc_peer *peer, const void *req, size_t len)
{
	struct control *c = calloc(1, sizeof(*c));
	pthread_t t;

	/* The pending request, header and body (a NUL after it, as crc_ctl_record_read leaves one). */
	if (len && (len < sizeof(c->pending_h) || ((const struct crc_msg_hdr *)req)->len != len)) {
		pr_err("malformed request handed over by the front (%zu bytes)", len);
		free(c);
		close(fd);
		return;
	}
	if (c && len) {
		memcpy(&c->pending_h, req, sizeof(c->pending_h));
		c->pending_len = len - sizeof(c->pending_h);
		c->pending = malloc(c->pending_len + 1);
		if (c->pending) {
			memcpy(c->pending, (const uint8_t *)req + sizeof(c->pending_h), c->pending_len);
			c->pending[c->pending_len] = 0;
		}
	}
	if (!c || (len && !c->pending)) {
		pr_err("out of memory for a control connection");
		free(c);
		close(fd);
		return;
	}
	c->fd = fd;
	c->tcp = tcp;
	c->peer = *peer;
	if (len) {
		/* A restore: the worker must not take itself for idle before the session exists. */
		pthread_mutex_lock(&crcd.lock);
		crcd.restoring++;
		pthread_mutex_unlock(&crcd.lock);
		c->restoring = true;
		/* Counted here, in the order the front handed them: a restore handed after the stage
		 * then waits for it, whichever thread runs first. */
		if (pending_stages(c)) {
			crc_restore_stage_expect(1);
			c->stage_expected = true;
		}
	}
	if (crc_thread_create(&t, NULL, control_main, c)) {
		stage_expected_done(c);
		restoring_done(c);
		free(c->pending);
		free(c);
		close(fd);
		return;
	}
	pthread_detach(t);
}
