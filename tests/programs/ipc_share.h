/* What the IPC test programs share: descriptors passed between processes over a unix socket
 * (SCM_RIGHTS), as NCCL and simpleIPC pass shareable handles, and VMM memory mapped where a device can
 * reach it. Exit 1 on failure: the callers are tests. */
#ifndef CRCUDA_TESTS_IPC_SHARE_H
#define CRCUDA_TESTS_IPC_SHARE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "cuda_test.h"

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

/* A reservation of size bytes with h mapped and made readable and writable by device dev. */
static inline CUdeviceptr vmm_map_on(CUmemGenericAllocationHandle h, size_t size, CUdevice dev)
{
	CUmemAccessDesc access = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev},
				  .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
	CUdeviceptr p;

	CU_CHECK(cuMemAddressReserve(&p, size, 0, 0, 0));
	CU_CHECK(cuMemMap(p, size, 0, h, 0));
	CU_CHECK(cuMemSetAccess(p, size, &access, 1));
	return p;
}

#endif
