/* crcuda's CRIU plugin: lets plain `criu dump/restore --libdir DIR` checkpoint and restore a crcuda
 * client (a process whose libcuda.so.1 is libcrcuda, talking to crcudad over a unix socket, or over TCP
 * to a remote one: such a client parks on a unix socket of this plugin in place of its connection,
 * park_listen, so that the dump sees the same as for a local client).
 *
 * Dump: PAUSE_DEVICES asks the daemon to quiesce the session of each task that has one;
 * CHECKPOINT_DEVICES (tasks frozen) has it copy device memory into the store; DUMP_UNIX_SK claims the
 * task's socket to the daemon, which CRIU could not dump (its other end is in the daemon); fini
 * commits the checkpoint once CRIU has written its images (abort on failure) and resumes the session
 * (it only runs on with --leave-running: otherwise CRIU kills the frozen task right after).
 * Restore: RESTORE_UNIX_SK, in the restored task, has a daemon replay the checkpoint and returns the
 * socket of the new session, so the task is held until replay is complete.
 *
 * Configuration: the environment (crcudactl sets it), else /etc/crcuda/plugin.conf (conf.c; what
 * container runtimes, which run CRIU with an environment of their own, use), else the defaults:
 *   CRCUDA_DAEMON        daemon: unix socket path or HOST:PORT (default: the dumped task's own
 *                        CRCUDA_REMOTE, else its CRCUDA_SOCKET, else $CRCUDA_SOCKET, else
 *                        /tmp/crcuda-UID/crcudad.sock); token of a TCP one: CRCUDA_TOKEN /
 *                        CRCUDA_TOKEN_FILE, else the task's
 *   CRCUDA_LEAVE_RUNNING dump: 0 when CRIU kills the tasks (a detached TCP session then ends at once)
 *   CRCUDA_CKPT_BACKGROUND dump: 1 to snapshot device memory and copy it to the store after the task
 *                        runs on (with --leave-running): the commit then happens when that copy is
 *                        done; the report says "pending PID" and crc_ctl_commit_wait tells the end
 *   CRCUDA_REMOTE        restore on the daemon at HOST:PORT (token: CRCUDA_TOKEN / CRCUDA_TOKEN_FILE)
 *   CRCUDA_INSECURE      1: plaintext TCP to the daemon (else TLS; dump: else the task's own)
 *   CRCUDA_TLS_CERT/_KEY/_CA  TLS with certificates instead of the token (dump: else the task's own)
 *   CRCUDA_STORE         the store (dump: default ~/.local/share/crcuda/store; restore: the dump's)
 *   CRCUDA_CRIU_IMAGES   the image directory relative to the store (default: computed)
 *   CRCUDA_CKPT_ID       restore: the checkpoint (default: the one committed by this dump)
 *   CRCUDA_GPU           restore: device ordinal (default -1: the checkpointed one)
 *   CRCUDA_TIMEOUT_MS    quiesce and replay timeout (default 60000)
 *   CRCUDA_CKPT_META     dump: extra manifest metadata, key=value lines
 *   CRCUDA_PLUGIN_REPORT file the plugin appends its results and errors to (for crcudactl)
 *   CRCUDA_CKPT_DECISION dump: a symlink path that decides, once, between a commit and a cancel
 *                        (crcudactl checkpoint): CRIU's post-dump action script makes it "commit",
 *                        crcudactl makes it "cancel" on SIGINT/SIGTERM; whichever comes first wins
 *                        (symlink(2) is atomic). With it set, fini commits only on "commit"; each
 *                        hook fails the dump at once on "cancel" (CRIU lets the tasks go)
 *   CRCUDA_STATE         dump: "images" keeps the device state in CRIU's image directory as well
 *                        (crcuda-PID.crcx, crcudactl's export stream without the CRIU images), so that
 *                        the images alone restore it (podman container checkpoint --export); the
 *                        restore imports it into the store. Default "store"
 *   CRCUDA_PLUGIN=off    disables the plugin */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "criu-log.h"
#include "criu-plugin.h"
#include "crcuda/ctl.h"
#include "crcuda/durable.h"
#include "crcuda/proctree.h"
#include "crcuda/errno.h"
#include "crcuda/proto.h"
#include "crcuda/sock.h"
#include "conf.h"
#include "crcudactl.h" /* the export stream (cmd_export.c, built in with CRC_EXPORT_STREAM_ONLY) */

/* From crcuda/log.h (common/log.c), which cannot be included beside CRIU's criu-log.h (both define
 * pr_info and its kin). */
#define CRC_LOG_SILENT (-1)
int crc_log_level(void);
void crc_log_set_level(int level);
const char *crc_log_last_error(void);
void crc_log_clear_last_error(void);

#undef LOG_PREFIX
#define LOG_PREFIX "crcuda_plugin: "

#define PLUGIN_NAME	   "crcuda"
#define PLUGIN_IMG	   "crcuda.img"
#define PLUGIN_IMG_VERSION 1
#define TIMEOUT_MS_DEFAULT 60000
#define MAX_TASKS	   64

/* CRIU's own (exported by the criu binary; the cuda plugin uses them the same way). */
extern int add_inventory_plugin(const char *name);
extern bool check_and_remove_inventory_plugin(const char *name, size_t n);

struct task {
	pid_t pid;
	uint64_t session;
	bool quiesced, checkpointed;
	uint32_t sk_ino; /* its socket to the daemon, once DUMP_UNIX_SK saw it */
	struct crc_ctl_ckpt_stats stats;
	double t_quiesce, t_quiesced, t_device; /* when its pause began, it was quiesced, copied */
	/* A TCP client parks on a unix socket of ours instead of its connection (park_listen). */
	char park[108];
	int park_fd;	 /* our end, -1 */
	uint64_t ckpt;	 /* committed as */
	char export[64]; /* state=images: its device state's file in the image directory */
};

/* Restore: a task of the dump with a session, by the inode of its socket to the daemon. */
struct r_task {
	pid_t pid;
	uint32_t ino;
	uint64_t ckpt;
	char export[64]; /* its device state in the image directory (imported into the store), or "" */
};

static struct {
	bool enabled;
	int stage;
	char daemon[PATH_MAX]; /* unix path or HOST:PORT */
	char token[256];
	char store[PATH_MAX];
	int timeout_ms;
	bool state_images;    /* dump: CRCUDA_STATE=images */
	struct crc_ctl *ctl;  /* dump: one control connection for the whole dump */
	bool inventory_named; /* dump: this plugin is in CRIU's inventory */
	pid_t criu_parent;    /* dump: who ran CRIU (crcudactl, which kills the tasks after the commit) */
	struct task tasks[MAX_TASKS];
	unsigned ntasks;
	/* restore: what the dump recorded (a process tree has several clients, each its checkpoint) */
	struct r_task r_tasks[MAX_TASKS];
	unsigned r_ntasks;
	uint64_t r_ckpt;
	struct crc_ctl_restore_opts r_gpus; /* CRCUDA_GPU (crcudactl restore --gpu): gpu, gpus, ngpus */
} P;

/* ---- helpers ------------------------------------------------------------------------------------------ */

/* One line into CRCUDA_PLUGIN_REPORT (O_APPEND: the restored task and CRIU both write). */
static void report(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void report(const char *fmt, ...)
{
	const char *path = crc_plugin_cfg("CRCUDA_PLUGIN_REPORT");
	char line[2048];
	va_list ap;
	int n, fd;

	if (!path || !*path)
		return;
	va_start(ap, fmt);
	n = vsnprintf(line, sizeof(line) - 1, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if ((size_t)n > sizeof(line) - 2)
		n = sizeof(line) - 2;
	for (int i = 0; i < n; i++)
		if (line[i] == '\n')
			line[i] = ' ';
	line[n++] = '\n';
	fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0)
		return;
	if (write(fd, line, (size_t)n) < 0)
		pr_warn("cannot write %s: %s\n", path, strerror(errno));
	close(fd);
}

/* An error: CRIU's log and the report (crcudactl shows the report's reason). */
#define fail(fmt, ...)                                                                                       \
	do {                                                                                                 \
		pr_err(fmt "\n", ##__VA_ARGS__);                                                             \
		report("error " fmt, ##__VA_ARGS__);                                                         \
	} while (0)

/* A phase: into the report (crcudactl shows it as progress). Tests hold the plugin at one
 * (CRCUDA_PLUGIN_TEST_PAUSE=PHASE): it writes "pid ppid" to CRCUDA_PLUGIN_TEST_PAUSE_FILE and waits up
 * to 60 s for the file to go, so that a test can kill -9 a participant at that very step. */
static void phase(const char *name, int pid)
{
	const char *want = getenv("CRCUDA_PLUGIN_TEST_PAUSE"),
		   *file = getenv("CRCUDA_PLUGIN_TEST_PAUSE_FILE");
	char buf[64];
	int fd, n;

	report("phase %s %d", name, pid);
	if (!want || !file || strcmp(want, name))
		return;
	fd = open(file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return;
	n = snprintf(buf, sizeof(buf), "%d %d\n", (int)getpid(), (int)getppid());
	if (write(fd, buf, (size_t)n) != n)
		pr_warn("cannot write %s\n", file);
	close(fd);
	pr_info("test pause at phase %s\n", name);
	for (int i = 0; i < 600 && access(file, F_OK) == 0; i++)
		usleep(100000);
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* CRCUDA_CKPT_DECISION reads "cancel": crcudactl was told to stop the checkpoint. */
static bool decision_is(const char *what)
{
	const char *path = getenv("CRCUDA_CKPT_DECISION");
	char buf[16];
	ssize_t n;

	if (!path || !*path)
		return false;
	n = readlink(path, buf, sizeof(buf) - 1);
	if (n < 0)
		return false;
	buf[n] = 0;
	return !strcmp(buf, what);
}

/* At each step of a dump: a cancelled checkpoint fails here (CRIU lets the tasks go, fini aborts). */
static int cancelled(int pid)
{
	if (!decision_is("cancel"))
		return 0;
	fail("checkpoint of task %d cancelled", pid);
	return -1;
}

static int env_int(const char *name, int def)
{
	const char *v = crc_plugin_cfg(name);
	char *end;
	long n;

	if (!v || !*v)
		return def;
	n = strtol(v, &end, 10);
	return *end || n < INT_MIN || n > INT_MAX ? def : (int)n;
}

static bool is_tcp(const char *addr)
{
	return !strchr(addr, '/') && strchr(addr, ':');
}

/* CRCUDA_TOKEN, else the first line of CRCUDA_TOKEN_FILE ("" when neither). */
static void read_token(char *buf, size_t len)
{
	const char *tok = getenv("CRCUDA_TOKEN"), *file = crc_plugin_cfg("CRCUDA_TOKEN_FILE");
	ssize_t n = 0;
	int fd;

	buf[0] = 0;
	if (tok && *tok) {
		snprintf(buf, len, "%s", tok);
		return;
	}
	if (!file || !*file || (fd = open(file, O_RDONLY | O_CLOEXEC)) < 0)
		return;
	n = read(fd, buf, len - 1);
	close(fd);
	buf[n > 0 ? n : 0] = 0;
	buf[strcspn(buf, "\r\n")] = 0;
}

/* The value of NAME in /proc/PID/environ (the environment the client started with). */
static bool task_env(pid_t pid, const char *name, char *out, size_t len)
{
	char path[64], buf[65536];
	size_t nl = strlen(name);
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/environ", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return false;
	buf[n] = 0;
	for (char *p = buf; p < buf + n; p += strlen(p) + 1) {
		if (!strncmp(p, name, nl) && p[nl] == '=') {
			snprintf(out, len, "%s", p + nl + 1);
			return true;
		}
	}
	return false;
}

/* Does the task look like a crcuda client (libcrcuda's environment)? Only to decide between "not
 * ours" and "ours, but the daemon cannot be reached". */
static bool looks_like_client(pid_t pid)
{
	char v[PATH_MAX];

	return task_env(pid, "CRCUDA_SOCKET", v, sizeof(v)) || task_env(pid, "CRCUDA_REMOTE", v, sizeof(v));
}

static struct task *task_find(pid_t pid)
{
	for (unsigned i = 0; i < P.ntasks; i++)
		if (P.tasks[i].pid == pid)
			return &P.tasks[i];
	return NULL;
}

/* Quietly: CRIU asks about every task it dumps, crcuda's or not; the caller says what failed. */
static int ctl_connect(struct crc_ctl **out)
{
	int level = crc_log_level(), rc;

	crc_log_set_level(CRC_LOG_SILENT);
	crc_log_clear_last_error();
	rc = crc_ctl_open(P.daemon, is_tcp(P.daemon) ? P.token : NULL, out);
	crc_log_set_level(level);
	if (rc)
		*out = NULL;
	return rc;
}

/* ---- the plugin's image ------------------------------------------------------------------------------- */

static int image_write(uint64_t ckpt)
{
	char buf[4096];
	int dir = criu_get_image_dir(), fd, n = 0;

	n += snprintf(buf + n, sizeof(buf) - n, "version %d\ndaemon %s\nstore %s\n", PLUGIN_IMG_VERSION,
		      P.daemon, P.store);
	if (ckpt)
		n += snprintf(buf + n, sizeof(buf) - n, "ckpt %" PRIu64 "\n", ckpt);
	/* task PID SESSION SOCKET-INODE [CHECKPOINT]: the last field once committed (a tree's clients
	 * each have their own; version-1 readers take the first three). */
	for (unsigned i = 0; i < P.ntasks && n < (int)sizeof(buf) - 128; i++)
		if (P.tasks[i].sk_ino)
			n += snprintf(buf + n, sizeof(buf) - n, "task %d %" PRIu64 " %u %" PRIu64 "\n",
				      (int)P.tasks[i].pid, P.tasks[i].session, P.tasks[i].sk_ino,
				      P.tasks[i].ckpt);
	/* export PID FILE: the task's device state is in the image directory too (state=images). */
	for (unsigned i = 0; i < P.ntasks && n < (int)sizeof(buf) - 128; i++)
		if (P.tasks[i].sk_ino && P.tasks[i].export[0])
			n += snprintf(buf + n, sizeof(buf) - n, "export %d %s\n", (int)P.tasks[i].pid,
				      P.tasks[i].export);
	/* Replaced whole (rename) so that a reader never sees half of it. */
	fd = openat(dir, PLUGIN_IMG ".tmp", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0 || write(fd, buf, (size_t)n) != n || fsync(fd) || close(fd) ||
	    renameat(dir, PLUGIN_IMG ".tmp", dir, PLUGIN_IMG)) {
		fail("cannot write %s in the image directory: %s", PLUGIN_IMG, strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	return 0;
}

/* Reads the dump's record; returns 1 when there is none (not a crcuda dump), 0, or -1. */
static int image_read(void)
{
	char line[PATH_MAX + 64];
	int fd = openat(criu_get_image_dir(), PLUGIN_IMG, O_RDONLY | O_CLOEXEC);
	FILE *f;

	if (fd < 0)
		return errno == ENOENT ? 1 : -1;
	f = fdopen(fd, "r");
	if (!f) {
		close(fd);
		return -1;
	}
	while (fgets(line, sizeof(line), f)) {
		unsigned long long a, b;
		unsigned ino;
		int pid, name = 0;

		line[strcspn(line, "\n")] = 0;
		if (!strncmp(line, "store ", 6) && !P.store[0] && strlen(line + 6) < sizeof(P.store))
			memcpy(P.store, line + 6, strlen(line + 6) + 1);
		else if (sscanf(line, "ckpt %llu", &a) == 1)
			P.r_ckpt = a;
		else if (sscanf(line, "task %d %llu %u %llu", &pid, &b, &ino, &a) >= 3) {
			if (P.r_ntasks == MAX_TASKS) {
				fail("the dump holds more than %d crcuda clients", MAX_TASKS);
				fclose(f);
				return -1;
			}
			/* Without its own checkpoint (an older dump, one client): the dump's. */
			if (sscanf(line, "task %*d %*u %*u %llu", &a) != 1)
				a = 0;
			P.r_tasks[P.r_ntasks++] = (struct r_task){.pid = pid, .ino = ino, .ckpt = a};
		} else if (sscanf(line, "export %d %n", &pid, &name) == 1 && name) {
			struct r_task *t = NULL;

			for (unsigned i = 0; i < P.r_ntasks; i++)
				if (P.r_tasks[i].pid == pid)
					t = &P.r_tasks[i];
			/* A plain name in the image directory, written by the dump (export_to_images). */
			if (!t || strchr(line + name, '/') || strlen(line + name) >= sizeof(t->export)) {
				fail("%s: a bad line '%.100s'", PLUGIN_IMG, line);
				fclose(f);
				return -1;
			}
			snprintf(t->export, sizeof(t->export), "%s", line + name);
		}
	}
	fclose(f);
	return 0;
}

/* ---- dump ------------------------------------------------------------------------------------------- */

static int dump_init(void)
{
	const char *v = crc_plugin_cfg("CRCUDA_STORE"), *home = getenv("HOME");

	if (v && *v)
		snprintf(P.store, sizeof(P.store), "%s", v);
	else if (home)
		snprintf(P.store, sizeof(P.store), "%s/.local/share/crcuda/store", home);
	read_token(P.token, sizeof(P.token));
	P.criu_parent = getppid();
	v = crc_plugin_cfg("CRCUDA_STATE");
	if (v && !crc_plugin_valid_state(v)) {
		fail("CRCUDA_STATE='%s': expected store or images", v);
		return -1;
	}
	P.state_images = v && !strcmp(v, "images");
	return 0;
}

/* The daemon of this task: CRCUDA_DAEMON, else the task's own CRCUDA_REMOTE (token: ours, else the
 * task's CRCUDA_TOKEN or CRCUDA_TOKEN_FILE), else its CRCUDA_SOCKET (else the default). */
static void dump_daemon(pid_t pid)
{
	const char *v = crc_plugin_cfg("CRCUDA_DAEMON");
	char base[PATH_MAX];

	if (P.daemon[0])
		return;
	if (v && *v) {
		snprintf(P.daemon, sizeof(P.daemon), "%s", v);
	} else if (task_env(pid, "CRCUDA_REMOTE", base, sizeof(base)) && *base) {
		snprintf(P.daemon, sizeof(P.daemon), "%s", base);
		/* A program that talks to its daemon in plaintext (CRCUDA_INSECURE) is checkpointed so too.
		 */
		if (!getenv("CRCUDA_INSECURE") && task_env(pid, "CRCUDA_INSECURE", base, sizeof(base)))
			setenv("CRCUDA_INSECURE", base, 1);
		if (!getenv("CRCUDA_TLS_CA") && !getenv("CRCUDA_TLS_CERT") && !getenv("CRCUDA_TLS_KEY"))
			for (const char *const *v = (const char *const[]){"CRCUDA_TLS_CERT", "CRCUDA_TLS_KEY",
									  "CRCUDA_TLS_CA", NULL};
			     *v; v++)
				if (task_env(pid, *v, base, sizeof(base)))
					setenv(*v, base, 1);
		if (!P.token[0] && !task_env(pid, "CRCUDA_TOKEN", P.token, sizeof(P.token)) &&
		    task_env(pid, "CRCUDA_TOKEN_FILE", base, sizeof(base))) {
			setenv("CRCUDA_TOKEN_FILE", base, 1);
			read_token(P.token, sizeof(P.token));
		}
	} else if (!task_env(pid, "CRCUDA_SOCKET", base, sizeof(base)) &&
		   crc_sock_default_path(base, sizeof(base)))
		P.daemon[0] = 0;
	else
		snprintf(P.daemon, sizeof(P.daemon), "%s", base);
}

/* The park socket and its private directory go. */
static void park_remove(struct task *t)
{
	char *slash;

	if (!t->park[0])
		return;
	unlink(t->park);
	slash = strrchr(t->park, '/');
	if (slash) {
		*slash = 0;
		rmdir(t->park);
		*slash = '/';
	}
}

/* A TCP client cannot be dumped with its connection: it parks on a unix socket connected to this
 * one, which DUMP_UNIX_SK claims and a restore replaces like a unix client's. Listening before the
 * quiesce, accepted after. The socket is in a directory of its own (mkdtemp: no name to guess, no
 * one else's file in the way) that belongs to the task's user and that no one else may enter; the
 * connection accepted is the task's own (SO_PEERCRED). */
static int park_listen(struct task *t)
{
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	char proc[32], dir[64] = "/tmp/crcuda-park-XXXXXX";
	struct stat st;
	int fd = -1;

	snprintf(proc, sizeof(proc), "/proc/%d", (int)t->pid);
	t->park[0] = 0;
	if (!mkdtemp(dir)) {
		fail("cannot make a directory for the TCP client %d to park on: %s", (int)t->pid,
		     strerror(errno));
		return -1;
	}
	snprintf(t->park, sizeof(t->park), "%s/park.sock", dir);
	snprintf(a.sun_path, sizeof(a.sun_path), "%s", t->park);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) || listen(fd, 1) || stat(proc, &st) ||
	    chown(t->park, st.st_uid, st.st_gid) || chmod(t->park, 0600) ||
	    chown(dir, st.st_uid, st.st_gid)) {
		fail("cannot listen on %s for the TCP client %d: %s", t->park, (int)t->pid, strerror(errno));
		if (fd >= 0)
			close(fd);
		park_remove(t);
		return -1;
	}
	return fd;
}

/* The parked client's connection (it connects before it acknowledges the quiesce); a connection of
 * any other process is refused. */
static int park_accept(struct task *t, int lfd)
{
	struct pollfd p = {.fd = lfd, .events = POLLIN};
	double end = now_s() + 5;
	struct crc_peer peer;
	int fd;

	t->park_fd = -1;
	while (t->park_fd < 0 && now_s() < end) {
		if (poll(&p, 1, (int)((end - now_s()) * 1000) + 1) != 1)
			continue;
		fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0)
			continue;
		if (crc_unix_peer(fd, &peer) == 0 && peer.pid == t->pid) {
			t->park_fd = fd;
			break;
		}
		pr_warn("refusing a connection to %s of pid %d: the park socket is task %d's\n", t->park,
			(int)peer.pid, (int)t->pid);
		close(fd);
	}
	close(lfd);
	park_remove(t);
	if (t->park_fd < 0) {
		fail("task %d acknowledged the quiesce but did not connect to %s", (int)t->pid, t->park);
		return -1;
	}
	return 0;
}

/* The task's pid in its own pid namespace (the last of /proc/PID/status's NSpid), or pid. */
static pid_t inner_pid(pid_t pid)
{
	char path[64], line[256];
	pid_t inner = pid;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	f = fopen(path, "re");
	if (!f)
		return pid;
	while (fgets(line, sizeof(line), f)) {
		char *last;

		if (strncmp(line, "NSpid:", 6))
			continue;
		line[strcspn(line, "\n")] = 0;
		last = strrchr(line, '\t');
		if (last)
			inner = (pid_t)atoi(last + 1);
		break;
	}
	fclose(f);
	return inner > 0 ? inner : pid;
}

/* A task in a pid namespace of its own that was restored there (a container with its own pid
 * namespace, restored by its runtime) is known to the daemon by its pid inside that namespace, CRIU
 * here by this one's. Which of the daemon's sessions with that inner pid is the task's cannot be told
 * here (every container's first process is 1), so such a dump is refused, saying why, instead of
 * waiting for a session and failing on the task's socket. true: refused. */
static bool ns_pid_session(pid_t pid)
{
	pid_t inner = inner_pid(pid);

	if (inner == pid || is_tcp(P.daemon) || !crc_task_connected_to(pid, P.daemon) ||
	    crc_ctl_session_of(P.ctl, inner, NULL, 0, NULL))
		return false;
	/* A session of its own may be starting (its first CUDA call): a second for it to show up. */
	if (crc_ctl_session_of(P.ctl, pid, P.daemon, 1000, NULL) != CRC_ENOTFOUND)
		return false;
	fail("task %d is connected to the daemon at %s, which knows its session by its pid in its own "
	     "pid namespace (%d: it was restored there); checkpoint it from inside that namespace, or run "
	     "its container with --pid=host",
	     pid, P.daemon, (int)inner);
	return true;
}

/* A task whose only connection to the daemon is a client's of this dump, inherited: forked after
 * CUDA was set up (a DataLoader's workers are, by default), it is no client and no session of its own
 * is coming (CRIU dumps the socket once, for both). Its parent comes first in the dump. */
static bool inherited_connection(pid_t pid)
{
	uint64_t ino = is_tcp(P.daemon) ? 0 : crc_task_socket_to(pid, P.daemon);

	for (unsigned i = 0; ino && i < P.ntasks; i++)
		if (crc_task_socket_to(P.tasks[i].pid, P.daemon) == ino) {
			pr_info("task %d holds the daemon connection of task %d (forked from it after CUDA "
				"was set up): not a crcuda client\n",
				pid, P.tasks[i].pid);
			return true;
		}
	return false;
}

static int pause_devices(int pid)
{
	struct crc_ctl_session s;
	struct task *t = NULL;
	int rc, lfd = -1;
	bool tcp = false;

	if (!P.enabled || P.stage != CR_PLUGIN_STAGE__DUMP)
		return -ENOTSUP;
	dump_daemon(pid);
	if (!P.ctl && (rc = ctl_connect(&P.ctl))) {
		if (!looks_like_client(pid))
			return -ENOTSUP;
		fail("task %d is a crcuda client, but its daemon at %s cannot be reached: %s (%s)", pid,
		     P.daemon, crc_strerror(rc), crc_log_last_error());
		return -1;
	}
	/* A task connected to the daemon whose session is still starting (its first CUDA call) is
	 * waited for: its socket could not be dumped otherwise. */
	rc = crc_ctl_session_of(P.ctl, pid, NULL, 0, &s);
	if (rc == CRC_ENOTFOUND && ns_pid_session(pid))
		return -1;
	if (rc == CRC_ENOTFOUND && inherited_connection(pid))
		return -ENOTSUP;
	if (rc == CRC_ENOTFOUND)
		rc = crc_ctl_session_of(P.ctl, pid, is_tcp(P.daemon) ? NULL : P.daemon, P.timeout_ms, &s);
	if (rc && rc != CRC_ENOTFOUND) {
		fail("listing the sessions of %s: %s", P.daemon, crc_ctl_error(P.ctl));
		return -1;
	}
	if (!rc) {
		if (P.ntasks == MAX_TASKS) {
			fail("more than %d crcuda clients in one dump", MAX_TASKS);
			return -1;
		}
		t = &P.tasks[P.ntasks++];
		*t = (struct task){.pid = pid, .session = s.session_id, .park_fd = -1};
		tcp = s.transport == CRC_TRANSPORT_TCP;
	}
	if (!t) {
		pr_info("task %d has no session on %s: not a crcuda client (or no CUDA call yet)\n", pid,
			P.daemon);
		return -ENOTSUP;
	}
	phase("quiesce", pid);
	if (cancelled(pid))
		return -1;
	t->t_quiesce = now_s();
	if (tcp && (lfd = park_listen(t)) < 0)
		return -1;
	rc = tcp ? crc_ctl_quiesce_park(P.ctl, pid, P.timeout_ms, t->park)
		 : crc_ctl_quiesce(P.ctl, pid, P.timeout_ms);
	if (rc) {
		fail("quiescing session %" PRIu64 " of task %d: %s", t->session, pid, crc_ctl_error(P.ctl));
		if (lfd >= 0) {
			close(lfd);
			park_remove(t);
		}
		return -1;
	}
	t->quiesced = true;
	t->t_quiesced = now_s();
	if (tcp && park_accept(t, lfd))
		return -1;
	pr_info("task %d: session %" PRIu64 " quiesced\n", pid, t->session);
	report("session %d %" PRIu64, pid, t->session);
	return 0;
}

static int checkpoint_devices(int pid)
{
	struct task *t = task_find(pid);
	int rc;

	if (!P.enabled || !t)
		return -ENOTSUP;
	phase("device", pid);
	if (cancelled(pid))
		return -1;
	/* Every task is paused by now (CRIU pauses each as it collects the tree, then copies): the group
	 * is the dump's sessions, whose shared IPC memory is restored with them. */
	uint64_t group[MAX_TASKS];

	for (unsigned i = 0; i < P.ntasks; i++)
		group[i] = P.tasks[i].session;
	rc = crc_ctl_checkpoint_group(
	    P.ctl, pid, P.store,
	    /* state=images exports the committed checkpoint: never a background one */
	    !P.state_images && env_int("CRCUDA_CKPT_BACKGROUND", 0) == 1 ? CRC_CTL_CKPT_BACKGROUND : 0,
	    P.ntasks > 1 ? group : NULL, P.ntasks > 1 ? P.ntasks : 0, &t->stats);
	t->t_device = now_s();
	if (rc) {
		fail("checkpoint of the device state of task %d into %s: %s%s", pid, P.store,
		     crc_ctl_error(P.ctl),
		     is_tcp(P.daemon) ? " (the remote crcudad writes the store itself: it must see that path)"
				      : "");
		return -1;
	}
	t->checkpointed = true;
	pr_info("task %d: %" PRIu64 " allocations, %" PRIu64 " globals, %" PRIu64 " bytes (%" PRIu64
		" new) in %.3f s\n",
		pid, t->stats.allocations, t->stats.globals, t->stats.device_bytes, t->stats.new_bytes,
		t->stats.seconds);
	report("stats %d allocations=%" PRIu64 " globals=%" PRIu64 " modules=%" PRIu64
	       " device_bytes=%" PRIu64 " new_bytes=%" PRIu64
	       " seconds=%.6f copy_seconds=%.6f copied_bytes=%" PRIu64 " snapshot_bytes=%" PRIu64
	       " digest_seconds=%.6f",
	       pid, t->stats.allocations, t->stats.globals, t->stats.modules, t->stats.device_bytes,
	       t->stats.new_bytes, t->stats.seconds, t->stats.copy_seconds, t->stats.copied_bytes,
	       t->stats.snapshot_bytes, t->stats.digest_seconds);
	phase("criu", pid);
	return cancelled(pid);
}

/* The owner of socket inode ino among the tasks with a session. */
static struct task *socket_owner(uint32_t ino)
{
	char want[64], path[64], link[64];

	snprintf(want, sizeof(want), "socket:[%u]", ino);
	for (unsigned i = 0; i < P.ntasks; i++) {
		DIR *d;
		struct dirent *de;
		bool found = false;

		snprintf(path, sizeof(path), "/proc/%d/fd", (int)P.tasks[i].pid);
		d = opendir(path);
		if (!d)
			continue;
		while (!found && (de = readdir(d))) {
			char fdpath[sizeof(path) + sizeof(de->d_name)];
			ssize_t n;

			snprintf(fdpath, sizeof(fdpath), "%s/%s", path, de->d_name);
			n = readlink(fdpath, link, sizeof(link) - 1);
			if (n > 0) {
				link[n] = 0;
				found = !strcmp(link, want);
			}
		}
		closedir(d);
		if (found)
			return &P.tasks[i];
	}
	return NULL;
}

static struct task *park_owner(const char *path)
{
	for (unsigned i = 0; i < P.ntasks; i++)
		if (P.tasks[i].park[0] && !strcmp(P.tasks[i].park, path))
			return &P.tasks[i];
	return NULL;
}

static int dump_unix_sk(int fd, int id)
{
	struct sockaddr_un peer = {0};
	socklen_t len = sizeof(peer);
	struct task *t;
	char byte;

	if (!P.enabled || !P.ntasks)
		return -ENOTSUP;
	/* The daemon's socket, or (TCP client) the park socket its connection was swapped for. */
	if (getpeername(fd, (struct sockaddr *)&peer, &len) || peer.sun_family != AF_UNIX ||
	    len <= offsetof(struct sockaddr_un, sun_path) ||
	    (strcmp(peer.sun_path, P.daemon) && !park_owner(peer.sun_path)))
		return -ENOTSUP;
	t = socket_owner((uint32_t)id);
	if (!t) {
		pr_info("socket %d to the daemon belongs to no task with a session: not ours\n", id);
		return -ENOTSUP;
	}
	if (t->sk_ino) {
		fail("task %d holds two sockets to the daemon (%u and %d)", (int)t->pid, t->sk_ino, id);
		return -1;
	}
	if (!t->checkpointed) {
		fail("socket of task %d dumped before its device state was saved", (int)t->pid);
		return -1;
	}
	/* Daemon -> client, the socket carries only a restore's REBIND notice (with the new rings' memfd),
	 * which libcrcuda's watcher thread takes right after the restore (or the first CUDA call, where
	 * no watcher runs). Still queued, CRIU has dumped it with the socket, and a restore could not put
	 * it back: no checkpoint then. */
	if (recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT) == 1) {
		fail("task %d has made no CUDA call since it was restored (its restored session's notice is "
		     "still queued on its socket): checkpoint it once it has made one",
		     (int)t->pid);
		return -1;
	}
	t->sk_ino = (uint32_t)id;
	/* Restore then needs this plugin (and fails clearly without it). Named once: a restore takes
	 * one name off CRIU's list, and a name left there fails it. */
	if ((!P.inventory_named && add_inventory_plugin(PLUGIN_NAME)) || image_write(0))
		return -1;
	P.inventory_named = true;
	pr_info("socket %d of task %d to %s: restored by the plugin\n", id, (int)t->pid, P.daemon);
	return 0;
}

/* The image directory relative to the store (what the manifest names). */
static void images_rel(char *out, size_t len)
{
	const char *env = getenv("CRCUDA_CRIU_IMAGES");
	char link[64], img[PATH_MAX], store[PATH_MAX];
	ssize_t n;
	size_t sl;

	if (env && *env) {
		snprintf(out, len, "%s", env);
		return;
	}
	snprintf(link, sizeof(link), "/proc/self/fd/%d", criu_get_image_dir());
	n = readlink(link, img, sizeof(img) - 1);
	img[n > 0 ? n : 0] = 0;
	if (realpath(P.store, store) && (sl = strlen(store)) && !strncmp(img, store, sl) && img[sl] == '/')
		snprintf(out, len, "%s", img + sl + 1);
	else
		snprintf(out, len, "%s", img); /* outside the store: absolute */
}

/* The real uid of a task: 0 or -1. */
static int task_uid(pid_t pid, unsigned *uid)
{
	char path[64], line[256];
	int rc = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	f = fopen(path, "re");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "Uid: %u", uid) == 1) {
			rc = 0;
			break;
		}
	fclose(f);
	return rc;
}

/* Metadata for the manifest: the task's pid, the image directory, and CRCUDA_CKPT_META's lines
 * (key=value each; crcudactl adds the backend, host, ...). meta[] points into buf. */
static void dump_meta(const struct task *t, const char *rel, char *buf, size_t len, const char **meta,
		      size_t max)
{
	const char *extra = getenv("CRCUDA_CKPT_META");
	size_t n = 0, used = 0;
	const char *uid_kv = NULL;
	unsigned uid;
	int w;

	w = snprintf(buf, len, "crcuda.pid=%d", (int)t->pid);
	meta[n++] = buf;
	used = (size_t)w + 1;
	w = snprintf(buf + used, len - used, "criu.images_dir=%s", rel);
	meta[n++] = buf + used;
	used += (size_t)w + 1;
	/* Whose checkpoint it is (a restore by another user is refused): the task's real uid, set last
	 * so that it wins over CRCUDA_CKPT_META. */
	if (used < len && task_uid(t->pid, &uid) == 0) {
		w = snprintf(buf + used, len - used, "crcuda.uid=%u", uid);
		if ((size_t)w < len - used) {
			uid_kv = buf + used;
			used += (size_t)w + 1;
		}
	}
	if (extra && used < len) {
		char *p = buf + used;

		snprintf(p, len - used, "%s", extra);
		for (char *save = NULL, *kv = strtok_r(p, "\n", &save); kv && n < max - 2;
		     kv = strtok_r(NULL, "\n", &save))
			if (strchr(kv, '='))
				meta[n++] = kv;
	}
	if (uid_kv)
		meta[n++] = uid_kv;
	meta[n] = NULL;
}

/* CRIU writes its images without fsync. A checkpoint the store keeps durable (its packs are fsynced)
 * must not lose the process to a power cut either: every image file and the directory are synced
 * before the commit, unless CRCUDA_STORE_SYNC=0 turns durability off for the packs too. */
static int sync_images(void)
{
	const char *env = crc_plugin_cfg("CRCUDA_STORE_SYNC");

	if (env && !strcmp(env, "0"))
		return 0;
	return crc_sync_dir_files(criu_get_image_dir());
}

/* state=images: checkpoint id, as crcudactl export writes it but without the CRIU images (they are
 * here already), into the image directory as crcuda-PID.crcx, so that the images alone restore the
 * task (podman container checkpoint --export carries the directory). Replaced whole and fsynced. The
 * checkpoint stays in the store: where this fails, a restore finds it there. */
static int export_to_images(struct task *t, uint64_t id)
{
	struct ctl_export_opts o = {.no_images = true, .flip_at = UINT64_MAX, .cut_at = UINT64_MAX};
	struct ctl_export_result res = {0};
	int dir = criu_get_image_dir(), fd, rc, level = crc_log_level();
	char name[sizeof(t->export)], tmp[sizeof(name) + 8], why[1024] = "";
	double t0 = now_s();

	snprintf(name, sizeof(name), "crcuda-%d.crcx", (int)t->pid);
	snprintf(tmp, sizeof(tmp), "%s.tmp", name);
	fd = openat(dir, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0) {
		fail("task %d: cannot write its device state into the image directory (%s): %s", (int)t->pid,
		     tmp, strerror(errno));
		return -1;
	}
	/* The store's own log lines stay out of CRIU's output: the reason comes back in why. */
	crc_log_set_level(CRC_LOG_SILENT);
	rc = ctl_export_fd(P.store, id, fd, &o, &res, why, sizeof(why));
	crc_log_set_level(level);
	if (!rc && fsync(fd))
		snprintf(why, sizeof(why), "fsync: %s", strerror(errno)), rc = -1;
	if (close(fd) && !rc)
		snprintf(why, sizeof(why), "close: %s", strerror(errno)), rc = -1;
	if (!rc && (renameat(dir, tmp, dir, name) || fsync(dir)))
		snprintf(why, sizeof(why), "%s: %s", name, strerror(errno)), rc = -1;
	if (rc) {
		unlinkat(dir, tmp, 0);
		fail("task %d: exporting checkpoint %" PRIu64 " into the image directory: %s (it stays in "
		     "the store %s)",
		     (int)t->pid, id, why, P.store);
		return -1;
	}
	snprintf(t->export, sizeof(t->export), "%s", name);
	pr_info("task %d: checkpoint %" PRIu64 " exported into the image directory as %s (%" PRIu64
		" bytes, %" PRIu64 " chunks) in %.3f s\n",
		(int)t->pid, id, name, res.bytes, res.chunks, now_s() - t0);
	report("exported %d %" PRIu64 " %s bytes=%" PRIu64, (int)t->pid, id, name, res.bytes);
	return 0;
}

static void dump_fini(int ret)
{
	/* crcudactl says whether CRIU kills the tasks after this (plain criu: not known). */
	const char *lr = getenv("CRCUDA_LEAVE_RUNNING"), *dec = getenv("CRCUDA_CKPT_DECISION");
	bool killed = lr && !strcmp(lr, "0");
	uint64_t last = 0;
	int synced;

	/* crcudactl decides through the post-dump script: no "commit" there (a cancel won, or the script
	 * failed) means CRIU lets the tasks run on, so nothing may be committed. */
	if (!ret && dec && *dec && !decision_is("commit")) {
		fail("checkpoint %s: nothing committed, the tasks run on",
		     decision_is("cancel") ? "cancelled" : "not confirmed by the post-dump script");
		ret = -1;
	}
	synced = ret ? 0 : sync_images(); /* CRIU's images on disk before any commit */
	char rel[PATH_MAX], metabuf[8192];
	const char *meta[32];

	for (unsigned i = 0; i < P.ntasks; i++) {
		struct task *t = &P.tasks[i];
		uint64_t id = 0;
		bool committed = false; /* or handed to the background copy to commit */

		if (!ret && t->checkpointed && t->sk_ino) {
			images_rel(rel, sizeof(rel));
			dump_meta(t, rel, metabuf, sizeof(metabuf), meta, sizeof(meta) / sizeof(meta[0]));
			phase("commit", (int)t->pid);
			if (synced) {
				fail("syncing CRIU's images of task %d to disk: %s", (int)t->pid,
				     strerror(-synced));
				crc_ctl_abort(P.ctl, t->pid);
			} else if (crc_ctl_commit(P.ctl, t->pid, rel, meta, &id)) {
				fail("commit of the checkpoint of task %d: %s", (int)t->pid,
				     crc_ctl_error(P.ctl));
				crc_ctl_abort(P.ctl, t->pid);
			} else if (!id) {
				/* Committed by the daemon once its background copy is done. */
				pr_info("task %d: checkpoint committed once drained (images %s)\n",
					(int)t->pid, rel);
				report("pending %d", (int)t->pid);
				committed = true;
			} else {
				pr_info("task %d: checkpoint %" PRIu64 " committed (images %s)\n",
					(int)t->pid, id, rel);
				report("ckpt %d %" PRIu64, (int)t->pid, id);
				t->ckpt = id;
				last = id;
				committed = true;
				/* An image directory in the store (crcudactl checkpoint's) is the store's
				 * already, with the device state beside it: no second copy. */
				if (P.state_images && rel[0] == '/')
					export_to_images(t, id);
				else if (P.state_images)
					pr_info("task %d: the image directory is in the store: no export\n",
						(int)t->pid);
			}
		} else if (t->checkpointed) {
			crc_ctl_abort(P.ctl, t->pid);
			report("aborted %d", (int)t->pid);
		}
		/* Always: after --leave-running or a failure the task runs on; otherwise it is killed
		 * (by CRIU, or by crcudactl once this commit is done) while it is still frozen or stopped,
		 * so the parked threads never get to run (a detached TCP session then ends at once:
		 * released). A commit that failed: crcudactl lets the task run on. */
		bool ends = !ret && killed && committed;

		/* crcudactl (which runs CRIU with --leave-stopped and kills the tasks once the commit is
		 * known) died meanwhile: its kill is done here, or the tasks would stay stopped. */
		if (ends && dec && *dec && getppid() != P.criu_parent) {
			pr_info("task %d: crcudactl is gone: killing the task after the commit\n",
				(int)t->pid);
			crc_signal_tree(t->pid, SIGKILL);
		}
		if (t->quiesced && (ends ? crc_ctl_release(P.ctl, t->pid) : crc_ctl_resume(P.ctl, t->pid)))
			pr_warn("resuming session of task %d: %s\n", (int)t->pid, crc_ctl_error(P.ctl));
		/* The task's pause: quiescing, the device part, and CRIU's (the task is thawed right after
		 * this, when it runs on). */
		if (t->quiesced && t->t_device > 0)
			report("pause %d quiesce=%.6f device=%.6f criu=%.6f", (int)t->pid,
			       t->t_quiesced - t->t_quiesce, t->t_device - t->t_quiesced,
			       now_s() - t->t_device);
		if (t->park_fd >= 0) {
			struct crc_sock_notice n = {.magic = CRC_PROTO_MAGIC, .kind = CRC_NOTICE_RESUME};

			/* The parked client takes its session back (it would on the close alone). */
			if (!ends)
				crc_sock_write_all(t->park_fd, &n, sizeof(n));
			close(t->park_fd);
			t->park_fd = -1;
		}
	}
	if (last)
		image_write(last);
	crc_ctl_close(P.ctl);
	P.ctl = NULL;
}

/* ---- restore ------------------------------------------------------------------------------------------ */

/* The device state the dump kept in the image directory (state=images) into the store: the task is
 * restored from the checkpoint this makes. The import checks the whole stream before it commits. */
static int import_from_images(struct r_task *t)
{
	struct ctl_import_opts o = {0};
	int fd = openat(criu_get_image_dir(), t->export, O_RDONLY | O_CLOEXEC | O_NOFOLLOW), rc,
	    level = crc_log_level();
	uint64_t id = 0, bytes = 0;
	char why[1024] = "";
	double t0 = now_s();

	if (fd < 0) {
		fail("task %d's device state %s is missing from the image directory: %s", (int)t->pid,
		     t->export, strerror(errno));
		return -1;
	}
	crc_log_set_level(CRC_LOG_SILENT);
	rc = ctl_import_fd(P.store, fd, &o, &id, &bytes, why, sizeof(why));
	crc_log_set_level(level);
	close(fd);
	if (rc) {
		fail("importing task %d's device state (%s in the image directory) into the store %s: %s",
		     (int)t->pid, t->export, P.store, why);
		return -1;
	}
	pr_info("task %d: %s imported into %s as checkpoint %" PRIu64 " (%" PRIu64 " bytes) in %.3f s\n",
		(int)t->pid, t->export, P.store, id, bytes, now_s() - t0);
	report("imported %d %" PRIu64 " bytes=%" PRIu64, (int)t->pid, id, bytes);
	t->ckpt = id;
	return 0;
}

static int restore_init(void)
{
	const char *v;
	struct crc_ctl *probe;
	int rc;

	if (!check_and_remove_inventory_plugin(PLUGIN_NAME, strlen(PLUGIN_NAME)))
		return 1; /* not dumped with this plugin */
	v = getenv("CRCUDA_STORE");
	if (v && *v)
		snprintf(P.store, sizeof(P.store), "%s", v);
	rc = image_read();
	if (rc) {
		if (rc > 0)
			fail("the images need the crcuda plugin, but %s is missing from them", PLUGIN_IMG);
		return -1;
	}
	v = getenv("CRCUDA_CKPT_ID");
	if (v && *v) {
		/* A checkpoint of the store: the device state in the images stays unused. */
		for (unsigned i = 0; i < P.r_ntasks; i++)
			P.r_tasks[i].export[0] = 0;
	} else {
		/* The device state comes with the images: imported into the configured store (the
		 * environment's, else plugin.conf's, else the dump's). */
		for (unsigned i = 0; i < P.r_ntasks; i++)
			if (P.r_tasks[i].export[0] && !(getenv("CRCUDA_STORE") && *getenv("CRCUDA_STORE")) &&
			    crc_plugin_cfg_file("CRCUDA_STORE"))
				snprintf(P.store, sizeof(P.store), "%s", crc_plugin_cfg_file("CRCUDA_STORE"));
	}
	if (v && *v) {
		uint64_t want = strtoull(v, NULL, 10);
		bool member = false;

		for (unsigned i = 0; i < P.r_ntasks; i++)
			member |= P.r_tasks[i].ckpt == want;
		/* One client: the checkpoint asked for (the images may serve several, with --leave-running).
		 * A tree's clients each take their own, and the one asked for must be one of them. */
		if (P.r_ntasks <= 1)
			P.r_ckpt = want;
		else if (!member) {
			fail("checkpoint %" PRIu64 " is not one of this dump's %u crcuda clients", want,
			     P.r_ntasks);
			return -1;
		}
	}
	for (unsigned i = 0; i < P.r_ntasks; i++) {
		if (P.r_ntasks == 1 || !P.r_tasks[i].ckpt)
			P.r_tasks[i].ckpt = P.r_ckpt;
		if (!P.r_tasks[i].ckpt) {
			fail("no checkpoint id for task %d: the dump was not committed (set CRCUDA_CKPT_ID, "
			     "or "
			     "use crcudactl restore)",
			     (int)P.r_tasks[i].pid);
			return -1;
		}
	}
	P.r_gpus.gpu = -1;
	v = crc_plugin_cfg("CRCUDA_GPU");
	if (v && *v && strcmp(v, "-1")) {
		char why[256];

		if (crc_ctl_parse_gpus(v, &P.r_gpus, why, sizeof(why))) {
			fail("CRCUDA_GPU: %s", why);
			return -1;
		}
	}
	/* A restore staged ahead on the daemon (a migration's destination stages its pre-copy rounds):
	 * its key goes with the restore of a single client; a tree's clients are restored afresh. */
	v = getenv("CRCUDA_RESTORE_STAGE_KEY");
	if (v && *v && P.r_ntasks == 1)
		P.r_gpus.stage_key = strtoull(v, NULL, 16);
	v = getenv("CRCUDA_REMOTE");
	if (!v || !*v)
		v = crc_plugin_cfg("CRCUDA_DAEMON");
	if (v && *v)
		snprintf(P.daemon, sizeof(P.daemon), "%s", v);
	else if (crc_sock_default_path(P.daemon, sizeof(P.daemon)))
		return -1;
	read_token(P.token, sizeof(P.token));
	/* Fail before CRIU creates any task when no daemon answers. */
	rc = ctl_connect(&probe);
	if (rc) {
		fail("no crcudad answers at %s: %s", P.daemon, crc_strerror(rc));
		return -1;
	}
	crc_ctl_close(probe);
	for (unsigned i = 0; i < P.r_ntasks; i++)
		if (P.r_tasks[i].export[0] && import_from_images(&P.r_tasks[i]))
			return -1;
	pr_info("restoring %u crcuda client(s) of %s on %s (gpu %s)\n", P.r_ntasks, P.store, P.daemon,
		crc_plugin_cfg("CRCUDA_GPU") ? crc_plugin_cfg("CRCUDA_GPU") : "as checkpointed");
	return 0;
}

/* Runs in the restored task (CRIU forked it and is restoring its files). */
static int restore_unix_sk(int id)
{
	struct crc_ctl_restore_opts o;
	const struct r_task *t = NULL;
	struct crc_ctl *c;
	int fd = -1, rc;

	for (unsigned i = 0; P.enabled && i < P.r_ntasks; i++)
		if (P.r_tasks[i].ino == (uint32_t)id)
			t = &P.r_tasks[i];
	if (!t || P.stage != CR_PLUGIN_STAGE__RESTORE)
		return -ENOTSUP;
	o = P.r_gpus;
	o.store_dir = P.store;
	o.ckpt_id = t->ckpt;
	o.pid = getpid();
	o.timeout_ms = P.timeout_ms;
	phase("replay", (int)o.pid);
	rc = ctl_connect(&c);
	if (rc) {
		fail("no crcudad answers at %s: %s", P.daemon, crc_strerror(rc));
		return -1;
	}
	rc = crc_ctl_restore(c, &o, &fd); /* consumes c on success only */
	if (rc) {
		fail("the daemon at %s could not restore checkpoint %" PRIu64 ": %s%s", P.daemon, t->ckpt,
		     crc_ctl_error(c),
		     rc == CRC_EBUSY || rc == CRC_EINVAL
			 ? " (`crcudactl restore` sends such a restore to a second local crcudad)"
			 : "");
		crc_ctl_close(c);
		return -1;
	}
	pr_info("task %d: session replayed on %s, socket %d\n", (int)o.pid, P.daemon, fd);
	report("restored %d %" PRIu64, (int)o.pid, t->ckpt);
	return fd;
}

/* ---- registration ------------------------------------------------------------------------------------- */

static int plugin_init(int stage)
{
	const char *off;
	char why[PATH_MAX + 256];
	int rc = 0;

	memset(&P, 0, sizeof(P));
	P.stage = stage;
	/* A file that says something we do not understand fails CRIU at once: guessing could dump a
	 * client without its device state. */
	if (crc_plugin_conf_load(why, sizeof(why))) {
		fail("%s", why);
		return -1;
	}
	off = crc_plugin_cfg("CRCUDA_PLUGIN");
	P.timeout_ms = env_int("CRCUDA_TIMEOUT_MS", TIMEOUT_MS_DEFAULT);
	/* pre-dump copies no device state (no incremental device dump yet): stay out of it. */
	if ((off && !strcmp(off, "off")) || stage == CR_PLUGIN_STAGE__PRE_DUMP)
		return 0;
	if (stage == CR_PLUGIN_STAGE__DUMP)
		rc = dump_init();
	else if (stage == CR_PLUGIN_STAGE__RESTORE)
		rc = restore_init();
	if (rc < 0)
		return -1;
	P.enabled = rc == 0;
	return 0;
}

static void plugin_fini(int stage, int ret)
{
	if (P.enabled && stage == CR_PLUGIN_STAGE__DUMP)
		dump_fini(ret);
	P.enabled = false;
	crc_plugin_conf_clear();
}

CR_PLUGIN_REGISTER(PLUGIN_NAME, plugin_init, plugin_fini)
CR_PLUGIN_REGISTER_HOOK(CR_PLUGIN_HOOK__PAUSE_DEVICES, pause_devices)
CR_PLUGIN_REGISTER_HOOK(CR_PLUGIN_HOOK__CHECKPOINT_DEVICES, checkpoint_devices)
CR_PLUGIN_REGISTER_HOOK(CR_PLUGIN_HOOK__DUMP_UNIX_SK, dump_unix_sk)
CR_PLUGIN_REGISTER_HOOK(CR_PLUGIN_HOOK__RESTORE_UNIX_SK, restore_unix_sk)
