/* A process and its descendants, as /proc shows them. */
#ifndef CRCUDA_PROCTREE_H
#define CRCUDA_PROCTREE_H

#include <sys/types.h>

/* Sends sig to root and to every process below it (what `criu dump -t root` dumps); best effort. */
void crc_signal_tree(pid_t root, int sig);

#endif
