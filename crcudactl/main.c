/* crcudactl: the user's tool. Global options, then one subcommand from the table below; each
 * subcommand lives in its own cmd_*.c and parses its own options. */
#include <getopt.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "crc_store.h"
#include "crcuda/log.h"
#include "crcudactl.h"

static const struct ctl_cmd {
	const char *name;
	ctl_cmd_fn fn;
	const char *summary;
} commands[] = {
    {"run", cmd_run, "run a program under crcuda (starts a local crcudad when none answers)"},
    {"checkpoint", cmd_checkpoint, "checkpoint a program run under crcuda (CRIU + the device state)"},
    {"restore", cmd_restore, "restore a checkpoint (locally, or with --remote onto another GPU host)"},
    {"ls", cmd_ls, "list the checkpoints in the store and the sessions of the daemon"},
    {"inspect", cmd_inspect, "show a checkpoint: regions, metadata, CRIU images, journal"},
    {"status", cmd_status, "the state of a program's session (running, quiesced, checkpointed)"},
    {"suspend", cmd_suspend, "free a program's GPU (its device memory saved) while it stays alive"},
    {"resume", cmd_resume, "give a suspended program its GPU back; it continues where it stopped"},
    {"rm", cmd_rm, "remove checkpoints (manifest, CRIU images, chunks no other one needs)"},
    {"export", cmd_export, "write a checkpoint as one self-contained stream (for another node's store)"},
    {"import", cmd_import, "read a checkpoint that export wrote into the store"},
    {"migrate", cmd_migrate, "move a running program to another host (pre-copy, then a short stop)"},
    {"receive", cmd_receive, "the destination of migrate: takes programs into this host's store"},
    {"store", cmd_store, "list, inspect, verify and garbage-collect the checkpoint store"},
};

/* The first error of the command, and whether it printed a JSON document: a failed --json command
 * still prints one (its error) on stdout. */
static char first_error[2048];
static bool json_printed;

void ctl_error(const char *fmt, ...)
{
	char msg[2048];
	const char *why = crc_log_last_error();
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	/* The library's own reason, when its log lines are not shown (-v shows them). */
	if (why[0] && crc_log_level() == CRC_LOG_SILENT && !strstr(msg, why)) {
		fprintf(stderr, "crcudactl: %s (%s)\n", msg, why);
		if (!first_error[0])
			snprintf(first_error, sizeof(first_error), "%.1500s (%.500s)", msg, why);
	} else {
		fprintf(stderr, "crcudactl: %s\n", msg);
		if (!first_error[0])
			snprintf(first_error, sizeof(first_error), "%s", msg);
	}
	crc_log_clear_last_error();
}

int ctl_json_print(json_t *v)
{
	if (!v)
		return -1;
	json_printed = true;
	int rc = json_dumpf(v, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
	fputc('\n', stdout);
	json_decref(v);
	return rc;
}

static void usage(FILE *f)
{
	fprintf(f, "Usage: crcudactl [OPTIONS] COMMAND [ARGS...]\n"
		   "\n"
		   "Transparent checkpoint/restart for CUDA applications.\n"
		   "\n"
		   "Commands:\n");
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
	fprintf(f, "\n"
		   "Options:\n"
		   "  -h, --help     show this help (COMMAND --help for a command's own)\n"
		   "  -V, --version  print the version\n"
		   "  -v, --verbose  the library's log lines too (warnings and progress; repeat for debug)\n"
		   "  -q, --quiet    crcudactl's own messages only (the default)\n"
		   "      --json     machine-readable output on stdout (also accepted after COMMAND)\n"
		   "\n"
		   "Environment:\n"
		   "  CRCUDA_STORE      store directory (default ~/.local/share/crcuda/store)\n"
		   "  CRCUDA_LOG_LEVEL  error|warn|info|debug; CRCUDA_LOG_FILE: log to a file\n"
		   "\n"
		   "Exit status:\n"
		   "  0  success\n"
		   "  1  failure (including a store that verify finds damaged)\n"
		   "  2  usage error (unknown command or option, missing argument)\n"
		   "  126, 127  run: the program cannot be run, or is not there (as a shell says)\n"
		   "  other     run, restore --wait: the program's own (128+N when signal N ended it)\n");
}

int main(int argc, char **argv)
{
	enum { OPT_JSON = 256 };
	static const struct option longopts[] = {
	    {"help", no_argument, NULL, 'h'},	   {"version", no_argument, NULL, 'V'},
	    {"verbose", no_argument, NULL, 'v'},   {"quiet", no_argument, NULL, 'q'},
	    {"json", no_argument, NULL, OPT_JSON}, {NULL, 0, NULL, 0},
	};
	struct ctl_opts opts = {0};
	/* One line of crcudactl's own per failure; the library's log lines (with their prefixes) on -v. */
	int level = CRC_LOG_SILENT, c;

	/* CRIU runs us as `crcudactl checkpoint`'s action script (no arguments). */
	if (argc == 1 && getenv("CRTOOLS_SCRIPT_ACTION") && getenv("CRCUDA_CKPT_DECISION"))
		return ctl_action_script();
	/* "+": stop at the command name; what follows belongs to the command. */
	while ((c = getopt_long(argc, argv, "+hVvq", longopts, NULL)) != -1) {
		switch (c) {
		case 'h':
			usage(stdout);
			return CTL_EXIT_OK;
		case 'V':
			printf("crcudactl %s (store schema %d)\n", CRCUDA_VERSION, CRC_STORE_SCHEMA_VERSION);
			return CTL_EXIT_OK;
		case 'v':
			level = level == CRC_LOG_SILENT ? CRC_LOG_INFO
				: level < CRC_LOG_DEBUG ? level + 1
							: level;
			break;
		case 'q':
			level = CRC_LOG_SILENT;
			break;
		case OPT_JSON:
			opts.json = true;
			break;
		default:
			usage(stderr);
			return CTL_EXIT_USAGE;
		}
	}
	if (level != CRC_LOG_SILENT || !getenv("CRCUDA_LOG_LEVEL"))
		crc_log_set_level(level);
	if (optind >= argc) {
		ctl_error("no command given");
		usage(stderr);
		return CTL_EXIT_USAGE;
	}
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++) {
		if (strcmp(argv[optind], commands[i].name))
			continue;
		int sub_argc = argc - optind;
		char **sub_argv = argv + optind;
		optind = 0; /* reset getopt for the command's own parsing */
		int rc = commands[i].fn(sub_argc, sub_argv, &opts);
		/* A script asking for JSON gets a document whatever happened. */
		if (rc != CTL_EXIT_OK && opts.json && !json_printed)
			ctl_json_print(json_pack(
			    "{s:i, s:s, s:s, s:i}", "version", 1, "command", commands[i].name, "error",
			    first_error[0] ? first_error : "failed (no message)", "exit", rc));
		return rc;
	}
	ctl_error("unknown command '%s'", argv[optind]);
	usage(stderr);
	return CTL_EXIT_USAGE;
}
