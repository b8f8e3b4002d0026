/* crcudad's front: accepts and authenticates connections, keeps the registry of workers (one process
 * per application session, link.h) and answers or routes control commands. It never loads the driver,
 * so nothing an application does to the GPU can reach it. */
#ifndef CRCUDA_FRONT_H
#define CRCUDA_FRONT_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "crcuda/chan.h"
#include "crcuda/ctl.h"
#include "crcuda/proto.h"
#include "crcuda/sock.h"
#include "link.h"

struct front {
	/* What every worker is started with. */
	char worker_exe[4096];
	char backend_lib[4096];
	uint64_t va_base, va_session;
	size_t ring_size;
	int log_level;
	unsigned pool; /* initialised workers kept waiting for an application */
	/* TCP authentication. */
	char token[CRC_TOKEN_MAX];
	size_t token_len;
	bool have_token;
	bool insecure; /* --insecure: plaintext TCP (else TLS, the token as the pre-shared key) */
	const char *tls_cert, *tls_key, *tls_ca; /* TLS with certificates instead of the token as key */
	struct crc_hello_reply proto;		 /* device facts, from the first worker */
	/* Open control connections: one is held by each suspended application (crcudactl suspend),
	 * whose session is in the store, not in a worker; --idle-exit waits for them too. */
	_Atomic unsigned controls;
};
extern struct front fr;

/* A worker process, and what the front knows of it. */
struct worker {
	pid_t pid;
	int link;		      /* our end of its link; hang-up: it exited */
	struct crc_worker_status *st; /* its status page */
	bool assigned;		      /* handed its application (or restore); else waiting in the pool */
	uint64_t session_id;	      /* the id given with the assignment */
	struct crc_peer peer;	      /* of the connection it was given */
	bool tcp;
	bool restore;	    /* assigned a restore: RESTORING until its session shows */
	uint64_t stage_key; /* staged a restore under this key (crc_ctl_stage); 0 when none or taken */
	unsigned refs;	    /* control threads using it: freed when they let go */
	bool gone;	    /* exited (reaped) */
	struct worker *next;
};

/* ---- workers.c ---------------------------------------------------------------------------------- */
/* Starts the first worker and waits until it is initialised (its device facts fill fr.proto). 0, or
 * an error printed. */
int crc_workers_start(void);
/* Tops the pool up; reaps workers whose link hung up (called from the accept loop's poll). */
void crc_workers_tend(void);
/* The link descriptors to watch for hang-ups, up to max; how many. */
unsigned crc_workers_pollfds(int *fds, unsigned max);
/* A worker for a new job (from the pool, else started now), assigned, with a new session id, held
 * (crc_worker_put). NULL: none could be started (why says so). */
struct worker *crc_worker_take(const struct crc_peer *peer, bool tcp, bool restore, char *why,
			       size_t why_len);
/* The live worker of a session, by client pid (the newest) or by session id; held. NULL: none. */
struct worker *crc_worker_find(pid_t pid, uint64_t session_id);
/* The worker that staged a restore under key for user uid (root: any), held (crc_worker_put); NULL
 * when none. take: the restore for pid is now its (the key is used up). */
struct worker *crc_worker_find_staged(uint64_t key, uid_t uid, bool take, pid_t pid);
/* Makes w the one a restore under key goes to: once the stage request is handed to it, so that the
 * worker always gets the stage before that restore. */
void crc_worker_set_stage_key(struct worker *w, uint64_t key);
void crc_worker_put(struct worker *w);
/* Hands a connection (fd, closed here either way) to a worker, with a message and trailing bytes. */
int crc_worker_hand(struct worker *w, struct crc_link_msg *m, int fd, const void *extra, size_t extra_len);
/* A consistent copy of a worker's session (seqlock); false when it has none to show (ended, idle). */
bool crc_worker_session(const struct worker *w, struct crc_ctl_session_wire *out);
/* The live sessions, for ls: up to max into out; how many. */
unsigned crc_workers_list(struct crc_ctl_session_wire *out, unsigned max);
/* Workers that serve a session (not the pool), for --idle-exit. */
unsigned crc_workers_busy(void);
/* Ends every worker (the front is stopping). */
void crc_workers_stop(void);

/* TLS connections (fd has a session) change hands: sends the client the key of its next handshake (as
 * struct crc_tls_handoff; as a CRC_OP_CTL_HANDOFF record answering req when req is given), forgets the
 * session and puts the key in m for the worker. Nothing to do without TLS. 0 or CRC_E*. */
int crc_front_handoff(int fd, struct crc_link_msg *m, const struct crc_msg_hdr *req);

/* ---- ipc.c -------------------------------------------------------------------------------------- */
/* Serves a worker's CUDA IPC registry socket (link.h) on a thread of its own, which closes it. 0 or
 * -errno (closed then too). */
int crc_ipc_serve_worker(int sock);

/* ---- control.c ---------------------------------------------------------------------------------- */
/* Serves a greeted control connection on a thread of its own. */
void crc_front_control(int fd, bool tcp, const struct crc_peer *peer);

#endif
