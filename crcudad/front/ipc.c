/* The CUDA IPC registry (link.h): the device memory sessions exported, as descriptors kept under
 * random keys, handed to other sessions' workers that ask by key. One thread per worker serves its
 * socket; a worker that hangs up (its session ended, or it died) takes its exports with it, as a
 * process's exit does natively. */
#define LOG_PREFIX "crcudad: "
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "crcuda/errno.h"
#include "crcuda/log.h"
#include "front.h"

struct export
{
	uint64_t key, size, session_id;
	int fd;
	int owner; /* the exporting worker's socket */
	struct export *next;
};

static pthread_mutex_t ipc_lock = PTHREAD_MUTEX_INITIALIZER;
static struct export *exports;

static struct export **find(uint64_t key)
{
	struct export **pp = &exports;

	while (*pp && (*pp)->key != key)
		pp = &(*pp)->next;
	return pp;
}

static void drop(struct export **pp)
{
	struct export *e = *pp;

	*pp = e->next;
	close(e->fd);
	free(e);
}

static int put(int sock, const struct crc_ipc_msg *m, int fd)
{
	struct export *e;

	if (fd < 0 || !m->key)
		return CRC_EINVAL;
	pthread_mutex_lock(&ipc_lock);
	if (*find(m->key)) {
		pthread_mutex_unlock(&ipc_lock);
		return CRC_EEXIST;
	}
	e = calloc(1, sizeof(*e));
	if (e) {
		*e = (struct export){.key = m->key,
				     .size = m->size,
				     .session_id = m->session_id,
				     .fd = fd,
				     .owner = sock,
				     .next = exports};
		exports = e;
	}
	pthread_mutex_unlock(&ipc_lock);
	return e ? 0 : CRC_ENOMEM;
}

static void *serve(void *arg)
{
	int sock = (int)(intptr_t)arg;

	for (;;) {
		struct crc_ipc_msg m, r = {0};
		int fds[1], nfds = 0, give = -1;
		int n;

		n = crc_sock_recv_fds(sock, &m, sizeof(m), fds, 1, &nfds);
		if (n < 0)
			break;
		r.op = m.op;
		r.key = m.key;
		switch (m.op) {
		case CRC_IPC_PUT:
			r.status = put(sock, &m, nfds ? fds[0] : -1);
			if (r.status && nfds)
				close(fds[0]);
			nfds = 0;
			break;
		case CRC_IPC_GET: {
			struct export *e;

			pthread_mutex_lock(&ipc_lock);
			e = *find(m.key);
			if (!e)
				r.status = CRC_ENOTFOUND;
			else if ((give = fcntl(e->fd, F_DUPFD_CLOEXEC, 0)) < 0)
				r.status = -errno;
			else
				r.size = e->size, r.session_id = e->session_id;
			pthread_mutex_unlock(&ipc_lock);
			break;
		}
		case CRC_IPC_DROP: {
			struct export **pp;

			pthread_mutex_lock(&ipc_lock);
			pp = find(m.key);
			if (*pp && (*pp)->owner == sock)
				drop(pp);
			else
				r.status = CRC_ENOTFOUND;
			pthread_mutex_unlock(&ipc_lock);
			break;
		}
		default:
			r.status = CRC_EINVAL;
			break;
		}
		for (int i = 0; i < nfds; i++)
			close(fds[i]);
		n = crc_sock_send_fds(sock, &r, sizeof(r), &give, give >= 0);
		if (give >= 0)
			close(give);
		if (n < 0)
			break;
	}
	pthread_mutex_lock(&ipc_lock);
	for (struct export **pp = &exports; *pp;)
		if ((*pp)->owner == sock)
			drop(pp);
		else
			pp = &(*pp)->next;
	pthread_mutex_unlock(&ipc_lock);
	close(sock);
	return NULL;
}

int crc_ipc_serve_worker(int sock)
{
	pthread_t t;
	int rc = pthread_create(&t, NULL, serve, (void *)(intptr_t)sock);

	if (rc) {
		close(sock);
		return -rc;
	}
	pthread_detach(t);
	return 0;
}
