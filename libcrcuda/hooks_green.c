/* Hooks: green contexts and device resources. The calls go to the daemon as they are (generated
 * forwarders) or hand-marshalled (a split and a descriptor carry CUdevResource arrays); the client
 * keeps what it answers locally: a green context's device and CUcontext, the green context a context
 * or stream belongs to. Resources travel by value: the daemon's copies name its own (crcuda/devres.h). */
#include <string.h>

#include "client.h"
#include "hooks.h"
#include "crcuda/devres.h"

_Static_assert(sizeof(CUdevResource) == sizeof(((struct crc_devres_split_req *)0)->input), "CUdevResource");

CUresult crc_hook_cuGreenCtxCreate(CUgreenCtx *phCtx, CUdevResourceDesc desc, CUdevice dev,
				   unsigned int flags)
{
	CUresult res = crc_fwd_cuGreenCtxCreate(phCtx, desc, dev, flags);

	if (res == CUDA_SUCCESS && phCtx && *phCtx)
		crc_green_register((uintptr_t)*phCtx, dev);
	return res;
}

/* The green context's CUcontext, known here (0: none). */
static uint64_t green_ctx(CUgreenCtx g, CUresult *res)
{
	struct crc_green_info *gi = crc_green_info((uintptr_t)g);
	CUcontext ctx = NULL;

	*res = CUDA_SUCCESS;
	if (gi && gi->ctx)
		return gi->ctx;
	*res = crc_fwd_cuCtxFromGreenCtx(&ctx, g);
	if (*res != CUDA_SUCCESS || !ctx)
		return 0;
	crc_ctx_register((uintptr_t)ctx, gi ? gi->dev : 0, 0, false);
	crc_ctx_info((uintptr_t)ctx)->green = (uintptr_t)g;
	if (gi)
		gi->ctx = (uintptr_t)ctx;
	return (uintptr_t)ctx;
}

CUresult crc_hook_cuCtxFromGreenCtx(CUcontext *pContext, CUgreenCtx hCtx)
{
	CUresult res;
	uint64_t ctx;

	if (!pContext || !hCtx)
		return crc_fwd_cuCtxFromGreenCtx(pContext, hCtx);
	ctx = green_ctx(hCtx, &res);
	if (res == CUDA_SUCCESS)
		*pContext = (CUcontext)(uintptr_t)ctx;
	return res;
}

CUresult crc_hook_cuGreenCtxDestroy(CUgreenCtx hCtx)
{
	struct crc_green_info *gi = crc_green_info((uintptr_t)hCtx);
	struct crc_thread *t = crc_self();
	CUresult res = crc_fwd_cuGreenCtxDestroy(hCtx);

	if (res != CUDA_SUCCESS || !gi)
		return res;
	if (gi->ctx) {
		crc_ctx_forget(gi->ctx);
		/* Its CUcontext is no one's current context any more on this thread. */
		for (int i = t->depth; i-- > 0;)
			if (t->ctx_stack[i] == gi->ctx) {
				memmove(&t->ctx_stack[i], &t->ctx_stack[i + 1],
					(size_t)(t->depth - i - 1) * sizeof(t->ctx_stack[0]));
				t->depth--;
			}
	}
	crc_green_forget((uintptr_t)hCtx);
	return res;
}

CUresult crc_hook_cuGreenCtxStreamCreate(CUstream *phStream, CUgreenCtx greenCtx, unsigned int flags,
					 int priority)
{
	CUresult res = crc_fwd_cuGreenCtxStreamCreate(phStream, greenCtx, flags, priority);
	uint64_t ctx;

	if (res != CUDA_SUCCESS || !phStream)
		return res;
	ctx = green_ctx(greenCtx, &res);
	crc_stream_store((uintptr_t)*phStream, ctx, flags, priority);
	return CUDA_SUCCESS;
}

CUresult crc_hook_cuGreenCtxGetDevResource(CUgreenCtx hCtx, CUdevResource *resource, CUdevResourceType type)
{
	return crc_fwd_cuGreenCtxGetDevResource(hCtx, resource, type);
}

CUresult crc_hook_cuGreenCtxRecordEvent(CUgreenCtx hCtx, CUevent hEvent)
{
	return crc_fwd_cuGreenCtxRecordEvent(hCtx, hEvent);
}

CUresult crc_hook_cuGreenCtxWaitEvent(CUgreenCtx hCtx, CUevent hEvent)
{
	return crc_fwd_cuGreenCtxWaitEvent(hCtx, hEvent);
}

CUresult crc_hook_cuDevSmResourceSplitByCount(CUdevResource *result, unsigned int *nbGroups,
					      const CUdevResource *input, CUdevResource *remaining,
					      unsigned int useFlags, unsigned int minCount)
{
	struct crc_devres_split_req *r;
	struct crc_call c;
	CUresult res = crc_ready();

	if (res != CUDA_SUCCESS)
		return res;
	res = crc_call_begin(&c, CRC_CU_cuDevSmResourceSplitByCount, 0, sizeof(*r), (void **)&r);
	if (res != CUDA_SUCCESS)
		return res;
	memset(r, 0, sizeof(*r));
	r->flags = (result ? CRC_SPLIT_RESULT : 0) | (remaining ? CRC_SPLIT_REMAINING : 0) |
		   (nbGroups ? CRC_SPLIT_NBGROUPS : 0) | (input ? CRC_SPLIT_INPUT : 0);
	r->nb_groups = nbGroups ? *nbGroups : 0;
	r->use_flags = useFlags;
	r->min_count = minCount;
	if (input)
		memcpy(r->input, input, sizeof(*input));
	res = crc_call_wait(&c, NULL, NULL);
	if (res == CUDA_SUCCESS && c.reply_len >= 8) {
		const uint8_t *p = c.reply;
		uint32_t n;

		memcpy(&n, p, 4);
		p += 8;
		if (result && c.reply_len >= 8 + (size_t)n * sizeof(*result)) {
			memcpy(result, p, (size_t)n * sizeof(*result));
			p += (size_t)n * sizeof(*result);
		}
		if (remaining && (size_t)(p - (const uint8_t *)c.reply) + sizeof(*remaining) <= c.reply_len)
			memcpy(remaining, p, sizeof(*remaining));
		if (nbGroups)
			*nbGroups = n;
	}
	crc_call_end(&c);
	return res;
}

CUresult crc_hook_cuDevResourceGenerateDesc(CUdevResourceDesc *phDesc, CUdevResource *resources,
					    unsigned int nbResources)
{
	struct crc_devres_desc_req *r;
	struct crc_call c;
	size_t n = resources ? nbResources : 0;
	CUresult res = crc_ready();

	if (res != CUDA_SUCCESS)
		return res;
	if (!phDesc || n > CRC_DEVRES_MAX_GROUPS + 1)
		return CUDA_ERROR_INVALID_VALUE;
	res = crc_call_begin(&c, CRC_CU_cuDevResourceGenerateDesc, 0, sizeof(*r) + n * sizeof(*resources),
			     (void **)&r);
	if (res != CUDA_SUCCESS)
		return res;
	*r = (struct crc_devres_desc_req){.n = nbResources, .present = resources != NULL};
	if (n)
		memcpy(r + 1, resources, n * sizeof(*resources));
	res = crc_call_wait(&c, NULL, NULL);
	if (res == CUDA_SUCCESS && c.reply_len >= 8) {
		uint64_t v;

		memcpy(&v, c.reply, 8);
		*phDesc = (CUdevResourceDesc)(uintptr_t)v;
	}
	crc_call_end(&c);
	return res;
}
