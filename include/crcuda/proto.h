/* The protocol between libcrcuda (the application's libcuda.so.1) and crcudad.
 *
 * Connection: the client connects to the daemon's unix socket (peer uid checked) or TCP port, sends
 * struct crc_hello and reads struct crc_hello_reply. Over unix the reply comes with one memfd (by
 * SCM_RIGHTS) holding two rings, requests then responses, each crc_ring_footprint(ring_size) bytes.
 * Over TCP the same records travel on the socket, each a struct crc_msg_hdr followed by its payload.
 *
 * Records: op is a crc_cu_id (a driver call, payload = struct crc_call_hdr + arguments) or a control
 * op (>= CRC_OP_CTL). A request with CRC_MSG_NOREPLY gets no response; its error, if any, is kept by
 * the daemon and returned by the next request that does get one (as the driver reports errors of
 * asynchronous work at the next synchronising call). Every other request gets exactly one final
 * response (same op and seq, payload = struct crc_reply_hdr + outputs), possibly preceded by data
 * records flagged CRC_MSG_MORE (device-to-host copies stream their bytes that way).
 *
 * Virtual handles: the daemon names every object it creates for a session (context, module, function,
 * stream...) with a crc_vhandle value, which the client hands to the application as the CUxxx pointer.
 * The same value names the same object after a restore, whatever the real handle becomes. */
#ifndef CRCUDA_PROTO_H
#define CRCUDA_PROTO_H

#include <stddef.h>
#include <stdint.h>

#include "crcuda/ring.h"

#define CRC_PROTO_MAGIC	  0x55435243u /* "CRCU" */
#define CRC_PROTO_VERSION 5u /* 5: staged restores; 4: TLS handoffs; 3: sessions listed with their worker */

#define CRC_MAX_DEVICES	    8
#define CRC_DEV_ATTR_SLOTS  160 /* > CU_DEVICE_ATTRIBUTE_MAX of CUDA 13 (checked where cuda.h is seen) */
#define CRC_TOKEN_MAX	    128
#define CRC_DEFAULT_RING    (16u << 20) /* data bytes per ring direction */
#define CRC_COPY_CHUNK	    (2u << 20)	/* bytes of a copy per record; several are in flight */
#define CRC_MAX_KPARAMS	    512
#define CRC_FUNC_ATTR_SLOTS 16 /* > CU_FUNC_ATTRIBUTE_MAX */

/* Default device VA range of a session (each session's worker is a process of its own, so every session
 * has the same one). Above ASan's allocator (0x600000000000..0x640000000000) and the simulated
 * device's arenas (0x5a0000000000..), below the mmap area (0x7f..). */
#define CRC_DEFAULT_VA_BASE    0x680000000000ull
#define CRC_DEFAULT_VA_SESSION (256ull << 30)
#define CRC_GRANULE	       (2ull << 20) /* device VA ranges are multiples of it */

enum crc_msg_flag {
	CRC_MSG_NOREPLY = 1u << 0, /* request: post and forget */
	CRC_MSG_MORE = 1u << 1,	   /* response: a data record; the final response follows */
};

/* Control ops: above every crc_cu_id. */
enum crc_ctl_op {
	CRC_OP_CTL = 0x8000,
	CRC_OP_BYE = CRC_OP_CTL, /* orderly end of session; no payload, no reply */
	CRC_OP_PIN_REGISTER,	 /* struct crc_pin_req; unix: the memfd follows on the socket */
	CRC_OP_PIN_UNREGISTER,	 /* struct crc_pin_req */
	CRC_OP_STATS,		 /* reply: struct crc_stats */
	CRC_OP_SYNC,		 /* reply: the kept error of posted work, cleared */
	CRC_OP_FUNC_INFO,	 /* struct crc_func_info_req; reply: struct crc_func_info */
	/* Quiesce of a TCP session (no shared control page), records on the session's socket; see
	 * struct crc_tcp_quiesce below. */
	CRC_OP_QUIESCE,		/* daemon -> client: struct crc_tcp_quiesce */
	CRC_OP_QUIESCE_ACK,	/* client -> daemon, posted: struct crc_tcp_quiesce_ack; it sends no more */
	CRC_OP_RESUME,		/* daemon -> client: the quiesce is withdrawn (the client stayed connected) */
	CRC_OP_HOSTFN_REGISTER, /* unix: the memfd of the client's struct crc_hostfn_page follows on the
				   socket; no payload */
	CRC_OP_MANAGED_PLACE,	/* struct crc_managed_req: a managed allocation to device memory or back */
	CRC_OP_MVAR_PULL,	/* struct crc_mvar_req; reply: the bytes of a __managed__ variable */
	CRC_OP_MVAR_PUSH,	/* struct crc_mvar_req + the bytes: into a __managed__ variable */
	CRC_OP_MANAGED_WAIT, /* uint32_t ms: the session's work ends within ms, else CUDA_ERROR_NOT_READY */
	CRC_OP_NOTIFY_REGISTER,	  /* struct crc_notify_req: a log callback or an async notification
				     callback, delivered through the host-function page; again after a restore
				   */
	CRC_OP_NOTIFY_UNREGISTER, /* struct crc_notify_req */
	CRC_OP_NVML,		  /* a forwarded NVML query (crcuda/nvml_fwd.h); reply: its answer.
				   * CUDA_ERROR_NOT_SUPPORTED: the worker has no NVML */
	CRC_OP_BULK_OPEN,	  /* TCP: struct crc_bulk_open_req; reply: struct crc_bulk_open_reply (see
				     "striped copies" below) */
	/* Control connections (role CRC_ROLE_CONTROL): requests and replies framed on the socket as
	 * struct crc_msg_hdr + payload; every reply is struct crc_ctl_reply + the op's data. */
	CRC_OP_CTL_SESSIONS = CRC_OP_CTL + 0x100, /* reply: n struct crc_ctl_session_wire */
	CRC_OP_CTL_QUIESCE,			  /* struct crc_ctl_req */
	CRC_OP_CTL_CHECKPOINT,			  /* crc_ctl_req + store dir; reply: crc_ctl_ckpt_wire */
	CRC_OP_CTL_COMMIT,			  /* crc_ctl_req + criu dir + meta strings; reply: u64 id */
	CRC_OP_CTL_ABORT,			  /* struct crc_ctl_req */
	CRC_OP_CTL_RESUME,			  /* struct crc_ctl_req */
	CRC_OP_CTL_RESTORE,			  /* crc_ctl_restore_wire + store dir; see ctl.h */
	CRC_OP_CTL_COMMIT_WAIT,			  /* struct crc_ctl_req; reply: u64 id */
	CRC_OP_CTL_COLLECTIVE,			  /* crc_ctl_req + crc_ctl_coll_wire; reply: the same */
	CRC_OP_CTL_SUSPEND,  /* crc_ctl_req + u64 checkpoint id + store dir: the worker ends (see
				struct crc_session_ctl's suspend fields) */
	CRC_OP_CTL_PROGRESS, /* crc_ctl_req; reply: crc_ctl_progress_wire (the front answers) */
	/* TLS: instead of a reply, the connection goes to a worker (a restore): the reply's data is the
	 * key (CRC_TLS_KEY_LEN bytes) of the handshake the client makes next, on the same socket, with that
	 * worker; the real reply follows in that session. */
	CRC_OP_CTL_HANDOFF = CRC_OP_CTL + 0x1ff,
};

/* ---- handshake ---------------------------------------------------------------------------------- */
enum crc_transport {
	CRC_TRANSPORT_UNIX = 1, /* rings in a memfd, passed with the reply */
	CRC_TRANSPORT_TCP = 2,	/* records framed on the socket */
};

enum crc_role {
	CRC_ROLE_CLIENT = 0,  /* an application's libcrcuda: a session */
	CRC_ROLE_CONTROL = 1, /* crcudactl or the CRIU plugin: control requests, no driver calls */
	CRC_ROLE_BULK = 2,    /* a TCP session's bulk connection (session_id; token: the bulk key) */
};

struct crc_hello {
	uint32_t magic;
	uint32_t version;
	int32_t pid;
	uint32_t uid;
	uint32_t transport;
	uint32_t token_len;
	uint32_t role;	     /* enum crc_role */
	uint32_t bulk_index; /* CRC_ROLE_BULK: which of the session's bulk connections this is */
	uint64_t session_id; /* 0: new session; else a detached TCP session taken back (token: its ticket),
				or the session a bulk connection belongs to */
	char token[CRC_TOKEN_MAX];
};

/* TCP with TLS: the front's answer to a client's hello, before its worker's struct crc_hello_reply:
 * status 0 and the key of the handshake (crcuda/tls.h) the client makes next, with that worker, on the
 * same socket; or a refusal. Its first fields are those of struct crc_hello_reply, as a refusal is. */
struct crc_tls_handoff {
	uint32_t magic;
	uint32_t version;
	int32_t status;
	uint32_t pad;
	uint8_t key[32];
};

struct crc_dev_info {
	char name[256];
	uint8_t uuid[16];
	uint64_t total_mem;
	char pci_bus_id[32];
	int32_t attrs[CRC_DEV_ATTR_SLOTS]; /* cuDeviceGetAttribute, 0 where the backend refused */
	int32_t texture1d_linear_max;	   /* unused yet */
	uint32_t pad;
};

struct crc_hello_reply {
	uint32_t magic;
	uint32_t version;
	int32_t status; /* 0, or a negative CRC_E* (CRC_EAUTH, CRC_EPERM, CRC_EBUSY...) */
	uint32_t dev_count;
	uint64_t session_id;
	uint64_t va_base; /* the session's device VA range: every allocation lies in it */
	uint64_t va_size;
	uint64_t ring_size; /* data bytes per ring (unix) */
	int32_t driver_version;
	int32_t init_result;		       /* the backend's cuInit */
	uint64_t primary_ctx[CRC_MAX_DEVICES]; /* virtual handles of the primary contexts */
	struct crc_dev_info devs[CRC_MAX_DEVICES];
};

/* ---- the session control page (unix sessions) ----------------------------------------------------
 * One page after the two rings in the rings memfd, shared by the client and the daemon: how a
 * session is stopped at a call boundary (quiesce) without a round trip on every call.
 *  - The client sets client_busy while it holds its channel lock for a whole call (every record of a
 *    multi-record call included), then a seq_cst fence, then reads quiesce_req; if set, it clears
 *    client_busy and parks, still holding the lock (other threads wait on the lock).
 *  - The daemon sets quiesce_req, a seq_cst fence, then keeps serving the ring until client_busy is
 *    0 and the ring is empty (Dekker: either the client saw the request or the daemon sees busy).
 *  - A parked client waits on wake_seq (futex, with timeouts) and polls its socket for a struct
 *    crc_sock_notice: RESUME (same rings) or REBIND (a restored session: new rings memfd attached).
 *  - Collective launches (kernels that wait for other processes' kernels, NCCL's: libcrcuda's
 *    CRCUDA_COLLECTIVE_KERNELS) are counted: before posting one, the client adds 1 to coll_launched,
 *    then (seq_cst) reads coll_hold and coll_cap; while coll_until (CLOCK_MONOTONIC ns) is ahead, a
 *    launch that is held (coll_hold) or beyond the cap takes its 1 back and waits on wake_seq. The
 *    daemon holds, reads the count, caps: so that the processes of a tree all stop after the same
 *    collective, and the kernels each of them waits for are launched (crcuda/ctl.h,
 *    crc_ctl_collective). */
#define CRC_SUSPEND_STORE_MAX 2048
struct crc_session_ctl {
	_Alignas(64) _Atomic uint32_t quiesce_req; /* daemon: 1 while the session must stop */
	_Alignas(64) _Atomic uint32_t client_busy; /* client: 1 while a call holds the channel */
	_Atomic uint32_t parked;		   /* client: 1 while a thread is parked */
	_Alignas(64) _Atomic uint32_t wake_seq;	   /* futex: bumped by the daemon on resume */
	uint32_t magic;
	_Alignas(64) _Atomic uint64_t coll_launched; /* client: collective launches posted */
	_Alignas(64) _Atomic uint32_t coll_hold;     /* daemon: 1: every collective launch waits */
	_Atomic uint64_t coll_cap;		     /* daemon: a launch beyond this many waits (0: none) */
	_Atomic uint64_t coll_until;		     /* daemon: hold and cap apply until then (ns) */
	/* Suspend (crcudactl suspend): with the session quiesced and checkpointed into the store, the
	 * worker fills these, sets suspended and ends. The parked client, seeing its socket close with
	 * suspended set, waits at CRC_SUSPEND_SOCK for crcudactl resume instead of failing. */
	_Atomic uint32_t suspended;
	uint64_t suspend_ckpt;	/* the checkpoint holding the session */
	uint64_t suspend_bytes; /* device memory it saved */
	char suspend_store[CRC_SUSPEND_STORE_MAX];
};
#define CRC_SESSION_CTL_MAGIC 0x4c544353u /* "SCTL" */
#define CRC_SESSION_CTL_SIZE  4096u
_Static_assert(sizeof(struct crc_session_ctl) <= CRC_SESSION_CTL_SIZE, "one page");

/* A suspended client listens on this abstract unix socket (its pid, as it sees it), accepting only its
 * own uid or root, until its session is resumed or the daemon it was suspended from goes away (it
 * keeps a control connection to it open: its end fails the application's calls, as a lost daemon
 * does). One struct crc_suspend_req, one struct crc_suspend_reply. RESUME carries, attached, a socket
 * to the resumed session (crc_ctl_restore's client socket, its REBIND notice queued): the client puts
 * it in place of its old one, rebinds, and answers how that went. */
#define CRC_SUSPEND_SOCK_FMT "crcuda-suspended-%d"
enum crc_suspend_op { CRC_SUSPEND_QUERY = 1, CRC_SUSPEND_RESUME };
struct crc_suspend_req {
	uint32_t magic; /* CRC_PROTO_MAGIC */
	uint32_t op;	/* enum crc_suspend_op */
};
struct crc_suspend_reply {
	uint32_t magic;	     /* CRC_PROTO_MAGIC */
	int32_t status;	     /* RESUME: 0 rebound, else why not (the application's calls then fail) */
	uint64_t session_id; /* the suspended session */
	uint64_t ckpt_id, device_bytes;
	char store[CRC_SUSPEND_STORE_MAX];
	char daemon[256]; /* the daemon it was suspended from (its unix socket), which it waits on */
};

/* Host functions (graph host nodes, cuLaunchHostFunc) run in the application, which the daemon's
 * driver cannot call: the client shares this page (its own memfd, CRC_OP_HOSTFN_REGISTER, again after
 * a restore) and a thread of its waits on it. The daemon, one call at a time, writes kind, fn and data
 * (and the payload), bumps req (futex); the client runs fn(data) (or delivers the payload) and sets
 * done = req (futex). Driver callbacks of the application (log lines, async notifications) come the
 * same way: kind says which, data is the client's registration id, the payload what the driver gave. */
enum crc_hostfn_kind {
	CRC_HOSTFN_CALL = 0, /* fn(data) */
	CRC_HOSTFN_LOG,	     /* a log line: level in arg, the message's len bytes in the payload */
	CRC_HOSTFN_ASYNC,    /* an async notification: device in arg, a CUasyncNotificationInfo */
};
#define CRC_HOSTFN_PAGE_SIZE 4096u
#define CRC_HOSTFN_PAYLOAD   3840u
struct crc_hostfn_page {
	_Alignas(64) _Atomic uint32_t req;
	_Alignas(64) _Atomic uint32_t done;
	uint64_t fn, data;
	uint32_t magic;
	uint32_t kind;	   /* enum crc_hostfn_kind */
	uint64_t arg, len; /* a log line's level / a notification's device; payload bytes */
	_Alignas(64) char payload[CRC_HOSTFN_PAYLOAD];
};
_Static_assert(sizeof(struct crc_hostfn_page) <= CRC_HOSTFN_PAGE_SIZE, "one page");
#define CRC_HOSTFN_MAGIC 0x4e465448u /* "HTFN" */

/* CRC_OP_NOTIFY_REGISTER / _UNREGISTER: the client's registration `id` (its handle's value, the same
 * after a restore). Register: the worker registers a trampoline of its own with its driver (which
 * gets the NULLs the application passed: CRC_NOTIFY_NO_FN, CRC_NOTIFY_NO_OUT, so the driver answers
 * them); unregister: the driver's handle registered under id (none for an unknown id: the driver
 * answers a NULL handle). */
enum crc_notify_type { CRC_NOTIFY_LOGS = 1, CRC_NOTIFY_ASYNC = 2 };
enum crc_notify_flag { CRC_NOTIFY_NO_FN = 1u << 0, CRC_NOTIFY_NO_OUT = 1u << 1 };
struct crc_notify_req {
	uint32_t type; /* enum crc_notify_type */
	int32_t device;
	uint32_t flags;
	uint32_t pad;
	uint64_t id;
};

/* cuLogsDumpToMemory / cuLogsDumpToFile (hand-marshalled): crc_call_hdr + crc_logs_req; reply: the
 * crc_logs_req as the driver left it (iterator, size, flags CRC_LOGS_APPENDED) + `bytes` bytes: the
 * buffer's (to its NUL included, up to size) or the file's contents. The worker dumps a file into a
 * memfd of its own (/proc/self/fd/N), which it fills with one byte first: still there after the dump
 * means the driver appends to the file, and the client does so too. */
enum crc_logs_flag {
	CRC_LOGS_ITERATOR = 1u << 0, /* iterator not NULL */
	CRC_LOGS_BUFFER = 1u << 1,   /* buffer (DumpToMemory) / path (DumpToFile) not NULL */
	CRC_LOGS_SIZE = 1u << 2,     /* size not NULL */
	CRC_LOGS_APPENDED = 1u << 3, /* reply: the driver appended to the file */
};
#define CRC_LOGS_MAX (1u << 20) /* bytes a dump brings back at most (the driver keeps 25600) */
struct crc_logs_req {
	uint32_t iterator;
	uint32_t flags;	    /* enum crc_logs_flag */
	uint32_t api_flags; /* the application's flags argument */
	uint32_t pad;
	uint64_t size;	/* *size (DumpToMemory) */
	uint64_t bytes; /* reply: bytes that follow */
};

/* Host function requests (hand-marshalled): cuLaunchHostFunc = crc_call_hdr + crc_hostfn_req (posted);
 * cuGraphAddHostNode, cuGraphHostNodeSetParams, cuGraphExecHostNodeSetParams = crc_call_hdr +
 * crc_graph_node_req + deps + crc_hostfn_req (reply, add: the node); cuGraphHostNodeGetParams:
 * crc_graph_node_req, reply crc_hostfn_req. */
struct crc_hostfn_req {
	uint64_t stream;
	uint64_t fn, data; /* the application's function and argument */
};

/* cuCoredumpGetAttribute(Global) and cuCoredumpSetAttribute(Global) (hand-marshalled): crc_call_hdr +
 * crc_coredump_req + `bytes` bytes of the value; reply: u64 size as the driver left it + `bytes` bytes
 * of the value (the driver's answer written over what was sent). The value's size depends on the
 * attribute: bools, an int of flags, strings of up to 1023 characters. */
#define CRC_COREDUMP_MAX 4096u
enum crc_coredump_flag {
	CRC_COREDUMP_VALUE = 1u << 0, /* value is not NULL */
	CRC_COREDUMP_SIZE = 1u << 1,  /* size is not NULL */
};
struct crc_coredump_req {
	uint32_t attrib, flags;
	uint64_t size;	/* *size as the application passed it */
	uint64_t bytes; /* value bytes that follow: *size, at most CRC_COREDUMP_MAX */
};

/* cuMemBatchDecompressAsync (hand-marshalled): crc_call_hdr + crc_decompress_req + count
 * CUmemDecompressParams as the application wrote them (device addresses are the same in the worker);
 * reply: u64 error index (SIZE_MAX: none). */
#define CRC_DECOMPRESS_MAX 16384u /* entries per request (1 MiB) */
struct crc_decompress_req {
	uint64_t stream, count;
	uint32_t flags, want_index; /* want_index: errorIndex is not NULL */
	uint32_t null_array, pad;   /* null_array: paramsArray is NULL (no entries follow) */
	uint64_t index;		    /* *errorIndex as the caller left it: a driver that refuses leaves it */
};

/* Daemon -> client on the session socket, read only by a parked client. */
enum crc_notice_kind {
	CRC_NOTICE_RESUME = 1, /* continue with the same rings */
	CRC_NOTICE_REBIND = 2, /* a restored session: switch to the rings memfd that comes with it */
};
struct crc_sock_notice {
	uint32_t magic; /* CRC_PROTO_MAGIC */
	uint32_t kind;	/* enum crc_notice_kind */
	uint64_t session_id;
	uint64_t ring_size; /* REBIND over unix: data bytes per ring of the new memfd */
	uint32_t transport; /* REBIND: CRC_TRANSPORT_UNIX (memfd attached) or CRC_TRANSPORT_TCP */
	uint32_t flags;	    /* REBIND over TCP: CRC_NOTICE_TLS */
	uint8_t key[32];    /* CRC_NOTICE_TLS: the key of the handshake the restored client makes first */
};
/* A TCP REBIND comes on a unix socket (the restorer's) with the restored session's TCP socket attached;
 * with TLS, the client makes a handshake there first, with the notice's key. */
#define CRC_NOTICE_TLS 1u

/* ---- quiesce of a TCP session ---------------------------------------------------------------------
 * The daemon cannot see a remote client's calls, so the client takes part: the daemon sends
 * CRC_OP_QUIESCE; the client (at its next call boundary, or its watcher thread when it is idle) answers
 * CRC_OP_QUIESCE_ACK and parks holding its channel lock; the daemon serves every record before the ACK.
 * With a park path (a CRIU dump: an established TCP connection cannot be dumped), the client first
 * connects a unix socket to it (the CRIU plugin listens there), then closes its TCP connection and puts
 * the unix socket in its place (detach: ACK with detach = 1, then EOF). The parked client then reads
 * a struct crc_sock_notice there: RESUME (reconnect over TCP and take the session back: a hello with
 * session_id and the ticket as token) or REBIND (a restore: the socket is the new session's); if the
 * plugin goes away without one, it takes the session back too (the checkpoint is abandoned). */
struct crc_tcp_quiesce {
	uint8_t ticket[32]; /* what a reclaiming hello presents as its token (proves it is this client) */
	char park[108];	    /* unix socket path to detach to, "" to park on the TCP connection */
};
struct crc_tcp_quiesce_ack {
	uint32_t detach; /* 1: the TCP connection closes after this record */
	uint32_t pad;
};

/* ---- control connections (see crcuda/ctl.h) ------------------------------------------------------ */
#define CRC_CTL_MSG_MAX 512
struct crc_ctl_reply {
	int32_t status; /* 0 or a negative CRC_E* */
	uint32_t pad;
	char msg[CRC_CTL_MSG_MAX]; /* why, when status != 0 */
};
struct crc_ctl_req {
	int32_t pid;	     /* the client process; 0: use session_id */
	int32_t timeout_ms;  /* quiesce, commit wait; checkpoint: CRC_CTL_CKPT_* flags */
	uint64_t session_id; /* when pid is 0 */
};
/* CRC_OP_CTL_COLLECTIVE (crcuda/ctl.h, crc_ctl_collective): the request names the action and, for a
 * cap, the count and for how long; the reply is the session's count of collective launches. */
struct crc_ctl_coll_wire {
	uint32_t action;   /* request: CRC_CTL_COLL_* (crcuda/ctl.h) */
	uint32_t ttl_ms;   /* request: hold and cap end by themselves after this (a caller that died) */
	uint64_t target;   /* CAP: the count */
	uint64_t launched; /* reply: collective launches posted so far (at the hold: all there will be) */
};
struct crc_ctl_session_wire {
	uint64_t session_id;
	int32_t pid;
	uint32_t uid;
	uint64_t va_base, va_size;
	uint64_t device_bytes;
	uint32_t state, transport;
	uint64_t journal_records;
	int32_t worker_pid; /* the process that runs the session's driver work */
	uint32_t devices;   /* bit g: the session has a context on the daemon's GPU g */
};
struct crc_ctl_progress_wire {
	uint32_t op; /* enum crc_ctl_progress_op */
	uint32_t pad;
	uint64_t done, total, ns;
};
struct crc_ctl_ckpt_wire {
	uint64_t allocations, globals, modules;
	uint64_t device_bytes, new_bytes;
	double seconds;
	double copy_seconds; /* the copy engine's busy time: device-to-host copies alone */
	/* Added later (a shorter reply leaves them 0). */
	uint64_t copied_bytes;	 /* bytes copied off the device: what changed since the last checkpoint */
	double digest_seconds;	 /* finding what changed (digests on the device) */
	uint64_t snapshot_bytes; /* of them, snapshotted on the device and drained in the background */
};
#define CRC_CTL_CKPT_WIRE_V1 offsetof(struct crc_ctl_ckpt_wire, copied_bytes)
struct crc_ctl_restore_wire {
	uint64_t ckpt_id;
	int32_t gpu;
	int32_t pid;
	int32_t timeout_ms;
	uint32_t ngpus; /* gpus[0..ngpus): --gpu as a list (crc_ctl_restore_opts) */
	int32_t gpus[CRC_MAX_DEVICES];
	/* A staged restore (crc_ctl_stage): a worker replays and uploads checkpoint ckpt_id ahead and
	 * keeps it under stage_key; a later restore with the same key goes to that worker, which uploads
	 * only the chunks that changed. 0: none. */
	uint64_t stage_key;
	uint32_t flags; /* CRC_RESTORE_STAGE: this request stages (or refreshes) */
	uint32_t reserved;
	/* then the store directory, NUL-terminated */
};
#define CRC_RESTORE_STAGE 1u

/* ---- virtual handles ---------------------------------------------------------------------------- */
/* DEVRES names a CUdevResource the daemon handed out (crc_devres_id: no driver type; the resource
 * itself travels by value with its handle inside, crcuda/devres.h). */
/* X(tag, type): every handle type the daemon translates. The generated marshalling names types; the
 * tag is CRC_HT_<type>. */
#define CRC_HANDLE_TYPES(X)                                                                                  \
	X(CTX, CUcontext)                                                                                    \
	X(MODULE, CUmodule)                                                                                  \
	X(FUNC, CUfunction)                                                                                  \
	X(LIBRARY, CUlibrary)                                                                                \
	X(KERNEL, CUkernel)                                                                                  \
	X(STREAM, CUstream)                                                                                  \
	X(EVENT, CUevent)                                                                                    \
	X(ARRAY, CUarray)                                                                                    \
	X(MEMPOOL, CUmemoryPool)                                                                             \
	X(MEMHANDLE, CUmemGenericAllocationHandle)                                                           \
	X(GRAPH, CUgraph)                                                                                    \
	X(GRAPHNODE, CUgraphNode)                                                                            \
	X(GRAPHEXEC, CUgraphExec)                                                                            \
	X(USEROBJECT, CUuserObject)                                                                          \
	X(MIPMAP, CUmipmappedArray)                                                                          \
	X(GREENCTX, CUgreenCtx)                                                                              \
	X(DEVRESDESC, CUdevResourceDesc)                                                                     \
	X(DEVRES, crc_devres_id)

enum crc_handle_tag {
	CRC_HT_NONE = 0,
#define CRC__HT_ENUM(tag, type) CRC_HT_##tag, CRC_HT_##type = CRC_HT_##tag,
	CRC_HANDLE_TYPES(CRC__HT_ENUM)
#undef CRC__HT_ENUM
	    CRC_HT_COUNT
};

/* value = (0x100 + tag) << 32 | index (index >= 1): never 0, 1 or 2 (the special stream values), and
 * a handle of the wrong type is recognised. */
static inline uint64_t crc_vhandle(unsigned tag, uint32_t index)
{
	return (uint64_t)(0x100u + tag) << 32 | index;
}
static inline unsigned crc_vhandle_tag(uint64_t v)
{
	unsigned t = (unsigned)(v >> 32);
	return t > 0x100u && t < 0x100u + CRC_HT_COUNT && (uint32_t)v ? t - 0x100u : CRC_HT_NONE;
}
static inline uint32_t crc_vhandle_index(uint64_t v)
{
	return (uint32_t)v;
}

/* ---- driver calls ------------------------------------------------------------------------------- */
enum crc_call_flag {
	CRC_CALL_PTDS = 1u << 0, /* a _ptds/_ptsz entry point: stream 0 is the thread's default stream */
};

/* First bytes of every driver-call request: the daemon makes ctx current before executing. */
struct crc_call_hdr {
	uint64_t ctx; /* the caller's current context (virtual), 0 for none */
	uint32_t thread;
	uint32_t flags;
};

struct crc_reply_hdr {
	int32_t result; /* CUresult */
	uint32_t pad;
};

/* Generated marshalling (crcuda/cuda_marshal.def): each argument is one 8-byte-aligned item.
 *  VAL     the value's bytes
 *  HANDLE  uint64_t virtual handle
 *  IN      uint64_t present (0 for a NULL pointer), then the pointee's bytes when present
 *  OUT     uint64_t present, then the pointee's bytes (copied in too: some are in/out)
 *  HOUT    uint64_t present
 *  STR     uint64_t length including the NUL (0 for NULL), then the bytes
 *  ARR_IN  an array counted by a by-value argument (`count`: its index): uint64_t present, then the
 *          elements (handles as uint64_t, translated; others as their bytes, each 8-byte aligned)
 *  ARR_OUT an array counted by an OUT argument (in: the capacity, out: how many there are):
 *          uint64_t present; nothing else goes in
 * The reply carries, in argument order, the bytes of each present OUT, a uint64_t per present HOUT,
 * and for each present ARR_OUT a uint64_t element count followed by the elements (as for ARR_IN). */
enum crc_arg_kind {
	CRC_ARG_VAL,
	CRC_ARG_HANDLE,
	CRC_ARG_IN,
	CRC_ARG_OUT,
	CRC_ARG_HOUT,
	CRC_ARG_STR,
	CRC_ARG_ARR_IN,
	CRC_ARG_ARR_OUT,
};

struct crc_arg_spec {
	uint8_t kind;
	uint8_t tag; /* HANDLE, HOUT, arrays of handles: crc_handle_tag */
	uint16_t size;
	uint8_t count; /* ARR_IN, ARR_OUT: the index of the argument that counts the elements */
};

/* The spec of an argument of kind VAL, HANDLE... and C type `type` (a row of cuda_marshal.def):
 * handles carry their tag, CRC_HT_<type>. */
#define CRC_ARG_TAG_VAL(type)	 CRC_HT_NONE
#define CRC_ARG_TAG_HANDLE(type) CRC_HT_##type
#define CRC_ARG_TAG_IN(type)	 CRC_HT_NONE
#define CRC_ARG_TAG_OUT(type)	 CRC_HT_NONE
#define CRC_ARG_TAG_HOUT(type)	 CRC_HT_##type
#define CRC_ARG_TAG_STR(type)	 CRC_HT_NONE
#define CRC_ARG_SPEC(kind, type)                                                                             \
	{                                                                                                    \
		CRC_ARG_##kind, CRC_ARG_TAG_##kind(type), sizeof(type), 0                                    \
	}
/* Arrays: elements of a handle type are handles (tag CRC_HT_<type>), others plain (CRC_HT_NONE). */
#define CRC_ARG_ARRAY_SPEC(kind, type, count, tag)                                                           \
	{                                                                                                    \
		CRC_ARG_##kind, (tag), sizeof(type), (count)                                                 \
	}

static inline uint64_t crc_align8(uint64_t v)
{
	return (v + 7) & ~(uint64_t)7;
}

/* ---- hand-marshalled calls (hooks) -------------------------------------------------------------- */

/* Where one side of a copy lives. */
enum crc_copy_loc {
	CRC_LOC_DEVICE = 1, /* a device address */
	CRC_LOC_INLINE,	    /* pageable host memory: bytes travel in the records */
	CRC_LOC_PINNED,	    /* a registered pinned region: the daemon translates the client address */
	CRC_LOC_ARRAY,	    /* a CUDA array (virtual handle): array copies only */
	CRC_LOC_STRIPED,    /* host memory of a TCP client: the bytes travel on the bulk connections */
};

/* cuMemcpy*: request = crc_call_hdr + crc_copy_req (+ bytes for an INLINE source). A large copy is
 * several requests, one per chunk; for an INLINE destination the daemon answers with MORE records
 * of struct crc_copy_data + bytes, then the final reply. */
struct crc_copy_req {
	uint64_t dst, src;
	uint64_t bytes;
	uint64_t stream;
	uint32_t dst_loc, src_loc;
	uint32_t async;
	uint32_t pad;
};
struct crc_copy_data {
	uint64_t offset; /* from the start of this request's destination */
	uint64_t bytes;
};

/* ---- striped copies (TCP sessions) ---------------------------------------------------------------
 * One TLS stream is bounded by one core's encryption on each side, so a large copy between a TCP
 * client's host memory and the device travels over several connections at once. The client asks for
 * bulk connections with CRC_OP_BULK_OPEN (streams wanted); the worker answers how many it takes and a
 * one-time key. The client opens that many TCP connections to the daemon (TLS as its first one), each
 * a hello of role CRC_ROLE_BULK with the session id, bulk_index and the key as token; the front hands
 * them to the session's worker, which takes each once for a right key (a wrong one is refused, logged)
 * and answers a struct crc_hello_reply (status 0). The key is spent when all are in.
 * A copy then is one request on the main connection, as ever (cuMemcpyHtoD_v2 / cuMemcpyDtoH_v2,
 * crc_call_hdr + crc_copy_req with CRC_LOC_STRIPED for the host side + struct crc_stripe_req), and its
 * bytes go in pieces of `piece` bytes, piece k on bulk connection k % streams, each a struct
 * crc_stripe_piece then its bytes: client to worker for a host source (read by the worker when it
 * executes the request, in request order), worker to client for a host destination. The final reply
 * comes on the main connection after the last piece. A request the worker does not execute (a sticky
 * error) or a bulk connection that fails ends the bulk connections (both sides see their reads and
 * writes fail at once); the reply then says CRC_CU_BULK_FAILED where the copy itself did not fail, and
 * the client copies again over the main connection. Bulk connections are closed before a quiesced
 * client parks (CRIU cannot dump them; no TLS state is dumped) and opened again by its next large
 * copy. */
#define CRC_BULK_MAX	     8
#define CRC_STRIPE_MAGIC     0x50525453u /* "STRP" */
#define CRC_STRIPE_PIECE_MIN (4u << 10)
#define CRC_STRIPE_PIECE_MAX (16u << 20)
#define CRC_CU_BULK_FAILED   0x7fff0101 /* reply (a CUresult): copy again without the bulk connections */
struct crc_bulk_open_req {
	uint32_t streams; /* wanted, 2..CRC_BULK_MAX */
	uint32_t pad;
};
struct crc_bulk_open_reply {
	uint32_t streams; /* the connections to open (0: none) */
	uint32_t pad;
	uint8_t key[32];
};
struct crc_stripe_req {
	uint32_t streams; /* the bulk connections the pieces are spread over (all of them) */
	uint32_t piece;	  /* bytes of a piece (the last one may be shorter) */
	uint64_t copy_id; /* the client's count of striped copies: every piece header carries it */
};
struct crc_stripe_piece {
	uint32_t magic;	  /* CRC_STRIPE_MAGIC */
	int32_t status;	  /* worker to client: a CUresult (then no bytes follow) */
	uint64_t copy_id; /* the request's */
	uint64_t offset;  /* of the piece in the copy */
	uint64_t bytes;	  /* that follow */
};

/* cuMemsetD*: the generated forward handles them (all by-value). */

/* cuMemAlloc / Pitch / Async / Managed and cuMemAddressReserve go through struct crc_alloc_req. */
struct crc_alloc_req {
	uint64_t bytes;
	uint64_t align;	 /* cuMemAddressReserve alignment */
	uint64_t hint;	 /* cuMemAddressReserve addr */
	uint64_t stream; /* cuMemAllocAsync */
	uint64_t width, height;
	uint32_t elem; /* cuMemAllocPitch ElementSizeBytes */
	uint32_t pad;
};
struct crc_alloc_reply {
	uint64_t ptr;
	uint64_t pitch;
};

/* Pinned host memory shared with the daemon (unix): the daemon maps the memfd and registers it. */
struct crc_pin_req {
	uint64_t client_addr;
	uint64_t bytes;
	uint32_t flags; /* CU_MEMHOSTALLOC_* */
	uint32_t pad;
};
/* A managed allocation (a pinned region shared as a memfd) placed in a GPU's memory at its address, or
 * back in the shared pages. NOT_SUPPORTED: it stays where it is (not granularity-aligned, or the
 * address is taken in the daemon). */
struct crc_managed_req {
	uint64_t client_addr;
	uint64_t bytes;
	int32_t device; /* the client's ordinal, or -1: the host */
	uint32_t pad;
};

/* Bytes of a module's __managed__ variable, which lives in the daemon (libcrcuda/managed_vars.c). */
struct crc_mvar_req {
	uint64_t addr; /* in the daemon */
	uint64_t bytes;
	uint32_t drain; /* pull: the session's work ends first */
	uint32_t pad;
};

struct crc_pin_reply {
	uint64_t device_ptr; /* cuMemHostGetDevicePointer of the daemon's mapping */
};

/* Modules: request = crc_call_hdr + crc_load_req + image bytes, several records for a large image
 * (files are read by the client). The JIT/library options are not forwarded (yet). Reply: uint64_t
 * handle. */
struct crc_load_req {
	uint64_t image_bytes; /* of the whole image */
	uint64_t offset;      /* of this record's bytes; records before the last are posted */
	uint64_t chunk;	      /* bytes in this record */
};

/* cuMemCreate: request = crc_call_hdr + crc_vmm_create_req; reply: uint64_t handle. */
struct crc_vmm_create_req {
	uint64_t size;
	uint64_t flags;
	uint32_t type, location_type;
	int32_t location_id;
	uint32_t handle_types;
	uint8_t compression, gpu_direct_rdma;
	uint16_t usage; /* allocFlags.usage (CU_MEM_CREATE_USAGE_TILE_POOL for sparse arrays' tiles) */
	uint32_t pad;
};

/* cuMemExportToShareableHandle (POSIX descriptor): request = the u64 memory handle; reply = this wire.
 * The application's descriptor is a sealed memfd holding it, which cuMemImportFromShareableHandle (in
 * any process under the layer) reads: request = the u64 key; reply = the u64 memory handle. The key
 * names the export in crcudad's registry (crcudad/link.h). */
struct crc_shareable_wire {
	char magic[8]; /* CRC_SHAREABLE_MAGIC */
	uint64_t key;
	uint64_t size;
	uint64_t session_id; /* the exporter's */
};
#define CRC_SHAREABLE_MAGIC "crcudaSH"

/* Function/kernel lookup: request = crc_call_hdr + crc_getfn_req + NUL-terminated name; reply =
 * crc_getfn_reply + nparams crc_kparam_wire. The layout lets the client pack kernelParams; the
 * attributes answer cuFuncGetAttribute locally. */
struct crc_getfn_req {
	uint64_t owner; /* CUmodule, CUlibrary or (cuKernelGetFunction) CUkernel */
	uint64_t name_len;
};
struct crc_kparam_wire {
	uint32_t offset;
	uint32_t size;
};
struct crc_getfn_reply {
	uint64_t handle;
	uint64_t owner;	  /* the module of a function, the library of a kernel (0 if unknown) */
	uint32_t nparams; /* UINT32_MAX: unknown layout (launches must then use `extra`) */
	uint32_t param_bytes;
	int32_t attrs[CRC_FUNC_ATTR_SLOTS];
};

/* Globals: request = crc_call_hdr + uint64_t owner + name; reply: struct crc_global_reply. */
struct crc_global_reply {
	uint64_t dptr;
	uint64_t bytes;
};

/* Launches: request = crc_call_hdr + crc_launch_req + nparams crc_kparam_wire + param bytes
 * (param_bytes, laid out at the offsets) + nattrs CUlaunchAttribute (cuLaunchKernelEx). Posted. */
struct crc_launch_req {
	uint64_t func; /* CUfunction or CUkernel */
	uint64_t stream;
	uint32_t grid[3];
	uint32_t block[3];
	uint32_t shared_bytes;
	uint32_t nparams; /* UINT32_MAX: params are one `extra` buffer of param_bytes */
	uint32_t param_bytes;
	uint32_t nattrs;
	uint32_t cooperative;
	uint32_t pad;
};

/* Graph kernel nodes: cuGraphAddKernelNode_v2 (graph, deps), cuGraphKernelNodeSetParams_v2 (node),
 * cuGraphExecKernelNodeSetParams_v2 (exec, node); the v1 rows travel as these. Request = crc_call_hdr +
 * crc_graph_node_req + ndeps uint64_t node handles + a crc_launch_req (stream unused) with its
 * parameters, as a launch sends them. Reply (add): the node's handle. cuGraphKernelNodeGetParams_v2:
 * the request is crc_graph_node_req (node), the reply a crc_launch_req and its parameters. */
struct crc_graph_node_req {
	uint64_t graph;
	uint64_t node;
	uint64_t exec;
	uint64_t ctx; /* memcpy nodes: the context of the copy (0: current) */
	uint32_t ndeps;
	uint32_t pad;
};

/* Graph memcpy nodes: cuGraphAddMemcpyNode, cuGraphMemcpyNodeSetParams, cuGraphExecMemcpyNodeSetParams:
 * crc_call_hdr + crc_graph_node_req + crc_graph_memcpy_wire + ndeps handles; reply (add): the node.
 * cuGraphMemcpyNodeGetParams: crc_graph_node_req, reply crc_graph_memcpy_wire. Host sides are
 * page-locked memory shared with the daemon, named by the client's address. */
#define CRC_MEMCPY3D_BYTES 200 /* sizeof(CUDA_MEMCPY3D), checked where cuda.h is included */
struct crc_graph_memcpy_wire {
	uint8_t p[CRC_MEMCPY3D_BYTES];
};

/* cuLinkComplete, the whole link in one request (the client collects cuLinkCreate/AddData/AddFile):
 * crc_call_hdr + crc_link_req + nopts crc_link_opt (scalar options; the log buffers' sizes) + ninputs
 * times (crc_link_input, name bytes, data bytes, each padded to 8). Reply: crc_link_reply, then the
 * info log, the error log and the linked image (their lengths in the reply), each padded to 8. The
 * call itself answers CUDA_SUCCESS; the link's result is the reply's. */
struct crc_link_opt {
	int32_t option;
	int32_t pad;
	uint64_t value;
};
struct crc_link_req {
	uint32_t nopts, ninputs;
};
struct crc_link_input {
	uint32_t type, name_len;
	uint64_t size;
};
struct crc_link_reply {
	int32_t result;
	float wall_time;
	uint32_t threads_per_block;
	uint32_t pad;
	uint64_t info_len, error_len, image_len;
};

/* cuStreamSetAttribute / cuStreamGetAttribute: the stream, the attribute and its value (a
 * CUstreamAttrValue, whose pointer members are device addresses); the reply of a get is the value. */
#define CRC_STREAM_ATTR_VALUE_BYTES 64
struct crc_stream_attr_req {
	uint64_t stream;
	uint32_t attr;
	uint32_t pad;
	uint8_t value[CRC_STREAM_ATTR_VALUE_BYTES];
};

/* A copy with a CUDA array on one side or both (cuMemcpy2D/3D and the *toA/Ato* calls): the box of a
 * CUDA_MEMCPY3D, each side a CRC_LOC_*: an array (virtual handle), device memory, a pinned region, or
 * INLINE: the bytes travel packed (rows of `width` bytes, `height` rows a slice) after the request
 * (source) or in the reply (destination). Request op: cuMemcpy3D_v2, or cuMemcpy3DAsync_v2 (async). */
struct crc_array_side {
	uint64_t addr;	      /* array handle, or device/host address of the box's origin row */
	uint64_t x, y, z;     /* the box's origin: x in bytes (arrays, and the other sides' pitch) */
	uint64_t pitch, rows; /* bytes a row and rows a slice (not arrays) */
	uint32_t loc, pad;
};
struct crc_array_copy_req {
	struct crc_array_side src, dst;
	uint64_t width, height, depth; /* bytes, rows, slices */
	uint64_t stream;
};

/* cuMemMapArrayAsync: request = crc_call_hdr + crc_array_map_req + count CUarrayMapInfo as cuda.h lays
 * them out, with the client's values: virtual array / mipmapped array and memory handles, the client's
 * device ordinals in deviceBitMask. No reply. */
struct crc_array_map_req {
	uint64_t stream;
	uint32_t count, pad;
};

/* cuTexObjectCreate / cuSurfObjectCreate and their destroy and get: the resource, texture and view
 * descriptions as cuda.h lays them out, array handles virtual; the reply of a create is the object's
 * value, which is the driver's own (it travels into kernels, so it cannot be virtual), and of a get
 * the resource description. */
#define CRC_TEX_RES_BYTES  160
#define CRC_TEX_DESC_BYTES 128
#define CRC_TEX_VIEW_BYTES 128
struct crc_texobj_req {
	uint64_t value; /* destroy and get: the object */
	uint32_t has_view, pad;
	uint8_t res[CRC_TEX_RES_BYTES], tex[CRC_TEX_DESC_BYTES], view[CRC_TEX_VIEW_BYTES];
};

/* cuTensorMapEncodeTiled / Im2col / Im2colWide and cuTensorMapReplaceAddress: every argument, the
 * arrays at their largest (rank 5); the reply is the 128-byte CUtensorMap, which the driver computes
 * on the host (it names a device address, the same in the daemon). */
#define CRC_TMAP_RANK_MAX 5
#define CRC_TMAP_BYTES	  128
struct crc_tmap_req {
	uint8_t map[CRC_TMAP_BYTES]; /* cuTensorMapReplaceAddress: the map to change */
	uint64_t global_address;
	uint64_t global_dim[CRC_TMAP_RANK_MAX], global_strides[CRC_TMAP_RANK_MAX];
	uint32_t box_dim[CRC_TMAP_RANK_MAX], element_strides[CRC_TMAP_RANK_MAX];
	int32_t lower_corner[CRC_TMAP_RANK_MAX], upper_corner[CRC_TMAP_RANK_MAX]; /* im2col */
	uint32_t data_type, rank, interleave, swizzle, l2_promotion, oob_fill;
	uint32_t channels_per_pixel, pixels_per_column;
	int32_t lower_width, upper_width; /* im2col wide */
	uint32_t wide_mode, pad;
};

/* The names of a module's functions (cuModuleEnumerateFunctions, and the tools' module table that
 * cuFFT iterates): request uint64_t module; reply this, then `bytes` of NUL-terminated names. */
struct crc_module_functions_reply {
	uint32_t count, bytes;
};

/* Conditional nodes (cuGraphAddNode of CU_GRAPH_NODE_TYPE_CONDITIONAL): crc_call_hdr +
 * crc_graph_node_req + deps + crc_graph_cond_wire; reply: the node's handle, then `size` graph
 * handles (the bodies, which the node owns). */
struct crc_graph_cond_wire {
	uint64_t handle; /* CUgraphConditionalHandle: a device-side value */
	uint32_t type;
	uint32_t size;
	uint64_t ctx;
};
#define CRC_COND_BODIES_MAX 1024

/* Batch mem-op nodes: cuGraphAddBatchMemOpNode, cuGraph[Exec]BatchMemOpNodeSetParams = crc_call_hdr +
 * crc_graph_node_req + deps + crc_graph_memops_wire + count CUstreamBatchMemOpParams; reply (add): the
 * node. cuGraphBatchMemOpNodeGetParams: crc_graph_node_req; reply the same wire and operations. */
#define CRC_MEMOP_BYTES 48 /* sizeof(CUstreamBatchMemOpParams), checked where cuda.h is included */
#define CRC_MEMOPS_MAX	256
struct crc_graph_memops_wire {
	uint64_t ctx; /* the client's handle */
	uint32_t count, flags;
};

/* cuUserObjectCreate: request; reply: the object's handle. The destroy callback runs in the
 * application (a host function, struct crc_hostfn_page) when the last reference goes. */
struct crc_userobj_req {
	uint64_t ptr, destroy;
	uint32_t refs, flags;
};

/* cuGraphKernelNodeGetAttribute / SetAttribute: request and reply (the value). */
#define CRC_KNODE_ATTR_BYTES 64 /* sizeof(CUkernelNodeAttrValue), checked where cuda.h is included */
struct crc_knode_attr {
	uint64_t node;
	uint32_t attr;
	uint32_t pad;
	uint8_t value[CRC_KNODE_ATTR_BYTES];
};

/* cuStreamGetCaptureInfo_v3: request = the stream handle; reply = crc_capture_info + n node handles
 * + n CUgraphEdgeData. */
struct crc_capture_info {
	uint32_t status;
	uint32_t pad;
	uint64_t id;
	uint64_t graph;
	uint64_t ndeps;
};

/* Object creation: stream/event creation, cuCtxCreate, primary context retain and the like. */
struct crc_create_req {
	uint64_t a, b; /* flags, priority, device... per op */
};

/* CRC_OP_STATS reply: what tests and crcudactl look at. */
struct crc_stats {
	uint32_t sessions;
	uint32_t pad;
	uint64_t session_id;
	uint64_t mapped_bytes;	     /* device memory mapped for this session */
	uint64_t total_mapped_bytes; /* for all sessions */
	uint64_t pinned_bytes;
};

#endif
