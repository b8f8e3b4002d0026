/* crcudad internals: the backend (real or simulated libcuda, loaded by path), sessions, the device VA
 * window, and the handlers of forwarded calls. */
#ifndef CRCUDA_WORKER_H
#define CRCUDA_WORKER_H

#define __CUDA_API_VERSION_INTERNAL
#include <cuda.h>
#include <cudaProfiler.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "crc_store.h"
#include "crcuda/chan.h"
#include "crcuda/ctl.h"
#include "crcuda/journal.h"
#include "crcuda/cuda_api.h"
#include "crcuda/cuda_api_sig.def"
#include "crcuda/proto.h"
#include "crcuda/sock.h"

/* ---- backend: one typed pointer per symbol of the table (NULL where the library lacks it) ------ */
struct crc_backend {
#define CRC_CU_API(sym, parent, base, version, policy, pt, ret, params, args) ret(CUDAAPI *sym##_fn) params;
#include "crcuda/cuda_api.def"
#undef CRC_CU_API
};
extern struct crc_backend crc_be;
/* Calls an entry point the backend may lack (sym unexpanded: the table's own name). */
#define CALL(sym, ...) (crc_be.sym##_fn ? crc_be.sym##_fn(__VA_ARGS__) : CUDA_ERROR_NOT_SUPPORTED)
/* dlopens path and resolves every symbol; 0 or a negative CRC_E*. */
int crc_backend_load(const char *path);
/* This thread's stream capture mode set to relaxed; returns the one it had. */
CUstreamCaptureMode crc_thread_capture_relaxed(void);
/* pthread_create for every thread of the worker's own (not the session's thread, which runs the
 * application's calls in its modes): fn runs in the relaxed capture mode, so that its driver calls
 * never conflict with the application's stream captures. A capture in the global mode forbids every
 * other thread of the process potentially unsafe calls, and the driver invalidates the capture when one
 * is made; natively those threads are not in the application's process. */
int crc_thread_create(pthread_t *t, const pthread_attr_t *attr, void *(*fn)(void *), void *arg);
/* Reserves the session's device VA range at exactly [base, base + size) (main.c). */
int crc_va_window(uint64_t base, uint64_t size, char *why, size_t why_len);
/* The session's state, memory or GPUs changed: the front's listing follows (main.c). */
void crc_worker_publish(void);
/* The session is over: the front stops listing it (main.c). */
void crc_worker_session_ended(void);
/* This worker's checkpoint or restore, for crcudactl's progress lines (link.h, crc_worker_progress):
 * begun with total bytes of device memory (op: enum crc_ctl_progress_op), bytes handled, over. */
void crc_progress_start(unsigned op, uint64_t total);
void crc_progress_add(uint64_t bytes);
void crc_progress_end(void);
/* Tests: sleeps the milliseconds the environment variable env names (none where it is unset). */
void crc_test_delay(const char *env);
/* A restore (or its lazy upload) begins (+1) or ends (-1): the front starts no worker meanwhile. */
void crc_worker_restoring(int delta);

/* ---- the worker's state: one session at most ------------------------------------------------ */
struct crc_daemon {
	uint64_t va_base;    /* the session's device VA range, reserved at this very address */
	uint64_t va_session; /* its size */
	int dev_count;
	struct crc_hello_reply proto; /* device info every hello answers with (session fields blank) */
	size_t ring_size;
	pthread_mutex_t lock; /* session, restoring */
	struct crc_session *session;
	unsigned restoring;	  /* restore requests served, and stage connections open (no session yet) */
	uint64_t next_session_id; /* the id the front gave the session */
};
extern struct crc_daemon crcd;

/* ---- sessions ------------------------------------------------------------------------------------ */
union crc_slot {
	void *ptr;
	uint64_t u64;
};

struct crc_htable {
	union crc_slot *real; /* [index]; index 0 unused */
	uint32_t n, cap;
};

/* What the session holds in device memory, freed when it ends. */
enum crc_alloc_kind {
	CRC_ALLOC_MEM,	   /* cuMemAlloc*: created, mapped and made accessible here */
	CRC_ALLOC_RESERVE, /* the application's cuMemAddressReserve */
	CRC_ALLOC_MAP,	   /* the application's cuMemMap */
	CRC_ALLOC_HANDLE,  /* the application's cuMemCreate (refs: create + retains - releases) */
	CRC_ALLOC_IPC,	   /* another session's memory opened here (cuIpcOpenMemHandle; refs: opens) */
};
struct crc_alloc {
	enum crc_alloc_kind kind;
	uint64_t ptr, size;
	uint64_t req; /* the bytes cuMemAlloc asked for (size is rounded to the granule) */
	CUmemGenericAllocationHandle handle;
	uint64_t vhandle;
	int refs;
	bool in_window; /* a reservation inside the session range (else the backend's own) */
	bool sync_set;	/* cuPointerSetAttribute(SYNC_MEMOPS) named this allocation: sync_memops answers */
	unsigned sync_memops;
	uint64_t ipc_key;  /* MEM, HANDLE: exported under this key (cuIpcGetMemHandle, a shareable handle);
			      IPC, and HANDLE or MAP with ipc_imported: the export opened */
	bool ipc_imported; /* HANDLE: imported from a shareable handle; MAP: a mapping of such a handle */
	int ipc_dev;	   /* IPC: the backend device it is accessible from */
	uint64_t ipc_exporter; /* HANDLE or MAP with ipc_imported: the exporting session */
	uint64_t map_offset;   /* MAP: cuMemMap's offset into the handle */
	/* MAP with ipc_imported: cuMemSetAccess's flags by the application's device ordinal (its
	 * records are not journaled: a restore sets them again from here). */
	uint8_t access[CRC_MAX_DEVICES];
	struct crc_alloc *next;
};

struct crc_pin {
	uint64_t client_addr, bytes;
	void *local;
	uint64_t device_ptr;
	/* Managed memory placed on a GPU (managed.c): the device memory mapped at client_addr, and the
	 * shared pages moved to host_view meanwhile (0 / NULL: the pages are at client_addr). */
	CUmemGenericAllocationHandle dmem;
	void *host_view;
	struct crc_pin *next;
};

struct crc_ptstream {
	uint32_t tid;
	uint64_t ctx;
	CUstream stream;
};

/* The journal of a session, in memory until a checkpoint writes it to a store (crcuda/journal.h). */
struct crc_jentry {
	uint32_t type; /* enum crc_jrec_type */
	uint32_t len;
	uint8_t *payload;
};
/* A module or library image, once per content. */
struct crc_image {
	struct crc_hash hash;
	uint8_t *bytes;
	size_t len;
	/* Its device globals' names, read once (a checkpoint needs them; reading decompresses the image). */
	char **globals;
	size_t nglobals;
	int globals_state; /* 0 not read yet, 1 read, -1 unreadable */
};
/* Which image a module/library handle was loaded from. */
struct crc_modimg {
	uint64_t vhandle;
	uint32_t image; /* index in images */
};

struct crc_session {
	uint64_t id;
	int fd;
	bool tcp;
	struct crc_peer peer;
	struct crc_chan chan;
	pthread_t thread;
	struct crc_htable tables[CRC_HT_COUNT];
	uint64_t cur_ctx;  /* the context made current last (virtual), UINT64_MAX: unknown */
	CUresult deferred; /* first error of posted work, reported at the next synchronising call */
	CUresult sticky;   /* a device fault (700, 710, 719...): every later call answers it, as natively */
	char *graphs_pending; /* a restore's graph description, rebuilt at the client's first call */
	uint64_t va_base, va_size;
	struct crc_alloc *allocs;
	uint64_t mapped_bytes;
	uint32_t devices; /* bit g: a context on backend device g (crcudactl ls) */
	struct crc_pin *pins;
	void *rings_pinned;    /* the rings, page-locked for device copies into them (NULL: not yet) */
	bool rings_pin_failed; /* ... and not to be tried again */
	struct crc_ptstream *ptstreams;
	unsigned n_ptstreams;
	/* When each event was last recorded (by event index, in record order; 0: never): a restore
	 * records them again in that order, so the restored program's cuEventElapsedTime, queries and
	 * waits see recorded events, as they were. */
	uint64_t *event_marks;
	uint32_t event_marks_cap;
	uint64_t event_mark_seq;
	struct crc_gexec *gexecs;	      /* executable graphs and their shadows (graph.c) */
	struct crc_cond_handle *cond_handles; /* conditional handles and nodes as made (graph.c) */
	struct crc_cond_node *cond_nodes;
	struct crc_uobj *uobjs; /* user objects and the graphs' references to them (graph.c) */
	struct crc_uobj_hold *uobj_holds;
	struct crc_hostfn_page *hostfn;	    /* the client's, for host functions (hostfn.c) */
	struct crc_hostfn_arg *hostfn_args; /* what host nodes run */
	struct crc_notify_reg *notify;	    /* the application's log and async callbacks (hostfn.c) */
	struct crc_texobj *texobjs;	    /* live texture and surface objects (arrays.c) */
	void *exec_app_node;		    /* the node an exec node call named, before graph.c remapped it */
	/* Interprocess events (ipc.c): the real events this session exported a handle of, and those it
	 * opened from another process's handle. */
	/* Interprocess events it exported (cuIpcGetEventHandle) and opened (cuIpcOpenEventHandle): the
	 * driver's event, the key of its handle in the front's registry, the exporting session. */
	struct crc_ipc_event {
		void *ev;
		uint64_t key, exporter;
	} * ipc_events_out, *ipc_events_in;
	unsigned n_ipc_events_out, n_ipc_events_in;
	bool ipc_frozen; /* its exports are frozen in the front's registry for a checkpoint */
	/* The sessions checkpointed with this one (a process tree: CRC_OP_CTL_CHECKPOINT's group): IPC
	 * memory shared among them is restored with them. */
	uint64_t ckpt_group[64];
	unsigned ckpt_ngroup;
	/* Collective launches (crc_coll_control): the count when held, and the count a quiesce waits
	 * for (0: none). Written by a control thread, read by the session's. */
	_Atomic uint64_t coll_at_hold, coll_target;
	/* The reply being built and module images being assembled. */
	uint8_t *out;
	size_t out_len, out_cap;
	uint8_t *image;
	size_t image_len, image_cap;
	const struct crc_msg_hdr *msg; /* the request being executed */

	/* Journal (journal.c). */
	struct crc_jentry *jrec;
	size_t njrec, jrec_cap;
	size_t jcompact_at; /* records past jflushed that trigger a compaction (0: COMPACT_MIN) */
	struct crc_image *images;
	size_t nimages, images_cap;
	struct crc_modimg *modimgs;
	size_t nmodimgs, modimgs_cap;
	/* What the call being executed did, for its journal record. */
	bool jcapture;
	uint64_t jnew[16], jrefs[16];
	unsigned njnew, njrefs;
	uint64_t jaddr, jsize, jobject;
	int jimage;  /* index of the image a load just used, -1 */
	bool jdrop;  /* the call left nothing a replay must redo */
	void *jargs; /* malloc'd: the record's argument bytes instead of the request's (crc_journal_args) */
	size_t jargs_len;
	char call_why[320]; /* why the call failed, for a restore's message ("" when nothing to say) */
	/* Replay (restore): the handles and the address the next call must produce. */
	const uint64_t *force;
	unsigned nforce;
	bool force_mismatch;
	uint64_t force_addr;
	int dev_map[CRC_MAX_DEVICES]; /* the client's device ordinal -> the backend's */

	/* Control (control.c): commands run on the session thread. */
	pthread_mutex_t ctl_lock;
	pthread_cond_t ctl_cond;
	uint32_t state; /* enum crc_ctl_state */
	int refs;	/* control threads holding the session */
	bool ending;
	int cmd; /* CRC_OP_CTL_* waiting for the session thread, 0 none */
	const void *cmd_arg;
	size_t cmd_len;
	int cmd_timeout_ms;
	bool cmd_done;
	int cmd_rc;
	char cmd_msg[CRC_CTL_MSG_MAX];
	uint8_t cmd_out[128];
	size_t cmd_out_len;
	/* The store a checkpoint writes to, and what of the journal it holds already. */
	char *store_dir;
	uint64_t store_session;
	size_t jflushed, images_flushed;
	uint64_t journal_seq;
	struct crc_store *store;
	struct crc_ckpt *ckpt;
	/* Incremental checkpoints: the digests of the last committed checkpoint's chunks with their
	 * store hashes (prev), and those of the checkpoint under way (next, prev once committed). */
	struct crc_inc_table {
		struct crc_inc_entry {
			uint64_t digest[2];
			struct crc_hash hash;
			uint64_t len;
		} * e;
		size_t n, cap;
	} inc_prev, inc_next;
	/* Pinned staging buffers of checkpoints, kept between them (ckpt.c). */
	struct crc_staging {
		CUcontext ctx;
		void *buf[16];
		unsigned n;
	} staging;
	/* A restore's device memory still going up (restore.c, CRCUDA_RESTORE_LAZY). */
	struct crc_upload *upload;
	/* A checkpoint being drained in the background (ckpt.c), and how the last one ended. */
	struct crc_bg *bg;
	int bg_last_rc;
	uint64_t bg_last_id;
	char bg_last_why[CRC_CTL_MSG_MAX];

	/* TCP quiesce and detach (tcp_park.c, crcuda/proto.h). */
	uint8_t ticket[32];	 /* a detached client's proof when it takes the session back */
	bool acked;		 /* the client acknowledged the quiesce request */
	bool detached;		 /* its TCP connection is closed; fd -1 until it takes the session back */
	bool suspended;		 /* crcudactl suspend: the session ends, its client waits for a resume */
	double reclaim_by;	 /* detached and resumed: ends unless taken back by then (CLOCK_MONOTONIC) */
	int reclaim_fd;		 /* a new connection of the client, for the session thread to take (-1) */
	const void *quiesced_by; /* the control connection of a park quiesce (resumed if it drops) */
	/* A restored TCP session with TLS: the session thread's first act is a handshake with this key
	 * (the restored client's, from the REBIND notice its restorer passed on). */
	bool tls_pending;
	uint8_t tls_key[32];
	/* Bulk connections of a TCP session and striped copies (stripe.c, crcuda/proto.h). */
	int bulk_fd[CRC_BULK_MAX]; /* -1: none; changed under ctl_lock (the main thread adds them) */
	unsigned bulk_want;	   /* connections the last CRC_OP_BULK_OPEN granted */
	bool bulk_key_live;	   /* the key opens connections until bulk_want are in */
	uint8_t bulk_key[32];
	bool stripe_handled; /* the request being served was a striped copy whose pieces moved */
	void *stripe_stage;  /* pieces between the sockets and the device */
	size_t stripe_stage_bytes;
	bool stripe_stage_pinned;
	uint64_t stripe_copies, stripe_bytes; /* striped copies made, for the log */
};

/* ---- striped copies over bulk connections (stripe.c) ---------------------------------------------- */
/* A bulk connection the front handed over (main thread): kept for the session it names if its key is
 * right (answered status 0). 0, or CRC_E* for the caller to refuse it with (logged here). */
int crc_bulk_attach(int fd, const struct crc_hello *hello);
/* CRC_OP_BULK_OPEN. */
CUresult crc_ctl_bulk_open(struct crc_session *s, const uint8_t *args, size_t len);
/* Ends the session's bulk connections (the client's reads and writes on them fail at once). */
void crc_bulk_close(struct crc_session *s);
/* A copy with a CRC_LOC_STRIPED side: extra is what follows its crc_copy_req (crc_stripe_req). */
CUresult crc_stripe_copy(struct crc_session *s, const struct crc_copy_req *r, const uint8_t *extra,
			 size_t extra_len, CUstream st);
/* After request m was served with res: a striped copy whose pieces did not move (refused before
 * crc_stripe_copy) ends the bulk connections. The result to answer. */
CUresult crc_stripe_after(struct crc_session *s, const struct crc_msg_hdr *m, CUresult res);
/* The staging memory, at the session's end. */
void crc_stripe_free(struct crc_session *s);

/* Starts the session thread for an accepted, greeted connection. */
int crc_session_start(int fd, bool tcp, const struct crc_peer *peer, const struct crc_hello *hello);
/* A session for a restore, not started: its thread comes with crc_session_run. */
int crc_session_create(int fd, bool tcp, const struct crc_peer *peer, struct crc_session **out, char *why,
		       size_t why_len);
/* Makes the rings memfd of a unix session (*memfd: the daemon's copy, to send). */
int crc_session_make_rings(struct crc_session *s, int *memfd);
int crc_session_run(struct crc_session *s);
/* Frees a session crc_session_create made and crc_session_run never started. */
void crc_session_destroy(struct crc_session *s);
/* Executes one driver-call request (payload = crc_call_hdr + args) as if the client had sent it. */
CUresult crc_session_execute(struct crc_session *s, const struct crc_msg_hdr *m);
/* Serves the session's channel for up to timeout_ms (one request at most). false: the client is gone. */
bool crc_session_serve_one(struct crc_session *s, int timeout_ms);
/* A pending control command for the session thread, and its completion. */
void crc_session_command(struct crc_session *s);
void crc_session_cmd_done(struct crc_session *s, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ---- journal (journal.c) -------------------------------------------------------------------------- */
/* Before executing a call: start capturing what it does. */
void crc_journal_begin(struct crc_session *s);
/* After a successful call: append its record when it changed state the journal keeps. */
void crc_journal_end(struct crc_session *s, int op, const struct crc_call_hdr *h, const uint8_t *args,
		     size_t len);
/* Remembers an image (by content) for the module/library just loaded; -1 on memory exhaustion. */
int crc_journal_image(struct crc_session *s, const void *bytes, size_t len);
/* The record of the call being executed carries these argument bytes (malloc'd, taken over) instead of
 * the request's: what the call gave that a replay must check (a split's groups). */
void crc_journal_args(struct crc_session *s, void *args, size_t len);
void crc_journal_free(struct crc_session *s);
/* The name argument (STR) of a generated-marshalling request, or NULL. */
const char *crc_request_str_arg(int op, const uint8_t *args, size_t len);

/* A decoded record with a mark, for crc_journal_mark_dead. */
struct crc_jrec_item {
	uint32_t type; /* enum crc_jrec_type */
	struct crc_jrec_view v;
	bool skip;
};

/* Marks (skip) what a replay of items[0..n) need not recreate: objects destroyed within the list
 * (streams, events, modules, contexts, cuMemAlloc memory) with the records that destroy them, and
 * every record that used a handle of theirs. Used by restore, and by the daemon to keep a long
 * session's journal from growing with create/destroy pairs. 0 or CRC_ENOMEM (then the marks are
 * incomplete and must not be used). */
int crc_journal_mark_dead(struct crc_jrec_item *items, size_t n);

/* ---- checkpoint and restore (ckpt.c, restore.c) ------------------------------------------------- */
/* On the session thread, quiesced. Fill the reply data (s->cmd_out) and message themselves. */
int crc_ckpt_quiesce(struct crc_session *s, int timeout_ms);
void crc_ckpt_resume(struct crc_session *s);
/* A control thread's CRC_OP_CTL_COLLECTIVE (w: request in, reply out): 0, or an error and why. */
int crc_coll_control(struct crc_session *s, struct crc_ctl_coll_wire *w, char *why, size_t len);

/* ---- TCP quiesce and detach (tcp_park.c) ---------------------------------------------------------- */
/* On the session thread: asks the TCP client to park (park: "" or the path to detach to) and serves its
 * records until it acknowledges (and, detaching, closes). 0, or an error with crc_session_cmd_done. */
int crc_tcp_quiesce(struct crc_session *s, double deadline, const char *park);
/* The client's CRC_OP_QUIESCE_ACK record (held in s->chan): takes note, and a detaching client's EOF. */
void crc_tcp_acked(struct crc_session *s, const void *payload, size_t len);
/* Resume of a TCP session: RESUME record to an attached client, reclaim deadline for a detached one
 * (release: none, it ends at once). */
void crc_tcp_resume(struct crc_session *s, bool release);
/* Accept thread: a hello that takes a detached session back (hello->session_id). 0, or the refusal. */
int crc_tcp_reclaim(int fd, const struct crc_hello *hello);
/* On the session thread: takes a reclaiming connection (aborting a checkpoint it abandoned). false
 * while detached with nothing to take (the caller keeps waiting), or when the session must end. */
bool crc_tcp_take_back(struct crc_session *s, bool *end);
/* flags: CRC_CTL_CKPT_* (crcuda/ctl.h). */
int crc_ckpt_run(struct crc_session *s, const char *store_dir, unsigned flags);
/* Background checkpoints (ckpt.c). crc_bg_end: commits it if asked to, else aborts it, and waits
 * (session thread). crc_bg_release: waits until its snapshot is freed; true if one was held (a call
 * that ran out of device memory meanwhile may try again). crc_bg_wait (control thread): waits up to
 * timeout_ms for the last one's end: 0 and its id, or its error said in why. */
void crc_bg_end(struct crc_session *s);
/* Waits for a lazy restore's upload (restore.c); a failed one leaves the session lost (sticky). */
void crc_upload_wait(struct crc_session *s);
/* Frees the kept staging buffers (before a context goes; session thread, no drain running). */
void crc_staging_free(struct crc_session *s);
bool crc_bg_release(struct crc_session *s);
int crc_bg_wait(struct crc_session *s, int timeout_ms, uint64_t *id, char *why, size_t why_len);
/* Shared by checkpoint and restore (ckpt.c). */
double crc_now_s(void);
/* Pinned staging of len bytes, portable across contexts, on 2 MiB pages where it can be (pinned.c);
 * a context current. Freed by crc_pinned_free only. */
CUresult crc_pinned_alloc(void **out, size_t len);
void crc_pinned_free(void *p);
/* Chunk digests (digest.h) of n chunks {addr, len} (desc[2i], desc[2i + 1],
 * addresses 16-byte aligned, memory accessible in ctx) on the device, into out[2i], out[2i + 1]: 0,
 * CRC_ENOTSUP (no kernel in this build) or CRC_ECUDA, said in why. */
int crc_digest_device(CUcontext ctx, const uint64_t *desc, size_t n, uint64_t *out, double *seconds,
		      char *why, size_t why_len);
/* Forgets a table of chunk digests. */
void crc_inc_clear(struct crc_inc_table *t);
CUcontext crc_session_ctx(struct crc_session *s);
/* A live context of the session on each backend device (NULL where none); how many devices have one.
 * Leaves one of them current. */
int crc_session_dev_ctxs(struct crc_session *s, CUcontext ctx[CRC_MAX_DEVICES]);
/* The device whose context copies device memory at addr: its own where the session has a context
 * there, else the first device that has one (-1: none). */
int crc_addr_group(uint64_t addr, CUcontext ctx[CRC_MAX_DEVICES]);
CUresult crc_global_of(struct crc_session *s, uint64_t vh, const char *name, CUdeviceptr *addr, size_t *size);
int crc_ckpt_commit_session(struct crc_session *s, const char *args, size_t len);
void crc_ckpt_abort_session(struct crc_session *s);
/* On a control connection: replays a checkpoint into a new session served on fd. Replies itself. */
/* --gpu by UUID: w->gpus[] from the comma-separated UUIDs (the GPUs of this daemon). 0, or CRC_ENODEV /
 * CRC_EINVAL with the reason. */
int crc_restore_gpus_by_uuid(struct crc_ctl_restore_wire *w, const char *uuids, char *why, size_t why_len);
/* Stages checkpoint w->ckpt_id under w->stage_key (crc_ctl_stage): replayed and uploaded in a session
 * without a process, kept until crc_restore with the same key takes it (only the chunks that changed go
 * up then) or crc_restore_stage_drop; a second stage with the key moves it on the same way. */
int crc_restore_stage(bool tcp, const struct crc_peer *peer, const struct crc_ctl_restore_wire *w,
		      const char *store_dir, bool expected, char *why, size_t why_len);
/* n stage requests handed to this worker (-n: one that will not stage after all): a restore or a
 * drop waits for them, else a restore whose thread ran first would restore afresh beside the stage.
 * expected above: the request was counted here. */
void crc_restore_stage_expect(int n);
void crc_restore_stage_drop(uint64_t key);
int crc_restore(int fd, bool tcp, const struct crc_peer *peer, const struct crc_msg_hdr *req,
		const struct crc_ctl_restore_wire *w, const char *store_dir, char *why, size_t why_len);
/* A ready worker makes a restore's pinned staging buffers ahead (CRCUDA_RESTORE_STAGING_AHEAD=0: not);
 * a worker given a new session frees them (a restore uses them, then frees them). */
void crc_upload_staging_prepare(void);
void crc_upload_staging_release(void);
/* The same on a thread of its own, so that a new session's start does not wait for it. */
void crc_upload_staging_release_async(void);

/* ---- control connections (control.c) -------------------------------------------------------------- */
/* Serves a control connection the front handed over, starting with its pending request (req, len bytes:
 * header and payload; none: NULL). */
void crc_control_start(int fd, bool tcp, const struct crc_peer *peer, const void *req, size_t len);

/* Appends n bytes to the reply (8-byte aligned); NULL on memory exhaustion. */
void *crc_out(struct crc_session *s, size_t n);
/* The real object behind a virtual handle of the given tag (0 is NULL; special stream values
 * honoured); CUDA_ERROR_INVALID_HANDLE if unknown. */
/* The primary context of the client's first device, retained (for work that needs some context). */
CUresult crc_session_primary_ctx(struct crc_session *s, CUcontext *ctx);
CUresult crc_translate(struct crc_session *s, const struct crc_call_hdr *h, unsigned tag, uint64_t v,
		       union crc_slot *out);
/* Names a new object: the virtual handle the client will use. */
uint64_t crc_register(struct crc_session *s, unsigned tag, union crc_slot real);
/* Names an object with a handle the application already holds (v; 0: none), as a restore must. */
void crc_register_at(struct crc_session *s, uint64_t v, union crc_slot real);
void crc_forget(struct crc_session *s, uint64_t v);
/* Finds the virtual handle of a real object (e.g. a function looked up twice), 0 if none. */
uint64_t crc_find_handle(struct crc_session *s, unsigned tag, void *real);
/* The client's handle of a real object: the one it has, else a new one (0 for NULL). */
uint64_t crc_handle_of(struct crc_session *s, unsigned tag, void *real);
/* The backend's ordinal of the client's device dev (s->dev_map), and the client's of a backend's. */
int crc_dev_backend(const struct crc_session *s, int dev);
int crc_dev_client(const struct crc_session *s, int dev);

/* ---- handlers (handlers.c) ------------------------------------------------------------------------ */
/* Overrides of rows the generated marshalling carries: same arguments, daemon-side meaning. */
#define CRC_OVERRIDES(X)                                                                                     \
	X(cuDevicePrimaryCtxRetain)                                                                          \
	X(cuMemAlloc_v2)                                                                                     \
	X(cuIpcGetMemHandle)                                                                                 \
	X(cuIpcOpenMemHandle)                                                                                \
	X(cuIpcOpenMemHandle_v2)                                                                             \
	X(cuIpcCloseMemHandle)                                                                               \
	X(cuIpcGetEventHandle)                                                                               \
	X(cuIpcOpenEventHandle)                                                                              \
	X(cuEventDestroy)                                                                                    \
	X(cuEventDestroy_v2)                                                                                 \
	X(cuMemAllocPitch_v2)                                                                                \
	X(cuMemFree_v2)                                                                                      \
	X(cuMemAddressReserve)                                                                               \
	X(cuMemAddressFree)                                                                                  \
	X(cuMemMap)                                                                                          \
	X(cuMemUnmap)                                                                                        \
	X(cuMemRelease)                                                                                      \
	X(cuModuleUnload)                                                                                    \
	X(cuLibraryUnload)                                                                                   \
	X(cuGraphInstantiateWithFlags)                                                                       \
	X(cuGraphExecDestroy)                                                                                \
	X(cuGraphDestroy)                                                                                    \
	X(cuGraphConditionalHandleCreate)                                                                    \
	X(cuGraphDestroyNode)                                                                                \
	X(cuGraphClone)                                                                                      \
	X(cuUserObjectRetain)                                                                                \
	X(cuUserObjectRelease)                                                                               \
	X(cuGraphRetainUserObject)                                                                           \
	X(cuGraphReleaseUserObject)                                                                          \
	X(cuDeviceGetDevResource)                                                                            \
	X(cuCtxGetDevResource)                                                                               \
	X(cuGreenCtxGetDevResource)                                                                          \
	X(cuGreenCtxDestroy)

#define CRC_DECL_OVERRIDE(sym) CUresult crc_ovr_##sym(struct crc_session *s, void *const *argv);
CRC_OVERRIDES(CRC_DECL_OVERRIDE)
#undef CRC_DECL_OVERRIDE

/* A launch request decoded (handlers.c): the function, stream and parameters as the driver takes them.
 * Points into the request. */
struct crc_launch_args {
	const struct crc_launch_req *req;
	void *func;
	CUstream stream;
	const uint8_t *buf;
	size_t buf_size;
	void *params[CRC_MAX_KPARAMS], *extra[5];
	void **kp, **ex; /* kernelParams or extra, one of them NULL */
};
CUresult crc_launch_decode(struct crc_session *s, const struct crc_call_hdr *h, const uint8_t *args,
			   size_t len, struct crc_launch_args *la);
/* Page-locked memory the client shares: the daemon's address of the client's [addr, addr + bytes), 0 if
 * none holds it; and back. */
uint64_t crc_pin_local(struct crc_session *s, uint64_t addr, uint64_t bytes);
/* A stream is being captured into a graph (or its capture was invalidated): the driver says so. */
bool crc_stream_capturing(CUstream st);
uint64_t crc_pin_client(struct crc_session *s, uint64_t local);
/* Makes one of the session's contexts current when none is (*prev: what was); crc_session_ctx_back
 * undoes it. Registrations and managed-memory moves need a context and the session may have none yet. */
CUresult crc_session_some_ctx(struct crc_session *s, CUcontext *prev);
void crc_session_ctx_back(CUcontext prev);
/* Every live context of the session finishes its work (leaves none current). */
CUresult crc_session_drain(struct crc_session *s);

/* ---- managed memory on a GPU (managed.c) ----------------------------------------------------------- */
CUresult crc_ctl_managed_place(struct crc_session *s, const uint8_t *args, size_t len);
/* CRC_OP_MANAGED_WAIT: the CPU touched managed memory after GPU work was sent. */
CUresult crc_ctl_managed_wait(struct crc_session *s, const uint8_t *args, size_t len);
/* nvml.c: CRC_OP_NVML, a query for the real NVML of this host. */
CUresult crc_ctl_nvml(struct crc_session *s, const uint8_t *req, size_t len);
/* CRC_OP_MVAR_PULL / CRC_OP_MVAR_PUSH: a __managed__ variable's bytes to the client or from it. */
CUresult crc_ctl_mvar_copy(struct crc_session *s, bool push, const uint8_t *args, size_t len);
/* A checkpoint: the device copies of managed memory into the shared pages (the client's process
 * carries them); 0 or -1 with why. */
int crc_managed_flush(struct crc_session *s, char *why, size_t len);
/* A pin going away: frees its device memory and its moved pages (true), or false when it has none
 * (its pages are at client_addr, registered). */
bool crc_managed_release(struct crc_pin *p);

/* CUDA graphs (graph.c). A stream of the session is capturing: -1 with the reason (a quiesce must not
 * synchronise then). */
int crc_graph_capturing(struct crc_session *s, char *why, size_t len);
/* The session's graphs and executable graphs described for a checkpoint's metadata (NULL: why). */
char *crc_graph_describe(struct crc_session *s, char *why, size_t len);
/* Rebuilds them in a restored session, at the handles the application holds; 0 or -1 with why. */
int crc_graph_restore(struct crc_session *s, const char *desc, char *why, size_t len);
/* A restore's graphs (s->graphs_pending) rebuilt now: once the restored client has registered its
 * page-locked memory again, which their copies name (the driver checks a host side when the node is
 * made). A failure is the session's sticky error, logged with the reason; 0 or -1. */
int crc_graph_restore_pending(struct crc_session *s);
/* A generic call (op, its arguments as the driver took them) changed an executable graph: mirrored
 * onto its shadow, or marked modified. */
void crc_graph_exec_changed(struct crc_session *s, int op, void *const *argv);
/* Before such a call (argv[0] an executable graph, argv[1] a node): the node the driver takes for it. */
void crc_graph_exec_remap(struct crc_session *s, int op, void *const *argv);
/* The session ends: the executable graphs it still has are destroyed (what they hold on the device
 * goes before the worker does; a suspend's worker gives it back to the GPU). */
void crc_graph_release(struct crc_session *s);
void crc_graph_free(struct crc_session *s);
/* Host functions (hostfn.c): node parameters that run the application's fn(data) in the client, and
 * back (false: not such a node). */
CUresult crc_hostfn_node_params(struct crc_session *s, uint64_t fn, uint64_t data, CUDA_HOST_NODE_PARAMS *p);
bool crc_hostfn_of(const CUDA_HOST_NODE_PARAMS *p, uint64_t *fn, uint64_t *data);
CUresult crc_ctl_hostfn_register(struct crc_session *s);
/* CRC_OP_NOTIFY_REGISTER (reg) / CRC_OP_NOTIFY_UNREGISTER (hostfn.c). */
CUresult crc_ctl_notify(struct crc_session *s, bool reg, const uint8_t *args, size_t len);
void crc_hostfn_free(struct crc_session *s);
/* A user object whose destroy callback runs the application's destroy(ptr); *arg: whether it lives. */
CUresult crc_hostfn_userobj_make(struct crc_session *s, uint64_t destroy, uint64_t ptr, unsigned refs,
				 unsigned flags, CUuserObject *obj, struct crc_hostfn_arg **arg);
bool crc_hostfn_alive(const struct crc_hostfn_arg *a);
/* A user object made (vh: the client's handle; refs: the caller's references), recorded for checkpoints
 * (graph.c). */
CUresult crc_graph_userobj_made(struct crc_session *s, uint64_t vh, uint64_t destroy, uint64_t ptr,
				unsigned flags, unsigned refs, struct crc_hostfn_arg *arg);

/* Hand-marshalled requests: the payload after struct crc_call_hdr. */
typedef CUresult crc_raw_fn(struct crc_session *s, const struct crc_call_hdr *h, const uint8_t *args,
			    size_t len);
#define CRC_RAW_HANDLERS(X)                                                                                  \
	X(cuMemcpyHtoD_v2, copy)                                                                             \
	X(cuMemcpyHtoDAsync_v2, copy)                                                                        \
	X(cuMemcpyDtoH_v2, copy)                                                                             \
	X(cuMemcpyDtoHAsync_v2, copy)                                                                        \
	X(cuModuleLoadData, load)                                                                            \
	X(cuLibraryLoadData, load)                                                                           \
	X(cuModuleGetFunction, getfn)                                                                        \
	X(cuLibraryGetKernel, getfn)                                                                         \
	X(cuKernelGetFunction, getfn)                                                                        \
	X(cuLaunchKernel, launch)                                                                            \
	X(cuLaunchKernelEx, launch)                                                                          \
	X(cuLaunchCooperativeKernel, launch)                                                                 \
	X(cuOccupancyMaxActiveClusters, occupancy)                                                           \
	X(cuOccupancyMaxPotentialClusterSize, occupancy)                                                     \
	X(cuMemCreate, vmm_create)                                                                           \
	X(cuMemRetainAllocationHandle, vmm_retain)                                                           \
	X(cuMemSetAccess, vmm_access)                                                                        \
	X(cuMemExportToShareableHandle, vmm_export)                                                          \
	X(cuMemImportFromShareableHandle, vmm_import)                                                        \
	X(cuPointerGetAttribute, ptrattr)                                                                    \
	X(cuPointerGetAttributes, ptrattrs)                                                                  \
	X(cuPointerSetAttribute, ptrset)                                                                     \
	X(cuCoredumpGetAttribute, coredump)                                                                  \
	X(cuCoredumpGetAttributeGlobal, coredump)                                                            \
	X(cuCoredumpSetAttribute, coredump)                                                                  \
	X(cuCoredumpSetAttributeGlobal, coredump)                                                            \
	X(cuMemBatchDecompressAsync, decompress)                                                             \
	X(cuGraphAddKernelNode_v2, graph_kernel)                                                             \
	X(cuGraphKernelNodeSetParams_v2, graph_kernel)                                                       \
	X(cuGraphExecKernelNodeSetParams_v2, graph_kernel)                                                   \
	X(cuGraphKernelNodeGetParams_v2, graph_kernel_get)                                                   \
	X(cuGraphAddMemcpyNode, graph_memcpy)                                                                \
	X(cuGraphMemcpyNodeSetParams, graph_memcpy)                                                          \
	X(cuGraphExecMemcpyNodeSetParams, graph_memcpy)                                                      \
	X(cuGraphMemcpyNodeGetParams, graph_memcpy_get)                                                      \
	X(cuStreamGetCaptureInfo_v3, capture_info)                                                           \
	X(cuLaunchHostFunc, hostfn_launch)                                                                   \
	X(cuGraphAddHostNode, graph_host)                                                                    \
	X(cuGraphHostNodeSetParams, graph_host)                                                              \
	X(cuGraphExecHostNodeSetParams, graph_host)                                                          \
	X(cuGraphHostNodeGetParams, graph_host_get)                                                          \
	X(cuStreamSetAttribute, stream_attr)                                                                 \
	X(cuMemGetAllocationPropertiesFromHandle, vmm_props)                                                 \
	X(cuLinkComplete, link)                                                                              \
	X(cuStreamGetAttribute, stream_attr)                                                                 \
	X(cuMemcpy3D_v2, array_copy)                                                                         \
	X(cuMemcpy3DAsync_v2, array_copy)                                                                    \
	X(cuMemMapArrayAsync, array_map)                                                                     \
	X(cuTexObjectCreate, texobj)                                                                         \
	X(cuTexObjectDestroy, texobj)                                                                        \
	X(cuTexObjectGetResourceDesc, texobj)                                                                \
	X(cuSurfObjectCreate, texobj)                                                                        \
	X(cuSurfObjectDestroy, texobj)                                                                       \
	X(cuSurfObjectGetResourceDesc, texobj)                                                               \
	X(cuTensorMapEncodeTiled, tmap)                                                                      \
	X(cuModuleEnumerateFunctions, module_functions)                                                      \
	X(cuLibraryEnumerateKernels, library_kernels)                                                        \
	X(cuTensorMapEncodeIm2col, tmap)                                                                     \
	X(cuTensorMapEncodeIm2colWide, tmap)                                                                 \
	X(cuTensorMapReplaceAddress, tmap)                                                                   \
	X(cuGraphAddNode, graph_cond)                                                                        \
	X(cuGraphAddBatchMemOpNode, graph_memops)                                                            \
	X(cuGraphBatchMemOpNodeSetParams, graph_memops)                                                      \
	X(cuGraphExecBatchMemOpNodeSetParams, graph_memops)                                                  \
	X(cuGraphBatchMemOpNodeGetParams, graph_memops_get)                                                  \
	X(cuGraphKernelNodeGetAttribute, knode_attr)                                                         \
	X(cuGraphKernelNodeSetAttribute, knode_attr)                                                         \
	X(cuUserObjectCreate, userobj_create)                                                                \
	X(cuLogsDumpToMemory, logs)                                                                          \
	X(cuLogsDumpToFile, logs)                                                                            \
	X(cuDevSmResourceSplitByCount, devres_split)                                                         \
	X(cuDevResourceGenerateDesc, devres_desc)

#define CRC_DECL_RAW(sym, fn) crc_raw_fn crc_raw_##fn;
CRC_RAW_HANDLERS(CRC_DECL_RAW)
#undef CRC_DECL_RAW

/* CUDA arrays, texture and surface objects (arrays.c). A checkpoint adds a region per array (and
 * mipmap level) with its contents, and describes the objects in its metadata (NULL: why); a restore
 * uploads the contents and makes the objects again with the values the application holds. */
int crc_arrays_ckpt(struct crc_session *s, struct crc_ckpt *ck, char *why, size_t why_len);
char *crc_texobjs_describe(struct crc_session *s);
int crc_arrays_restore(struct crc_session *s, struct crc_store *st, const struct crc_manifest *mf, char *why,
		       size_t why_len);
int crc_texobjs_restore(struct crc_session *s, const char *desc, char *why, size_t why_len);
void crc_texobjs_free(struct crc_session *s);

/* Control ops. */
CUresult crc_ctl_pin_register(struct crc_session *s, const uint8_t *args, size_t len);
CUresult crc_ctl_pin_unregister(struct crc_session *s, const uint8_t *args, size_t len);

/* Checkpoint metadata: the live events that were recorded, in record order ("v1,v2,..."; malloc'd,
 * NULL when out of memory); a restore records them again (crc_events_rerecord). */
char *crc_events_recorded(const struct crc_session *s);
/* Notes that event v (virtual) was recorded now. */
void crc_event_mark(struct crc_session *s, uint64_t v);
int crc_events_rerecord(struct crc_session *s, const char *list, char *why, size_t why_len);

/* Frees everything the session still holds (its memory, modules, streams, contexts). */
void crc_session_release_resources(struct crc_session *s);

/* ---- the session's VA range (handlers.c) ------------------------------------------------------- */
/* A free range of `size` bytes (granule multiple) in the session's range, at `hint` when free. */
int crc_va_take(struct crc_session *s, uint64_t size, uint64_t align, uint64_t hint, uint64_t *out);

/* ---- CUDA IPC between sessions (ipc.c) ---------------------------------------------------------- */
/* The session's allocations, for ipc.c (handlers.c). */
struct crc_alloc *crc_alloc_add(struct crc_session *s, enum crc_alloc_kind kind, uint64_t ptr, uint64_t size);
void crc_alloc_remove(struct crc_session *s, struct crc_alloc *a);
void crc_alloc_account(struct crc_session *s, int64_t bytes);
/* Memory a session allocates is exportable as a POSIX descriptor where the device can (so that
 * cuIpcGetMemHandle can give it to another session's worker): the requested handle types. failed: the
 * driver refused such memory; none from now on. */
CUmemAllocationHandleType crc_ipc_handle_types(CUdevice dev, bool failed);
/* Exports memory (h, size bytes) to the front's registry as a POSIX descriptor, under a new key into
 * *key unless it has one already. The driver's error, or what the registry's failure means. */
CUresult crc_ipc_export(struct crc_session *s, CUmemGenericAllocationHandle h, uint64_t size, uint64_t *key);
/* Imports the export named key: a handle of the backend's (*h) and its size. CUDA_ERROR_INVALID_VALUE
 * when the registry has no such export. */
CUresult crc_ipc_import(struct crc_session *s, uint64_t key, CUmemGenericAllocationHandle *h, uint64_t *size,
			uint64_t *session_id);
/* The exporter frees memory it exported: the front forgets it. */
void crc_ipc_unexport(uint64_t key);
/* Opened IPC memory goes (the session ends). */
void crc_ipc_unmap(struct crc_session *s, struct crc_alloc *a);
/* The session's opened IPC memory for a checkpoint's metadata (crcuda.ipc_opens; NULL: out of memory),
 * and its opening again in a restored session (0, or an error with why). */
char *crc_ipc_describe(struct crc_session *s);
int crc_ipc_restore(struct crc_session *s, const char *desc, double wait_s, char *why, size_t len);
/* The session's exports of cuMemAlloc memory ("ADDR KEY\n" each; NULL: out of memory), exported again
 * under the same keys in a restored session, so the handles the application gave out stay valid (a
 * failure is only logged: another live copy of the session exports them). */
char *crc_ipc_describe_exports(struct crc_session *s);
/* VMM memory imported from shareable handles of sessions checkpointed with this one: "H VHANDLE KEY
 * REFS" per imported handle still held, "M ADDR SIZE OFFSET KEY ACCESS" per mapping of one (ACCESS:
 * hex, a nibble of cuMemSetAccess flags per device, device 0 lowest). NULL: out of memory. */
char *crc_ipc_describe_imports(struct crc_session *s);
/* After the exports: imports each again (waiting up to wait_s for its exporter's restore to export
 * it) and maps it where it was. 0, or an error and why. */
int crc_ipc_restore_imports(struct crc_session *s, const char *desc, double wait_s, char *why, size_t len);
void crc_ipc_restore_exports(struct crc_session *s, const char *desc);
/* What of CUDA IPC refuses a checkpoint of the session: 0, or -1 with why. A session whose exports
 * nobody else has open passes, and they are frozen (other sessions' opens wait) until crc_ipc_thaw
 * (the session resumes) or its end. */
int crc_ipc_ckpt_check(struct crc_session *s, char *why, size_t len);
void crc_ipc_thaw(struct crc_session *s);
void crc_ipc_free(struct crc_session *s);

#endif
