/* The CUDA IPC registry (link.h): the device memory sessions exported, as descriptors kept under
 * random keys, handed to other sessions' workers that ask by key, which hold the export until they
 * close it. One thread per worker serves its socket; a worker that hangs up (its session ended, or it
 * died) takes its exports with it, as a process's exit does natively, and lets go of what it held. An
 * exporter being checkpointed freezes its exports while nobody else holds one: a GET waits until it
 * thaws (resumed) or goes (killed after its checkpoint). */
#define LOG_PREFIX "crcudad: "
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "crcuda/errno.h"
#include "crcuda/log.h"
#include "front.h"

/* A worker that opened an export (a GET), until it closes it (CLOSE) or hangs up. */
struct hold {
	int sock;
	uint64_t session_id; /* the holder's session */
	unsigned n;
	struct hold *next;
};

struct export
{
	uint64_t key, size, session_id;
	int fd;
	int owner;	    /* the exporting worker's socket */
	bool frozen;	    /* its exporter is being checkpointed: GETs wait */
	struct hold *holds; /* the workers that have it open */
	struct export *next;
};

static pthread_mutex_t ipc_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ipc_thawed = PTHREAD_COND_INITIALIZER;
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
	while (e->holds) {
		struct hold *h = e->holds;

		e->holds = h->next;
		free(h);
	}
	close(e->fd);
	free(e);
	pthread_cond_broadcast(&ipc_thawed);
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
		e->key = m->key;
		e->size = m->size;
		e->session_id = m->session_id;
		e->fd = fd;
		e->owner = sock;
		e->next = exports;
		exports = e;
	}
	pthread_mutex_unlock(&ipc_lock);
	return e ? 0 : CRC_ENOMEM;
}

/* A descriptor of export r->key for sock, which holds it from then on (ipc_lock held). */
static int get(int sock, struct crc_ipc_msg *r, int *give)
{
	struct export *e;
	struct hold *h;

	/* An exporter being checkpointed: the answer waits for the checkpoint's end (a restore would
	 * replace its memory, which no importer may have opened in between). */
	while ((e = *find(r->key)) && e->frozen && e->owner != sock)
		pthread_cond_wait(&ipc_thawed, &ipc_lock);
	if (!e)
		return CRC_ENOTFOUND;
	for (h = e->holds; h && h->sock != sock; h = h->next)
		;
	if (!h) {
		h = calloc(1, sizeof(*h));
		if (!h)
			return CRC_ENOMEM;
		h->sock = sock;
		h->session_id = r->requester;
		h->next = e->holds;
		e->holds = h;
	}
	*give = fcntl(e->fd, F_DUPFD_CLOEXEC, 0);
	if (*give < 0)
		return -errno;
	h->n++;
	r->size = e->size;
	r->session_id = e->session_id;
	return 0;
}

/* sock lets go of key once (ipc_lock held). */
static int release(int sock, uint64_t key)
{
	struct export *e = *find(key);

	for (struct hold **hp = e ? &e->holds : NULL; hp && *hp; hp = &(*hp)->next) {
		struct hold *h = *hp;

		if (h->sock != sock)
			continue;
		if (!--h->n) {
			*hp = h->next;
			free(h);
		}
		return 0;
	}
	return CRC_ENOTFOUND;
}

static bool in_group(const struct crc_ipc_msg *m, uint64_t session_id)
{
	for (uint32_t i = 0; i < m->ngroup && i < CRC_IPC_GROUP_MAX; i++)
		if (session_id && m->group[i] == session_id)
			return true;
	return false;
}

/* sock's exports, all frozen (0), unless another worker holds one (CRC_EBUSY, its key in *key) that is
 * not checkpointed with it (m's group: their restore opens the restored export again). */
static int freeze(int sock, const struct crc_ipc_msg *m, uint64_t *key)
{
	for (struct export *e = exports; e; e = e->next) {
		if (e->owner != sock)
			continue;
		for (struct hold *h = e->holds; h; h = h->next) {
			if (h->sock != sock && !in_group(m, h->session_id)) {
				*key = e->key;
				return CRC_EBUSY;
			}
		}
	}
	for (struct export *e = exports; e; e = e->next)
		if (e->owner == sock)
			e->frozen = true;
	return 0;
}

static void thaw(int sock)
{
	for (struct export *e = exports; e; e = e->next)
		if (e->owner == sock)
			e->frozen = false;
	pthread_cond_broadcast(&ipc_thawed);
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
		r.requester = m.requester;
		if (m.op == CRC_IPC_PUT) {
			r.status = put(sock, &m, nfds ? fds[0] : -1);
			if (r.status && nfds)
				close(fds[0]);
			nfds = 0;
		} else {
			pthread_mutex_lock(&ipc_lock);
			switch (m.op) {
			case CRC_IPC_GET:
				r.status = get(sock, &r, &give);
				break;
			case CRC_IPC_CLOSE:
				r.status = release(sock, m.key);
				break;
			case CRC_IPC_DROP: {
				struct export **pp = find(m.key);

				if (*pp && (*pp)->owner == sock)
					drop(pp);
				else
					r.status = CRC_ENOTFOUND;
				break;
			}
			case CRC_IPC_FREEZE:
				r.status = freeze(sock, &m, &r.key);
				break;
			case CRC_IPC_THAW:
				thaw(sock);
				break;
			default:
				r.status = CRC_EINVAL;
				break;
			}
			pthread_mutex_unlock(&ipc_lock);
		}
		for (int i = 0; i < nfds; i++)
			close(fds[i]);
		n = crc_sock_send_fds(sock, &r, sizeof(r), &give, give >= 0);
		if (give >= 0)
			close(give);
		if (n < 0)
			break;
	}
	/* Gone: its exports go (as a process's exit takes them natively), and so do its holds. */
	pthread_mutex_lock(&ipc_lock);
	for (struct export **pp = &exports; *pp;) {
		if ((*pp)->owner == sock) {
			drop(pp);
			continue;
		}
		while (release(sock, (*pp)->key) == 0)
			;
		pp = &(*pp)->next;
	}
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
