/* Internals of the simulated device (libcuda.so.1 for CI): the driver API implemented on the CPU.
 * Handles are pointers to the structs below (cuda.h leaves struct CUctx_st & co. incomplete, so
 * the sim completes them). One global lock guards the object registries; each stream has its own
 * lock for its queue. */
#ifndef CRCUDA_SIM_H
#define CRCUDA_SIM_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The internal view of cuda.h declares every ABI variant (old _v1 signatures, _ptds/_ptsz twins), so
 * each definition in the sim is checked against NVIDIA's own prototype; the undef header then frees
 * the API names cuda.h maps onto newer symbols. */
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>
#include <cudaProfiler.h>

#include "crcuda/uvm_advice.h"
#include "crcuda/cuda_api_undef.h"

#include "crcuda/modimage.h"
#include "crcuda_sim_kernel.h"

#define SIM_DRIVER_VERSION 13000
#define SIM_MAX_DEVICES	   8
#define SIM_GRANULARITY	   (2ull << 20)
/* Device arenas (cuMemAlloc and module globals): one TiB per device from this base, reserved
 * PROT_NONE at cuInit and committed per allocation. Away from ASan's shadow and allocator
 * (0x600000000000..0x640000000000) and from PIE/heap (0x55..) and mmap (0x7f..) ranges. */
#define SIM_ARENA_BASE 0x5a0000000000ull
#define SIM_ARENA_SIZE (1ull << 40)

enum sim_magic {
	SIM_MAGIC_CTX = 0x43545831,
	SIM_MAGIC_STREAM = 0x53545231,
	SIM_MAGIC_EVENT = 0x45564e31,
	SIM_MAGIC_MODULE = 0x4d4f4431,
	SIM_MAGIC_FUNC = 0x46554e31,
	SIM_MAGIC_LIBRARY = 0x4c494231,
	SIM_MAGIC_KERNEL = 0x4b524e31,
	SIM_MAGIC_GRAPH = 0x47525031,
	SIM_MAGIC_GRAPH_NODE = 0x474e4431,
	SIM_MAGIC_GRAPH_EXEC = 0x47455831,
	SIM_MAGIC_USER_OBJECT = 0x554f424a,
	SIM_MAGIC_DEAD = 0x44454144,
};

struct sim_device {
	int ordinal;
	char name[64];
	CUuuid uuid;
	int pci_bus;
	size_t total_mem;
	_Atomic size_t used_mem;
	uintptr_t arena_base;
	size_t arena_size;
	/* Primary context: one struct for the device's lifetime, active while retained. */
	struct CUctx_st *primary;
	int primary_refcount;
	unsigned primary_flags;
};

struct CUctx_st {
	uint32_t magic;
	struct sim_device *dev;
	unsigned flags;
	bool is_primary;
	unsigned attached; /* cuCtxAttach's usage counts */
	bool active;
	unsigned long long id;
	size_t limits[CU_LIMIT_MAX];
	CUfunc_cache cache_config;
	/* cuCoredumpSetAttribute's values; the rest come from the process's (sim_ctx.c). */
	struct sim_coredump {
		unsigned set;			     /* bit a: attribute a has a value here */
		unsigned char flag[CU_COREDUMP_MAX]; /* the bool attributes */
		int gen_flags;			     /* CU_COREDUMP_GENERATION_FLAGS */
		char file[1024], pipe[1024];
	} coredump;
	struct CUstream_st *legacy_stream;
	/* A green context's CUcontext (sim_green.c): the device's primary context, which holds its
	 * memory and libraries' modules, and the green context; NULL otherwise. */
	struct CUctx_st *base;
	struct CUgreenCtx_st *green;
	/* Streams and modules created in this context; guarded by sim_lock. */
	struct CUstream_st *streams;
	struct CUmod_st *modules;
	struct CUctx_st *next;
};

enum sim_op_kind {
	SIM_OP_COPY,
	SIM_OP_SET,
	SIM_OP_KERNEL,
	SIM_OP_EVENT_RECORD,
	SIM_OP_WAIT_EVENT,
	SIM_OP_WAIT_STREAM,
	SIM_OP_HOST_FUNC,
};

struct sim_op;

/* The values of an executable graph's conditional handles (handle h is v[h - 1]), shared by the
 * executable graph and the ops of its launches (sim_graph.c). */
struct sim_conds {
	atomic_uint refs;
	unsigned n;
	atomic_uint v[];
};
void sim_conds_unref(struct sim_conds *c);
void sim_set_conditional(const struct crcuda_sim_block *blk, unsigned long long handle, unsigned value);
/* A stream memory operation as a host function's argument for sim_memop_run (NULL: *res says why), and
 * back as the batch operation it is (a captured one becomes a batch mem-op node). */
void *sim_memop_make(bool write, bool wide, CUdeviceptr addr, uint64_t value, unsigned flags, CUresult *res);
void CUDA_CB sim_memop_run(void *arg);
void sim_memop_params(const void *data, CUstreamBatchMemOpParams *out);
/* Runs an op on the calling thread (a conditional node's body, on its stream's worker) and frees it. */
void sim_op_run(struct sim_op *op);

struct sim_op {
	struct sim_op *next;
	enum sim_op_kind kind;
	union {
		struct {
			void *dst;
			const void *src;
			size_t bytes;
		} copy;
		struct {
			void *dst;
			uint32_t value;
			unsigned elem_size;
			size_t count, rows, pitch;
		} set;
		struct {
			struct CUfunc_st *func;
			crcuda_sim_kernel_fn *host_fn;
			struct crcuda_sim_dim3 grid, block;
			unsigned shared_bytes;
			void *param_buffer;
			void **param_ptrs;
			unsigned param_count;
			struct sim_conds *conds; /* a graph launch's conditional values, or NULL */
		} kernel;
		struct {
			struct CUevent_st *event;
			uint64_t generation;
		} event;
		struct {
			struct CUstream_st *stream;
			uint64_t seq;
		} wait_stream;
		struct {
			CUhostFn fn;
			void *data;
		} host_func;
	};
};

struct CUstream_st {
	uint32_t magic;
	struct CUctx_st *ctx;
	unsigned flags;
	int priority;
	bool is_legacy;
	bool is_per_thread;
	unsigned long long id;
	_Atomic int refs;
	pthread_t worker;
	pthread_t worker_owner; /* the thread a per-thread default stream belongs to */
	pthread_mutex_t lock;
	pthread_cond_t work_cond;
	pthread_cond_t done_cond;
	struct sim_op *head, *tail;
	uint64_t submitted, completed;
	bool stopping;
	struct CUstream_st *next_in_ctx;
	/* Stream capture (sim_graph.c): the capture this stream takes part in, guarded by the graph
	 * lock; `capturing` mirrors capture != NULL for stream_submit's fast path. */
	struct sim_stream_capture *capture;
	atomic_bool capturing;
	/* cuStreamSetAttribute: the values set (bit a of attrs_set: attrs[a]), guarded by lock. */
	CUstreamAttrValue attrs[12];
	unsigned attrs_set;
};

/* What records, waits and queries of an event share. An interprocess event's is in a shared memfd
 * page (process-shared lock and condition), which cuIpcOpenEventHandle maps in another process. */
struct sim_event_state {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	uint64_t recorded_gen, completed_gen;
	struct timespec when;
};

struct CUevent_st {
	uint32_t magic;
	unsigned flags;
	_Atomic int refs;
	struct sim_event_state *st; /* &own, or the shared page of an interprocess event */
	struct sim_event_state own;
	int shared_fd; /* the shared page's memfd (interprocess), else -1 */
	/* The capture nodes of its latest record in a capturing stream (sim_graph.c), guarded by the
	 * graph lock; NULL when its latest record was an ordinary one. */
	struct sim_event_capture *capture;
};

struct sim_global {
	char *name;
	CUdeviceptr addr;
	size_t size;
	bool managed; /* __managed__: in the module's managed block */
};

struct sim_param {
	size_t offset, size;
};

struct CUfunc_st {
	uint32_t magic;
	struct CUmod_st *module;
	char *name;
	struct sim_param *params;
	unsigned param_count;
	size_t param_bytes;
	int max_dynamic_shared;
	int carveout;
	crcuda_sim_kernel_fn *host_fn; /* looked up at the first launch */
	bool host_fn_looked_up;
};

struct CUmod_st {
	uint32_t magic;
	struct CUctx_st *ctx;
	struct CUlib_st *library; /* NULL for cuModuleLoad* modules */
	struct CUfunc_st *funcs;
	unsigned func_count;
	struct sim_global *globals;
	unsigned global_count;
	CUdeviceptr globals_base; /* one arena allocation holds all globals; 0 if none */
	CUdeviceptr managed_base; /* and one managed allocation the __managed__ ones; 0 if none */
	struct CUmod_st *next_in_ctx;
};

struct CUkern_st {
	uint32_t magic;
	struct CUlib_st *library;
	unsigned index; /* in the library's modinfo kernels, and in each of its modules' funcs[] */
	int max_dynamic_shared;
	int carveout;
};

struct CUlib_st {
	uint32_t magic;
	struct crc_modinfo info; /* parsed once; each context gets its module from it */
	struct CUkern_st *kernels;
	/* One module per context it has been used in; guarded by sim_lock. */
	struct sim_lib_module {
		struct CUctx_st *ctx;
		struct CUmod_st *module;
	} * modules;
	unsigned module_count;
	CUdeviceptr managed_base; /* its __managed__ variables, one block for every context; 0 if none */
};

/* sim_core.c */
extern pthread_mutex_t sim_lock;
extern struct sim_device sim_devices[SIM_MAX_DEVICES];
extern int sim_device_count;
extern atomic_bool sim_initialized;
CUresult sim_fail_check(const char *symbol);
extern atomic_bool sim_fail_armed;
/* A device-side fault's error (crcuda_sim_block.trap), returned by every later call; 0 while none. */
extern atomic_int sim_sticky_error;
void sim_trap(int error);
struct sim_device *sim_device_get(CUdevice dev);
unsigned long long sim_next_id(void);
crcuda_sim_kernel_fn *sim_host_kernel_lookup(const char *mangled);
void *sim_host_kernel_global(const struct crcuda_sim_block *blk, const char *name, size_t *size);

/* Every entry point starts with one of these: fault injection, then the cuInit check. */
#define SIM_ENTER_NOINIT(sym)                                                                                \
	do {                                                                                                 \
		if (atomic_load_explicit(&sim_fail_armed, memory_order_relaxed)) {                           \
			CUresult sim_injected_ = sim_fail_check(#sym);                                       \
			if (sim_injected_ != CUDA_SUCCESS)                                                   \
				return sim_injected_;                                                        \
		}                                                                                            \
	} while (0)
#define SIM_ENTER(sym)                                                                                       \
	do {                                                                                                 \
		SIM_ENTER_NOINIT(sym);                                                                       \
		if (!atomic_load_explicit(&sim_initialized, memory_order_acquire))                           \
			return CUDA_ERROR_NOT_INITIALIZED;                                                   \
		if (atomic_load_explicit(&sim_sticky_error, memory_order_relaxed))                           \
			return (CUresult)atomic_load(&sim_sticky_error);                                     \
	} while (0)

/* sim_exports.c: the function exported as the table's id (its stub when not implemented). */
void *sim_entry_point(int id);

/* sim_logs.c: a line in the driver's error log (and to the log callbacks); an over-budget notification
 * when the device's memory in use went above CRCUDA_SIM_MEM_BUDGET_MB. */
void sim_log(CUlogLevel level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void sim_budget_check(struct sim_device *dev);

/* sim_ctx.c */
/* The context holding ctx's memory and library modules: the primary context for a green context's. */
static inline struct CUctx_st *sim_ctx_base(struct CUctx_st *ctx)
{
	return ctx && ctx->base ? ctx->base : ctx;
}
/* Activates a context struct the caller filled (dev, flags): id, defaults, legacy stream, live list. */
CUresult sim_ctx_activate(struct CUctx_st *ctx);
struct CUctx_st *sim_ctx_current(void);
/* The current context, or CUDA_ERROR_INVALID_CONTEXT. */
CUresult sim_ctx_require(struct CUctx_st **ctx);
bool sim_ctx_valid(struct CUctx_st *ctx);
void sim_ctx_teardown(struct CUctx_st *ctx);

/* sim_mem.c */
enum sim_range_kind {
	SIM_RANGE_DEVICE,	   /* cuMemAlloc in the arena */
	SIM_RANGE_GLOBAL,	   /* a module's globals, in the arena */
	SIM_RANGE_HOST_ALLOC,	   /* cuMemAllocHost / cuMemHostAlloc */
	SIM_RANGE_HOST_REGISTERED, /* cuMemHostRegister */
	SIM_RANGE_VMM,		   /* a cuMemMap mapping */
	SIM_RANGE_MANAGED,	   /* cuMemAllocManaged: host memory the device reaches too */
};
struct sim_range {
	uintptr_t base;
	size_t size;	  /* rounded to SIM_PAGE */
	size_t requested; /* the bytes asked for (device and host allocations) */
	enum sim_range_kind kind;
	struct CUctx_st *ctx;
	struct sim_device *dev;
	unsigned flags; /* host alloc/register flags, or VMM access flags */
	unsigned long long buffer_id;
	struct sim_vmm_alloc *vmm;
	size_t vmm_offset;
	struct crc_uvm_advice advice; /* managed ranges */
	bool sync_set;		      /* cuPointerSetAttribute(SYNC_MEMOPS) named it: sync_memops answers */
	unsigned sync_memops;
};
CUresult sim_mem_init_device(struct sim_device *dev);
/* Looks up the live range holding [ptr, ptr + bytes) and copies it to *out (may be NULL). */
bool sim_mem_find(uintptr_t ptr, size_t bytes, struct sim_range *out);
/* CUDA_SUCCESS when [ptr, ptr + bytes) is memory a kernel or copy may touch as device memory. */
CUresult sim_mem_check_device(CUdeviceptr ptr, size_t bytes, bool write);
/* For unified-addressing copies: a known device/pinned range, a device address with nothing
 * behind it (error), or a plain host pointer. */
CUresult sim_mem_check_any(uintptr_t ptr, size_t bytes, bool write);
bool sim_mem_is_pinned_host(const void *ptr, size_t bytes);
CUresult sim_mem_alloc_device(struct CUctx_st *ctx, size_t bytes, enum sim_range_kind kind, CUdeviceptr *out);
CUresult sim_mem_free_device(CUdeviceptr ptr, enum sim_range_kind kind);
CUresult sim_mem_alloc_managed(size_t bytes, CUdeviceptr *out);
void sim_mem_free_managed(CUdeviceptr p);
void sim_mem_free_ctx(struct CUctx_st *ctx);

/* sim_stream.c */
/* Resolves a stream argument: NULL is the legacy stream, or the per-thread one for _ptsz/_ptds
 * entry points; CU_STREAM_LEGACY and CU_STREAM_PER_THREAD are honoured. */
CUresult sim_stream_resolve(CUstream handle, bool per_thread, struct CUstream_st **out);
CUresult sim_stream_create(struct CUctx_st *ctx, unsigned flags, int priority, bool legacy,
			   struct CUstream_st **out);
void sim_stream_destroy(struct CUstream_st *stream);
/* Queues op (taking ownership, also on failure) honouring the legacy-stream rules; on a capturing
 * stream the op becomes a node of the capture's graph instead. */
CUresult sim_stream_submit(struct CUstream_st *stream, struct sim_op *op);
/* Frees an op that will not run (its parameter copies, the references it holds). */
void sim_op_free(struct sim_op *op);
void sim_event_ref(struct CUevent_st *event);
void sim_event_unref(struct CUevent_st *event);
void sim_stream_wait_idle(struct CUstream_st *stream);
void sim_ctx_wait_idle(struct CUctx_st *ctx);

/* sim_module.c */
void sim_module_unload_all(struct CUctx_st *ctx);
/* Fills op as a SIM_OP_KERNEL launch of f (a CUfunction, or a CUkernel cast to one, taken in ctx, or
 * in the current context when ctx is NULL): checks the shape, finds the host implementation and
 * copies the parameters (kernel_params or extra). With same_ctx, a CUfunction must belong to ctx.
 * On failure the op's parameter copies are freed (the op itself is the caller's). */
CUresult sim_kernel_op_init(struct sim_op *op, const char *entry, CUfunction f, struct CUctx_st *ctx,
			    bool same_ctx, struct crcuda_sim_dim3 grid, struct crcuda_sim_dim3 block,
			    unsigned shared_bytes, void **kernel_params, void **extra);

/* sim_graph.c: stream capture hooks. Each returns true when it handled the call (result in *res). */
struct sim_stream_capture;
struct sim_event_capture;
/* An op submitted to a capturing stream becomes a node (the op is consumed). */
bool sim_capture_take(struct CUstream_st *stream, struct sim_op *op, CUresult *res);
/* cuMemAllocAsync (props: the pool's) or cuMemFreeAsync (props NULL, *dptr the address) on a capturing
 * stream becomes an alloc or free node (true, *res its result); false when the stream is not capturing. */
bool sim_capture_mem(struct CUstream_st *stream, const CUmemPoolProps *props, size_t bytes, CUdeviceptr *dptr,
		     CUresult *res);
/* Graph memory (a mem alloc node's) at p: cuMemFree and cuMemFreeAsync outside a graph leave it be. */
bool sim_graph_mem_owns(CUdeviceptr p);
/* cuEventRecord on a capturing stream: remembers the capture's current nodes (an ordinary record
 * forgets them: call it for every record). */
bool sim_capture_event_record(struct CUstream_st *stream, struct CUevent_st *event, unsigned flags,
			      CUresult *res);
/* cuStreamWaitEvent on a capturing stream, or with an event recorded in a capture (joining it). */
bool sim_capture_wait_event(struct CUstream_st *stream, struct CUevent_st *event, unsigned flags,
			    CUresult *res);
/* A synchronous call using stream: CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED (invalidating the capture)
 * when stream captures, or when the thread may not make unsafe calls under the capture modes. */
CUresult sim_capture_check_sync(struct CUstream_st *stream);
/* A potentially unsafe call (allocating, registering or freeing memory) during a stream capture:
 * CUDA_SUCCESS, or the error the call returns, the capture it breaks invalidated. */
CUresult sim_capture_check_unsafe(void);
/* Work on ctx's legacy stream while a blocking stream of ctx captures:
 * CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, invalidating that capture. */
CUresult sim_capture_check_legacy(struct CUctx_st *ctx);
/* cuStreamDestroy of a stream taking part in a capture (invalidates it). */
void sim_capture_stream_gone(struct CUstream_st *stream);
void sim_capture_event_free(struct CUevent_st *event);

/* A 3D copy, arrays on either side included (sim_array.c resolves them to their memory). */
CUresult sim_copy3d(bool pt, const CUDA_MEMCPY3D *p, CUstream h, bool async);
/* sim_array.c: p with each array side as the device memory that holds it (checked against its box). */
CUresult sim_array_resolve(const CUDA_MEMCPY3D *in, CUDA_MEMCPY3D *out);
/* Sparse arrays (sim_array.c): whether a copy's destination array is one; and for the device bytes
 * [dst, dst + bytes) of one, the run from dst within one tile (*run) and whether that tile is mapped
 * (a write to an unmapped tile is dropped). */
bool sim_array_sparse(CUarray a);
void sim_array_sparse_run(CUarray a, CUdeviceptr dst, size_t bytes, size_t *run, bool *mapped);
/* A VMM handle for sparse arrays' tiles (sim_mem.c): 0 and its size, -1 if no live handle, -2 if it
 * was not created with CU_MEM_CREATE_USAGE_TILE_POOL. */
int sim_vmm_tile_pool(CUmemGenericAllocationHandle handle, size_t *size);
/* crcuda_sim_block.resource. */
struct crcuda_sim_resource;
int sim_resource(unsigned long long object, struct crcuda_sim_resource *out);

/* An entry point and its per-thread-default-stream twin (_ptds/_ptsz): impl(pt, args...). */
#define SIM_STREAM_API_PAIR(name, name_pt, impl, params, ...)                                                \
	CUresult name params                                                                                 \
	{                                                                                                    \
		SIM_ENTER(name);                                                                             \
		return impl(false, __VA_ARGS__);                                                             \
	}                                                                                                    \
	CUresult name_pt params                                                                              \
	{                                                                                                    \
		SIM_ENTER(name_pt);                                                                          \
		return impl(true, __VA_ARGS__);                                                              \
	}

#endif
