/* Helpers of checkpoint, restore, ls and inspect: where the store, CRIU, the plugin and the daemon
 * are; running CRIU with a timeout and progress; the plugin's report. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "crcuda/proto.h"
#include "crcuda/sock.h"
#include "crcudactl.h"

double ctl_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int ctl_parse_timeout(const char *cmd, const char *arg, unsigned *out)
{
	char *end;

	*out = (unsigned)strtoul(arg, &end, 10);
	if (*end || !*arg) {
		ctl_error("%s: --timeout wants seconds, got '%s'", cmd, arg);
		return -1;
	}
	return 0;
}

int ctl_store_dir(const char *given, char *out, size_t len)
{
	const char *env = getenv("CRCUDA_STORE"), *home = getenv("HOME");
	int n;

	if (given && *given)
		n = snprintf(out, len, "%s", given);
	else if (env && *env)
		n = snprintf(out, len, "%s", env);
	else if (home)
		n = snprintf(out, len, "%s/.local/share/crcuda/store", home);
	else {
		ctl_error("no store given: use --store DIR or set CRCUDA_STORE (HOME is not set)");
		return -1;
	}
	if (n <= 0 || (size_t)n >= len) {
		ctl_error("store path too long");
		return -1;
	}
	return 0;
}

int ctl_daemon_addr(const char *given, char *out, size_t len)
{
	if (given && *given) {
		if ((size_t)snprintf(out, len, "%s", given) >= len)
			return -1;
	} else if (crc_sock_default_path(out, len)) {
		ctl_error("socket path too long");
		return -1;
	}
	/* A relative socket path is the caller's; the daemon-side checks compare absolute ones. */
	if (out[0] != '/' && strchr(out, '/')) {
		char abs[PATH_MAX];

		if (!realpath(out, abs) || strlen(abs) >= len)
			return -1;
		snprintf(out, len, "%s", abs);
	}
	return 0;
}

int ctl_self_dir(char *buf, size_t len)
{
	char exe[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);

	if (n < 0)
		return -errno;
	exe[n] = 0;
	snprintf(buf, len, "%s", dirname(exe));
	return 0;
}

/* `criu --version` of path: "Version: MAJOR.MINOR[.SUBLEVEL]" on its first line. The version as
 * MAJOR * 10000 + MINOR * 100 + SUBLEVEL, or -1 when it does not run or say so. */
static long criu_version(const char *path)
{
	char buf[256];
	int fds[2], status;
	unsigned maj = 0, min = 0, sub = 0;
	size_t got = 0;
	ssize_t n;
	pid_t pid;

	if (pipe2(fds, O_CLOEXEC))
		return -1;
	fflush(NULL);
	pid = fork();
	if (pid == 0) {
		int null = open("/dev/null", O_RDWR);

		dup2(fds[1], 1);
		if (null >= 0) {
			dup2(null, 0);
			dup2(null, 2);
		}
		execl(path, path, "--version", (char *)NULL);
		_exit(127);
	}
	close(fds[1]);
	if (pid < 0) {
		close(fds[0]);
		return -1;
	}
	while (got < sizeof(buf) - 1 && (n = read(fds[0], buf + got, sizeof(buf) - 1 - got)) > 0)
		got += (size_t)n;
	buf[got] = 0;
	close(fds[0]);
	if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status))
		return -1;
	if (sscanf(buf, "Version: %u.%u.%u", &maj, &min, &sub) < 2)
		return -1;
	return (long)maj * 10000 + (long)min * 100 + (long)sub;
}

#define CRIU_MIN_VERSION 40100 /* 4.1: Debian 12's criu 3.17 fails on recent kernels */

/* The first executable "criu" on $PATH: 0, or -1 where there is none. */
static int criu_on_path(char *out, size_t len)
{
	const char *path = getenv("PATH");
	char dirs[4096], *save = NULL;

	if (!path || !*path || strlen(path) >= sizeof(dirs))
		return -1;
	snprintf(dirs, sizeof(dirs), "%s", path);
	for (char *d = strtok_r(dirs, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
		struct stat st;
		int n = snprintf(out, len, "%s/criu", *d ? d : ".");

		if (n > 0 && (size_t)n < len && !stat(out, &st) && S_ISREG(st.st_mode) && !access(out, X_OK))
			return 0;
	}
	return -1;
}

int ctl_find_criu(char *out, size_t len)
{
	const char *env = getenv("CRCUDA_CRIU");
	char found[PATH_MAX] = "";
	long ver = -1;

	if (env && *env) {
		if (access(env, X_OK)) {
			ctl_error("CRCUDA_CRIU=%s is not an executable", env);
			return -1;
		}
		snprintf(out, len, "%s", env);
		return 0;
	}
	if (!criu_on_path(found, sizeof(found))) {
		ver = criu_version(found);
		if (ver >= CRIU_MIN_VERSION) {
			snprintf(out, len, "%s", found);
			return 0;
		}
	}
	/* The configured one (by default the project's own, scripts/build-criu.sh). */
	if (*CRCUDA_CRIU_DEFAULT && !access(CRCUDA_CRIU_DEFAULT, X_OK)) {
		snprintf(out, len, "%s", CRCUDA_CRIU_DEFAULT);
		return 0;
	}
	if (found[0] && ver >= 0)
		ctl_error(
		    "CRIU: %s on $PATH is version %ld.%ld.%ld, crcuda needs >= 4.1; and no criu at '%s'",
		    found, ver / 10000, ver / 100 % 100, ver % 100, CRCUDA_CRIU_DEFAULT);
	else if (found[0])
		ctl_error("CRIU: %s on $PATH does not say its version; and no criu at '%s'", found,
			  CRCUDA_CRIU_DEFAULT);
	else
		ctl_error("CRIU: no criu on $PATH and none at '%s'", CRCUDA_CRIU_DEFAULT);
	ctl_error("install CRIU >= 4.1 (scripts/build-criu.sh builds one), or set CRCUDA_CRIU to it");
	return -1;
}

int ctl_find_plugin_dir(char *out, size_t len)
{
	static const char *const cands[] = {"../criu-plugin/plugin", CRCUDA_REL_PKGLIBDIR "/criu", NULL};
	const char *env = getenv("CRCUDA_CRIU_PLUGIN_DIR");
	char dir[PATH_MAX], path[PATH_MAX * 2];

	if (env && *env) {
		snprintf(path, sizeof(path), "%s/crcuda_plugin.so", env);
		if (access(path, R_OK) || !realpath(env, out)) {
			ctl_error("CRCUDA_CRIU_PLUGIN_DIR=%s holds no crcuda_plugin.so", env);
			return -1;
		}
		return 0;
	}
	if (ctl_self_dir(dir, sizeof(dir)) == 0)
		for (const char *const *c = cands; *c; c++) {
			snprintf(path, sizeof(path), "%s/%s/crcuda_plugin.so", dir, *c);
			if (access(path, R_OK))
				continue;
			snprintf(path, sizeof(path), "%s/%s", dir, *c);
			if (realpath(path, out) && strlen(out) < len)
				return 0;
		}
	ctl_error("cannot find the CRIU plugin (crcuda_plugin.so) beside crcudactl (../criu-plugin/plugin "
		  "or %s/criu): build it (needs CRIU's headers, scripts/build-criu.sh) or set "
		  "CRCUDA_CRIU_PLUGIN_DIR",
		  CRCUDA_REL_PKGLIBDIR);
	return -1;
}

/* The latest "phase ..." line of the report, for progress. */
static void report_phase(const char *report, char *out, size_t len)
{
	char line[256];
	FILE *f = fopen(report, "r");

	if (!f)
		return;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, "phase ", 6) && len > 0) {
			line[strcspn(line, "\n")] = 0;
			strncpy(out, line + 6, len - 1);
			out[len - 1] = 0;
		}
	fclose(f);
}

static const char *phase_words(const char *phase)
{
	static const struct {
		const char *key, *words;
	} map[] = {
	    {"quiesce", "quiescing the session"},
	    {"device", "copying device memory to the store"},
	    {"criu", "CRIU is writing the process images"},
	    {"commit", "committing"},
	    {"replay", "the daemon is replaying the session"},
	};
	for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++)
		if (!strncmp(phase, map[i].key, strlen(map[i].key)))
			return map[i].words;
	return phase;
}

volatile sig_atomic_t ctl_cancel_requested;

static void on_cancel(int sig)
{
	(void)sig;
	if (ctl_cancel_requested < 100)
		ctl_cancel_requested++;
}

void ctl_cancel_catch(bool on)
{
	struct sigaction sa = {.sa_handler = on ? on_cancel : SIG_DFL};

	/* No SA_RESTART: a wait in progress returns, and the loop looks at the flag. */
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
}

/* The first cancel request while CRIU runs: it takes the decision if CRIU's post-dump script has not
 * yet (whichever symlink comes first stands). */
static void cancel_decide(struct ctl_cancel *cancel, const char *what)
{
	char buf[16];
	ssize_t n;

	if (symlink("cancel", cancel->link) == 0) {
		cancel->state = CTL_CANCELLED;
		return;
	}
	n = readlink(cancel->link, buf, sizeof(buf) - 1);
	buf[n > 0 ? n : 0] = 0;
	if (!strcmp(buf, "cancel")) {
		cancel->state = CTL_CANCELLED;
		return;
	}
	cancel->state = CTL_CANCEL_TOO_LATE;
	fprintf(stderr,
		"crcudactl: %s: too late to cancel: CRIU has written the images and the checkpoint "
		"is being committed\n",
		what);
}

int ctl_run_criu(char *const argv[], char *const env[], const char *out_log, const char *report,
		 const char *what, unsigned timeout_s, bool progress, struct ctl_cancel *cancel)
{
	double start = ctl_now(), last_print = 0, cancel_at = 0;
	char phase[256] = "starting CRIU", shown[256] = "";
	int status = 0;
	pid_t pid;

	fflush(NULL);
	pid = fork();
	if (pid < 0) {
		ctl_error("fork: %s", strerror(errno));
		return -1;
	}
	if (pid == 0) {
		int fd = open(out_log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
		int null = open("/dev/null", O_RDONLY | O_CLOEXEC);

		/* Its own process group: a timeout kills CRIU and whatever it started. */
		setpgid(0, 0);
		if (fd < 0 || null < 0 || dup2(null, 0) < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0)
			_exit(127);
		/* Nothing of ours (the caller's pipes, the store) goes into CRIU or the restored task. */
		for (int i = 3; i < 1024; i++)
			close(i);
		for (char *const *e = env; e && *e; e++)
			putenv(*e);
		signal(SIGPIPE, SIG_DFL);
		execv(argv[0], argv);
		fprintf(stderr, "cannot exec %s: %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	setpgid(pid, pid);
	for (;;) {
		pid_t r = waitpid(pid, &status, WNOHANG);
		double t = ctl_now() - start;

		if (r == pid)
			break;
		if (r < 0 && errno != EINTR) {
			ctl_error("waitpid: %s", strerror(errno));
			return -1;
		}
		if (cancel && ctl_cancel_requested && cancel->state == CTL_CANCEL_NONE) {
			cancel_decide(cancel, what);
			cancel_at = t;
		}
		/* CRIU lets the tasks go at the plugin's next step (or after its images, through the
		 * post-dump script): it is killed only where that takes too long, or on a second signal. */
		if (cancel && cancel->state == CTL_CANCELLED &&
		    (t - cancel_at > CTL_CANCEL_GRACE_S || ctl_cancel_requested > 1)) {
			kill(-pid, SIGKILL);
			waitpid(pid, &status, 0);
			ctl_error("%s: CRIU was killed (%s)", what,
				  ctl_cancel_requested > 1 ? "a second signal"
							   : "it did not stop within " CTL_STR(
								 CTL_CANCEL_GRACE_S) " s of the cancel");
			return -1;
		}
		if (timeout_s && t > timeout_s) {
			kill(-pid, SIGKILL);
			waitpid(pid, &status, 0);
			ctl_error("%s: CRIU did not finish in %u s: killed (see %s)", what, timeout_s,
				  out_log);
			return -1;
		}
		if (progress && t >= 2 && t - last_print >= 1) {
			report_phase(report, phase, sizeof(phase));
			/* A line per new phase, and every 5 s within a long one. */
			if (strcmp(phase, shown) || t - last_print >= 5) {
				fprintf(stderr, "crcudactl: %s: %s (%.0f s)\n", what, phase_words(phase), t);
				snprintf(shown, sizeof(shown), "%s", phase);
				last_print = t;
			}
		}
		usleep(50000);
	}
	if (WIFEXITED(status))
		return WEXITSTATUS(status);
	return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

int ctl_report_get(const char *report, const char *key, int nth, char *out, size_t len)
{
	char line[2048];
	size_t kl = strlen(key);
	FILE *f = fopen(report, "r");
	int seen = 0;

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		if (strncmp(line, key, kl) || line[kl] != ' ')
			continue;
		if (seen++ < nth)
			continue;
		line[strcspn(line, "\n")] = 0;
		snprintf(out, len, "%s", line + kl + 1);
		fclose(f);
		return 0;
	}
	fclose(f);
	return -1;
}

void ctl_show_criu_errors(const char *log, int max)
{
	char line[1024];
	FILE *f = fopen(log, "r");
	int n = 0;

	if (!f)
		return;
	while (fgets(line, sizeof(line), f) && n < max)
		if (strstr(line, "Error (")) {
			fprintf(stderr, "  | %s", line);
			n++;
		}
	fclose(f);
}

const char *ctl_network_lock(void)
{
	static const char *const dirs[] = {"/usr/sbin", "/sbin", "/usr/bin", "/bin"};
	const char *e = getenv("CRCUDA_NETWORK_LOCK"), *path = getenv("PATH");
	char p[PATH_MAX];

	if (e && *e)
		return e;
	for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
		snprintf(p, sizeof(p), "%s/iptables", dirs[i]);
		if (!access(p, X_OK))
			return "iptables";
	}
	while (path && *path) {
		size_t n = strcspn(path, ":");

		snprintf(p, sizeof(p), "%.*s/iptables", (int)n, path);
		if (n && !access(p, X_OK))
			return "iptables";
		path += n + (path[n] == ':');
	}
	return "skip";
}

bool ctl_file_line_has(const char *path, const char *what, const char *and_then)
{
	char line[1024];
	FILE *f = fopen(path, "r");
	bool found = false;

	while (f && !found && fgets(line, sizeof(line), f)) {
		const char *at = strstr(line, what);

		found = at && (!and_then || strstr(at + strlen(what), and_then));
	}
	if (f)
		fclose(f);
	return found;
}

bool ctl_file_contains(const char *path, const char *what)
{
	return ctl_file_line_has(path, what, NULL);
}

bool ctl_criu_storage_error(const char *log, char *out, size_t len)
{
	/* What a full, failing or read-only disk makes CRIU's writes fail with. */
	static const int errs[] = {ENOSPC, EDQUOT, EIO, EROFS, EFBIG};
	char line[1024];
	FILE *f = fopen(log, "r");
	bool found = false;

	if (!f)
		return false;
	while (!found && fgets(line, sizeof(line), f)) {
		if (!strstr(line, "Error ("))
			continue;
		for (size_t i = 0; !found && i < sizeof(errs) / sizeof(errs[0]); i++)
			if (strstr(line, strerror(errs[i]))) {
				snprintf(out, len, "%s", strerror(errs[i]));
				found = true;
			}
	}
	fclose(f);
	return found;
}

const char *ctl_token_file(const char *given)
{
	const char *file = getenv("CRCUDA_TOKEN_FILE");

	if (given)
		return given;
	return getenv("CRCUDA_TOKEN") || !file || !*file ? NULL : file;
}

int ctl_read_token(const char *file, char *out, size_t len)
{
	const char *tok = getenv("CRCUDA_TOKEN");
	ssize_t n = 0;

	if (!file && tok) {
		n = (ssize_t)strlen(tok);
		if ((size_t)n >= len)
			return -1;
		memcpy(out, tok, (size_t)n);
	} else if (file) {
		int fd = open(file, O_RDONLY | O_CLOEXEC);

		if (fd < 0) {
			ctl_error("cannot open token file %s: %s", file, strerror(errno));
			return -1;
		}
		n = read(fd, out, len - 1);
		close(fd);
		if (n < 0)
			return -1;
		while (n && (out[n - 1] == '\n' || out[n - 1] == '\r'))
			n--;
	}
	out[n] = 0;
	return (int)n;
}

const int ctl_forward_signals[] = {SIGHUP,  SIGINT,   SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2,
				   SIGALRM, SIGWINCH, SIGCONT, SIGXCPU, SIGPWR,	 0};

int ctl_exit_status(int status)
{
	if (WIFEXITED(status))
		return WEXITSTATUS(status);
	if (WIFSIGNALED(status))
		return 128 + WTERMSIG(status);
	return CTL_EXIT_FAILURE;
}

void ctl_pid_comm(pid_t pid, char *comm, size_t size)
{
	char path[64];
	FILE *f;

	comm[0] = 0;
	snprintf(path, sizeof(path), "/proc/%d/comm", (int)pid);
	if ((f = fopen(path, "r"))) {
		if (fgets(comm, (int)size, f))
			comm[strcspn(comm, "\n")] = 0;
		fclose(f);
	}
}

bool ctl_pid_gone(pid_t pid)
{
	char path[64], line[1024], state = 0;
	unsigned long flags = 0;
	const char *end;
	FILE *f;

	if (kill(pid, 0) && errno == ESRCH)
		return true;
	/* /proc/PID/stat: "pid (comm) state ppid pgrp session tty tpgid flags ...", comm may hold
	 * anything, so fields count from the last ')'. A zombie, or a process that is exiting (killed by
	 * CRIU at the end of a dump, its memory still being torn down: PF_EXITING), has ended. */
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = fopen(path, "r");
	if (f && fgets(line, sizeof(line), f) && (end = strrchr(line, ')')))
		sscanf(end + 1, " %c %*d %*d %*d %*d %*d %lu", &state, &flags);
	if (f)
		fclose(f);
	return state == 'Z' || state == 'X' || (flags & 0x4 /* PF_EXITING */);
}

/* Not our child: its end without its status (a zombie counts as ended). */
static int wait_stranger(pid_t pid, const char *what)
{
	ctl_error("%s: pid %d is not this command's child: waiting for its end, whose status cannot be known",
		  what, (int)pid);
	while (!ctl_pid_gone(pid))
		usleep(200000);
	ctl_error("%s: pid %d ended (exit status unknown)", what, (int)pid);
	return CTL_EXIT_FAILURE;
}

int ctl_wait_program(pid_t pid, const char *what)
{
	sigset_t set, old;
	int status = 0;

	sigemptyset(&set);
	for (const int *s = ctl_forward_signals; *s; s++)
		sigaddset(&set, *s);
	sigaddset(&set, SIGCHLD);
	sigprocmask(SIG_BLOCK, &set, &old);
	for (;;) {
		struct timespec ts = {.tv_nsec = 200000000};
		pid_t r = waitpid(pid, &status, WNOHANG);
		int sig;

		if (r == pid)
			break;
		if (r < 0 && errno != EINTR) {
			sigprocmask(SIG_SETMASK, &old, NULL);
			return wait_stranger(pid, what);
		}
		sig = sigtimedwait(&set, NULL, &ts);
		if (sig > 0 && sig != SIGCHLD)
			kill(pid, sig);
	}
	sigprocmask(SIG_SETMASK, &old, NULL);
	return ctl_exit_status(status);
}

/* Sends sig to the process tree rooted at pid (stopped, so that it cannot change meanwhile): each
 * process after the children of each of its threads, so that none is reparented before it is found. */
static void signal_tree(pid_t pid, int sig, int depth)
{
	char path[64], child[32];
	struct dirent *de;
	DIR *d;

	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	if (depth <= 64 && (d = opendir(path))) {
		while ((de = readdir(d))) {
			char children[64 + sizeof(de->d_name) + 16];
			FILE *f;

			if (de->d_name[0] == '.')
				continue;
			snprintf(children, sizeof(children), "%s/%s/children", path, de->d_name);
			if (!(f = fopen(children, "r")))
				continue;
			while (fscanf(f, "%31s", child) == 1)
				signal_tree((pid_t)atoi(child), sig, depth + 1);
			fclose(f);
		}
		closedir(d);
	}
	kill(pid, sig);
}

void ctl_continue_tree(pid_t pid)
{
	signal_tree(pid, SIGCONT, 0);
}

void ctl_kill_tree(pid_t pid)
{
	signal_tree(pid, SIGKILL, 0);
}

/* ---- progress in bytes: what the session's worker publishes (crc_ctl_progress) ---------------------- */
static struct {
	pthread_t thread;
	bool running, stop, on, seen;
	const char *what;
	char daemon[PATH_MAX], token[CRC_TOKEN_MAX + 1];
	pid_t pid;
	struct crc_ctl *c;
	struct crc_ctl_progress first, last;
	pthread_mutex_t lock;
	pthread_cond_t cond;
} prog = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};

void ctl_progress_line(const char *what, const struct crc_ctl_progress *p, char *out, size_t len)
{
	/* Sizes in MiB below a GiB of total, else GiB; the rate in GB/s (10^9 bytes), as disks and links,
	 * with two decimals below 1 GB/s (a slow disk's 40 MB/s is not "0.0"). */
	double unit = p->total >= (1ull << 30) ? 1073741824.0 : 1048576.0;
	const char *u = p->total >= (1ull << 30) ? "GiB" : "MiB";
	double pct = p->total ? 100.0 * (double)p->done / (double)p->total : 100.0;
	double rate = p->seconds > 0 ? (double)p->done / p->seconds / 1e9 : 0.0;

	snprintf(out, len, "%s: %.1f %s of %.1f %s (%.0f%%), %.*f GB/s", what, (double)p->done / unit, u,
		 (double)p->total / unit, u, pct, rate < 1 ? 2 : 1, rate);
}

/* One sample: true when it is of this command's checkpoint or restore (not the one before it). */
static bool progress_sample(struct crc_ctl_progress *p)
{
	if (!prog.c && crc_ctl_open(prog.daemon, prog.token[0] ? prog.token : NULL, &prog.c)) {
		prog.c = NULL;
		return false;
	}
	if (crc_ctl_progress(prog.c, prog.pid, p) || p->op == CRC_CTL_PROGRESS_NONE)
		return false;
	if (!prog.seen && !memcmp(p, &prog.first, sizeof(*p)))
		return false;
	prog.seen = true;
	prog.last = *p;
	return true;
}

static void *progress_main(void *arg)
{
	double last_print = ctl_now();
	struct crc_ctl_progress p;
	char line[256];

	(void)arg;
	pthread_mutex_lock(&prog.lock);
	while (!prog.stop) {
		struct timespec ts;

		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 200 * 1000 * 1000;
		if (ts.tv_nsec >= 1000000000) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000;
		}
		pthread_cond_timedwait(&prog.cond, &prog.lock, &ts);
		if (prog.stop)
			break;
		pthread_mutex_unlock(&prog.lock);
		/* A line a second while bytes move. */
		if (progress_sample(&p) && prog.on && ctl_now() - last_print >= 1 && p.done < p.total) {
			ctl_progress_line(prog.what, &p, line, sizeof(line));
			fprintf(stderr, "crcudactl: %s\n", line);
			last_print = ctl_now();
		}
		pthread_mutex_lock(&prog.lock);
	}
	pthread_mutex_unlock(&prog.lock);
	return NULL;
}

void ctl_progress_begin(const char *what, const char *daemon, const char *token, pid_t pid, bool on)
{
	if (prog.running || !daemon || !on || pid <= 0)
		return;
	prog.what = what;
	prog.pid = pid;
	prog.on = on;
	prog.stop = prog.seen = false;
	prog.c = NULL;
	snprintf(prog.daemon, sizeof(prog.daemon), "%s", daemon);
	snprintf(prog.token, sizeof(prog.token), "%s", token ? token : "");
	/* What the worker shows before this command's work began (a previous checkpoint's end). */
	memset(&prog.first, 0, sizeof(prog.first));
	memset(&prog.last, 0, sizeof(prog.last));
	if (crc_ctl_open(prog.daemon, token, &prog.c) == 0 && crc_ctl_progress(prog.c, pid, &prog.first))
		memset(&prog.first, 0, sizeof(prog.first));
	prog.running = pthread_create(&prog.thread, NULL, progress_main, NULL) == 0;
	if (!prog.running) {
		crc_ctl_close(prog.c);
		prog.c = NULL;
	}
}

bool ctl_progress_end(struct crc_ctl_progress *out)
{
	struct crc_ctl_progress p;
	char line[256];

	if (!prog.running)
		return false;
	pthread_mutex_lock(&prog.lock);
	prog.stop = true;
	pthread_cond_broadcast(&prog.cond);
	pthread_mutex_unlock(&prog.lock);
	pthread_join(prog.thread, NULL);
	prog.running = false;
	/* The last word: the worker keeps its figures until its next checkpoint or restore. */
	progress_sample(&p);
	crc_ctl_close(prog.c);
	prog.c = NULL;
	if (!prog.seen)
		return false;
	if (prog.on) {
		ctl_progress_line(prog.what, &prog.last, line, sizeof(line));
		fprintf(stderr, "crcudactl: %s\n", line);
	}
	if (out)
		*out = prog.last;
	return true;
}
