/* crcudactl restore ID [--remote HOST:PORT] [--gpu N|A,B,...]: brings a checkpoint back with CRIU and the
 * crcuda plugin. The plugin, inside the restored process, has a daemon (local, started here when none
 * answers; or remote) replay the session from the store, and the process continues once the replay
 * is complete. The checkpoint is only read: CRIU's logs go to a work directory outside it, so one
 * checkpoint restores any number of times, and a failed restore leaves it as it was. The restored
 * session needs the checkpoint's own device VA range: where a live session holds it (or the daemon's
 * window differs), a second local daemon serves the restore (pick_local_daemon). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "crc_store.h"
#include "crcuda/ctl.h"
#include "crcuda/errno.h"
#include "crcuda/proto.h"
#include "crcudactl.h"

#define RESTORE_TIMEOUT_DEFAULT 600
#define RESTORE_JSON_VERSION	1

static void restore_usage(FILE *f)
{
	fprintf(
	    f,
	    "Usage: crcudactl restore [OPTIONS] ID\n"
	    "\n"
	    "Restores checkpoint ID (see `crcudactl ls`): a crcudad replays its device state from the\n"
	    "store, CRIU restores the process with its pid, and it continues where it was checkpointed.\n"
	    "Works on any machine that sees the store directory. Needs root (CRIU), and the\n"
	    "checkpointed pid must be free.\n"
	    "\n"
	    "Options:\n"
	    "  -s, --store DIR        the store (default $CRCUDA_STORE, else ~/.local/share/crcuda/store)\n"
	    "      --remote HOST:PORT replay on the crcudad listening there (the GPU is remote)\n"
	    "      --token-file FILE  its token (else $CRCUDA_TOKEN or $CRCUDA_TOKEN_FILE)\n"
	    "      --insecure         plaintext TCP to a daemon started with --insecure (else TLS)\n"
	    "      --tls-cert F, --tls-key F, --tls-ca F\n"
	    "                         TLS with certificates (a daemon with --tls-*), not the token, as key\n"
	    "      --daemon SOCKET    a local crcudad (default $CRCUDA_SOCKET, else\n"
	    "                         /tmp/crcuda-UID/crcudad.sock); started when none answers\n"
	    "      --backend cuda|sim the backend of a daemon started here (default: the checkpointed\n"
	    "                         daemon's)\n"
	    "      --gpu N|A,B,...    where the application's devices go on the daemon: a list puts\n"
	    "                         device i on GPU list[i] (one per device the checkpoint used, see\n"
	    "                         inspect); N puts device 0 on GPU N and the others on the GPUs\n"
	    "                         after it (default: the checkpointed ones); GPUs also by UUID\n"
	    "                         (GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx, as nvidia-smi -L shows)\n"
	    "      --timeout SEC      give up after SEC seconds (default %d)\n"
	    "  -w, --wait             stay until the restored program ends, passing it the signals this\n"
	    "                         command gets (HUP, INT, QUIT, TERM, USR1, USR2, ALRM, WINCH,\n"
	    "                         CONT, XCPU, PWR) and exit with its status (CRIU restores it as\n"
	    "                         this command's child: --restore-sibling)\n"
	    "      --progress         progress on stderr (bytes of device memory uploaded, percent,\n"
	    "                         GB/s); the default when stderr is a terminal\n"
	    "      --json             machine-readable result on stdout\n"
	    "  -h, --help             this help\n"
	    "\n"
	    "Environment: CRCUDA_CRIU, CRCUDA_CRIU_PLUGIN_DIR (as for checkpoint).\n"
	    "Exit status: 0 restored (the pid is printed), 1 failed (the checkpoint is untouched),\n"
	    "2 usage error; with --wait, once restored, the program's own (128+N when signal N ended\n"
	    "it).\n",
	    RESTORE_TIMEOUT_DEFAULT);
}

struct restore_args {
	const char *store_arg, *remote, *token_file, *daemon_arg, *backend;
	const char *gpu; /* --gpu as given (the plugin parses it again from CRCUDA_GPU) */
	struct crc_ctl_restore_opts gpus;
	unsigned timeout;
	uint64_t id;
	bool wait;     /* --wait: the restored program is our child; its status is ours */
	bool progress; /* --progress (else when stderr is a terminal) */
};

/* The daemon's part of the restore, started before CRIU (crc_ctl_stage): a worker replays the journal
 * and uploads device memory while CRIU restores the process, and the CRIU plugin's restore request,
 * with the same key, takes that worker and only adds the connection. Without it, the replay and the
 * upload start only once CRIU has come to the plugin. */
struct early_stage {
	pthread_t tid;
	struct crc_ctl *c;
	struct crc_ctl_restore_opts o;
	char env[64]; /* CRCUDA_RESTORE_STAGE_KEY=..., for the plugin */
	bool started;
};

static void *early_stage_main(void *arg)
{
	struct early_stage *es = arg;

	/* A failure costs only the head start: the plugin's restore then does it all. */
	if (crc_ctl_stage(es->c, &es->o) && getenv("CRCUDA_RESTORE_STAGE_VERBOSE"))
		fprintf(stderr, "crcudactl: restore: staging ahead failed: %s\n", crc_ctl_error(es->c));
	return NULL;
}

/* Starts it for checkpoint id of a single client on the local daemon: not for a process tree (the
 * plugin restores each client afresh), nor where the caller staged one already (a migration's
 * destination: CRCUDA_RESTORE_STAGE_KEY), nor with CRCUDA_RESTORE_STAGE=0. A daemon that restores
 * lazily (CRCUDA_RESTORE_LAZY=1) answers the stage once it has replayed the journal, its upload going
 * on while CRIU restores the process. */
static void early_stage_start(struct early_stage *es, const char *daemon, const char *store, uint64_t id,
			      pid_t pid, const char *gpu, unsigned timeout_s)
{
	const char *off = getenv("CRCUDA_RESTORE_STAGE");
	char why[256];

	if ((off && !strcmp(off, "0")) || getenv("CRCUDA_RESTORE_STAGE_KEY"))
		return;
	/* The pid the restored process will have: --progress finds the worker by it. */
	es->o = (struct crc_ctl_restore_opts){
	    .store_dir = store, .ckpt_id = id, .gpu = -1, .pid = pid, .timeout_ms = (int)timeout_s * 1000};
	/* The same device choices as the plugin's request (CRCUDA_GPU): else they differ and the staged
	 * worker restores afresh. */
	if (gpu && *gpu && strcmp(gpu, "-1") && crc_ctl_parse_gpus(gpu, &es->o, why, sizeof(why)))
		return;
	if (getrandom(&es->o.stage_key, sizeof(es->o.stage_key), 0) != sizeof(es->o.stage_key) ||
	    !es->o.stage_key || crc_ctl_open(daemon, NULL, &es->c))
		return;
	if (pthread_create(&es->tid, NULL, early_stage_main, es)) {
		crc_ctl_close(es->c);
		es->c = NULL;
		return;
	}
	es->started = true;
	snprintf(es->env, sizeof(es->env), "CRCUDA_RESTORE_STAGE_KEY=%" PRIx64, es->o.stage_key);
}

/* After CRIU: what the plugin did not take is dropped with the connection. */
static void early_stage_end(struct early_stage *es)
{
	if (es->started)
		pthread_join(es->tid, NULL);
	crc_ctl_close(es->c);
	es->c = NULL;
	es->started = false;
}

/* A daemon answers on the socket; else one is started through `crcudactl run` (same locking and
 * idle exit as for programs: it stays while the restored session lives). */
static int ensure_local_daemon(const char *sock, const char *backend)
{
	struct crc_ctl *c = NULL;
	char self[PATH_MAX];
	char *argv[16] = {self, "run", "--backend", (char *)backend, "--socket", (char *)sock};
	int n = 6, status = 0;
	ssize_t len;
	pid_t pid;

	if (crc_ctl_open(sock, NULL, &c) == 0) {
		crc_ctl_close(c);
		return 0;
	}
	if (!strcmp(backend, "unknown"))
		argv[3] = "cuda";
	len = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (len < 0)
		return -1;
	self[len] = 0;
	argv[n++] = "--", argv[n++] = "true", argv[n] = NULL;
	fflush(NULL);
	pid = fork();
	if (pid == 0) {
		int fd = open("/dev/null", O_RDWR);

		if (fd >= 0) {
			dup2(fd, 0);
			dup2(fd, 1);
		}
		execv(self, argv);
		_exit(127);
	}
	if (pid < 0 || waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status)) {
		ctl_error("restore: no crcudad answers at %s, and starting one (--backend %s) failed", sock,
			  argv[3]);
		return -1;
	}
	return 0;
}

/* Waits (a little) for pid to be free: the checkpointed process may be a zombie not yet reaped, or
 * still exiting (CRIU kills it at the end of the dump and does not wait for it to be gone). */
#define PID_FREE_WAIT_S	       60 /* a zombie is reaped in the end: init may be slow at it under load */
#define TIME_WAIT_RETRY_S      65 /* the kernel's TIME_WAIT (60 s), and a little */
#define TIME_WAIT_RETRY_STEP_S 5

/* comm: the checkpointed program's name, or NULL where unknown. A live holder of that name is the
 * program itself (or an earlier restore of it): no wait. holder: the name of another program that holds
 * pid still when it gives up, else "". One of another name took the number after the
 * program ended (pid numbers wrap at kernel.pid_max, 32768 by default): mostly a short-lived one, so it
 * is waited for as a zombie is. */
static bool pid_free(pid_t pid, const char *comm, char *holder, size_t size)
{
	bool said = false;

	holder[0] = 0;
	for (int i = 0; i < PID_FREE_WAIT_S * 20; i++) {
		if (kill(pid, 0) && errno == ESRCH)
			return true;
		if (!ctl_pid_gone(pid)) { /* alive, neither a zombie nor exiting */
			ctl_pid_comm(pid, holder, size);
			if (!comm || !comm[0] || !holder[0] || !strcmp(holder, comm)) {
				holder[0] = 0; /* not known to be another program */
				return false;
			}
			if (i >= 40 && !said) {
				ctl_error(
				    "restore: pid %d is held by another program (%s), not the checkpointed "
				    "%s (pid numbers wrap at kernel.pid_max): waiting up to %d s for it to "
				    "end",
				    (int)pid, holder, comm, PID_FREE_WAIT_S);
				said = true;
			}
		} else if (i == 40 && !said) {
			/* A zombie's parent (init, for a process an earlier restore detached) reaps it:
			 * criu_stress saw this take more than 5 s on a loaded machine. */
			ctl_error("restore: waiting for pid %d to be free (it has ended; its parent has not "
				  "reaped it yet)",
				  (int)pid);
			said = true;
		}
		usleep(50000);
	}
	return false;
}

/* Whether id is one of pid and tree_pids ("p1,p2,..."). */
static bool in_pids(pid_t id, pid_t pid, const char *tree_pids)
{
	if (id == pid)
		return true;
	for (const char *p = tree_pids; p && *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : "")
		if (atoi(p) == id)
			return true;
	return false;
}

/* The ids of the checkpointed threads (CRIU's core-TID.img in imgdir, the processes' own ids aside),
 * free: CRIU gives every thread its id back ("Unable to create a thread: -17" otherwise). The
 * processes are gone (pids_free checks them first), so a live holder is another program that took the
 * number; it is waited for as pid_free waits for one. */
static bool tids_free(const char *imgdir, pid_t pid, const char *tree_pids)
{
	DIR *d = opendir(imgdir);
	struct dirent *de;
	bool ok = true;

	if (!d)
		return true; /* CRIU says what is wrong with the images */
	while (ok && (de = readdir(d))) {
		char holder[64], tail[8];
		int tid;
		bool said = false;

		if (sscanf(de->d_name, "core-%d%7s", &tid, tail) != 2 || strcmp(tail, ".img") || tid <= 0 ||
		    in_pids(tid, pid, tree_pids))
			continue;
		if (tid == getpid()) {
			ctl_error(
			    "restore: thread id %d of the checkpointed process %d is this crcudactl's own "
			    "pid: run it again",
			    tid, (int)pid);
			ok = false;
			break;
		}
		for (int i = 0;; i++) {
			/* Free once no task has it: an ended one not yet reaped still holds it. */
			if (kill(tid, 0) && errno == ESRCH)
				break;
			ctl_pid_comm(tid, holder, sizeof(holder));
			if (i == PID_FREE_WAIT_S * 20) {
				ctl_error(
				    "restore: thread id %d of the checkpointed process %d is held by another "
				    "program (%s, still running after %d s): CRIU restores every thread with "
				    "its own id",
				    tid, (int)pid, holder, PID_FREE_WAIT_S);
				ok = false;
				break;
			}
			if (i == 40 && !said) {
				ctl_error(
				    "restore: thread id %d of the checkpointed process %d is held by another "
				    "program (%s; ids wrap at kernel.pid_max): waiting up to %d s for it to "
				    "end",
				    tid, (int)pid, holder, PID_FREE_WAIT_S);
				said = true;
			}
			usleep(50000);
		}
	}
	closedir(d);
	return ok;
}

/* The checkpointed pid and, for a tree, every pid of it ("p1,p2,..."), free: CRIU restores each
 * process with its own pid; then their threads' ids (imgdir: the checkpoint's CRIU images). comm: the
 * checkpointed program's name (the tree's others are not known). */
static bool pids_free(pid_t pid, const char *tree_pids, const char *comm, const char *imgdir)
{
	char holder[64];

	if (pid > 0 && !pid_free(pid, comm, holder, sizeof(holder))) {
		if (holder[0])
			ctl_error("restore: pid %d is held by another program (%s, still running after %d "
				  "s): CRIU restores the process with its own pid",
				  (int)pid, holder, PID_FREE_WAIT_S);
		else
			ctl_error(
			    "restore: pid %d is in use (is the checkpointed process, or an earlier "
			    "restore of it, still running?): CRIU restores the process with its own pid",
			    (int)pid);
		return false;
	}
	for (const char *p = tree_pids; p && *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : "") {
		pid_t q = (pid_t)atoi(p);

		if (q > 0 && q != pid && !pid_free(q, NULL, holder, sizeof(holder))) {
			ctl_error(
			    "restore: pid %d of the process tree of %d is in use (the checkpointed tree, or "
			    "an earlier restore of it, still running?)",
			    (int)q, (int)pid);
			return false;
		}
	}
	return tids_free(imgdir, pid, tree_pids);
}

/* CRIU could not bind a socket to its port again, the port in use. */
static bool port_taken(const char *rlog)
{
	return ctl_file_contains(rlog, "Can't bind inet socket") &&
	       ctl_file_contains(rlog, "Address already in use");
}

static int parse(int argc, char **argv, struct restore_args *a, struct ctl_opts *opts)
{
	enum {
		OPT_REMOTE = 256,
		OPT_TOKEN,
		OPT_INSECURE,
		OPT_TLS_CERT,
		OPT_TLS_KEY,
		OPT_TLS_CA,
		OPT_DAEMON,
		OPT_BACKEND,
		OPT_GPU,
		OPT_TIMEOUT,
		OPT_JSON,
		OPT_PROGRESS
	};
	static const struct option longopts[] = {
	    {"store", required_argument, NULL, 's'},
	    {"remote", required_argument, NULL, OPT_REMOTE},
	    {"token-file", required_argument, NULL, OPT_TOKEN},
	    {"insecure", no_argument, NULL, OPT_INSECURE},
	    {"tls-cert", required_argument, NULL, OPT_TLS_CERT},
	    {"tls-key", required_argument, NULL, OPT_TLS_KEY},
	    {"tls-ca", required_argument, NULL, OPT_TLS_CA},
	    {"daemon", required_argument, NULL, OPT_DAEMON},
	    {"backend", required_argument, NULL, OPT_BACKEND},
	    {"gpu", required_argument, NULL, OPT_GPU},
	    {"timeout", required_argument, NULL, OPT_TIMEOUT},
	    {"json", no_argument, NULL, OPT_JSON},
	    {"progress", no_argument, NULL, OPT_PROGRESS},
	    {"wait", no_argument, NULL, 'w'},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	char *end;
	int c;

	while ((c = getopt_long(argc, argv, "s:wh", longopts, NULL)) != -1) {
		switch (c) {
		case 'w':
			a->wait = true;
			break;
		case 's':
			a->store_arg = optarg;
			break;
		case OPT_REMOTE:
			a->remote = optarg;
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
			a->token_file = optarg;
			break;
		case OPT_DAEMON:
			a->daemon_arg = optarg;
			break;
		case OPT_BACKEND:
			if (strcmp(optarg, "sim") && strcmp(optarg, "cuda")) {
				ctl_error("restore: --backend is cuda or sim, not '%s'", optarg);
				return CTL_EXIT_USAGE;
			}
			a->backend = optarg;
			break;
		case OPT_GPU: {
			char why[256];

			if (crc_ctl_parse_gpus(optarg, &a->gpus, why, sizeof(why))) {
				ctl_error("restore: %s", why);
				return CTL_EXIT_USAGE;
			}
			a->gpu = optarg;
			break;
		}
		case OPT_TIMEOUT:
			if (ctl_parse_timeout("restore", optarg, &a->timeout))
				return CTL_EXIT_USAGE;
			break;
		case OPT_JSON:
			opts->json = true;
			break;
		case OPT_PROGRESS:
			a->progress = true;
			break;
		case 'h':
			restore_usage(stdout);
			return CTL_EXIT_OK;
		default:
			restore_usage(stderr);
			return CTL_EXIT_USAGE;
		}
	}
	if (optind != argc - 1) {
		ctl_error("restore: give exactly one checkpoint ID");
		restore_usage(stderr);
		return CTL_EXIT_USAGE;
	}
	a->id = strtoull(argv[optind], &end, 10);
	if (*end || !a->id) {
		ctl_error("restore: '%s' is not a checkpoint id", argv[optind]);
		return CTL_EXIT_USAGE;
	}
	if (a->remote && (a->daemon_arg || a->backend)) {
		ctl_error("restore: --daemon and --backend are for a local daemon, not --remote");
		return CTL_EXIT_USAGE;
	}
	if (a->token_file && !a->remote) {
		ctl_error("restore: --token-file goes with --remote");
		return CTL_EXIT_USAGE;
	}
	return -1;
}

int cmd_restore(int argc, char **argv, struct ctl_opts *opts)
{
	struct restore_args a = {.timeout = RESTORE_TIMEOUT_DEFAULT};
	char store[PATH_MAX], daemon[PATH_MAX], criu[PATH_MAX], plugdir[PATH_MAX], imgdir[PATH_MAX * 2];
	char work[] = "/tmp/crcuda-restore-XXXXXX", report[64], outlog[64], pidfile[64], rlog[64];
	bool work_made = false; /* (mkdtemp's letters may end in X too) */
	char val[PATH_MAX], idbuf[32], path[PATH_MAX * 2 + 32];
	struct crc_manifest *m = NULL;
	struct crc_store *st = NULL;
	int rc, ret = CTL_EXIT_FAILURE;
	bool keep_work = true;
	pid_t pid = 0, wait_for = 0;
	int imgfd = -1;
	struct early_stage stage = {0};

	rc = parse(argc, argv, &a, opts);
	if (rc >= 0)
		return rc;
	if (ctl_store_dir(a.store_arg, store, sizeof(store)))
		return CTL_EXIT_USAGE;
	if (!a.remote && ctl_daemon_addr(a.daemon_arg, daemon, sizeof(daemon)))
		return CTL_EXIT_USAGE;
	if (ctl_find_criu(criu, sizeof(criu)) || ctl_find_plugin_dir(plugdir, sizeof(plugdir)))
		return CTL_EXIT_FAILURE;
	if (!realpath(store, val)) {
		ctl_error("restore: no store at %s: %s", store, strerror(errno));
		return CTL_EXIT_FAILURE;
	}
	snprintf(store, sizeof(store), "%s", val);

	/* The manifest names the images and the pid. */
	rc = crc_store_open(store, 0, &st);
	if (rc) {
		ctl_error("restore: cannot open the store %s: %s", store, crc_strerror(rc));
		return CTL_EXIT_FAILURE;
	}
	rc = crc_store_manifest_get(st, a.id, &m);
	if (rc) {
		crc_store_close(st);
		ctl_error("restore: checkpoint %" PRIu64 " in %s: %s", a.id, store,
			  rc == CRC_ENOTFOUND ? "no such checkpoint (see crcudactl ls)" : crc_strerror(rc));
		return CTL_EXIT_FAILURE;
	}
	/* Another user's checkpoint: root only. */
	rc = crc_manifest_check_owner(st, m, (unsigned)geteuid(), val, sizeof(val));
	crc_store_close(st);
	if (rc) {
		ctl_error("restore: %s", val);
		goto out;
	}
	/* A client of a process tree: CRIU restores the whole tree, from its root. */
	const char *tree = crc_manifest_meta_get(m, "crcuda.tree"),
		   *tree_clients = crc_manifest_meta_get(m, "crcuda.tree.clients");
	const char *rel = crc_manifest_meta_get(m, "criu.images_dir"),
		   *pidm = tree ? tree : crc_manifest_meta_get(m, "crcuda.pid"),
		   *backend = crc_manifest_meta_get(m, "crcuda.backend"),
		   *shell = crc_manifest_meta_get(m, "criu.shell_job"),
		   *tcp_est = crc_manifest_meta_get(m, "criu.tcp_established"),
		   *va_base = crc_manifest_meta_get(m, "crcuda.va_base"),
		   *va_size = crc_manifest_meta_get(m, "crcuda.va_size"),
		   *devices = crc_manifest_meta_get(m, "crcuda.devices");
	if (!rel) {
		ctl_error("restore: checkpoint %" PRIu64 " has no CRIU images (its manifest names none)",
			  a.id);
		goto out;
	}
	snprintf(imgdir, sizeof(imgdir), "%s%s%s", rel[0] == '/' ? "" : store, rel[0] == '/' ? "" : "/", rel);
	snprintf(path, sizeof(path), "%s/inventory.img", imgdir);
	if (access(path, R_OK)) {
		ctl_error("restore: checkpoint %" PRIu64
			  ": its CRIU images %s are missing or unreadable (%s)",
			  a.id, imgdir, strerror(errno));
		goto out;
	}
	pid = pidm ? (pid_t)atoi(pidm) : 0;
	if (!pids_free(pid, crc_manifest_meta_get(m, "crcuda.tree.pids"),
		       crc_manifest_meta_get(m, "crcuda.comm"), imgdir))
		goto out;
	if (!va_base || !va_size) {
		ctl_error("restore: checkpoint %" PRIu64
			  " lacks its device VA range (not a crcuda checkpoint?)",
			  a.id);
		goto out;
	}
	if (devices && a.gpus.ngpus) {
		/* A list shorter than the devices used fails here, before CRIU; a GPU the daemon lacks
		 * fails in the daemon before anything is replayed. */
		unsigned used = 1;

		for (const char *p = devices; *p; p++)
			used += *p == ',';
		if (a.gpus.ngpus < used) {
			ctl_error("restore: checkpoint %" PRIu64 " used %u devices (crcudactl inspect shows "
				  "them): --gpu %s names %u; give one GPU per device, in the application's "
				  "device order (e.g. --gpu %s)",
				  a.id, used, a.gpu, a.gpus.ngpus, devices);
			goto out;
		}
	}
	/* Every restore gets a worker process of its own in the daemon, where the checkpoint's device VA
	 * range is free: no daemon needs to be picked for it. */
	if (!a.remote && ensure_local_daemon(daemon, a.backend ? a.backend : backend ? backend : "cuda"))
		goto out;

	if (!mkdtemp(work)) {
		ctl_error("restore: mkdtemp: %s", strerror(errno));
		goto out;
	}
	work_made = true;
	snprintf(report, sizeof(report), "%s/plugin.report", work);
	snprintf(outlog, sizeof(outlog), "%s/criu.out", work);
	snprintf(pidfile, sizeof(pidfile), "%s/pid", work);
	snprintf(rlog, sizeof(rlog), "%s/restore.log", work);

	char *env[12], e_daemon[PATH_MAX + 16], e_store[PATH_MAX + 16], e_id[64],
	    e_gpu[16 + CRC_CTL_MAX_GPUS * 41], e_report[96], e_timeout[64], e_token[PATH_MAX + 32];
	int ne = 0;
	snprintf(e_store, sizeof(e_store), "CRCUDA_STORE=%s", store);
	snprintf(e_id, sizeof(e_id), "CRCUDA_CKPT_ID=%" PRIu64, a.id);
	snprintf(e_gpu, sizeof(e_gpu), "CRCUDA_GPU=%s", a.gpu ? a.gpu : "");
	snprintf(e_report, sizeof(e_report), "CRCUDA_PLUGIN_REPORT=%s", report);
	snprintf(e_timeout, sizeof(e_timeout), "CRCUDA_TIMEOUT_MS=%u", a.timeout * 1000);
	env[ne++] = e_store, env[ne++] = e_id, env[ne++] = e_gpu, env[ne++] = e_report, env[ne++] = e_timeout;
	env[ne++] = "CRCUDA_PLUGIN=on";
	if (a.remote) {
		snprintf(e_daemon, sizeof(e_daemon), "CRCUDA_REMOTE=%s", a.remote);
		env[ne++] = e_daemon;
		if (a.token_file) {
			if (!realpath(a.token_file, val)) {
				ctl_error("restore: token file %s: %s", a.token_file, strerror(errno));
				goto out;
			}
			/* The file given here wins over a CRCUDA_TOKEN inherited from the caller. */
			unsetenv("CRCUDA_TOKEN");
			snprintf(e_token, sizeof(e_token), "CRCUDA_TOKEN_FILE=%s", val);
			env[ne++] = e_token;
		} else if (!getenv("CRCUDA_TOKEN") && !getenv("CRCUDA_TOKEN_FILE")) {
			ctl_error("restore: --remote needs a token: --token-file FILE, or CRCUDA_TOKEN or "
				  "CRCUDA_TOKEN_FILE");
			ret = CTL_EXIT_USAGE;
			goto out;
		}
	} else {
		snprintf(e_daemon, sizeof(e_daemon), "CRCUDA_DAEMON=%s", daemon);
		env[ne++] = e_daemon;
		unsetenv("CRCUDA_REMOTE");
		if (!tree)
			early_stage_start(&stage, daemon, store, a.id, pid, a.gpu, a.timeout);
		if (stage.started)
			env[ne++] = stage.env;
	}
	env[ne] = NULL;

	char *args[32];
	int na = 0;
	args[na++] = criu;
	args[na++] = "restore";
	args[na++] = "-D";
	args[na++] = imgdir;
	/* Logs and stats in the work directory: the checkpoint stays as it was. */
	args[na++] = "-W";
	args[na++] = work;
	args[na++] = "-d";
	/* Stopped until CRIU is done: it detaches the threads one by one, and a program that ran on
	 * from its first thread could end before the last is detached, which CRIU takes for a failed
	 * restore (it says the thread is gone) although the program ran to its end. */
	args[na++] = "--leave-stopped";
	args[na++] = "--pidfile";
	args[na++] = pidfile;
	args[na++] = "-o";
	args[na++] = rlog;
	args[na++] = "-v4";
	args[na++] = "--libdir";
	args[na++] = plugdir;
	if (shell && !strcmp(shell, "1"))
		args[na++] = "--shell-job";
	if (tcp_est && !strcmp(tcp_est, "1")) {
		args[na++] = "--tcp-established";
		args[na++] = "--network-lock";
		args[na++] = (char *)ctl_network_lock();
	}
	/* The restored tree's root becomes our child (CLONE_PARENT), so that its status reaches us. */
	if (a.wait)
		args[na++] = "--restore-sibling";
	args[na] = NULL;

	/* A shared lock on the images while CRIU reads them: rm and gc (exclusive) leave them. */
	imgfd = open(imgdir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (imgfd >= 0)
		flock(imgfd, LOCK_SH);

	double t0 = ctl_now();
	snprintf(idbuf, sizeof(idbuf), "%" PRIu64, a.id);
	a.progress = a.progress || (isatty(2) && !opts->json);
	/* Bytes uploaded, from the restoring worker (a local daemon's). */
	/* The tree's /dev/shm files as they were at the checkpoint (shm_files.c). */
	rc = ctl_shm_restore(imgdir);
	if (rc) {
		ctl_error("restore of checkpoint %" PRIu64 " failed: the files it maps in /dev/shm: %s", a.id,
			  strerror(-rc));
		goto out;
	}
	ctl_progress_begin("restore", a.remote ? NULL : daemon, NULL, pid, a.progress);
	rc = ctl_run_criu(args, env, outlog, report, "restore", a.timeout, a.progress, NULL);
	/* A listening port whose accepted connections were closed in the minute before the checkpoint
	 * (NCCL's bootstrap does that) is held by their TIME_WAIT, which the kernel keeps 60 s: CRIU
	 * cannot bind the listener again until then. Nothing was restored (CRIU undid it): again. */
	for (double until = t0 + TIME_WAIT_RETRY_S; rc != 0 && port_taken(rlog) && ctl_now() < until;) {
		fprintf(stderr,
			"crcudactl: restore: a port the program had bound is still held (TIME_WAIT of a "
			"connection closed less than a minute ago, or another process): trying again in %d "
			"s\n",
			TIME_WAIT_RETRY_STEP_S);
		sleep(TIME_WAIT_RETRY_STEP_S);
		if (!pids_free(pid, crc_manifest_meta_get(m, "crcuda.tree.pids"),
			       crc_manifest_meta_get(m, "crcuda.comm"), imgdir))
			break;
		rc = ctl_run_criu(args, env, outlog, report, "restore", a.timeout, a.progress, NULL);
	}
	ctl_progress_end(NULL);
	/* CRIU removed the link remaps it used (all of them once it succeeded): the checkpoint owns them no
	 * more, and a later dump may take their names. */
	int prc = ctl_link_remaps_prune(imgdir);
	if (prc)
		fprintf(stderr, "crcudactl: restore: %s/crcuda-link-remaps.list: %s\n", imgdir,
			strerror(-prc));
	double secs = ctl_now() - t0;
	early_stage_end(&stage);
	FILE *pf = fopen(pidfile, "r");
	int got = 0;

	if (pf) {
		if (fscanf(pf, "%d", &got) != 1)
			got = 0;
		fclose(pf);
	}
	if (rc != 0 || got <= 0) {
		if (ctl_report_get(report, "error", 0, val, sizeof(val)) == 0)
			ctl_error("restore of checkpoint %s failed: %s", idbuf, val);
		else
			ctl_error("restore of checkpoint %s failed: criu restore exited %d", idbuf, rc);
		ctl_show_criu_errors(outlog, 5);
		ctl_show_criu_errors(rlog, 8);
		if (port_taken(rlog))
			fprintf(
			    stderr,
			    "crcudactl: a port the program had bound is still taken after %d s: by another "
			    "process (TIME_WAIT would have ended)\n",
			    TIME_WAIT_RETRY_S);
		/* CRIU removes a link remap (checkpoint's --link-remap) once a restore of it succeeded. */
		if (ctl_file_line_has(rlog, "Can't link ", "/link_remap."))
			fprintf(
			    stderr,
			    "crcudactl: a file the program maps under an unlinked name was kept for it as a "
			    "link remap, which an earlier restore of this checkpoint used up (CRIU removes "
			    "it): restore a later checkpoint\n");
		fprintf(stderr, "crcudactl: CRIU's log: %s; checkpoint %s is untouched\n", rlog, idbuf);
		goto out;
	}
	if (imgfd >= 0)
		close(imgfd), imgfd = -1;
	ctl_continue_tree(got);
	keep_work = false;
	if (opts->json)
		ctl_json_print(json_pack("{s:i, s:I, s:i, s:s, s:s, s:f}", "version", RESTORE_JSON_VERSION,
					 "id", (json_int_t)a.id, "pid", got, "daemon",
					 a.remote ? a.remote : daemon, "store", store, "seconds", secs));
	else
		printf("restored checkpoint %s as pid %d in %.2f s (daemon %s)%s%s%s\n", idbuf, got, secs,
		       a.remote ? a.remote : daemon, tree ? ": the process tree, with its " : "",
		       tree && tree_clients ? tree_clients : "", tree ? " crcuda clients" : "");
	ret = CTL_EXIT_OK;
	if (a.wait)
		wait_for = got;
out:
	early_stage_end(&stage);
	if (imgfd >= 0)
		close(imgfd);
	if (!keep_work && work_made) {
		const char *files[] = {report, outlog, pidfile, rlog};
		for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++)
			unlink(files[i]);
		/* CRIU leaves its stats there too. */
		snprintf(path, sizeof(path), "%s/stats-restore", work);
		unlink(path);
		rmdir(work);
	}
	crc_manifest_free(m);
	if (wait_for > 0) {
		fflush(NULL);
		ret = ctl_wait_program(wait_for, "restore");
	}
	return ret;
}
