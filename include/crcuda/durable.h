/* Making a directory of files durable (CRIU's images before a checkpoint commits). */
#ifndef CRCUDA_DURABLE_H
#define CRCUDA_DURABLE_H

/* fsyncs every regular file directly in the directory dir_fd, then the directory itself. Returns 0,
 * or -errno of the first failure (and stops there). Entries that cannot be opened as regular files
 * (a socket CRIU left) have nothing to sync and are skipped. dir_fd stays open. */
int crc_sync_dir_files(int dir_fd);

#endif
