/* crcudad internals: the backend (real or simulated libcuda, loaded by path), sessions, the device VA
 * window, and the handlers of forwarded calls. */
#ifndef CRCUDA_CRCUDAD_H
#define CRCUDA_CRCUDAD_H

#define __CUDA_API_VERSION_INTERNAL
#include <cuda.h>
#include <cudaProfiler.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "crcuda/chan.h"
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
/* dlopens path and resolves every symbol; 0 or a negative CRC_E*. */
int crc_backend_load(const char *path);

/* ---- daemon-wide state ------------------------------------------------------------------------- */
struct crc_daemon {
	uint64_t va_base;      /* start of the window */
	uint64_t va_session;   /* bytes per session slot */
	unsigned max_sessions; /* slots */
	int dev_count;
	struct crc_hello_reply proto; /* device info every hello answers with (session fields blank) */
	size_t ring_size;
	char token[CRC_TOKEN_MAX];
	size_t token_len;
	bool have_token;
	pthread_mutex_t lock; /* sessions, slots, totals */
	struct crc_session *sessions[256];
	uint64_t next_session_id;
	uint64_t total_mapped;
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
};
struct crc_alloc {
	enum crc_alloc_kind kind;
	uint64_t ptr, size;
	CUmemGenericAllocationHandle handle;
	uint64_t vhandle;
	int refs;
	bool in_window; /* a reservation inside the session range (else the backend's own) */
	struct crc_alloc *next;
};

struct crc_pin {
	uint64_t client_addr, bytes;
	void *local;
	uint64_t device_ptr;
	struct crc_pin *next;
};

struct crc_ptstream {
	uint32_t tid;
	uint64_t ctx;
	CUstream stream;
};

struct crc_session {
	uint64_t id;
	unsigned slot;
	int fd;
	bool tcp;
	struct crc_peer peer;
	struct crc_chan chan;
	pthread_t thread;
	struct crc_htable tables[CRC_HT_COUNT];
	CUdevice ctx_dev[1024]; /* device of each context handle index (small table; contexts are few) */
	uint64_t cur_ctx;	/* the context made current last (virtual), UINT64_MAX: unknown */
	CUresult deferred;	/* first error of posted work, reported at the next synchronising call */
	uint64_t va_base, va_size;
	struct crc_alloc *allocs;
	uint64_t mapped_bytes;
	struct crc_pin *pins;
	struct crc_ptstream *ptstreams;
	unsigned n_ptstreams;
	/* The reply being built and module images being assembled. */
	uint8_t *out;
	size_t out_len, out_cap;
	uint8_t *image;
	size_t image_len, image_cap;
	const struct crc_msg_hdr *msg; /* the request being executed */
};

/* Starts the session thread for an accepted, greeted connection. */
int crc_session_start(int fd, bool tcp, const struct crc_peer *peer, const struct crc_hello *hello);

/* Appends n bytes to the reply (8-byte aligned); NULL on memory exhaustion. */
void *crc_out(struct crc_session *s, size_t n);
/* The real object behind a virtual handle of the given tag (0 is NULL; special stream values
 * honoured); CUDA_ERROR_INVALID_HANDLE if unknown. */
CUresult crc_translate(struct crc_session *s, const struct crc_call_hdr *h, unsigned tag, uint64_t v,
		       union crc_slot *out);
/* Names a new object: the virtual handle the client will use. */
uint64_t crc_register(struct crc_session *s, unsigned tag, union crc_slot real);
void crc_forget(struct crc_session *s, uint64_t v);
/* Finds the virtual handle of a real object (e.g. a function looked up twice), 0 if none. */
uint64_t crc_find_handle(struct crc_session *s, unsigned tag, void *real);

/* ---- handlers (handlers.c) ------------------------------------------------------------------------ */
/* Overrides of rows the generated marshalling carries: same arguments, daemon-side meaning. */
#define CRC_OVERRIDES(X)                                                                                     \
	X(cuDevicePrimaryCtxRetain)                                                                          \
	X(cuMemAlloc_v2)                                                                                     \
	X(cuMemAllocPitch_v2)                                                                                \
	X(cuMemFree_v2)                                                                                      \
	X(cuMemAddressReserve)                                                                               \
	X(cuMemAddressFree)                                                                                  \
	X(cuMemMap)                                                                                          \
	X(cuMemUnmap)                                                                                        \
	X(cuMemRelease)                                                                                      \
	X(cuModuleUnload)                                                                                    \
	X(cuLibraryUnload)

#define CRC_DECL_OVERRIDE(sym) CUresult crc_ovr_##sym(struct crc_session *s, void *const *argv);
CRC_OVERRIDES(CRC_DECL_OVERRIDE)
#undef CRC_DECL_OVERRIDE

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
	X(cuPointerGetAttribute, ptrattr)

#define CRC_DECL_RAW(sym, fn) crc_raw_fn crc_raw_##fn;
CRC_RAW_HANDLERS(CRC_DECL_RAW)
#undef CRC_DECL_RAW

/* Control ops. */
CUresult crc_ctl_pin_register(struct crc_session *s, const uint8_t *args, size_t len);
CUresult crc_ctl_pin_unregister(struct crc_session *s, const uint8_t *args, size_t len);

/* Frees everything the session still holds (its memory, modules, streams, contexts). */
void crc_session_release_resources(struct crc_session *s);

/* ---- VA window (va.c) -------------------------------------------------------------------------- */
int crc_va_init(void);
/* A free range of `size` bytes (granule multiple) in the session's range, at `hint` when free. */
int crc_va_take(struct crc_session *s, uint64_t size, uint64_t align, uint64_t hint, uint64_t *out);
#define CRC_GRANULE (2ull << 20)

#endif
