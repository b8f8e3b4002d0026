/* libcrcuda internals: the connection to crcudad, the call machinery every hook and generated
 * forwarder uses, per-thread context state, and the client's caches of daemon objects. */
#ifndef CRCUDA_LIBCRCUDA_CLIENT_H
#define CRCUDA_LIBCRCUDA_CLIENT_H

#define __CUDA_API_VERSION_INTERNAL
#include <cuda.h>
#include <cudaProfiler.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "crcuda/uvm_advice.h"
#include "crcuda/chan.h"
#include "crcuda/cuda_api.h"
#include "crcuda/cuda_api_sig.def"
#include "crcuda/proto.h"

/* What every call returns once the daemon is gone (or was never reachable): a device the
 * application cannot use any more, never a hang. */
#define CRC_CU_DAEMON_GONE CUDA_ERROR_DEVICE_UNAVAILABLE

#define CRC_CTX_STACK 32

struct crc_thread {
	uint64_t ctx_stack[CRC_CTX_STACK]; /* [depth - 1] is current */
	int depth;
	uint32_t tid;
	bool ptds;	 /* inside a _ptds/_ptsz entry point */
	bool collective; /* posting a collective launch (the gate counts it) */
};

/* The calling thread's state (created on first use). */
struct crc_thread *crc_self(void);
static inline uint64_t crc_current_ctx(void)
{
	struct crc_thread *t = crc_self();
	return t->depth ? t->ctx_stack[t->depth - 1] : 0;
}

struct crc_pinned {
	uintptr_t addr;
	size_t bytes;
	unsigned flags;
	uint64_t device_ptr;
	int memfd;	  /* the region's memfd, kept open to register it again after a restore (and so CRIU
			     restores it); -1 over TCP (plain memory), -2 the application's own memory */
	bool managed;	  /* cuMemAllocManaged: the pointer is the same here and on the device */
	bool on_device;	  /* managed, in a GPU's memory: inaccessible here until a fault brings it back */
	bool gpu_owned;	  /* managed, in its pages: inaccessible here since GPU work was sent, until the
			     CPU's touch has waited for that work (hooks_mem.c: serialised access) */
	bool concurrent;  /* managed: the CPU and the GPU share it at once (a wait outlasted its bound) */
	bool attach_host; /* managed, attached to the host: the GPU does not use it */
	uintptr_t registered_at;      /* cuMemHostRegister: the pointer registered (0: an allocation) */
	struct crc_uvm_advice advice; /* managed: what cuMemAdvise and prefetches said */
	struct crc_pinned *next;
};

struct crc_client {
	pthread_mutex_t lock; /* the channel: one request/response exchange at a time */
	struct crc_chan chan;
	int state; /* 0 not connected, 1 connected, -1 gone */
	bool tcp;
	uint64_t seq;
	struct crc_hello_reply info;
	uintptr_t va_reserved_base; /* the PROT_NONE window reserved at load */
	size_t va_reserved_size;
	pthread_mutex_t pinned_lock;
	struct crc_pinned *pinned;
	uint64_t rebinds; /* restored sessions bound (under pinned_lock): what the pinned list had then is
			     registered with them */
	/* TCP sessions: quiesce requests arrive on the socket (conn.c). */
	struct crc_tcp_quiesce quiesce; /* the last one read */
	bool quiesce_pending;		/* read, not answered yet (lock held) */
	bool watching;			/* the watcher thread runs (lock held) */
	_Atomic int rx_check;		/* the socket may hold a notice: look at the next call boundary */
	_Atomic int parked;		/* a thread is parked (the watcher then looks less often) */
};
extern struct crc_client crc_client;

/* Connects and says hello once (cuInit does this; every call makes sure). CUDA_SUCCESS or the error
 * the application sees. */
CUresult crc_connect(void);
static inline CUresult crc_ready(void)
{
	return __atomic_load_n(&crc_client.state, __ATOMIC_ACQUIRE) == 1 ? CUDA_SUCCESS : crc_connect();
}

/* ---- one request ------------------------------------------------------------------------------- */
struct crc_call {
	uint16_t op;
	uint64_t seq;
	const struct crc_msg_hdr *reply_msg; /* held until crc_call_end */
	const void *reply;		     /* after struct crc_reply_hdr */
	size_t reply_len;
	bool sent; /* published by crc_call_send: crc_call_wait only waits */
};

/* Locks the channel and reserves a request of `len` argument bytes after the crc_call_hdr; *args
 * points at them. On error nothing is held. */
CUresult crc_call_begin(struct crc_call *c, uint16_t op, uint16_t flags, size_t len, void **args);
/* Same without the call header (control ops). */
CUresult crc_ctl_begin(struct crc_call *c, uint16_t op, uint16_t flags, size_t len, void **payload);
/* A control record that hands the session a descriptor (on the socket, ahead of the record), waits for
 * its reply and copies up to out_len bytes of it to out. */
CUresult crc_ctl_with_fd(uint16_t op, const void *req, size_t len, int fd, void *out, size_t out_len);
/* Publishes a posted (CRC_MSG_NOREPLY) request and unlocks. */
CUresult crc_call_post(struct crc_call *c);
/* Publishes the request, waits for the final reply. Data records (CRC_MSG_MORE) before it go to
 * on_data. Returns the call's CUresult; the reply stays readable until crc_call_end, which must be
 * called whatever this returned. */
typedef void crc_data_fn(void *arg, const void *data, size_t len);
CUresult crc_call_wait(struct crc_call *c, crc_data_fn *on_data, void *arg);
/* Publishes the request and keeps the channel: crc_call_wait then waits for its reply (a striped copy
 * moves its bytes in between). On error the channel is lost; crc_call_end must still be called. */
CUresult crc_call_send(struct crc_call *c);
void crc_call_end(struct crc_call *c);
/* Multi-record requests keep the channel (and the call's busy mark, so a quiesce cannot stop the
 * session between its records): crc_call_post_more publishes a posted record and keeps the lock;
 * crc_call_next reserves the next record under it (like crc_call_begin). On error nothing is held. */
CUresult crc_call_post_more(struct crc_call *c);
CUresult crc_call_next(struct crc_call *c, uint16_t op, uint16_t flags, size_t len, void **args);

/* ---- striped copies over bulk connections (stripe.c, crcuda/proto.h) --------------------------- */
enum crc_stripe_outcome {
	CRC_STRIPE_NO = 0, /* not striped: copy the usual way */
	CRC_STRIPE_DONE,   /* copied (or failed): *res says */
	CRC_STRIPE_AGAIN,  /* a restore moved a __managed__ variable it named: begin the copy again */
};
/* A copy between host memory of a TCP client and the device (to_device: host is src), striped when it
 * is large enough and bulk connections are wanted; mvar_gen as begin_copy's (hooks_mem.c). */
enum crc_stripe_outcome crc_stripe_copy(uint64_t dst, uint64_t src, size_t bytes, CUstream stream, bool async,
					bool to_device, uint64_t mvar_gen, CUresult *res);
/* Closes the bulk connections (channel lock held): before parking, on a restored session. */
void crc_stripe_close(void);
/* A new bulk connection to the session's daemon, index of those granted with key: its descriptor, or a
 * negative CRC_E* with a sentence in why (conn.c). */
int crc_bulk_dial(unsigned index, const uint8_t key[32], char *why, size_t why_len);

/* Round trips and posted requests so far (stats.c; CRCUDA_STATS_FILE reports them at exit). */
extern atomic_ullong crc_stat_roundtrips, crc_stat_posted;

/* A complete synchronous exchange: args in, reply copied into out (up to out_len bytes). */
CUresult crc_rpc(uint16_t op, const void *args, size_t len, void *out, size_t out_len);
/* Posts (no reply): the error, if any, surfaces at the next synchronising call. */
CUresult crc_post(uint16_t op, const void *args, size_t len);

/* The generic forwarder: argv[i] points at the i-th argument, marshalled as spec[i] says. */
/* Frees ptr when it is a pointer imported from another process's memory pool (hooks_ipc.c): true,
 * with the result in *res; false for any other pointer. */
bool crc_pool_import_free(CUdeviceptr ptr, CUstream stream, bool async, CUresult *res);
CUresult crc_fwd_call(int id, bool async, unsigned nargs, const struct crc_arg_spec *spec,
		      const void *const *argv);

/* crc_fwd_<sym>: the generated forwarder of every row crcuda/cuda_marshal.def carries (FORWARD rows,
 * and the hook and local rows whose hand-written code sends the call on as it is). */
#define CRC_FWD_BEGIN(sym, nargs, mode) CUresult crc_fwd_##sym CRC_SIG_##sym;
#define CRC_FWD_ARG(sym, i, kind, type, name)
#define CRC_FWD_ARR(sym, i, kind, type, name, count, elem)
#define CRC_FWD_END(sym)
#include "crcuda/cuda_marshal.def"
#undef CRC_FWD_BEGIN
#undef CRC_FWD_ARG
#undef CRC_FWD_ARR
#undef CRC_FWD_END

/* Interprocess events (hooks_ipc.c): made with CU_EVENT_INTERPROCESS or opened from another process's
 * handle. Their records are not posted (another process may wait on them as soon as the call returns). */
CUresult crc_ipc_event_note(uintptr_t event);
void crc_ipc_event_forget(uintptr_t event);

/* Logs once per symbol and returns CUDA_ERROR_NOT_SUPPORTED. */
CUresult crc_not_supported(int id);

/* ---- caches --------------------------------------------------------------------------------------- */
struct crc_ctx_info {
	bool live;
	bool primary;
	CUdevice dev;
	unsigned flags;
	unsigned long long id;
	unsigned attached; /* cuCtxAttach's usage counts, which cuCtxDetach takes back before destroying */
	uint64_t green;	   /* the green context it was converted from (cuCtxFromGreenCtx), 0 none */
};
/* NULL if ctx is not a live context of this session. */
struct crc_ctx_info *crc_ctx_info(uint64_t ctx);
void crc_ctx_register(uint64_t ctx, CUdevice dev, unsigned flags, bool primary);
void crc_ctx_forget(uint64_t ctx);

/* Green contexts (hooks_green.c): the device, and the CUcontext once converted (0: not yet). */
struct crc_green_info {
	bool live;
	CUdevice dev;
	uint64_t ctx;
};
struct crc_green_info *crc_green_info(uint64_t green);
void crc_green_register(uint64_t green, CUdevice dev);
void crc_green_forget(uint64_t green);

struct crc_func_info {
	uint64_t handle;
	uint32_t nparams; /* UINT32_MAX: unknown */
	uint32_t param_bytes;
	struct crc_kparam_wire *params;
	int32_t attrs[CRC_FUNC_ATTR_SLOTS];
	uint64_t owner; /* module/library it came from */
	char *name;
	bool collective; /* waits for kernels of other processes (crc_collective_kernel) */
};
struct crc_func_info *crc_func_lookup(uint64_t handle);
/* A kernel that waits for kernels of other processes (NCCL's), by its name's start:
 * CRCUDA_COLLECTIVE_KERNELS, comma-separated prefixes of the unmangled name (default
 * "ncclDevKernel_,ncclKernel_"; "" none). Such launches are counted, so that a process tree stops after the
 * same one (crcuda/proto.h). */
bool crc_collective_kernel(const char *name);

/* A launch's parameters as a launch request carries them (hooks_module.c): prepare computes the request's
 * length (lp->len), write fills the parameter fields and bytes after the caller's crc_launch_req. */
struct crc_launch_pack {
	struct crc_func_info *fi;
	void **kernel_params;
	const void *ebuf;
	size_t esize, len;
	uint32_t n, bytes;
	unsigned nattrs;
};
CUresult crc_launch_prepare(struct crc_launch_pack *lp, uint64_t f, void **kernelParams, void **extra,
			    unsigned nattrs);
void crc_launch_write(const struct crc_launch_pack *lp, struct crc_launch_req *r,
		      const CUlaunchAttribute *attrs);
/* Some stream capture of this process may be running (hooks_graph.c): capture queries ask the daemon. */
bool crc_capturing(void);
/* hStream is capturing (active or invalidated): asks the daemon only while some capture may run. */
bool crc_capturing_on(CUstream hStream);
CUresult crc_capture_status(CUstream hStream, CUstreamCaptureStatus *status);
CUresult crc_capture_info_remote(CUstream hStream, CUstreamCaptureStatus *status, cuuint64_t *id,
				 CUgraph *graph, const CUgraphNode **deps, const CUgraphEdgeData **edges,
				 size_t *ndeps);
/* Device memory outside the session range (an application's hinted reservation, graph-owned memory):
 * mapped PROT_NONE here, so no host mapping takes its addresses (hooks_mem.c). */
void crc_device_range_keep(uint64_t base, size_t size);
/* Host functions (hooks_stream.c): the page's memfd (-1: none yet). */
int crc_hostfn_memfd(void);
/* The host-function page, shared with the session (NULL: none can be, over TCP). */
struct crc_hostfn_page *crc_hostfn_ready(void);
/* A host function on a capturing stream: refused, said once in the log. */
bool crc_capture_refuses_host_fn(CUstream hStream);
struct crc_func_info *crc_func_store(uint64_t owner, const char *name, const struct crc_getfn_reply *r,
				     const struct crc_kparam_wire *params);

struct crc_stream_info {
	uint64_t handle;
	uint64_t ctx;
	unsigned flags;
	int priority;
};
struct crc_stream_info *crc_stream_lookup(uint64_t handle);
void crc_stream_store(uint64_t handle, uint64_t ctx, unsigned flags, int priority);
void crc_stream_forget(uint64_t handle);

/* cuInit has succeeded. */
extern bool crc_initialized;
/* cuDevicePrimaryCtxGetState from the client's own count. */
void crc_primary_state(CUdevice dev, unsigned *flags, int *active);

/* The device of the current context, or of ctx when not 0. */
CUresult crc_ctx_device(uint64_t ctx, CUdevice *dev);

/* Each function of a module, named (hooks_module.c; the tools' module table's slot 7). */
int crc_module_functions(CUmodule module, void (*fn)(void *arg, CUfunction f, const char *name), void *arg);
/* A copy with a CUDA array on one side or both (hooks_array.c). */
CUresult crc_array_copy3d(const CUDA_MEMCPY3D *p, CUstream stream, bool async);
/* Where a host or device address lives, as the daemon must see it: CRC_LOC_* (hooks_mem.c). */
uint32_t crc_locate(uint64_t addr, size_t bytes);
/* Graph copies with pageable host memory, staged through page-locked memory (graph_stage.c). */
bool crc_stage_wanted(const CUDA_MEMCPY3D *p);
CUresult crc_stage_add_node(CUgraphNode *out, CUgraph graph, const CUgraphNode *deps, size_t ndeps,
			    const CUDA_MEMCPY3D *p, CUcontext ctx);
bool crc_stage_node_params(CUgraphNode node, CUDA_MEMCPY3D *p);
CUresult crc_stage_set_params(CUgraphExec exec, CUgraphNode node, const CUDA_MEMCPY3D *p, CUcontext ctx);
CUresult crc_stage_capture(CUstream stream, uint64_t dst, uint64_t src, size_t bytes,
			   CUresult (*copy)(uint64_t dst, uint64_t src, size_t bytes, CUstream stream));
/* Graph-owned memory as session allocations (graph_mem.c): whether p is such memory; a node's type when
 * it stands for an alloc or free node; stream-ordered allocation and free on a capturing stream; an
 * executable graph made or updated from a graph holds its memory. */
bool crc_graph_mem_owns(CUdeviceptr p);
/* NOT_INITIALIZED before cuInit, INVALID_DEVICE for an ordinal the session has not, else SUCCESS
 * (hooks_ctx.c). */
CUresult crc_check_device(CUdevice dev);
bool crc_graph_mem_node_type(CUgraphNode node, CUgraphNodeType *type);
CUresult crc_graph_mem_capture_alloc(CUdeviceptr *dptr, size_t bytesize, const CUmemPoolProps *props,
				     CUstream stream);
CUresult crc_graph_mem_capture_free(CUdeviceptr dptr, CUstream stream);
CUresult crc_graph_mem_instantiated(CUgraphExec exec, CUgraph graph);

/* Registers a pinned region with the session again (conn.c): after a restore bound while the region
 * was being registered (it was not in the list yet). */
int crc_pin_reregister(struct crc_pinned *pin);
/* __managed__ variables (managed_vars.c). crc_mvar_found: the variable `name` of a module or library
 * is managed memory at dev in the daemon; *addr the address the program gets (a copy kept here).
 * crc_mvar_before_work: GPU work is about to be sent. crc_mvar_fault: a fault at addr was a copy's
 * (handled). crc_mvar_contains: [addr, addr + bytes) is in one variable's copy here;
 * crc_mvar_device_addr: where such an address is in the daemon. */
CUresult crc_mvar_found(uint64_t owner, bool library, const char *name, uint64_t dev, size_t bytes,
			CUdeviceptr *addr);
void crc_mvar_unloaded(uint64_t owner, bool library);
void crc_mvar_before_work(void);
/* GPU work is about to be sent: managed memory the CPU may touch becomes the GPU's (hooks_mem.c). */
void crc_managed_before_work(void);
bool crc_mvar_fault(const void *addr, const void *uc);
bool crc_mvar_contains(uint64_t addr, size_t bytes);
uint64_t crc_mvar_device_addr(uint64_t addr);
/* Restores bound so far (crc_client.rebinds). */
uint64_t crc_restore_generation(void);
/* The calling thread runs the program's host functions. */
bool crc_on_hostfn_thread(void);
/* Log lines and async notifications for the application's callbacks (hooks_logs.c): delivered on the
 * host-function thread; registered again with a restored session. */
void crc_notify_deliver(const struct crc_hostfn_page *pg);
int crc_notify_reregister(void);
/* A control record (no descriptor) to a restored session under the held channel lock (conn.c). */
int crc_ctl_reregister(uint16_t op, const void *req, size_t len);
/* libcrcuda's SIGSEGV handler (managed memory and __managed__ variables), installed once. */
void crc_managed_fault_install(void);
/* A restored session has the managed region in its pages again: accessible here once more. */
void crc_managed_restored(struct crc_pinned *pin);
/* Host functions are about to run: managed memory comes back from the GPUs and stays in host memory
 * for the rest of the process (a fault in a host function could not wait for the session). */
void crc_managed_stay_home(void);

/* Pinned host memory registered with the daemon: the region holding [p, p + n), or NULL. */
struct crc_pinned *crc_pinned_find(const void *p, size_t n);

/* True when addr is inside the session's device VA range. */
bool crc_is_device_va(uint64_t addr);

#endif
