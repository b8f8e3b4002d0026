/* crcudactl internals: the global options every subcommand sees, exit codes, shared helpers. */
#ifndef CRCUDACTL_H
#define CRCUDACTL_H

#include <jansson.h>
#include <stdbool.h>

/* Exit codes (documented in crcudactl --help). */
enum ctl_exit {
	CTL_EXIT_OK = 0,
	CTL_EXIT_FAILURE = 1,
	CTL_EXIT_USAGE = 2,
};

struct ctl_opts {
	bool json; /* machine-readable output on stdout */
};

/* A subcommand: argv[0] is its name; returns a ctl_exit code. */
typedef int (*ctl_cmd_fn)(int argc, char **argv, struct ctl_opts *opts);

int cmd_run(int argc, char **argv, struct ctl_opts *opts);
int cmd_store(int argc, char **argv, struct ctl_opts *opts);
int cmd_checkpoint(int argc, char **argv, struct ctl_opts *opts);
int cmd_restore(int argc, char **argv, struct ctl_opts *opts);
int cmd_ls(int argc, char **argv, struct ctl_opts *opts);
int cmd_status(int argc, char **argv, struct ctl_opts *opts);
int cmd_inspect(int argc, char **argv, struct ctl_opts *opts);
int cmd_rm(int argc, char **argv, struct ctl_opts *opts);
int cmd_export(int argc, char **argv, struct ctl_opts *opts);
int cmd_import(int argc, char **argv, struct ctl_opts *opts);
int cmd_migrate(int argc, char **argv, struct ctl_opts *opts);
int cmd_receive(int argc, char **argv, struct ctl_opts *opts);
int cmd_suspend(int argc, char **argv, struct ctl_opts *opts);
int cmd_resume(int argc, char **argv, struct ctl_opts *opts);

/* ---- cmd_suspend.c ---- */
#include <sys/types.h>
struct crc_suspend_reply;
/* What pid, suspended by crcudactl suspend, says of itself: 0, or -1 when it is not suspended. */
int ctl_suspended_query(pid_t pid, struct crc_suspend_reply *r);

/* ---- cmd_export.c: the export stream, also over a migration's connection ---- */
#include <stdint.h>
struct crc_hash;
struct crc_store;
struct ctl_export_opts {
	/* A migration's pre-copy round: metadata, regions and chunks only (no journal, module images
	 * or CRIU images); the checkpoint it makes cannot be restored, it carries the chunks over. */
	bool chunks_only;
	/* Without the CRIU images (and criu.images_dir): the CRIU plugin writes the export into the
	 * image directory itself (state=images). */
	bool no_images;
	/* Chunks and module images the reader holds already (sorted with ctl_hash_sort): named by the
	 * regions or the journal, not sent. */
	const struct crc_hash *known;
	size_t nknown;
	/* Tests: the byte at flip_at goes out with a bit flipped; the stream ends at cut_at (the write
	 * side is shut down). UINT64_MAX: never. */
	uint64_t flip_at, cut_at;
};
struct ctl_export_result {
	uint64_t bytes;			 /* the whole stream */
	uint64_t chunks, chunk_bytes;	 /* distinct chunks sent */
	uint64_t skipped, skipped_bytes; /* distinct chunks left out (known) */
	uint64_t file_bytes;		 /* CRIU images */
};
/* Writes checkpoint id of store to fd. 0, or -1 with a reason in why. */
int ctl_export_fd(const char *store, uint64_t id, int fd, const struct ctl_export_opts *o,
		  struct ctl_export_result *res, char *why, size_t len);
/* Writes a chunks-only export of the n distinct chunks hashes[i] (lens[i] bytes each) of the open
 * store st (path store, for the stream's origin) to fd: one region that lists exactly them, in that
 * order; INFO names checkpoint id. The import makes a pre-copy-like checkpoint that holds them (a
 * migration's stripe). Reads through a chunk reader of its own: several threads may call it at once
 * on one store handle while the handle does nothing else. o: only its test hooks count. 0, or -1
 * with a reason in why. */
int ctl_export_chunks_fd(struct crc_store *st, const char *store, uint64_t id, const struct crc_hash *hashes,
			 const uint64_t *lens, size_t n, int fd, const struct ctl_export_opts *o,
			 struct ctl_export_result *res, char *why, size_t len);
struct ctl_import_opts {
	bool known_ok;	   /* chunks not sent may be in the store (named, not put); else it fails */
	bool more_follows; /* the connection goes on after the trailer (no end of file expected) */
	bool precopy;	   /* a migration's pre-copy round: marked crcuda.migrate_precopy */
	/* Out, may be NULL: journal records that name module images not sent (pinned from the store) */
	uint64_t *images_pinned;
};
/* Reads one export stream from fd into store: 0 with *id, or -1 with a reason in why (nothing of it is
 * left in the store). *bytes: how many were read. */
int ctl_import_fd(const char *store, int fd, const struct ctl_import_opts *o, uint64_t *id, uint64_t *bytes,
		  char *why, size_t len);
/* The module images checkpoint m's journal names (a new array in *out, *n of them; none without a
 * journal): what a migration asks the destination about with the chunks. 0, or a CRC_E* error. */
struct crc_store;
struct crc_manifest;
int ctl_ckpt_images(struct crc_store *st, const struct crc_manifest *m, struct crc_hash **out, size_t *n);
/* Whether h is in sorted[0..n) (ctl_hash_sort). */
bool ctl_hash_known(const struct crc_hash *sorted, size_t n, const struct crc_hash *h);
void ctl_hash_sort(struct crc_hash *v, size_t n);

/* ---- cmd_rm.c: retention ---- */
#include <stdio.h>
/* Keeps the newest keep checkpoints of each program (crcuda.lineage; only lineage `only` when not
 * NULL) in the store at dir and removes the others (manifest, CRIU images, then gc of the chunks);
 * dry: only says which. Lines on out (NULL: quiet). Returns the number that could not be removed, or
 * -1 when the store cannot be read. */
int ctl_prune(const char *store, const char *only, unsigned keep, bool dry, FILE *out);

/* The environment variable `crcudactl run` gives a program (unless set already): one name for its
 * checkpoints across restores (crcuda.lineage in their manifests). */
#define CTL_LINEAGE_ENV "CRCUDA_LINEAGE"
#define CTL_LINEAGE_MAX 128
/* crcudactl run by CRIU as checkpoint's --action-script (CRTOOLS_SCRIPT_ACTION set): its exit status. */
int ctl_action_script(void);
/* ---- shm_files.c: what a tree maps of /dev/shm, carried by its checkpoint ---- */
/* Saves the files of /dev/shm the tree of root maps shared (those with a name) into imgdir. 0 or -errno. */
int ctl_shm_save(pid_t root, const char *imgdir);
/* Writes them back before CRIU restores from imgdir (none saved: nothing to do). 0 or -errno. */
int ctl_shm_restore(const char *imgdir);
/* ---- link_remaps.c: CRIU's link remaps a dump left, removed with its checkpoint ---- */
/* At post-dump: lists the link remaps the dump into imgdir made (from its images). 0 or -errno. */
int ctl_link_remaps_record(const char *imgdir);
/* After a restore from imgdir: forgets those CRIU used up (removed). 0 or -errno. */
int ctl_link_remaps_prune(const char *imgdir);
/* With imgdir's removal: removes those still there. How many, or -errno. */
int ctl_link_remaps_remove(const char *imgdir);

/* Prints "crcudactl: " + message on stderr. */
void ctl_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Dumps a JSON value on stdout (indented, newline) and drops the reference. Returns 0 or -1. */
int ctl_json_print(json_t *v);

/* ---- cr_util.c: shared by checkpoint, restore, ls and inspect ---- */
#include <stddef.h>
#include <sys/types.h>

/* CLOCK_MONOTONIC seconds. */
double ctl_now(void);
/* No such process, a zombie (ended, not reaped yet), or a process that is exiting. */
bool ctl_pid_gone(pid_t pid);
/* The name of the program pid runs (/proc/PID/comm), "" where it cannot be read. */
void ctl_pid_comm(pid_t pid, char *comm, size_t size);
/* --timeout SEC of command cmd: 0, or -1 with a usage message. */
int ctl_parse_timeout(const char *cmd, const char *arg, unsigned *out);
/* --store DIR, else $CRCUDA_STORE, else ~/.local/share/crcuda/store. 0 or -1 (message printed). */
int ctl_store_dir(const char *given, char *out, size_t len);
/* --daemon ADDR, else $CRCUDA_SOCKET, else /tmp/crcuda-UID/crcudad.sock. */
int ctl_daemon_addr(const char *given, char *out, size_t len);
/* CRIU: $CRCUDA_CRIU, else the first criu on $PATH if it is >= 4.1, else the configured one
 * (CRCUDA_CRIU_DEFAULT; by default the project's .deps/criu/bin/criu). 0, or -1 (message printed). */
int ctl_find_criu(char *out, size_t len);
/* The directory crcudactl's executable is in: 0 or -errno. */
int ctl_self_dir(char *buf, size_t len);
/* The directory holding crcuda_plugin.so: $CRCUDA_CRIU_PLUGIN_DIR, else beside crcudactl. */
int ctl_find_plugin_dir(char *out, size_t len);
/* A checkpoint that SIGINT/SIGTERM may cancel while CRIU runs (ctl_cancel_catch). link is the
 * plugin's CRCUDA_CKPT_DECISION: symlink(2) to "cancel" there wins unless CRIU's post-dump script made
 * it "commit" first. state says what came of a request. */
enum ctl_cancel_state { CTL_CANCEL_NONE, CTL_CANCELLED, CTL_CANCEL_TOO_LATE };
struct ctl_cancel {
	const char *link;
	enum ctl_cancel_state state;
};
/* Seconds CRIU has, after a cancel, to let the tasks go by itself before it is killed. */
#define CTL_CANCEL_GRACE_S 10
#define CTL_STR_(x)	   #x
#define CTL_STR(x)	   CTL_STR_(x)
/* SIGINT and SIGTERM received since ctl_cancel_catch(true) (which catches them; false: default). */
#include <signal.h>
extern volatile sig_atomic_t ctl_cancel_requested;
void ctl_cancel_catch(bool on);
/* Runs argv (env: extra NAME=VALUE strings) with stdout/stderr into out_log, killing it after
 * timeout_s (0: never); with progress, prints the plugin's phase (from report) on stderr while it
 * takes long. With cancel (NULL: none), a SIGINT/SIGTERM caught meanwhile cancels the checkpoint (see
 * struct ctl_cancel). Returns its exit status, 128+signal, or -1. */
int ctl_run_criu(char *const argv[], char *const env[], const char *out_log, const char *report,
		 const char *what, unsigned timeout_s, bool progress, struct ctl_cancel *cancel);
/* The nth (from 0) "KEY value" line of the plugin's report: value into out. 0 or -1. */
int ctl_report_get(const char *report, const char *key, int nth, char *out, size_t len);
/* The token for a remote daemon: the first line of file, else $CRCUDA_TOKEN when file is NULL ("" when
 * neither). Its length, or -1 (message printed when the file cannot be read). */
int ctl_read_token(const char *file, char *out, size_t len);
/* Where a remote daemon's token comes from: --token-file (given), else $CRCUDA_TOKEN (NULL: read it
 * with ctl_read_token), else $CRCUDA_TOKEN_FILE; NULL also when none is set. */
const char *ctl_token_file(const char *given);
/* The signals a waiting crcudactl passes on to its program (0-terminated). */
extern const int ctl_forward_signals[];
/* A wait status as a shell says it: the exit code, or 128+N for signal N. */
int ctl_exit_status(int status);
/* Waits for the program pid (our child), passing ctl_forward_signals on to it; returns its status as
 * ctl_exit_status. A pid that is not our child is waited for through /proc, and 1 returned. */
int ctl_wait_program(pid_t pid, const char *what);
/* Continues the process tree rooted at pid, which CRIU left stopped (--leave-stopped); or kills it. */
void ctl_continue_tree(pid_t pid);
void ctl_kill_tree(pid_t pid);
/* Progress in bytes of a checkpoint or restore, from what pid's worker on daemon (token: a TCP one's,
 * else NULL) publishes: with on, between begin and end a thread polls it and prints a line a second
 * ("checkpoint: 3.2 GiB of 8.0 GiB (40%), 9.80 GB/s") on stderr while bytes move, and the final one at
 * end. end: true with the last figures in *out (may be NULL) when the work was seen. */
#include "crcuda/ctl.h"
void ctl_progress_begin(const char *what, const char *daemon, const char *token, pid_t pid, bool on);
bool ctl_progress_end(struct crc_ctl_progress *out);
/* The line for p, as above (without "crcudactl: "). */
void ctl_progress_line(const char *what, const struct crc_ctl_progress *p, char *out, size_t len);
/* Prints CRIU's "Error (...)" lines of log (at most max) on stderr. */
void ctl_show_criu_errors(const char *log, int max);
/* How CRIU keeps established TCP connections quiet while they are dumped and restored: "iptables"
 * where iptables is installed, else "skip" (no lock: safe for connections between processes of the
 * dumped tree, which are all stopped); CRCUDA_NETWORK_LOCK overrides. */
const char *ctl_network_lock(void);
/* Whether a line of the file holds what (a missing file holds nothing). */
bool ctl_file_contains(const char *path, const char *what);
/* Whether a line of the file holds what and, after it, and_then (NULL: anything). */
bool ctl_file_line_has(const char *path, const char *what, const char *and_then);
/* The storage error (no space, I/O error, quota, read-only) CRIU's log shows among its errors, as
 * strerror says it, into out: true, or false when it shows none. */
bool ctl_criu_storage_error(const char *log, char *out, size_t len);

#endif
