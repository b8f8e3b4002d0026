/* crcudactl ls [--store DIR] [--daemon ADDR] [--json]: the checkpoints in the store (with the process
 * each one holds) and the sessions the daemon, and those started beside it by restores, serve now. */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "crc_store.h"
#include "crcuda/ctl.h"
#include "crcuda/errno.h"
#include "crcuda/proto.h"
#include "crcudactl.h"

#define LS_JSON_VERSION 1

static void ls_usage(FILE *f)
{
	fprintf(
	    f, "Usage: crcudactl ls [--store DIR] [--daemon ADDR] [--json]\n"
	       "\n"
	       "Lists the checkpoints in the store and the sessions (client processes) of the daemon, each\n"
	       "with the pid of its GPU worker and the daemon's GPUs it has a context on, and the programs\n"
	       "suspended from it (crcudactl suspend; no worker).\n"
	       "\n"
	       "Options:\n"
	       "  -s, --store DIR    the store (default $CRCUDA_STORE, else ~/.local/share/crcuda/store)\n"
	       "      --daemon ADDR  the daemon (default $CRCUDA_SOCKET, else /tmp/crcuda-UID/crcudad.sock)\n"
	       "      --json         machine-readable output\n"
	       "  -h, --help         this help\n");
}

static const char *state_name(uint32_t s)
{
	switch (s) {
	case CRC_CTL_RUNNING:
		return "running";
	case CRC_CTL_QUIESCED:
		return "quiesced";
	case CRC_CTL_CHECKPOINTED:
		return "checkpointed";
	case CRC_CTL_RESTORING:
		return "restoring";
	default:
		return "unknown";
	}
}

static const char *meta_or(const struct crc_manifest *m, const char *key, const char *def)
{
	const char *v = crc_manifest_meta_get(m, key);
	return v ? v : def;
}

/* Checkpoints into list (JSON) or on stdout. 0; 1 when there is no store at dir; -1 when the store
 * cannot be read. */
static int list_checkpoints(const char *dir, json_t *list)
{
	struct crc_store *st;
	uint64_t *ids = NULL;
	size_t n = 0;
	int rc = crc_store_open(dir, 0, &st);

	if (rc == CRC_ENOENT) {
		if (!list)
			printf("no store at %s\n", dir);
		return 1;
	}
	if (rc || (rc = crc_store_manifest_list(st, &ids, &n))) {
		ctl_error("ls: the store %s: %s", dir, crc_strerror(rc));
		crc_store_close(st);
		return -1;
	}
	if (!list)
		printf("Checkpoints in %s:\n%-6s %-8s %-20s %-7s %-12s %12s %12s  %s\n", dir, "ID", "SESSION",
		       "CREATED", "PID", "PROGRAM", "DEVICE-MiB", "STORED-MiB", "CRIU-IMAGES");
	for (size_t i = 0; i < n; i++) {
		struct crc_manifest *m;
		uint64_t bytes = 0;
		char when[32];
		time_t t;
		struct tm tm;

		if ((rc = crc_store_manifest_get(st, ids[i], &m))) {
			ctl_error("ls: checkpoint %" PRIu64 ": %s", ids[i], crc_strerror(rc));
			continue;
		}
		for (uint32_t r = 0; r < m->nregions; r++)
			bytes += m->regions[r].size;
		/* What its distinct chunks take in the pack files (compressed where it paid; chunks it
		 * shares with other checkpoints count in each). */
		uint64_t unique = 0, stored = 0;
		if ((rc = crc_store_manifest_stored(st, m, &unique, &stored, NULL)))
			ctl_error("ls: checkpoint %" PRIu64 ": its chunks: %s", ids[i], crc_strerror(rc));
		t = (time_t)(m->created_ns / 1000000000);
		gmtime_r(&t, &tm);
		strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm);
		if (list)
			json_array_append_new(
			    list,
			    json_pack("{s:I, s:I, s:s, s:s, s:s, s:I, s:I, s:I, s:s}", "id",
				      (json_int_t)m->ckpt_id, "session", (json_int_t)m->session_id, "created",
				      when, "pid", meta_or(m, "crcuda.pid", ""), "program",
				      meta_or(m, "crcuda.comm", ""), "device_bytes", (json_int_t)bytes,
				      "unique_bytes", (json_int_t)unique, "stored_bytes", (json_int_t)stored,
				      "criu_images", meta_or(m, "criu.images_dir", "")));
		else
			printf("%-6" PRIu64 " %-8" PRIu64 " %-20s %-7s %-12s %12.1f %12.1f  %s\n", m->ckpt_id,
			       m->session_id, when, meta_or(m, "crcuda.pid", "-"),
			       meta_or(m, "crcuda.comm", "-"), bytes / 1048576.0, stored / 1048576.0,
			       meta_or(m, "criu.images_dir", "-"));
		crc_manifest_free(m);
	}
	free(ids);
	crc_store_close(st);
	return 0;
}

/* Programs suspended from the daemon at addr (crcudactl suspend): they listen on abstract unix sockets
 * named after their pids, which /proc/net/unix shows as "@NAME". Into list (JSON) or printed. */
static void list_suspended(const char *addr, json_t *list)
{
	char line[512], name[256];
	FILE *f = fopen("/proc/net/unix", "r");
	const char *prefix = "@" CRC_SUSPEND_SOCK_FMT;
	size_t plen = strcspn(prefix, "%");
	bool header = false;

	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		struct crc_suspend_reply q;
		unsigned long flags;
		char *end;
		long pid;

		/* Num RefCount Protocol Flags Type St Inode Path; flags 0x10000: listening */
		if (sscanf(line, "%*s %*s %*s %lx %*s %*s %*s %255s", &flags, name) != 2 ||
		    !(flags & 0x10000) || strncmp(name, prefix, plen) ||
		    (pid = strtol(name + plen, &end, 10)) <= 0 || *end ||
		    ctl_suspended_query((pid_t)pid, &q) || strcmp(q.daemon, addr))
			continue;
		if (list) {
			json_array_append_new(
			    list, json_pack("{s:I, s:i, s:i, s:s, s:I, s:I, s:s}", "session",
					    (json_int_t)q.session_id, "pid", (int)pid, "worker_pid", 0,
					    "state", "suspended", "device_bytes", (json_int_t)q.device_bytes,
					    "checkpoint", (json_int_t)q.ckpt_id, "daemon", addr));
			continue;
		}
		if (!header)
			printf("\nSuspended programs of crcudad at %s:\n%-8s %-7s %-12s %12s  %s\n", addr,
			       "SESSION", "PID", "CHECKPOINT", "DEVICE-MiB", "STORE");
		header = true;
		printf("%-8" PRIu64 " %-7ld %-12" PRIu64 " %12.1f  %s\n", q.session_id, pid, q.ckpt_id,
		       q.device_bytes / 1048576.0, q.store);
	}
	fclose(f);
}

/* The daemon's sessions, each with the worker process that runs it. */
static void list_sessions(const char *daemon, json_t *doc)
{
	struct crc_ctl *c = NULL;
	struct crc_ctl_session *s = NULL;
	unsigned n = 0;
	int rc = crc_ctl_open(daemon, NULL, &c);

	if (!rc) {
		rc = crc_ctl_sessions(c, &s, &n);
		crc_ctl_close(c);
	}
	if (rc) {
		if (doc)
			json_object_set_new(doc, "daemon_error", json_string(crc_strerror(rc)));
		else
			printf("\nSessions: crcudad at %s does not answer (%s)\n", daemon, crc_strerror(rc));
		return;
	}
	json_t *list = doc ? json_object_get(doc, "sessions") : NULL;
	if (doc && !list) {
		list = json_array();
		json_object_set_new(doc, "sessions", list);
	}
	if (!doc)
		printf("\nSessions of crcudad at %s:\n%-8s %-7s %-6s %-7s %-7s %-12s %-10s %12s  %s\n",
		       daemon, "SESSION", "PID", "UID", "WORKER", "GPUS", "STATE", "TRANSPORT", "DEVICE-MiB",
		       "VA");
	for (unsigned i = 0; i < n; i++) {
		const char *tr = s[i].transport == CRC_TRANSPORT_TCP ? "tcp" : "unix";
		char gpus[64] = "";
		json_t *gl = json_array();

		/* The daemon's GPUs the session has a context on, "-" before its first. */
		for (unsigned g = 0; g < 32; g++)
			if (s[i].devices & (1u << g)) {
				size_t used = strlen(gpus);

				snprintf(gpus + used, sizeof(gpus) - used, "%s%u", used ? "," : "", g);
				json_array_append_new(gl, json_integer(g));
			}
		if (list)
			json_array_append_new(
			    list,
			    json_pack("{s:I, s:i, s:i, s:i, s:o, s:s, s:s, s:I, s:I, s:I, s:s}", "session",
				      (json_int_t)s[i].session_id, "pid", (int)s[i].pid, "uid", (int)s[i].uid,
				      "worker_pid", (int)s[i].worker_pid, "gpus", gl, "state",
				      state_name(s[i].state), "transport", tr, "device_bytes",
				      (json_int_t)s[i].device_bytes, "va_base", (json_int_t)s[i].va_base,
				      "va_size", (json_int_t)s[i].va_size, "daemon", daemon));
		else
			json_decref(gl);
		if (!list)
			printf("%-8" PRIu64 " %-7d %-6d %-7d %-7s %-12s %-10s %12.1f  0x%" PRIx64
			       "+0x%" PRIx64 "\n",
			       s[i].session_id, (int)s[i].pid, (int)s[i].uid, (int)s[i].worker_pid,
			       gpus[0] ? gpus : "-", state_name(s[i].state), tr,
			       s[i].device_bytes / 1048576.0, s[i].va_base, s[i].va_size);
	}
	free(s);
}

int cmd_ls(int argc, char **argv, struct ctl_opts *opts)
{
	enum { OPT_DAEMON = 256, OPT_JSON };
	static const struct option longopts[] = {
	    {"store", required_argument, NULL, 's'},
	    {"daemon", required_argument, NULL, OPT_DAEMON},
	    {"json", no_argument, NULL, OPT_JSON},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	const char *store_arg = NULL, *daemon_arg = NULL;
	char store[PATH_MAX], daemon[PATH_MAX];
	bool missing;
	int rc;
	json_t *doc = NULL, *list = NULL;
	int c;

	while ((c = getopt_long(argc, argv, "s:h", longopts, NULL)) != -1) {
		switch (c) {
		case 's':
			store_arg = optarg;
			break;
		case OPT_DAEMON:
			daemon_arg = optarg;
			break;
		case OPT_JSON:
			opts->json = true;
			break;
		case 'h':
			ls_usage(stdout);
			return CTL_EXIT_OK;
		default:
			ls_usage(stderr);
			return CTL_EXIT_USAGE;
		}
	}
	if (optind != argc) {
		ctl_error("ls takes no operands");
		return CTL_EXIT_USAGE;
	}
	if (ctl_store_dir(store_arg, store, sizeof(store)) ||
	    ctl_daemon_addr(daemon_arg, daemon, sizeof(daemon)))
		return CTL_EXIT_USAGE;
	if (opts->json) {
		doc = json_pack("{s:i, s:s, s:s}", "version", LS_JSON_VERSION, "store", store, "daemon",
				daemon);
		list = json_array();
		json_object_set_new(doc, "checkpoints", list);
	}
	rc = list_checkpoints(store, list);
	if (rc < 0) {
		json_decref(doc);
		return CTL_EXIT_FAILURE;
	}
	/* A store the user named ($CRCUDA_STORE or --store) that is not there is an error (a typo must not
	 * look like an empty store); the default one is simply not made yet. */
	missing = rc == 1 && (store_arg || (getenv("CRCUDA_STORE") && *getenv("CRCUDA_STORE")));
	if (missing)
		ctl_error("ls: no store at %s", store);
	list_sessions(daemon, doc);
	if (doc && !json_object_get(doc, "sessions"))
		json_object_set_new(doc, "sessions", json_array());
	list_suspended(daemon, doc ? json_object_get(doc, "sessions") : NULL);
	if (doc)
		ctl_json_print(doc);
	return missing ? CTL_EXIT_FAILURE : CTL_EXIT_OK;
}

/* crcudactl status PID: the state of one program's session (running, quiesced, checkpointed,
 * restoring, suspended), as NVIDIA's cuda-checkpoint --get-state tells a process's. */
int cmd_status(int argc, char **argv, struct ctl_opts *opts)
{
	enum { OPT_DAEMON = 256, OPT_JSON };
	static const struct option longopts[] = {
	    {"daemon", required_argument, NULL, OPT_DAEMON},
	    {"json", no_argument, NULL, OPT_JSON},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	const char *daemon_arg = NULL;
	char daemon[PATH_MAX], *end;
	struct crc_ctl *c = NULL;
	struct crc_ctl_session *s = NULL;
	struct crc_suspend_reply q;
	unsigned n = 0;
	long pid;
	int ch, rc;

	while ((ch = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (ch) {
		case OPT_DAEMON:
			daemon_arg = optarg;
			break;
		case OPT_JSON:
			opts->json = true;
			break;
		case 'h':
			printf("Usage: crcudactl status [--daemon ADDR] [--json] PID\n"
			       "\n"
			       "The state of PID's session on its daemon: running, quiesced, checkpointed,\n"
			       "restoring or suspended (crcudactl suspend), with its worker, GPUs and device "
			       "memory.\n"
			       "Exit status: 0 PID has a session, 1 it has none (or the daemon does not "
			       "answer),\n"
			       "2 usage error.\n");
			return CTL_EXIT_OK;
		default:
			return CTL_EXIT_USAGE;
		}
	}
	if (optind != argc - 1 || (pid = strtol(argv[optind], &end, 10)) <= 0 || *end) {
		ctl_error("status: give one PID");
		return CTL_EXIT_USAGE;
	}
	if (ctl_daemon_addr(daemon_arg, daemon, sizeof(daemon)))
		return CTL_EXIT_USAGE;
	if (kill((pid_t)pid, 0) && errno == ESRCH) {
		ctl_error("status: no process %ld", pid);
		return CTL_EXIT_FAILURE;
	}
	/* Suspended: no session on the daemon; the process itself says so (crcudactl suspend). */
	if (!ctl_suspended_query((pid_t)pid, &q)) {
		if (opts->json)
			ctl_json_print(json_pack("{s:i, s:s, s:I, s:I, s:I, s:s, s:s}", "pid", (int)pid,
						 "state", "suspended", "session", (json_int_t)q.session_id,
						 "checkpoint", (json_int_t)q.ckpt_id, "device_bytes",
						 (json_int_t)q.device_bytes, "store", q.store, "daemon",
						 q.daemon));
		else
			printf("pid %ld: suspended (session %" PRIu64 ", no GPU worker, %.1f MiB of device "
			       "memory saved as checkpoint %" PRIu64 " in %s)\n",
			       pid, q.session_id, q.device_bytes / 1048576.0, q.ckpt_id, q.store);
		return CTL_EXIT_OK;
	}
	rc = crc_ctl_open(daemon, NULL, &c);
	if (!rc)
		rc = crc_ctl_sessions(c, &s, &n);
	crc_ctl_close(c);
	if (rc) {
		ctl_error("status: crcudad at %s does not answer: %s", daemon, crc_strerror(rc));
		return CTL_EXIT_FAILURE;
	}
	for (unsigned i = 0; i < n; i++) {
		if (s[i].pid != pid)
			continue;
		if (opts->json)
			ctl_json_print(json_pack(
			    "{s:i, s:s, s:I, s:i, s:I, s:s, s:s}", "pid", (int)pid, "state",
			    state_name(s[i].state), "session", (json_int_t)s[i].session_id, "worker_pid",
			    (int)s[i].worker_pid, "device_bytes", (json_int_t)s[i].device_bytes, "transport",
			    s[i].transport == CRC_TRANSPORT_TCP ? "tcp" : "unix", "daemon", daemon));
		else
			printf("pid %ld: %s (session %" PRIu64
			       ", worker %d, %.1f MiB of device memory, %s)\n",
			       pid, state_name(s[i].state), s[i].session_id, (int)s[i].worker_pid,
			       s[i].device_bytes / 1048576.0,
			       s[i].transport == CRC_TRANSPORT_TCP ? "TCP" : "shared memory");
		free(s);
		return CTL_EXIT_OK;
	}
	free(s);
	ctl_error("status: pid %ld has no session on crcudad at %s (not a crcuda program, no CUDA call "
		  "yet, or another daemon's: --daemon)",
		  pid, daemon);
	return CTL_EXIT_FAILURE;
}
