/* Descriptors passed between the processes of a test program over a unix socket (SCM_RIGHTS), as
 * NCCL and simpleIPC pass shareable handles. Exit 1 on failure: the callers are tests. */
#ifndef CRCUDA_TESTS_FDPASS_H
#define CRCUDA_TESTS_FDPASS_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

static inline void fdpass_send(int sock, int fd, const char *who)
{
	char byte = 'f';
	struct iovec iov = {.iov_base = &byte, .iov_len = 1};
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} u;
	struct msghdr mh = {
	    .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof(u.buf)};
	struct cmsghdr *c = CMSG_FIRSTHDR(&mh);

	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &fd, sizeof(int));
	if (sendmsg(sock, &mh, 0) != 1) {
		fprintf(stderr, "%s: sendmsg: ", who);
		perror(NULL);
		exit(1);
	}
}

static inline int fdpass_recv(int sock, const char *who)
{
	char byte;
	struct iovec iov = {.iov_base = &byte, .iov_len = 1};
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} u;
	struct msghdr mh = {
	    .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof(u.buf)};
	struct cmsghdr *c;
	int fd = -1;

	if (recvmsg(sock, &mh, 0) != 1 || !(c = CMSG_FIRSTHDR(&mh)) || c->cmsg_type != SCM_RIGHTS) {
		fprintf(stderr, "%s: no descriptor from the other process\n", who);
		exit(1);
	}
	memcpy(&fd, CMSG_DATA(c), sizeof(int));
	return fd;
}

#endif
