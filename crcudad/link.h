/* What crcudad's front and its GPU workers say to each other (the only header both include).
 *
 * The front (crcudad, front/) accepts connections, authenticates them and knows every session; it never
 * loads the driver. Each application session runs in a worker process of its own (crcudad-worker,
 * worker/) that owns that session's CUDA contexts and nothing else: a sticky error, a crash inside the
 * driver or a kill of one worker ends only its own application.
 *
 * A worker is started with two descriptors: CRC_LINK_FD, one end of a SOCK_SEQPACKET pair on which the
 * front hands it connections (one struct crc_link_msg each, with the connection's descriptor attached),
 * and CRC_LINK_STATUS_FD, a memfd holding struct crc_worker_status that the worker keeps current and the
 * front reads (for `crcudactl ls`, and to route control commands). The worker never writes to the link:
 * the front sees it end (hang-up) when the worker exits, whatever the cause. */
#ifndef CRCUDA_LINK_H
#define CRCUDA_LINK_H

#include <stdatomic.h>
#include <stdint.h>

#include "crcuda/proto.h"
#include "crcuda/sock.h"

#define CRC_LINK_FD	   3
#define CRC_LINK_STATUS_FD 4
/* The worker's end of a SOCK_SEQPACKET pair to the front's CUDA IPC registry (one struct
 * crc_ipc_msg each way, a descriptor attached where said). The front serves it on a thread of its
 * own and forgets the worker's exports when it hangs up. */
#define CRC_LINK_IPC_FD 5

enum crc_link_kind {
	CRC_LINK_CLIENT = 1, /* an application's connection, greeted (hello): serve it as the session */
	CRC_LINK_CONTROL,    /* a control connection for this worker's session, proxied by the front */
	CRC_LINK_RESTORE,    /* a control connection whose restore request (after the message) it serves */
	CRC_LINK_RECLAIM,    /* a detached TCP client taking its session back (hello: its ticket) */
	CRC_LINK_BULK,	     /* a bulk connection of the session (hello: its key; crcuda/proto.h) */
};

struct crc_link_msg {
	uint32_t kind; /* enum crc_link_kind */
	uint32_t tcp;
	uint64_t session_id; /* CLIENT, RESTORE: the id the front gives the new session */
	struct crc_peer peer;
	struct crc_hello hello; /* CLIENT, RECLAIM */
	uint32_t req_len;	/* RESTORE: bytes of the request (crc_msg_hdr + payload) after this */
	uint32_t tls;		/* the client makes a TLS handshake first, with key (crcuda/tls.h) */
	uint8_t key[32];
};
/* A restore request travels in the same datagram. */
#define CRC_LINK_MAX_REQ (48u * 1024)

enum crc_worker_phase {
	CRC_WORKER_STARTING = 0, /* loading the backend, cuInit, its context, the VA range */
	CRC_WORKER_READY,	 /* initialised, waiting for a connection (proto valid from here on) */
	CRC_WORKER_SERVING,	 /* has its session (or is restoring one) */
	CRC_WORKER_ENDED,	 /* its session ended; the process is going away */
	CRC_WORKER_FAILED,	 /* could not initialise (error says why) */
};

/* How far the worker's checkpoint or restore is (crcudactl's progress lines): bytes of device memory
 * handled (copied or found unchanged; uploaded) of total, in ns since it began (frozen at its end). */
struct crc_worker_progress {
	_Atomic uint32_t op;	 /* enum crc_ctl_progress_op; 0: none yet */
	_Atomic uint32_t active; /* 1 while it moves device memory (the front starts no worker then) */
	_Atomic uint64_t done, total, ns;
};

struct crc_worker_status {
	_Atomic uint32_t phase; /* enum crc_worker_phase */
	struct crc_worker_progress progress;
	/* Restores under way (a request's replay and upload, a lazy upload after it): the front starts no
	 * worker then either, the upload's copies and a starting worker sharing the CPUs and memory bus. */
	_Atomic uint32_t restores;
	_Atomic uint32_t seq; /* seqlock over session: odd while it is written */
	struct crc_ctl_session_wire session;
	char error[256];
	struct crc_hello_reply proto; /* the device facts every hello answers with */
};

/* CUDA IPC between sessions: the memory a session exports (cuIpcGetMemHandle) is a descriptor of its
 * device memory (cuMemExportToShareableHandle, POSIX fd) that the front keeps under a random key, the
 * key being what the application's handle names; another session's worker asks for it by key and maps
 * it (cuMemImportFromShareableHandle). */
enum crc_ipc_op {
	CRC_IPC_PUT = 1, /* key, size, session_id; the descriptor attached. Reply: status */
	CRC_IPC_GET,	 /* key. Reply: status, size, session_id; the descriptor attached on success. The
			    sender holds the export until it closes it or hangs up */
	CRC_IPC_DROP,	 /* key: the exporter freed the memory. Reply: status */
	CRC_IPC_CLOSE,	 /* key: an importer let go of what a GET gave it. Reply: status */
	CRC_IPC_FREEZE,	 /* the sender's exports, before its checkpoint: status 0 (GETs of them wait
			    from now on), or CRC_EBUSY when another worker holds one (its key), unless
			    that worker's session is checkpointed with it (group) */
	CRC_IPC_THAW,	 /* the sender's checkpoint is over: GETs go on. Reply: status */
};
#define CRC_IPC_GROUP_MAX 64 /* sessions checkpointed together (a process tree) */
struct crc_ipc_msg {
	uint32_t op;	     /* enum crc_ipc_op */
	int32_t status;	     /* replies: 0 or a negative CRC_E* (CRC_ENOTFOUND: no such export) */
	uint64_t key;	     /* the export */
	uint64_t size;	     /* its bytes */
	uint64_t session_id; /* the exporting session */
	uint64_t requester;  /* GET: the session asking */
	uint32_t ngroup;     /* FREEZE: the sessions checkpointed with the sender */
	uint64_t group[CRC_IPC_GROUP_MAX];
};

#endif
