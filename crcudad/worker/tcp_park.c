/* Quiesce and detach of TCP sessions (crcuda/proto.h, "quiesce of a TCP session"). A unix session is
 * stopped through its shared control page; a remote client shares no memory with the daemon, so it is
 * asked on its socket and answers there. For a CRIU dump the client also gives its TCP connection up
 * (CRIU cannot dump an established one): the session stays here, detached, its device memory and
 * journal intact, until the client takes it back with a new connection (hello with the session id and
 * the ticket sent with the request) or, resumed and not taken back within RECLAIM_S, it ends. */
#define LOG_PREFIX "crcudad: "
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include "crcuda/errno.h"
#include "crcuda/log.h"
#include "crcuda/tls.h"
#include "worker.h"

/* A resumed detached client reconnects as soon as CRIU lets it run again (--leave-running): seconds
 * are plenty. */
#define RECLAIM_S 10.0
/* Between the ACK and the EOF of a detaching client there is only its close. */
#define DETACH_EOF_MS 5000

/* A record to the client on its TCP connection (the session thread is the only writer). */
static int send_record(struct crc_session *s, uint16_t op, const void *payload, size_t len)
{
	void *p;
	int rc = crc_chan_reserve(&s->chan, op, CRC_MSG_NOREPLY, 0, len, &p);

	if (rc)
		return rc;
	if (len)
		memcpy(p, payload, len);
	return crc_chan_commit(&s->chan);
}

int crc_tcp_quiesce(struct crc_session *s, double deadline, const char *park)
{
	struct crc_tcp_quiesce q = {0};
	int rc;

	if (s->detached) {
		crc_session_cmd_done(s, CRC_EINVAL,
				     "session %llu has no client connection (detached for a checkpoint, "
				     "not taken back yet)",
				     (unsigned long long)s->id);
		return CRC_EINVAL;
	}
	if (getrandom(s->ticket, sizeof(s->ticket), 0) != (ssize_t)sizeof(s->ticket)) {
		crc_session_cmd_done(s, CRC_EIO, "no random bytes for the session ticket");
		return CRC_EIO;
	}
	memcpy(q.ticket, s->ticket, sizeof(q.ticket));
	snprintf(q.park, sizeof(q.park), "%s", park ? park : "");
	s->acked = false;
	rc = send_record(s, CRC_OP_QUIESCE, &q, sizeof(q));
	/* Every record before the ACK belongs before the checkpoint: serve them. */
	while (!rc && !s->acked) {
		if (!crc_session_serve_one(s, 10)) {
			rc = CRC_EDAEMON;
			break;
		}
		if (!s->acked && crc_now_s() > deadline) {
			send_record(s, CRC_OP_RESUME, NULL, 0);
			crc_session_cmd_done(
			    s, CRC_ETIMEDOUT,
			    "session %llu (pid %d, TCP) did not reach a call boundary in time",
			    (unsigned long long)s->id, (int)s->peer.pid);
			return CRC_ETIMEDOUT;
		}
	}
	if (rc) {
		crc_session_cmd_done(s, CRC_EDAEMON, "the client of session %llu went away",
				     (unsigned long long)s->id);
		return CRC_EDAEMON;
	}
	if (park && *park && !s->detached) {
		/* It could not reach the park socket: CRIU would meet its TCP connection. */
		send_record(s, CRC_OP_RESUME, NULL, 0);
		crc_session_cmd_done(
		    s, CRC_EIO,
		    "the client of session %llu (pid %d) could not connect to %s on its host, "
		    "so it cannot give up its TCP connection for the dump",
		    (unsigned long long)s->id, (int)s->peer.pid, park);
		return CRC_EIO;
	}
	return 0;
}

void crc_tcp_acked(struct crc_session *s, const void *payload, size_t len)
{
	struct crc_tcp_quiesce_ack a = {0};
	struct pollfd p = {.fd = s->fd, .events = POLLIN | POLLRDHUP};
	char byte;

	memcpy(&a, payload, len < sizeof(a) ? len : sizeof(a));
	crc_chan_release(&s->chan);
	s->acked = true;
	if (!a.detach)
		return;
	/* Nothing follows the ACK but the close: the connection is spent either way. */
	if (poll(&p, 1, DETACH_EOF_MS) <= 0 || recv(s->fd, &byte, 1, MSG_DONTWAIT) != 0)
		pr_warn("session %llu: its client did not close its connection after detaching",
			(unsigned long long)s->id);
	crc_chan_close(&s->chan);
	crc_tls_drop(s->fd);
	close(s->fd);
	s->fd = s->chan.fd = -1;
	s->detached = true;
	/* Its bulk connections go with it (the client closed its ends before the ACK). */
	crc_bulk_close(s);
	/* A late ACK (the quiesce timed out meanwhile): the session runs, the client will take it back. */
	s->reclaim_by = crc_now_s() + RECLAIM_S;
	pr_info("session %llu: detached (its client parked without a connection)", (unsigned long long)s->id);
}

void crc_tcp_resume(struct crc_session *s, bool release)
{
	if (s->detached)
		s->reclaim_by = release ? 0 : crc_now_s() + RECLAIM_S;
	else if (s->fd >= 0 && send_record(s, CRC_OP_RESUME, NULL, 0))
		pr_warn("session %llu: cannot tell its client to resume", (unsigned long long)s->id);
}

int crc_tcp_reclaim(int fd, const struct crc_hello *hello)
{
	struct crc_session *s = NULL;
	int rc = CRC_ENOTFOUND;

	pthread_mutex_lock(&crcd.lock);
	if (crcd.session && crcd.session->id == hello->session_id)
		s = crcd.session;
	if (s) {
		pthread_mutex_lock(&s->ctl_lock);
		if (!s->detached || s->reclaim_fd >= 0 || s->ending)
			rc = CRC_EBUSY;
		else if (!crc_const_time_equal(hello->token, hello->token_len, s->ticket, sizeof(s->ticket)))
			rc = CRC_EAUTH;
		else {
			s->reclaim_fd = fd;
			pthread_cond_broadcast(&s->ctl_cond);
			rc = 0;
		}
		pthread_mutex_unlock(&s->ctl_lock);
	}
	pthread_mutex_unlock(&crcd.lock);
	if (rc)
		pr_warn("refusing to hand session %llu back to pid %d: %s",
			(unsigned long long)hello->session_id, (int)hello->pid, crc_strerror(rc));
	return rc;
}

bool crc_tcp_take_back(struct crc_session *s, bool *end)
{
	struct crc_hello_reply *r;
	int fd;

	*end = false;
	pthread_mutex_lock(&s->ctl_lock);
	fd = s->reclaim_fd;
	s->reclaim_fd = -1;
	pthread_mutex_unlock(&s->ctl_lock);
	if (fd < 0) {
		*end = s->state == CRC_CTL_RUNNING && crc_now_s() >= s->reclaim_by;
		if (*end)
			pr_info("session %llu: its detached client did not take it back",
				(unsigned long long)s->id);
		return false;
	}
	/* The client runs again: whatever checkpoint it was parked for is over. */
	if (s->ckpt)
		crc_ckpt_abort_session(s);
	if (s->state != CRC_CTL_RUNNING)
		crc_ckpt_resume(s);
	s->fd = fd;
	s->detached = false;
	s->quiesced_by = NULL;
	crc_chan_open_tcp(&s->chan, fd);
	r = malloc(sizeof(*r));
	if (r) {
		*r = crcd.proto;
		r->session_id = s->id;
	}
	if (!r || crc_sock_write_all(fd, r, sizeof(*r))) {
		free(r);
		*end = true;
		return false;
	}
	free(r);
	pr_info("session %llu: taken back by its client", (unsigned long long)s->id);
	return true;
}
