/* Hooks: initialisation, entry-point lookup, export tables, contexts. The context stack of each
 * thread lives here; every request carries the current context and the daemon makes it current. */
#define LOG_PREFIX "libcrcuda: "
#include <string.h>
#include <unistd.h>

#include "client.h"
#include "hooks.h"
#include "crcuda/log.h"
#include "crcuda/nvml_fwd.h"
#ifdef CRC_HAVE_EXPORT_TABLES
#include "export_tables.h"
#endif

extern void *const crc_cu_exports[CRC_CU_COUNT];

/* Primary contexts: the client keeps the retain count and flags (cuDevicePrimaryCtxGetState is hot);
 * the daemon retains the real one on the session's first use. */
static struct {
	int refs;
	unsigned flags;
} primary[CRC_MAX_DEVICES];
static pthread_mutex_t primary_lock = PTHREAD_MUTEX_INITIALIZER;

void crc_primary_state(CUdevice dev, unsigned *flags, int *active)
{
	pthread_mutex_lock(&primary_lock);
	*flags = primary[dev].flags;
	*active = primary[dev].refs > 0;
	pthread_mutex_unlock(&primary_lock);
}

/* A stream's id. The special handles (0, legacy, per-thread) name a context's default stream, which
 * the driver's cuStreamGetId does not answer for when the call comes through the daemon (its own
 * default streams are not the application's; CUDA_ERROR_INVALID_HANDLE, seen on the H200): they
 * get ids of their own, stable per context (and per thread for the per-thread stream), with the top
 * bit set so they never equal a real stream's. */
static CUresult default_stream_id(uint64_t ctx, bool per_thread, unsigned long long *id)
{
	if (!ctx)
		return CUDA_ERROR_INVALID_CONTEXT;
	*id = 1ull << 63 | (uint64_t)crc_vhandle_index(ctx) << 32 |
	      (per_thread ? ((uint64_t)(gettid() & 0x3fffffff) << 2 | 2) : 1);
	return CUDA_SUCCESS;
}

CUresult crc_hook_cuStreamGetId(CUstream hStream, unsigned long long *streamId)
{
	uintptr_t v = (uintptr_t)hStream;

	if (!streamId)
		return CUDA_ERROR_INVALID_VALUE;
	if (v >= 3)
		return crc_fwd_cuStreamGetId(hStream, streamId);
	return default_stream_id(crc_current_ctx(), v == 2 || (v == 0 && crc_self()->ptds), streamId);
}

#ifdef CRC_HAVE_EXPORT_TABLES
static CUresult env_primary_ctx(CUdevice dev, CUcontext *out)
{
	if (dev < 0 || (unsigned)dev >= crc_client.info.dev_count)
		return CUDA_ERROR_INVALID_DEVICE;
	*out = (CUcontext)(uintptr_t)crc_client.info.primary_ctx[dev];
	return CUDA_SUCCESS;
}

static CUresult env_current_ctx(CUcontext *out)
{
	*out = (CUcontext)(uintptr_t)crc_current_ctx();
	return CUDA_SUCCESS;
}

static CUresult env_ctx_id(CUcontext ctx, unsigned long long *id)
{
	return crc_fwd_cuCtxGetId(ctx, id);
}

/* cuBLASLt's table: the same, with the context given for the special handles. */
static CUresult env_stream_id(CUcontext ctx, CUstream stream, int per_thread, unsigned long long *id)
{
	if ((uintptr_t)stream >= 3)
		return crc_hook_cuStreamGetId(stream, id);
	return default_stream_id(ctx ? (uintptr_t)ctx : crc_current_ctx(),
				 per_thread || stream == CU_STREAM_PER_THREAD, id);
}

static CUresult env_driver_version(int *version)
{
	*version = crc_client.info.driver_version;
	return CUDA_SUCCESS;
}

static CUresult env_device_count(int *count)
{
	*count = (int)crc_client.info.dev_count;
	return CUDA_SUCCESS;
}

static CUresult env_device_identity(int ordinal, CUuuid *uuid, int *domain, int *bus, int *device)
{
	const struct crc_dev_info *d;

	if (ordinal < 0 || (unsigned)ordinal >= crc_client.info.dev_count)
		return CUDA_ERROR_INVALID_DEVICE;
	d = &crc_client.info.devs[ordinal];
	memcpy(uuid->bytes, d->uuid, sizeof(uuid->bytes));
	*domain = d->attrs[CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID];
	*bus = d->attrs[CU_DEVICE_ATTRIBUTE_PCI_BUS_ID];
	*device = d->attrs[CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID];
	return CUDA_SUCCESS;
}
#endif

CUresult crc_hook_cuInit(unsigned int Flags)
{
	CUresult res;

	if (Flags)
		return CUDA_ERROR_INVALID_VALUE;
	res = crc_ready();
	if (res != CUDA_SUCCESS)
		return res;
	res = (CUresult)crc_client.info.init_result;
	if (res == CUDA_SUCCESS && !__atomic_load_n(&crc_initialized, __ATOMIC_ACQUIRE)) {
#ifdef CRC_HAVE_EXPORT_TABLES
		static const struct crc_export_env env = {
		    .primary_ctx = env_primary_ctx,
		    .current_ctx = env_current_ctx,
		    .ctx_id = env_ctx_id,
		    .driver_version = env_driver_version,
		    .device_count = env_device_count,
		    .device_identity = env_device_identity,
		    .stream_id = env_stream_id,
		    .module_functions = crc_module_functions,
		};
		crc_export_tables_init(&env);
#endif
		__atomic_store_n(&crc_initialized, true, __ATOMIC_RELEASE);
	}
	return res;
}

/* ---- entry points ------------------------------------------------------------------------------- */
CUresult crc_hook_cuGetProcAddress_v2(const char *symbol, void **pfn, int driverVersion, cuuint64_t flags,
				      CUdriverProcAddressQueryResult *symbolFound)
{
	int status, id;

	if (!pfn)
		return CUDA_ERROR_INVALID_VALUE;
	/* Unknown (or empty) symbols: SUCCESS with NULL, and the status says why, as the driver does. A
	 * version newer than ours resolves to our newest variant. */
	id = crc_cu_resolve(symbol, driverVersion, flags, &status);
	*pfn = id < 0 ? NULL : crc_cu_exports[id];
	if (symbolFound)
		*symbolFound = (CUdriverProcAddressQueryResult)status;
	if (id < 0 && symbol && *symbol)
		pr_debug("cuGetProcAddress(%s, %d, %#llx): not found (%d)", symbol, driverVersion,
			 (unsigned long long)flags, status);
	return CUDA_SUCCESS;
}

CUresult crc_hook_cuGetProcAddress(const char *symbol, void **pfn, int driverVersion, cuuint64_t flags)
{
	return crc_hook_cuGetProcAddress_v2(symbol, pfn, driverVersion, flags, NULL);
}

/* crcuda's NVML (nvml/) asks the worker's real NVML through this: one control request, waited for. */
static int nvml_call(const void *req, size_t len, void *reply, size_t cap, size_t *reply_len)
{
	struct crc_call c;
	void *args;
	CUresult res = crc_ctl_begin(&c, CRC_OP_NVML, 0, len, &args);

	if (res != CUDA_SUCCESS)
		return res;
	memcpy(args, req, len);
	res = crc_call_wait(&c, NULL, NULL);
	if (res == CUDA_SUCCESS) {
		if (c.reply_len > cap) {
			res = CUDA_ERROR_UNKNOWN;
		} else {
			memcpy(reply, c.reply, c.reply_len);
			*reply_len = c.reply_len;
		}
	}
	crc_call_end(&c);
	return res;
}

static const struct crc_nvml_table nvml_table = {sizeof(nvml_table), nvml_call};

CUresult crc_hook_cuGetExportTable(const void **ppExportTable, const CUuuid *pExportTableId)
{
	static const CUuuid nvml_id = CRC_NVML_TABLE_ID;

	if (!ppExportTable || !pExportTableId)
		return CUDA_ERROR_INVALID_VALUE;
	if (!memcmp(pExportTableId->bytes, nvml_id.bytes, sizeof(nvml_id.bytes))) {
		*ppExportTable = &nvml_table;
		return CUDA_SUCCESS;
	}
#ifdef CRC_HAVE_EXPORT_TABLES
	return crc_export_table_get(ppExportTable, pExportTableId);
#else
	*ppExportTable = NULL;
	return crc_not_supported(CRC_CU_cuGetExportTable);
#endif
}

/* ---- primary contexts --------------------------------------------------------------------------- */
CUresult crc_check_device(CUdevice dev)
{
	if (!__atomic_load_n(&crc_initialized, __ATOMIC_ACQUIRE))
		return CUDA_ERROR_NOT_INITIALIZED;
	if (dev < 0 || (unsigned)dev >= crc_client.info.dev_count)
		return CUDA_ERROR_INVALID_DEVICE;
	return CUDA_SUCCESS;
}

CUresult crc_hook_cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
	CUresult res = crc_check_device(dev);

	if (res != CUDA_SUCCESS)
		return res;
	if (!pctx)
		return CUDA_ERROR_INVALID_VALUE;
	/* The daemon activates the real primary context now, so errors show here as with the driver. */
	res = crc_fwd_cuDevicePrimaryCtxRetain(pctx, dev);
	if (res == CUDA_SUCCESS) {
		pthread_mutex_lock(&primary_lock);
		primary[dev].refs++;
		pthread_mutex_unlock(&primary_lock);
	}
	return res;
}

/* The daemon keeps the real primary context for the session's lifetime: releasing to zero here
 * only changes what cuDevicePrimaryCtxGetState reports. */
CUresult crc_hook_cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
	CUresult res = crc_check_device(dev);

	if (res != CUDA_SUCCESS)
		return res;
	pthread_mutex_lock(&primary_lock);
	if (primary[dev].refs > 0)
		primary[dev].refs--;
	else
		res = CUDA_ERROR_INVALID_CONTEXT;
	pthread_mutex_unlock(&primary_lock);
	return res;
}

CUresult crc_hook_cuDevicePrimaryCtxRelease(CUdevice dev)
{
	return crc_hook_cuDevicePrimaryCtxRelease_v2(dev);
}

CUresult crc_hook_cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
	CUresult res = crc_check_device(dev);

	if (res != CUDA_SUCCESS)
		return res;
	res = crc_fwd_cuCtxSynchronize();
	pthread_mutex_lock(&primary_lock);
	primary[dev].refs = 0;
	primary[dev].flags = 0;
	pthread_mutex_unlock(&primary_lock);
#ifdef CRC_HAVE_EXPORT_TABLES
	crc_export_ctx_destroyed((CUcontext)(uintptr_t)crc_client.info.primary_ctx[dev]);
#endif
	return res == CRC_CU_DAEMON_GONE ? res : CUDA_SUCCESS;
}

CUresult crc_hook_cuDevicePrimaryCtxReset(CUdevice dev)
{
	return crc_hook_cuDevicePrimaryCtxReset_v2(dev);
}

CUresult crc_hook_cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags)
{
	CUresult res = crc_check_device(dev);

	if (res == CUDA_SUCCESS)
		res = crc_fwd_cuDevicePrimaryCtxSetFlags_v2(dev, flags);
	if (res == CUDA_SUCCESS) {
		pthread_mutex_lock(&primary_lock);
		primary[dev].flags = flags;
		pthread_mutex_unlock(&primary_lock);
	}
	return res;
}

CUresult crc_hook_cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned int flags)
{
	return crc_hook_cuDevicePrimaryCtxSetFlags_v2(dev, flags);
}

/* ---- the context stack -------------------------------------------------------------------------- */
static CUresult check_ctx(CUcontext ctx)
{
	if (!__atomic_load_n(&crc_initialized, __ATOMIC_ACQUIRE))
		return CUDA_ERROR_NOT_INITIALIZED;
	return ctx && !crc_ctx_info((uintptr_t)ctx) ? CUDA_ERROR_INVALID_CONTEXT : CUDA_SUCCESS;
}

CUresult crc_hook_cuCtxSetCurrent(CUcontext ctx)
{
	struct crc_thread *t = crc_self();
	CUresult res = check_ctx(ctx);

	if (res != CUDA_SUCCESS)
		return res;
	if (!ctx) {
		if (t->depth)
			t->depth--;
		return CUDA_SUCCESS;
	}
	if (!t->depth)
		t->depth = 1;
	t->ctx_stack[t->depth - 1] = (uintptr_t)ctx;
	return CUDA_SUCCESS;
}

CUresult crc_hook_cuCtxPushCurrent_v2(CUcontext ctx)
{
	struct crc_thread *t = crc_self();
	CUresult res = check_ctx(ctx);

	if (res != CUDA_SUCCESS)
		return res;
	if (!ctx)
		return CUDA_ERROR_INVALID_VALUE;
	if (t->depth == CRC_CTX_STACK)
		return CUDA_ERROR_OUT_OF_MEMORY;
	t->ctx_stack[t->depth++] = (uintptr_t)ctx;
	return CUDA_SUCCESS;
}

CUresult crc_hook_cuCtxPushCurrent(CUcontext ctx)
{
	return crc_hook_cuCtxPushCurrent_v2(ctx);
}

CUresult crc_hook_cuCtxPopCurrent_v2(CUcontext *pctx)
{
	struct crc_thread *t = crc_self();

	if (!__atomic_load_n(&crc_initialized, __ATOMIC_ACQUIRE))
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!t->depth)
		return CUDA_ERROR_INVALID_CONTEXT;
	t->depth--;
	if (pctx)
		*pctx = (CUcontext)(uintptr_t)t->ctx_stack[t->depth];
	return CUDA_SUCCESS;
}

CUresult crc_hook_cuCtxPopCurrent(CUcontext *pctx)
{
	return crc_hook_cuCtxPopCurrent_v2(pctx);
}

/* ---- explicit contexts -------------------------------------------------------------------------- */
CUresult crc_hook_cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
	CUresult res = crc_check_device(dev);

	if (res != CUDA_SUCCESS)
		return res;
	if (!pctx)
		return CUDA_ERROR_INVALID_VALUE;
	res = crc_fwd_cuCtxCreate_v2(pctx, flags, dev);
	if (res != CUDA_SUCCESS)
		return res;
	crc_ctx_register((uintptr_t)*pctx, dev, flags, false);
	/* The new context becomes current: pushed onto the thread's stack. */
	res = crc_hook_cuCtxPushCurrent_v2(*pctx);
	return res;
}

CUresult crc_hook_cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
	return crc_hook_cuCtxCreate_v2(pctx, flags, dev);
}

CUresult crc_hook_cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *paramsArray, int numParams,
				 unsigned int flags, CUdevice dev)
{
	if (numParams > 0 || paramsArray)
		return crc_not_supported(CRC_CU_cuCtxCreate_v3);
	return crc_hook_cuCtxCreate_v2(pctx, flags, dev);
}

CUresult crc_hook_cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *ctxCreateParams, unsigned int flags,
				 CUdevice dev)
{
	if (ctxCreateParams && (ctxCreateParams->execAffinityParams || ctxCreateParams->cigParams))
		return crc_not_supported(CRC_CU_cuCtxCreate_v4);
	return crc_hook_cuCtxCreate_v2(pctx, flags, dev);
}

CUresult crc_hook_cuCtxDestroy_v2(CUcontext ctx)
{
	struct crc_thread *t = crc_self();
	CUresult res = check_ctx(ctx);

	if (res != CUDA_SUCCESS)
		return res;
	if (!ctx || crc_ctx_info((uintptr_t)ctx)->primary)
		return CUDA_ERROR_INVALID_CONTEXT;
	res = crc_fwd_cuCtxDestroy_v2(ctx);
	if (res != CUDA_SUCCESS)
		return res;
	crc_ctx_forget((uintptr_t)ctx);
#ifdef CRC_HAVE_EXPORT_TABLES
	crc_export_ctx_destroyed(ctx);
#endif
	/* Destroying the current context pops it from this thread's stack. */
	if (t->depth && t->ctx_stack[t->depth - 1] == (uintptr_t)ctx)
		t->depth--;
	return CUDA_SUCCESS;
}

CUresult crc_hook_cuCtxDestroy(CUcontext ctx)
{
	return crc_hook_cuCtxDestroy_v2(ctx);
}

/* The CUDA 2.0 usage count: cuCtxAttach adds one to the current context, cuCtxDetach (of the current
 * context) takes one back, and destroys the context when none is left (a created context starts with
 * its creator's). Counted here; the context is the daemon's as always. */
CUresult crc_hook_cuCtxAttach(CUcontext *pctx, unsigned int flags)
{
	CUcontext cur = NULL;
	struct crc_ctx_info *ci;
	CUresult res = crc_ready();

	if (res != CUDA_SUCCESS)
		return res;
	if (!pctx || flags)
		return CUDA_ERROR_INVALID_VALUE;
	res = crc_local_cuCtxGetCurrent(&cur);
	if (res == CUDA_SUCCESS && (!cur || !(ci = crc_ctx_info((uintptr_t)cur))))
		res = CUDA_ERROR_INVALID_CONTEXT;
	if (res != CUDA_SUCCESS)
		return res;
	ci->attached++;
	*pctx = cur;
	return CUDA_SUCCESS;
}

CUresult crc_hook_cuCtxDetach(CUcontext ctx)
{
	CUcontext cur = NULL;
	struct crc_ctx_info *ci = ctx ? crc_ctx_info((uintptr_t)ctx) : NULL;
	CUresult res = crc_local_cuCtxGetCurrent(&cur);

	if (res != CUDA_SUCCESS)
		return res;
	if (!ci || cur != ctx)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (ci->attached) {
		ci->attached--;
		return CUDA_SUCCESS;
	}
	return crc_hook_cuCtxDestroy_v2(ctx);
}

/* Coredump attributes: value has *size bytes (a bool, an int of flags, a string), NULL asks for the
 * size. The value's bytes go to the worker and come back with the driver's answer written over them;
 * the journal replays the context's and the process's Sets. The driver is the worker's: the default
 * file and pipe names carry the worker's process id, and a dump is written by the worker. */
static CUresult coredump(uint16_t op, CUcoredumpSettings attrib, void *value, size_t *size)
{
	struct crc_call c;
	struct crc_coredump_req *r;
	size_t n = value && size ? (*size < CRC_COREDUMP_MAX ? *size : CRC_COREDUMP_MAX) : 0;
	CUresult res = crc_ready();

	if (res != CUDA_SUCCESS)
		return res;
	/* A string set: its bytes to the NUL (the region may be larger than the string's memory). */
	if (n && (attrib == CU_COREDUMP_FILE || attrib == CU_COREDUMP_PIPE) &&
	    (op == CRC_CU_cuCoredumpSetAttribute || op == CRC_CU_cuCoredumpSetAttributeGlobal) &&
	    strnlen(value, n) < n)
		n = strnlen(value, n) + 1;
	res = crc_call_begin(&c, op, 0, sizeof(*r) + n, (void **)&r);
	if (res != CUDA_SUCCESS)
		return res;
	*r = (struct crc_coredump_req){
	    .attrib = (uint32_t)attrib,
	    .flags = (value ? CRC_COREDUMP_VALUE : 0) | (size ? CRC_COREDUMP_SIZE : 0),
	    .size = size ? *size : 0,
	    .bytes = n,
	};
	if (n)
		memcpy(r + 1, value, n);
	res = crc_call_wait(&c, NULL, NULL);
	if (res == CUDA_SUCCESS && c.reply_len >= 8 + n) {
		uint64_t got;

		memcpy(&got, c.reply, 8);
		if (size && got != (n ? n : *size))
			*size = got;
		if (n)
			memcpy(value, (const uint8_t *)c.reply + 8, n);
	}
	crc_call_end(&c);
	return res;
}

CUresult crc_hook_cuCoredumpGetAttribute(CUcoredumpSettings attrib, void *value, size_t *size)
{
	return coredump(CRC_CU_cuCoredumpGetAttribute, attrib, value, size);
}

CUresult crc_hook_cuCoredumpGetAttributeGlobal(CUcoredumpSettings attrib, void *value, size_t *size)
{
	return coredump(CRC_CU_cuCoredumpGetAttributeGlobal, attrib, value, size);
}

CUresult crc_hook_cuCoredumpSetAttribute(CUcoredumpSettings attrib, void *value, size_t *size)
{
	return coredump(CRC_CU_cuCoredumpSetAttribute, attrib, value, size);
}

CUresult crc_hook_cuCoredumpSetAttributeGlobal(CUcoredumpSettings attrib, void *value, size_t *size)
{
	return coredump(CRC_CU_cuCoredumpSetAttributeGlobal, attrib, value, size);
}

/* Settings the journal will replay: forwarded as they are for now. */
CUresult crc_hook_cuCtxSetLimit(CUlimit limit, size_t value)
{
	return crc_fwd_cuCtxSetLimit(limit, value);
}

CUresult crc_hook_cuCtxSetCacheConfig(CUfunc_cache config)
{
	return crc_fwd_cuCtxSetCacheConfig(config);
}

CUresult crc_hook_cuCtxSetSharedMemConfig(CUsharedconfig config)
{
	return crc_fwd_cuCtxSetSharedMemConfig(config);
}

CUresult crc_hook_cuCtxSetFlags(unsigned int flags)
{
	return crc_fwd_cuCtxSetFlags(flags);
}
