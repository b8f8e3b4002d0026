/* crcudactl suspend PID / resume PID: the GPU given back while the process stays alive, as NVIDIA's
 * cuda-checkpoint --toggle does.
 *
 * suspend: the session is quiesced at a call boundary, its device state committed to the store as a
 * checkpoint (crcuda.suspend=1), then the worker ends (CRC_OP_CTL_SUSPEND), freeing the session's GPU
 * memory. The application's thread that holds the channel stays parked in libcrcuda (the others wait
 * on its lock; host-only threads run on) and listens on an abstract unix socket (crcuda/proto.h,
 * CRC_SUSPEND_SOCK_FMT) for the resume.
 * resume: the checkpoint is restored as a CRIU restore would (crc_ctl_restore: a new worker replays the
 * journal at the same device addresses and uploads the memory); its client socket goes to the
 * suspended process over that socket, which rebinds to it as a restored process does; then the
 * checkpoint is removed from the store. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "crc_store.h"
#include "crcuda/ctl.h"
#include "crcuda/errno.h"
#include "crcuda/proto.h"
#include "crcuda/sock.h"
#include "crcudactl.h"

#define SUSPEND_TIMEOUT_DEFAULT 120

/* A connection to pid's suspend socket, or -1 (it is not suspended: no such socket). The listener must
 * be pid itself: anyone may bind a free abstract name, and a resume hands it a session. */
static int suspend_connect(pid_t pid)
{
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	int n = snprintf(a.sun_path + 1, sizeof(a.sun_path) - 1, CRC_SUSPEND_SOCK_FMT, (int)pid);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct timeval tv = {.tv_sec = 60};
	struct crc_peer peer;

	if (fd < 0)
		return -1;
	if (connect(fd, (struct sockaddr *)&a, (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n)) ||
	    crc_unix_peer(fd, &peer) || peer.pid != pid) {
		close(fd);
		return -1;
	}
	/* A resume's answer comes after the rebind, which waits for nothing long. */
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	return fd;
}

/* One request to a suspended process (fd_to_pass attached, -1: none): 0 and its answer, or -1. */
static int suspend_ask(int fd, uint32_t op, int fd_to_pass, struct crc_suspend_reply *r)
{
	struct crc_suspend_req req = {.magic = CRC_PROTO_MAGIC, .op = op};

	if (crc_sock_send_fds(fd, &req, sizeof(req), &fd_to_pass, fd_to_pass >= 0 ? 1 : 0) ||
	    crc_sock_read_all(fd, r, sizeof(*r)) || r->magic != CRC_PROTO_MAGIC)
		return -1;
	r->store[sizeof(r->store) - 1] = 0;
	r->daemon[sizeof(r->daemon) - 1] = 0;
	return 0;
}

int ctl_suspended_query(pid_t pid, struct crc_suspend_reply *r)
{
	int fd = suspend_connect(pid), rc;

	if (fd < 0)
		return -1;
	rc = suspend_ask(fd, CRC_SUSPEND_QUERY, -1, r);
	close(fd);
	return rc;
}

static int parse_pid(const char *cmd, int argc, char **argv, pid_t *pid)
{
	char *end;
	long v;

	if (optind != argc - 1 || (v = strtol(argv[optind], &end, 10)) <= 0 || *end || v > INT_MAX) {
		ctl_error("%s: give one PID", cmd);
		return -1;
	}
	*pid = (pid_t)v;
	if (kill(*pid, 0) && errno == ESRCH) {
		ctl_error("%s: no process %d", cmd, (int)*pid);
		return -1;
	}
	return 0;
}

static void suspend_usage(FILE *f)
{
	fprintf(f,
		"Usage: crcudactl suspend [--store DIR] [--daemon ADDR] [--timeout SEC] [--json] PID\n"
		"\n"
		"Frees the GPU of a program run under crcuda while the program stays alive: its session\n"
		"stops at a call boundary, its device memory is saved into the store (a checkpoint marked\n"
		"crcuda.suspend), and its GPU worker ends. The program's next CUDA call waits (threads that\n"
		"make none run on) until `crcudactl resume PID`. No CRIU, no root needed.\n"
		"\n"
		"Options:\n"
		"  -s, --store DIR    the store (default $CRCUDA_STORE, else ~/.local/share/crcuda/store)\n"
		"      --daemon ADDR  the program's crcudad (default $CRCUDA_SOCKET, else\n"
		"                     /tmp/crcuda-UID/crcudad.sock); local (unix) sessions only\n"
		"      --timeout SEC  for the program to reach a call boundary (default %d)\n"
		"      --progress     progress on stderr (bytes of device memory, percent, GB/s); the\n"
		"                     default when stderr is a terminal\n"
		"      --json         machine-readable result on stdout\n"
		"  -h, --help         this help\n"
		"\n"
		"If crcudad ends while the program is suspended, the program's CUDA calls fail\n"
		"(CUDA_ERROR_DEVICE_UNAVAILABLE), as when it loses its daemon otherwise.\n"
		"Exit status: 0 suspended, 1 failed (the program runs on as before), 2 usage error.\n",
		SUSPEND_TIMEOUT_DEFAULT);
}

static void resume_usage(FILE *f)
{
	fprintf(f,
		"Usage: crcudactl resume [--daemon ADDR] [--gpu N|A,B,...] [--keep] [--json] PID\n"
		"\n"
		"Gives a suspended program its GPU back: a new worker replays its session (the same device\n"
		"addresses, its memory uploaded) and the program continues where it stopped. The suspend's\n"
		"checkpoint is then removed from the store (--keep keeps it).\n"
		"\n"
		"Options:\n"
		"      --daemon ADDR  the crcudad to resume on (default: the one it was suspended from)\n"
		"      --gpu LIST     the daemon's GPU(s) for the program's devices, by ordinal or UUID\n"
		"                     (as crcudactl restore --gpu)\n"
		"      --keep         keep the suspend's checkpoint in the store\n"
		"      --timeout SEC  for the replay (default %d)\n"
		"      --progress     progress on stderr (bytes of device memory, percent, GB/s); the\n"
		"                     default when stderr is a terminal\n"
		"      --json         machine-readable result on stdout\n"
		"  -h, --help         this help\n"
		"Exit status: 0 resumed, 1 failed (a program still suspended stays so), 2 usage error.\n",
		SUSPEND_TIMEOUT_DEFAULT);
}

int cmd_suspend(int argc, char **argv, struct ctl_opts *opts)
{
	enum { OPT_DAEMON = 256, OPT_JSON, OPT_TIMEOUT, OPT_PROGRESS };
	static const struct option longopts[] = {
	    {"store", required_argument, NULL, 's'},
	    {"daemon", required_argument, NULL, OPT_DAEMON},
	    {"timeout", required_argument, NULL, OPT_TIMEOUT},
	    {"json", no_argument, NULL, OPT_JSON},
	    {"progress", no_argument, NULL, OPT_PROGRESS},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	const char *store_arg = NULL, *daemon_arg = NULL;
	char store[PATH_MAX], daemon[PATH_MAX], pidmeta[64], commmeta[64], comm[32] = "";
	unsigned timeout = SUSPEND_TIMEOUT_DEFAULT;
	struct crc_ctl_session sess;
	struct crc_ctl_ckpt_stats st = {0};
	struct crc_suspend_reply q;
	struct crc_ctl *c = NULL;
	uint64_t id = 0;
	double t0;
	bool progress = false;
	pid_t pid;
	int ch, rc;

	while ((ch = getopt_long(argc, argv, "s:h", longopts, NULL)) != -1) {
		switch (ch) {
		case 's':
			store_arg = optarg;
			break;
		case OPT_DAEMON:
			daemon_arg = optarg;
			break;
		case OPT_TIMEOUT:
			if (ctl_parse_timeout("suspend", optarg, &timeout))
				return CTL_EXIT_USAGE;
			break;
		case OPT_JSON:
			opts->json = true;
			break;
		case OPT_PROGRESS:
			progress = true;
			break;
		case 'h':
			suspend_usage(stdout);
			return CTL_EXIT_OK;
		default:
			suspend_usage(stderr);
			return CTL_EXIT_USAGE;
		}
	}
	if (parse_pid("suspend", argc, argv, &pid))
		return optind != argc - 1 ? CTL_EXIT_USAGE : CTL_EXIT_FAILURE;
	if (ctl_store_dir(store_arg, store, sizeof(store)) ||
	    ctl_daemon_addr(daemon_arg, daemon, sizeof(daemon)))
		return CTL_EXIT_USAGE;
	if (!ctl_suspended_query(pid, &q)) {
		ctl_error("suspend: pid %d is suspended already (checkpoint %" PRIu64
			  "): crcudactl resume %d brings it back",
			  (int)pid, q.ckpt_id, (int)pid);
		return CTL_EXIT_FAILURE;
	}
	rc = crc_ctl_find_pid(daemon, pid, 0, &sess);
	if (rc == CRC_ENOTFOUND) {
		ctl_error(
		    "suspend: pid %d has no session on crcudad at %s (not a crcuda program, no CUDA call "
		    "yet, or another daemon's: --daemon)",
		    (int)pid, daemon);
		return CTL_EXIT_FAILURE;
	}
	if (rc) {
		ctl_error("suspend: crcudad at %s does not answer: %s", daemon, crc_strerror(rc));
		return CTL_EXIT_FAILURE;
	}
	if (sess.transport == CRC_TRANSPORT_TCP) {
		ctl_error(
		    "suspend: pid %d uses a remote GPU (TCP session): suspend serves local sessions only",
		    (int)pid);
		return CTL_EXIT_FAILURE;
	}
	if (sess.state != CRC_CTL_RUNNING) {
		ctl_error("suspend: the session of pid %d is being checkpointed or restored: try again later",
			  (int)pid);
		return CTL_EXIT_FAILURE;
	}
	if (strlen(store) >= CRC_SUSPEND_STORE_MAX) {
		ctl_error("suspend: the store path %s is too long (at most %d bytes)", store,
			  CRC_SUSPEND_STORE_MAX - 1);
		return CTL_EXIT_USAGE;
	}
	/* The daemon opens the store itself: make it first, as checkpoint does. */
	{
		struct crc_store *s;

		rc = crc_store_open(store, CRC_STORE_CREATE, &s);
		if (rc) {
			ctl_error("suspend: cannot open the store %s: %s", store, crc_strerror(rc));
			return CTL_EXIT_FAILURE;
		}
		crc_store_close(s);
	}
	t0 = ctl_now();
	rc = crc_ctl_open(daemon, NULL, &c);
	if (rc) {
		ctl_error("suspend: crcudad at %s does not answer: %s", daemon, crc_strerror(rc));
		return CTL_EXIT_FAILURE;
	}
	rc = crc_ctl_quiesce(c, pid, (int)timeout * 1000);
	if (rc) {
		ctl_error("suspend: cannot stop pid %d: %s", (int)pid, crc_ctl_error(c));
		goto fail_running;
	}
	ctl_progress_begin("suspend", daemon, NULL, pid, progress || (isatty(2) && !opts->json));
	rc = crc_ctl_checkpoint(c, pid, store, &st);
	ctl_progress_end(NULL);
	if (rc) {
		ctl_error("suspend: saving the device memory of pid %d failed: %s", (int)pid,
			  crc_ctl_error(c));
		goto fail_resume;
	}
	{
		snprintf(pidmeta, sizeof(pidmeta), "crcuda.pid=%d", (int)pid);
		ctl_pid_comm(pid, comm, sizeof(comm));
		snprintf(commmeta, sizeof(commmeta), "crcuda.comm=%s", comm);
		const char *meta[] = {"crcuda.suspend=1", pidmeta, commmeta, NULL};

		rc = crc_ctl_commit(c, pid, "", meta, &id);
	}
	if (rc) {
		ctl_error("suspend: committing the device memory of pid %d failed: %s", (int)pid,
			  crc_ctl_error(c));
		goto fail_resume;
	}
	rc = crc_ctl_suspend(c, pid, id, store);
	if (rc) {
		ctl_error("suspend: pid %d: %s", (int)pid, crc_ctl_error(c));
		goto fail_drop;
	}
	crc_ctl_close(c);
	/* The worker is gone once the front sees it end; the program listens for the resume by then
	 * (it saw its socket close). Both are quick. */
	for (int i = 0; i < 200 && ctl_suspended_query(pid, &q); i++)
		usleep(10000);
	if (ctl_suspended_query(pid, &q)) {
		ctl_error("suspend: pid %d's worker ended, but the program does not wait for its resume (its "
			  "stderr says why; its CUDA calls fail): its device memory is checkpoint %" PRIu64
			  " of %s",
			  (int)pid, id, store);
		return CTL_EXIT_FAILURE;
	}
	if (opts->json)
		ctl_json_print(json_pack("{s:i, s:i, s:s, s:I, s:I, s:s, s:f}", "version", 1, "pid", (int)pid,
					 "state", "suspended", "checkpoint", (json_int_t)id, "device_bytes",
					 (json_int_t)st.device_bytes, "store", store, "seconds",
					 ctl_now() - t0));
	else
		printf("pid %d suspended: %.1f MiB of device memory saved as checkpoint %" PRIu64
		       " in %s (%.2f s); its GPU worker %d ended\n",
		       (int)pid, st.device_bytes / 1048576.0, id, store, ctl_now() - t0,
		       (int)sess.worker_pid);
	return CTL_EXIT_OK;

fail_drop : {
	struct crc_store *s;

	if (!crc_store_open(store, 0, &s)) {
		crc_store_manifest_delete(s, id);
		crc_store_close(s);
	}
}
fail_resume:
	crc_ctl_abort(c, pid);
fail_running:
	crc_ctl_resume(c, pid);
	crc_ctl_close(c);
	return CTL_EXIT_FAILURE;
}

int cmd_resume(int argc, char **argv, struct ctl_opts *opts)
{
	enum { OPT_DAEMON = 256, OPT_JSON, OPT_TIMEOUT, OPT_GPU, OPT_KEEP, OPT_PROGRESS };
	static const struct option longopts[] = {
	    {"daemon", required_argument, NULL, OPT_DAEMON},
	    {"gpu", required_argument, NULL, OPT_GPU},
	    {"timeout", required_argument, NULL, OPT_TIMEOUT},
	    {"keep", no_argument, NULL, OPT_KEEP},
	    {"json", no_argument, NULL, OPT_JSON},
	    {"progress", no_argument, NULL, OPT_PROGRESS},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	const char *daemon_arg = NULL;
	char daemon[PATH_MAX], err[256];
	unsigned timeout = SUSPEND_TIMEOUT_DEFAULT;
	struct crc_ctl_restore_opts o = {.gpu = -1};
	struct crc_suspend_reply q, r;
	struct crc_ctl_session sess = {0};
	struct crc_ctl *c = NULL;
	bool keep = false, progress = false;
	int ch, rc, fd = -1, client_fd = -1;
	double t0;
	pid_t pid;

	while ((ch = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (ch) {
		case OPT_DAEMON:
			daemon_arg = optarg;
			break;
		case OPT_GPU:
			if (crc_ctl_parse_gpus(optarg, &o, err, sizeof(err))) {
				ctl_error("resume: --gpu %s: %s", optarg, err);
				return CTL_EXIT_USAGE;
			}
			break;
		case OPT_TIMEOUT:
			if (ctl_parse_timeout("resume", optarg, &timeout))
				return CTL_EXIT_USAGE;
			break;
		case OPT_KEEP:
			keep = true;
			break;
		case OPT_JSON:
			opts->json = true;
			break;
		case OPT_PROGRESS:
			progress = true;
			break;
		case 'h':
			resume_usage(stdout);
			return CTL_EXIT_OK;
		default:
			resume_usage(stderr);
			return CTL_EXIT_USAGE;
		}
	}
	if (parse_pid("resume", argc, argv, &pid))
		return optind != argc - 1 ? CTL_EXIT_USAGE : CTL_EXIT_FAILURE;
	if (ctl_daemon_addr(daemon_arg, daemon, sizeof(daemon)))
		return CTL_EXIT_USAGE;
	if (ctl_suspended_query(pid, &q)) {
		rc = crc_ctl_find_pid(daemon, pid, 0, &sess);
		if (!rc)
			ctl_error("resume: pid %d is not suspended (its session %" PRIu64 " is %s)", (int)pid,
				  sess.session_id,
				  sess.state == CRC_CTL_RUNNING ? "running" : "being checkpointed");
		else
			ctl_error("resume: pid %d is not suspended (not a crcuda program, or none of crcudad "
				  "at %s)",
				  (int)pid, daemon);
		return CTL_EXIT_FAILURE;
	}
	/* By default the daemon it was suspended from: the one it waits on (and whose GPUs it had). */
	if (!daemon_arg && q.daemon[0])
		snprintf(daemon, sizeof(daemon), "%s", q.daemon);
	t0 = ctl_now();
	o.store_dir = q.store;
	o.ckpt_id = q.ckpt_id;
	o.pid = pid;
	o.timeout_ms = (int)timeout * 1000;
	rc = crc_ctl_open(daemon, NULL, &c);
	if (rc) {
		ctl_error("resume: crcudad at %s does not answer: %s (pid %d stays suspended)", daemon,
			  crc_strerror(rc), (int)pid);
		return CTL_EXIT_FAILURE;
	}
	ctl_progress_begin("resume", daemon, NULL, pid, progress || (isatty(2) && !opts->json));
	rc = crc_ctl_restore(c, &o, &client_fd);
	ctl_progress_end(NULL);
	if (rc) {
		ctl_error("resume: replaying the session of pid %d failed: %s (it stays suspended)", (int)pid,
			  crc_ctl_error(c));
		crc_ctl_close(c);
		return CTL_EXIT_FAILURE;
	}
	/* The connection is the resumed session's client socket now; the process takes it. */
	fd = suspend_connect(pid);
	if (fd < 0 || suspend_ask(fd, CRC_SUSPEND_RESUME, client_fd, &r)) {
		ctl_error("resume: pid %d did not take its resumed session (it ended, or another resume took "
			  "it)",
			  (int)pid);
		if (fd >= 0)
			close(fd);
		close(client_fd);
		return CTL_EXIT_FAILURE;
	}
	close(fd);
	close(client_fd);
	if (r.status) {
		ctl_error("resume: pid %d could not rebind to its resumed session: %s (its CUDA calls fail)",
			  (int)pid, crc_strerror(r.status));
		return CTL_EXIT_FAILURE;
	}
	rc = crc_ctl_find_pid(daemon, pid, 2000, &sess);
	if (!keep && !rc) {
		/* A lazily uploaded session reads the checkpoint until its upload is done: a command on it
		 * (a resume of a running session does nothing else) waits for that. */
		struct crc_store *st;

		if (!crc_ctl_open(daemon, NULL, &c)) {
			crc_ctl_resume(c, pid);
			crc_ctl_close(c);
		}
		if (!crc_store_open(q.store, 0, &st)) {
			if (!crc_store_manifest_delete(st, q.ckpt_id))
				crc_store_gc(st, NULL);
			crc_store_close(st);
		}
	}
	if (opts->json)
		ctl_json_print(json_pack("{s:i, s:i, s:s, s:I, s:i, s:I, s:f}", "version", 1, "pid", (int)pid,
					 "state", "running", "session", (json_int_t)sess.session_id,
					 "worker_pid", (int)sess.worker_pid, "device_bytes",
					 (json_int_t)q.device_bytes, "seconds", ctl_now() - t0));
	else
		printf("pid %d resumed: session %" PRIu64 " on worker %d, %.1f MiB of device memory restored "
		       "(%.2f s)\n",
		       (int)pid, sess.session_id, (int)sess.worker_pid, q.device_bytes / 1048576.0,
		       ctl_now() - t0);
	return CTL_EXIT_OK;
}
