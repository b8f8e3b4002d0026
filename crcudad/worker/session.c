/* Sessions: one thread per client executing its requests in order on the backend; the dispatch
 * table (generated unmarshalling for every row crcuda/cuda_marshal.def carries, hand-written
 * handlers for the rest); the virtual handle tables; cleanup when the client goes away. */
#define LOG_PREFIX "session: "
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "crcuda/errno.h"
#include "crcuda/log.h"
#include "crcuda/tls.h"
#include "worker.h"

/* After cuda.h: define and call entry points by their ABI names. */
#include "crcuda/cuda_api_undef.h"

/* ---- dispatch table ------------------------------------------------------------------------------ */
typedef CUresult crc_exec_fn(void *const *argv);
typedef CUresult crc_override_fn(struct crc_session *s, void *const *argv);

struct op {
	const struct crc_arg_spec *spec;
	unsigned nargs;
	crc_exec_fn *exec;
	crc_override_fn *override;
	crc_raw_fn *raw;
	bool reports_deferred; /* a synchronising call: returns the first error of posted work */
	unsigned forget_arg1;  /* 1 + index of a handle argument the call destroys */
	bool ctx_changes;      /* leaves another context current in this thread */
	bool ctx_may_go;       /* may destroy a context (a drain's snapshot and the staging live in one) */
	bool changes_exec;     /* changes the executable graph of its first argument (graph.c) */
	uint16_t dev_in;       /* bit i: argument i is a device ordinal (the client's, mapped) */
	uint16_t dev_out;      /* bit i: argument i returns a device ordinal (mapped back) */
};

/* Device ordinal argument types: the client's ordinals, which a restore (--gpu) may have moved. */
#define CRC_IS_DEVICE_TYPE(t) (!strcmp(t, "CUdevice") || !strcmp(t, "CUdevice_v1"))
static struct op ops[CRC_CU_COUNT];

/* The generated argument specs (the client's table) and backend calls. */
#include "crcuda/cuda_marshal_specs.h"

#define CRC_SEP_0
#define CRC_SEP_1		  ,
#define CRC_SEP_2		  ,
#define CRC_SEP_3		  ,
#define CRC_SEP_4		  ,
#define CRC_SEP_5		  ,
#define CRC_SEP_6		  ,
#define CRC_SEP_7		  ,
#define CRC_SEP_8		  ,
#define CRC_SEP_9		  ,
#define CRC_SEP_10		  ,
#define CRC_SEP_11		  ,
#define CRC_SEP_12		  ,
#define CRC_SEP_13		  ,
#define CRC_SEP_14		  ,
#define CRC_SEP_15		  ,
#define CRC_DARG_VAL(type, p)	  (*(type *)(p))
#define CRC_DARG_HANDLE(type, p)  (*(type *)(p))
#define CRC_DARG_IN(type, p)	  ((const type *)(p))
#define CRC_DARG_OUT(type, p)	  ((type *)(p))
#define CRC_DARG_HOUT(type, p)	  ((type *)(p))
#define CRC_DARG_STR(type, p)	  ((const char *)(p))
#define CRC_DARG_ARR_IN(type, p)  ((type *)(p))
#define CRC_DARG_ARR_OUT(type, p) ((type *)(p))
#define CRC_FWD_BEGIN(sym, nargs, mode)                                                                      \
	static CUresult exec_##sym(void *const *argv)                                                        \
	{                                                                                                    \
		(void)argv;                                                                                  \
		if (!crc_be.sym##_fn)                                                                        \
			return CUDA_ERROR_NOT_SUPPORTED;                                                     \
		return crc_be.sym##_fn(
#define CRC_FWD_ARG(sym, i, kind, type, name)		   CRC_SEP_##i CRC_DARG_##kind(type, argv[i])
#define CRC_FWD_ARR(sym, i, kind, type, name, count, elem) CRC_SEP_##i CRC_DARG_##kind(type, argv[i])
#define CRC_FWD_END(sym)                                                                                     \
	);                                                                                                   \
	}
#include "crcuda/cuda_marshal.def"
#undef CRC_FWD_BEGIN
#undef CRC_FWD_ARG
#undef CRC_FWD_ARR
#undef CRC_FWD_END

/* Calls that destroy the object named by one of their handle arguments. */
#define CRC_DESTROYS(X)                                                                                      \
	X(cuStreamDestroy_v2, 0)                                                                             \
	X(cuStreamDestroy, 0)                                                                                \
	X(cuEventDestroy_v2, 0)                                                                              \
	X(cuEventDestroy, 0)                                                                                 \
	X(cuModuleUnload, 0)                                                                                 \
	X(cuLibraryUnload, 0)                                                                                \
	X(cuCtxDestroy_v2, 0)                                                                                \
	X(cuCtxDestroy, 0)                                                                                   \
	X(cuGreenCtxDestroy, 0)                                                                              \
	X(cuMemPoolDestroy, 0)                                                                               \
	X(cuArrayDestroy, 0)                                                                                 \
	X(cuMipmappedArrayDestroy, 0)                                                                        \
	X(cuGraphDestroy, 0)                                                                                 \
	X(cuGraphExecDestroy, 0)                                                                             \
	X(cuGraphDestroyNode, 0)

/* Synchronising calls: they report the kept error of posted work. */
#define CRC_SYNCHRONISING(X)                                                                                 \
	X(cuCtxSynchronize)                                                                                  \
	X(cuCtxSynchronize_v2)                                                                               \
	X(cuStreamSynchronize)                                                                               \
	X(cuStreamQuery)                                                                                     \
	X(cuEventSynchronize)                                                                                \
	X(cuEventQuery)                                                                                      \
	X(cuMemcpyHtoD_v2)                                                                                   \
	X(cuMemcpyDtoH_v2)                                                                                   \
	X(cuMemcpyDtoD_v2)

static void dispatch_init(void)
{
#define CRC_FWD_BEGIN(sym, n, mode)                                                                          \
	ops[CRC_CU_##sym].spec = spec_##sym;                                                                 \
	ops[CRC_CU_##sym].nargs = (n);                                                                       \
	ops[CRC_CU_##sym].exec = exec_##sym;
#define CRC_FWD_ARG(sym, i, kind, type, name)                                                                \
	if (CRC_IS_DEVICE_TYPE(#type) && CRC_ARG_##kind == CRC_ARG_VAL)                                      \
		ops[CRC_CU_##sym].dev_in |= 1u << (i);                                                       \
	if (CRC_IS_DEVICE_TYPE(#type) && CRC_ARG_##kind == CRC_ARG_OUT)                                      \
		ops[CRC_CU_##sym].dev_out |= 1u << (i);
#define CRC_FWD_ARR(sym, i, kind, type, name, count, elem)
#define CRC_FWD_END(sym)
#include "crcuda/cuda_marshal.def"
#undef CRC_FWD_BEGIN
#undef CRC_FWD_ARG
#undef CRC_FWD_ARR
#undef CRC_FWD_END
#define CRC_SET_OVERRIDE(sym) ops[CRC_CU_##sym].override = crc_ovr_##sym;
	CRC_OVERRIDES(CRC_SET_OVERRIDE)
#undef CRC_SET_OVERRIDE
#define CRC_SET_RAW(sym, fn) ops[CRC_CU_##sym].raw = crc_raw_##fn;
	CRC_RAW_HANDLERS(CRC_SET_RAW)
#undef CRC_SET_RAW
#define CRC_SET_DESTROY(sym, arg) ops[CRC_CU_##sym].forget_arg1 = (arg) + 1;
	CRC_DESTROYS(CRC_SET_DESTROY)
#undef CRC_SET_DESTROY
#define CRC_SET_SYNC(sym) ops[CRC_CU_##sym].reports_deferred = true;
	CRC_SYNCHRONISING(CRC_SET_SYNC)
#undef CRC_SET_SYNC
	ops[CRC_CU_cuGraphExecMemsetNodeSetParams].changes_exec = true;
	ops[CRC_CU_cuGraphExecEventRecordNodeSetEvent].changes_exec = true;
	ops[CRC_CU_cuGraphExecEventWaitNodeSetEvent].changes_exec = true;
	ops[CRC_CU_cuGraphExecChildGraphNodeSetParams].changes_exec = true;
	ops[CRC_CU_cuGraphNodeSetEnabled].changes_exec = true;
	ops[CRC_CU_cuGraphExecUpdate].changes_exec = true;
	ops[CRC_CU_cuCtxCreate_v2].ctx_changes = true;
	ops[CRC_CU_cuCtxCreate].ctx_changes = true;
	ops[CRC_CU_cuCtxDestroy_v2].ctx_changes = true;
	ops[CRC_CU_cuCtxDestroy].ctx_changes = true;
	ops[CRC_CU_cuDevicePrimaryCtxRetain].ctx_changes = true;
	ops[CRC_CU_cuGreenCtxDestroy].ctx_changes = true;
	ops[CRC_CU_cuCtxDestroy].ctx_may_go = ops[CRC_CU_cuCtxDestroy_v2].ctx_may_go = true;
	ops[CRC_CU_cuDevicePrimaryCtxRelease].ctx_may_go =
	    ops[CRC_CU_cuDevicePrimaryCtxRelease_v2].ctx_may_go = true;
	ops[CRC_CU_cuDevicePrimaryCtxReset].ctx_may_go = ops[CRC_CU_cuDevicePrimaryCtxReset_v2].ctx_may_go =
	    true;
	ops[CRC_CU_cuGreenCtxDestroy].ctx_may_go = true;
}

/* ---- handle tables -------------------------------------------------------------------------------- */
uint64_t crc_register(struct crc_session *s, unsigned tag, union crc_slot real)
{
	struct crc_htable *t = &s->tables[tag];
	uint32_t idx = t->n + 1;
	uint64_t v;

	/* Replay: the handle the journal says this call created, whatever came before. */
	if (s->nforce) {
		if (crc_vhandle_tag(s->force[0]) == tag) {
			idx = crc_vhandle_index(s->force[0]);
			s->force++;
			s->nforce--;
		} else {
			s->force_mismatch = true;
		}
	}
	if (idx + 1 >= t->cap) {
		uint32_t cap = t->cap ? t->cap : 64;
		union crc_slot *p;

		while (idx + 1 >= cap)
			cap *= 2;
		p = realloc(t->real, cap * sizeof(*p));
		if (!p)
			return 0;
		memset(p + t->cap, 0, (cap - t->cap) * sizeof(*p));
		t->real = p;
		t->cap = cap;
	}
	t->real[idx] = real;
	if (idx > t->n)
		t->n = idx;
	if (tag == CRC_HT_CTX && real.ptr) {
		CUdevice dev;

		/* A context made here is current on this thread (cuCtxCreate): which GPU, for ls. */
		if (crc_be.cuCtxGetDevice_fn(&dev) == CUDA_SUCCESS && dev >= 0 && dev < 32) {
			s->devices |= 1u << dev;
			crc_worker_publish();
		}
	}
	v = crc_vhandle(tag, idx);
	if (s->jcapture && s->njnew < sizeof(s->jnew) / sizeof(s->jnew[0]))
		s->jnew[s->njnew++] = v;
	return v;
}

uint64_t crc_handle_of(struct crc_session *s, unsigned tag, void *real)
{
	uint64_t v;

	if (!real)
		return 0;
	v = crc_find_handle(s, tag, real);
	return v ? v : crc_register(s, tag, (union crc_slot){.ptr = real});
}

void crc_register_at(struct crc_session *s, uint64_t v, union crc_slot real)
{
	if (!v)
		return;
	s->force = &v;
	s->nforce = 1;
	crc_register(s, crc_vhandle_tag(v), real);
	s->force = NULL;
	s->nforce = 0;
}

void crc_forget(struct crc_session *s, uint64_t v)
{
	unsigned tag = crc_vhandle_tag(v);
	uint32_t idx = crc_vhandle_index(v);

	if (tag != CRC_HT_NONE && idx <= s->tables[tag].n)
		s->tables[tag].real[idx].u64 = 0;
}

uint64_t crc_find_handle(struct crc_session *s, unsigned tag, void *real)
{
	struct crc_htable *t = &s->tables[tag];

	for (uint32_t i = 1; i <= t->n; i++)
		if (t->real[i].ptr == real)
			return crc_vhandle(tag, i);
	return 0;
}

int crc_dev_backend(const struct crc_session *s, int dev)
{
	return dev >= 0 && dev < CRC_MAX_DEVICES ? s->dev_map[dev] : dev;
}

int crc_dev_client(const struct crc_session *s, int dev)
{
	for (int i = 0; i < CRC_MAX_DEVICES; i++)
		if (s->dev_map[i] == dev)
			return i;
	return dev;
}

/* The thread's per-thread default stream (CU_STREAM_PER_THREAD, or 0 in a _ptsz call): a blocking
 * stream of its own, as the driver gives each thread. */
static CUresult per_thread_stream(struct crc_session *s, const struct crc_call_hdr *h, CUstream *out)
{
	struct crc_ptstream *p;
	CUresult res;

	for (unsigned i = 0; i < s->n_ptstreams; i++) {
		if (s->ptstreams[i].tid == h->thread && s->ptstreams[i].ctx == h->ctx) {
			*out = s->ptstreams[i].stream;
			return CUDA_SUCCESS;
		}
	}
	p = realloc(s->ptstreams, (s->n_ptstreams + 1) * sizeof(*p));
	if (!p)
		return CUDA_ERROR_OUT_OF_MEMORY;
	s->ptstreams = p;
	p = &p[s->n_ptstreams];
	res = crc_be.cuStreamCreate_fn(&p->stream, CU_STREAM_DEFAULT);
	if (res != CUDA_SUCCESS)
		return res;
	p->tid = h->thread;
	p->ctx = h->ctx;
	s->n_ptstreams++;
	*out = p->stream;
	return CUDA_SUCCESS;
}

/* Primary contexts are handles 1..dev_count of the CTX table, retained on first use. */
static CUresult primary_ctx(struct crc_session *s, uint32_t idx)
{
	union crc_slot *slot = &s->tables[CRC_HT_CTX].real[idx];
	CUcontext ctx;
	CUresult res;

	if (slot->ptr)
		return CUDA_SUCCESS;
	/* A restore onto another GPU (--gpu) maps the client's ordinal to the backend's. */
	res = crc_be.cuDevicePrimaryCtxRetain_fn(&ctx, (CUdevice)s->dev_map[idx - 1]);
	if (res == CUDA_SUCCESS) {
		slot->ptr = ctx;
		s->devices |= 1u << (s->dev_map[idx - 1] & 31);
		crc_worker_publish();
	}
	return res;
}

CUresult crc_session_primary_ctx(struct crc_session *s, CUcontext *ctx)
{
	CUresult res = primary_ctx(s, 1);

	if (res == CUDA_SUCCESS)
		*ctx = s->tables[CRC_HT_CTX].real[1].ptr;
	return res;
}

CUresult crc_translate(struct crc_session *s, const struct crc_call_hdr *h, unsigned tag, uint64_t v,
		       union crc_slot *out)
{
	struct crc_htable *t = &s->tables[tag];
	unsigned vtag = crc_vhandle_tag(v);
	uint32_t idx = crc_vhandle_index(v);

	out->u64 = 0;
	if (tag == CRC_HT_STREAM) {
		if (v == 0 && !(h->flags & CRC_CALL_PTDS))
			return CUDA_SUCCESS;
		if (v == 0 || v == (uintptr_t)CU_STREAM_PER_THREAD)
			return per_thread_stream(s, h, (CUstream *)&out->ptr);
		if (v == (uintptr_t)CU_STREAM_LEGACY) {
			out->ptr = CU_STREAM_LEGACY;
			return CUDA_SUCCESS;
		}
	}
	if (v == 0)
		return CUDA_SUCCESS;
	/* cudart hands a CUkernel wherever a CUfunction goes; the driver accepts it there. */
	if (tag == CRC_HT_FUNC && vtag == CRC_HT_KERNEL)
		t = &s->tables[CRC_HT_KERNEL];
	else if (vtag != tag)
		return tag == CRC_HT_CTX ? CUDA_ERROR_INVALID_CONTEXT : CUDA_ERROR_INVALID_HANDLE;
	if (!idx || idx > t->n)
		return tag == CRC_HT_CTX ? CUDA_ERROR_INVALID_CONTEXT : CUDA_ERROR_INVALID_HANDLE;
	if (tag == CRC_HT_CTX && idx <= (uint32_t)crcd.dev_count) {
		CUresult res = primary_ctx(s, idx);

		if (res != CUDA_SUCCESS)
			return res;
	}
	if (!t->real[idx].u64)
		return tag == CRC_HT_CTX ? CUDA_ERROR_INVALID_CONTEXT : CUDA_ERROR_INVALID_HANDLE;
	*out = t->real[idx];
	if (s->jcapture && s->njrefs < sizeof(s->jrefs) / sizeof(s->jrefs[0]))
		s->jrefs[s->njrefs++] = v;
	return CUDA_SUCCESS;
}

/* ---- replies ---------------------------------------------------------------------------------------- */
void *crc_out(struct crc_session *s, size_t n)
{
	size_t need = s->out_len + crc_align8(n);
	void *p;

	if (need > s->out_cap) {
		size_t cap = s->out_cap ? s->out_cap : 4096;
		uint8_t *b;

		while (cap < need)
			cap *= 2;
		b = realloc(s->out, cap);
		if (!b)
			return NULL;
		s->out = b;
		s->out_cap = cap;
	}
	p = s->out + s->out_len;
	memset(p, 0, crc_align8(n));
	s->out_len = need;
	return p;
}

static int send_reply(struct crc_session *s, const struct crc_msg_hdr *req, CUresult res)
{
	struct crc_reply_hdr *r;
	int rc = crc_chan_reserve(&s->chan, req->op, 0, req->seq, sizeof(*r) + s->out_len, (void **)&r);

	if (rc)
		return rc;
	r->result = res;
	r->pad = 0;
	if (s->out_len) /* a restored session has no reply buffer before its first output */
		memcpy(r + 1, s->out, s->out_len);
	return crc_chan_commit(&s->chan);
}

/* ---- the generic path --------------------------------------------------------------------------------- */
#define ARRAY_MAX (1u << 20) /* elements of one array argument (graph nodes, edges) */

/* An array argument's elements, real objects for handles (decoded from the request: ARR_IN), or room
 * for cap of them (ARR_OUT). */
static CUresult array_in(struct crc_session *s, const struct crc_call_hdr *h, const struct crc_arg_spec *sp,
			 const uint8_t *src, uint64_t n, void **out)
{
	size_t esize = sp->tag ? sizeof(void *) : sp->size;
	uint8_t *p = calloc(n ? n : 1, esize);

	if (!p)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*out = p;
	for (uint64_t k = 0; k < n; k++, src += crc_align8(sp->size)) {
		union crc_slot real;
		uint64_t v;
		CUresult res;

		if (!sp->tag) {
			memcpy(p + k * esize, src, esize);
			continue;
		}
		memcpy(&v, src, 8);
		res = crc_translate(s, h, sp->tag, v, &real);
		if (res != CUDA_SUCCESS)
			return res;
		memcpy(p + k * esize, &real.ptr, esize);
	}
	return CUDA_SUCCESS;
}

/* The count an array argument's count argument holds (a by-value size_t, or an OUT size_t). */
static uint64_t array_count(const struct op *o, void *const *argv, unsigned i)
{
	unsigned c = o->spec[i].count;
	size_t n = 0;

	if (c < o->nargs && argv[c] && o->spec[c].size == sizeof(size_t))
		memcpy(&n, argv[c], sizeof(n));
	return n;
}

static CUresult exec_generic(struct crc_session *s, int id, const struct crc_call_hdr *h, uint8_t *a,
			     size_t len)
{
	const struct op *o = &ops[id];
	union crc_slot slots[16];
	void *argv[16], *arrays[16] = {NULL};
	const uint8_t *arr_at[16] = {NULL};
	uint64_t nelem[16] = {0};
	int devs[16];
	size_t off = 0;
	CUresult res = CUDA_SUCCESS;

	if (o->nargs > 16)
		return CUDA_ERROR_INVALID_VALUE;
#define NEED(n)                                                                                              \
	do {                                                                                                 \
		if ((n) > len - off) {                                                                       \
			res = CUDA_ERROR_INVALID_VALUE;                                                      \
			goto out;                                                                            \
		}                                                                                            \
	} while (0)
	for (unsigned i = 0; i < o->nargs; i++) {
		const struct crc_arg_spec *sp = &o->spec[i];
		uint64_t word;

		if (sp->kind == CRC_ARG_VAL) {
			NEED(crc_align8(sp->size));
			argv[i] = a + off;
			/* Overrides see the client's ordinal (cuDevicePrimaryCtxRetain names a handle). */
			if ((o->dev_in >> i & 1) && !o->override) {
				memcpy(&devs[i], a + off, sizeof(devs[i]));
				devs[i] = crc_dev_backend(s, devs[i]);
				argv[i] = &devs[i];
			}
			off += crc_align8(sp->size);
			continue;
		}
		NEED(8);
		memcpy(&word, a + off, 8);
		off += 8;
		switch (sp->kind) {
		case CRC_ARG_HANDLE:
			res = crc_translate(s, h, sp->tag, word, &slots[i]);
			if (res != CUDA_SUCCESS)
				goto out;
			argv[i] = &slots[i];
			break;
		case CRC_ARG_HOUT:
			slots[i].u64 = 0;
			argv[i] = word ? &slots[i] : NULL;
			break;
		case CRC_ARG_IN:
		case CRC_ARG_OUT:
			argv[i] = NULL;
			if (word) {
				NEED(crc_align8(sp->size));
				argv[i] = a + off;
				off += crc_align8(sp->size);
			}
			break;
		case CRC_ARG_STR:
			argv[i] = NULL;
			if (word) {
				/* A length near 2^64 would wrap crc_align8 to 0 and pass NEED. */
				NEED(word);
				NEED(crc_align8(word));
				if (a[off + word - 1] != '\0') {
					res = CUDA_ERROR_INVALID_VALUE;
					goto out;
				}
				argv[i] = a + off;
				off += crc_align8(word);
			}
			break;
		case CRC_ARG_ARR_IN:
			/* present, then the element count and the elements */
			argv[i] = NULL;
			if (word) {
				NEED(8);
				memcpy(&nelem[i], a + off, 8);
				off += 8;
				if (nelem[i] > ARRAY_MAX) {
					res = CUDA_ERROR_INVALID_VALUE;
					goto out;
				}
				NEED(nelem[i] * crc_align8(sp->size));
				arr_at[i] = a + off;
				off += nelem[i] * crc_align8(sp->size);
				argv[i] = &arrays[i]; /* filled below, once every count is known */
			}
			break;
		case CRC_ARG_ARR_OUT:
			argv[i] = word ? &arrays[i] : NULL;
			break;
		default:
			res = CUDA_ERROR_INVALID_VALUE;
			goto out;
		}
	}
#undef NEED
	/* Arrays: an input's elements must be as many as its count says; an output has room for the
	 * capacity its count argument brought. */
	for (unsigned i = 0; i < o->nargs; i++) {
		const struct crc_arg_spec *sp = &o->spec[i];

		if (!argv[i] || (sp->kind != CRC_ARG_ARR_IN && sp->kind != CRC_ARG_ARR_OUT))
			continue;
		if (sp->kind == CRC_ARG_ARR_IN) {
			if (nelem[i] != array_count(o, argv, i)) {
				res = CUDA_ERROR_INVALID_VALUE;
				goto out;
			}
			res = array_in(s, h, sp, arr_at[i], nelem[i], &arrays[i]);
		} else {
			nelem[i] = array_count(o, argv, i);
			if (nelem[i] > ARRAY_MAX) {
				res = CUDA_ERROR_INVALID_VALUE;
				goto out;
			}
			arrays[i] = calloc(nelem[i] ? nelem[i] : 1, sp->tag ? sizeof(void *) : sp->size);
			res = arrays[i] ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
		}
		if (res != CUDA_SUCCESS)
			goto out;
		argv[i] = arrays[i];
	}
	/* A restored executable graph takes its shadow's nodes for the application's. */
	if (o->changes_exec || s->msg->op == CRC_CU_cuGraphNodeGetEnabled)
		crc_graph_exec_remap(s, s->msg->op, argv);
	res = o->override ? o->override(s, argv) : o->exec(argv);
	if (res == CUDA_SUCCESS && o->changes_exec)
		crc_graph_exec_changed(s, s->msg->op, argv);
	if (res == CUDA_SUCCESS && o->forget_arg1) {
		uint64_t v;

		/* The handle travelled as the first word of its item (handles are 8-byte items). */
		memcpy(&v, a + 8 * (o->forget_arg1 - 1), 8);
		crc_forget(s, v);
	}
	/* Outputs in argument order. */
	for (unsigned i = 0; i < o->nargs; i++) {
		const struct crc_arg_spec *sp = &o->spec[i];
		uint8_t *p;

		if (!argv[i] ||
		    (sp->kind != CRC_ARG_OUT && sp->kind != CRC_ARG_HOUT && sp->kind != CRC_ARG_ARR_OUT))
			continue;
		if (sp->kind == CRC_ARG_ARR_OUT) {
			/* The element count, then the elements: handles named for the client (none: 0). */
			p = crc_out(s, 8 + nelem[i] * crc_align8(sp->size));
			if (!p) {
				res = CUDA_ERROR_OUT_OF_MEMORY;
				goto out;
			}
			memcpy(p, &nelem[i], 8);
			for (uint64_t k = 0; k < nelem[i]; k++) {
				uint8_t *e = p + 8 + k * crc_align8(sp->size);
				void *real;
				uint64_t v;

				if (!sp->tag) {
					memcpy(e, (uint8_t *)arrays[i] + k * sp->size, sp->size);
					continue;
				}
				real = ((void **)arrays[i])[k];
				v = res == CUDA_SUCCESS ? crc_handle_of(s, sp->tag, real) : 0;
				memcpy(e, &v, 8);
			}
			continue;
		}
		p = crc_out(s, sp->kind == CRC_ARG_OUT ? sp->size : 8);
		if (!p) {
			res = CUDA_ERROR_OUT_OF_MEMORY;
			goto out;
		}
		if (sp->kind == CRC_ARG_OUT && (o->dev_out >> i & 1)) {
			int d = crc_dev_client(s, *(int *)argv[i]);

			memcpy(p, &d, sizeof(d));
		} else if (sp->kind == CRC_ARG_OUT) {
			memcpy(p, argv[i], sp->size);
		} else if (res == CUDA_SUCCESS) {
			/* A function or kernel asked for twice keeps its handle. */
			uint64_t v = crc_handle_of(s, sp->tag, slots[i].ptr);

			memcpy(p, &v, 8);
		}
	}
out:
	for (unsigned i = 0; i < o->nargs; i++)
		free(arrays[i]);
	return res;
}

/* ---- the session thread ----------------------------------------------------------------------------- */
static CUresult make_current(struct crc_session *s, const struct crc_call_hdr *h)
{
	union crc_slot real;
	CUresult res;

	if (h->ctx == s->cur_ctx)
		return CUDA_SUCCESS;
	res = crc_translate(s, h, CRC_HT_CTX, h->ctx, &real);
	if (res != CUDA_SUCCESS)
		return res;
	res = crc_be.cuCtxSetCurrent_fn((CUcontext)real.ptr);
	if (res == CUDA_SUCCESS)
		s->cur_ctx = h->ctx;
	return res;
}

static CUresult execute(struct crc_session *s, const struct crc_msg_hdr *m);

/* The name (STR) argument of a generated request, for the journal. */
const char *crc_request_str_arg(int op, const uint8_t *a, size_t len)
{
	const struct op *o = op >= 0 && op < CRC_CU_COUNT ? &ops[op] : NULL;
	size_t off = 0;

	if (!o || !o->spec)
		return NULL;
	for (unsigned i = 0; i < o->nargs; i++) {
		const struct crc_arg_spec *sp = &o->spec[i];
		uint64_t word;

		if (sp->kind == CRC_ARG_VAL) {
			off += crc_align8(sp->size);
			continue;
		}
		if (off + 8 > len)
			return NULL;
		memcpy(&word, a + off, 8);
		off += 8;
		if ((sp->kind == CRC_ARG_IN || sp->kind == CRC_ARG_OUT) && word)
			off += crc_align8(sp->size);
		if (sp->kind == CRC_ARG_STR && word)
			return off <= len && word <= len - off && !a[off + word - 1] ? (const char *)a + off
										     : NULL;
	}
	return NULL;
}

void crc_event_mark(struct crc_session *s, uint64_t v)
{
	uint32_t i = crc_vhandle_index(v);

	if (crc_vhandle_tag(v) != CRC_HT_EVENT)
		return;
	if (i >= s->event_marks_cap) {
		uint32_t cap = s->event_marks_cap ? s->event_marks_cap : 64;
		uint64_t *p;

		while (cap <= i)
			cap *= 2;
		p = realloc(s->event_marks, cap * sizeof(*p));
		if (!p)
			return; /* a restore then leaves this event unrecorded: it completes as a new one */
		memset(p + s->event_marks_cap, 0, (cap - s->event_marks_cap) * sizeof(*p));
		s->event_marks = p;
		s->event_marks_cap = cap;
	}
	s->event_marks[i] = ++s->event_mark_seq;
}

CUresult crc_session_execute(struct crc_session *s, const struct crc_msg_hdr *m)
{
	const struct crc_call_hdr *h = crc_msg_payload(m);
	size_t len = crc_msg_payload_len(m);
	CUresult res;

	if (len < sizeof(*h) || m->op >= CRC_CU_COUNT)
		return CUDA_ERROR_INVALID_VALUE;
	s->msg = m;
	/* A context may go: a background drain's snapshot and the checkpoint's staging buffers live in
	 * one; the drain ends first and the buffers are let go. */
	if (ops[m->op].ctx_may_go) {
		crc_bg_release(s);
		crc_staging_free(s);
		s->cur_ctx = UINT64_MAX;
	}
	crc_journal_begin(s);
	res = execute(s, m);
	/* Out of device memory while a background checkpoint's snapshot holds some: once it is drained
	 * and freed, the call again (natively that memory was free; a failed allocation did nothing). */
	if (res == CUDA_ERROR_OUT_OF_MEMORY && crc_bg_release(s)) {
		crc_journal_begin(s);
		res = execute(s, m);
	}
	if (res == CUDA_SUCCESS)
		crc_journal_end(s, m->op, h, (const uint8_t *)(h + 1), len - sizeof(*h));
	if (res == CUDA_SUCCESS &&
	    (m->op == CRC_CU_cuEventRecord || m->op == CRC_CU_cuEventRecordWithFlags)) {
		uint64_t v; /* the event's virtual handle, the record's first argument */

		if (len - sizeof(*h) >= sizeof(v)) {
			memcpy(&v, h + 1, sizeof(v));
			crc_event_mark(s, v);
		}
	}
	/* A green context's record names the event second. */
	if (res == CUDA_SUCCESS && m->op == CRC_CU_cuGreenCtxRecordEvent) {
		uint64_t v;

		if (len - sizeof(*h) >= 2 * sizeof(v)) {
			memcpy(&v, (const uint8_t *)(h + 1) + 8, sizeof(v));
			crc_event_mark(s, v);
		}
	}
	s->jcapture = false;
	return res;
}

static CUresult execute(struct crc_session *s, const struct crc_msg_hdr *m)
{
	const struct op *o = &ops[m->op];
	const struct crc_call_hdr *h = crc_msg_payload(m);
	size_t len = crc_msg_payload_len(m);
	CUresult res;

	if (len < sizeof(*h))
		return CUDA_ERROR_INVALID_VALUE;
	if (!o->raw && !o->spec) {
		pr_warn("session %llu: %s cannot be forwarded", (unsigned long long)s->id,
			crc_cu_table[m->op].sym);
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	res = make_current(s, h);
	if (res != CUDA_SUCCESS)
		return res;
	if (o->raw)
		res = o->raw(s, h, (const uint8_t *)(h + 1), len - sizeof(*h));
	else
		res = exec_generic(s, m->op, h, (uint8_t *)(h + 1), len - sizeof(*h));
	if (o->ctx_changes)
		s->cur_ctx = UINT64_MAX;
	return res;
}

static CUresult stats(struct crc_session *s)
{
	struct crc_stats *st = crc_out(s, sizeof(*st));

	if (!st)
		return CUDA_ERROR_OUT_OF_MEMORY;
	/* A worker serves one session. */
	st->sessions = 1;
	st->total_mapped_bytes = s->mapped_bytes;
	st->session_id = s->id;
	st->mapped_bytes = s->mapped_bytes;
	return CUDA_SUCCESS;
}

/* The errors after which a CUDA context is unusable for the rest of the process. */
static bool is_sticky(CUresult res)
{
	switch (res) {
	case CUDA_ERROR_ILLEGAL_ADDRESS:
	case CUDA_ERROR_HARDWARE_STACK_ERROR:
	case CUDA_ERROR_ILLEGAL_INSTRUCTION:
	case CUDA_ERROR_MISALIGNED_ADDRESS:
	case CUDA_ERROR_INVALID_ADDRESS_SPACE:
	case CUDA_ERROR_INVALID_PC:
	case CUDA_ERROR_LAUNCH_FAILED:
	case CUDA_ERROR_ASSERT:
	case CUDA_ERROR_ECC_UNCORRECTABLE:
		return true;
	default:
		return false;
	}
}

/* Returns false when the session is over; true also when nothing came within timeout_ms. */
bool crc_session_serve_one(struct crc_session *s, int timeout_ms)
{
	const struct crc_msg_hdr *m;
	CUresult res;
	int rc = crc_chan_next(&s->chan, timeout_ms, &m);

	if (rc == CRC_ETIMEDOUT || rc == CRC_EAGAIN)
		return true;
	if (rc) {
		if (rc != CRC_EDAEMON)
			pr_warn("session %llu: %s", (unsigned long long)s->id, crc_strerror(rc));
		return false;
	}
	s->out_len = 0;
	s->msg = m;
	s->stripe_handled = false;
	crc_upload_wait(s); /* a lazy restore's memory resident before any request is served */
	if (m->op < CRC_CU_COUNT && s->sticky) {
		/* The context is lost, as a native one is; the driver does not refuse every call (VMM
		 * ones go on), so the session does. */
		res = s->sticky;
	} else if (m->op < CRC_CU_COUNT) {
		if (s->graphs_pending)
			crc_graph_restore_pending(s);
		res = s->sticky ? s->sticky : crc_session_execute(s, m);
		if (is_sticky(res))
			s->sticky = res;
	} else {
		const uint8_t *p = crc_msg_payload(m);
		size_t len = crc_msg_payload_len(m);

		switch (m->op) {
		case CRC_OP_BYE:
			crc_chan_release(&s->chan);
			pr_info("session %llu: client said goodbye", (unsigned long long)s->id);
			return false;
		case CRC_OP_PIN_REGISTER:
			res = crc_ctl_pin_register(s, p, len);
			break;
		case CRC_OP_PIN_UNREGISTER:
			res = crc_ctl_pin_unregister(s, p, len);
			break;
		case CRC_OP_HOSTFN_REGISTER:
			res = crc_ctl_hostfn_register(s);
			break;
		case CRC_OP_NOTIFY_REGISTER:
		case CRC_OP_NOTIFY_UNREGISTER:
			res = crc_ctl_notify(s, m->op == CRC_OP_NOTIFY_REGISTER, p, len);
			break;
		case CRC_OP_MANAGED_PLACE:
			res = crc_ctl_managed_place(s, p, len);
			break;
		case CRC_OP_MANAGED_WAIT:
			res = crc_ctl_managed_wait(s, p, len);
			break;
		case CRC_OP_NVML:
			res = crc_ctl_nvml(s, p, len);
			break;
		case CRC_OP_BULK_OPEN:
			res = crc_ctl_bulk_open(s, p, len);
			break;
		case CRC_OP_MVAR_PULL:
		case CRC_OP_MVAR_PUSH:
			res = crc_ctl_mvar_copy(s, m->op == CRC_OP_MVAR_PUSH, p, len);
			break;
		case CRC_OP_STATS:
			res = stats(s);
			break;
		case CRC_OP_SYNC:
			res = CUDA_SUCCESS;
			break;
		case CRC_OP_QUIESCE_ACK:
			crc_tcp_acked(s, p, len);
			return true;
		default:
			res = CUDA_ERROR_NOT_SUPPORTED;
		}
		if (m->op == CRC_OP_SYNC && s->deferred != CUDA_SUCCESS) {
			res = s->deferred;
			s->deferred = CUDA_SUCCESS;
		}
	}
	res = crc_stripe_after(s, m, res);
	/* Which call failed, for a daemon run with -v: an application's own error message rarely says. */
	if (res != CUDA_SUCCESS && m->op < CRC_CU_COUNT)
		pr_debug("session %llu: %s: CUDA error %d", (unsigned long long)s->id,
			 crc_cu_table[m->op].sym, (int)res);
	if (m->flags & CRC_MSG_NOREPLY) {
		if (res != CUDA_SUCCESS && s->deferred == CUDA_SUCCESS)
			s->deferred = res;
		crc_chan_release(&s->chan);
		return true;
	}
	if (m->op < CRC_CU_COUNT && ops[m->op].reports_deferred && res == CUDA_SUCCESS &&
	    s->deferred != CUDA_SUCCESS) {
		res = s->deferred;
		s->deferred = CUDA_SUCCESS;
	}
	/* Release the request before replying: the reply may be built from it, so copy first. */
	rc = send_reply(s, m, res);
	crc_chan_release(&s->chan);
	if (rc) {
		pr_warn("session %llu: cannot reply: %s", (unsigned long long)s->id, crc_strerror(rc));
		return false;
	}
	return true;
}

/* Frees the session's memory; the slot is free already. Waits for control threads that hold it. */
static void session_dealloc(struct crc_session *s)
{
	pthread_mutex_lock(&s->ctl_lock);
	s->ending = true;
	if (s->cmd && !s->cmd_done) {
		s->cmd_rc = CRC_EDAEMON;
		snprintf(s->cmd_msg, sizeof(s->cmd_msg), "session %llu ended (its client went away)",
			 (unsigned long long)s->id);
		s->cmd_done = true;
	}
	pthread_cond_broadcast(&s->ctl_cond);
	while (s->refs)
		pthread_cond_wait(&s->ctl_cond, &s->ctl_lock);
	pthread_mutex_unlock(&s->ctl_lock);
	if (s->ckpt)
		crc_ckpt_abort(s->ckpt);
	crc_store_close(s->store);
	crc_chan_close(&s->chan);
	crc_bulk_close(s);
	if (s->fd >= 0) {
		crc_tls_drop(s->fd);
		close(s->fd);
	}
	if (s->reclaim_fd >= 0) {
		crc_tls_drop(s->reclaim_fd);
		close(s->reclaim_fd);
	}
	for (unsigned t = 0; t < CRC_HT_COUNT; t++)
		free(s->tables[t].real);
	crc_journal_free(s);
	crc_graph_free(s);
	crc_ipc_free(s);
	crc_texobjs_free(s);
	crc_hostfn_free(s);
	free(s->store_dir);
	crc_inc_clear(&s->inc_prev);
	crc_inc_clear(&s->inc_next);
	free(s->graphs_pending);
	free(s->ptstreams);
	free(s->event_marks);
	free(s->out);
	free(s->image);
	pthread_mutex_destroy(&s->ctl_lock);
	pthread_cond_destroy(&s->ctl_cond);
	free(s);
}

static void session_free(struct crc_session *s)
{
	crc_upload_wait(s);
	crc_bg_end(s); /* committed if the commit was asked for: the client may end before the drain */
	crc_staging_free(s);
	crc_stripe_free(s);
	crc_worker_session_ended();
	crc_session_release_resources(s);
	pthread_mutex_lock(&crcd.lock);
	crcd.session = NULL;
	pthread_mutex_unlock(&crcd.lock);
	crc_chan_shutdown(&s->chan);
	session_dealloc(s);
}

void crc_session_cmd_done(struct crc_session *s, int rc, const char *fmt, ...)
{
	va_list ap;

	s->cmd_rc = rc;
	s->cmd_msg[0] = 0;
	if (fmt) {
		va_start(ap, fmt);
		vsnprintf(s->cmd_msg, sizeof(s->cmd_msg), fmt, ap);
		va_end(ap);
	}
	if (rc && s->cmd_msg[0])
		pr_warn("session %llu: %s", (unsigned long long)s->id, s->cmd_msg);
	/* Quiesced, checkpointed, resumed: ls says so at once. */
	crc_worker_publish();
}

/* How long a restored TCP client may take to make its first handshake: CRIU restores the rest of the
 * process (its memory) after the restore's reply. */
#define RESTORED_TLS_WAIT_MS (300 * 1000)

static void *session_main(void *arg)
{
	struct crc_session *s = arg;

	pr_info("session %llu: pid %d uid %u, VA %#llx+%#llx, %s", (unsigned long long)s->id,
		(int)s->peer.pid, (unsigned)s->peer.uid, (unsigned long long)s->va_base,
		(unsigned long long)s->va_size, s->tcp ? "TCP" : "shared memory");
	/* A restored session's first requests may be control ops (pinned memory registered again) that
	 * need a context: the one the replay used. */
	for (uint32_t i = 1; i <= s->tables[CRC_HT_CTX].n; i++) {
		if (s->tables[CRC_HT_CTX].real[i].ptr &&
		    crc_be.cuCtxSetCurrent_fn(s->tables[CRC_HT_CTX].real[i].ptr) == CUDA_SUCCESS) {
			s->cur_ctx = crc_vhandle(CRC_HT_CTX, i);
			break;
		}
	}
	if (s->tls_pending) {
		char why[256];
		int rc = crc_tls_server(s->fd, CRC_TLS_ID_HANDOFF, s->tls_key, sizeof(s->tls_key),
					RESTORED_TLS_WAIT_MS, why, sizeof(why));

		memset(s->tls_key, 0, sizeof(s->tls_key));
		s->tls_pending = false;
		if (rc) {
			pr_warn("session %llu: no TLS session with the restored client: %s",
				(unsigned long long)s->id, why);
			goto end;
		}
		pr_info("session %llu: TLS with the restored client (%s)", (unsigned long long)s->id,
			crc_tls_cipher(s->fd));
	}
	for (;;) {
		bool pending;

		pthread_mutex_lock(&s->ctl_lock);
		pending = s->cmd && !s->cmd_done;
		pthread_mutex_unlock(&s->ctl_lock);
		if (pending) {
			crc_session_command(s);
			continue;
		}
		if (s->suspended)
			break; /* its client stays parked: the quiesce request is not withdrawn */
		if (s->detached) {
			bool end;

			/* Parked for a CRIU dump without a connection (tcp_park.c): commands go on; the
			 * client takes the session back with a new one. */
			if (crc_tcp_take_back(s, &end))
				continue;
			if (end)
				break;
		} else if (s->state == CRC_CTL_RUNNING) {
			/* Short waits: a control command may come while the client is idle. */
			if (!crc_session_serve_one(s, 50))
				break;
			continue;
		} else if (crc_sock_alive(s->fd) && !s->ckpt) {
			/* Quiesced: nothing is served until resume. A client that died meanwhile ends the
			 * session, unless a checkpoint waits for its commit or abort. */
			break;
		}
		pthread_mutex_lock(&s->ctl_lock);
		if ((!s->cmd || s->cmd_done) && s->reclaim_fd < 0) {
			struct timespec ts;

			clock_gettime(CLOCK_REALTIME, &ts);
			ts.tv_nsec += 100 * 1000 * 1000;
			if (ts.tv_nsec >= 1000000000) {
				ts.tv_sec++;
				ts.tv_nsec -= 1000000000;
			}
			pthread_cond_timedwait(&s->ctl_cond, &s->ctl_lock, &ts);
		}
		pthread_mutex_unlock(&s->ctl_lock);
	}
end:
	if (s->stripe_copies)
		pr_info("session %llu: %llu striped copies, %llu bytes", (unsigned long long)s->id,
			(unsigned long long)s->stripe_copies, (unsigned long long)s->stripe_bytes);
	pr_info("session %llu: ended; freeing %llu bytes of device memory", (unsigned long long)s->id,
		(unsigned long long)s->mapped_bytes);
	session_free(s);
	return NULL;
}

int crc_session_make_rings(struct crc_session *s, int *memfd_out)
{
	size_t size = crc_chan_shm_size(crcd.ring_size);
	int memfd = memfd_create("crcuda-rings", MFD_CLOEXEC), rc;

	if (memfd < 0)
		return -errno;
	if (ftruncate(memfd, (off_t)size)) {
		rc = -errno;
		close(memfd);
		return rc;
	}
	rc = crc_chan_open_shm(&s->chan, s->fd, memfd, crcd.ring_size, true, true);
	if (rc) {
		close(memfd);
		return rc;
	}
	*memfd_out = memfd;
	return 0;
}

static struct crc_session *session_alloc(int fd, bool tcp, const struct crc_peer *peer)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	struct crc_session *s = calloc(1, sizeof(*s));

	pthread_once(&once, dispatch_init);
	if (!s)
		return NULL;
	s->fd = fd;
	s->tcp = tcp;
	s->peer = *peer;
	s->cur_ctx = 0;
	s->state = CRC_CTL_RUNNING;
	s->jimage = -1;
	s->reclaim_fd = -1;
	for (int i = 0; i < CRC_BULK_MAX; i++)
		s->bulk_fd[i] = -1;
	for (int d = 0; d < CRC_MAX_DEVICES; d++)
		s->dev_map[d] = d;
	pthread_mutex_init(&s->ctl_lock, NULL);
	pthread_cond_init(&s->ctl_cond, NULL);
	return s;
}

/* The worker's range; handles 1..dev_count of the context table are the primary contexts. */
static void session_setup(struct crc_session *s)
{
	s->va_base = crcd.va_base;
	s->va_size = crcd.va_session;
	for (int d = 0; d < crcd.dev_count; d++)
		crc_register(s, CRC_HT_CTX, (union crc_slot){.u64 = 0});
}

/* Makes s the worker's session, with the id the front gave it. */
static int session_claim(struct crc_session *s, char *why, size_t why_len)
{
	int rc = 0;

	pthread_mutex_lock(&crcd.lock);
	if (crcd.session) {
		snprintf(why, why_len, "this worker serves session %llu already",
			 (unsigned long long)crcd.session->id);
		rc = CRC_EBUSY;
	} else {
		crcd.session = s;
		s->id = crcd.next_session_id;
	}
	pthread_mutex_unlock(&crcd.lock);
	return rc;
}

int crc_session_create(int fd, bool tcp, const struct crc_peer *peer, struct crc_session **out, char *why,
		       size_t why_len)
{
	struct crc_session *s = session_alloc(fd, tcp, peer);
	int rc;

	if (!s)
		return CRC_ENOMEM;
	rc = session_claim(s, why, why_len);
	if (rc) {
		pthread_mutex_destroy(&s->ctl_lock);
		pthread_cond_destroy(&s->ctl_cond);
		free(s);
		return rc;
	}
	session_setup(s);
	s->state = CRC_CTL_RESTORING;
	*out = s;
	return 0;
}

int crc_session_run(struct crc_session *s)
{
	int rc;

	s->state = CRC_CTL_RUNNING;
	/* Listed at once: a restore's caller may look for it the moment the restore returns. */
	crc_worker_publish();
	/* Not crc_thread_create: this thread makes the application's calls, in the capture modes it sets. */
	rc = pthread_create(&s->thread, NULL, session_main, s);
	if (rc)
		return -rc;
	pthread_detach(s->thread);
	return 0;
}

void crc_session_destroy(struct crc_session *s)
{
	crc_upload_wait(s);
	crc_session_release_resources(s);
	pthread_mutex_lock(&crcd.lock);
	crcd.session = NULL;
	pthread_mutex_unlock(&crcd.lock);
	s->fd = -1; /* the control connection's: its owner closes it */
	session_dealloc(s);
}

int crc_session_start(int fd, bool tcp, const struct crc_peer *peer, const struct crc_hello *hello)
{
	struct crc_hello_reply *reply = malloc(sizeof(*reply));
	struct crc_session *s = session_alloc(fd, tcp, peer);
	int memfd = -1, rc = 0;
	char why[128];

	(void)hello;
	if (!s || !reply) {
		rc = CRC_ENOMEM;
		goto fail;
	}
	rc = session_claim(s, why, sizeof(why));
	if (rc) {
		pr_warn("refusing pid %d: %s", (int)peer->pid, why);
		goto fail;
	}
	session_setup(s);
	if (!tcp) {
		rc = crc_session_make_rings(s, &memfd);
		if (rc)
			goto fail_session;
	} else {
		crc_chan_open_tcp(&s->chan, fd);
	}
	*reply = crcd.proto;
	reply->session_id = s->id;
	reply->va_base = s->va_base;
	reply->va_size = s->va_size;
	reply->ring_size = crcd.ring_size;
	for (int d = 0; d < crcd.dev_count; d++)
		reply->primary_ctx[d] = crc_vhandle(CRC_HT_CTX, (uint32_t)d + 1);
	rc = tcp ? crc_sock_write_all(fd, reply, sizeof(*reply))
		 : crc_sock_send_fds(fd, reply, sizeof(*reply), &memfd, 1);
	if (memfd >= 0)
		close(memfd);
	if (rc)
		goto fail_session;
	rc = crc_session_run(s);
	if (rc)
		goto fail_session;
	free(reply);
	return 0;
fail_session:
	pthread_mutex_lock(&crcd.lock);
	crcd.session = NULL;
	pthread_mutex_unlock(&crcd.lock);
	crc_chan_close(&s->chan);
	free(s->tables[CRC_HT_CTX].real);
fail:
	if (s) {
		pthread_mutex_destroy(&s->ctl_lock);
		pthread_cond_destroy(&s->ctl_cond);
	}
	free(s);
	free(reply);
	return rc;
}
