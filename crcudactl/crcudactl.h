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
int cmd_inspect(int argc, char **argv, struct ctl_opts *opts);

/* Prints "crcudactl: " + message on stderr. */
void ctl_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Dumps a JSON value on stdout (indented, newline) and drops the reference. Returns 0 or -1. */
int ctl_json_print(json_t *v);

/* ---- cr_util.c: shared by checkpoint, restore, ls and inspect ---- */
#include <stddef.h>

/* CLOCK_MONOTONIC seconds. */
double ctl_now(void);
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
/* Runs argv (env: extra NAME=VALUE strings) with stdout/stderr into out_log, killing it after
 * timeout_s (0: never); with progress, prints the plugin's phase (from report) on stderr while it
 * takes long. Returns its exit status, 128+signal, or -1. */
int ctl_run_criu(char *const argv[], char *const env[], const char *out_log, const char *report,
		 const char *what, unsigned timeout_s, bool progress);
/* The nth (from 0) "KEY value" line of the plugin's report: value into out. 0 or -1. */
int ctl_report_get(const char *report, const char *key, int nth, char *out, size_t len);
/* The token for a remote daemon: the first line of file, else $CRCUDA_TOKEN when file is NULL ("" when
 * neither). Its length, or -1 (message printed when the file cannot be read). */
int ctl_read_token(const char *file, char *out, size_t len);
/* Where a remote daemon's token comes from: --token-file (given), else $CRCUDA_TOKEN (NULL: read it
 * with ctl_read_token), else $CRCUDA_TOKEN_FILE; NULL also when none is set. */
const char *ctl_token_file(const char *given);
/* Prints CRIU's "Error (...)" lines of log (at most max) on stderr. */
void ctl_show_criu_errors(const char *log, int max);

#endif
