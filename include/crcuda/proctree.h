/* A process and its descendants, as /proc shows them. */
#ifndef CRCUDA_PROCTREE_H
#define CRCUDA_PROCTREE_H

#include <stddef.h>
#include <sys/types.h>

/* The parent of pid (/proc/PID/stat), 0 where it cannot be read. */
pid_t crc_proc_parent(pid_t pid);
/* root and every process below it (what `criu dump -t root` dumps), root first, into a new *out (to
 * free; NULL, with 0, on memory exhaustion): their number. */
size_t crc_proc_tree(pid_t root, pid_t **out);
/* Sends sig to root and to every process below it; best effort. */
void crc_signal_tree(pid_t root, int sig);

#endif
