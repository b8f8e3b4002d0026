/* Sockets between libcrcuda, crcudad and crcudactl: a unix socket whose peer credentials are
 * checked (another user's process is refused), descriptor passing for the shared-memory rings,
 * and TCP for a remote GPU. All return 0 / a descriptor, or a negative CRC_E* / -errno. */
#ifndef CRCUDA_SOCK_H
#define CRCUDA_SOCK_H

#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

struct crc_peer {
	pid_t pid;
	uid_t uid;
	gid_t gid;
};

/* Default daemon socket: $CRCUDA_SOCKET, else /tmp/crcuda-<uid>/crcudad.sock. */
int crc_sock_default_path(char *buf, size_t len);

int crc_unix_listen(const char *path);
int crc_unix_connect(const char *path);
/* Credentials of the process at the other end of a unix socket (SO_PEERCRED). */
int crc_unix_peer(int fd, struct crc_peer *peer);
/* Refuses (CRC_EPERM) a peer whose uid is neither ours nor root's. */
int crc_unix_check_peer(int fd, struct crc_peer *peer);
/* Whether process pid holds a unix socket connected to the one listening at path (its descriptors,
 * duplicated through pidfd_getfd: needs the right to ptrace it). */
bool crc_task_connected_to(pid_t pid, const char *path);
/* The inode of such a socket of pid's (a child forked after connecting holds the same one), or 0. */
uint64_t crc_task_socket_to(pid_t pid, const char *path);

/* Sends len bytes and up to nfds descriptors in one message. */
int crc_sock_send_fds(int fd, const void *buf, size_t len, const int *fds, int nfds);
/* Receives exactly len bytes, and up to max_fds descriptors (*nfds set). */
int crc_sock_recv_fds(int fd, void *buf, size_t len, int *fds, int max_fds, int *nfds);

/* Writes/reads exactly len bytes (retrying on EINTR and short transfers); CRC_EDAEMON on EOF. */
int crc_sock_write_all(int fd, const void *buf, size_t len);
int crc_sock_read_all(int fd, void *buf, size_t len);

/* "HOST:PORT" -> a connected TCP socket with TCP_NODELAY. */
int crc_tcp_connect(const char *hostport);
/* "ADDR:PORT" or ":PORT" -> a listening socket. */
int crc_tcp_listen(const char *addrport);

#endif
