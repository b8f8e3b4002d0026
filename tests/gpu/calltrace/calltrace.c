/* calltrace: a diagnostic libcuda.so.1. Every entry point (generated from the driver API table by
 * gen_calltrace.py) logs one line per call to CALLTRACE_LOG, then calls the same symbol of
 * CALLTRACE_REAL:
 *   TID SEQ NAME(ARG,...) = RESULT [I]=BYTES...
 * ARG is each argument's value in hex; [I]=BYTES the bytes argument I points to after the call.
 * cuGetProcAddress answers with the tracing entry point of the row the real library resolved, so calls
 * through cudart's function table are logged too; export tables are passed through untouched, except
 * those named in CALLTRACE_WRAP_EXPORT (comma-separated first four UUID bytes in hex, e.g. 21318c60):
 * their slot calls are logged as export_<table>_<slot>(a, b, c, d) = result.
 * Used by tests/gpu/calltrace.sh to compare a program's calls natively and under crcuda. */
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "calltrace.h"

void *ct_real[CRC_CU_COUNT];
int ct_on;
static int log_fd = -1;
static atomic_ulong seq;
static void *real_lib;
static CUresult (*real_gpa)(const char *, void **, int, cuuint64_t);
static CUresult (*real_gpa2)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
static CUresult (*real_export)(const void **, const CUuuid *);

__attribute__((constructor)) static void ct_init(void)
{
	const char *real = getenv("CALLTRACE_REAL"), *logp = getenv("CALLTRACE_LOG");

	if (!real) {
		fprintf(stderr, "calltrace: CALLTRACE_REAL (the libcuda.so.1 to forward to) is not set\n");
		abort();
	}
	real_lib = dlopen(real, RTLD_NOW | RTLD_LOCAL);
	if (!real_lib) {
		fprintf(stderr, "calltrace: %s\n", dlerror());
		abort();
	}
	for (int i = 0; i < CRC_CU_COUNT; i++)
		ct_real[i] = dlsym(real_lib, crc_cu_table[i].sym);
	real_gpa = (CUresult(*)(const char *, void **, int, cuuint64_t))dlsym(real_lib, "cuGetProcAddress");
	real_gpa2 = (CUresult(*)(const char *, void **, int, cuuint64_t,
				 CUdriverProcAddressQueryResult *))dlsym(real_lib, "cuGetProcAddress_v2");
	real_export = (CUresult(*)(const void **, const CUuuid *))dlsym(real_lib, "cuGetExportTable");
	if (logp) {
		char path[4096];

		snprintf(path, sizeof(path), "%s.%d", logp, (int)getpid());
		log_fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
		ct_on = log_fd >= 0;
	}
}

static void put(struct ct_line *l, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (l->len >= sizeof(l->buf) - 1)
		return;
	va_start(ap, fmt);
	n = vsnprintf(l->buf + l->len, sizeof(l->buf) - l->len, fmt, ap);
	va_end(ap);
	if (n > 0)
		l->len = l->len + (size_t)n < sizeof(l->buf) ? l->len + (size_t)n : sizeof(l->buf) - 1;
}

void ct_begin(struct ct_line *l, int id)
{
	l->len = 0;
	put(l, "%d %lu %s(", gettid(), (unsigned long)atomic_fetch_add(&seq, 1), crc_cu_table[id].sym);
}

void ct_val(struct ct_line *l, const void *v, size_t size)
{
	unsigned long long x = 0;

	memcpy(&x, v, size < sizeof(x) ? size : sizeof(x));
	put(l, "%s%#llx", l->buf[l->len - 1] == '(' ? "" : ",", x);
}

void ct_result(struct ct_line *l, long long r)
{
	put(l, ") = %lld", r);
}

void ct_mem(struct ct_line *l, int arg, const void *p, size_t size)
{
	const unsigned char *b = p;

	if (!p)
		return;
	put(l, " [%d]=", arg);
	for (size_t i = 0; i < size && i < 48; i++)
		put(l, "%02x", b[i]);
}

void ct_str(struct ct_line *l, int arg, const char *s)
{
	if (s)
		put(l, " [%d]=\"%.80s\"", arg, s);
}

void ct_end(struct ct_line *l)
{
	put(l, "\n");
	if (write(log_fd, l->buf, l->len) < 0)
		ct_on = 0;
}

static void log_resolve(const char *how, const char *symbol, int version, cuuint64_t flags, CUresult r,
			int id, bool wrapped)
{
	struct ct_line l = {.len = 0};

	if (!ct_on)
		return;
	put(&l, "%d %lu %s(%s,%d,%#llx) = %d -> %s%s\n", gettid(), (unsigned long)atomic_fetch_add(&seq, 1),
	    how, symbol, version, (unsigned long long)flags, (int)r, id >= 0 ? crc_cu_table[id].sym : "?",
	    wrapped ? "" : " (unwrapped)");
	if (write(log_fd, l.buf, l.len) < 0)
		ct_on = 0;
}

/* The tracing entry point for what the real library resolved, when it is that row's symbol. */
static void *wrap(const char *how, const char *symbol, void *pfn, int version, cuuint64_t flags, CUresult r)
{
	int id = r == CUDA_SUCCESS && pfn ? crc_cu_resolve(symbol, version, flags, NULL) : -1;
	/* With the tracer preloaded, a library that answers with its own exports answers with ours. */
	bool same = id >= 0 && (ct_real[id] == pfn || ct_self[id] == pfn);

	/* The hand-written three are always ours (the real ones would bypass the trace). */
	bool hand = id == CRC_CU_cuGetProcAddress || id == CRC_CU_cuGetProcAddress_v2 ||
		    id == CRC_CU_cuGetExportTable;

	log_resolve(how, symbol, version, flags, r, id, same || hand);
	return same || hand ? ct_self[id] : pfn;
}

EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, cuuint64_t flags)
{
	CUresult r = real_gpa(symbol, pfn, version, flags);

	if (pfn)
		*pfn = wrap("cuGetProcAddress", symbol, r == CUDA_SUCCESS ? *pfn : NULL, version, flags, r);
	return r;
}

EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, cuuint64_t flags,
				    CUdriverProcAddressQueryResult *status)
{
	CUresult r = real_gpa2(symbol, pfn, version, flags, status);

	if (pfn)
		*pfn =
		    wrap("cuGetProcAddress_v2", symbol, r == CUDA_SUCCESS ? *pfn : NULL, version, flags, r);
	return r;
}

/* Wrapped tables: their original slots and names. */
static struct {
	const uint64_t *orig;
	uint64_t *copy;
	char name[9];
} wrapped[CT_TABLES];
static int nwrapped;
static pthread_mutex_t wrap_lock = PTHREAD_MUTEX_INITIALIZER;

uint64_t ct_export_call(int table, int slot, uint64_t a, uint64_t b, uint64_t c, uint64_t d, uint64_t e,
			uint64_t f)
{
	uint64_t r = ((ct_slot_fn *)(uintptr_t)wrapped[table].orig[slot])(a, b, c, d, e, f);

	if (ct_on) {
		struct ct_line l = {.len = 0};

		put(&l, "%d %lu export_%s_%d(%#llx,%#llx,%#llx,%#llx) = %lld\n", gettid(),
		    (unsigned long)atomic_fetch_add(&seq, 1), wrapped[table].name, slot,
		    (unsigned long long)a, (unsigned long long)b, (unsigned long long)c,
		    (unsigned long long)d, (long long)(int)r);
		if (write(log_fd, l.buf, l.len) < 0)
			ct_on = 0;
	}
	return r;
}

/* The table itself, or its wrapped copy when CALLTRACE_WRAP_EXPORT names it (first four bytes, hex). */
static const void *wrap_table(const CUuuid *id, const void *table)
{
	const char *want = getenv("CALLTRACE_WRAP_EXPORT");
	const uint64_t *t = table;
	char name[9];
	const void *res = table;

	snprintf(name, sizeof(name), "%02x%02x%02x%02x", (unsigned char)id->bytes[0],
		 (unsigned char)id->bytes[1], (unsigned char)id->bytes[2], (unsigned char)id->bytes[3]);
	if (!want || !table || !strstr(want, name) || t[0] < 16 || t[0] % 8 || t[0] / 8 > CT_SLOTS)
		return table;
	pthread_mutex_lock(&wrap_lock);
	for (int k = 0; k < nwrapped; k++)
		if (wrapped[k].orig == t)
			res = wrapped[k].copy;
	if (res == table && nwrapped < CT_TABLES) {
		int k = nwrapped++;
		uint64_t *c = malloc(t[0]);

		memcpy(c, t, t[0]);
		for (uint64_t i = 1; i < t[0] / 8; i++)
			if (c[i])
				c[i] = (uintptr_t)ct_tramp[k][i];
		wrapped[k].orig = t;
		wrapped[k].copy = c;
		memcpy(wrapped[k].name, name, sizeof(name));
		res = c;
	}
	pthread_mutex_unlock(&wrap_lock);
	return res;
}

EXPORT CUresult cuGetExportTable(const void **table, const CUuuid *id)
{
	CUresult r = real_export(table, id);

	if (r == CUDA_SUCCESS && table)
		*table = wrap_table(id, *table);

	if (ct_on) {
		struct ct_line l = {.len = 0};
		const unsigned char *u = (const unsigned char *)id->bytes;

		put(&l, "%d %lu cuGetExportTable(", gettid(), (unsigned long)atomic_fetch_add(&seq, 1));
		for (int i = 0; i < 16; i++)
			put(&l, "%02x", u[i]);
		put(&l, ") = %d\n", (int)r);
		if (write(log_fd, l.buf, l.len) < 0)
			ct_on = 0;
	}
	return r;
}
