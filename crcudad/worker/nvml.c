/* CRC_OP_NVML: an NVML query of crcuda's libnvidia-ml.so.1, answered by the real NVML of this worker's
 * host (include/crcuda/nvml_fwd.h). The application's process holds no GPU handle, so the sensors,
 * clocks, PCIe link, processes... of its GPU are asked here, where the GPU is.
 *
 * NVML is loaded at the first query: CRCUDAD_NVML names the library (tests give the simulated
 * device's; "none" turns forwarding off), else libnvidia-ml.so.1. Without one every query answers
 * CUDA_ERROR_NOT_SUPPORTED and the client falls back to what the driver API tells it. */
#define LOG_PREFIX "worker: nvml: "
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "worker.h"
#include "crcuda/log.h"
#include "nvml_fwd_rows.h"

static struct {
	pthread_once_t once;
	void *lib;
	nvmlReturn_t (*by_uuid)(const char *uuid, nvmlDevice_t *device);
	pthread_mutex_t lock;
	void *fn[CRC_NVML_ROWS]; /* resolved at first use; NULL until then */
	bool looked[CRC_NVML_ROWS];
} nvml = {.once = PTHREAD_ONCE_INIT, .lock = PTHREAD_MUTEX_INITIALIZER};

static void nvml_load(void)
{
	const char *path = getenv("CRCUDAD_NVML");
	nvmlReturn_t (*init)(void);
	nvmlReturn_t r;

	if (path && !strcmp(path, "none"))
		return;
	if (!path || !*path)
		path = "libnvidia-ml.so.1";
	nvml.lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!nvml.lib) {
		pr_info("no NVML here (%s): the application's NVML answers from the driver API", dlerror());
		return;
	}
	init = (nvmlReturn_t(*)(void))dlsym(nvml.lib, "nvmlInit_v2");
	nvml.by_uuid =
	    (nvmlReturn_t(*)(const char *, nvmlDevice_t *))dlsym(nvml.lib, "nvmlDeviceGetHandleByUUID");
	r = init && nvml.by_uuid ? init() : NVML_ERROR_FUNCTION_NOT_FOUND;
	if (r != NVML_SUCCESS) {
		pr_warn("%s: nvmlInit_v2 failed (%d): the application's NVML answers from the driver API",
			path, (int)r);
		dlclose(nvml.lib);
		nvml.lib = NULL;
		return;
	}
	pr_info("answering the application's NVML queries with %s", path);
}

static int row_cmp(const void *key, const void *elem)
{
	return strcmp(key, ((const struct crc_nvml_row *)elem)->fn.name);
}

static void *row_fn(size_t i)
{
	void *fn;

	pthread_mutex_lock(&nvml.lock);
	if (!nvml.looked[i]) {
		nvml.fn[i] = dlsym(nvml.lib, crc_nvml_rows[i].fn.name);
		nvml.looked[i] = true;
	}
	fn = nvml.fn[i];
	pthread_mutex_unlock(&nvml.lock);
	return fn;
}

CUresult crc_ctl_nvml(struct crc_session *s, const uint8_t *req, size_t len)
{
	char name[CRC_NVML_NAME_MAX];
	union crc_nvml_arg a[CRC_NVML_PARAMS_MAX];
	void *bufs[CRC_NVML_PARAMS_MAX];
	size_t lens[CRC_NVML_PARAMS_MAX];
	const struct crc_nvml_row *row;
	nvmlReturn_t ret = NVML_SUCCESS;
	void *fn, *out;

	pthread_once(&nvml.once, nvml_load);
	if (!nvml.lib)
		return CUDA_ERROR_NOT_SUPPORTED;
	if (crc_nvml_req_name(req, len, name))
		return CUDA_ERROR_INVALID_VALUE;
	row = bsearch(name, crc_nvml_rows, CRC_NVML_ROWS, sizeof(crc_nvml_rows[0]), row_cmp);
	if (!row)
		return CUDA_ERROR_NOT_FOUND; /* a client newer than this worker: it answers itself */
	if (crc_nvml_decode_req(&row->fn, req, len, a, bufs, lens))
		return CUDA_ERROR_INVALID_VALUE;
	fn = row_fn((size_t)(row - crc_nvml_rows));
	if (!fn)
		ret = NVML_ERROR_FUNCTION_NOT_FOUND;
	/* Devices travel as UUIDs: the same GPU whatever order either side numbers them in. One this NVML
	 * does not know (the simulated device on a GPU host) is answered by the client from the driver. */
	for (unsigned i = 0; i < row->fn.n; i++) {
		nvmlDevice_t h;

		if (row->fn.params[i].kind != CRC_NVML_DEV)
			continue;
		if (nvml.by_uuid(a[i].p, &h) != NVML_SUCCESS) {
			for (unsigned j = 0; j < CRC_NVML_PARAMS_MAX; j++)
				free(bufs[j]);
			return CUDA_ERROR_NOT_FOUND;
		}
		a[i].p = h;
	}
	if (ret == NVML_SUCCESS)
		ret = row->invoke(fn, a);
	out = crc_out(s, crc_nvml_reply_bytes(&row->fn, a, lens));
	if (out)
		crc_nvml_encode_reply(&row->fn, a, lens, (int32_t)ret, (uint32_t)getpid(), out);
	for (unsigned i = 0; i < CRC_NVML_PARAMS_MAX; i++)
		free(bufs[i]);
	return out ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}
