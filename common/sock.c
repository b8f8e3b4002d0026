#define LOG_PREFIX "sock: "
#include <dirent.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include "crcuda/errno.h"
#include "crcuda/log.h"
#include "crcuda/sock.h"
#include "crcuda/tls.h"

int crc_sock_default_path(char *buf, size_t len)
{
	const char *env = getenv("CRCUDA_SOCKET");
	int n = env && *env ? snprintf(buf, len, "%s", env)
			    : snprintf(buf, len, "/tmp/crcuda-%u/crcudad.sock", (unsigned)getuid());
	return n > 0 && (size_t)n < len ? 0 : CRC_EINVAL;
}

static int unix_addr(const char *path, struct sockaddr_un *sa)
{
	memset(sa, 0, sizeof(*sa));
	sa->sun_family = AF_UNIX;
	if (strlen(path) >= sizeof(sa->sun_path)) {
		pr_err("socket path too long: %s", path);
		return CRC_EINVAL;
	}
	strcpy(sa->sun_path, path);
	return 0;
}

/* The daemon's socket directory must be its own: a directory (not a symlink) of this uid that no one
 * else may write to, or another user could replace the socket, or read what it names. */
static int check_sock_dir(const char *dir)
{
	uid_t me = geteuid();
	struct stat st;

	if (lstat(dir, &st)) {
		int rc = -errno;

		pr_perror("socket directory %s", dir);
		return rc;
	}
	if (S_ISLNK(st.st_mode)) {
		pr_err("the socket directory %s is a symbolic link: refusing it (give a directory of uid "
		       "%u that only it may write to)",
		       dir, (unsigned)me);
		return CRC_EPERM;
	}
	if (!S_ISDIR(st.st_mode)) {
		pr_err("the socket directory %s is not a directory", dir);
		return CRC_EPERM;
	}
	if (st.st_uid != me) {
		pr_err("the socket directory %s belongs to uid %u, not to crcudad's uid %u: refusing it "
		       "(remove it, or give another with --socket)",
		       dir, (unsigned)st.st_uid, (unsigned)me);
		return CRC_EPERM;
	}
	if (st.st_mode & (S_IWGRP | S_IWOTH)) {
		pr_err("the socket directory %s is writable by others (mode %04o): refusing it (give a "
		       "directory only uid %u may write to with --socket, or chmod go-w it if it is that)",
		       dir, (unsigned)(st.st_mode & 07777), (unsigned)me);
		return CRC_EPERM;
	}
	return 0;
}

int crc_unix_listen(const char *path)
{
	struct sockaddr_un sa;
	int rc = unix_addr(path, &sa);
	if (rc)
		return rc;
	/* The directory is private to the user: a first line of defence before SO_PEERCRED. */
	char dir[sizeof(sa.sun_path)];
	strcpy(dir, path);
	char *slash = strrchr(dir, '/');
	if (!slash)
		strcpy(dir, ".");
	else if (slash == dir)
		dir[1] = 0;
	else
		*slash = 0;
	if (slash && slash != dir && mkdir(dir, 0700) && errno != EEXIST) {
		rc = -errno;
		pr_perror("mkdir %s", dir);
		return rc;
	}
	rc = check_sock_dir(dir);
	if (rc)
		return rc;
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	unlink(path);
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) || listen(fd, 64)) {
		rc = -errno;
		pr_perror("listen on %s", path);
		close(fd);
		return rc;
	}
	return fd;
}

int crc_unix_connect(const char *path)
{
	struct sockaddr_un sa;
	int rc = unix_addr(path, &sa);
	if (rc)
		return rc;
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa))) {
		rc = -errno;
		close(fd);
		return rc;
	}
	return fd;
}

int crc_unix_peer(int fd, struct crc_peer *peer)
{
	struct ucred cred;
	socklen_t len = sizeof(cred);
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len))
		return -errno;
	peer->pid = cred.pid;
	peer->uid = cred.uid;
	peer->gid = cred.gid;
	return 0;
}

int crc_unix_check_peer(int fd, struct crc_peer *peer)
{
	int rc = crc_unix_peer(fd, peer);
	if (rc)
		return rc;
	if (peer->uid != getuid() && peer->uid != 0) {
		pr_warn("refusing client pid %d: uid %u is not the daemon's uid %u", (int)peer->pid,
			(unsigned)peer->uid, (unsigned)getuid());
		return CRC_EPERM;
	}
	return 0;
}

bool crc_task_connected_to(pid_t pid, const char *path)
{
	return crc_task_socket_to(pid, path) != 0;
}

uint64_t crc_task_socket_to(pid_t pid, const char *path)
{
	struct dirent *de;
	char dir[64], link[64], fdpath[64 + sizeof(de->d_name)];
	uint64_t found = 0;
	DIR *d;
	int pidfd;

	snprintf(dir, sizeof(dir), "/proc/%d/fd", (int)pid);
	pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
	if (pidfd < 0 || !(d = opendir(dir))) {
		if (pidfd >= 0)
			close(pidfd);
		return false;
	}
	while (!found && (de = readdir(d))) {
		struct sockaddr_un sa = {0};
		socklen_t len = sizeof(sa);
		ssize_t n;
		int fd;

		snprintf(fdpath, sizeof(fdpath), "%s/%s", dir, de->d_name);
		n = readlink(fdpath, link, sizeof(link) - 1);
		if (n <= 0 || (link[n] = 0, strncmp(link, "socket:", 7)))
			continue;
		fd = (int)syscall(SYS_pidfd_getfd, pidfd, atoi(de->d_name), 0);
		if (fd < 0)
			continue;
		if (getpeername(fd, (struct sockaddr *)&sa, &len) == 0 && sa.sun_family == AF_UNIX &&
		    len > offsetof(struct sockaddr_un, sun_path) &&
		    !strncmp(sa.sun_path, path, sizeof(sa.sun_path)))
			found = strtoull(link + 8, NULL, 10); /* "socket:[INODE]" */
		close(fd);
	}
	closedir(d);
	close(pidfd);
	return found;
}

int crc_sock_send_fds(int fd, const void *buf, size_t len, const int *fds, int nfds)
{
	union {
		char buf[CMSG_SPACE(sizeof(int) * 8)];
		struct cmsghdr align;
	} u;
	struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};
	struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
	if (nfds < 0 || nfds > 8)
		return CRC_EINVAL;
	if (nfds) {
		memset(&u, 0, sizeof(u));
		msg.msg_control = u.buf;
		msg.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
		struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
		memcpy(CMSG_DATA(c), fds, sizeof(int) * (size_t)nfds);
	}
	ssize_t n;
	do
		n = sendmsg(fd, &msg, MSG_NOSIGNAL);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	if ((size_t)n < len)
		return crc_sock_write_all(fd, (const char *)buf + n, len - (size_t)n);
	return 0;
}

int crc_sock_recv_fds(int fd, void *buf, size_t len, int *fds, int max_fds, int *nfds)
{
	union {
		char buf[CMSG_SPACE(sizeof(int) * 8)];
		struct cmsghdr align;
	} u;
	struct iovec iov = {.iov_base = buf, .iov_len = len};
	struct msghdr msg = {
	    .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof(u.buf)};
	*nfds = 0;
	ssize_t n;
	do
		n = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	if (n == 0)
		return CRC_EDAEMON;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		int count = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
		int *in = (int *)CMSG_DATA(c);
		for (int i = 0; i < count; i++) {
			if (*nfds < max_fds)
				fds[(*nfds)++] = in[i];
			else
				close(in[i]);
		}
	}
	if ((size_t)n < len)
		return crc_sock_read_all(fd, (char *)buf + n, len - (size_t)n);
	return 0;
}

int crc_sock_write_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;
	int rc;

	if (crc_tls_write_all(fd, buf, len, &rc))
		return rc;
	while (len) {
		ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return errno == EPIPE || errno == ECONNRESET ? CRC_EDAEMON : -errno;
		}
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

int crc_sock_read_all(int fd, void *buf, size_t len)
{
	char *p = buf;
	int rc;

	if (crc_tls_read_all(fd, buf, len, &rc))
		return rc;
	while (len) {
		ssize_t n = recv(fd, p, len, 0);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return errno == ECONNRESET ? CRC_EDAEMON : -errno;
		}
		if (n == 0)
			return CRC_EDAEMON;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* Splits "HOST:PORT" (HOST may be empty or a [v6] literal). */
static int split_hostport(const char *s, char *host, size_t hlen, char *port, size_t plen)
{
	const char *colon = strrchr(s, ':');
	if (!colon || !colon[1])
		return CRC_EINVAL;
	size_t n = (size_t)(colon - s);
	if (n && s[0] == '[' && colon[-1] == ']') {
		s++;
		n -= 2;
	}
	if (n >= hlen || strlen(colon + 1) >= plen)
		return CRC_EINVAL;
	memcpy(host, s, n);
	host[n] = 0;
	strcpy(port, colon + 1);
	return 0;
}

static int tcp_open(const char *hostport, int listening)
{
	char host[256], port[32];
	if (split_hostport(hostport, host, sizeof(host), port, sizeof(port))) {
		pr_err("expected HOST:PORT, got '%s'", hostport);
		return CRC_EINVAL;
	}
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = listening ? AI_PASSIVE : 0};
	struct addrinfo *res;
	int gai = getaddrinfo(host[0] ? host : NULL, port, &hints, &res);
	if (gai) {
		pr_err("cannot resolve '%s': %s", hostport, gai_strerror(gai));
		return CRC_EINVAL;
	}
	int fd = -1, rc = CRC_EDAEMON;
	for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
		fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
		if (fd < 0)
			continue;
		int one = 1;
		if (listening) {
			setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
			if (!bind(fd, ai->ai_addr, ai->ai_addrlen) && !listen(fd, 64))
				break;
		} else if (!connect(fd, ai->ai_addr, ai->ai_addrlen)) {
			setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
			break;
		}
		rc = -errno;
		close(fd);
		fd = -1;
	}
	freeaddrinfo(res);
	if (fd < 0)
		pr_err("cannot %s %s: %s", listening ? "listen on" : "connect to", hostport,
		       crc_strerror(rc));
	return fd >= 0 ? fd : rc;
}

int crc_tcp_connect(const char *hostport)
{
	return tcp_open(hostport, 0);
}

int crc_tcp_listen(const char *addrport)
{
	return tcp_open(addrport, 1);
}
