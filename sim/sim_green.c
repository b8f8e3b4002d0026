/* Green contexts and device resources on the simulated device. A device has one SM resource (its SM
 * count, an H100's 132); a split follows cuda.h's guideline for compute capability 9.0: groups of at
 * least 8 SMs in multiples of 8, or with CU_DEV_SM_RESOURCE_SPLIT_IGNORE_SM_COSCHEDULING at least 2 in
 * multiples of 2 (a TPC); as many groups as fit (at most *nbGroups), the rest in the remainder. A
 * descriptor holds resources of one device (several: of one split); a green context has its
 * resources and a CUcontext of its own (a legacy stream for its default stream), whose memory and
 * library modules are the primary context's, which it retains. SMs are not partitioned: kernels run
 * as everywhere in the sim. */
#include <stdlib.h>
#include <string.h>

#include "sim.h"

#define SIM_MAGIC_GREEN 0x47524e31
#define SIM_MAGIC_DESC	0x44534331
#define SIM_RES_TAG	0x53524553 /* "SRES" in a resource's internal bytes */
#define SIM_SM_COUNT	132
#define SIM_SM_MIN	8 /* compute capability 9.0 */
#define SIM_SM_ALIGN	8
#define SIM_SM_TPC	2

/* What the sim keeps in a resource's _internal_padding. */
struct res_tag {
	uint32_t tag;
	int32_t dev;
	uint64_t split; /* the split that made it, 0 for a device's or a context's */
};
_Static_assert(sizeof(struct res_tag) <= sizeof(((CUdevResource *)0)->_internal_padding), "res_tag");

struct CUgreenCtx_st {
	uint32_t magic;
	struct sim_device *dev;
	CUdevResource res;
	struct CUctx_st *ctx;
	unsigned long long id;
};

struct CUdevResourceDesc_st {
	uint32_t magic;
	int dev;
	unsigned sm, min, align;
};

static uint64_t split_seq;

static void res_make(CUdevResource *r, int dev, uint64_t split, unsigned sm, unsigned min, unsigned align)
{
	struct res_tag t = {.tag = SIM_RES_TAG, .dev = dev, .split = split};

	memset(r, 0, sizeof(*r));
	r->type = CU_DEV_RESOURCE_TYPE_SM;
	memcpy(r->_internal_padding, &t, sizeof(t));
	r->sm.smCount = sm;
	r->sm.minSmPartitionSize = min;
	r->sm.smCoscheduledAlignment = align;
}

static bool res_tag_of(const CUdevResource *r, struct res_tag *t)
{
	memcpy(t, r->_internal_padding, sizeof(*t));
	return t->tag == SIM_RES_TAG && sim_device_get(t->dev);
}

static void device_res(const struct sim_device *d, CUdevResource *r)
{
	res_make(r, d->ordinal, 0, SIM_SM_COUNT, SIM_SM_MIN, SIM_SM_TPC);
}

static bool green_valid(const struct CUgreenCtx_st *g)
{
	return g && g->magic == SIM_MAGIC_GREEN;
}

CUresult cuDeviceGetDevResource(CUdevice device, CUdevResource *resource, CUdevResourceType type)
{
	struct sim_device *d;

	SIM_ENTER(cuDeviceGetDevResource);
	d = sim_device_get(device);
	if (!d)
		return CUDA_ERROR_INVALID_DEVICE;
	if (!resource)
		return CUDA_ERROR_INVALID_VALUE;
	if (type != CU_DEV_RESOURCE_TYPE_SM)
		return CUDA_ERROR_INVALID_RESOURCE_TYPE;
	device_res(d, resource);
	return CUDA_SUCCESS;
}

CUresult cuCtxGetDevResource(CUcontext hCtx, CUdevResource *resource, CUdevResourceType type)
{
	SIM_ENTER(cuCtxGetDevResource);
	if (!sim_ctx_valid(hCtx))
		return CUDA_ERROR_INVALID_CONTEXT;
	if (!resource)
		return CUDA_ERROR_INVALID_VALUE;
	if (type != CU_DEV_RESOURCE_TYPE_SM)
		return CUDA_ERROR_INVALID_RESOURCE_TYPE;
	if (hCtx->green)
		*resource = hCtx->green->res;
	else
		device_res(hCtx->dev, resource);
	return CUDA_SUCCESS;
}

CUresult cuGreenCtxGetDevResource(CUgreenCtx hCtx, CUdevResource *resource, CUdevResourceType type)
{
	SIM_ENTER(cuGreenCtxGetDevResource);
	if (!green_valid(hCtx))
		return CUDA_ERROR_INVALID_CONTEXT;
	if (!resource)
		return CUDA_ERROR_INVALID_VALUE;
	if (type != CU_DEV_RESOURCE_TYPE_SM)
		return CUDA_ERROR_INVALID_RESOURCE_TYPE;
	*resource = hCtx->res;
	return CUDA_SUCCESS;
}

CUresult cuDevSmResourceSplitByCount(CUdevResource *result, unsigned int *nbGroups,
				     const CUdevResource *input, CUdevResource *remaining,
				     unsigned int useFlags, unsigned int minCount)
{
	bool fine = useFlags & CU_DEV_SM_RESOURCE_SPLIT_IGNORE_SM_COSCHEDULING;
	unsigned min = fine ? SIM_SM_TPC : SIM_SM_MIN, align = fine ? SIM_SM_TPC : SIM_SM_ALIGN;
	unsigned count, n;
	struct res_tag t;
	uint64_t split;

	SIM_ENTER(cuDevSmResourceSplitByCount);
	if (!nbGroups || !input ||
	    (useFlags & ~(unsigned)(CU_DEV_SM_RESOURCE_SPLIT_IGNORE_SM_COSCHEDULING |
				    CU_DEV_SM_RESOURCE_SPLIT_MAX_POTENTIAL_CLUSTER_SIZE)))
		return CUDA_ERROR_INVALID_VALUE;
	if (input->type != CU_DEV_RESOURCE_TYPE_SM)
		return CUDA_ERROR_INVALID_RESOURCE_TYPE;
	if (!res_tag_of(input, &t))
		return CUDA_ERROR_INVALID_VALUE;
	/* A split's output is split again only through a green context made of it. */
	if (t.split)
		return CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION;
	if (minCount > input->sm.smCount || (result && !*nbGroups))
		return CUDA_ERROR_INVALID_VALUE;
	count = minCount < min ? min : minCount;
	count = (count + align - 1) / align * align;
	n = input->sm.smCount / count;
	if (result && n > *nbGroups)
		n = *nbGroups;
	if (!n)
		return CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION;
	*nbGroups = n;
	if (!result && !remaining)
		return CUDA_SUCCESS;
	split = __atomic_add_fetch(&split_seq, 1, __ATOMIC_RELAXED);
	for (unsigned i = 0; result && i < n; i++)
		res_make(&result[i], t.dev, split, count, min, align);
	if (remaining)
		res_make(remaining, t.dev, split, input->sm.smCount - n * count, min, SIM_SM_TPC);
	return CUDA_SUCCESS;
}

CUresult cuDevResourceGenerateDesc(CUdevResourceDesc *phDesc, CUdevResource *resources,
				   unsigned int nbResources)
{
	struct CUdevResourceDesc_st *d;
	struct res_tag first, t;
	unsigned sm = 0;

	SIM_ENTER(cuDevResourceGenerateDesc);
	if (!phDesc || !resources || !nbResources)
		return CUDA_ERROR_INVALID_VALUE;
	for (unsigned i = 0; i < nbResources; i++) {
		if (resources[i].type != CU_DEV_RESOURCE_TYPE_SM)
			return CUDA_ERROR_INVALID_RESOURCE_TYPE;
		if (!res_tag_of(&resources[i], &t))
			return CUDA_ERROR_INVALID_VALUE;
		if (i == 0)
			first = t;
		else if (t.dev != first.dev || !t.split || t.split != first.split)
			return CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION;
		sm += resources[i].sm.smCount;
	}
	d = calloc(1, sizeof(*d));
	if (!d)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*d = (struct CUdevResourceDesc_st){.magic = SIM_MAGIC_DESC,
					   .dev = first.dev,
					   .sm = sm,
					   .min = resources[0].sm.minSmPartitionSize,
					   .align = SIM_SM_TPC};
	*phDesc = d;
	return CUDA_SUCCESS;
}

CUresult cuGreenCtxCreate(CUgreenCtx *phCtx, CUdevResourceDesc desc, CUdevice dev, unsigned int flags)
{
	struct CUgreenCtx_st *g;
	struct sim_device *d;
	CUcontext primary;
	CUresult res;

	SIM_ENTER(cuGreenCtxCreate);
	d = sim_device_get(dev);
	if (!d)
		return CUDA_ERROR_INVALID_DEVICE;
	if (!phCtx || !desc || desc->magic != SIM_MAGIC_DESC || desc->dev != dev ||
	    flags != CU_GREEN_CTX_DEFAULT_STREAM)
		return CUDA_ERROR_INVALID_VALUE;
	g = calloc(1, sizeof(*g));
	if (!g)
		return CUDA_ERROR_OUT_OF_MEMORY;
	g->ctx = calloc(1, sizeof(*g->ctx));
	if (!g->ctx) {
		free(g);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	res = cuDevicePrimaryCtxRetain(&primary, dev);
	if (res != CUDA_SUCCESS) {
		free(g->ctx);
		free(g);
		return res;
	}
	g->magic = SIM_MAGIC_GREEN;
	g->dev = d;
	g->id = sim_next_id();
	res_make(&g->res, dev, 0, desc->sm, desc->min, desc->align);
	g->ctx->dev = d;
	g->ctx->flags = primary->flags;
	g->ctx->base = primary;
	g->ctx->green = g;
	res = sim_ctx_activate(g->ctx);
	if (res != CUDA_SUCCESS) {
		cuDevicePrimaryCtxRelease_v2(dev);
		free(g->ctx);
		free(g);
		return res;
	}
	*phCtx = g;
	return CUDA_SUCCESS;
}

CUresult cuGreenCtxDestroy(CUgreenCtx hCtx)
{
	SIM_ENTER(cuGreenCtxDestroy);
	if (!green_valid(hCtx))
		return CUDA_ERROR_INVALID_CONTEXT;
	/* Its work ends, its streams go; its memory is the primary context's and stays. The structs stay
	 * too (dead), so a stale handle is refused rather than read freed memory. */
	sim_ctx_teardown(hCtx->ctx);
	hCtx->ctx->magic = SIM_MAGIC_DEAD;
	hCtx->magic = SIM_MAGIC_DEAD;
	return cuDevicePrimaryCtxRelease_v2(hCtx->dev->ordinal);
}

CUresult cuCtxFromGreenCtx(CUcontext *pContext, CUgreenCtx hCtx)
{
	SIM_ENTER(cuCtxFromGreenCtx);
	if (!pContext)
		return CUDA_ERROR_INVALID_VALUE;
	if (!green_valid(hCtx))
		return CUDA_ERROR_INVALID_CONTEXT;
	*pContext = hCtx->ctx;
	return CUDA_SUCCESS;
}

CUresult cuGreenCtxGetId(CUgreenCtx greenCtx, unsigned long long *greenCtxId)
{
	struct CUctx_st *cur = sim_ctx_current();

	SIM_ENTER(cuGreenCtxGetId);
	if (!greenCtx && cur)
		greenCtx = cur->green;
	if (!greenCtx || !green_valid(greenCtx))
		return CUDA_ERROR_INVALID_CONTEXT;
	if (!greenCtxId)
		return CUDA_ERROR_INVALID_VALUE;
	*greenCtxId = greenCtx->id;
	return CUDA_SUCCESS;
}

CUresult cuGreenCtxStreamCreate(CUstream *phStream, CUgreenCtx greenCtx, unsigned int flags, int priority)
{
	SIM_ENTER(cuGreenCtxStreamCreate);
	if (!green_valid(greenCtx))
		return CUDA_ERROR_INVALID_CONTEXT;
	if (!phStream || flags != CU_STREAM_NON_BLOCKING)
		return CUDA_ERROR_INVALID_VALUE;
	/* cuCtxGetStreamPriorityRange's range: [-5, 0]. */
	priority = priority > 0 ? 0 : priority < -5 ? -5 : priority;
	return sim_stream_create(greenCtx->ctx, flags, priority, false, phStream);
}

/* The event captures all the green context's work: the sim waits for it, then records the event on
 * the context's default stream (idle by then). */
CUresult cuGreenCtxRecordEvent(CUgreenCtx hCtx, CUevent hEvent)
{
	SIM_ENTER(cuGreenCtxRecordEvent);
	if (!green_valid(hCtx))
		return CUDA_ERROR_INVALID_CONTEXT;
	if (!hEvent || hEvent->magic != SIM_MAGIC_EVENT)
		return CUDA_ERROR_INVALID_HANDLE;
	sim_ctx_wait_idle(hCtx->ctx);
	return cuEventRecord(hEvent, hCtx->ctx->legacy_stream);
}

/* Future work of the green context waits for the event: the sim waits for it here. */
CUresult cuGreenCtxWaitEvent(CUgreenCtx hCtx, CUevent hEvent)
{
	SIM_ENTER(cuGreenCtxWaitEvent);
	if (!green_valid(hCtx))
		return CUDA_ERROR_INVALID_CONTEXT;
	if (!hEvent || hEvent->magic != SIM_MAGIC_EVENT)
		return CUDA_ERROR_INVALID_HANDLE;
	return cuEventSynchronize(hEvent);
}
