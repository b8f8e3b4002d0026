/* The control interface of crcudad (crcuda/ctl.h), as a client of the daemon: a hello with the
 * control role, then requests and replies framed on the socket (struct crc_msg_hdr + payload). Linked
 * into crcudactl and into the CRIU plugin, so it keeps no global state. */
#define LOG_PREFIX "ctl: "
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "crcuda/ctl.h"
#include "crcuda/errno.h"
#include "crcuda/log.h"
#include "crcuda/proto.h"
#include "crcuda/sock.h"
#include "crcuda/tls.h"

struct crc_ctl {
	int fd;
	bool tcp;
	uint64_t seq;
	char err[CRC_CTL_MSG_MAX];
};

static int fail(struct crc_ctl *c, int rc, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(c->err, sizeof(c->err), fmt, ap);
	va_end(ap);
	return rc;
}

const char *crc_ctl_error(const struct crc_ctl *c)
{
	return c ? c->err : "";
}

int crc_ctl_open(const char *daemon, const char *token, struct crc_ctl **out)
{
	struct crc_hello hello = {
	    .magic = CRC_PROTO_MAGIC,
	    .version = CRC_PROTO_VERSION,
	    .pid = getpid(),
	    .uid = getuid(),
	    .role = CRC_ROLE_CONTROL,
	};
	struct crc_hello_reply *reply;
	char path[256];
	struct crc_ctl *c;
	bool tcp = daemon && !strchr(daemon, '/') && strchr(daemon, ':');
	int rc;

	*out = NULL;
	if (!daemon) {
		rc = crc_sock_default_path(path, sizeof(path));
		if (rc)
			return rc;
		daemon = path;
	}
	if (tcp) {
		size_t n = token ? strlen(token) : 0;

		if (n > sizeof(hello.token))
			return CRC_EINVAL;
		memcpy(hello.token, token, n);
		hello.token_len = (uint32_t)n;
		hello.transport = CRC_TRANSPORT_TCP;
	} else {
		hello.transport = CRC_TRANSPORT_UNIX;
	}
	c = calloc(1, sizeof(*c));
	reply = malloc(sizeof(*reply));
	if (!c || !reply) {
		free(c);
		free(reply);
		return CRC_ENOMEM;
	}
	c->tcp = tcp;
	c->fd = tcp ? crc_tcp_connect(daemon) : crc_unix_connect(daemon);
	if (c->fd < 0) {
		rc = c->fd;
		pr_err("cannot reach crcudad at %s: %s", daemon, crc_strerror(rc));
		goto fail;
	}
	if (tcp) {
		char why[256];

		rc = crc_tls_connect(c->fd, daemon, hello.token, hello.token_len, why, sizeof(why));
		if (rc) {
			pr_err("no control connection to crcudad at %s: %s (%s)", daemon, crc_strerror(rc),
			       why);
			goto fail;
		}
	}
	rc = crc_sock_write_all(c->fd, &hello, sizeof(hello));
	if (!rc)
		rc = crc_sock_read_all(c->fd, reply, sizeof(*reply));
	if (rc) {
		pr_err("crcudad at %s closed the control connection during the handshake", daemon);
		goto fail;
	}
	if (reply->magic != CRC_PROTO_MAGIC || reply->version != CRC_PROTO_VERSION) {
		pr_err("crcudad at %s speaks protocol %#x/%u, not %#x/%u", daemon, reply->magic,
		       reply->version, CRC_PROTO_MAGIC, CRC_PROTO_VERSION);
		rc = CRC_EPROTO;
		goto fail;
	}
	if (reply->status) {
		rc = reply->status;
		pr_err("crcudad at %s refused the control connection: %s", daemon, crc_strerror(rc));
		goto fail;
	}
	free(reply);
	*out = c;
	return 0;
fail:
	if (c->fd >= 0) {
		crc_tls_drop(c->fd);
		close(c->fd);
	}
	free(c);
	free(reply);
	return rc;
}

void crc_ctl_close(struct crc_ctl *c)
{
	if (!c)
		return;
	if (c->fd >= 0) {
		crc_tls_drop(c->fd);
		close(c->fd);
	}
	free(c);
}

/* One request, one reply. *data (malloc'd, may be NULL) gets the reply's bytes after struct
 * crc_ctl_reply when its status is 0. Returns the reply's status, with its message in c->err. */
static int exchange(struct crc_ctl *c, uint16_t op, const void *a, size_t alen, const void *b, size_t blen,
		    void **data, size_t *data_len)
{
	struct crc_msg_hdr h = {.len = (uint32_t)(sizeof(h) + alen + blen), .op = op, .seq = ++c->seq};
	struct crc_ctl_reply *r = NULL;
	/* A restore's connection goes on to the worker that replays it: its death ends it too. */
	const char *peer =
	    op == CRC_OP_CTL_RESTORE ? "crcudad's worker restoring the checkpoint (or crcudad)" : "crcudad";
	int rc;

	c->err[0] = 0;
	if (data)
		*data = NULL;
	if (c->fd < 0)
		return fail(c, CRC_EINVAL, "the control connection is closed");
	rc = crc_sock_write_all(c->fd, &h, sizeof(h));
	if (!rc && alen)
		rc = crc_sock_write_all(c->fd, a, alen);
	if (!rc && blen)
		rc = crc_sock_write_all(c->fd, b, blen);
	if (!rc)
		rc = crc_sock_read_all(c->fd, &h, sizeof(h));
	if (!rc && h.op == CRC_OP_CTL_HANDOFF && crc_tls_on(c->fd)) {
		/* The connection went to a worker (a restore): a TLS session with it, with the key the
		 * front sent, and its reply comes there. */
		struct {
			struct crc_ctl_reply r;
			uint8_t key[CRC_TLS_KEY_LEN];
		} ho;
		char why[256];

		if (h.len != sizeof(h) + sizeof(ho))
			return fail(c, CRC_EPROTO, "bad handoff from crcudad (%u bytes)", h.len);
		rc = crc_sock_read_all(c->fd, &ho, sizeof(ho));
		if (rc)
			return fail(c, CRC_EDAEMON, "%s went away: %s", peer, crc_strerror(rc));
		crc_tls_drop(c->fd);
		rc = crc_tls_client(c->fd, CRC_TLS_ID_HANDOFF, ho.key, sizeof(ho.key), 10000, why,
				    sizeof(why));
		memset(ho.key, 0, sizeof(ho.key));
		if (rc)
			return fail(c, rc, "no TLS session with crcudad's worker: %s", why);
		rc = crc_sock_read_all(c->fd, &h, sizeof(h));
	}
	if (rc)
		return fail(c, CRC_EDAEMON, "%s went away: %s", peer, crc_strerror(rc));
	if (h.op != op || h.seq != c->seq || h.len < sizeof(h) + sizeof(*r) || h.len > (64u << 20))
		return fail(c, CRC_EPROTO, "bad reply from crcudad (op %u, %u bytes)", h.op, h.len);
	r = malloc(h.len - sizeof(h));
	if (!r)
		return fail(c, CRC_ENOMEM, "out of memory");
	rc = crc_sock_read_all(c->fd, r, h.len - sizeof(h));
	if (rc) {
		free(r);
		return fail(c, CRC_EDAEMON, "%s went away: %s", peer, crc_strerror(rc));
	}
	r->msg[sizeof(r->msg) - 1] = 0;
	rc = r->status;
	if (rc)
		snprintf(c->err, sizeof(c->err), "%s", r->msg[0] ? r->msg : crc_strerror(rc));
	/* A refusal's data, if any, is dropped: the callers return the status (and leaked it). */
	if (data && !rc && h.len - sizeof(h) > sizeof(*r)) {
		size_t n = h.len - sizeof(h) - sizeof(*r);

		*data = malloc(n);
		if (!*data) {
			free(r);
			return fail(c, CRC_ENOMEM, "out of memory");
		}
		memcpy(*data, r + 1, n);
		*data_len = n;
	} else if (data_len) {
		*data_len = 0;
	}
	free(r);
	return rc;
}

int crc_ctl_sessions(struct crc_ctl *c, struct crc_ctl_session **out, unsigned *n)
{
	struct crc_ctl_session_wire *w;
	struct crc_ctl_session *s;
	size_t len = 0;
	void *data;
	int rc = exchange(c, CRC_OP_CTL_SESSIONS, NULL, 0, NULL, 0, &data, &len);

	*out = NULL;
	*n = 0;
	if (rc)
		return rc;
	w = data;
	len /= sizeof(*w);
	s = calloc(len ? len : 1, sizeof(*s));
	if (!s) {
		free(data);
		return fail(c, CRC_ENOMEM, "out of memory");
	}
	for (size_t i = 0; i < len; i++) {
		s[i] = (struct crc_ctl_session){
		    .session_id = w[i].session_id,
		    .pid = w[i].pid,
		    .uid = w[i].uid,
		    .va_base = w[i].va_base,
		    .va_size = w[i].va_size,
		    .device_bytes = w[i].device_bytes,
		    .state = w[i].state,
		    .transport = w[i].transport,
		    .journal_records = w[i].journal_records,
		    .worker_pid = w[i].worker_pid,
		    .devices = w[i].devices,
		};
	}
	free(data);
	*out = s;
	*n = (unsigned)len;
	return 0;
}

static int simple(struct crc_ctl *c, uint16_t op, pid_t pid, int timeout_ms)
{
	struct crc_ctl_req r = {.pid = pid, .timeout_ms = timeout_ms};

	return exchange(c, op, &r, sizeof(r), NULL, 0, NULL, NULL);
}

int crc_ctl_quiesce(struct crc_ctl *c, pid_t pid, int timeout_ms)
{
	return simple(c, CRC_OP_CTL_QUIESCE, pid, timeout_ms);
}

int crc_ctl_quiesce_park(struct crc_ctl *c, pid_t pid, int timeout_ms, const char *park)
{
	struct crc_ctl_req r = {.pid = pid, .timeout_ms = timeout_ms};

	if (!park || strlen(park) >= sizeof(((struct crc_tcp_quiesce *)0)->park))
		return fail(c, CRC_EINVAL, "park socket path missing or too long");
	return exchange(c, CRC_OP_CTL_QUIESCE, &r, sizeof(r), park, strlen(park) + 1, NULL, NULL);
}

int crc_ctl_checkpoint(struct crc_ctl *c, pid_t pid, const char *store_dir, struct crc_ctl_ckpt_stats *stats)
{
	return crc_ctl_checkpoint_flags(c, pid, store_dir, 0, stats);
}

int crc_ctl_checkpoint_flags(struct crc_ctl *c, pid_t pid, const char *store_dir, unsigned flags,
			     struct crc_ctl_ckpt_stats *stats)
{
	return crc_ctl_checkpoint_group(c, pid, store_dir, flags, NULL, 0, stats);
}

int crc_ctl_checkpoint_group(struct crc_ctl *c, pid_t pid, const char *store_dir, unsigned flags,
			     const uint64_t *group, unsigned ngroup, struct crc_ctl_ckpt_stats *stats)
{
	struct crc_ctl_req r = {.pid = pid, .timeout_ms = (int32_t)flags};
	struct crc_ctl_ckpt_wire *w;
	size_t len = 0, arg_len;
	char *arg;
	void *data;
	int rc;

	if (!store_dir)
		return fail(c, CRC_EINVAL, "no store directory");
	/* The store directory, then the group: "group=ID,ID,...". */
	arg_len = strlen(store_dir) + 1 + (ngroup ? 8 + ngroup * 21 : 0);
	arg = malloc(arg_len);
	if (!arg)
		return fail(c, CRC_ENOMEM, "out of memory");
	len = (size_t)snprintf(arg, arg_len, "%s", store_dir) + 1;
	if (ngroup)
		len += (size_t)snprintf(arg + len, arg_len - len, "group=");
	for (unsigned i = 0; i < ngroup; i++)
		len += (size_t)snprintf(arg + len, arg_len - len, "%s%" PRIu64, i ? "," : "", group[i]);
	if (ngroup)
		len++;
	rc = exchange(c, CRC_OP_CTL_CHECKPOINT, &r, sizeof(r), arg, len, &data, &len);
	free(arg);
	if (rc)
		return rc;
	w = data;
	if (stats && len >= CRC_CTL_CKPT_WIRE_V1)
		*stats = (struct crc_ctl_ckpt_stats){
		    .allocations = w->allocations,
		    .globals = w->globals,
		    .modules = w->modules,
		    .device_bytes = w->device_bytes,
		    .new_bytes = w->new_bytes,
		    .seconds = w->seconds,
		    .copy_seconds = w->copy_seconds,
		    .copied_bytes = len >= sizeof(*w) ? w->copied_bytes : w->device_bytes,
		    .digest_seconds = len >= sizeof(*w) ? w->digest_seconds : 0,
		    .snapshot_bytes = len >= sizeof(*w) ? w->snapshot_bytes : 0,
		};
	free(data);
	return 0;
}

int crc_ctl_commit_wait(struct crc_ctl *c, pid_t pid, int timeout_ms, uint64_t *ckpt_id)
{
	struct crc_ctl_req r = {.pid = pid, .timeout_ms = timeout_ms};
	size_t len = 0;
	void *data;
	int rc = exchange(c, CRC_OP_CTL_COMMIT_WAIT, &r, sizeof(r), NULL, 0, &data, &len);

	if (rc)
		return rc;
	if (len < sizeof(*ckpt_id)) {
		free(data);
		return fail(c, CRC_EPROTO, "short commit-wait reply");
	}
	memcpy(ckpt_id, data, sizeof(*ckpt_id));
	free(data);
	return 0;
}

int crc_ctl_collective(struct crc_ctl *c, pid_t pid, unsigned action, uint64_t target, unsigned ttl_ms,
		       uint64_t *launched)
{
	struct crc_ctl_req r = {.pid = pid};
	struct crc_ctl_coll_wire w = {.action = action, .ttl_ms = ttl_ms, .target = target};
	size_t len = 0;
	void *data;
	int rc = exchange(c, CRC_OP_CTL_COLLECTIVE, &r, sizeof(r), &w, sizeof(w), &data, &len);

	if (rc)
		return rc;
	if (len < sizeof(w)) {
		free(data);
		return fail(c, CRC_EPROTO, "short collective reply");
	}
	memcpy(&w, data, sizeof(w));
	free(data);
	if (launched)
		*launched = w.launched;
	return 0;
}

int crc_ctl_commit(struct crc_ctl *c, pid_t pid, const char *criu_images, const char *const *meta,
		   uint64_t *ckpt_id)
{
	struct crc_ctl_req r = {.pid = pid};
	size_t len = strlen(criu_images ? criu_images : "") + 1, off, dlen = 0;
	char *buf;
	void *data;
	int rc;

	for (const char *const *m = meta; m && *m; m++)
		len += strlen(*m) + 1;
	buf = malloc(len + 1);
	if (!buf)
		return fail(c, CRC_ENOMEM, "out of memory");
	/* The image directory, then each key=value, each NUL-terminated, then an empty string. */
	off = (size_t)sprintf(buf, "%s", criu_images ? criu_images : "") + 1;
	for (const char *const *m = meta; m && *m; m++) {
		if (!strchr(*m, '=')) {
			free(buf);
			return fail(c, CRC_EINVAL, "metadata \"%s\" is not key=value", *m);
		}
		off += (size_t)sprintf(buf + off, "%s", *m) + 1;
	}
	buf[off++] = 0;
	rc = exchange(c, CRC_OP_CTL_COMMIT, &r, sizeof(r), buf, off, &data, &dlen);
	free(buf);
	if (rc)
		return rc;
	if (dlen < 8) {
		free(data);
		return fail(c, CRC_EPROTO, "commit reply without a checkpoint id");
	}
	if (ckpt_id)
		memcpy(ckpt_id, data, 8);
	free(data);
	return 0;
}

int crc_ctl_abort(struct crc_ctl *c, pid_t pid)
{
	return simple(c, CRC_OP_CTL_ABORT, pid, 0);
}

int crc_ctl_resume(struct crc_ctl *c, pid_t pid)
{
	return simple(c, CRC_OP_CTL_RESUME, pid, 0);
}

/* timeout_ms < 0 on a resume: no reclaim to wait for. */
int crc_ctl_release(struct crc_ctl *c, pid_t pid)
{
	return simple(c, CRC_OP_CTL_RESUME, pid, -1);
}

int crc_ctl_suspend(struct crc_ctl *c, pid_t pid, uint64_t ckpt_id, const char *store_dir)
{
	struct crc_ctl_req r = {.pid = pid};
	size_t n = store_dir ? strlen(store_dir) : 0;
	uint8_t buf[sizeof(uint64_t) + CRC_SUSPEND_STORE_MAX];

	if (!n || n >= CRC_SUSPEND_STORE_MAX)
		return fail(c, CRC_EINVAL, "store directory missing or longer than %d bytes",
			    CRC_SUSPEND_STORE_MAX - 1);
	memcpy(buf, &ckpt_id, sizeof(ckpt_id));
	memcpy(buf + sizeof(ckpt_id), store_dir, n + 1);
	return exchange(c, CRC_OP_CTL_SUSPEND, &r, sizeof(r), buf, sizeof(ckpt_id) + n + 1, NULL, NULL);
}

int crc_ctl_progress(struct crc_ctl *c, pid_t pid, struct crc_ctl_progress *p)
{
	struct crc_ctl_req r = {.pid = pid};
	struct crc_ctl_progress_wire w;
	size_t len = 0;
	void *data;
	int rc = exchange(c, CRC_OP_CTL_PROGRESS, &r, sizeof(r), NULL, 0, &data, &len);

	if (rc)
		return rc;
	if (len < sizeof(w)) {
		free(data);
		return fail(c, CRC_EPROTO, "short progress reply");
	}
	memcpy(&w, data, sizeof(w));
	free(data);
	*p = (struct crc_ctl_progress){.op = w.op, .done = w.done, .total = w.total, .seconds = w.ns * 1e-9};
	return 0;
}

int crc_ctl_fd(const struct crc_ctl *c)
{
	return c ? c->fd : -1;
}

_Static_assert(CRC_CTL_MAX_GPUS == CRC_MAX_DEVICES, "one --gpu entry per device");

/* "GPU-" and 36 characters: 8-4-4-4-12 hexadecimal digits. */
static bool is_gpu_uuid(const char *p, size_t len)
{
	if (len != 40 || strncasecmp(p, "GPU-", 4))
		return false;
	for (size_t i = 4; i < len; i++) {
		bool dash = i == 12 || i == 17 || i == 22 || i == 27;

		if (dash ? p[i] != '-' : !isxdigit((unsigned char)p[i]))
			return false;
	}
	return true;
}

/* --gpu as UUIDs: each checked, then found by the restoring daemon. */
static int parse_gpu_uuids(const char *arg, struct crc_ctl_restore_opts *o, char *err, size_t err_len)
{
	unsigned n = 0;

	for (const char *p = arg;; p++) {
		const char *end = strchr(p, ',');
		size_t len = end ? (size_t)(end - p) : strlen(p);

		if (!is_gpu_uuid(p, len)) {
			snprintf(err, err_len,
				 "--gpu '%s': give device ordinals or GPU UUIDs (GPU-xxxxxxxx-xxxx-xxxx-xxxx-"
				 "xxxxxxxxxxxx, as nvidia-smi -L shows them), not both",
				 arg);
			return CRC_EINVAL;
		}
		for (const char *q = arg; q < p; q += 41)
			if (!strncasecmp(q, p, 40)) {
				snprintf(
				    err, err_len,
				    "--gpu '%s' names GPU %.40s twice: each of the application's devices "
				    "needs a GPU of its own",
				    arg, p);
				return CRC_EINVAL;
			}
		if (n == CRC_CTL_MAX_GPUS) {
			snprintf(err, err_len, "--gpu '%s': more than %d devices", arg, CRC_CTL_MAX_GPUS);
			return CRC_EINVAL;
		}
		o->gpus[n++] = -1;
		if (!end)
			break;
		p = end;
	}
	o->gpu = -1;
	o->ngpus = n;
	o->gpu_uuids = arg;
	return 0;
}

int crc_ctl_parse_gpus(const char *arg, struct crc_ctl_restore_opts *o, char *err, size_t err_len)
{
	const char *p = arg;
	unsigned n = 0;
	int v[CRC_CTL_MAX_GPUS];

	o->gpu_uuids = NULL;
	if (!strncasecmp(arg, "GPU-", 4))
		return parse_gpu_uuids(arg, o, err, err_len);
	do {
		char *end;
		long g = strtol(p, &end, 10);

		if (end == p || g < 0 || g >= 1000 || (*end && *end != ',') || *p == '-' || *p == '+') {
			snprintf(
			    err, err_len,
			    "--gpu wants device ordinals (0, or a list: 1,0) or GPU UUIDs (GPU-xxxxxxxx-xxxx-"
			    "xxxx-xxxx-xxxxxxxxxxxx), not both, got '%s'",
			    arg);
			return CRC_EINVAL;
		}
		if (n == CRC_CTL_MAX_GPUS) {
			snprintf(err, err_len, "--gpu '%s': more than %d devices", arg, CRC_CTL_MAX_GPUS);
			return CRC_EINVAL;
		}
		for (unsigned i = 0; i < n; i++)
			if (v[i] == (int)g) {
				snprintf(
				    err, err_len,
				    "--gpu '%s' names GPU %ld twice: each of the application's devices needs "
				    "a GPU of its own",
				    arg, g);
				return CRC_EINVAL;
			}
		v[n++] = (int)g;
		p = *end ? end + 1 : end;
	} while (*p || p[-1] == ',');
	o->gpu = n == 1 ? v[0] : -1;
	o->ngpus = n == 1 ? 0 : n;
	memcpy(o->gpus, v, n * sizeof(*v));
	return 0;
}

/* A restore request (flags: CRC_RESTORE_STAGE or 0) and its reply. */
static int restore_request(struct crc_ctl *c, const struct crc_ctl_restore_opts *opts, uint32_t flags)
{
	struct crc_ctl_restore_wire w;
	int rc;

	if (!opts || !opts->store_dir)
		return fail(c, CRC_EINVAL, "no store directory");
	w = (struct crc_ctl_restore_wire){
	    .ckpt_id = opts->ckpt_id,
	    .gpu = opts->gpu,
	    .pid = opts->pid,
	    .timeout_ms = opts->timeout_ms,
	    .ngpus = opts->ngpus,
	    .stage_key = opts->stage_key,
	    .flags = flags,
	};
	memcpy(w.gpus, opts->gpus, sizeof(w.gpus));
	/* The store directory, then (by UUID) the GPUs' list, each NUL-terminated. */
	size_t sl = strlen(opts->store_dir) + 1, ul = opts->gpu_uuids ? strlen(opts->gpu_uuids) + 1 : 0;
	char *tail = malloc(sl + ul);

	if (!tail)
		return fail(c, CRC_ENOMEM, "out of memory");
	memcpy(tail, opts->store_dir, sl);
	if (ul)
		memcpy(tail + sl, opts->gpu_uuids, ul);
	rc = exchange(c, CRC_OP_CTL_RESTORE, &w, sizeof(w), tail, sl + ul, NULL, NULL);
	free(tail);
	return rc;
}

int crc_ctl_stage(struct crc_ctl *c, const struct crc_ctl_restore_opts *opts)
{
	if (opts && !opts->stage_key)
		return fail(c, CRC_EINVAL, "a staged restore needs a key");
	return restore_request(c, opts, CRC_RESTORE_STAGE);
}

int crc_ctl_restore(struct crc_ctl *c, const struct crc_ctl_restore_opts *opts, int *client_fd)
{
	int rc;

	*client_fd = -1;
	rc = restore_request(c, opts, 0);
	if (!rc && c->tcp) {
		/* TCP: the REBIND notice (with TLS, the key of the restored process's own handshake) goes
		 * to the restored process on a unix socket, with the TCP socket attached; the TLS session
		 * of this process ends here. */
		struct crc_sock_notice n;
		int sv[2];

		rc = crc_sock_read_all(c->fd, &n, sizeof(n));
		if (rc)
			rc =
			    fail(c, CRC_EDAEMON, "crcudad went away after the restore: %s", crc_strerror(rc));
		else if (n.magic != CRC_PROTO_MAGIC || n.kind != CRC_NOTICE_REBIND)
			rc = fail(c, CRC_EPROTO, "bad notice from crcudad after the restore");
		else if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv))
			rc = fail(c, -errno, "socketpair: %s", strerror(errno));
		if (!rc) {
			crc_tls_drop(c->fd);
			rc = crc_sock_send_fds(sv[0], &n, sizeof(n), &c->fd, 1);
			close(sv[0]);
			if (rc) {
				close(sv[1]);
				rc = fail(c, rc, "cannot pass the restored session on: %s", crc_strerror(rc));
			} else {
				close(c->fd);
				c->fd = sv[1];
			}
		}
		memset(&n, 0, sizeof(n));
	}
	if (!rc) {
		/* The connection is the restored session's client socket now; the daemon has queued the
		 * REBIND notice on it for the restored process to read. */
		*client_fd = c->fd;
		c->fd = -1;
		crc_ctl_close(c);
	}
	return rc;
}

int crc_ctl_session_of(struct crc_ctl *c, pid_t pid, const char *unix_path, int wait_ms,
		       struct crc_ctl_session *s)
{
	struct timespec t0, now;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		struct crc_ctl_session *list = NULL, *best = NULL;
		unsigned n = 0;
		int rc = crc_ctl_sessions(c, &list, &n);

		for (unsigned i = 0; !rc && i < n; i++)
			if (list[i].pid == pid && (!best || list[i].session_id > best->session_id))
				best = &list[i];
		if (best && s)
			*s = *best;
		free(list);
		if (rc || best)
			return rc;
		/* Its first CUDA call may be starting its session: connected, not listed yet. */
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (!unix_path ||
		    (now.tv_sec - t0.tv_sec) * 1000 + (now.tv_nsec - t0.tv_nsec) / 1000000 >= wait_ms ||
		    !crc_task_connected_to(pid, unix_path))
			return CRC_ENOTFOUND;
		nanosleep(&(struct timespec){.tv_nsec = 10 * 1000 * 1000}, NULL);
	}
}

int crc_ctl_find_pid(const char *addr, pid_t pid, int wait_ms, struct crc_ctl_session *s)
{
	struct crc_ctl *c = NULL;
	int rc = crc_ctl_open(addr, NULL, &c);

	if (!rc)
		rc = crc_ctl_session_of(c, pid, addr, wait_ms, s);
	crc_ctl_close(c);
	return rc;
}

int crc_ctl_reply_send(int fd, const struct crc_msg_hdr *req, int status, const char *msg, const void *data,
		       size_t len)
{
	struct crc_msg_hdr h = {.op = req->op, .seq = req->seq};
	struct crc_ctl_reply r = {.status = status};
	int rc;

	h.len = (uint32_t)(sizeof(h) + sizeof(r) + len);
	if (msg)
		snprintf(r.msg, sizeof(r.msg), "%s", msg);
	rc = crc_sock_write_all(fd, &h, sizeof(h));
	if (!rc)
		rc = crc_sock_write_all(fd, &r, sizeof(r));
	if (!rc && len)
		rc = crc_sock_write_all(fd, data, len);
	return rc;
}

int crc_ctl_record_read(int fd, struct crc_msg_hdr *h, uint8_t **body, size_t *len, size_t min_len,
			size_t max_len)
{
	int rc = crc_sock_read_all(fd, h, sizeof(*h));

	*body = NULL;
	if (rc)
		return rc;
	if (h->len < sizeof(*h) + min_len || h->len - sizeof(*h) > max_len)
		return CRC_EPROTO;
	*len = h->len - sizeof(*h);
	*body = malloc(*len + 1);
	if (!*body)
		return CRC_ENOMEM;
	(*body)[*len] = 0;
	rc = crc_sock_read_all(fd, *body, *len);
	if (rc) {
		free(*body);
		*body = NULL;
	}
	return rc;
}
