/* Green contexts and device resources (crcuda/devres.h). Green contexts, their CUcontext, their
 * streams and resource descriptors are virtual handles the generic path names and the journal
 * replays. Device resources are the daemon's: the application gets a copy naming the driver's struct
 * (tag CRC_HT_DEVRES), so a resource kept across a checkpoint still means something to a restored
 * daemon, whose replay made the driver's struct again. A split replayed on another GPU model may give
 * other groups: the replay compares them with the journal's record and fails the restore, saying so,
 * rather than hand out other SMs; a resource whose SMs differ from the application's copy is refused
 * (CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION) with the reason in the log. */
#define LOG_PREFIX "greenctx: "
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "crcuda/devres.h"
#include "crcuda/log.h"
#include "worker.h"

/* After cuda.h: define and call entry points by their ABI names. */
#include "crcuda/cuda_api_undef.h"

_Static_assert(sizeof(CUdevResource) == 144, "CUdevResource: the layout crcuda/devres.h assumes");
_Static_assert(sizeof(((struct crc_devres_split_req *)0)->input) == sizeof(CUdevResource), "input bytes");

/* A resource the daemon named: the driver's struct, and where it came from (origin queries asked
 * again keep their handle; a split's groups are new each time). */
struct devres {
	CUdevResource real;
	int op;
	const void *source; /* the device (ordinal + 1) or the context queried */
	int type;
};

static uint64_t res_handle(const CUdevResource *r)
{
	uint64_t magic, v;

	memcpy(&magic, (const uint8_t *)r + CRC_DEVRES_MAGIC_OFF, 8);
	if (magic != CRC_DEVRES_MAGIC)
		return 0;
	memcpy(&v, (const uint8_t *)r + CRC_DEVRES_HANDLE_OFF, 8);
	return v;
}

/* The application's copy of the driver's resource real, named v. */
static void res_client(CUdevResource *out, const CUdevResource *real, uint64_t v)
{
	uint64_t magic = CRC_DEVRES_MAGIC;

	memset(out, 0, sizeof(*out));
	out->type = real->type;
	memcpy((uint8_t *)out + offsetof(CUdevResource, sm),
	       (const uint8_t *)real + offsetof(CUdevResource, sm),
	       sizeof(*out) - offsetof(CUdevResource, sm));
	memcpy((uint8_t *)out + CRC_DEVRES_MAGIC_OFF, &magic, 8);
	memcpy((uint8_t *)out + CRC_DEVRES_HANDLE_OFF, &v, 8);
}

/* The driver's resource behind the application's copy in (one the daemon did not name goes as it is:
 * the driver judges it). */
static CUresult res_real(struct crc_session *s, const struct crc_call_hdr *h, const CUdevResource *in,
			 CUdevResource *out)
{
	uint64_t v = res_handle(in);
	union crc_slot slot;
	const struct devres *d;

	if (!v) {
		*out = *in;
		return CUDA_SUCCESS;
	}
	if (crc_translate(s, h, CRC_HT_DEVRES, v, &slot) != CUDA_SUCCESS)
		return CUDA_ERROR_INVALID_VALUE;
	d = slot.ptr;
	if (d->real.type != in->type ||
	    (in->type == CU_DEV_RESOURCE_TYPE_SM && d->real.sm.smCount != in->sm.smCount)) {
		snprintf(s->call_why, sizeof(s->call_why),
			 "device resource %#llx: %u SMs (type %d) on this GPU, %u SMs (type %d) when the "
			 "application got it (a restore on another GPU model?): refused",
			 (unsigned long long)v, d->real.sm.smCount, (int)d->real.type, in->sm.smCount,
			 (int)in->type);
		pr_err("session %llu: %s", (unsigned long long)s->id, s->call_why);
		return CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION;
	}
	*out = d->real;
	return CUDA_SUCCESS;
}

/* Names the driver's resource real (op 0: a split's, always new). 0 when out of memory. */
static uint64_t res_name(struct crc_session *s, const CUdevResource *real, int op, const void *source,
			 int type)
{
	struct crc_htable *t = &s->tables[CRC_HT_DEVRES];
	struct devres *d;
	uint64_t v;

	for (uint32_t i = 1; op && i <= t->n; i++) {
		d = t->real[i].ptr;
		if (d && d->op == op && d->source == source && d->type == type) {
			d->real = *real;
			return crc_vhandle(CRC_HT_DEVRES, i);
		}
	}
	d = malloc(sizeof(*d));
	if (!d)
		return 0;
	*d = (struct devres){.real = *real, .op = op, .source = source, .type = type};
	v = crc_register(s, CRC_HT_DEVRES, (union crc_slot){.ptr = d});
	if (!v)
		free(d);
	return v;
}

/* An origin query's answer: the driver's resource named, the application's copy in *out. */
static CUresult give(struct crc_session *s, CUresult res, CUdevResource *out, const CUdevResource *real,
		     int op, const void *source, int type)
{
	uint64_t v;

	if (res != CUDA_SUCCESS || !out)
		return res;
	v = res_name(s, real, op, source, type);
	if (!v)
		return CUDA_ERROR_OUT_OF_MEMORY;
	res_client(out, real, v);
	return CUDA_SUCCESS;
}

CUresult crc_ovr_cuDeviceGetDevResource(struct crc_session *s, void *const *argv)
{
	CUdevice dev = crc_dev_backend(s, *(const CUdevice *)argv[0]);
	CUdevResource *out = argv[1], real;
	CUdevResourceType type = *(const CUdevResourceType *)argv[2];
	CUresult res = crc_be.cuDeviceGetDevResource_fn(dev, out ? &real : NULL, type);

	return give(s, res, out, &real, CRC_CU_cuDeviceGetDevResource, (const void *)(uintptr_t)(dev + 1),
		    (int)type);
}

CUresult crc_ovr_cuCtxGetDevResource(struct crc_session *s, void *const *argv)
{
	CUcontext ctx = *(CUcontext const *)argv[0];
	CUdevResource *out = argv[1], real;
	CUdevResourceType type = *(const CUdevResourceType *)argv[2];
	CUresult res = crc_be.cuCtxGetDevResource_fn(ctx, out ? &real : NULL, type);

	return give(s, res, out, &real, CRC_CU_cuCtxGetDevResource, ctx, (int)type);
}

CUresult crc_ovr_cuGreenCtxGetDevResource(struct crc_session *s, void *const *argv)
{
	CUgreenCtx g = *(CUgreenCtx const *)argv[0];
	CUdevResource *out = argv[1], real;
	CUdevResourceType type = *(const CUdevResourceType *)argv[2];
	CUresult res = crc_be.cuGreenCtxGetDevResource_fn(g, out ? &real : NULL, type);

	return give(s, res, out, &real, CRC_CU_cuGreenCtxGetDevResource, g, (int)type);
}

/* The green context's CUcontext goes with it (the client forgets it too). */
CUresult crc_ovr_cuGreenCtxDestroy(struct crc_session *s, void *const *argv)
{
	CUgreenCtx g = *(CUgreenCtx const *)argv[0];
	CUcontext ctx = NULL;
	uint64_t v = 0;
	CUresult res;

	if (crc_be.cuCtxFromGreenCtx_fn(&ctx, g) == CUDA_SUCCESS && ctx)
		v = crc_find_handle(s, CRC_HT_CTX, ctx);
	res = crc_be.cuGreenCtxDestroy_fn(g);
	if (res == CUDA_SUCCESS && v && crc_vhandle_index(v) > (uint32_t)crcd.dev_count)
		crc_forget(s, v);
	return res;
}

CUresult crc_raw_devres_split(struct crc_session *s, const struct crc_call_hdr *h, const uint8_t *args,
			      size_t len)
{
	struct crc_devres_split_req r;
	CUdevResource input, remaining, *result = NULL;
	unsigned nb;
	uint32_t *groups;
	CUresult res;

	if (len < sizeof(r))
		return CUDA_ERROR_INVALID_VALUE;
	memcpy(&r, args, sizeof(r));
	if ((r.flags & CRC_SPLIT_RESULT) && r.nb_groups > CRC_DEVRES_MAX_GROUPS)
		r.nb_groups = CRC_DEVRES_MAX_GROUPS;
	if (r.flags & CRC_SPLIT_INPUT) {
		res = res_real(s, h, (const CUdevResource *)(const void *)r.input, &input);
		if (res != CUDA_SUCCESS)
			return res;
	}
	if (r.flags & CRC_SPLIT_RESULT) {
		result = calloc(r.nb_groups ? r.nb_groups : 1, sizeof(*result));
		if (!result)
			return CUDA_ERROR_OUT_OF_MEMORY;
	}
	nb = r.nb_groups;
	res = crc_be.cuDevSmResourceSplitByCount_fn(
	    result, (r.flags & CRC_SPLIT_NBGROUPS) ? &nb : NULL, (r.flags & CRC_SPLIT_INPUT) ? &input : NULL,
	    (r.flags & CRC_SPLIT_REMAINING) ? &remaining : NULL, r.use_flags, r.min_count);
	if (res != CUDA_SUCCESS)
		goto out;
	if (result && nb > r.nb_groups)
		nb = r.nb_groups;
	/* A replay: the same groups as when the application split, or the restore fails. */
	if (r.flags & CRC_SPLIT_RECORDED) {
		bool same = !result || nb == r.rec_groups;

		for (unsigned i = 0; same && result && i < nb; i++)
			same = result[i].sm.smCount == r.rec_sm[i];
		if (same && (r.flags & CRC_SPLIT_REMAINING))
			same = remaining.sm.smCount == r.rec_remaining;
		if (!same) {
			snprintf(
			    s->call_why, sizeof(s->call_why),
			    "splitting %u SMs by %u (flags %#x) gives %u groups of %u SMs and %u remaining "
			    "on "
			    "this GPU, %u groups of %u SMs and %u remaining at the checkpoint: the green "
			    "contexts' SMs cannot be had again here",
			    input.sm.smCount, r.min_count, r.use_flags, nb,
			    nb && result ? result[0].sm.smCount : 0,
			    (r.flags & CRC_SPLIT_REMAINING) ? remaining.sm.smCount : 0, r.rec_groups,
			    r.rec_groups ? r.rec_sm[0] : 0, r.rec_remaining);
			pr_err("session %llu: %s", (unsigned long long)s->id, s->call_why);
			res = CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION;
			goto out;
		}
	}
	groups = crc_out(s, 8);
	if (!groups) {
		res = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	*groups = nb;
	for (unsigned i = 0; result && i < nb; i++) {
		CUdevResource *o = crc_out(s, sizeof(*o));
		uint64_t v = o ? res_name(s, &result[i], 0, NULL, 0) : 0;

		if (!v) {
			res = CUDA_ERROR_OUT_OF_MEMORY;
			goto out;
		}
		res_client(o, &result[i], v);
	}
	if (r.flags & CRC_SPLIT_REMAINING) {
		CUdevResource *o = crc_out(s, sizeof(*o));
		uint64_t v = o ? res_name(s, &remaining, 0, NULL, 0) : 0;

		if (!v) {
			res = CUDA_ERROR_OUT_OF_MEMORY;
			goto out;
		}
		res_client(o, &remaining, v);
	}
	/* The journal keeps what the split gave, for the replay to compare. */
	if (!(r.flags & CRC_SPLIT_RECORDED) && s->njnew) {
		struct crc_devres_split_req *j = malloc(sizeof(*j));

		if (j) {
			memcpy(j, args, sizeof(*j));
			j->flags |= CRC_SPLIT_RECORDED;
			j->rec_groups = result ? nb : 0;
			for (unsigned i = 0; result && i < nb; i++)
				j->rec_sm[i] = result[i].sm.smCount;
			j->rec_remaining = (r.flags & CRC_SPLIT_REMAINING) ? remaining.sm.smCount : 0;
			crc_journal_args(s, j, sizeof(*j));
		} else {
			s->force_mismatch = true; /* a hole in the journal: the next checkpoint refuses */
		}
	}
out:
	free(result);
	return res;
}

CUresult crc_raw_devres_desc(struct crc_session *s, const struct crc_call_hdr *h, const uint8_t *args,
			     size_t len)
{
	struct crc_devres_desc_req r;
	CUdevResource *res_in = NULL;
	CUdevResourceDesc desc = NULL;
	uint64_t *v;
	CUresult res = CUDA_SUCCESS;

	if (len < sizeof(r))
		return CUDA_ERROR_INVALID_VALUE;
	memcpy(&r, args, sizeof(r));
	if (r.present) {
		if (r.n > CRC_DEVRES_MAX_GROUPS + 1 || len < sizeof(r) + (size_t)r.n * sizeof(CUdevResource))
			return CUDA_ERROR_INVALID_VALUE;
		res_in = calloc(r.n ? r.n : 1, sizeof(*res_in));
		if (!res_in)
			return CUDA_ERROR_OUT_OF_MEMORY;
		for (unsigned i = 0; res == CUDA_SUCCESS && i < r.n; i++)
			res = res_real(s, h, (const CUdevResource *)(const void *)(args + sizeof(r)) + i,
				       &res_in[i]);
	}
	if (res == CUDA_SUCCESS)
		res = crc_be.cuDevResourceGenerateDesc_fn(&desc, res_in, r.n);
	free(res_in);
	if (res != CUDA_SUCCESS)
		return res;
	v = crc_out(s, 8);
	if (!v)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*v = crc_handle_of(s, CRC_HT_DEVRESDESC, desc);
	return *v ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}
