/* The session journal: one record per state-creating call (crcuda/journal.h), kept in memory and
 * written to a store in one transaction by a checkpoint (a transaction per call is too slow for
 * PyTorch); module images once per content. */
#define LOG_PREFIX "journal: "
#include <stdlib.h>
#include <string.h>

#include "crcuda/errno.h"
#include "crcuda/log.h"
#include "worker.h"

/* After cuda.h: define and call entry points by their ABI names. */
#include "crcuda/cuda_api_undef.h"

void crc_journal_begin(struct crc_session *s)
{
	s->jcapture = true;
	s->njnew = s->njrefs = 0;
	s->jaddr = s->jsize = s->jobject = 0;
	s->jimage = -1;
	s->jdrop = false;
	free(s->jargs);
	s->jargs = NULL;
	s->jargs_len = 0;
}

void crc_journal_args(struct crc_session *s, void *args, size_t len)
{
	free(s->jargs);
	s->jargs = args;
	s->jargs_len = len;
}

int crc_journal_image(struct crc_session *s, const void *bytes, size_t len)
{
	struct crc_hash h;

	crc_hash_compute(bytes, len, &h);
	for (size_t i = 0; i < s->nimages; i++)
		if (s->images[i].len == len && !memcmp(&s->images[i].hash, &h, sizeof(h)))
			return (int)i;
	if (s->nimages == s->images_cap) {
		size_t cap = s->images_cap ? s->images_cap * 2 : 16;
		struct crc_image *p = realloc(s->images, cap * sizeof(*p));

		if (!p)
			return -1;
		s->images = p;
		s->images_cap = cap;
	}
	s->images[s->nimages].bytes = malloc(len);
	if (!s->images[s->nimages].bytes)
		return -1;
	memcpy(s->images[s->nimages].bytes, bytes, len);
	s->images[s->nimages].len = len;
	s->images[s->nimages].hash = h;
	s->images[s->nimages].globals = NULL;
	s->images[s->nimages].nglobals = 0;
	s->images[s->nimages].globals_state = 0;
	return (int)s->nimages++;
}

void crc_journal_free(struct crc_session *s)
{
	for (size_t i = 0; i < s->njrec; i++)
		free(s->jrec[i].payload);
	for (size_t i = 0; i < s->nimages; i++) {
		free(s->images[i].bytes);
		for (size_t g = 0; g < s->images[i].nglobals; g++)
			free(s->images[i].globals[g]);
		free(s->images[i].globals);
	}
	free(s->jrec);
	free(s->jargs);
	free(s->images);
	free(s->modimgs);
}

static bool has_handle(const struct crc_jrec_view *v, uint64_t h)
{
	for (unsigned i = 0; i < v->call->nhandles; i++)
		if (v->handles[i] == h)
			return true;
	return false;
}

int crc_journal_mark_dead(struct crc_jrec_item *r, size_t n)
{
	uint64_t *dead = NULL;
	size_t ndead = 0;

	for (size_t i = 0; i < n; i++) {
		const struct crc_jrec_call *c = r[i].v.call;
		bool destroys = r[i].type == CRC_JREC_MODULE_UNLOAD || r[i].type == CRC_JREC_STREAM_DESTROY ||
				r[i].type == CRC_JREC_EVENT_DESTROY ||
				r[i].type == CRC_JREC_CONTEXT_DESTROY || r[i].type == CRC_JREC_OBJECT_DESTROY;

		for (size_t j = i; destroys && c->object && j-- > 0;) {
			if (!r[j].skip && has_handle(&r[j].v, c->object)) {
				r[j].skip = r[i].skip = true;
				break;
			}
		}
		for (size_t j = i; r[i].type == CRC_JREC_MEM_FREE && j-- > 0;) {
			if (!r[j].skip && r[j].type == CRC_JREC_MEM_ALLOC && r[j].v.call->addr == c->addr) {
				r[j].skip = r[i].skip = true;
				/* Settings of the freed memory go with it (a replay would find none there).
				 */
				for (size_t k = j + 1; k < i; k++)
					if (r[k].v.call->op == CRC_CU_cuPointerSetAttribute &&
					    r[k].v.call->addr - c->addr <
						(r[j].v.call->size ? r[j].v.call->size : 1))
						r[k].skip = true;
				break;
			}
		}
	}
	/* What used a dead handle is dead too, and so are the handles it made. */
	for (size_t i = 0; i < n; i++) {
		const struct crc_jrec_view *v = &r[i].v;

		for (unsigned k = 0; !r[i].skip && k < v->call->nrefs; k++)
			for (size_t d = 0; d < ndead; d++)
				if (dead[d] == v->refs[k])
					r[i].skip = true;
		if (!r[i].skip || !v->call->nhandles)
			continue;
		uint64_t *p = realloc(dead, (ndead + v->call->nhandles) * sizeof(*p));

		if (!p) {
			free(dead);
			return CRC_ENOMEM;
		}
		dead = p;
		for (unsigned k = 0; k < v->call->nhandles; k++)
			dead[ndead++] = v->handles[k];
	}
	free(dead);
	return 0;
}

#define COMPACT_MIN 4096 /* records not yet in a store before the first compaction */

/* Drops create/destroy pairs (and what used them) from the records no store holds yet, so a session
 * that creates and destroys events or memory all day keeps a journal of what is alive. Records a
 * store holds stay: a later checkpoint to that store appends to them, and a destroy whose create is
 * there must reach it too. */
static void compact(struct crc_session *s)
{
	size_t n = s->njrec - s->jflushed, kept = s->jflushed;
	struct crc_jrec_item *items = calloc(n, sizeof(*items));
	bool ok = items != NULL;

	for (size_t i = 0; ok && i < n; i++) {
		items[i].type = s->jrec[s->jflushed + i].type;
		ok = !crc_jrec_decode(s->jrec[s->jflushed + i].payload, s->jrec[s->jflushed + i].len,
				      &items[i].v);
	}
	if (ok && !crc_journal_mark_dead(items, n)) {
		for (size_t i = 0; i < n; i++) {
			struct crc_jentry *e = &s->jrec[s->jflushed + i];

			if (items[i].skip)
				free(e->payload);
			else
				s->jrec[kept++] = *e;
		}
		pr_debug("session %llu: journal compacted: %zu of %zu new records kept",
			 (unsigned long long)s->id, kept - s->jflushed, n);
		s->njrec = kept;
	}
	free(items);
	/* Amortised: the next pass when the live records have doubled. */
	s->jcompact_at = 2 * (s->njrec - s->jflushed);
	if (s->jcompact_at < COMPACT_MIN)
		s->jcompact_at = COMPACT_MIN;
}

/* The record type of a call that succeeded, 0 if the journal does not keep it. */
static uint32_t record_type(struct crc_session *s, int op)
{
	switch (op) {
	case CRC_CU_cuModuleLoadData:
	case CRC_CU_cuLibraryLoadData:
		/* Records before an image's last carry no load. */
		return s->njnew ? CRC_JREC_MODULE_LOAD : 0;
	case CRC_CU_cuModuleUnload:
	case CRC_CU_cuLibraryUnload:
		return CRC_JREC_MODULE_UNLOAD;
	case CRC_CU_cuModuleGetFunction:
	case CRC_CU_cuLibraryGetKernel:
	case CRC_CU_cuKernelGetFunction:
		/* A function looked up again keeps its handle: nothing new. */
		return s->njnew ? CRC_JREC_FUNCTION_GET : 0;
	case CRC_CU_cuModuleGetGlobal:
	case CRC_CU_cuModuleGetGlobal_v2:
	case CRC_CU_cuLibraryGetGlobal:
		return CRC_JREC_GLOBAL_GET;
	case CRC_CU_cuMemAlloc_v2:
	case CRC_CU_cuMemAllocPitch_v2:
		return CRC_JREC_MEM_ALLOC;
	case CRC_CU_cuMemFree_v2:
		return CRC_JREC_MEM_FREE;
	case CRC_CU_cuMemAddressReserve:
		return CRC_JREC_MEM_RESERVE;
	case CRC_CU_cuMemAddressFree:
		return CRC_JREC_MEM_UNRESERVE;
	case CRC_CU_cuMemCreate:
	case CRC_CU_cuMemRetainAllocationHandle:
		return CRC_JREC_VMM_CREATE;
	case CRC_CU_cuMemRelease:
		return CRC_JREC_VMM_RELEASE;
	case CRC_CU_cuMemMap:
		return CRC_JREC_VMM_MAP;
	case CRC_CU_cuMemUnmap:
		return CRC_JREC_VMM_UNMAP;
	case CRC_CU_cuMemSetAccess:
		return CRC_JREC_VMM_ACCESS;
	case CRC_CU_cuMemMapArrayAsync:
		return CRC_JREC_ARRAY_MAP;
	case CRC_CU_cuStreamCreate:
	case CRC_CU_cuStreamCreateWithPriority:
		return CRC_JREC_STREAM_CREATE;
	case CRC_CU_cuStreamDestroy:
	case CRC_CU_cuStreamDestroy_v2:
		return CRC_JREC_STREAM_DESTROY;
	case CRC_CU_cuEventCreate:
		return CRC_JREC_EVENT_CREATE;
	case CRC_CU_cuEventDestroy:
	case CRC_CU_cuEventDestroy_v2:
		return CRC_JREC_EVENT_DESTROY;
	case CRC_CU_cuArrayDestroy:
	case CRC_CU_cuMipmappedArrayDestroy:
		return CRC_JREC_OBJECT_DESTROY;
	case CRC_CU_cuCtxCreate:
	case CRC_CU_cuCtxCreate_v2:
	case CRC_CU_cuCtxCreate_v3:
	case CRC_CU_cuCtxCreate_v4:
		return CRC_JREC_CONTEXT_CREATE;
	case CRC_CU_cuCtxDestroy:
	case CRC_CU_cuCtxDestroy_v2:
		return CRC_JREC_CONTEXT_DESTROY;
	case CRC_CU_cuCtxSetLimit:
	case CRC_CU_cuCtxSetCacheConfig:
	case CRC_CU_cuCtxSetSharedMemConfig:
	case CRC_CU_cuCtxSetFlags:
	case CRC_CU_cuDevicePrimaryCtxSetFlags:
	case CRC_CU_cuDevicePrimaryCtxSetFlags_v2:
	case CRC_CU_cuStreamSetAttribute:
	case CRC_CU_cuCtxEnablePeerAccess:
	case CRC_CU_cuCtxDisablePeerAccess:
	case CRC_CU_cuPointerSetAttribute:
	case CRC_CU_cuCoredumpSetAttribute:
	case CRC_CU_cuCoredumpSetAttributeGlobal:
	/* Replayed in its place, not paired with the green context's creation: memory allocated while
	 * its CUcontext was current outlives it (the device's primary context holds it), and a destroy
	 * record would take those records along. */
	case CRC_CU_cuGreenCtxDestroy:
		return CRC_JREC_CONTEXT_SET;
	case CRC_CU_cuFuncSetAttribute:
	case CRC_CU_cuFuncSetCacheConfig:
	case CRC_CU_cuFuncSetSharedMemConfig:
	case CRC_CU_cuKernelSetAttribute:
	case CRC_CU_cuKernelSetCacheConfig:
		return CRC_JREC_FUNCTION_SET;
	default:
		/* Whatever else named an object must be replayed to name it again; graphs, their nodes and
		 * executable graphs are described by each checkpoint instead (graph.c), so a program that
		 * instantiates graphs in a loop keeps no journal of them. */
		for (unsigned i = 0; i < s->njnew; i++) {
			unsigned tag = crc_vhandle_tag(s->jnew[i]);

			if (tag != CRC_HT_GRAPH && tag != CRC_HT_GRAPHNODE && tag != CRC_HT_GRAPHEXEC)
				return CRC_JREC_OBJECT_CREATE;
		}
		return 0;
	}
}

static bool global_setting(int op)
{
	return op == CRC_CU_cuCoredumpSetAttributeGlobal;
}

static bool is_library_op(int op)
{
	return op == CRC_CU_cuLibraryLoadData || op == CRC_CU_cuLibraryUnload ||
	       op == CRC_CU_cuLibraryGetGlobal;
}

/* A global looked up before (same owner and name) is not journaled again. */
static bool global_known(struct crc_session *s, uint64_t owner, const char *name)
{
	for (size_t i = s->njrec; i-- > 0;) {
		struct crc_jrec_view v;

		if (s->jrec[i].type != CRC_JREC_GLOBAL_GET ||
		    crc_jrec_decode(s->jrec[i].payload, s->jrec[i].len, &v))
			continue;
		if (v.call->nrefs && v.refs[v.call->nrefs - 1] == owner && v.name && !strcmp(v.name, name))
			return true;
	}
	return false;
}

void crc_journal_end(struct crc_session *s, int op, const struct crc_call_hdr *h, const uint8_t *args,
		     size_t len)
{
	uint32_t type = record_type(s, op);
	struct crc_jrec_call *c;
	const char *name = NULL;
	size_t name_len = 0, size, off, args_len = len;
	uint64_t refs[17];
	unsigned nrefs = 0;
	uint8_t *p;
	struct crc_call_hdr noctx = {.thread = h->thread, .flags = h->flags};

	s->jcapture = false;
	if (!type || s->jdrop)
		return;
	if (s->jargs) {
		args = s->jargs;
		len = s->jargs_len;
		args_len = len;
	}
	/* Process-wide settings: no context of the caller's (whose destroy must not drop them). */
	if (global_setting(op))
		h = &noctx;
	/* The caller's context first, then every handle the call translated. */
	if (h->ctx)
		refs[nrefs++] = h->ctx;
	for (unsigned i = 0; i < s->njrefs; i++)
		if (s->jrefs[i] != h->ctx)
			refs[nrefs++] = s->jrefs[i];
	if (type == CRC_JREC_FUNCTION_GET && len >= sizeof(struct crc_getfn_req)) {
		const struct crc_getfn_req *r = (const void *)args;

		if (r->name_len && len - sizeof(*r) >= r->name_len)
			name = (const char *)(r + 1);
	} else if (type == CRC_JREC_GLOBAL_GET) {
		name = crc_request_str_arg(op, args, len);
		if (name && nrefs && global_known(s, refs[nrefs - 1], name))
			return;
	}
	if (name)
		name_len = strlen(name) + 1;
	/* A module load keeps its image as a blob; the record only needs the request header. */
	if (type == CRC_JREC_MODULE_LOAD)
		args_len = sizeof(struct crc_load_req);
	size = crc_jrec_size(s->njnew, nrefs, name_len, args_len);
	p = calloc(1, size);
	if (!p)
		goto oom;
	c = (struct crc_jrec_call *)p;
	*c = (struct crc_jrec_call){
	    .version = CRC_JREC_VERSION,
	    .op = (uint16_t)op,
	    .nhandles = (uint16_t)s->njnew,
	    .nrefs = (uint16_t)nrefs,
	    .name_len = (uint16_t)name_len,
	    .args_len = (uint32_t)args_len,
	    .ctx = h->ctx,
	    .thread = h->thread,
	    .call_flags = h->flags,
	    .addr = s->jaddr,
	    .size = s->jsize,
	    .flags = is_library_op(op) ? CRC_JREC_LIBRARY : 0,
	};
	/* Destroys name their object in the first argument (handles are 8-byte items); frees their
	 * address the same way. */
	if ((type == CRC_JREC_MODULE_UNLOAD || type == CRC_JREC_STREAM_DESTROY ||
	     type == CRC_JREC_EVENT_DESTROY || type == CRC_JREC_CONTEXT_DESTROY ||
	     type == CRC_JREC_OBJECT_DESTROY || type == CRC_JREC_VMM_RELEASE) &&
	    len >= 8)
		memcpy(&c->object, args, 8);
	/* cuMemFree passes the address alone; unreserve, map and unmap pass address and size. */
	if (type == CRC_JREC_MEM_FREE && len >= 8)
		memcpy(&c->addr, args, 8);
	if ((type == CRC_JREC_MEM_UNRESERVE || type == CRC_JREC_VMM_MAP || type == CRC_JREC_VMM_UNMAP) &&
	    len >= 16) {
		memcpy(&c->addr, args, 8);
		memcpy(&c->size, args + 8, 8);
	}
	if (type == CRC_JREC_VMM_RELEASE) {
		/* The virtual handle: the first handle the call translated. */
		c->object = s->njrefs ? s->jrefs[0] : 0;
	}
	if (type == CRC_JREC_MODULE_LOAD && s->jimage >= 0) {
		const struct crc_image *im = &s->images[s->jimage];
		struct crc_modimg *m;

		memcpy(c->image_hash, im->hash.bytes, 16);
		c->image_bytes = im->len;
		if (s->nmodimgs == s->modimgs_cap) {
			size_t cap = s->modimgs_cap ? s->modimgs_cap * 2 : 16;

			m = realloc(s->modimgs, cap * sizeof(*m));
			if (!m) {
				free(p);
				goto oom;
			}
			s->modimgs = m;
			s->modimgs_cap = cap;
		}
		s->modimgs[s->nmodimgs++] =
		    (struct crc_modimg){.vhandle = s->jnew[0], .image = (uint32_t)s->jimage};
	}
	off = sizeof(*c);
	memcpy(p + off, s->jnew, 8 * (size_t)s->njnew);
	off += 8 * (size_t)s->njnew;
	memcpy(p + off, refs, 8 * (size_t)nrefs);
	off += 8 * (size_t)nrefs;
	if (name_len)
		memcpy(p + off, name, name_len);
	off += crc_align8(name_len);
	memcpy(p + off, args, args_len < len ? args_len : len);
	if (s->njrec == s->jrec_cap) {
		size_t cap = s->jrec_cap ? s->jrec_cap * 2 : 256;
		struct crc_jentry *e = realloc(s->jrec, cap * sizeof(*e));

		if (!e) {
			free(p);
			goto oom;
		}
		s->jrec = e;
		s->jrec_cap = cap;
	}
	s->jrec[s->njrec++] = (struct crc_jentry){.type = type, .len = (uint32_t)size, .payload = p};
	if (s->njrec - s->jflushed >= (s->jcompact_at ? s->jcompact_at : COMPACT_MIN))
		compact(s);
	return;
oom:
	/* A journal with a hole cannot be replayed: the next checkpoint must refuse. */
	pr_err("session %llu: out of memory journaling %s: checkpoints of this session will fail",
	       (unsigned long long)s->id, crc_cu_table[op].sym);
	s->force_mismatch = true;
}
