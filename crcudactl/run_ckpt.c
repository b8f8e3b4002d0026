/* crcudactl run --checkpoint-on SIG[,SIG...] / --every DURATION [--keep N]: crcudactl stays the
 * program's parent and checkpoints it.
 *
 * The program runs as a child, in a process group of its own (a signal to crcudactl's group, from a
 * terminal or `timeout`, reaches it only through crcudactl). A checkpoint is `crcudactl checkpoint`
 * run as a helper process (a process group of its own too: a second signal to ours does not cancel
 * it), its output kept until it ends. A terminating signal (TERM, INT, HUP, QUIT, XCPU, PWR; or
 * SIG:stop) takes the final checkpoint: CRIU stops the program once it is committed, and crcudactl
 * exits 0. Where that checkpoint fails, the signal is passed on to the program, whose status becomes
 * ours. Other named signals (USR1, USR2, ALRM; or SIG:run) and --every take a checkpoint with the
 * program left running. Every other signal in ctl_forward_signals is passed on. After each checkpoint
 * --keep N removes all but the newest N of the program's lineage (CRCUDA_LINEAGE).
 *
 * Once the final checkpoint is committed nothing more is written to a standard error that is a regular
 * file: CRIU's restore checks the sizes of the program's open files, and it shares that file. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "crcudactl.h"
#include "run_ckpt.h"

static const struct {
	const char *name;
	int sig;
	bool stop; /* the default: a final checkpoint */
} sig_table[] = {
    {"HUP", SIGHUP, true},    {"INT", SIGINT, true},	{"QUIT", SIGQUIT, true},
    {"TERM", SIGTERM, true},  {"XCPU", SIGXCPU, true},	{"PWR", SIGPWR, true},
    {"USR1", SIGUSR1, false}, {"USR2", SIGUSR2, false}, {"ALRM", SIGALRM, false},
};

static const char *sig_name(int sig)
{
	for (size_t i = 0; i < sizeof(sig_table) / sizeof(sig_table[0]); i++)
		if (sig_table[i].sig == sig)
			return sig_table[i].name;
	return "?";
}

int run_ckpt_parse_signals(const char *arg, struct run_ckpt *rc)
{
	char *copy = strdup(arg), *save = NULL;
	int ret = 0;

	if (!copy)
		return -1;
	for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		char *mode = strchr(tok, ':');
		const char *name = tok;
		size_t i;

		if (mode)
			*mode++ = 0;
		if (!strncasecmp(name, "SIG", 3))
			name += 3;
		for (i = 0; i < sizeof(sig_table) / sizeof(sig_table[0]); i++)
			if (!strcasecmp(name, sig_table[i].name))
				break;
		if (i == sizeof(sig_table) / sizeof(sig_table[0]) ||
		    (mode && strcmp(mode, "stop") && strcmp(mode, "run"))) {
			ctl_error(
			    "run: --checkpoint-on: '%s%s%s' is not one of SIGHUP, SIGINT, SIGQUIT, SIGTERM, "
			    "SIGXCPU, SIGPWR, SIGUSR1, SIGUSR2, SIGALRM (each optionally :stop or :run)",
			    tok, mode ? ":" : "", mode ? mode : "");
			ret = -1;
			break;
		}
		sigaddset(&rc->on, sig_table[i].sig);
		if (mode ? !strcmp(mode, "stop") : sig_table[i].stop)
			sigaddset(&rc->stop, sig_table[i].sig);
		else
			sigdelset(&rc->stop, sig_table[i].sig);
		rc->any = true;
	}
	free(copy);
	return ret;
}

int run_ckpt_parse_every(const char *arg, unsigned *secs)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(arg, &end, 10);
	if (errno || end == arg || arg[0] == '-')
		goto bad;
	if (!strcmp(end, "m"))
		v *= 60;
	else if (!strcmp(end, "h"))
		v *= 3600;
	else if (*end && strcmp(end, "s"))
		goto bad;
	if (!v || v > 30 * 86400)
		goto bad;
	*secs = (unsigned)v;
	return 0;
bad:
	ctl_error("run: --every wants a duration like 90, 90s, 10m or 2h (up to 30 days), got '%s'", arg);
	return -1;
}

/* The helper: `crcudactl checkpoint [-R] [--store S] PID`, output into a memfd. Its pid, or -1. */
static pid_t start_checkpoint(const struct run_ckpt *rc, pid_t prog, bool stop, int out)
{
	char self[PATH_MAX], pidbuf[32];
	char *argv[10];
	int n = 0;
	ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
	pid_t pid;

	if (len < 0)
		return -1;
	self[len] = 0;
	snprintf(pidbuf, sizeof(pidbuf), "%d", (int)prog);
	argv[n++] = self;
	argv[n++] = "checkpoint";
	if (!stop)
		argv[n++] = "--leave-running";
	if (rc->store) {
		argv[n++] = "--store";
		argv[n++] = (char *)rc->store;
	}
	argv[n++] = pidbuf;
	argv[n] = NULL;
	fflush(NULL);
	pid = fork();
	if (pid == 0) {
		sigset_t none;

		setpgid(0, 0);
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		if (rc->orig_ldlp)
			setenv("LD_LIBRARY_PATH", rc->orig_ldlp, 1);
		else
			unsetenv("LD_LIBRARY_PATH");
		if (dup2(out, 1) < 0 || dup2(out, 2) < 0)
			_exit(CTL_EXIT_FAILURE);
		execv(self, argv);
		fprintf(stderr, "crcudactl: cannot run %s: %s\n", self, strerror(errno));
		_exit(CTL_EXIT_FAILURE);
	}
	if (pid > 0)
		setpgid(pid, pid);
	return pid;
}

/* The helper's output, on stderr. */
static void show_output(int fd)
{
	char buf[4096];
	off_t off = 0;
	ssize_t n;

	while ((n = pread(fd, buf, sizeof(buf), off)) > 0) {
		fwrite(buf, 1, (size_t)n, stderr);
		off += n;
	}
	fflush(stderr);
}

int run_ckpt_supervise(const struct run_ckpt *rc, char **prog)
{
	sigset_t set, old;
	struct stat sb;
	/* After the final checkpoint a regular-file stderr stays as CRIU saw it. */
	bool file_err = fstat(2, &sb) == 0 && S_ISREG(sb.st_mode);
	pid_t child, helper = 0;
	int status = 0, pending_stop = 0, pending_run = 0, helper_stop = 0;
	int out = -1, exit_code = -1;
	bool child_done = false, final_done = false, passthrough = false;
	double next = rc->every ? ctl_now() + rc->every : 0;

	sigset_t ignored;

	sigemptyset(&set);
	sigemptyset(&ignored);
	for (const int *s = ctl_forward_signals; *s; s++) {
		struct sigaction sa;

		sigaddset(&set, *s);
		/* A signal we were started ignoring (a shell's background job: INT, QUIT) is dropped before
		 * any wait sees it: the named ones are taken back, and the program still ignores them. */
		if (sigismember(&rc->on, *s) && sigaction(*s, NULL, &sa) == 0 && sa.sa_handler == SIG_IGN) {
			sigaddset(&ignored, *s);
			signal(*s, SIG_DFL);
		}
	}
	sigaddset(&set, SIGCHLD);
	sigprocmask(SIG_BLOCK, &set, &old);

	fflush(NULL);
	child = fork();
	if (child < 0) {
		ctl_error("run: fork: %s", strerror(errno));
		return CTL_EXIT_FAILURE;
	}
	if (child == 0) {
		int e;

		setpgid(0, 0);
		for (int s = 1; s < NSIG; s++)
			if (sigismember(&ignored, s))
				signal(s, SIG_IGN);
		sigprocmask(SIG_SETMASK, &old, NULL);
		execvp(prog[0], prog);
		e = errno;
		ctl_error("run: cannot run %s: %s", prog[0], strerror(e));
		_exit(e == ENOENT ? 127 : 126);
	}
	setpgid(child, child);

	for (;;) {
		struct timespec ts = {.tv_nsec = 200000000};
		siginfo_t si;
		int sig = sigtimedwait(&set, &si, &ts);
		pid_t r;

		if (sig > 0 && sig != SIGCHLD) {
			if (sigismember(&rc->on, sig) && !passthrough && !child_done) {
				if (sigismember(&rc->stop, sig))
					pending_stop = sig;
				else
					pending_run = sig;
			} else if (!child_done) {
				kill(child, sig);
			}
		}
		while ((r = waitpid(-1, &status, WNOHANG)) > 0) {
			if (r == child) {
				child_done = true;
				exit_code = ctl_exit_status(status);
			} else if (r == helper) {
				helper = 0;
				bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;

				if (helper_stop && ok) {
					final_done = true;
					if (!file_err)
						show_output(out);
				} else {
					show_output(out);
				}
				if (helper_stop && !ok && !child_done) {
					fprintf(
					    stderr,
					    "crcudactl: the checkpoint on SIG%s failed: SIG%s goes on to the "
					    "program (pid %d), whose status will be ours\n",
					    sig_name(helper_stop), sig_name(helper_stop), (int)child);
					kill(child, helper_stop);
					passthrough = true;
				}
				if (ok && rc->keep) {
					int failed = ctl_prune(rc->store_dir, rc->lineage, rc->keep, false,
							       final_done && file_err ? NULL : stderr);

					if (failed && !(final_done && file_err))
						ctl_error("run: --keep %u: %d older checkpoints could not be "
							  "removed",
							  rc->keep, failed);
				}
				close(out);
				out = -1;
				if (rc->every)
					next = ctl_now() + rc->every;
			}
		}
		if (helper)
			continue;
		if (child_done || final_done) {
			/* The final checkpoint's CRIU killed the program: it is reaped before we go. */
			for (int i = 0; !child_done && i < 300; i++) {
				if (waitpid(child, &status, WNOHANG) == child)
					child_done = true;
				else
					usleep(100000);
			}
			sigprocmask(SIG_SETMASK, &old, NULL);
			return final_done ? CTL_EXIT_OK : exit_code;
		}
		if (passthrough)
			continue;
		if (!pending_stop && !pending_run && rc->every && ctl_now() >= next)
			pending_run = -1;
		if (!pending_stop && !pending_run)
			continue;
		out = memfd_create("crcudactl-checkpoint", MFD_CLOEXEC);
		if (out < 0) {
			ctl_error("run: memfd_create: %s", strerror(errno));
			pending_stop = pending_run = 0;
			continue;
		}
		helper_stop = pending_stop;
		if (pending_stop)
			fprintf(stderr,
				"crcudactl: SIG%s: checkpointing pid %d; it stops once the checkpoint is "
				"committed (crcudactl ls shows it)\n",
				sig_name(pending_stop), (int)child);
		pending_stop = pending_run = 0;
		helper = start_checkpoint(rc, child, helper_stop != 0, out);
		if (helper < 0) {
			ctl_error("run: cannot start the checkpoint: %s", strerror(errno));
			close(out);
			out = -1;
			helper = 0;
			if (helper_stop) {
				kill(child, helper_stop);
				passthrough = true;
			}
		}
	}
}
