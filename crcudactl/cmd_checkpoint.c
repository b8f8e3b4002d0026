/* crcudactl checkpoint PID [--leave-running] [--store DIR] [--daemon ADDR | --remote HOST:PORT]:
 * checkpoints a program running under crcuda with CRIU and the crcuda plugin.
 *
 * The program's daemon: --daemon or --remote when given; else the program's own CRCUDA_REMOTE (from
 * /proc/PID/environ: its session is TCP to a remote crcudad; the token is --token-file, else
 * $CRCUDA_TOKEN / $CRCUDA_TOKEN_FILE here, else the program's own); else $CRCUDA_SOCKET or the default
 * socket. A remote daemon writes the device memory into the store itself, at the same path.
 *
 * The plugin does the device side inside `criu dump` (quiesce at PAUSE_DEVICES, device memory into
 * the store at CHECKPOINT_DEVICES, commit once CRIU's images are written); this command finds the
 * pieces, makes the image directory <store>/criu/<name> (locked while in use, so that gc leaves it),
 * runs CRIU, shows progress and reports. On failure nothing is committed, the session is resumed and
 * the directory removed: the previous checkpoints are untouched.
 *
 * SIGINT or SIGTERM while CRIU runs cancels the checkpoint: CRIU's post-dump action script (crcudactl
 * itself, ctl_action_script) and this
 * command race for one symlink in the image directory (CRCUDA_CKPT_DECISION, "commit" or "cancel");
 * on "cancel" the plugin fails the dump at its next step, or CRIU's post-dump script fails after the
 * images, so CRIU lets the process go and nothing is committed (CRIU is killed where it does not stop
 * within CTL_CANCEL_GRACE_S). A cancel after "commit" is too late and says so.
 *
 * The program's CRCUDA_LINEAGE (set by `crcudactl run`, kept by a restored process) goes into the
 * manifest as crcuda.lineage: the checkpoints of one program, whatever its restores, for --keep and
 * `store prune`. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "crc_store.h"
#include "crcuda/ctl.h"
#include "crcuda/durable.h"
#include "crcuda/proctree.h"
#include "crcuda/errno.h"
#include "crcuda/proto.h"
#include "crcudactl.h"

#define CKPT_TIMEOUT_DEFAULT 600
#define CKPT_TREE_MAX	     64 /* crcuda clients in one process tree (the plugin's limit) */
#define CKPT_JSON_VERSION    1

static void ckpt_usage(FILE *f)
{
	fprintf(
	    f,
	    "Usage: crcudactl checkpoint [OPTIONS] PID\n"
	    "\n"
	    "Checkpoints PID, a program running under `crcudactl run`: its session is quiesced and its\n"
	    "device memory and globals go into the store, the process is dumped by CRIU (images in\n"
	    "<store>/criu/<name>), and one store transaction commits both. The process is killed\n"
	    "once that is committed, unless --leave-running (a failed checkpoint lets it run on).\n"
	    "Needs root (CRIU).\n"
	    "\n"
	    "Options:\n"
	    "  -R, --leave-running  let the process run on after the checkpoint: what changed is\n"
	    "                       snapshotted in free device memory and copied to the store while\n"
	    "                       it runs on (the command returns once that is committed)\n"
	    "      --no-background  with -R: copy device memory before the process runs on\n"
	    "      --tcp-established  dump established TCP connections (CRIU's --tcp-established; the\n"
	    "                       restore then restores them too): a process tree whose members talk\n"
	    "                       over loopback TCP (PyTorch's TCPStore, NCCL's bootstrap)\n"
	    "      --leave-stopped  leave the process stopped (SIGSTOP) after the checkpoint, its\n"
	    "                       session kept: SIGCONT lets it run on, SIGKILL ends it (what\n"
	    "                       `crcudactl migrate` does for its last round)\n"
	    "  -s, --store DIR      the store (default $CRCUDA_STORE, else ~/.local/share/crcuda/store)\n"
	    "      --daemon ADDR    the program's crcudad (default: the program's CRCUDA_REMOTE, else\n"
	    "                       $CRCUDA_SOCKET, else /tmp/crcuda-UID/crcudad.sock)\n"
	    "      --remote HOST:PORT the program's remote crcudad (its session is TCP); it writes the\n"
	    "                       device memory into the store itself: it must see the same path\n"
	    "      --token-file FILE  its token (else $CRCUDA_TOKEN or $CRCUDA_TOKEN_FILE, else the\n"
	    "                       program's own)\n"
	    "      --insecure         plaintext TCP to a daemon started with --insecure (else TLS)\n"
	    "      --tls-cert F, --tls-key F, --tls-ca F\n"
	    "                         TLS with certificates (a daemon with --tls-*), not the token, as key\n"
	    "      --timeout SEC    give up (and resume the program) after SEC seconds (default %d)\n"
	    "      --progress       progress on stderr (bytes of device memory copied, percent, GB/s);\n"
	    "                       the default when stderr is a terminal\n"
	    "      --json           machine-readable result on stdout\n"
	    "  -h, --help           this help\n"
	    "\n"
	    "SIGINT or SIGTERM while CRIU runs cancels the checkpoint: nothing is committed, the image\n"
	    "directory goes, and the process runs on (a second signal kills CRIU at once).\n"
	    "\n"
	    "Environment: CRCUDA_CRIU (criu binary; default: criu on $PATH if >= 4.1, else the\n"
	    "configured one), CRCUDA_CRIU_PLUGIN_DIR (crcuda_plugin.so; default: beside crcudactl).\n"
	    "Exit status: 0 checkpointed, 1 failed or cancelled (previous checkpoints untouched),\n"
	    "2 usage error.\n",
	    CKPT_TIMEOUT_DEFAULT);
}

/* Inode of the unix socket listening at path (from /proc/net/unix), or 0. */
static unsigned long listen_inode(const char *path)
{
	char line[PATH_MAX + 128], p[PATH_MAX];
	unsigned long ino, flags, found = 0;
	FILE *f = fopen("/proc/net/unix", "r");

	if (!f)
		return 0;
	while (!found && fgets(line, sizeof(line), f)) {
		p[0] = 0;
		/* Num RefCount Protocol Flags Type St Inode Path; flags 0x10000 = listening */
		if (sscanf(line, "%*s %*s %*s %lx %*s %*s %lu %4095s", &flags, &ino, p) == 3 &&
		    (flags & 0x10000) && !strcmp(p, path))
			found = ino;
	}
	fclose(f);
	return found;
}

/* The daemon's backend ("sim" or "cuda") from its command line, found through its listening socket.
 * Recorded in the manifest, so that a restore can start a daemon of the same kind. */
static void daemon_backend(const char *sock, char *out, size_t len)
{
	unsigned long ino = listen_inode(sock);
	char want[64], path[PATH_MAX], link[64], cmd[4096];
	DIR *proc;
	struct dirent *de;

	snprintf(out, len, "unknown");
	if (!ino || !(proc = opendir("/proc")))
		return;
	snprintf(want, sizeof(want), "socket:[%lu]", ino);
	while ((de = readdir(proc))) {
		DIR *fds;
		struct dirent *fe;
		bool hit = false;

		if (de->d_name[0] < '1' || de->d_name[0] > '9')
			continue;
		snprintf(path, sizeof(path), "/proc/%s/fd", de->d_name);
		if (!(fds = opendir(path)))
			continue;
		while (!hit && (fe = readdir(fds))) {
			char fp[PATH_MAX + 300];
			ssize_t n;

			snprintf(fp, sizeof(fp), "%s/%s", path, fe->d_name);
			n = readlink(fp, link, sizeof(link) - 1);
			hit = n > 0 && (link[n] = 0, !strcmp(link, want));
		}
		closedir(fds);
		if (!hit)
			continue;
		snprintf(path, sizeof(path), "/proc/%s/cmdline", de->d_name);
		int fd = open(path, O_RDONLY | O_CLOEXEC);
		ssize_t n = fd >= 0 ? read(fd, cmd, sizeof(cmd) - 1) : -1;

		if (fd >= 0)
			close(fd);
		for (ssize_t i = 0; n > 0 && i < n; i += (ssize_t)strlen(cmd + i) + 1) {
			cmd[n] = 0;
			if (!strcmp(cmd + i, "--backend") && i + 10 < n) {
				snprintf(out, len, "%s", cmd + i + 10);
				break;
			}
		}
		break;
	}
	closedir(proc);
}

/* The sessions of the daemon at addr (token: a TCP one's), into *list (to free). */
static int daemon_sessions(const char *addr, const char *token, struct crc_ctl_session **list, unsigned *n)
{
	struct crc_ctl *c = NULL;
	int rc = crc_ctl_open(addr, token, &c);

	*list = NULL;
	*n = 0;
	if (!rc)
		rc = crc_ctl_sessions(c, list, n);
	crc_ctl_close(c);
	return rc;
}

/* The session of pid on the remote daemon at addr (no daemons beside it there). */
static int find_remote(const char *addr, const char *token, pid_t pid, struct crc_ctl_session *out)
{
	struct crc_ctl_session *list = NULL;
	unsigned n = 0;
	int rc = daemon_sessions(addr, token, &list, &n);

	for (unsigned i = 0; !rc && i < n; i++)
		if (list[i].pid == pid) {
			*out = list[i];
			free(list);
			return 0;
		}
	free(list);
	return rc ? rc : CRC_ENOTFOUND;
}

/* pid's environment as it started (/proc/PID/environ) into buf, NUL-terminated: its length, or -1. */
static ssize_t task_environ(pid_t pid, char *buf, size_t len)
{
	char path[64];
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/environ", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	n = fd >= 0 ? read(fd, buf, len - 1) : -1;
	if (fd >= 0)
		close(fd);
	buf[n > 0 ? n : 0] = 0;
	return n;
}

/* The daemon of pid when none is named: its own CRCUDA_REMOTE, with the token (--token-file, ours, else
 * its own). 1 when it has none (a unix client), 0, or -1 with the reason printed. */
static int task_remote(pid_t pid, const char *token_file, char *addr, size_t len, char *token, size_t tlen)
{
	char buf[65536], *remote = NULL, *tok = NULL, *tokfile = NULL;
	ssize_t n = task_environ(pid, buf, sizeof(buf));
	bool own_certs;

	own_certs = getenv("CRCUDA_TLS_CA") || getenv("CRCUDA_TLS_CERT") || getenv("CRCUDA_TLS_KEY");
	for (char *p = buf; n > 0 && p < buf + n; p += strlen(p) + 1) {
		if (!strncmp(p, "CRCUDA_REMOTE=", 14))
			remote = p + 14;
		else if (!strncmp(p, "CRCUDA_TOKEN=", 13))
			tok = p + 13;
		else if (!strncmp(p, "CRCUDA_TOKEN_FILE=", 18))
			tokfile = p + 18;
		else if (!strncmp(p, "CRCUDA_INSECURE=", 16) && !getenv("CRCUDA_INSECURE"))
			setenv("CRCUDA_INSECURE", p + 16, 1); /* plaintext to the daemon, as the program is */
		else if (!strncmp(p, "CRCUDA_TLS_", 11) && strchr(p, '=')) {
			/* its certificates, unless given here */
			char name[32];

			snprintf(name, sizeof(name), "%.*s", (int)(strchr(p, '=') - p), p);
			if (!own_certs)
				setenv(name, strchr(p, '=') + 1, 0);
		}
	}
	if (!remote || !*remote)
		return 1;
	snprintf(addr, len, "%s", remote);
	token_file = ctl_token_file(token_file);
	if (!token_file && !getenv("CRCUDA_TOKEN")) {
		if (tok) {
			snprintf(token, tlen, "%s", tok);
			return 0;
		}
		token_file = tokfile;
	}
	return ctl_read_token(token_file, token, tlen) < 0 ? -1 : 0;
}

/* The program's CRCUDA_LINEAGE (from /proc/PID/environ) into out ("" when it has none), made safe for
 * a metadata line. */
static void task_lineage(pid_t pid, char *out, size_t len)
{
	char buf[65536];
	ssize_t n = task_environ(pid, buf, sizeof(buf));

	out[0] = 0;
	if (n <= 0)
		return;
	for (char *p = buf; p < buf + n; p += strlen(p) + 1)
		if (!strncmp(p, CTL_LINEAGE_ENV "=", strlen(CTL_LINEAGE_ENV) + 1))
			snprintf(out, len, "%s", p + strlen(CTL_LINEAGE_ENV) + 1);
	for (char *c = out; *c; c++)
		if (*c == '\n' || *c == '\r')
			*c = '_';
}

/* CRIU's action script (crcudactl itself, main() sees CRTOOLS_SCRIPT_ACTION): at post-dump it takes
 * the decision for a commit, unless a cancel took it first (CRIU then lets the tasks run on). First it
 * makes CRIU's images durable (unless CRCUDA_STORE_SYNC=0): the plugin commits after this, when CRIU
 * kills the tasks whatever happens, so a full or failing disk must fail the dump here, where CRIU
 * still lets them run on. */
int ctl_action_script(void)
{
	const char *action = getenv("CRTOOLS_SCRIPT_ACTION"), *link = getenv("CRCUDA_CKPT_DECISION"),
		   *sync = getenv("CRCUDA_STORE_SYNC");

	if (!action || strcmp(action, "post-dump"))
		return 0;
	/* The tree is still frozen: what it maps of /dev/shm is as the checkpoint has it. */
	const char *root = getenv("CRCUDA_CKPT_ROOT");
	if (link && *link && root && atoi(root) > 0) {
		char dir[PATH_MAX];
		int rc;

		snprintf(dir, sizeof(dir), "%s", link);
		if (strrchr(dir, '/'))
			*strrchr(dir, '/') = 0;
		rc = ctl_shm_save((pid_t)atoi(root), dir);
		/* The link remaps the dump made (CRIU's images are complete): they go with the checkpoint. */
		const char *what = "saving the files the tree maps in /dev/shm";
		if (!rc && (rc = ctl_link_remaps_record(dir)) == -EBADMSG) {
			/* Images we do not read: the checkpoint is good, its remaps outlive it. */
			fprintf(stderr,
				"crcudactl: post-dump: CRIU's images in %s do not read as expected: "
				"its link remaps will stay after the checkpoint is removed\n",
				dir);
			rc = 0;
		} else if (rc) {
			what = "listing CRIU's link remaps";
		}
		if (rc) {
			const char *report = getenv("CRCUDA_PLUGIN_REPORT");
			FILE *f = report && *report ? fopen(report, "ae") : NULL;

			fprintf(stderr, "crcudactl: post-dump: %s: %s\n", what, strerror(-rc));
			if (f) {
				fprintf(f, "error %s: %s\n", what, strerror(-rc));
				fclose(f);
			}
			return 1;
		}
	}
	if (link && *link && !(sync && !strcmp(sync, "0"))) {
		char dir[PATH_MAX];
		int fd, rc;

		snprintf(dir, sizeof(dir), "%s", link);
		if (strrchr(dir, '/'))
			*strrchr(dir, '/') = 0;
		fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		rc = fd < 0 ? -errno : crc_sync_dir_files(fd);
		if (fd >= 0)
			close(fd);
		if (rc) {
			const char *report = getenv("CRCUDA_PLUGIN_REPORT");
			FILE *f = report && *report ? fopen(report, "ae") : NULL;

			fprintf(stderr, "crcudactl: post-dump: syncing CRIU's images in %s to disk: %s\n",
				dir, strerror(-rc));
			/* The reason crcudactl shows (the plugin's own line comes after it). */
			if (f) {
				fprintf(f, "error syncing CRIU's images to disk: %s\n", strerror(-rc));
				fclose(f);
			}
			return 1;
		}
	}
	if (link && *link && symlink("commit", link)) {
		fprintf(stderr, "crcudactl: post-dump: %s: %s (the checkpoint was cancelled)\n", link,
			strerror(errno));
		return 1;
	}
	return 0;
}

/* The session of pid on the daemon at daemon. 0, or -1 with the reason printed. */
static int find_session(const char *daemon, const char *token, pid_t pid, int wait_ms,
			struct crc_ctl_session *out)
{
	int rc = token ? find_remote(daemon, token, pid, out) : crc_ctl_find_pid(daemon, pid, wait_ms, out);

	if (rc == CRC_ENOTFOUND)
		ctl_error("checkpoint: process %d has no session on crcudad at %s (not run under `crcudactl "
			  "run`, another daemon (--daemon), or no CUDA call yet)",
			  (int)pid, daemon);
	else if (rc)
		ctl_error("checkpoint: cannot reach crcudad at %s: %s%s", daemon, crc_strerror(rc),
			  rc == CRC_ENOTSUP ? " (the daemon's control interface is not built yet)" : "");
	return rc ? -1 : 0;
}

/* The crcuda clients of root's process tree (root and its descendants) with a session on the daemon:
 * their pids into out (at most max), their number into *n. */
static int tree_clients(const char *daemon, const char *token, pid_t root, pid_t *out, unsigned max,
			unsigned *n)
{
	struct crc_ctl_session *list = NULL;
	unsigned count = 0;
	pid_t *tree = NULL;
	size_t ntree = 0;
	int rc = daemon_sessions(daemon, token, &list, &count);

	*n = 0;
	if (!rc && count)
		ntree = crc_proc_tree(root, &tree);
	for (unsigned i = 0; i < count; i++)
		for (size_t k = 0; k < ntree; k++)
			if (tree[k] == list[i].pid && *n < max)
				out[(*n)++] = list[i].pid;
	free(tree);
	free(list);
	return rc;
}

/* Every process of root's tree, root first, as "p1,p2,..." into out (a restore waits for each pid
 * to be free: CRIU restores them all with their own pids). */
static void tree_all_pids(pid_t root, char *out, size_t len)
{
	pid_t *tree = NULL;
	size_t ntree = crc_proc_tree(root, &tree), n = (size_t)snprintf(out, len, "%d", (int)root);

	for (size_t k = 1; k < ntree && n < len; k++)
		n += (size_t)snprintf(out + n, len - n, ",%d", (int)tree[k]);
	free(tree);
	if (n >= len) /* too many to name: the restore waits for the root only */
		snprintf(out, len, "%d", (int)root);
}

/* The process tree being checkpointed (tree mode: the clients below a parent), for undo. */
static pid_t tree_pids[CKPT_TREE_MAX];
static unsigned tree_n;

/* After a failure: nothing may stay half-done in the daemon (the plugin's fini does the same, but
 * CRIU may have died before it ran). Errors are expected (nothing to undo) and ignored. */
static void undo(const char *daemon, const char *token, pid_t pid)
{
	struct crc_ctl *c = NULL;

	if (crc_ctl_open(daemon, token, &c) == 0) {
		crc_ctl_abort(c, pid);
		crc_ctl_resume(c, pid);
		for (unsigned i = 0; i < tree_n; i++) {
			crc_ctl_abort(c, tree_pids[i]);
			crc_ctl_resume(c, tree_pids[i]);
		}
		crc_ctl_close(c);
	}
}

/* Collective launches (NCCL's): each client of the tree is held, then capped at the largest count,
 * so that all stop after the same collective and every kernel one of them waits for is launched
 * (crcuda/ctl.h, crc_ctl_collective). 0, or -1 with the error said (and the caps released). A tree
 * of TCP clients is left as it is (their collectives are not counted). */
static int align_collectives(const char *daemon, const char *token, unsigned ttl_ms, bool verbose)
{
	struct crc_ctl *c = NULL;
	uint64_t counts[CKPT_TREE_MAX], top = 0, low = UINT64_MAX;
	unsigned i, held = 0;
	int rc;

	rc = crc_ctl_open(daemon, token, &c);
	if (rc) {
		ctl_error("checkpoint: %s", c ? crc_ctl_error(c) : crc_strerror(rc));
		crc_ctl_close(c);
		return -1;
	}
	for (i = 0; i < tree_n && !rc; i++, held++) {
		rc = crc_ctl_collective(c, tree_pids[i], CRC_CTL_COLL_HOLD, 0, ttl_ms, &counts[i]);
		if (rc == CRC_ENOTSUP) {
			rc = 0;
			counts[i] = 0;
		}
	}
	if (rc) {
		ctl_error("checkpoint: holding the collective launches of pid %d: %s", (int)tree_pids[i - 1],
			  crc_ctl_error(c));
	} else {
		for (i = 0; i < tree_n; i++) {
			top = counts[i] > top ? counts[i] : top;
			low = counts[i] && counts[i] < low ? counts[i] : low;
		}
		for (i = 0; i < tree_n && top && !rc; i++)
			rc = crc_ctl_collective(c, tree_pids[i], CRC_CTL_COLL_CAP, top, ttl_ms, NULL);
		if (rc)
			ctl_error("checkpoint: capping the collective launches of pid %d: %s",
				  (int)tree_pids[i - 1], crc_ctl_error(c));
		else if (top && verbose)
			fprintf(stderr,
				"crcudactl: collectives: the tree's clients had launched %" PRIu64
				" to %" PRIu64 "; each stops after %" PRIu64 "\n",
				low, top, top);
	}
	if (rc || !top)
		for (i = 0; i < held; i++)
			crc_ctl_collective(c, tree_pids[i], CRC_CTL_COLL_RELEASE, 0, 0, NULL);
	crc_ctl_close(c);
	return rc ? -1 : 0;
}

static void release_collectives(const char *daemon, const char *token)
{
	struct crc_ctl *c = NULL;

	if (crc_ctl_open(daemon, token, &c) == 0)
		for (unsigned i = 0; i < tree_n; i++)
			crc_ctl_collective(c, tree_pids[i], CRC_CTL_COLL_RELEASE, 0, 0, NULL);
	crc_ctl_close(c);
}

static void rm_tree(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	char path[PATH_MAX * 2];

	if (!d)
		return;
	while ((de = readdir(d)))
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) {
			snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
			if (unlink(path) && errno == EISDIR)
				rm_tree(path);
		}
	closedir(d);
	rmdir(dir);
}

/* An image directory of a checkpoint not made: CRIU's link remaps of it go too (a dump that failed
 * removed its own; one that succeeded before the checkpoint failed kept them). */
static void discard_images(const char *dir)
{
	ctl_link_remaps_remove(dir);
	rm_tree(dir);
}

/* CRIU's log into the image directory, in place of the link to it (best effort: it is not an image). */
static void keep_dump_log(const char *log, const char *dir)
{
	char path[PATH_MAX * 2], buf[65536];
	int in, out;
	ssize_t n;

	snprintf(path, sizeof(path), "%s/dump.log", dir);
	unlink(path);
	in = open(log, O_RDONLY | O_CLOEXEC);
	out = in < 0 ? -1 : open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	while (out >= 0 && (n = read(in, buf, sizeof(buf))) > 0)
		if (write(out, buf, (size_t)n) != n)
			break;
	if (in >= 0)
		close(in);
	if (out >= 0)
		close(out);
}

static uint64_t report_u64(const char *stats, const char *key)
{
	const char *p = strstr(stats, key);

	return p ? strtoull(p + strlen(key), NULL, 10) : 0;
}

/* The commit of a checkpoint the daemon copies to the store in the background: its id, or 0 with why.
 * Its daemon tells; if the program ended meanwhile (its session with it), the store does: the
 * manifest that names this dump's image directory. */
static uint64_t wait_background_commit(const char *daemon, const char *token, pid_t pid, const char *store,
				       const char *rel, unsigned timeout, char *why, size_t why_len)
{
	struct crc_ctl *c = NULL;
	struct crc_store *st = NULL;
	uint64_t id = 0, *ids = NULL;
	size_t n = 0;
	int rc = crc_ctl_open(daemon, token, &c);

	if (!rc && !(rc = crc_ctl_commit_wait(c, pid, (int)timeout * 1000, &id)) && id) {
		crc_ctl_close(c);
		return id;
	}
	snprintf(why, why_len, "%s", c ? crc_ctl_error(c) : crc_strerror(rc));
	crc_ctl_close(c);
	if (rc != CRC_ENOTFOUND && rc != CRC_EDAEMON)
		return 0;
	if (crc_store_open(store, 0, &st) || crc_store_manifest_list(st, &ids, &n)) {
		crc_store_close(st);
		return 0;
	}
	for (size_t i = n; i-- > 0 && !id;) {
		struct crc_manifest *m;

		if (crc_store_manifest_get(st, ids[i], &m))
			continue;
		const char *d = crc_manifest_meta_get(m, "criu.images_dir");

		if (d && !strcmp(d, rel))
			id = ids[i];
		crc_manifest_free(m);
	}
	free(ids);
	crc_store_close(st);
	return id;
}

int cmd_checkpoint(int argc, char **argv, struct ctl_opts *opts)
{
	enum {
		OPT_DAEMON = 256,
		OPT_REMOTE,
		OPT_TOKEN,
		OPT_INSECURE,
		OPT_TLS_CERT,
		OPT_TLS_KEY,
		OPT_TLS_CA,
		OPT_TIMEOUT,
		OPT_JSON,
		OPT_NO_BACKGROUND,
		OPT_STOPPED,
		OPT_TCP_ESTABLISHED,
		OPT_PROGRESS
	};
	static const struct option longopts[] = {
	    {"leave-running", no_argument, NULL, 'R'},
	    {"no-background", no_argument, NULL, OPT_NO_BACKGROUND},
	    {"leave-stopped", no_argument, NULL, OPT_STOPPED},
	    {"tcp-established", no_argument, NULL, OPT_TCP_ESTABLISHED},
	    {"store", required_argument, NULL, 's'},
	    {"daemon", required_argument, NULL, OPT_DAEMON},
	    {"remote", required_argument, NULL, OPT_REMOTE},
	    {"token-file", required_argument, NULL, OPT_TOKEN},
	    {"insecure", no_argument, NULL, OPT_INSECURE},
	    {"tls-cert", required_argument, NULL, OPT_TLS_CERT},
	    {"tls-key", required_argument, NULL, OPT_TLS_KEY},
	    {"tls-ca", required_argument, NULL, OPT_TLS_CA},
	    {"timeout", required_argument, NULL, OPT_TIMEOUT},
	    {"json", no_argument, NULL, OPT_JSON},
	    {"progress", no_argument, NULL, OPT_PROGRESS},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	const char *store_arg = NULL, *daemon_arg = NULL, *remote_arg = NULL, *token_file = NULL;
	char token[CRC_TOKEN_MAX + 1] = "";
	bool tcp = false;
	bool leave = false, background = true, stopped = false, tcp_established = false, progress = false;
	unsigned timeout = CKPT_TIMEOUT_DEFAULT;
	char store[PATH_MAX], daemon[PATH_MAX], criu[PATH_MAX], plugdir[PATH_MAX], dir[PATH_MAX + 64];
	char report[PATH_MAX * 2], outlog[PATH_MAX * 2], dlog[PATH_MAX * 2], backend[64], host[256] = "",
											  comm[64] = "";
	char *end, val[PATH_MAX], pidbuf[32], lineage[CTL_LINEAGE_MAX], script[PATH_MAX],
	    decision[PATH_MAX * 2], work[PATH_MAX];
	bool work_made = false; /* (mkdtemp's letters may end in X too) */
	struct ctl_cancel cancel = {0};
	struct crc_ctl_session sess = {0};
	struct crc_store *st = NULL;
	int c, lockfd = -1, rc, ret = CTL_EXIT_FAILURE;
	pid_t pid;

	while ((c = getopt_long(argc, argv, "Rs:h", longopts, NULL)) != -1) {
		switch (c) {
		case 'R':
			leave = true;
			break;
		case 's':
			store_arg = optarg;
			break;
		case OPT_DAEMON:
			daemon_arg = optarg;
			break;
		case OPT_REMOTE:
			remote_arg = optarg;
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
			token_file = optarg;
			break;
		case OPT_TIMEOUT:
			if (ctl_parse_timeout("checkpoint", optarg, &timeout))
				return CTL_EXIT_USAGE;
			break;
		case OPT_JSON:
			opts->json = true;
			break;
		case OPT_NO_BACKGROUND:
			background = false;
			break;
		case OPT_STOPPED:
			stopped = true;
			break;
		case OPT_TCP_ESTABLISHED:
			tcp_established = true;
			break;
		case OPT_PROGRESS:
			progress = true;
			break;
		case 'h':
			ckpt_usage(stdout);
			return CTL_EXIT_OK;
		default:
			ckpt_usage(stderr);
			return CTL_EXIT_USAGE;
		}
	}
	if (optind != argc - 1) {
		ctl_error("checkpoint: give exactly one PID");
		ckpt_usage(stderr);
		return CTL_EXIT_USAGE;
	}
	pid = (pid_t)strtol(argv[optind], &end, 10);
	if (*end || pid <= 0) {
		ctl_error("checkpoint: '%s' is not a pid", argv[optind]);
		return CTL_EXIT_USAGE;
	}
	if (remote_arg && daemon_arg) {
		ctl_error("checkpoint: --daemon or --remote, not both");
		return CTL_EXIT_USAGE;
	}
	if (leave && stopped) {
		ctl_error("checkpoint: --leave-running or --leave-stopped, not both");
		return CTL_EXIT_USAGE;
	}
	if (ctl_store_dir(store_arg, store, sizeof(store)) ||
	    ctl_daemon_addr(daemon_arg, daemon, sizeof(daemon)))
		return CTL_EXIT_USAGE;
	if (kill(pid, 0) && errno == ESRCH) {
		ctl_error("checkpoint: no process %d", (int)pid);
		return CTL_EXIT_FAILURE;
	}
	/* Its device state is in the store and its socket waits for a resume: nothing CRIU can dump. */
	struct crc_suspend_reply susp;
	if (!ctl_suspended_query(pid, &susp)) {
		ctl_error("checkpoint: pid %d is suspended (its device memory is checkpoint %" PRIu64
			  " of %s): crcudactl resume %d first",
			  (int)pid, susp.ckpt_id, susp.store, (int)pid);
		return CTL_EXIT_FAILURE;
	}
	if (ctl_find_criu(criu, sizeof(criu)) || ctl_find_plugin_dir(plugdir, sizeof(plugdir)))
		return CTL_EXIT_FAILURE;
	/* A named daemon wins; else a TCP client's own CRCUDA_REMOTE (it has no local socket). */
	if (remote_arg) {
		snprintf(daemon, sizeof(daemon), "%s", remote_arg);
		tcp = true;
		if (ctl_read_token(ctl_token_file(token_file), token, sizeof(token)) < 0)
			return CTL_EXIT_FAILURE;
	} else if (!daemon_arg) {
		rc = task_remote(pid, token_file, daemon, sizeof(daemon), token, sizeof(token));
		if (rc < 0)
			return CTL_EXIT_FAILURE;
		tcp = rc == 0;
	}
	if (tcp && !token[0]) {
		ctl_error("checkpoint: the remote crcudad at %s needs a token: --token-file FILE, or "
			  "CRCUDA_TOKEN or CRCUDA_TOKEN_FILE",
			  daemon);
		return CTL_EXIT_USAGE;
	}
	/* A parent (a launcher, torchrun, a shell) whose descendants are crcuda clients: the whole tree
	 * in one dump, each client quiesced before any is copied, all committed together. */
	tree_n = 0;
	if (tree_clients(daemon, tcp ? token : NULL, pid, tree_pids, CKPT_TREE_MAX, &tree_n) ||
	    (tree_n == 1 && tree_pids[0] == pid))
		tree_n = 0;
	if (tree_n) {
		/* One commit point for the tree: no client's copy may finish after the others run on. */
		background = false;
	} else if (find_session(daemon, tcp ? token : NULL, pid, (int)timeout * 1000, &sess)) {
		return CTL_EXIT_FAILURE;
	}

	/* The store must exist (the daemon opens it by path), and be named absolutely. */
	rc = crc_store_open(store, CRC_STORE_CREATE, &st);
	if (rc) {
		ctl_error("checkpoint: cannot open the store %s: %s", store, crc_strerror(rc));
		return CTL_EXIT_FAILURE;
	}
	crc_store_close(st);
	if (!realpath(store, val) || strlen(val) >= sizeof(store)) {
		ctl_error("checkpoint: %s: %s", store, strerror(errno));
		return CTL_EXIT_FAILURE;
	}
	snprintf(store, sizeof(store), "%s", val);

	/* From here on SIGINT/SIGTERM cancel (before CRIU runs: nothing is done yet). */
	ctl_cancel_requested = 0;
	ctl_cancel_catch(true);
	/* <store>/criu/<time>-<pid>-<random>: unique across concurrent checkpoints. */
	time_t now = time(NULL);
	struct tm tm;
	char stamp[32];

	gmtime_r(&now, &tm);
	strftime(stamp, sizeof(stamp), "%Y%m%dT%H%M%SZ", &tm);
	snprintf(dir, sizeof(dir), "%s/criu", store);
	if (mkdir(dir, 0700) && errno != EEXIST) {
		ctl_error("checkpoint: cannot create %s: %s", dir, strerror(errno));
		goto out;
	}
	snprintf(dir, sizeof(dir), "%s/criu/%s-%d-XXXXXX", store, stamp, (int)pid);
	if (!mkdtemp(dir)) {
		ctl_error("checkpoint: cannot create an image directory in %s/criu: %s", store,
			  strerror(errno));
		dir[0] = 0;
		goto out;
	}
	/* Held until the manifest names the directory (or it is removed): gc skips locked ones. */
	lockfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (lockfd < 0 || flock(lockfd, LOCK_EX)) {
		ctl_error("checkpoint: cannot lock %s: %s", dir, strerror(errno));
		goto out;
	}
	/* The plugin's report and CRIU's output outside the store: a full or failing store must not
	 * take the reason of a failure with it. */
	snprintf(work, sizeof(work), "%s/crcuda-ckpt-XXXXXX",
		 getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	if (!mkdtemp(work)) {
		ctl_error("checkpoint: mkdtemp %s: %s", work, strerror(errno));
		discard_images(dir);
		goto out;
	}
	work_made = true;
	snprintf(report, sizeof(report), "%s/plugin.report", work);
	snprintf(outlog, sizeof(outlog), "%s/criu-dump.out", work);
	/* CRIU's log too (its --work-dir); the image directory names it while CRIU runs, and holds a
	 * copy after a checkpoint, as it held the log itself before. */
	snprintf(dlog, sizeof(dlog), "%s/dump.log", work);
	{
		char link[PATH_MAX * 2];

		snprintf(link, sizeof(link), "%s/dump.log", dir);
		if (symlink(dlog, link))
			fprintf(stderr, "crcudactl: checkpoint: %s: %s\n", link, strerror(errno));
	}
	snprintf(decision, sizeof(decision), "%s/crcuda-decision", dir);
	cancel.link = decision;
	{
		ssize_t n = readlink("/proc/self/exe", script, sizeof(script) - 1);

		script[n > 0 ? n : 0] = 0;
	}
	task_lineage(pid, lineage, sizeof(lineage));

	daemon_backend(daemon, backend, sizeof(backend));
	gethostname(host, sizeof(host) - 1);
	ctl_pid_comm(pid, comm, sizeof(comm));
	/* Not a session leader: its terminal and session belong to someone else (--shell-job). */
	bool shell_job = getsid(pid) != pid;
	const char *rel = dir + strlen(store) + 1;

	char *env[14], e_daemon[PATH_MAX + 16], e_store[PATH_MAX + 16], e_img[PATH_MAX + 32],
	    e_report[PATH_MAX * 2 + 32], e_meta[2048 + CTL_LINEAGE_MAX], e_timeout[64],
	    treemeta[1024] = "", e_token[CRC_TOKEN_MAX + 16], e_decision[PATH_MAX * 2 + 32];
	int ne;
	snprintf(e_daemon, sizeof(e_daemon), "CRCUDA_DAEMON=%s", daemon);
	snprintf(e_store, sizeof(e_store), "CRCUDA_STORE=%s", store);
	snprintf(e_img, sizeof(e_img), "CRCUDA_CRIU_IMAGES=%s", rel);
	snprintf(e_report, sizeof(e_report), "CRCUDA_PLUGIN_REPORT=%s", report);
	/* Each client's checkpoint names the tree it belongs to: its root and how many there are. Every
	 * process CRIU dumps (children without CUDA too: a DataLoader's workers) is restored with its
	 * own pid, which the restore waits to be free. */
	char all[900];

	tree_all_pids(pid, all, sizeof(all));
	if (tree_n)
		snprintf(treemeta, sizeof(treemeta),
			 "\ncrcuda.tree=%d\ncrcuda.tree.clients=%u\ncrcuda.tree.pids=%s", (int)pid, tree_n,
			 all);
	else
		snprintf(treemeta, sizeof(treemeta), "\ncrcuda.tree.pids=%s", all);
	snprintf(e_meta, sizeof(e_meta),
		 "CRCUDA_CKPT_META=crcuda.backend=%s\ncrcuda.host=%s\ncrcuda.comm=%s\ncriu.shell_job=%d\n"
		 "crcuda.leave_running=%d\ncriu.tcp_established=%d%s%s%s",
		 backend, host, comm, shell_job, leave, tcp_established,
		 lineage[0] ? "\ncrcuda.lineage=" : "", lineage, treemeta);
	snprintf(e_decision, sizeof(e_decision), "CRCUDA_CKPT_DECISION=%s", decision);
	snprintf(e_timeout, sizeof(e_timeout), "CRCUDA_TIMEOUT_MS=%u", timeout * 1000);
	env[0] = e_daemon, env[1] = e_store, env[2] = e_img, env[3] = e_report, env[4] = e_meta;
	env[5] = e_timeout, env[6] = "CRCUDA_PLUGIN=on";
	/* Whether CRIU kills the process after the dump: a detached TCP session is then released. */
	env[7] = leave || stopped ? "CRCUDA_LEAVE_RUNNING=1" : "CRCUDA_LEAVE_RUNNING=0", env[8] = e_decision;
	/* Killed after the dump, the process has nothing to run on for: the copy comes first then. */
	env[9] = leave && background ? "CRCUDA_CKPT_BACKGROUND=1" : "CRCUDA_CKPT_BACKGROUND=0";
	/* The action script saves what the tree maps of /dev/shm (shm_files.c). */
	char e_root[48];
	snprintf(e_root, sizeof(e_root), "CRCUDA_CKPT_ROOT=%d", (int)pid);
	env[10] = e_root;
	ne = 11;
	if (tcp) {
		snprintf(e_token, sizeof(e_token), "CRCUDA_TOKEN=%s", token);
		env[ne++] = e_token;
	}
	env[ne] = NULL;

	snprintf(pidbuf, sizeof(pidbuf), "%d", (int)pid);
	/* CRIU gives the seize phase, where the plugin quiesces the session (draining its streams), 10 s
	 * by default: long kernels, or a loaded machine, need ours. */
	char criu_timeout[16];
	snprintf(criu_timeout, sizeof(criu_timeout), "%u", timeout);
	char *args[32];
	int na = 0;
	args[na++] = criu;
	args[na++] = "dump";
	args[na++] = "-t";
	args[na++] = pidbuf;
	args[na++] = "-D";
	args[na++] = dir;
	args[na++] = "--libdir";
	args[na++] = plugdir;
	args[na++] = "-W";
	args[na++] = work;
	args[na++] = "-o";
	args[na++] = "dump.log";
	args[na++] = "-v4";
	args[na++] = "--timeout";
	args[na++] = criu_timeout;
	args[na++] = "--action-script";
	args[na++] = script;
	/* A file mapped or open under a name since unlinked while another name still links it (glibc's
	 * sem_open maps a temporary file it links to the semaphore's name: every named semaphore of
	 * Python's spawned multiprocessing workers) is dumped by CRIU only as a hard link it makes beside
	 * it, which the restore opens and removes. Without this such a process cannot be checkpointed. */
	args[na++] = "--link-remap";
	/* A file unlinked while open or mapped is dumped with its contents (a ghost file), by CRIU's
	 * default only up to 1 MiB: Python's multiprocessing heap and PyTorch's CPU tensors passed
	 * between processes (a DataLoader's batches) live in such files in /dev/shm, MiBs each. */
	args[na++] = "--ghost-limit";
	args[na++] = getenv("CRCUDA_GHOST_LIMIT") && *getenv("CRCUDA_GHOST_LIMIT")
			 ? getenv("CRCUDA_GHOST_LIMIT")
			 : "64G";
	if (leave)
		args[na++] = "--leave-running";
	/* Not CRIU but this command kills the process, once the commit is known: CRIU decides before the
	 * plugin commits, so a commit that fails (LMDB's transaction on a full or failing disk) would
	 * otherwise have lost the process. */
	if (stopped || !leave)
		args[na++] = "--leave-stopped";
	if (shell_job)
		args[na++] = "--shell-job";
	if (tcp_established) {
		args[na++] = "--tcp-established";
		/* CRIU locks them with iptables by default, and fails where there is none. */
		args[na++] = "--network-lock";
		args[na++] = (char *)ctl_network_lock();
		if (!strcmp(ctl_network_lock(), "skip"))
			fprintf(stderr, "crcudactl: checkpoint: no iptables here: TCP connections are not "
					"locked while they are dumped (safe between processes of the tree, "
					"which are all stopped)\n");
	}
	args[na] = NULL;

	double t0 = ctl_now();
	bool aligned = false;
	/* Bytes copied, from the worker; the process is killed (its session gone) right after CRIU, a
	 * background copy is waited for below. */
	progress = progress || (isatty(2) && !opts->json);
	ctl_progress_begin("checkpoint", daemon, tcp ? token : NULL, pid, progress);
	if (ctl_cancel_requested) {
		rc = -1, cancel.state = CTL_CANCELLED; /* before CRIU ran: nothing to undo */
	} else if (tree_n && !tcp && align_collectives(daemon, NULL, timeout * 2000, true)) {
		ctl_progress_end(NULL);
		fprintf(stderr, "crcudactl: nothing was checkpointed; the processes run on\n");
		discard_images(dir);
		goto out;
	} else {
		aligned = tree_n && !tcp;
		rc = ctl_run_criu(args, env, outlog, report, "checkpoint", timeout, progress, &cancel);
	}
	if (!leave)
		ctl_progress_end(NULL);
	/* Resumed clients release their caps themselves; those CRIU never reached do here. */
	if (aligned)
		release_collectives(daemon, NULL);
	double secs = ctl_now() - t0;
	uint64_t id = 0;

	if (ctl_report_get(report, "ckpt", 0, val, sizeof(val)) == 0)
		id = strtoull(strchr(val, ' ') ? strchr(val, ' ') + 1 : val, NULL, 10);
	/* A tree: every client committed, or the checkpoint is not one (a restore would lack some). */
	uint64_t tree_ids[CKPT_TREE_MAX];
	unsigned tree_got = 0;
	for (int i = 0;
	     tree_n && tree_got < CKPT_TREE_MAX && ctl_report_get(report, "ckpt", i, val, sizeof(val)) == 0;
	     i++)
		tree_ids[tree_got++] = strtoull(strchr(val, ' ') ? strchr(val, ' ') + 1 : val, NULL, 10);
	bool partial = rc == 0 && id && tree_n && tree_got != tree_n;
	if (!leave && !stopped)
		crc_signal_tree(pid, rc == 0 && id && !partial ? SIGKILL : SIGCONT);
	if (partial) {
		ctl_error("checkpoint of the process tree of %d failed: %u of its %u crcuda clients were "
			  "committed (checkpoint %" PRIu64
			  " and others: remove them with `crcudactl rm`); the "
			  "processes run on",
			  (int)pid, tree_got, tree_n, id);
		goto out;
	}
	if (cancel.state == CTL_CANCELLED && !id) {
		/* CRIU let the process go (or was killed): the session resumes, as after a failure. */
		undo(daemon, tcp ? token : NULL, pid);
		discard_images(dir);
		fprintf(stderr,
			"crcudactl: checkpoint of %d cancelled: nothing was committed, the previous "
			"checkpoints are untouched%s\n",
			(int)pid, kill(pid, 0) == 0 ? " and the process runs on" : " (the process is gone)");
		goto out;
	}
	double drain_wait = 0;
	if (rc == 0 && !id && ctl_report_get(report, "pending", 0, val, sizeof(val)) == 0) {
		double t1 = ctl_now();

		id = wait_background_commit(daemon, tcp ? token : NULL, pid, store, rel, timeout, val,
					    sizeof(val));
		drain_wait = ctl_now() - t1;
		if (!id) {
			ctl_error("checkpoint of %d failed: %s", (int)pid, val);
			fprintf(stderr, "crcudactl: nothing was committed; the previous checkpoints are "
					"untouched and the process runs on\n");
			discard_images(dir);
			goto out;
		}
		secs = ctl_now() - t0;
	}
	ctl_progress_end(NULL);
	if (rc != 0 || !id) {
		if (ctl_report_get(report, "error", 0, val, sizeof(val)) == 0)
			ctl_error("checkpoint of %d failed: %s", (int)pid, val);
		else if (ctl_criu_storage_error(dlog, val, sizeof(val)) ||
			 ctl_criu_storage_error(outlog, val, sizeof(val)))
			ctl_error("checkpoint of %d failed: CRIU could not write its images into %s: %s",
				  (int)pid, dir, val);
		else if (rc > 0)
			ctl_error("checkpoint of %d failed: criu dump exited %d", (int)pid, rc);
		else
			ctl_error("checkpoint of %d failed", (int)pid);
		ctl_show_criu_errors(outlog, 5);
		ctl_show_criu_errors(dlog, 8);
		if (ctl_file_contains(dlog, "anon_inode:[io_uring]"))
			fprintf(
			    stderr,
			    "crcudactl: a process of the tree uses io_uring, which CRIU cannot checkpoint "
			    "(PyTorch's TCPStore does unless USE_LIBUV=0, libuv unless UV_USE_IO_URING=0; "
			    "`crcudactl run` sets both)\n");
		if (ctl_file_contains(dlog, "Can't dump ghost file"))
			fprintf(stderr,
				"crcudactl: a file the tree holds open or mapped after unlinking it is "
				"larger than CRCUDA_GHOST_LIMIT (CRIU's --ghost-limit; default 64G)\n");
		if (!id) {
			undo(daemon, tcp ? token : NULL, pid);
			/* Keep CRIU's log for a look, outside the store. */
			char keep[PATH_MAX];
			snprintf(keep, sizeof(keep), "/tmp/crcuda-dump-%d-%ld.log", (int)pid, (long)now);
			if (rename(dlog, keep) == 0)
				fprintf(stderr, "crcudactl: CRIU's log: %s\n", keep);
			discard_images(dir);
			fprintf(stderr,
				"crcudactl: nothing was committed; the previous checkpoints are "
				"untouched%s\n",
				kill(pid, 0) == 0 ? " and the process runs on" : "");
		} else {
			fprintf(stderr,
				"crcudactl: checkpoint %" PRIu64 " was committed, but CRIU failed after: "
				"do not rely on it\n",
				id);
		}
		goto out;
	}
	uint64_t dev_bytes = 0, new_bytes = 0, allocs = 0, globals = 0, copied = 0, snap = 0;
	double dev_secs = 0, copy_secs = 0, pause_q = 0, pause_d = 0, pause_c = 0;
	/* Summed over the clients (a tree has several); the pause is the longest one's. */
	for (int i = 0; ctl_report_get(report, "stats", i, val, sizeof(val)) == 0; i++) {
		const char *p = strstr(val, " seconds="), *c = strstr(val, " copy_seconds=");
		dev_bytes += report_u64(val, "device_bytes="), new_bytes += report_u64(val, "new_bytes=");
		allocs += report_u64(val, "allocations="), globals += report_u64(val, "globals=");
		copied += report_u64(val, "copied_bytes="), snap += report_u64(val, "snapshot_bytes=");
		dev_secs += p ? strtod(p + 9, NULL) : 0;
		copy_secs += c ? strtod(c + 14, NULL) : 0;
	}
	for (int i = 0; ctl_report_get(report, "pause", i, val, sizeof(val)) == 0; i++) {
		const char *q = strstr(val, "quiesce="), *d = strstr(val, "device="),
			   *c = strstr(val, "criu=");
		double pq = q ? strtod(q + 8, NULL) : 0, pd = d ? strtod(d + 7, NULL) : 0,
		       pc = c ? strtod(c + 5, NULL) : 0;

		if (pq + pd + pc > pause_q + pause_d + pause_c)
			pause_q = pq, pause_d = pd, pause_c = pc;
	}
	if (opts->json) {
		json_t *j = json_pack(
		    "{s:i, s:I, s:i, s:I, s:s, s:s, s:b, s:f, s:f, s:f, s:I, s:I, s:I, s:I}", "version",
		    CKPT_JSON_VERSION, "id", (json_int_t)id, "pid", (int)pid, "session",
		    (json_int_t)sess.session_id, "store", store, "criu_images", rel, "leave_running", leave,
		    "seconds", secs, "device_seconds", dev_secs, "device_copy_seconds", copy_secs,
		    "device_bytes", (json_int_t)dev_bytes, "new_bytes", (json_int_t)new_bytes, "allocations",
		    (json_int_t)allocs, "globals", (json_int_t)globals);

		/* What changed and was copied; the pause the process saw, in parts; the background copy. */
		json_object_set_new(j, "copied_bytes", json_integer((json_int_t)copied));
		json_object_set_new(j, "snapshot_bytes", json_integer((json_int_t)snap));
		json_object_set_new(j, "pause_quiesce_seconds", json_real(pause_q));
		json_object_set_new(j, "pause_device_seconds", json_real(pause_d));
		json_object_set_new(j, "pause_criu_seconds", json_real(pause_c));
		json_object_set_new(j, "background_wait_seconds", json_real(drain_wait));
		if (tree_n) {
			json_t *ids = json_array(), *pids = json_array();

			for (unsigned i = 0; i < tree_got; i++)
				json_array_append_new(ids, json_integer((json_int_t)tree_ids[i]));
			for (unsigned i = 0; i < tree_n; i++)
				json_array_append_new(pids, json_integer(tree_pids[i]));
			json_object_set_new(j, "tree_ids", ids);
			json_object_set_new(j, "tree_pids", pids);
		}
		ctl_json_print(j);
	} else {
		printf("checkpoint %" PRIu64 ": pid %d, %.1f MiB of device memory (%.1f MiB changed and "
		       "copied, %.1f MiB new, %" PRIu64 " allocations, %" PRIu64
		       " globals) in %.2f s (device %.2f s); images %s; process %s",
		       id, (int)pid, dev_bytes / 1048576.0, copied / 1048576.0, new_bytes / 1048576.0, allocs,
		       globals, secs, dev_secs, rel,
		       leave	 ? "left running"
		       : stopped ? "left stopped"
				 : "stopped");
		if (tree_n) {
			printf("; the process tree of %d: %u crcuda clients (checkpoints", (int)pid, tree_n);
			for (unsigned i = 0; i < tree_got; i++)
				printf(" %" PRIu64, tree_ids[i]);
			printf("; restoring any one restores the tree)");
		}
		if (leave && pause_q + pause_d + pause_c > 0)
			printf(" (paused %.3f s: quiesce %.3f, device %.3f, CRIU %.3f%s)",
			       pause_q + pause_d + pause_c, pause_q, pause_d, pause_c,
			       snap ? "; device memory copied to the store after it" : "");
		printf("\n");
	}
	ret = CTL_EXIT_OK;
	unlink(decision); /* not an image */
	keep_dump_log(dlog, dir);
out:
	ctl_progress_end(NULL);
	ctl_cancel_catch(false);
	if (lockfd >= 0)
		close(lockfd);
	if (work_made)
		rm_tree(work);
	return ret;
}
