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

/* Prints "crcudactl: " + message on stderr. */
void ctl_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Dumps a JSON value on stdout (indented, newline) and drops the reference. Returns 0 or -1. */
int ctl_json_print(json_t *v);

#endif
