/* crcudactl run's checkpoint mode (--checkpoint-on, --every, --keep): run_ckpt.c. */
#ifndef CRCUDACTL_RUN_CKPT_H
#define CRCUDACTL_RUN_CKPT_H

#include <signal.h>
#include <stdbool.h>

struct run_ckpt {
	sigset_t on;	       /* --checkpoint-on signals */
	sigset_t stop;	       /* those of them that take the final checkpoint */
	bool any;	       /* some signal named */
	unsigned every;	       /* --every, seconds (0: none) */
	unsigned keep;	       /* --keep N (0: keep all) */
	const char *store;     /* --store as given (NULL: the checkpoint's default) */
	const char *store_dir; /* the store, resolved (for --keep) */
	const char *lineage;   /* the program's CRCUDA_LINEAGE */
	const char *orig_ldlp; /* LD_LIBRARY_PATH before libcrcuda's directory was put first (NULL: unset) */
};

/* --checkpoint-on LIST into rc (adds to what is there). 0, or -1 with the reason printed. */
int run_ckpt_parse_signals(const char *arg, struct run_ckpt *rc);
/* --every DURATION (90, 90s, 10m, 2h) into seconds. 0, or -1 with the reason printed. */
int run_ckpt_parse_every(const char *arg, unsigned *secs);
/* Runs prog as a child and checkpoints it as rc says (the environment is set up already). Returns
 * crcudactl's exit status: 0 after the final checkpoint, else the program's (128+N for signal N). */
int run_ckpt_supervise(const struct run_ckpt *rc, char **prog);

#endif
