/* LOCAL rows: answered in the client from what the handshake and earlier calls cached, with no round
 * trip (the hot getters of cudart and PyTorch). */
#define LOG_PREFIX "libcrcuda: "
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "client.h"
#include "crcuda/log.h"

bool crc_initialized;

/* Device-level getters need cuInit, as with the driver. */
static CUresult device_ready(CUdevice dev, const struct crc_dev_info **info)
{
	if (!__atomic_load_n(&crc_initialized, __ATOMIC_ACQUIRE))
		return CUDA_ERROR_NOT_INITIALIZED;
	if (crc_client.state != 1)
		return CRC_CU_DAEMON_GONE;
	if (dev < 0 || (unsigned)dev >= crc_client.info.dev_count)
		return CUDA_ERROR_INVALID_DEVICE;
	if (info)
		*info = &crc_client.info.devs[dev];
	return CUDA_SUCCESS;
}

CUresult crc_local_cuDriverGetVersion(int *driverVersion)
{
	CUresult res;

	if (!driverVersion)
		return CUDA_ERROR_INVALID_VALUE;
	res = crc_ready();
	if (res == CUDA_SUCCESS)
		*driverVersion = crc_client.info.driver_version;
	return res;
}

CUresult crc_local_cuDeviceGetCount(int *count)
{
	CUresult res = device_ready(0, NULL);

	if (!count)
		return CUDA_ERROR_INVALID_VALUE;
	if (res == CUDA_ERROR_INVALID_DEVICE)
		res = CUDA_SUCCESS; /* no device at all: count 0 */
	if (res == CUDA_SUCCESS)
		*count = (int)crc_client.info.dev_count;
	return res;
}

CUresult crc_local_cuDeviceGet(CUdevice *device, int ordinal)
{
	CUresult res = device_ready(ordinal, NULL);

	if (!device)
		return CUDA_ERROR_INVALID_VALUE;
	if (res == CUDA_SUCCESS)
		*device = ordinal;
	return res;
}

CUresult crc_local_cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
	const struct crc_dev_info *d;
	CUresult res = device_ready(dev, &d);

	if (res != CUDA_SUCCESS)
		return res;
	if (!pi || attrib <= 0 || attrib >= CU_DEVICE_ATTRIBUTE_MAX || attrib >= CRC_DEV_ATTR_SLOTS)
		return CUDA_ERROR_INVALID_VALUE;
	*pi = d->attrs[attrib];
	return CUDA_SUCCESS;
}

CUresult crc_local_cuDeviceComputeCapability(int *major, int *minor, CUdevice dev)
{
	const struct crc_dev_info *d;
	CUresult res = device_ready(dev, &d);

	if (res != CUDA_SUCCESS)
		return res;
	if (!major || !minor)
		return CUDA_ERROR_INVALID_VALUE;
	*major = d->attrs[CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR];
	*minor = d->attrs[CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR];
	return CUDA_SUCCESS;
}

CUresult crc_local_cuDeviceGetName(char *name, int len, CUdevice dev)
{
	const struct crc_dev_info *d;
	CUresult res = device_ready(dev, &d);

	if (res != CUDA_SUCCESS)
		return res;
	if (!name || len <= 0)
		return CUDA_ERROR_INVALID_VALUE;
	snprintf(name, (size_t)len, "%s", d->name);
	return CUDA_SUCCESS;
}

CUresult crc_local_cuDeviceGetPCIBusId(char *pciBusId, int len, CUdevice dev)
{
	const struct crc_dev_info *d;
	CUresult res = device_ready(dev, &d);

	if (res != CUDA_SUCCESS)
		return res;
	if (!pciBusId || len <= 0)
		return CUDA_ERROR_INVALID_VALUE;
	snprintf(pciBusId, (size_t)len, "%s", d->pci_bus_id);
	return CUDA_SUCCESS;
}

CUresult crc_local_cuDeviceGetByPCIBusId(CUdevice *dev, const char *pciBusId)
{
	CUresult res = device_ready(0, NULL);

	if (res != CUDA_SUCCESS)
		return res;
	if (!dev || !pciBusId)
		return CUDA_ERROR_INVALID_VALUE;
	for (unsigned d = 0; d < crc_client.info.dev_count; d++) {
		const char *id = crc_client.info.devs[d].pci_bus_id;

		/* "0000:65:00.0" also matches "65:00.0" (the domain may be left out). */
		if (!strcasecmp(id, pciBusId) || (strlen(id) > 5 && !strcasecmp(id + 5, pciBusId))) {
			*dev = (CUdevice)d;
			return CUDA_SUCCESS;
		}
	}
	return CUDA_ERROR_INVALID_DEVICE;
}

CUresult crc_local_cuDeviceGetUuid(CUuuid *uuid, CUdevice dev)
{
	const struct crc_dev_info *d;
	CUresult res = device_ready(dev, &d);

	if (res != CUDA_SUCCESS)
		return res;
	if (!uuid)
		return CUDA_ERROR_INVALID_VALUE;
	memcpy(uuid->bytes, d->uuid, sizeof(uuid->bytes));
	return CUDA_SUCCESS;
}

CUresult crc_local_cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev)
{
	return crc_local_cuDeviceGetUuid(uuid, dev);
}

CUresult crc_local_cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
	const struct crc_dev_info *d;
	CUresult res = device_ready(dev, &d);

	if (res != CUDA_SUCCESS)
		return res;
	if (!bytes)
		return CUDA_ERROR_INVALID_VALUE;
	*bytes = d->total_mem;
	return CUDA_SUCCESS;
}

CUresult crc_local_cuDeviceTotalMem(unsigned int *bytes, CUdevice dev)
{
	size_t total;
	CUresult res = crc_local_cuDeviceTotalMem_v2(&total, dev);

	if (res == CUDA_SUCCESS && !bytes)
		return CUDA_ERROR_INVALID_VALUE;
	if (res == CUDA_SUCCESS)
		*bytes = total > 0xffffffffu ? 0xffffffffu : (unsigned)total;
	return res;
}

/* ---- contexts ------------------------------------------------------------------------------------ */
CUresult crc_local_cuCtxGetCurrent(CUcontext *pctx)
{
	if (!pctx)
		return CUDA_ERROR_INVALID_VALUE;
	if (!__atomic_load_n(&crc_initialized, __ATOMIC_ACQUIRE))
		return CUDA_ERROR_NOT_INITIALIZED;
	*pctx = (CUcontext)(uintptr_t)crc_current_ctx();
	return CUDA_SUCCESS;
}

CUresult crc_ctx_device(uint64_t ctx, CUdevice *dev)
{
	struct crc_ctx_info *c;

	if (!ctx)
		ctx = crc_current_ctx();
	if (!ctx)
		return CUDA_ERROR_INVALID_CONTEXT;
	c = crc_ctx_info(ctx);
	if (!c)
		return CUDA_ERROR_INVALID_CONTEXT;
	*dev = c->dev;
	return CUDA_SUCCESS;
}

CUresult crc_local_cuCtxGetDevice(CUdevice *device)
{
	if (!device)
		return CUDA_ERROR_INVALID_VALUE;
	return crc_ctx_device(0, device);
}

CUresult crc_local_cuCtxGetDevice_v2(CUdevice *device, CUcontext ctx)
{
	if (!device)
		return CUDA_ERROR_INVALID_VALUE;
	return crc_ctx_device((uintptr_t)ctx, device);
}

CUresult crc_local_cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active)
{
	CUresult res = device_ready(dev, NULL);

	if (res != CUDA_SUCCESS)
		return res;
	if (!flags || !active)
		return CUDA_ERROR_INVALID_VALUE;
	crc_primary_state(dev, flags, active);
	return CUDA_SUCCESS;
}

/* ---- functions and kernels --------------------------------------------------------------------- */
static CUresult func_attr(int *pi, CUfunction_attribute attrib, uint64_t handle)
{
	struct crc_func_info *f = crc_func_lookup(handle);

	if (!f)
		return CUDA_ERROR_INVALID_HANDLE;
	if (!pi || attrib < 0 || attrib >= CU_FUNC_ATTRIBUTE_MAX || attrib >= CRC_FUNC_ATTR_SLOTS)
		return CUDA_ERROR_INVALID_VALUE;
	*pi = f->attrs[attrib];
	return CUDA_SUCCESS;
}

/* CRCUDA_VERIFY_LOCAL=1 (diagnostics): also ask the daemon, and log where the cached answer differs. */
static bool verify_local(void)
{
	static int v = -1;

	if (v < 0) {
		const char *e = getenv("CRCUDA_VERIFY_LOCAL");
		v = e && *e && strcmp(e, "0");
	}
	return v;
}

static void verify_attr(const char *what, int attrib, int cached, CUresult real_res, int real)
{
	if (real_res != CUDA_SUCCESS || real != cached)
		pr_warn("verify: %s attribute %d: cached %d, daemon %d (result %d)", what, attrib, cached,
			real, (int)real_res);
}

CUresult crc_local_cuFuncGetAttribute(int *pi, CUfunction_attribute attrib, CUfunction hfunc)
{
	CUresult res = func_attr(pi, attrib, (uintptr_t)hfunc);
	int real = 0;

	if (res == CUDA_SUCCESS && verify_local()) {
		/* The call first: the order arguments are evaluated in is unspecified. */
		CUresult real_res = crc_fwd_cuFuncGetAttribute(&real, attrib, hfunc);

		verify_attr("cuFuncGetAttribute", attrib, *pi, real_res, real);
	}
	return res;
}

CUresult crc_local_cuKernelGetAttribute(int *pi, CUfunction_attribute attrib, CUkernel kernel, CUdevice dev)
{
	CUresult res = device_ready(dev, NULL);
	int real = 0;

	if (res == CUDA_SUCCESS)
		res = func_attr(pi, attrib, (uintptr_t)kernel);
	if (res == CUDA_SUCCESS && verify_local()) {
		CUresult real_res = crc_fwd_cuKernelGetAttribute(&real, attrib, kernel, dev);

		verify_attr("cuKernelGetAttribute", attrib, *pi, real_res, real);
	}
	return res;
}

static CUresult func_owner(uint64_t handle, unsigned tag, uint64_t *owner)
{
	struct crc_func_info *f = crc_func_lookup(handle);

	if (!owner)
		return CUDA_ERROR_INVALID_VALUE;
	if (!f || crc_vhandle_tag(f->owner) != tag)
		return CUDA_ERROR_INVALID_HANDLE;
	*owner = f->owner;
	return CUDA_SUCCESS;
}

CUresult crc_local_cuFuncGetModule(CUmodule *hmod, CUfunction hfunc)
{
	return func_owner((uintptr_t)hfunc, CRC_HT_MODULE, (uint64_t *)hmod);
}

CUresult crc_local_cuKernelGetLibrary(CUlibrary *pLib, CUkernel kernel)
{
	return func_owner((uintptr_t)kernel, CRC_HT_LIBRARY, (uint64_t *)pLib);
}

static CUresult func_name(const char **name, uint64_t handle)
{
	struct crc_func_info *f = crc_func_lookup(handle);

	if (!name)
		return CUDA_ERROR_INVALID_VALUE;
	if (!f)
		return CUDA_ERROR_INVALID_HANDLE;
	*name = f->name;
	return CUDA_SUCCESS;
}

CUresult crc_local_cuFuncGetName(const char **name, CUfunction hfunc)
{
	return func_name(name, (uintptr_t)hfunc);
}

CUresult crc_local_cuKernelGetName(const char **name, CUkernel hfunc)
{
	return func_name(name, (uintptr_t)hfunc);
}

static CUresult param_info(uint64_t handle, size_t index, size_t *offset, size_t *size)
{
	struct crc_func_info *f = crc_func_lookup(handle);

	if (!f)
		return CUDA_ERROR_INVALID_HANDLE;
	if (f->nparams == UINT32_MAX)
		return CUDA_ERROR_NOT_SUPPORTED;
	/* The driver ends the list with CUDA_ERROR_INVALID_VALUE. */
	if (index >= f->nparams)
		return CUDA_ERROR_INVALID_VALUE;
	if (offset)
		*offset = f->params[index].offset;
	if (size)
		*size = f->params[index].size;
	return CUDA_SUCCESS;
}

CUresult crc_local_cuFuncGetParamInfo(CUfunction func, size_t paramIndex, size_t *paramOffset,
				      size_t *paramSize)
{
	return param_info((uintptr_t)func, paramIndex, paramOffset, paramSize);
}

CUresult crc_local_cuKernelGetParamInfo(CUkernel kernel, size_t paramIndex, size_t *paramOffset,
					size_t *paramSize)
{
	return param_info((uintptr_t)kernel, paramIndex, paramOffset, paramSize);
}

/* ---- streams ------------------------------------------------------------------------------------- */
/* The context of a stream: its creator's, or the current one for the default streams. */
static CUresult stream_ctx(CUstream s, uint64_t *ctx)
{
	uint64_t v = (uintptr_t)s;
	struct crc_stream_info *si;

	if (v == 0 || v == (uintptr_t)CU_STREAM_LEGACY || v == (uintptr_t)CU_STREAM_PER_THREAD) {
		*ctx = crc_current_ctx();
		return *ctx ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
	}
	si = crc_stream_lookup(v);
	if (!si)
		return CUDA_ERROR_INVALID_HANDLE;
	*ctx = si->ctx;
	return CUDA_SUCCESS;
}

CUresult crc_local_cuStreamGetCtx(CUstream hStream, CUcontext *pctx)
{
	uint64_t ctx;
	CUresult res;

	if (!pctx)
		return CUDA_ERROR_INVALID_VALUE;
	res = stream_ctx(hStream, &ctx);
	if (res == CUDA_SUCCESS)
		*pctx = (CUcontext)(uintptr_t)ctx;
	return res;
}

/* A green context's stream (or the special streams while its CUcontext is current): the green context,
 * and the device's primary context as the context. */
CUresult crc_local_cuStreamGetCtx_v2(CUstream hStream, CUcontext *pctx, CUgreenCtx *pGreenCtx)
{
	struct crc_ctx_info *ci;
	uint64_t ctx;
	CUresult res;

	if (!pctx)
		return CUDA_ERROR_INVALID_VALUE;
	res = stream_ctx(hStream, &ctx);
	if (res != CUDA_SUCCESS)
		return res;
	ci = crc_ctx_info(ctx);
	if (pGreenCtx)
		*pGreenCtx = ci && ci->green ? (CUgreenCtx)(uintptr_t)ci->green : NULL;
	if (ci && ci->green && pGreenCtx)
		ctx = crc_client.info.primary_ctx[ci->dev];
	*pctx = (CUcontext)(uintptr_t)ctx;
	return CUDA_SUCCESS;
}

CUresult crc_local_cuStreamGetGreenCtx(CUstream hStream, CUgreenCtx *phCtx)
{
	CUcontext ctx;

	return phCtx ? crc_local_cuStreamGetCtx_v2(hStream, &ctx, phCtx) : CUDA_ERROR_INVALID_VALUE;
}

CUresult crc_local_cuStreamGetDevice(CUstream hStream, CUdevice *device)
{
	uint64_t ctx;
	CUresult res;

	if (!device)
		return CUDA_ERROR_INVALID_VALUE;
	res = stream_ctx(hStream, &ctx);
	return res == CUDA_SUCCESS ? crc_ctx_device(ctx, device) : res;
}

/* The cached facts of a stream: *si = NULL for the default streams (0, legacy, per-thread). */
static CUresult stream_info(CUstream hStream, struct crc_stream_info **si)
{
	uint64_t v = (uintptr_t)hStream;

	*si = NULL;
	if (v == 0 || v == (uintptr_t)CU_STREAM_LEGACY || v == (uintptr_t)CU_STREAM_PER_THREAD)
		return CUDA_SUCCESS;
	*si = crc_stream_lookup(v);
	return *si ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

CUresult crc_local_cuStreamGetFlags(CUstream hStream, unsigned int *flags)
{
	struct crc_stream_info *si;
	CUresult res;

	if (!flags)
		return CUDA_ERROR_INVALID_VALUE;
	if ((res = stream_info(hStream, &si)) == CUDA_SUCCESS)
		*flags = si ? si->flags : CU_STREAM_DEFAULT;
	return res;
}

CUresult crc_local_cuStreamGetPriority(CUstream hStream, int *priority)
{
	struct crc_stream_info *si;
	CUresult res;

	if (!priority)
		return CUDA_ERROR_INVALID_VALUE;
	if ((res = stream_info(hStream, &si)) == CUDA_SUCCESS)
		*priority = si ? si->priority : 0;
	return res;
}

/* While no capture of this process runs, no stream is capturing: answered here (cuBLAS asks before
 * every GEMM, PyTorch before every allocation); else the daemon knows (captures spread to streams that
 * wait on a captured event). */
CUresult crc_local_cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus *captureStatus)
{
	struct crc_stream_info *si;
	CUresult res;

	if (!captureStatus)
		return CUDA_ERROR_INVALID_VALUE;
	if (crc_capturing())
		return crc_capture_status(hStream, captureStatus);
	if ((res = stream_info(hStream, &si)) == CUDA_SUCCESS)
		*captureStatus = CU_STREAM_CAPTURE_STATUS_NONE;
	return res;
}

static CUresult capture_info(CUstream hStream, CUstreamCaptureStatus *status, cuuint64_t *id, CUgraph *graph,
			     const CUgraphNode **deps, const CUgraphEdgeData **edges, size_t *ndeps)
{
	CUresult res;

	if (crc_capturing())
		return crc_capture_info_remote(hStream, status, id, graph, deps, edges, ndeps);
	res = crc_local_cuStreamIsCapturing(hStream, status);
	if (res != CUDA_SUCCESS)
		return res;
	if (id)
		*id = 0;
	if (graph)
		*graph = NULL;
	if (deps)
		*deps = NULL;
	if (edges)
		*edges = NULL;
	if (ndeps)
		*ndeps = 0;
	return CUDA_SUCCESS;
}

CUresult crc_hook_cuStreamGetCaptureInfo_v2(CUstream hStream, CUstreamCaptureStatus *captureStatus_out,
					    cuuint64_t *id_out, CUgraph *graph_out,
					    const CUgraphNode **dependencies_out, size_t *numDependencies_out)
{
	return capture_info(hStream, captureStatus_out, id_out, graph_out, dependencies_out, NULL,
			    numDependencies_out);
}

CUresult crc_hook_cuStreamGetCaptureInfo_v3(CUstream hStream, CUstreamCaptureStatus *captureStatus_out,
					    cuuint64_t *id_out, CUgraph *graph_out,
					    const CUgraphNode **dependencies_out,
					    const CUgraphEdgeData **edgeData_out, size_t *numDependencies_out)
{
	return capture_info(hStream, captureStatus_out, id_out, graph_out, dependencies_out, edgeData_out,
			    numDependencies_out);
}

/* ---- memory ---------------------------------------------------------------------------------------- */
/* Every allocation is served in 2 MiB granules by the daemon's VA allocator. */
CUresult crc_local_cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop,
						 CUmemAllocationGranularity_flags option)
{
	(void)option;
	if (!granularity || !prop)
		return CUDA_ERROR_INVALID_VALUE;
	*granularity = 2u << 20;
	return CUDA_SUCCESS;
}

CUresult crc_local_cuMemHostGetFlags(unsigned int *pFlags, void *p)
{
	struct crc_pinned *pin = crc_pinned_find(p, 1);

	if (!pFlags)
		return CUDA_ERROR_INVALID_VALUE;
	if (!pin)
		return CUDA_ERROR_INVALID_VALUE;
	*pFlags = pin->flags;
	return CUDA_SUCCESS;
}

/* ---- errors ---------------------------------------------------------------------------------------- */
static const char *error_name(CUresult error)
{
	switch ((int)error) {
#define SIM_ERROR(name, value)                                                                               \
	case value:                                                                                          \
		return #name;
#include "crc_errors.h"
#undef SIM_ERROR
	}
	return NULL;
}

CUresult crc_local_cuGetErrorName(CUresult error, const char **pStr)
{
	const char *name = error_name(error);

	if (!pStr)
		return CUDA_ERROR_INVALID_VALUE;
	*pStr = name;
	return name ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* "CUDA_ERROR_OUT_OF_MEMORY" -> "out of memory": the driver's wording differs, the meaning does not. */
CUresult crc_local_cuGetErrorString(CUresult error, const char **pStr)
{
	static char messages[1024][64];
	static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
	const char *name = error_name(error);

	if (!pStr)
		return CUDA_ERROR_INVALID_VALUE;
	if (!name || (unsigned)error >= 1024) {
		*pStr = NULL;
		return CUDA_ERROR_INVALID_VALUE;
	}
	if (error == CUDA_SUCCESS) {
		*pStr = "no error";
		return CUDA_SUCCESS;
	}
	pthread_mutex_lock(&lock);
	if (!messages[error][0]) {
		const char *src = name + (strncmp(name, "CUDA_ERROR_", 11) ? 5 : 11);
		size_t i;

		for (i = 0; src[i] && i + 1 < sizeof(messages[error]); i++)
			messages[error][i] = src[i] == '_' ? ' ' : (char)(src[i] | 0x20);
		messages[error][i] = '\0';
	}
	*pStr = messages[error];
	pthread_mutex_unlock(&lock);
	return CUDA_SUCCESS;
}
