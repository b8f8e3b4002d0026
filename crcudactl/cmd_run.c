/* crcudactl run [OPTIONS] -- PROG ARGS...: runs an unmodified program under the layer.
 *
 * Puts libcrcuda's directory first on LD_LIBRARY_PATH, sets the client's environment and execs the
 * program, which keeps crcudactl's pid (so `crcudactl checkpoint PID` names the program). Locally it
 * makes sure a daemon answers on the socket first, starting one when none does: detached, with an idle
 * exit, serialised by a lock file next to the socket so that runs started together start one daemon.
 * One daemon per socket: a daemon of another backend than asked is refused, not replaced (a second
 * backend needs its own --socket).
 *
 * The program gets CRCUDA_LINEAGE (unless set already): its checkpoints carry it, through restores, so
 * that retention (--keep, `store prune`) counts them per program. With --checkpoint-on or --every,
 * crcudactl stays the program's parent and checkpoints it (run_ckpt.c). */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <libgen.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "crcuda/errno.h"
#include "crcuda/proto.h"
#include "crcuda/sock.h"
#include "crcuda/tls.h"
#include "crcudactl.h"
#include "run_ckpt.h"

#define RUN_IDLE_EXIT_DEFAULT 30 /* seconds a daemon we start lingers with nothing to serve */
#define RUN_START_TIMEOUT_MS  30000
#define RUN_LOCK_TIMEOUT_MS   60000
#define RUN_PROBE_TIMEOUT_S   15 /* a busy daemon reads one hello at a time, 5 s each at worst */
#define SIM_NAME_PREFIX	      "crcuda simulated" /* how the simulated device names its GPUs */

struct run_args {
	const char *remote, *token_file, *backend, *socket, *daemon_log, *va_base, *va_session;
	bool backend_given;
	unsigned idle_exit;
	char **prog;
};

static void run_usage(FILE *f)
{
	fprintf(
	    f,
	    "Usage: crcudactl run [OPTIONS] -- PROG [ARGS...]\n"
	    "\n"
	    "Runs PROG, unmodified, under crcuda: libcrcuda's directory goes first on LD_LIBRARY_PATH\n"
	    "and PROG is exec'd (it keeps this process's pid: `crcudactl checkpoint PID` targets it).\n"
	    "Locally, when no crcudad answers on the socket, one is started, detached; it exits after\n"
	    "--idle-exit seconds with no session and no program of `crcudactl run` alive. A daemon of\n"
	    "another backend than asked is refused: use another --socket for it.\n"
	    "\n"
	    "Options:\n"
	    "      --backend cuda|sim   the GPU of the daemon (default cuda: the real driver; sim: the\n"
	    "                           simulated device, which runs kernels as host functions from the\n"
	    "                           libraries named by CRCUDA_SIM_KERNELS, passed to the daemon)\n"
	    "      --socket PATH        the daemon's socket (default $CRCUDA_SOCKET, else\n"
	    "                           /tmp/crcuda-UID/crcudad.sock); PATH.lock serialises starts\n"
	    "      --daemon-log FILE    log of a daemon started here (default crcudad.log beside the "
	    "socket)\n"
	    "      --idle-exit SECONDS  idle time before a daemon started here exits (default %d; 0: never)\n"
	    "      --va-base ADDR, --va-session BYTES\n"
	    "                           the device VA window of a daemon started here (crcudad's options;\n"
	    "                           `crcudactl restore` uses them for a checkpoint's window)\n"
	    "      --remote HOST:PORT   use the crcudad listening there (no local daemon)\n"
	    "      --token-file FILE    its token (else $CRCUDA_TOKEN or $CRCUDA_TOKEN_FILE)\n"
	    "      --insecure           plaintext TCP to a daemon started with --insecure (else TLS)\n"
	    "      --tls-cert F, --tls-key F, --tls-ca F\n"
	    "                           TLS with certificates (a daemon with --tls-*), not the token, as "
	    "key\n"
	    "  -h, --help               this help\n"
	    "\n"
	    "Checkpointing (crcudactl then stays PROG's parent: PROG runs as its child, in a process\n"
	    "group of its own, and gets every other signal crcudactl gets: HUP, INT, QUIT, TERM, USR1,\n"
	    "USR2, ALRM, WINCH, CONT, XCPU, PWR). Needs root (CRIU), as crcudactl checkpoint does:\n"
	    "      --checkpoint-on SIG[,SIG...]\n"
	    "                           checkpoint PROG when crcudactl gets SIG. SIGTERM, SIGINT, SIGHUP,\n"
	    "                           SIGQUIT, SIGXCPU, SIGPWR take the final checkpoint: PROG stops once\n"
	    "                           it is committed and crcudactl exits 0 (where it fails, SIG goes on\n"
	    "                           to PROG, whose status becomes crcudactl's); SIGUSR1, SIGUSR2,\n"
	    "                           SIGALRM leave PROG running. SIG:stop or SIG:run chooses.\n"
	    "      --every DURATION     also checkpoint it every DURATION (90, 90s, 10m, 2h), counted from\n"
	    "                           the end of the previous checkpoint; PROG runs on\n"
	    "      --keep N             after each checkpoint, remove all but the newest N of PROG's\n"
	    "                           (its CRCUDA_LINEAGE; as crcudactl rm does)\n"
	    "  -s, --store DIR          the store of these checkpoints (default $CRCUDA_STORE, else\n"
	    "                           ~/.local/share/crcuda/store)\n"
	    "\n"
	    "Environment: CRCUDA_LIBDIR (directory of libcrcuda's libcuda.so.1), CRCUDAD (the daemon\n"
	    "binary); by default both are found beside this program (build tree or <prefix>/bin).\n"
	    "PROG gets CRCUDA_LINEAGE (a name for its checkpoints, kept across restores) unless it is set.\n"
	    "Exit status: PROG's own once it runs (128+N where signal N ended it, with --checkpoint-on or\n"
	    "--every); 0 after a final checkpoint; 1 when it cannot be started; 126/127 when PROG cannot\n"
	    "be run or is not there; 2 on a usage error.\n",
	    RUN_IDLE_EXIT_DEFAULT);
}

/* ---- where things are ------------------------------------------------------------------------------ */

/* First of the candidates (relative to crcudactl's directory) where FILE exists; realpath'd. */
static bool find_beside(const char *const *cands, const char *file, char *out, size_t len)
{
	char dir[PATH_MAX], path[PATH_MAX * 2 + 64];

	if (ctl_self_dir(dir, sizeof(dir)))
		return false;
	for (; *cands; cands++) {
		snprintf(path, sizeof(path), "%s/%s/%s", dir, *cands, file);
		if (access(path, F_OK))
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, *cands);
		return realpath(path, out) && strlen(out) < len;
	}
	return false;
}

/* libcrcuda's directory: CRCUDA_LIBDIR, <build>/libcrcuda, or <libdir>/crcuda (installed). */
static int find_libdir(char *out, size_t len)
{
	static const char *const cands[] = {"../libcrcuda", CRCUDA_REL_PKGLIBDIR, NULL};
	const char *env = getenv("CRCUDA_LIBDIR");
	char path[PATH_MAX + 32];

	if (env && *env) {
		snprintf(path, sizeof(path), "%s/libcuda.so.1", env);
		if (access(path, R_OK) || !realpath(env, out)) {
			ctl_error("CRCUDA_LIBDIR=%s holds no libcuda.so.1 (libcrcuda)", env);
			return -1;
		}
		return 0;
	}
	if (find_beside(cands, "libcuda.so.1", out, len))
		return 0;
	ctl_error("cannot find libcrcuda (libcuda.so.1) beside crcudactl, in ../libcrcuda or "
		  "%s: set CRCUDA_LIBDIR",
		  CRCUDA_REL_PKGLIBDIR);
	return -1;
}

/* The daemon: CRCUDAD, <build>/crcudad/crcudad, or <prefix>/bin/crcudad. */
static int find_crcudad(char *out, size_t len)
{
	static const char *const cands[] = {"../crcudad", ".", NULL};
	const char *env = getenv("CRCUDAD");

	if (env && *env) {
		if (access(env, X_OK)) {
			ctl_error("CRCUDAD=%s is not an executable", env);
			return -1;
		}
		snprintf(out, len, "%s", env);
		return 0;
	}
	if (find_beside(cands, "crcudad", out, len)) {
		strncat(out, "/crcudad", len - strlen(out) - 1);
		return 0;
	}
	ctl_error("cannot find crcudad beside crcudactl (../crcudad or .): set CRCUDAD");
	return -1;
}

/* A real libcuda.so.1 in the loader's cache (as crcudad --backend cuda finds it), other than
 * libcrcuda's own and the toolkit's link-time stub. */
static bool have_cuda_driver(const char *libdir)
{
	FILE *p = popen("/sbin/ldconfig -p 2>/dev/null || ldconfig -p 2>/dev/null", "r");
	char line[1024], real[PATH_MAX];
	bool found = false;

	if (!p)
		return false;
	while (fgets(line, sizeof(line), p)) {
		char *arrow = strstr(line, "=> ");

		if (!strstr(line, "libcuda.so.1 ") || !arrow || strstr(line, "stubs"))
			continue;
		arrow += 3;
		arrow[strcspn(arrow, "\n")] = 0;
		if (realpath(arrow, real) && !strncmp(real, libdir, strlen(libdir)) &&
		    real[strlen(libdir)] == '/')
			continue;
		found = true;
	}
	pclose(p);
	return found;
}

/* ---- talking to a daemon ---------------------------------------------------------------------------- */

enum probe {
	PROBE_OK,      /* it answered: reply filled */
	PROBE_ABSENT,  /* nothing listens there */
	PROBE_REFUSED, /* it answered with a refusal (reply->status) */
	PROBE_BROKEN,  /* it closed the connection or did not answer in time */
};

static void on_alarm(int sig)
{
	(void)sig; /* interrupts a TCP connect that would hang */
}

static int read_token(const char *file, struct crc_hello *h)
{
	char tok[sizeof(h->token) + 1];
	int n = ctl_read_token(file, tok, sizeof(tok));

	if (n < 0)
		return -1;
	memcpy(h->token, tok, (size_t)n);
	h->token_len = (uint32_t)n;
	return 0;
}

/* Says hello as a control connection (no session: a GPU worker of the pool is left for the program):
 * proves that the daemon serves, and tells which GPUs it has. */
static enum probe probe(const char *sock, const char *remote, const char *token_file,
			struct crc_hello_reply *r)
{
	struct crc_hello h = {
	    .magic = CRC_PROTO_MAGIC,
	    .version = CRC_PROTO_VERSION,
	    .pid = getpid(),
	    .uid = getuid(),
	    .transport = remote ? CRC_TRANSPORT_TCP : CRC_TRANSPORT_UNIX,
	    .role = CRC_ROLE_CONTROL,
	};
	struct timeval tv = {.tv_sec = RUN_PROBE_TIMEOUT_S};
	int fd, rc;

	if (remote) {
		struct sigaction sa = {.sa_handler = on_alarm}, old;

		if (read_token(token_file, &h))
			return PROBE_BROKEN;
		sigaction(SIGALRM, &sa, &old);
		alarm(RUN_PROBE_TIMEOUT_S);
		fd = crc_tcp_connect(remote);
		alarm(0);
		sigaction(SIGALRM, &old, NULL);
	} else {
		fd = crc_unix_connect(sock);
	}
	if (fd < 0)
		return PROBE_ABSENT;
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	memset(r, 0, sizeof(*r));
	if (remote) {
		char why[256];

		rc = crc_tls_connect(fd, remote, h.token, h.token_len, why, sizeof(why));
		if (rc) {
			close(fd);
			if (rc != CRC_EAUTH && rc != CRC_ETLS) {
				ctl_error("no TLS session with crcudad at %s: %s", remote, why);
				return PROBE_BROKEN;
			}
			r->status = rc;
			return PROBE_REFUSED;
		}
	}
	rc = crc_sock_write_all(fd, &h, sizeof(h));
	if (!rc)
		rc = crc_sock_read_all(fd, r, sizeof(*r));
	crc_tls_drop(fd);
	close(fd);
	if (rc || r->magic != CRC_PROTO_MAGIC || r->version != CRC_PROTO_VERSION)
		return PROBE_BROKEN;
	return r->status ? PROBE_REFUSED : PROBE_OK;
}

static const char *reply_backend(const struct crc_hello_reply *r)
{
	return r->dev_count && !strncmp(r->devs[0].name, SIM_NAME_PREFIX, strlen(SIM_NAME_PREFIX)) ? "sim"
												   : "cuda";
}

/* A daemon answered: is it what was asked for? */
static int check_daemon(const struct run_args *a, const char *where, const struct crc_hello_reply *r)
{
	const char *have = reply_backend(r);

	if (a->backend_given && strcmp(have, a->backend)) {
		ctl_error("crcudad at %s serves %s, not --backend %s: stop it, or give another --socket "
			  "for a daemon of that backend",
			  where,
			  !strcmp(have, "sim") ? "the simulated device (sim)" : "the CUDA driver (cuda)",
			  a->backend);
		return -1;
	}
	if (r->init_result || !r->dev_count) {
		ctl_error("crcudad at %s has no usable GPU (its driver's cuInit returned %d, %u devices)",
			  where, r->init_result, r->dev_count);
		return -1;
	}
	return 0;
}

/* ---- starting a daemon ------------------------------------------------------------------------------ */

/* The socket's directory, created private when missing; it must be the user's own. */
static int socket_dir(const char *sock)
{
	char copy[PATH_MAX], dir[PATH_MAX];
	struct stat st;

	snprintf(copy, sizeof(copy), "%s", sock);
	snprintf(dir, sizeof(dir), "%s", dirname(copy));
	if (mkdir(dir, 0700) && errno != EEXIST) {
		ctl_error("cannot create %s: %s", dir, strerror(errno));
		return -1;
	}
	if (lstat(dir, &st) || !S_ISDIR(st.st_mode) || st.st_uid != getuid()) {
		ctl_error("%s is not a directory of yours: refusing to use a socket there", dir);
		return -1;
	}
	if (st.st_mode & (S_IWGRP | S_IWOTH)) {
		ctl_error("%s is writable by others (mode %04o): refusing to use a socket there", dir,
			  (unsigned)(st.st_mode & 07777));
		return -1;
	}
	return 0;
}

/* <socket>.run/<pid> with this process's start time: the daemon does not idle-exit while the program
 * (which keeps this pid) lives, however late it makes its first CUDA call. */
static void register_program(const char *sock, char *path, size_t len)
{
	char stat[1024], *p = NULL;
	ssize_t n = 0;
	int fd;

	snprintf(path, len, "%s.run", sock);
	mkdir(path, 0700);
	snprintf(path, len, "%s.run/%d", sock, (int)getpid());
	fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		n = read(fd, stat, sizeof(stat) - 1);
		close(fd);
	}
	if (n > 0) {
		stat[n] = 0;
		/* Field 22 (start time), counting from the end of "pid (comm)". */
		p = strrchr(stat, ')');
		for (int f = 2; p && f < 22; f++)
			p = strchr(p + 1, ' ');
	}
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0) {
		path[0] = 0;
		return;
	}
	if (p && write(fd, p + 1, strcspn(p + 1, " ")) < 0)
		ctl_error("cannot write %s: %s", path, strerror(errno));
	close(fd);
}

static int lock_socket(const char *sock)
{
	char path[PATH_MAX + 8];
	int fd;

	snprintf(path, sizeof(path), "%s.lock", sock);
	fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0) {
		ctl_error("cannot open %s: %s", path, strerror(errno));
		return -1;
	}
	for (int ms = 0; flock(fd, LOCK_EX | LOCK_NB); ms += 50) {
		if (errno != EWOULDBLOCK || ms >= RUN_LOCK_TIMEOUT_MS) {
			ctl_error("cannot lock %s: %s", path,
				  errno == EWOULDBLOCK ? "another crcudactl holds it" : strerror(errno));
			close(fd);
			return -1;
		}
		usleep(50000);
	}
	return fd;
}

/* Prints what the daemon wrote to its log from offset on (its last lines). */
static void show_log(const char *log, off_t from)
{
	char buf[4096];
	FILE *f = fopen(log, "r");
	long start;
	size_t n;

	if (!f)
		return;
	fseek(f, 0, SEEK_END);
	start = ftell(f) - (long)sizeof(buf) + 1;
	fseek(f, start > from ? start : from, SEEK_SET);
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	fprintf(stderr, "--- %s:\n%s%s", log, buf, n && buf[n - 1] != '\n' ? "\n" : "");
}

/* In the grandchild: the daemon, detached from us and from the terminal. */
static void exec_daemon(const char *crcudad, const struct run_args *a, const char *log, int ready_fd)
{
	char idle[16];
	const char *argv[16] = {crcudad,       "--backend", a->backend,	    "--socket", a->socket,
				"--idle-exit", idle,	    "--foreground", "-v"};
	int n = 9, null = open("/dev/null", O_RDONLY), out = open(log, O_WRONLY | O_CREAT | O_APPEND, 0600);

	if (null < 0 || out < 0 || dup2(null, 0) < 0 || dup2(ready_fd, 1) < 0 || dup2(out, 2) < 0)
		_exit(127);
	/* Nothing of the caller's (ctest's pipes, the program's files) may stay open in the daemon. */
	for (int fd = 3; fd < 1024; fd++)
		close(fd);
	if (chdir("/"))
		_exit(127);
	umask(077);
	signal(SIGPIPE, SIG_DFL);
	/* The daemon's log is --daemon-log, not the program's CRCUDA_LOG_FILE. */
	unsetenv("CRCUDA_LOG_FILE");
	snprintf(idle, sizeof(idle), "%u", a->idle_exit);
	if (a->va_base)
		argv[n++] = "--va-base", argv[n++] = a->va_base;
	if (a->va_session)
		argv[n++] = "--va-session", argv[n++] = a->va_session;
	argv[n] = NULL;
	execv(crcudad, (char *const *)argv);
	fprintf(stderr, "crcudactl: cannot exec %s: %s\n", crcudad, strerror(errno));
	_exit(127);
}

/* Starts the daemon (setsid, double fork) and waits for its "ready" line on a pipe: EOF means it
 * died. Then it must answer on the socket. */
static int start_daemon(const struct run_args *a, const char *crcudad, const char *log,
			struct crc_hello_reply *r)
{
	struct stat st;
	off_t log_from = stat(log, &st) ? 0 : st.st_size;
	char buf[256] = "";
	size_t got = 0;
	int p[2], status = 0;
	pid_t child;

	if (pipe2(p, O_CLOEXEC)) {
		ctl_error("pipe: %s", strerror(errno));
		return -1;
	}
	fflush(NULL);
	child = fork();
	if (child < 0) {
		ctl_error("fork: %s", strerror(errno));
		close(p[0]);
		close(p[1]);
		return -1;
	}
	if (child == 0) {
		setsid();
		if (fork() == 0)
			exec_daemon(crcudad, a, log, p[1]);
		_exit(0);
	}
	close(p[1]);
	waitpid(child, &status, 0);
	for (int waited = 0; got < sizeof(buf) - 1 && !strstr(buf, "ready");) {
		struct pollfd pfd = {.fd = p[0], .events = POLLIN};
		ssize_t n;

		buf[got] = 0;
		if (waited >= RUN_START_TIMEOUT_MS)
			break;
		if (poll(&pfd, 1, 100) <= 0) {
			waited += 100;
			continue;
		}
		n = read(p[0], buf + got, sizeof(buf) - 1 - got);
		if (n <= 0)
			break;
		got += (size_t)n;
		buf[got] = 0;
	}
	close(p[0]);
	if (!strstr(buf, "ready")) {
		if (!strcmp(a->backend, "cuda"))
			ctl_error(
			    "crcudad --backend cuda failed to start: no usable CUDA driver or GPU here? "
			    "(use --backend sim for the simulated device, or --remote HOST:PORT)");
		else
			ctl_error("crcudad --backend %s failed to start", a->backend);
		show_log(log, log_from);
		return -1;
	}
	for (int ms = 0; probe(a->socket, NULL, NULL, r) != PROBE_OK; ms += 50) {
		if (ms >= RUN_START_TIMEOUT_MS) {
			ctl_error("crcudad started but does not answer on %s", a->socket);
			show_log(log, log_from);
			return -1;
		}
		usleep(50000);
	}
	return 0;
}

/* VAR=a:b:c with each relative path made absolute. */
static void absolute_list(const char *var, const char *val)
{
	size_t parts = 1, cap;
	char *copy, *save = NULL, *out, abs[PATH_MAX];

	for (const char *c = val; *c; c++)
		parts += *c == ':';
	cap = strlen(val) + 1 + parts * PATH_MAX;
	copy = strdup(val);
	out = calloc(1, cap);
	if (copy && out) {
		for (char *p = strtok_r(copy, ":", &save); p; p = strtok_r(NULL, ":", &save)) {
			if (*out)
				strcat(out, ":");
			strcat(out, p[0] != '/' && realpath(p, abs) ? abs : p);
		}
		setenv(var, out, 1);
	}
	free(copy);
	free(out);
}

/* A daemon answering on the socket, started here when none does. */
static int local_daemon(struct run_args *a, const char *libdir, char *reg, size_t reglen)
{
	static struct crc_hello_reply r;
	char crcudad[PATH_MAX], log[PATH_MAX + 16];
	const char *kernels = getenv("CRCUDA_SIM_KERNELS");
	enum probe pr;
	int lock, rc = -1;

	if (socket_dir(a->socket))
		return -1;
	register_program(a->socket, reg, reglen);
	lock = lock_socket(a->socket);
	if (lock < 0)
		return -1;
	pr = probe(a->socket, NULL, NULL, &r);
	if (pr == PROBE_OK) {
		rc = check_daemon(a, a->socket, &r);
		goto out;
	}
	if (pr == PROBE_REFUSED) {
		ctl_error("crcudad at %s refused the session: %s", a->socket, crc_strerror(r.status));
		goto out;
	}
	if (!strcmp(a->backend, "cuda") && !have_cuda_driver(libdir)) {
		ctl_error("no CUDA driver on this machine; use --backend sim for the simulated device, or "
			  "--remote HOST:PORT");
		goto out;
	}
	if (find_crcudad(crcudad, sizeof(crcudad)))
		goto out;
	if (a->daemon_log) {
		snprintf(log, sizeof(log), "%s", a->daemon_log);
	} else {
		char copy[PATH_MAX];

		snprintf(copy, sizeof(copy), "%s", a->socket);
		snprintf(log, sizeof(log), "%s/crcudad.log", dirname(copy));
	}
	if (!strcmp(a->backend, "sim")) {
		/* The simulated device runs kernels as host functions from these libraries (the
		 * daemon inherits the variable); the daemon runs from / and needs them by absolute
		 * path. */
		if (!kernels || !*kernels)
			ctl_error("warning: CRCUDA_SIM_KERNELS is not set: kernel launches on the simulated "
				  "device will fail");
		else
			absolute_list("CRCUDA_SIM_KERNELS", kernels);
	}
	if (start_daemon(a, crcudad, log, &r) == 0)
		rc = check_daemon(a, a->socket, &r);
out:
	close(lock);
	return rc;
}

static int prepend_env(const char *var, const char *dir)
{
	const char *old = getenv(var);
	char *v;
	int rc;

	if (!old || !*old)
		return setenv(var, dir, 1);
	if (asprintf(&v, "%s:%s", dir, old) < 0)
		return -1;
	rc = setenv(var, v, 1);
	free(v);
	return rc;
}

int cmd_run(int argc, char **argv, struct ctl_opts *opts)
{
	enum {
		OPT_REMOTE = 256,
		OPT_TOKEN,
		OPT_INSECURE,
		OPT_TLS_CERT,
		OPT_TLS_KEY,
		OPT_TLS_CA,
		OPT_BACKEND,
		OPT_SOCKET,
		OPT_LOG,
		OPT_IDLE,
		OPT_VA_BASE,
		OPT_VA_SESSION,
		OPT_CKPT_ON,
		OPT_EVERY,
		OPT_KEEP,
	};
	int rc;
	static const struct option longopts[] = {
	    {"remote", required_argument, NULL, OPT_REMOTE},
	    {"token-file", required_argument, NULL, OPT_TOKEN},
	    {"insecure", no_argument, NULL, OPT_INSECURE},
	    {"tls-cert", required_argument, NULL, OPT_TLS_CERT},
	    {"tls-key", required_argument, NULL, OPT_TLS_KEY},
	    {"tls-ca", required_argument, NULL, OPT_TLS_CA},
	    {"backend", required_argument, NULL, OPT_BACKEND},
	    {"socket", required_argument, NULL, OPT_SOCKET},
	    {"daemon-log", required_argument, NULL, OPT_LOG},
	    {"idle-exit", required_argument, NULL, OPT_IDLE},
	    {"va-base", required_argument, NULL, OPT_VA_BASE},
	    {"va-session", required_argument, NULL, OPT_VA_SESSION},
	    {"checkpoint-on", required_argument, NULL, OPT_CKPT_ON},
	    {"every", required_argument, NULL, OPT_EVERY},
	    {"keep", required_argument, NULL, OPT_KEEP},
	    {"store", required_argument, NULL, 's'},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	struct run_args a = {.backend = "cuda", .idle_exit = RUN_IDLE_EXIT_DEFAULT};
	char libdir[PATH_MAX], sock[PATH_MAX], abs[PATH_MAX], reg[PATH_MAX + 32] = "";
	bool local_only = false;
	struct run_ckpt ck = {0};
	char store_dir[PATH_MAX], lineage[CTL_LINEAGE_MAX], *orig_ldlp = NULL;
	bool keep_given = false;
	char *end;
	int c;

	(void)opts;
	sigemptyset(&ck.on);
	sigemptyset(&ck.stop);
	/* "+": the program's own options are not ours. */
	while ((c = getopt_long(argc, argv, "+hs:", longopts, NULL)) != -1) {
		switch (c) {
		case OPT_CKPT_ON:
			if (run_ckpt_parse_signals(optarg, &ck))
				return CTL_EXIT_USAGE;
			break;
		case OPT_EVERY:
			if (run_ckpt_parse_every(optarg, &ck.every))
				return CTL_EXIT_USAGE;
			break;
		case OPT_KEEP:
			errno = 0;
			ck.keep = (unsigned)strtoul(optarg, &end, 10);
			if (errno || *end || !*optarg || optarg[0] == '-' || !ck.keep || ck.keep > 1000000) {
				ctl_error("run: --keep wants a number of checkpoints (1 or more), got '%s'",
					  optarg);
				return CTL_EXIT_USAGE;
			}
			keep_given = true;
			break;
		case 's':
			ck.store = optarg;
			break;
		case OPT_REMOTE:
			a.remote = optarg;
			break;
		case OPT_TLS_CERT:
			setenv("CRCUDA_TLS_CERT", optarg, 1);
			break;
		case OPT_TLS_KEY:
			setenv("CRCUDA_TLS_KEY", optarg, 1);
			break;
		case OPT_TLS_CA:
			setenv("CRCUDA_TLS_CA", optarg, 1);
			break;
		case OPT_INSECURE:
			/* Plaintext TCP, for this and for what it starts (the program, CRIU's plugin). */
			setenv("CRCUDA_INSECURE", "1", 1);
			break;
		case OPT_TOKEN:
			a.token_file = optarg;
			break;
		case OPT_BACKEND:
			a.backend = optarg;
			a.backend_given = true;
			break;
		case OPT_SOCKET:
			a.socket = optarg;
			local_only = true;
			break;
		case OPT_LOG:
			a.daemon_log = optarg;
			local_only = true;
			break;
		case OPT_IDLE:
			errno = 0;
			a.idle_exit = (unsigned)strtoul(optarg, &end, 10);
			if (errno || *end || !*optarg) {
				ctl_error("run: --idle-exit wants seconds, got '%s'", optarg);
				return CTL_EXIT_USAGE;
			}
			local_only = true;
			break;
		case OPT_VA_BASE:
		case OPT_VA_SESSION:
			errno = 0;
			strtoull(optarg, &end, 0);
			if (errno || *end || !*optarg) {
				ctl_error("run: --va-base and --va-session want a number, got '%s'", optarg);
				return CTL_EXIT_USAGE;
			}
			*(c == OPT_VA_BASE ? &a.va_base : &a.va_session) = optarg;
			local_only = true;
			break;
		case 'h':
			run_usage(stdout);
			return CTL_EXIT_OK;
		default:
			run_usage(stderr);
			return CTL_EXIT_USAGE;
		}
	}
	if (optind >= argc) {
		ctl_error("run: no program given (crcudactl run [OPTIONS] -- PROG [ARGS...])");
		return CTL_EXIT_USAGE;
	}
	a.prog = argv + optind;
	if (strcmp(a.backend, "cuda") && strcmp(a.backend, "sim")) {
		ctl_error("run: --backend is cuda or sim, not '%s'", a.backend);
		return CTL_EXIT_USAGE;
	}
	if (a.token_file && !a.remote) {
		ctl_error("run: --token-file goes with --remote");
		return CTL_EXIT_USAGE;
	}
	if (a.remote && local_only) {
		ctl_error("run: --socket, --daemon-log, --idle-exit and --va-* are for a local daemon, not "
			  "--remote");
		return CTL_EXIT_USAGE;
	}
	if ((keep_given || ck.store) && !ck.any && !ck.every) {
		ctl_error("run: --keep and --store go with --checkpoint-on or --every");
		return CTL_EXIT_USAGE;
	}
	if ((ck.any || ck.every) &&
	    (ctl_store_dir(ck.store, store_dir, sizeof(store_dir)) || !(ck.store_dir = store_dir)))
		return CTL_EXIT_USAGE;
	if (find_libdir(libdir, sizeof(libdir)))
		return CTL_EXIT_FAILURE;

	if (a.remote) {
		static struct crc_hello_reply r;
		enum probe pr;

		a.token_file = ctl_token_file(a.token_file);
		if (!a.token_file && !getenv("CRCUDA_TOKEN")) {
			ctl_error("run: --remote needs a token: --token-file FILE, or CRCUDA_TOKEN or "
				  "CRCUDA_TOKEN_FILE");
			return CTL_EXIT_USAGE;
		}
		pr = probe(NULL, a.remote, a.token_file, &r);
		if (pr != PROBE_OK) {
			ctl_error("crcudad at %s %s", a.remote,
				  pr == PROBE_ABSENT ? "cannot be reached"
				  : pr == PROBE_BROKEN
				      ? "closed the connection or did not answer (not a crcudad?)"
				  : r.status == CRC_EAUTH ? "refused the session: wrong or missing token"
							  : "refused the session");
			if (pr == PROBE_REFUSED && r.status != CRC_EAUTH)
				fprintf(stderr, "crcudactl: (%s)\n", crc_strerror(r.status));
			return CTL_EXIT_FAILURE;
		}
		if (check_daemon(&a, a.remote, &r))
			return CTL_EXIT_FAILURE;
		setenv("CRCUDA_REMOTE", a.remote, 1);
		if (a.token_file && realpath(a.token_file, abs)) {
			/* libcrcuda prefers CRCUDA_TOKEN to the file: the file given here wins. */
			unsetenv("CRCUDA_TOKEN");
			setenv("CRCUDA_TOKEN_FILE", abs, 1);
		}
	} else {
		if (a.socket)
			snprintf(sock, sizeof(sock), "%s", a.socket);
		else if (crc_sock_default_path(sock, sizeof(sock)))
			return CTL_EXIT_FAILURE;
		/* The program and the daemon must agree whatever their working directories. */
		if (sock[0] != '/') {
			char cwd[PATH_MAX];

			if (!getcwd(cwd, sizeof(cwd)) ||
			    snprintf(abs, sizeof(abs), "%s/%s", cwd, sock) >= (int)sizeof(abs)) {
				ctl_error("run: socket path too long");
				return CTL_EXIT_FAILURE;
			}
			snprintf(sock, sizeof(sock), "%s", abs);
		}
		a.socket = sock;
		if (local_daemon(&a, libdir, reg, sizeof(reg))) {
			if (reg[0])
				unlink(reg);
			return CTL_EXIT_FAILURE;
		}
		unsetenv("CRCUDA_REMOTE");
		setenv("CRCUDA_SOCKET", sock, 1);
	}
	/* One name for the program's checkpoints, whatever its restores (a given one is kept: a job's
	 * runs may share one). */
	if (!getenv(CTL_LINEAGE_ENV) || !*getenv(CTL_LINEAGE_ENV)) {
		char host[64] = "";
		const char *base = strrchr(a.prog[0], '/');

		gethostname(host, sizeof(host) - 1);
		host[strcspn(host, ".")] = 0;
		snprintf(lineage, sizeof(lineage), "%.40s-%s-%d-%lld", base ? base + 1 : a.prog[0], host,
			 (int)getpid(), (long long)time(NULL));
		setenv(CTL_LINEAGE_ENV, lineage, 1);
	}
	snprintf(lineage, sizeof(lineage), "%s", getenv(CTL_LINEAGE_ENV));
	ck.lineage = lineage;
	if (getenv("LD_LIBRARY_PATH") && !(orig_ldlp = strdup(getenv("LD_LIBRARY_PATH"))))
		return CTL_EXIT_FAILURE;
	ck.orig_ldlp = orig_ldlp;
	if (prepend_env("LD_LIBRARY_PATH", libdir)) {
		ctl_error("run: cannot set LD_LIBRARY_PATH: %s", strerror(errno));
		return CTL_EXIT_FAILURE;
	}
	/* CRIU cannot dump an io_uring. libuv sets one up for its file operations unless told not to,
	 * and its loops batch epoll_ctl through one whatever it is told (1.49): PyTorch's TCPStore serves
	 * with libuv unless USE_LIBUV=0 (its own loop then). A program run here stays checkpointable; its
	 * own settings win. */
	setenv("UV_USE_IO_URING", "0", 0);
	setenv("USE_LIBUV", "0", 0);
	if (ck.any || ck.every) {
		rc = run_ckpt_supervise(&ck, a.prog);
		if (reg[0])
			unlink(reg);
		free(orig_ldlp);
		return rc;
	}
	fflush(NULL);
	execvp(a.prog[0], a.prog);
	rc = errno;
	ctl_error("run: cannot run %s: %s", a.prog[0], strerror(rc));
	if (reg[0])
		unlink(reg);
	/* As a shell says it: 127 not found, 126 found but not runnable. */
	return rc == ENOENT ? 127 : 126;
}
