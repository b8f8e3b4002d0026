/* Every entry point of libcuda.so.1, generated from the driver API table (crcuda/cuda_api.def):
 *   FORWARD      the generic forwarder with the row's marshalling spec (crcuda/cuda_marshal.def)
 *   HOOK         crc_hook_<sym>, hand-written (a missing one is a link error)
 *   LOCAL        crc_local_<sym>, answered from the client's cached state
 *   UNSUPPORTED  CUDA_ERROR_NOT_SUPPORTED, logged once
 * A _ptds/_ptsz variant runs its parent's implementation with the thread marked per-thread-default-
 * stream, so stream 0 means the thread's own default stream there. */
#define LOG_PREFIX "libcrcuda: "
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "crcuda/cuda_api_sig.def"
#include "crcuda/cuda_api_undef.h"
#include "crcuda/log.h"

/* Unsupported entry points ignore their parameters by design. */
#pragma GCC diagnostic ignored "-Wunused-parameter"

#define EXPORT __attribute__((visibility("default")))

#include "hooks.h"

/* ---- FORWARD: the marshalling spec of each row and its forwarder ------------------------------- */
#include "crcuda/cuda_marshal_specs.h"

#define CRC_MODE_SYNC  false
#define CRC_MODE_ASYNC true
#define CRC_FWD_BEGIN(sym, nargs, mode)                                                                      \
	CUresult crc_fwd_##sym CRC_SIG_##sym                                                                 \
	{                                                                                                    \
		enum { nargs_ = (nargs), async_ = CRC_MODE_##mode };                                         \
		const void *argv[(nargs) + 1] = {
#define CRC_FWD_ARG(sym, i, kind, type, name)		   [i] = &name,
#define CRC_FWD_ARR(sym, i, kind, type, name, count, elem) [i] = &name,
#define CRC_FWD_END(sym)                                                                                     \
	}                                                                                                    \
	;                                                                                                    \
	return crc_fwd_call(CRC_CU_##sym, async_, nargs_, spec_##sym, argv);                                 \
	}
#include "crcuda/cuda_marshal.def"
#undef CRC_FWD_BEGIN
#undef CRC_FWD_ARG
#undef CRC_FWD_ARR
#undef CRC_FWD_END

/* ---- the exports ---------------------------------------------------------------------------------- */
/* Which function implements a row (its parent's for a variant). */
#define CRC_IMPL_FORWARD(parent)     crc_fwd_##parent
#define CRC_IMPL_HOOK(parent)	     crc_hook_##parent
#define CRC_IMPL_LOCAL(parent)	     crc_local_##parent
#define CRC_IMPL_UNSUPPORTED(parent) unsupported_##parent

/* CRCUDA_TRACE_ERRORS=1 logs every call that returns an error: the first thing to look at when a
 * library reports an internal error with no detail (cuBLAS, cuDNN). */
static int trace_errors;

__attribute__((constructor)) static void trace_errors_init(void)
{
	const char *env = getenv("CRCUDA_TRACE_ERRORS");

	trace_errors = env && *env && strcmp(env, "0");
}

__attribute__((cold, noinline)) static void trace_error(int id, CUresult r)
{
	pr_warn("trace: %s returned %d", crc_cu_table[id].sym, (int)r);
}

#define CRC_CU_API(sym, parent, base, version, policy, pt, ret, params, args)                                \
	CRC_UNSUPPORTED_##policy(sym, parent, ret, params)                                                   \
	    CRC_EXPORT_##pt(sym, parent, policy, ret, params, args)
#define CRC_UNSUPPORTED_UNSUPPORTED(sym, parent, ret, params)                                                \
	static inline ret unsupported_##sym params                                                           \
	{                                                                                                    \
		return crc_not_supported(CRC_CU_##sym);                                                      \
	}
#define CRC_UNSUPPORTED_FORWARD(sym, parent, ret, params)
#define CRC_UNSUPPORTED_HOOK(sym, parent, ret, params)
#define CRC_UNSUPPORTED_LOCAL(sym, parent, ret, params)
#define CRC_EXPORT_NONE(sym, parent, policy, ret, params, args)                                              \
	EXPORT ret sym params                                                                                \
	{                                                                                                    \
		ret r = CRC_IMPL_##policy(parent) args;                                                      \
		if (__builtin_expect(trace_errors, 0) && r != CUDA_SUCCESS)                                  \
			trace_error(CRC_CU_##sym, r);                                                        \
		return r;                                                                                    \
	}
#define CRC_EXPORT_PT(sym, parent, policy, ret, params, args)                                                \
	EXPORT ret sym params                                                                                \
	{                                                                                                    \
		struct crc_thread *t = crc_self();                                                           \
		bool outer = t->ptds;                                                                        \
		ret r;                                                                                       \
		t->ptds = true;                                                                              \
		r = CRC_IMPL_##policy(parent) args;                                                          \
		t->ptds = outer;                                                                             \
		if (__builtin_expect(trace_errors, 0) && r != CUDA_SUCCESS)                                  \
			trace_error(CRC_CU_##sym, r);                                                        \
		return r;                                                                                    \
	}
#define CRC_EXPORT_PTDS CRC_EXPORT_PT
#define CRC_EXPORT_PTSZ CRC_EXPORT_PT
#include "crcuda/cuda_api.def"
#undef CRC_CU_API

/* ---- the address of each export, for cuGetProcAddress and dlsym ---------------------------------- */
void *const crc_cu_exports[CRC_CU_COUNT] = {
#define CRC_CU_API(sym, parent, base, version, policy, pt, ret, params, args) [CRC_CU_##sym] = (void *)sym,
#include "crcuda/cuda_api.def"
#undef CRC_CU_API
};

/* ---- the generic forwarder ----------------------------------------------------------------------- */
static const void *arg_ptr(const void *slot)
{
	const void *p;

	memcpy(&p, slot, sizeof(p));
	return p;
}

/* The count of array argument i: the value of its count argument (by value, or pointed to). */
static uint64_t array_count(unsigned nargs, const struct crc_arg_spec *spec, const void *const *argv,
			    unsigned i)
{
	unsigned c = spec[i].count;
	size_t n = 0;

	if (c >= nargs || spec[c].size != sizeof(size_t))
		return 0;
	if (spec[c].kind == CRC_ARG_VAL)
		memcpy(&n, argv[c], sizeof(n));
	else if (arg_ptr(argv[c]))
		memcpy(&n, arg_ptr(argv[c]), sizeof(n));
	return n;
}

/* Copies an array element between the application's array (handles are pointers there) and the
 * wire (8-byte items). */
static void elem_to_wire(const struct crc_arg_spec *sp, uint8_t *wire, const uint8_t *app)
{
	if (sp->tag) {
		uint64_t v = (uintptr_t) * (void *const *)app;

		memcpy(wire, &v, 8);
	} else {
		memcpy(wire, app, sp->size);
	}
}

static void elem_from_wire(const struct crc_arg_spec *sp, uint8_t *app, const uint8_t *wire)
{
	if (sp->tag) {
		uint64_t v;

		memcpy(&v, wire, 8);
		*(void **)app = (void *)(uintptr_t)v;
	} else {
		memcpy(app, wire, sp->size);
	}
}

static size_t elem_size(const struct crc_arg_spec *sp)
{
	return sp->tag ? sizeof(void *) : sp->size;
}

/* The outputs of a reply into the application's arguments (all of them, or with ok false only the
 * plain OUT ones); -1 when the reply is too short for them. */
static int unpack_outputs(unsigned nargs, const struct crc_arg_spec *spec, const void *const *argv,
			  const uint64_t *cap, const uint8_t *r, size_t len, bool ok)
{
	size_t roff = 0;

	for (unsigned i = 0; i < nargs; i++) {
		size_t n = spec[i].kind == CRC_ARG_OUT ? spec[i].size : 8;
		uint8_t *ptr;
		uint64_t got;

		if (spec[i].kind != CRC_ARG_OUT && spec[i].kind != CRC_ARG_HOUT &&
		    spec[i].kind != CRC_ARG_ARR_OUT)
			continue;
		ptr = (uint8_t *)arg_ptr(argv[i]);
		if (!ptr)
			continue;
		if (roff + n > len)
			return -1;
		if (spec[i].kind != CRC_ARG_ARR_OUT) {
			if (ok || spec[i].kind == CRC_ARG_OUT)
				memcpy(ptr, r + roff, n);
			roff += crc_align8(n);
			continue;
		}
		memcpy(&got, r + roff, 8);
		roff += 8;
		if (got > cap[i] || roff + got * crc_align8(spec[i].size) > len)
			return -1;
		for (uint64_t k = 0; ok && k < got; k++)
			elem_from_wire(&spec[i], ptr + k * elem_size(&spec[i]),
				       r + roff + k * crc_align8(spec[i].size));
		roff += got * crc_align8(spec[i].size);
	}
	return 0;
}

CUresult crc_fwd_call(int id, bool async, unsigned nargs, const struct crc_arg_spec *spec,
		      const void *const *argv)
{
	struct crc_call c;
	size_t len = 0, off = 0;
	uint64_t cap[16] = {0};
	uint8_t *p;
	CUresult res;

	if (nargs > 16)
		return CUDA_ERROR_INVALID_VALUE;
	for (unsigned i = 0; i < nargs; i++) {
		const void *ptr = spec[i].kind == CRC_ARG_VAL ? NULL : arg_ptr(argv[i]);

		switch (spec[i].kind) {
		case CRC_ARG_VAL:
			len += crc_align8(spec[i].size);
			break;
		case CRC_ARG_HANDLE:
		case CRC_ARG_HOUT:
		case CRC_ARG_ARR_OUT:
			len += 8;
			break;
		case CRC_ARG_IN:
		case CRC_ARG_OUT:
			len += 8 + (ptr ? crc_align8(spec[i].size) : 0);
			break;
		case CRC_ARG_STR:
			len += 8 + (ptr ? crc_align8(strlen(ptr) + 1) : 0);
			break;
		case CRC_ARG_ARR_IN:
			len +=
			    8 + (ptr ? 8 + array_count(nargs, spec, argv, i) * crc_align8(spec[i].size) : 0);
			break;
		}
	}
	res = crc_call_begin(&c, (uint16_t)id, async ? CRC_MSG_NOREPLY : 0, len, (void **)&p);
	if (res != CUDA_SUCCESS)
		return res;
	memset(p, 0, len);
	for (unsigned i = 0; i < nargs; i++) {
		const void *ptr = spec[i].kind == CRC_ARG_VAL ? NULL : arg_ptr(argv[i]);
		uint64_t word = (uintptr_t)ptr, n;

		switch (spec[i].kind) {
		case CRC_ARG_VAL:
			memcpy(p + off, argv[i], spec[i].size);
			off += crc_align8(spec[i].size);
			break;
		case CRC_ARG_HANDLE:
		case CRC_ARG_HOUT:
		case CRC_ARG_ARR_OUT:
			word = spec[i].kind != CRC_ARG_HANDLE ? !!ptr : word;
			memcpy(p + off, &word, 8);
			off += 8;
			/* The capacity the application gave, as its count says before the call. */
			if (spec[i].kind == CRC_ARG_ARR_OUT && ptr)
				cap[i] = array_count(nargs, spec, argv, i);
			break;
		case CRC_ARG_IN:
		case CRC_ARG_OUT:
			word = !!ptr;
			memcpy(p + off, &word, 8);
			off += 8;
			if (ptr) {
				memcpy(p + off, ptr, spec[i].size);
				off += crc_align8(spec[i].size);
			}
			break;
		case CRC_ARG_STR:
			n = ptr ? strlen(ptr) + 1 : 0;
			memcpy(p + off, &n, 8);
			off += 8;
			if (ptr) {
				memcpy(p + off, ptr, n);
				off += crc_align8(n);
			}
			break;
		case CRC_ARG_ARR_IN:
			word = !!ptr;
			memcpy(p + off, &word, 8);
			off += 8;
			if (!ptr)
				break;
			n = array_count(nargs, spec, argv, i);
			memcpy(p + off, &n, 8);
			off += 8;
			for (uint64_t k = 0; k < n; k++, off += crc_align8(spec[i].size))
				elem_to_wire(&spec[i], p + off,
					     (const uint8_t *)ptr + k * elem_size(&spec[i]));
			break;
		}
	}
	if (async)
		return crc_call_post(&c);
	res = crc_call_wait(&c, NULL, NULL);
	/* A call that failed still gives back what the driver left in its OUT arguments (a failed
	 * cuGraphExecUpdate says why there), nothing else. */
	if (res == CUDA_SUCCESS && unpack_outputs(nargs, spec, argv, cap, c.reply, c.reply_len, true)) {
		pr_err("short or bad reply to %s", crc_cu_table[id].sym);
		res = CUDA_ERROR_UNKNOWN;
	} else if (res != CUDA_SUCCESS && res != CRC_CU_DAEMON_GONE && c.reply && c.reply_len) {
		unpack_outputs(nargs, spec, argv, cap, c.reply, c.reply_len, false);
	}
	crc_call_end(&c);
	return res;
}
