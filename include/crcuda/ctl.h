/* The control interface of crcudad: what crcudactl and the CRIU plugin ask the daemon to do with an
 * application's session. A control connection is the daemon's socket (unix, peer uid checked; or TCP
 * with the token) opened with a hello whose role is "control"; it carries no driver calls.
 *
 * Checkpoint (criu dump with the plugin, driven by `crcudactl checkpoint PID`):
 *   crc_ctl_quiesce      PAUSE_DEVICES: the session stops at a call boundary (the application's
 *                        threads park at libcrcuda's gate, calls in flight complete), every stream
 *                        is drained. The process is not frozen yet.
 *   crc_ctl_checkpoint   CHECKPOINT_DEVICES (process frozen): the journal is flushed and every
 *                        allocation and device global is copied into the store (pinned staging,
 *                        several copies in flight, hashing and writing pipelined). Nothing is
 *                        visible in the store yet.
 *   crc_ctl_commit       after CRIU wrote its images: one LMDB transaction names every chunk, the
 *                        journal position and the CRIU image directory: the checkpoint exists.
 *   crc_ctl_abort        drops what crc_ctl_checkpoint wrote (gc reclaims it).
 *   crc_ctl_resume       the session continues (--leave-running, or any failure before the process
 *                        was killed): the parked threads run on.
 * Restore (criu restore with the plugin, driven by `crcudactl restore ID`):
 *   crc_ctl_restore      RESTORE_UNIX_SK: a daemon replays the checkpoint into a new session (same
 *                        VA range and virtual handles, data uploaded), and returns a connected
 *                        client socket for that session; CRIU installs it where the application's
 *                        socket to the daemon was. The daemon then sends the client a rebind record
 *                        (new rings), and the parked threads continue.
 * All calls return 0 or a negative CRC_E*; on error, crc_ctl_error() says why in a sentence. */
#ifndef CRCUDA_CTL_H
#define CRCUDA_CTL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct crc_ctl;

/* Where the daemon is: a unix socket path, or "HOST:PORT" with a token (NULL for unix). NULL path:
 * crc_sock_default_path(). */
int crc_ctl_open(const char *daemon, const char *token, struct crc_ctl **out);
void crc_ctl_close(struct crc_ctl *c);
/* The last error message of this connection ("" if none). */
const char *crc_ctl_error(const struct crc_ctl *c);

struct crc_ctl_session {
	uint64_t session_id;
	pid_t pid; /* the client process (as the daemon's side of the socket sees it) */
	uid_t uid;
	uint64_t va_base, va_size;
	uint64_t device_bytes;	  /* allocated device memory */
	uint32_t state;		  /* enum crc_ctl_state */
	uint32_t transport;	  /* enum crc_transport */
	uint64_t journal_records; /* state-creating calls journaled so far */
	pid_t worker_pid;	  /* the daemon's worker process serving the session */
	uint32_t devices;	  /* bit g: a context on the daemon's GPU g */
};

enum crc_ctl_state {
	CRC_CTL_RUNNING = 1,
	CRC_CTL_QUIESCED,
	CRC_CTL_CHECKPOINTED, /* device state copied, waiting for commit or abort */
	CRC_CTL_RESTORING,
};

/* Sessions of the daemon (for `crcudactl ls`, and to find the session of a pid). *out is malloc'd. */
int crc_ctl_sessions(struct crc_ctl *c, struct crc_ctl_session **out, unsigned *n);

/* The session of pid stops at a call boundary and its streams are drained. CRC_ETIMEDOUT when a call
 * did not finish in timeout_ms (<= 0: 30 s); the session then runs on. A thread that makes a call while
 * the session is quiesced parks in libcrcuda until resume/rebind. A TCP session's client takes part
 * (crcuda/proto.h, "quiesce of a TCP session"): it parks at its next call boundary, or at once when
 * idle. */
int crc_ctl_quiesce(struct crc_ctl *c, pid_t pid, int timeout_ms);
/* The same, for a CRIU dump: a TCP session's client also replaces its TCP connection with a unix socket
 * connected to park (a listening socket of the caller's, on the client's host) and leaves the session
 * detached in the daemon: it takes it back (a new TCP connection) when the caller sends it a RESUME
 * notice there or hangs up, or it is rebound by a restore. park is ignored for unix sessions. */
int crc_ctl_quiesce_park(struct crc_ctl *c, pid_t pid, int timeout_ms, const char *park);

struct crc_ctl_ckpt_stats {
	uint64_t allocations, globals, modules;
	uint64_t device_bytes; /* bytes copied from the device */
	uint64_t new_bytes;    /* bytes written to the store (the rest was already there) */
	double seconds;	       /* device copy, hashing and writing */
	double copy_seconds;   /* the device-to-host copies alone (timed on the device) */
	uint64_t copied_bytes; /* bytes copied off the device (the rest had not changed since the last one) */
	double digest_seconds; /* finding what changed */
	uint64_t snapshot_bytes; /* of the copied bytes, those snapshotted on the device, drained later */
};

/* store_dir: the store (crc_store_open, created if missing); the daemon opens it itself, so it must see
 * that path. The session must be quiesced. The journal goes into the store (a store session per
 * daemon session and store), module images as blobs; regions of the manifest:
 *   device-alloc   every cuMemAlloc* allocation and every cuMemMap mapping of the session (addr, size)
 *   device-global  every __device__/__constant__ variable of every loaded module/library; name is
 *                  "SYMBOL@0xVHANDLE" (the module's or library's virtual handle), module the image hash
 * Metadata the daemon sets (besides the commit's): crcuda.session (store session id), crcuda.journal_seq
 * (last journal record included), crcuda.va_base, crcuda.va_size, crcuda.va_slot, crcuda.device
 * (device 0's ordinal), crcuda.device_name, crcuda.device_uuid, crcuda.devices (the daemon's ordinal
 * of each device the session used, by the application's ordinal: "0,1"), crcuda.device.I ("ORDINAL
 * UUID NAME" of the application's device I), crcuda.daemon_session, crcuda.pid,
 * crcuda.handles (next index of each handle table), criu.images_dir. */
int crc_ctl_checkpoint(struct crc_ctl *c, pid_t pid, const char *store_dir, struct crc_ctl_ckpt_stats *stats);
/* CRC_CTL_CKPT_BACKGROUND: what changed is snapshotted into free device memory (when there is room)
 * and copied to the store after the application resumes; the commit then answers id 0 at once and
 * happens when the copy is done: crc_ctl_commit_wait tells its end. */
#define CRC_CTL_CKPT_BACKGROUND 0x1u
int crc_ctl_checkpoint_flags(struct crc_ctl *c, pid_t pid, const char *store_dir, unsigned flags,
			     struct crc_ctl_ckpt_stats *stats);
/* The same, naming the sessions checkpointed with it (a process tree): CUDA IPC memory and VMM
 * shareable handles shared only among them do not refuse the checkpoint, and are opened again when
 * they are restored together. */
int crc_ctl_checkpoint_group(struct crc_ctl *c, pid_t pid, const char *store_dir, unsigned flags,
			     const uint64_t *group, unsigned ngroup, struct crc_ctl_ckpt_stats *stats);
/* Waits (up to timeout_ms) for the session's last background checkpoint to be committed: 0 and its
 * id, or its error. */
int crc_ctl_commit_wait(struct crc_ctl *c, pid_t pid, int timeout_ms, uint64_t *ckpt_id);
/* criu_images: the CRIU image directory, relative to store_dir; meta: NULL-terminated key=value
 * strings stored in the manifest. *ckpt_id: the committed checkpoint. */
int crc_ctl_commit(struct crc_ctl *c, pid_t pid, const char *criu_images, const char *const *meta,
		   uint64_t *ckpt_id);
/* Collective launches (kernels that wait for kernels of other processes: NCCL's, see crcuda/proto.h,
 * the session control page). A process tree is checkpointed at a point where every client has
 * launched the same number of them, or a client's drain would wait for a peer's kernel that the
 * peer, stopped before launching it, never launches: HOLD each client (*launched: its count, final
 * while held), then CAP each at the largest count: a client behind runs on until it has launched that
 * many, and a quiesce of a capped client waits for that (if it had launched any). RELEASE ends both;
 * so does a resume, and ttl_ms (a caller that died). Unix sessions only (CRC_ENOTSUP over TCP). */
#define CRC_CTL_COLL_HOLD    1 /* every later collective launch waits; *launched: the count */
#define CRC_CTL_COLL_CAP     2 /* launches up to target go, later ones wait; a quiesce waits for target */
#define CRC_CTL_COLL_RELEASE 3 /* neither: launches go on */
int crc_ctl_collective(struct crc_ctl *c, pid_t pid, unsigned action, uint64_t target, unsigned ttl_ms,
		       uint64_t *launched);
int crc_ctl_abort(struct crc_ctl *c, pid_t pid);
int crc_ctl_resume(struct crc_ctl *c, pid_t pid);
/* Resume, knowing that the client will not come back (CRIU kills it after the dump): a detached TCP
 * session ends at once rather than wait for its client to take it back. Else as crc_ctl_resume. */
int crc_ctl_release(struct crc_ctl *c, pid_t pid);
/* Suspend (crcudactl suspend): the session, quiesced and committed as checkpoint ckpt_id into
 * store_dir, ends and its worker exits (its GPU memory freed); its client stays parked and waits for a
 * resume (crcuda/proto.h, CRC_SUSPEND_SOCK_FMT), which restores that checkpoint (crc_ctl_restore) and
 * hands the client the new session's socket. Refused for a TCP session, or one not quiesced. */
int crc_ctl_suspend(struct crc_ctl *c, pid_t pid, uint64_t ckpt_id, const char *store_dir);
/* How far the checkpoint or restore of pid's session (the newest, a restoring one included) is: what
 * its worker last published. 0, or CRC_ENOTFOUND. */
enum crc_ctl_progress_op { CRC_CTL_PROGRESS_NONE = 0, CRC_CTL_PROGRESS_CHECKPOINT, CRC_CTL_PROGRESS_RESTORE };
struct crc_ctl_progress {
	unsigned op;	      /* enum crc_ctl_progress_op */
	uint64_t done, total; /* bytes of device memory */
	double seconds;	      /* since it began (to its end, once over) */
};
int crc_ctl_progress(struct crc_ctl *c, pid_t pid, struct crc_ctl_progress *p);
/* The connection's socket (to poll for the daemon's end), -1 for none. */
int crc_ctl_fd(const struct crc_ctl *c);

#define CRC_CTL_MAX_GPUS 8
struct crc_ctl_restore_opts {
	const char *store_dir;
	uint64_t ckpt_id;
	/* Where the session's devices go on the restoring daemon: with ngpus, the client's device i on
	 * GPU gpus[i] (one per device the checkpoint used); else with gpu >= 0, device 0 on GPU gpu and
	 * the others on the GPUs after it (where that is unambiguous); else the checkpointed ones. */
	int gpu;
	int gpus[CRC_CTL_MAX_GPUS];
	unsigned ngpus;
	/* --gpu by UUID ("GPU-...,GPU-..."): the GPUs of gpus[] (then -1), found by the restoring
	 * daemon; NULL for ordinals. Points into the string parsed. */
	const char *gpu_uuids;
	pid_t pid;	/* the restored process's pid, as CRIU restores it */
	int timeout_ms; /* for the replay */
	/* A worker staged under this key (crc_ctl_stage) restores it, uploading only what changed since
	 * the checkpoint it staged; 0, or no such worker: a fresh worker restores it all. */
	uint64_t stage_key;
};

/* Replays the checkpoint on the daemon of this connection and returns, in *client_fd, a socket
 * connected to it as the restored session's client (the connection itself becomes that socket; the
 * REBIND notice for the restored process is already queued on it). c is consumed (closed) on success;
 * on failure it stays open so that crc_ctl_error() says why: close it then. The restored session
 * runs in a worker process of its own, at the checkpoint's own device VA range. */
int crc_ctl_restore(struct crc_ctl *c, const struct crc_ctl_restore_opts *opts, int *client_fd);
/* Stages checkpoint opts->ckpt_id under opts->stage_key (not 0) on the daemon of this connection: a
 * worker replays its journal and uploads its device memory, and keeps them without a process until a
 * restore with the same key (crc_ctl_restore) takes them, uploading only the chunks that differ. A
 * second stage with the same key on the same connection moves the staged state to a newer checkpoint
 * of the same session the same way. The staged worker lives as long as this connection: close it to
 * drop what is staged. 0, or the error (crc_ctl_error says why). */
int crc_ctl_stage(struct crc_ctl *c, const struct crc_ctl_restore_opts *opts);
/* Parses a --gpu value, "N" or "A,B,...", or the same with GPU UUIDs ("GPU-xxxxxxxx-xxxx-xxxx-xxxx-
 * xxxxxxxxxxxx", as nvidia-smi -L shows them), into o's gpu/gpus/ngpus/gpu_uuids. 0, or CRC_EINVAL
 * with the reason in err. */
int crc_ctl_parse_gpus(const char *arg, struct crc_ctl_restore_opts *o, char *err, size_t err_len);

/* The daemon's side: the reply to control request req (status, the reason when it is not 0, data). */
struct crc_msg_hdr;
/* Reads one record (a request, or a worker's reply the front relays) into *h and a new *body of *len
 * bytes, with a NUL after them (strings in it end there at the latest). 0; CRC_EDAEMON when the peer
 * is gone; CRC_EPROTO when the record is not between sizeof(*h) + min_len and sizeof(*h) + max_len. */
int crc_ctl_record_read(int fd, struct crc_msg_hdr *h, uint8_t **body, size_t *len, size_t min_len,
			size_t max_len);
int crc_ctl_reply_send(int fd, const struct crc_msg_hdr *req, int status, const char *msg, const void *data,
		       size_t len);

/* The session of pid on the daemon at addr (unix socket): into *s (may be NULL). 0, CRC_ENOTFOUND when
 * it has none, or the error when the daemon does not answer. A process connected to the daemon whose
 * session is not listed yet (its first CUDA call is starting it) is waited for, up to wait_ms. Of two
 * sessions of one pid (an exec keeps it), the newer. */
int crc_ctl_find_pid(const char *addr, pid_t pid, int wait_ms, struct crc_ctl_session *s);
/* The same on an open control connection; unix_path: the daemon's socket, NULL for a TCP one (no wait). */
int crc_ctl_session_of(struct crc_ctl *c, pid_t pid, const char *unix_path, int wait_ms,
		       struct crc_ctl_session *s);

#endif
