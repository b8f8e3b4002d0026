/* Contexts: primary contexts (one per device, active while retained) and explicit ones, with a
 * per-thread stack of current contexts as the driver keeps it. */
#define LOG_PREFIX "sim: "

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "crcuda/log.h"
#include "sim.h"

#define SIM_CTX_STACK_DEPTH 64

static _Thread_local struct CUctx_st *ctx_stack[SIM_CTX_STACK_DEPTH];
static _Thread_local int ctx_depth;
/* Every live context (explicit, and primary ones while active); guarded by sim_lock. */
static struct CUctx_st *ctx_list;

struct CUctx_st *sim_ctx_current(void)
{
	return ctx_depth ? ctx_stack[ctx_depth - 1] : NULL;
}

bool sim_ctx_valid(struct CUctx_st *ctx)
{
	bool found = false;

	if (!ctx)
		return false;
	pthread_mutex_lock(&sim_lock);
	for (struct CUctx_st *c = ctx_list; c; c = c->next)
		if (c == ctx && c->active)
			found = true;
	pthread_mutex_unlock(&sim_lock);
	return found;
}

CUresult sim_ctx_require(struct CUctx_st **ctx)
{
	struct CUctx_st *cur = sim_ctx_current();

	if (!cur)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (!cur->active)
		return CUDA_ERROR_CONTEXT_IS_DESTROYED;
	*ctx = cur;
	return CUDA_SUCCESS;
}

static void ctx_set_defaults(struct CUctx_st *ctx)
{
	memset(ctx->limits, 0, sizeof(ctx->limits));
	ctx->limits[CU_LIMIT_STACK_SIZE] = 1024;
	ctx->limits[CU_LIMIT_PRINTF_FIFO_SIZE] = 1 << 20;
	ctx->limits[CU_LIMIT_MALLOC_HEAP_SIZE] = 8 << 20;
	ctx->limits[CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH] = 2;
	ctx->limits[CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT] = 2048;
	ctx->limits[CU_LIMIT_MAX_L2_FETCH_GRANULARITY] = 32;
	ctx->cache_config = CU_FUNC_CACHE_PREFER_NONE;
	memset(&ctx->coredump, 0, sizeof(ctx->coredump));
}

/* Makes ctx usable: a fresh id, defaults, a legacy stream; links it in the live list. */
CUresult sim_ctx_activate(struct CUctx_st *ctx)
{
	CUresult res;

	ctx->magic = SIM_MAGIC_CTX;
	ctx->id = sim_next_id();
	ctx_set_defaults(ctx);
	ctx->streams = NULL;
	ctx->modules = NULL;
	ctx->active = true;
	res = sim_stream_create(ctx, 0, 0, true, &ctx->legacy_stream);
	if (res != CUDA_SUCCESS) {
		ctx->active = false;
		return res;
	}
	pthread_mutex_lock(&sim_lock);
	ctx->next = ctx_list;
	ctx_list = ctx;
	pthread_mutex_unlock(&sim_lock);
	return CUDA_SUCCESS;
}

/* Frees what the context owns: work is drained first, then modules, streams and memory go. */
void sim_ctx_teardown(struct CUctx_st *ctx)
{
	sim_ctx_wait_idle(ctx);
	pthread_mutex_lock(&sim_lock);
	for (struct CUctx_st **p = &ctx_list; *p; p = &(*p)->next) {
		if (*p == ctx) {
			*p = ctx->next;
			break;
		}
	}
	ctx->active = false;
	pthread_mutex_unlock(&sim_lock);
	sim_module_unload_all(ctx);
	while (ctx->streams)
		sim_stream_destroy(ctx->streams);
	sim_stream_destroy(ctx->legacy_stream);
	ctx->legacy_stream = NULL;
	sim_mem_free_ctx(ctx);
}

/* ---- primary contexts ---- */

CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
	struct sim_device *d;
	CUresult res = CUDA_SUCCESS;

	SIM_ENTER(cuDevicePrimaryCtxRetain);
	d = sim_device_get(dev);
	if (!d)
		return CUDA_ERROR_INVALID_DEVICE;
	if (!pctx)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&sim_lock);
	if (!d->primary) {
		d->primary = calloc(1, sizeof(*d->primary));
		if (!d->primary) {
			pthread_mutex_unlock(&sim_lock);
			return CUDA_ERROR_OUT_OF_MEMORY;
		}
		d->primary->dev = d;
		d->primary->is_primary = true;
	}
	bool activate = !d->primary->active;
	d->primary_refcount++;
	pthread_mutex_unlock(&sim_lock);
	if (activate) {
		d->primary->flags = d->primary_flags;
		res = sim_ctx_activate(d->primary);
		if (res != CUDA_SUCCESS) {
			pthread_mutex_lock(&sim_lock);
			d->primary_refcount--;
			pthread_mutex_unlock(&sim_lock);
			return res;
		}
	}
	*pctx = d->primary;
	return CUDA_SUCCESS;
}

static CUresult primary_release(CUdevice dev)
{
	struct sim_device *d = sim_device_get(dev);
	bool teardown = false;

	if (!d)
		return CUDA_ERROR_INVALID_DEVICE;
	pthread_mutex_lock(&sim_lock);
	if (d->primary_refcount <= 0) {
		pthread_mutex_unlock(&sim_lock);
		return CUDA_ERROR_INVALID_CONTEXT;
	}
	teardown = --d->primary_refcount == 0;
	pthread_mutex_unlock(&sim_lock);
	if (teardown)
		sim_ctx_teardown(d->primary);
	return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
	SIM_ENTER(cuDevicePrimaryCtxRelease_v2);
	return primary_release(dev);
}

CUresult cuDevicePrimaryCtxRelease(CUdevice dev)
{
	SIM_ENTER(cuDevicePrimaryCtxRelease);
	return primary_release(dev);
}

static CUresult primary_set_flags(CUdevice dev, unsigned flags)
{
	struct sim_device *d = sim_device_get(dev);

	if (!d)
		return CUDA_ERROR_INVALID_DEVICE;
	if (flags & ~(CU_CTX_SCHED_MASK | CU_CTX_LMEM_RESIZE_TO_MAX | CU_CTX_MAP_HOST |
		      CU_CTX_COREDUMP_ENABLE | CU_CTX_USER_COREDUMP_ENABLE | CU_CTX_SYNC_MEMOPS))
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&sim_lock);
	d->primary_flags = flags;
	if (d->primary && d->primary->active)
		d->primary->flags = flags;
	pthread_mutex_unlock(&sim_lock);
	return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags)
{
	SIM_ENTER(cuDevicePrimaryCtxSetFlags_v2);
	return primary_set_flags(dev, flags);
}

CUresult cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned int flags)
{
	SIM_ENTER(cuDevicePrimaryCtxSetFlags);
	return primary_set_flags(dev, flags);
}

CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active)
{
	struct sim_device *d;

	SIM_ENTER(cuDevicePrimaryCtxGetState);
	d = sim_device_get(dev);
	if (!d)
		return CUDA_ERROR_INVALID_DEVICE;
	if (!flags || !active)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&sim_lock);
	*flags = d->primary_flags;
	*active = d->primary && d->primary->active;
	pthread_mutex_unlock(&sim_lock);
	return CUDA_SUCCESS;
}

/* Destroys the primary context's resources now; retains stay counted and the next use finds a
 * fresh context under the same handle, as with the real driver. */
static CUresult primary_reset(CUdevice dev)
{
	struct sim_device *d = sim_device_get(dev);
	bool was_active;

	if (!d)
		return CUDA_ERROR_INVALID_DEVICE;
	pthread_mutex_lock(&sim_lock);
	was_active = d->primary && d->primary->active;
	pthread_mutex_unlock(&sim_lock);
	if (was_active)
		sim_ctx_teardown(d->primary);
	pthread_mutex_lock(&sim_lock);
	d->primary_refcount = 0;
	d->primary_flags = 0;
	pthread_mutex_unlock(&sim_lock);
	return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
	SIM_ENTER(cuDevicePrimaryCtxReset_v2);
	return primary_reset(dev);
}

CUresult cuDevicePrimaryCtxReset(CUdevice dev)
{
	SIM_ENTER(cuDevicePrimaryCtxReset);
	return primary_reset(dev);
}

/* ---- explicit contexts ---- */

static CUresult ctx_create(CUcontext *pctx, unsigned flags, CUdevice dev)
{
	struct sim_device *d = sim_device_get(dev);
	struct CUctx_st *ctx;
	CUresult res;

	if (!d)
		return CUDA_ERROR_INVALID_DEVICE;
	if (!pctx)
		return CUDA_ERROR_INVALID_VALUE;
	if (ctx_depth == SIM_CTX_STACK_DEPTH)
		return CUDA_ERROR_OUT_OF_MEMORY;
	ctx = calloc(1, sizeof(*ctx));
	if (!ctx)
		return CUDA_ERROR_OUT_OF_MEMORY;
	ctx->dev = d;
	ctx->flags = flags;
	res = sim_ctx_activate(ctx);
	if (res != CUDA_SUCCESS) {
		free(ctx);
		return res;
	}
	ctx_stack[ctx_depth++] = ctx;
	*pctx = ctx;
	return CUDA_SUCCESS;
}

CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
	SIM_ENTER(cuCtxCreate_v2);
	return ctx_create(pctx, flags, dev);
}

CUresult cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *params, int num_params, unsigned int flags,
			CUdevice dev)
{
	SIM_ENTER(cuCtxCreate_v3);
	/* Execution affinity (SM partitioning) is not simulated. */
	if (num_params < 0 || (num_params > 0 && !params))
		return CUDA_ERROR_INVALID_VALUE;
	return ctx_create(pctx, flags, dev);
}

CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *create_params, unsigned int flags, CUdevice dev)
{
	SIM_ENTER(cuCtxCreate_v4);
	if (create_params && (create_params->numExecAffinityParams || create_params->cigParams))
		return CUDA_ERROR_NOT_SUPPORTED;
	return ctx_create(pctx, flags, dev);
}

static CUresult ctx_destroy(CUcontext ctx)
{
	if (!sim_ctx_valid(ctx))
		return CUDA_ERROR_INVALID_CONTEXT;
	if (ctx->is_primary)
		return CUDA_ERROR_INVALID_CONTEXT;
	/* Only this thread's stack can be fixed up; others keep a dangling handle as with the driver. */
	for (int i = 0; i < ctx_depth; i++) {
		if (ctx_stack[i] == ctx) {
			memmove(&ctx_stack[i], &ctx_stack[i + 1], (size_t)(ctx_depth - i - 1) * sizeof(ctx));
			ctx_depth--;
			i--;
		}
	}
	sim_ctx_teardown(ctx);
	ctx->magic = SIM_MAGIC_DEAD;
	free(ctx);
	return CUDA_SUCCESS;
}

CUresult cuCtxDestroy_v2(CUcontext ctx)
{
	SIM_ENTER(cuCtxDestroy_v2);
	return ctx_destroy(ctx);
}

CUresult cuCtxDestroy(CUcontext ctx)
{
	SIM_ENTER(cuCtxDestroy);
	return ctx_destroy(ctx);
}

/* The usage count of CUDA 2.0: an attach adds one to the current context, a detach (of the current
 * context) takes one back and destroys the context when none is left. */
CUresult cuCtxAttach(CUcontext *pctx, unsigned int flags)
{
	CUresult res;
	struct CUctx_st *ctx;

	SIM_ENTER(cuCtxAttach);
	if (!pctx || flags)
		return CUDA_ERROR_INVALID_VALUE;
	res = sim_ctx_require(&ctx);
	if (res != CUDA_SUCCESS)
		return res;
	ctx->attached++;
	*pctx = ctx;
	return CUDA_SUCCESS;
}

CUresult cuCtxDetach(CUcontext ctx)
{
	SIM_ENTER(cuCtxDetach);
	if (!sim_ctx_valid(ctx) || sim_ctx_current() != ctx)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (ctx->attached) {
		ctx->attached--;
		return CUDA_SUCCESS;
	}
	return ctx_destroy(ctx);
}

static CUresult ctx_push(CUcontext ctx)
{
	if (!sim_ctx_valid(ctx))
		return CUDA_ERROR_INVALID_CONTEXT;
	if (ctx_depth == SIM_CTX_STACK_DEPTH)
		return CUDA_ERROR_OUT_OF_MEMORY;
	ctx_stack[ctx_depth++] = ctx;
	return CUDA_SUCCESS;
}

CUresult cuCtxPushCurrent_v2(CUcontext ctx)
{
	SIM_ENTER(cuCtxPushCurrent_v2);
	return ctx_push(ctx);
}

CUresult cuCtxPushCurrent(CUcontext ctx)
{
	SIM_ENTER(cuCtxPushCurrent);
	return ctx_push(ctx);
}

static CUresult ctx_pop(CUcontext *pctx)
{
	if (!ctx_depth)
		return CUDA_ERROR_INVALID_CONTEXT;
	ctx_depth--;
	if (pctx)
		*pctx = ctx_stack[ctx_depth];
	return CUDA_SUCCESS;
}

CUresult cuCtxPopCurrent_v2(CUcontext *pctx)
{
	SIM_ENTER(cuCtxPopCurrent_v2);
	return ctx_pop(pctx);
}

CUresult cuCtxPopCurrent(CUcontext *pctx)
{
	SIM_ENTER(cuCtxPopCurrent);
	return ctx_pop(pctx);
}

CUresult cuCtxSetCurrent(CUcontext ctx)
{
	SIM_ENTER(cuCtxSetCurrent);
	if (!ctx) {
		if (ctx_depth)
			ctx_depth--;
		return CUDA_SUCCESS;
	}
	if (!sim_ctx_valid(ctx))
		return CUDA_ERROR_INVALID_CONTEXT;
	if (ctx_depth)
		ctx_stack[ctx_depth - 1] = ctx;
	else
		ctx_stack[ctx_depth++] = ctx;
	return CUDA_SUCCESS;
}

CUresult cuCtxGetCurrent(CUcontext *pctx)
{
	SIM_ENTER(cuCtxGetCurrent);
	if (!pctx)
		return CUDA_ERROR_INVALID_VALUE;
	*pctx = sim_ctx_current();
	return CUDA_SUCCESS;
}

/* The context named, or the current one for NULL. */
static CUresult ctx_named_or_current(CUcontext ctx, struct CUctx_st **out)
{
	if (!ctx)
		return sim_ctx_require(out);
	if (!sim_ctx_valid(ctx))
		return CUDA_ERROR_INVALID_CONTEXT;
	*out = ctx;
	return CUDA_SUCCESS;
}

CUresult cuCtxGetDevice(CUdevice *device)
{
	struct CUctx_st *ctx;
	CUresult res;

	SIM_ENTER(cuCtxGetDevice);
	if (!device)
		return CUDA_ERROR_INVALID_VALUE;
	res = sim_ctx_require(&ctx);
	if (res == CUDA_SUCCESS)
		*device = ctx->dev->ordinal;
	return res;
}

CUresult cuCtxGetDevice_v2(CUdevice *device, CUcontext ctx_handle)
{
	struct CUctx_st *ctx;
	CUresult res;

	SIM_ENTER(cuCtxGetDevice_v2);
	if (!device)
		return CUDA_ERROR_INVALID_VALUE;
	res = ctx_named_or_current(ctx_handle, &ctx);
	if (res == CUDA_SUCCESS)
		*device = ctx->dev->ordinal;
	return res;
}

/* Peer access between the current context's device and peer's: the simulated devices reach no peer
 * (cuDeviceCanAccessPeer answers 0), so enabling is refused as the driver refuses it, and nothing is
 * ever enabled to disable. */
static CUresult peer_check(CUcontext peer)
{
	struct CUctx_st *ctx;
	CUresult res = sim_ctx_require(&ctx);

	if (res != CUDA_SUCCESS)
		return res;
	return peer && sim_ctx_valid(peer) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

CUresult cuCtxEnablePeerAccess(CUcontext peer, unsigned int flags)
{
	CUresult res;

	SIM_ENTER(cuCtxEnablePeerAccess);
	res = peer_check(peer);
	if (res == CUDA_SUCCESS && flags)
		res = CUDA_ERROR_INVALID_VALUE;
	/* No simulated device reaches another's memory (nor, as on the driver, its own as a peer). */
	return res == CUDA_SUCCESS ? CUDA_ERROR_PEER_ACCESS_UNSUPPORTED : res;
}

CUresult cuCtxDisablePeerAccess(CUcontext peer)
{
	CUresult res;

	SIM_ENTER(cuCtxDisablePeerAccess);
	res = peer_check(peer);
	return res == CUDA_SUCCESS ? CUDA_ERROR_PEER_ACCESS_NOT_ENABLED : res;
}

CUresult cuCtxSynchronize(void)
{
	struct CUctx_st *ctx;
	CUresult res;

	SIM_ENTER(cuCtxSynchronize);
	res = sim_ctx_require(&ctx);
	if (res == CUDA_SUCCESS)
		sim_ctx_wait_idle(ctx);
	/* A fault of the work just waited for surfaces here, as on a GPU. */
	return res == CUDA_SUCCESS && atomic_load(&sim_sticky_error)
		   ? (CUresult)atomic_load(&sim_sticky_error)
		   : res;
}

CUresult cuCtxSynchronize_v2(CUcontext ctx_handle)
{
	struct CUctx_st *ctx;
	CUresult res;

	SIM_ENTER(cuCtxSynchronize_v2);
	res = ctx_named_or_current(ctx_handle, &ctx);
	if (res == CUDA_SUCCESS)
		sim_ctx_wait_idle(ctx);
	return res == CUDA_SUCCESS && atomic_load(&sim_sticky_error)
		   ? (CUresult)atomic_load(&sim_sticky_error)
		   : res;
}

CUresult cuCtxGetFlags(unsigned int *flags)
{
	struct CUctx_st *ctx;
	CUresult res;

	SIM_ENTER(cuCtxGetFlags);
	if (!flags)
		return CUDA_ERROR_INVALID_VALUE;
	res = sim_ctx_require(&ctx);
	if (res == CUDA_SUCCESS)
		*flags = ctx->flags;
	return res;
}

CUresult cuCtxSetFlags(unsigned int flags)
{
	struct CUctx_st *ctx;
	CUresult res;

	SIM_ENTER(cuCtxSetFlags);
	res = sim_ctx_require(&ctx);
	if (res == CUDA_SUCCESS)
		ctx->flags = flags;
	return res;
}

CUresult cuCtxGetApiVersion(CUcontext ctx_handle, unsigned int *version)
{
	struct CUctx_st *ctx;
	CUresult res;

	SIM_ENTER(cuCtxGetApiVersion);
	if (!version)
		return CUDA_ERROR_INVALID_VALUE;
	res = ctx_named_or_current(ctx_handle, &ctx);
	if (res == CUDA_SUCCESS)
		*version = 3020; /* what the real driver reports for contexts of the _v2 API */
	return res;
}

CUresult cuCtxGetId(CUcontext ctx_handle, unsigned long long *id)
{
	struct CUctx_st *ctx;
	CUresult res;

	SIM_ENTER(cuCtxGetId);
	if (!id)
		return CUDA_ERROR_INVALID_VALUE;
	res = ctx_named_or_current(ctx_handle, &ctx);
	if (res == CUDA_SUCCESS)
		*id = ctx->id;
	return res;
}

CUresult cuCtxGetLimit(size_t *value, CUlimit limit)
{
	struct CUctx_st *ctx;
	CUresult res;

	SIM_ENTER(cuCtxGetLimit);
	if (!value || (unsigned)limit >= CU_LIMIT_MAX) {
		if (value)
			sim_log(CU_LOG_LEVEL_ERROR, "[cuCtxGetLimit] limit %u is not supported",
				(unsigned)limit);
		return CUDA_ERROR_INVALID_VALUE; /* measured, H100, driver 580 */
	}
	res = sim_ctx_require(&ctx);
	if (res == CUDA_SUCCESS)
		*value = ctx->limits[limit];
	return res;
}

CUresult cuCtxSetLimit(CUlimit limit, size_t value)
{
	struct CUctx_st *ctx;
	CUresult res;

	SIM_ENTER(cuCtxSetLimit);
	if ((unsigned)limit >= CU_LIMIT_MAX)
		return CUDA_ERROR_UNSUPPORTED_LIMIT;
	res = sim_ctx_require(&ctx);
	if (res == CUDA_SUCCESS)
		ctx->limits[limit] = value;
	return res;
}

CUresult cuCtxGetCacheConfig(CUfunc_cache *config)
{
	struct CUctx_st *ctx;
	CUresult res;

	SIM_ENTER(cuCtxGetCacheConfig);
	if (!config)
		return CUDA_ERROR_INVALID_VALUE;
	res = sim_ctx_require(&ctx);
	if (res == CUDA_SUCCESS)
		*config = ctx->cache_config;
	return res;
}

CUresult cuCtxSetCacheConfig(CUfunc_cache config)
{
	struct CUctx_st *ctx;
	CUresult res;

	SIM_ENTER(cuCtxSetCacheConfig);
	if ((unsigned)config > CU_FUNC_CACHE_PREFER_EQUAL)
		return CUDA_ERROR_INVALID_VALUE;
	res = sim_ctx_require(&ctx);
	if (res == CUDA_SUCCESS)
		ctx->cache_config = config;
	return res;
}

CUresult cuCtxGetStreamPriorityRange(int *least, int *greatest)
{
	struct CUctx_st *ctx;
	CUresult res;

	SIM_ENTER(cuCtxGetStreamPriorityRange);
	res = sim_ctx_require(&ctx);
	if (res != CUDA_SUCCESS)
		return res;
	if (least)
		*least = 0;
	if (greatest)
		*greatest = -5;
	return CUDA_SUCCESS;
}

/* ---- coredump attributes ---- */

/* The process's values (cuCoredumpSetAttributeGlobal); the defaults as the driver documents them. */
static struct sim_coredump coredump_global;
static bool coredump_global_ready;

static struct sim_coredump *coredump_process(void)
{
	if (!coredump_global_ready) {
		char host[256] = "localhost";

		gethostname(host, sizeof(host) - 1);
		coredump_global.flag[CU_COREDUMP_TRIGGER_HOST] = 1;
		snprintf(coredump_global.file, sizeof(coredump_global.file), "core.cuda.%s.%d", host,
			 (int)getpid());
		snprintf(coredump_global.pipe, sizeof(coredump_global.pipe), "corepipe.cuda.%s.%d", host,
			 (int)getpid());
		coredump_global_ready = true;
	}
	return &coredump_global;
}

static bool coredump_string(CUcoredumpSettings a)
{
	return a == CU_COREDUMP_FILE || a == CU_COREDUMP_PIPE;
}

/* The bytes attribute a takes (a string's: its length with the NUL). */
static size_t coredump_size(const struct sim_coredump *v, CUcoredumpSettings a)
{
	if (coredump_string(a))
		return strlen(a == CU_COREDUMP_FILE ? v->file : v->pipe) + 1;
	return a == CU_COREDUMP_GENERATION_FLAGS ? sizeof(int) : sizeof(bool);
}

/* ctx NULL: the process's values; else the context's, falling back to the process's (and to the
 * context's creation flags for the two it can enable). */
static CUresult coredump_get(struct CUctx_st *ctx, CUcoredumpSettings a, void *value, size_t *size)
{
	struct sim_coredump *g = coredump_process();
	const struct sim_coredump *v = ctx && (ctx->coredump.set >> a & 1) ? &ctx->coredump : g;
	size_t need;

	if (a < CU_COREDUMP_ENABLE_ON_EXCEPTION || a >= CU_COREDUMP_MAX || !size)
		return CUDA_ERROR_INVALID_VALUE;
	need = coredump_size(v, a);
	if (!value) {
		*size = need;
		return CUDA_SUCCESS;
	}
	if (*size < need)
		return CUDA_ERROR_INVALID_VALUE;
	if (coredump_string(a))
		memcpy(value, a == CU_COREDUMP_FILE ? v->file : v->pipe, need);
	else if (a == CU_COREDUMP_GENERATION_FLAGS)
		*(int *)value = v->gen_flags;
	else if (ctx && v == g && a == CU_COREDUMP_ENABLE_ON_EXCEPTION &&
		 (ctx->flags & CU_CTX_COREDUMP_ENABLE))
		*(bool *)value = true;
	else if (ctx && v == g && a == CU_COREDUMP_ENABLE_USER_TRIGGER &&
		 (ctx->flags & CU_CTX_USER_COREDUMP_ENABLE))
		*(bool *)value = true;
	else
		*(bool *)value = v->flag[a];
	return CUDA_SUCCESS;
}

static CUresult coredump_set(struct sim_coredump *v, CUcoredumpSettings a, void *value, size_t *size)
{
	if (a < CU_COREDUMP_ENABLE_ON_EXCEPTION || a >= CU_COREDUMP_MAX || !size)
		return CUDA_ERROR_INVALID_VALUE;
	if (!value) {
		*size = coredump_string(a) ? sizeof(v->file) : coredump_size(v, a);
		return CUDA_SUCCESS;
	}
	if (coredump_string(a)) {
		size_t n = strnlen(value, *size);

		if (n == *size || n >= sizeof(v->file))
			return CUDA_ERROR_INVALID_VALUE;
		memcpy(a == CU_COREDUMP_FILE ? v->file : v->pipe, value, n + 1);
	} else if (*size < coredump_size(v, a)) {
		return CUDA_ERROR_INVALID_VALUE;
	} else if (a == CU_COREDUMP_GENERATION_FLAGS) {
		v->gen_flags = *(const int *)value;
	} else {
		v->flag[a] = *(const bool *)value;
	}
	v->set |= 1u << a;
	return CUDA_SUCCESS;
}

CUresult cuCoredumpGetAttribute(CUcoredumpSettings attrib, void *value, size_t *size)
{
	struct CUctx_st *ctx;
	CUresult res;

	SIM_ENTER(cuCoredumpGetAttribute);
	res = sim_ctx_require(&ctx);
	if (res != CUDA_SUCCESS)
		return res;
	/* The process's only: a context's is refused (measured, H100 and H200, driver 580). */
	if (attrib == CU_COREDUMP_ENABLE_USER_TRIGGER || attrib == CU_COREDUMP_PIPE)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&sim_lock);
	res = coredump_get(ctx, attrib, value, size);
	pthread_mutex_unlock(&sim_lock);
	return res;
}

CUresult cuCoredumpGetAttributeGlobal(CUcoredumpSettings attrib, void *value, size_t *size)
{
	CUresult res;

	SIM_ENTER(cuCoredumpGetAttributeGlobal);
	pthread_mutex_lock(&sim_lock);
	res = coredump_get(NULL, attrib, value, size);
	pthread_mutex_unlock(&sim_lock);
	return res;
}

/* The user trigger and its pipe are the process's only. */
CUresult cuCoredumpSetAttribute(CUcoredumpSettings attrib, void *value, size_t *size)
{
	struct CUctx_st *ctx;
	CUresult res;

	SIM_ENTER(cuCoredumpSetAttribute);
	res = sim_ctx_require(&ctx);
	if (res != CUDA_SUCCESS)
		return res;
	if (attrib == CU_COREDUMP_ENABLE_USER_TRIGGER || attrib == CU_COREDUMP_PIPE)
		return CUDA_ERROR_NOT_PERMITTED;
	pthread_mutex_lock(&sim_lock);
	res = coredump_set(&ctx->coredump, attrib, value, size);
	pthread_mutex_unlock(&sim_lock);
	return res;
}

CUresult cuCoredumpSetAttributeGlobal(CUcoredumpSettings attrib, void *value, size_t *size)
{
	CUresult res;

	SIM_ENTER(cuCoredumpSetAttributeGlobal);
	pthread_mutex_lock(&sim_lock);
	res = coredump_set(coredump_process(), attrib, value, size);
	pthread_mutex_unlock(&sim_lock);
	return res;
}
