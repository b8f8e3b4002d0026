/* crcuda's libnvidia-ml.so.1: NVML answered from the CUDA driver API instead of the GPU.
 *
 * NVIDIA's NVML opens /dev/nvidia* itself, which would keep a GPU handle in the application process
 * and stop CRIU from dumping it. This library holds no such handle: it dlopens "libcuda.so.1" (under
 * crcuda that is libcrcuda, which answers from crcudad) and maps each query onto driver calls. The
 * entry points are listed in nvml.api; nvml_exports.def (generated from it) declares them all and
 * defines the generated ones (unsupported, empty, alias) at the end of this file. */
#define LOG_PREFIX "nvml: "

#include <ctype.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <cuda.h>

#include "crcuda/log.h"
#include "crcuda/nvml_fwd.h"
#include "nvml_types.h"

#define NVML_EXPORT	 __attribute__((visibility("default")))
#define NVML_MAX_DEVICES 64

/* The documented layouts (x86-64 and aarch64 Linux). */
_Static_assert(sizeof(nvmlPciInfo_t) == 68 && offsetof(nvmlPciInfo_t, domain) == 16 &&
		   offsetof(nvmlPciInfo_t, busId) == 36,
	       "nvmlPciInfo_t layout");
_Static_assert(sizeof(nvmlPciInfo_v1_t) == 52, "legacy nvmlPciInfo_t layout");
_Static_assert(sizeof(nvmlMemory_t) == 24, "nvmlMemory_t layout");
_Static_assert(sizeof(nvmlMemory_v2_t) == 40 && offsetof(nvmlMemory_v2_t, total) == 8,
	       "nvmlMemory_v2_t layout");
_Static_assert(sizeof(nvmlProcessInfo_v1_t) == 16 && sizeof(nvmlProcessInfo_t) == 24,
	       "nvmlProcessInfo layout");
_Static_assert(sizeof(nvmlFieldValue_t) == 40 && offsetof(nvmlFieldValue_t, value) == 32,
	       "nvmlFieldValue_t layout");

/* Every exported function, declared from the table, so each hand-written definition below is checked
 * against its row. */
#define NVML_API(sym, policy, target, ret, params, args) NVML_EXPORT ret sym params;
#include "nvml_exports.def"
#undef NVML_API

/* ---- the driver ---- */

/* The driver functions used, by ABI symbol; the prototypes come from cuda.h. */
#define NVML_CU_FUNCS(X)                                                                                     \
	X(cuInit)                                                                                            \
	X(cuDriverGetVersion)                                                                                \
	X(cuDeviceGet)                                                                                       \
	X(cuDeviceGetCount)                                                                                  \
	X(cuDeviceGetName)                                                                                   \
	X(cuDeviceGetUuid_v2)                                                                                \
	X(cuDeviceTotalMem_v2)                                                                               \
	X(cuDeviceGetAttribute)                                                                              \
	X(cuDeviceCanAccessPeer)                                                                             \
	X(cuDevicePrimaryCtxRetain)                                                                          \
	X(cuDevicePrimaryCtxRelease_v2)                                                                      \
	X(cuCtxPushCurrent_v2)                                                                               \
	X(cuCtxPopCurrent_v2)                                                                                \
	X(cuMemGetInfo_v2)                                                                                   \
	X(cuGetExportTable)

static struct {
#define NVML_CU_MEMBER(f) __typeof__(f) *f;
	NVML_CU_FUNCS(NVML_CU_MEMBER)
#undef NVML_CU_MEMBER
} cu;

struct nvmlDevice_st {
	CUdevice cu;
	unsigned int index;
	unsigned int domain, bus, device;
};

static pthread_mutex_t init_lock = PTHREAD_MUTEX_INITIALIZER;
/* libcrcuda's way to the worker's real NVML; NULL where libcuda.so.1 is NVIDIA's (or the simulated
 * device's), which refuses the table's id. */
static const struct crc_nvml_table *fwd_table;
/* nvmlInit* calls not yet matched by nvmlShutdown; NVML is reference counted. */
static atomic_uint init_count;
static unsigned int dev_count;
static struct nvmlDevice_st devs[NVML_MAX_DEVICES];

/* Resolved once and kept: the application uses the same library, so it is never closed. */
static nvmlReturn_t load_driver(void)
{
	static void *lib;
	Dl_info info;

	if (lib)
		return NVML_SUCCESS;
	lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		pr_warn("cannot load libcuda.so.1: %s", dlerror());
		return NVML_ERROR_DRIVER_NOT_LOADED;
	}
#define NVML_CU_LOAD(f)                                                                                      \
	if (!(cu.f = (__typeof__(f) *)dlsym(lib, #f))) {                                                     \
		pr_warn("libcuda.so.1 has no %s", #f);                                                       \
		dlclose(lib);                                                                                \
		lib = NULL;                                                                                  \
		return NVML_ERROR_DRIVER_NOT_LOADED;                                                         \
	}
	NVML_CU_FUNCS(NVML_CU_LOAD)
#undef NVML_CU_LOAD
	if (dladdr((void *)cu.cuInit, &info) && info.dli_fname)
		pr_info("answering from the driver API of %s", info.dli_fname);
	return NVML_SUCCESS;
}

static nvmlReturn_t from_cu(CUresult r)
{
	switch (r) {
	case CUDA_SUCCESS:
		return NVML_SUCCESS;
	case CUDA_ERROR_INVALID_VALUE:
	case CUDA_ERROR_INVALID_DEVICE:
		return NVML_ERROR_INVALID_ARGUMENT;
	case CUDA_ERROR_NOT_SUPPORTED:
		return NVML_ERROR_NOT_SUPPORTED;
	case CUDA_ERROR_OUT_OF_MEMORY:
		return NVML_ERROR_MEMORY;
	case CUDA_ERROR_NOT_INITIALIZED:
	case CUDA_ERROR_DEINITIALIZED:
		return NVML_ERROR_UNINITIALIZED;
	default:
		return NVML_ERROR_UNKNOWN;
	}
}

static int attr(CUdevice_attribute a, CUdevice d, int *v)
{
	return cu.cuDeviceGetAttribute(v, a, d) == CUDA_SUCCESS ? 0 : -1;
}

static int pci_less(const struct nvmlDevice_st *a, const struct nvmlDevice_st *b)
{
	if (a->domain != b->domain)
		return a->domain < b->domain;
	if (a->bus != b->bus)
		return a->bus < b->bus;
	return a->device < b->device;
}

/* Enumerates the driver's devices in PCI order, as NVML numbers them (CUDA's default order may put
 * the fastest first; CUDA_DEVICE_ORDER=PCI_BUS_ID makes the two agree). */
static nvmlReturn_t enumerate(void)
{
	int n = 0;
	CUresult r = cu.cuDeviceGetCount(&n);

	if (r != CUDA_SUCCESS)
		return from_cu(r);
	if (n > NVML_MAX_DEVICES) {
		pr_warn("the driver reports %d devices; NVML shows the first %d", n, NVML_MAX_DEVICES);
		n = NVML_MAX_DEVICES;
	}
	for (int i = 0; i < n; i++) {
		struct nvmlDevice_st d = {0};
		int domain = 0, bus = 0, device = 0;

		r = cu.cuDeviceGet(&d.cu, i);
		if (r != CUDA_SUCCESS)
			return from_cu(r);
		if (attr(CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, d.cu, &domain) ||
		    attr(CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, d.cu, &bus) ||
		    attr(CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, d.cu, &device))
			return NVML_ERROR_UNKNOWN;
		d.domain = (unsigned)domain;
		d.bus = (unsigned)bus;
		d.device = (unsigned)device;
		/* Insertion sort: a handful of devices. */
		int j = i;
		while (j > 0 && pci_less(&d, &devs[j - 1])) {
			devs[j] = devs[j - 1];
			j--;
		}
		devs[j] = d;
	}
	for (int i = 0; i < n; i++)
		devs[i].index = (unsigned)i;
	dev_count = (unsigned)n;
	return NVML_SUCCESS;
}

static int initialized(void)
{
	return atomic_load(&init_count) > 0;
}

/* The device behind a handle, or NULL for anything that is not one of ours. */
static struct nvmlDevice_st *dev_of(nvmlDevice_t h)
{
	uintptr_t p = (uintptr_t)h, base = (uintptr_t)devs;

	if (p < base || p >= base + dev_count * sizeof(devs[0]) || (p - base) % sizeof(devs[0]))
		return NULL;
	return h;
}

/* The common start of a device query: UNINITIALIZED before nvmlInit, INVALID_ARGUMENT for a bad
 * handle or a NULL output. */
#define DEV_QUERY(h, d, out)                                                                                 \
	struct nvmlDevice_st *d;                                                                             \
	do {                                                                                                 \
		if (!initialized())                                                                          \
			return NVML_ERROR_UNINITIALIZED;                                                     \
		d = dev_of(h);                                                                               \
		if (!d || !(out))                                                                            \
			return NVML_ERROR_INVALID_ARGUMENT;                                                  \
	} while (0)

static nvmlReturn_t copy_str(char *dst, unsigned int len, const char *src)
{
	size_t n = strlen(src);

	if (!dst)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (n + 1 > len)
		return NVML_ERROR_INSUFFICIENT_SIZE;
	memcpy(dst, src, n + 1);
	return NVML_SUCCESS;
}

/* ---- initialisation ---- */

nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
	nvmlReturn_t r = NVML_SUCCESS;
	CUresult c;

	pthread_mutex_lock(&init_lock);
	if (atomic_load(&init_count) > 0)
		goto ok;
	r = load_driver();
	if (r != NVML_SUCCESS)
		goto out;
	c = cu.cuInit(0);
	if (c == CUDA_ERROR_NO_DEVICE) {
		/* With no GPU the NVIDIA kernel driver does not load either: NVML's answer then. */
		if (!(flags & NVML_INIT_FLAG_NO_GPUS)) {
			r = NVML_ERROR_DRIVER_NOT_LOADED;
			goto out;
		}
		dev_count = 0;
		goto ok;
	}
	if (c != CUDA_SUCCESS) {
		pr_warn("cuInit failed: %d", (int)c);
		r = NVML_ERROR_DRIVER_NOT_LOADED;
		goto out;
	}
	r = enumerate();
	if (r != NVML_SUCCESS)
		goto out;
	if (!fwd_table) {
		static const CUuuid id = CRC_NVML_TABLE_ID;
		const void *t = NULL;

		if (cu.cuGetExportTable(&t, &id) == CUDA_SUCCESS && t &&
		    ((const struct crc_nvml_table *)t)->size >= sizeof(struct crc_nvml_table))
			fwd_table = t;
		pr_info("%s", fwd_table ? "sensors, clocks, PCIe, processes: from the daemon's NVML"
					: "not under crcuda: answering from the driver API only");
	}
	if (!dev_count && !(flags & NVML_INIT_FLAG_NO_GPUS)) {
		r = NVML_ERROR_DRIVER_NOT_LOADED;
		goto out;
	}
ok:
	atomic_fetch_add(&init_count, 1);
out:
	pthread_mutex_unlock(&init_lock);
	return r;
}

nvmlReturn_t nvmlInit_v2(void)
{
	return nvmlInitWithFlags(0);
}

nvmlReturn_t nvmlShutdown(void)
{
	nvmlReturn_t r = NVML_SUCCESS;

	pthread_mutex_lock(&init_lock);
	if (atomic_load(&init_count) == 0)
		r = NVML_ERROR_UNINITIALIZED;
	else
		atomic_fetch_sub(&init_count, 1);
	pthread_mutex_unlock(&init_lock);
	return r;
}

/* Our own wording; callers only print these. */
const char *nvmlErrorString(nvmlReturn_t result)
{
	switch (result) {
	case NVML_SUCCESS:
		return "Success";
	case NVML_ERROR_UNINITIALIZED:
		return "Uninitialized";
	case NVML_ERROR_INVALID_ARGUMENT:
		return "Invalid Argument";
	case NVML_ERROR_NOT_SUPPORTED:
		return "Not Supported";
	case NVML_ERROR_NO_PERMISSION:
		return "Insufficient Permissions";
	case NVML_ERROR_ALREADY_INITIALIZED:
		return "Already Initialized";
	case NVML_ERROR_NOT_FOUND:
		return "Not Found";
	case NVML_ERROR_INSUFFICIENT_SIZE:
		return "Insufficient Size";
	case NVML_ERROR_INSUFFICIENT_POWER:
		return "Insufficient External Power";
	case NVML_ERROR_DRIVER_NOT_LOADED:
		return "Driver Not Loaded";
	case NVML_ERROR_TIMEOUT:
		return "Timeout";
	case NVML_ERROR_IRQ_ISSUE:
		return "Interrupt Request Issue";
	case NVML_ERROR_LIBRARY_NOT_FOUND:
		return "NVML Shared Library Not Found";
	case NVML_ERROR_FUNCTION_NOT_FOUND:
		return "Function Not Found";
	case NVML_ERROR_CORRUPTED_INFOROM:
		return "Corrupted infoROM";
	case NVML_ERROR_GPU_IS_LOST:
		return "GPU is lost";
	case NVML_ERROR_RESET_REQUIRED:
		return "GPU requires reset";
	case NVML_ERROR_OPERATING_SYSTEM:
		return "The operating system has blocked the request";
	case NVML_ERROR_LIB_RM_VERSION_MISMATCH:
		return "Driver/library version mismatch";
	case NVML_ERROR_IN_USE:
		return "In use by another client";
	case NVML_ERROR_MEMORY:
		return "Insufficient Memory";
	case NVML_ERROR_NO_DATA:
		return "No data";
	case NVML_ERROR_VGPU_ECC_NOT_SUPPORTED:
		return "vGPU operation not available with ECC enabled";
	case NVML_ERROR_INSUFFICIENT_RESOURCES:
		return "Insufficient resources";
	case NVML_ERROR_FREQ_NOT_SUPPORTED:
		return "Frequency not supported";
	case NVML_ERROR_ARGUMENT_VERSION_MISMATCH:
		return "Argument version mismatch";
	case NVML_ERROR_DEPRECATED:
		return "Deprecated";
	case NVML_ERROR_NOT_READY:
		return "Not ready";
	case NVML_ERROR_GPU_NOT_FOUND:
		return "GPU not found";
	case NVML_ERROR_INVALID_STATE:
		return "Invalid state";
	default:
		return "Unknown Error";
	}
}

/* ---- system queries ---- */

nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *cudaDriverVersion)
{
	if (!initialized())
		return NVML_ERROR_UNINITIALIZED;
	if (!cudaDriverVersion)
		return NVML_ERROR_INVALID_ARGUMENT;
	return from_cu(cu.cuDriverGetVersion(cudaDriverVersion));
}

/* The kernel driver's version ("580.159.04"). The driver API does not tell it: take
 * CRCUDA_NVML_DRIVER_VERSION (crcudactl can set it from the daemon's host), else the local
 * /proc/driver/nvidia/version (procfs, no device handle), else NOT_SUPPORTED rather than a guess. */
static int driver_version(char *buf, size_t len)
{
	const char *env = getenv("CRCUDA_NVML_DRIVER_VERSION");
	char line[512];
	FILE *f;
	int found = 0;

	if (env && *env) {
		snprintf(buf, len, "%s", env);
		return 0;
	}
	f = fopen("/proc/driver/nvidia/version", "re");
	if (!f)
		return -1;
	if (fgets(line, sizeof(line), f) && strstr(line, "NVRM version:")) {
		/* The first word shaped like N.N[.N] is the version, open or proprietary module alike. */
		char *save = NULL;
		for (char *w = strtok_r(line, " \t\n", &save); w && !found;
		     w = strtok_r(NULL, " \t\n", &save)) {
			unsigned a, b;
			char tail;
			if (isdigit((unsigned char)w[0]) && sscanf(w, "%u.%u%c", &a, &b, &tail) >= 2) {
				snprintf(buf, len, "%s", w);
				found = 1;
			}
		}
	}
	fclose(f);
	return found ? 0 : -1;
}

static nvmlReturn_t driver_nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
	char buf[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE];

	if (!initialized())
		return NVML_ERROR_UNINITIALIZED;
	if (!version)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (driver_version(buf, sizeof(buf)))
		return NVML_ERROR_NOT_SUPPORTED;
	return copy_str(version, length, buf);
}

/* NVML's own version is "<CUDA major>.<driver version>" ("13.580.159.04"). */
static nvmlReturn_t driver_nvmlSystemGetNVMLVersion(char *version, unsigned int length)
{
	char drv[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE], buf[NVML_SYSTEM_NVML_VERSION_BUFFER_SIZE + 16];
	int cuda = 0;

	if (!initialized())
		return NVML_ERROR_UNINITIALIZED;
	if (!version)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (driver_version(drv, sizeof(drv)) || cu.cuDriverGetVersion(&cuda) != CUDA_SUCCESS)
		return NVML_ERROR_NOT_SUPPORTED;
	snprintf(buf, sizeof(buf), "%d.%s", cuda / 1000, drv);
	return copy_str(version, length, buf);
}

/* ---- handles ---- */

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount)
{
	if (!initialized())
		return NVML_ERROR_UNINITIALIZED;
	if (!deviceCount)
		return NVML_ERROR_INVALID_ARGUMENT;
	*deviceCount = dev_count;
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
	if (!initialized())
		return NVML_ERROR_UNINITIALIZED;
	if (!device || index >= dev_count)
		return NVML_ERROR_INVALID_ARGUMENT;
	*device = &devs[index];
	return NVML_SUCCESS;
}

/* Accepts domain:bus:device.function (any width, either case) and bus:device.function. */
nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *pciBusId, nvmlDevice_t *device)
{
	unsigned domain = 0, bus, dev, fn;
	int end = 0;

	if (!initialized())
		return NVML_ERROR_UNINITIALIZED;
	if (!pciBusId || !device)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (!(sscanf(pciBusId, "%x:%x:%x.%x%n", &domain, &bus, &dev, &fn, &end) == 4 && !pciBusId[end])) {
		domain = 0;
		end = 0;
		if (!(sscanf(pciBusId, "%x:%x.%x%n", &bus, &dev, &fn, &end) == 3 && !pciBusId[end]))
			return NVML_ERROR_INVALID_ARGUMENT;
	}
	for (unsigned i = 0; i < dev_count; i++) {
		if (devs[i].domain == domain && devs[i].bus == bus && devs[i].device == dev && fn == 0) {
			*device = &devs[i];
			return NVML_SUCCESS;
		}
	}
	return NVML_ERROR_NOT_FOUND;
}

static nvmlReturn_t format_uuid(const struct nvmlDevice_st *d, char *out, size_t len)
{
	CUuuid u;
	const unsigned char *b = (const unsigned char *)u.bytes;
	CUresult r = cu.cuDeviceGetUuid_v2(&u, d->cu);

	if (r != CUDA_SUCCESS)
		return from_cu(r);
	snprintf(out, len, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
		 b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14],
		 b[15]);
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device)
{
	char s[NVML_DEVICE_UUID_BUFFER_SIZE];

	if (!initialized())
		return NVML_ERROR_UNINITIALIZED;
	if (!uuid || !device)
		return NVML_ERROR_INVALID_ARGUMENT;
	for (unsigned i = 0; i < dev_count; i++) {
		if (format_uuid(&devs[i], s, sizeof(s)) == NVML_SUCCESS && !strcasecmp(s, uuid)) {
			*device = &devs[i];
			return NVML_SUCCESS;
		}
	}
	return NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index)
{
	DEV_QUERY(device, d, index);
	*index = d->index;
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int *isMigDevice)
{
	DEV_QUERY(device, d, isMigDevice);
	(void)d;
	*isMigDevice = 0;
	return NVML_SUCCESS;
}

/* ---- device queries ---- */

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
{
	char buf[256];
	CUresult r;

	DEV_QUERY(device, d, name);
	r = cu.cuDeviceGetName(buf, (int)sizeof(buf), d->cu);
	if (r != CUDA_SUCCESS)
		return from_cu(r);
	return copy_str(name, length, buf);
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
	char buf[NVML_DEVICE_UUID_BUFFER_SIZE];
	nvmlReturn_t r;

	DEV_QUERY(device, d, uuid);
	r = format_uuid(d, buf, sizeof(buf));
	return r == NVML_SUCCESS ? copy_str(uuid, length, buf) : r;
}

static void pci_ids(const struct nvmlDevice_st *d, unsigned int *pciDeviceId, unsigned int *pciSubSystemId)
{
	int v;

	/* Both "device id << 16 | vendor id", as NVML reports them; 0 where the driver predates them. */
	*pciDeviceId = attr(CU_DEVICE_ATTRIBUTE_GPU_PCI_DEVICE_ID, d->cu, &v) ? 0 : (unsigned)v;
	*pciSubSystemId = attr(CU_DEVICE_ATTRIBUTE_GPU_PCI_SUBSYSTEM_ID, d->cu, &v) ? 0 : (unsigned)v;
}

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
	DEV_QUERY(device, d, pci);
	memset(pci, 0, sizeof(*pci));
	pci->domain = d->domain;
	pci->bus = d->bus;
	pci->device = d->device;
	pci_ids(d, &pci->pciDeviceId, &pci->pciSubSystemId);
	snprintf(pci->busIdLegacy, sizeof(pci->busIdLegacy), NVML_DEVICE_PCI_BUS_ID_LEGACY_FMT,
		 d->domain & 0xffff, d->bus & 0xff, d->device & 0xff);
	snprintf(pci->busId, sizeof(pci->busId), NVML_DEVICE_PCI_BUS_ID_FMT, d->domain, d->bus & 0xff,
		 d->device & 0xff);
	return NVML_SUCCESS;
}

/* The unversioned symbol keeps the old 52-byte layout: writing the new one would overrun its callers. */
nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t device, nvmlPciInfo_v1_t *pci)
{
	DEV_QUERY(device, d, pci);
	memset(pci, 0, sizeof(*pci));
	pci->domain = d->domain;
	pci->bus = d->bus;
	pci->device = d->device;
	pci_ids(d, &pci->pciDeviceId, &pci->pciSubSystemId);
	snprintf(pci->busId, sizeof(pci->busId), NVML_DEVICE_PCI_BUS_ID_LEGACY_FMT, d->domain & 0xffff,
		 d->bus & 0xff, d->device & 0xff);
	return NVML_SUCCESS;
}

/* The kernel driver's minor number (N of /dev/nvidiaN), from procfs where the GPU is local; elsewhere
 * (a remote daemon, the simulated device) the NVML index stands in. No device node is opened. */
nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int *minorNumber)
{
	char path[128], line[256];
	FILE *f;
	int found = 0;

	DEV_QUERY(device, d, minorNumber);
	snprintf(path, sizeof(path), "/proc/driver/nvidia/gpus/%04x:%02x:%02x.0/information", d->domain,
		 d->bus & 0xff, d->device & 0xff);
	f = fopen(path, "re");
	if (f) {
		while (!found && fgets(line, sizeof(line), f))
			found = sscanf(line, "Device Minor: %u", minorNumber) == 1;
		fclose(f);
	}
	if (!found)
		*minorNumber = d->index;
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major, int *minor)
{
	DEV_QUERY(device, d, major && minor);
	if (attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d->cu, major) ||
	    attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d->cu, minor))
		return NVML_ERROR_UNKNOWN;
	return NVML_SUCCESS;
}

/* CUcomputemode and nvmlComputeMode_t share their values. */
nvmlReturn_t nvmlDeviceGetComputeMode(nvmlDevice_t device, nvmlComputeMode_t *mode)
{
	int v;

	DEV_QUERY(device, d, mode);
	if (attr(CU_DEVICE_ATTRIBUTE_COMPUTE_MODE, d->cu, &v))
		return NVML_ERROR_UNKNOWN;
	*mode = (nvmlComputeMode_t)v;
	return NVML_SUCCESS;
}

/* The driver reports the current ECC state only; pending is taken to be the same. */
static nvmlReturn_t driver_nvmlDeviceGetEccMode(nvmlDevice_t device, nvmlEnableState_t *current,
						nvmlEnableState_t *pending)
{
	int v;

	DEV_QUERY(device, d, current && pending);
	if (attr(CU_DEVICE_ATTRIBUTE_ECC_ENABLED, d->cu, &v))
		return NVML_ERROR_UNKNOWN;
	*current = *pending = v ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
	return NVML_SUCCESS;
}

/* The driver's peak clocks (kHz); it has no current clock and no video clock. */
static nvmlReturn_t driver_nvmlDeviceGetMaxClockInfo(nvmlDevice_t device, nvmlClockType_t type,
						     unsigned int *clock)
{
	CUdevice_attribute a;
	int khz;

	DEV_QUERY(device, d, clock);
	switch (type) {
	case NVML_CLOCK_GRAPHICS:
	case NVML_CLOCK_SM:
		a = CU_DEVICE_ATTRIBUTE_CLOCK_RATE;
		break;
	case NVML_CLOCK_MEM:
		a = CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE;
		break;
	case NVML_CLOCK_VIDEO:
		return NVML_ERROR_NOT_SUPPORTED;
	default:
		return NVML_ERROR_INVALID_ARGUMENT;
	}
	if (attr(a, d->cu, &khz) || khz <= 0)
		return NVML_ERROR_NOT_SUPPORTED;
	*clock = (unsigned)khz / 1000;
	return NVML_SUCCESS;
}

/* cuMemGetInfo needs a current context. The primary context is retained and pushed, then popped and
 * released, so the application's current context and the primary context's lifetime are as they
 * were. Where the application holds no primary context this creates and destroys one. */
static nvmlReturn_t mem_info(const struct nvmlDevice_st *d, unsigned long long *total,
			     unsigned long long *free)
{
	size_t tot = 0, fr = 0, ctx_total = 0;
	CUcontext ctx = NULL, popped = NULL;
	CUresult r;

	r = cu.cuDeviceTotalMem_v2(&tot, d->cu);
	if (r != CUDA_SUCCESS)
		return from_cu(r);
	r = cu.cuDevicePrimaryCtxRetain(&ctx, d->cu);
	if (r != CUDA_SUCCESS)
		return from_cu(r);
	r = cu.cuCtxPushCurrent_v2(ctx);
	if (r == CUDA_SUCCESS) {
		r = cu.cuMemGetInfo_v2(&fr, &ctx_total);
		cu.cuCtxPopCurrent_v2(&popped);
	}
	cu.cuDevicePrimaryCtxRelease_v2(d->cu);
	if (r != CUDA_SUCCESS)
		return from_cu(r);
	*total = tot;
	*free = fr < tot ? fr : tot;
	return NVML_SUCCESS;
}

static nvmlReturn_t driver_nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
	unsigned long long total, free;
	nvmlReturn_t r;

	DEV_QUERY(device, d, memory);
	r = mem_info(d, &total, &free);
	if (r != NVML_SUCCESS)
		return r;
	memory->total = total;
	memory->free = free;
	memory->used = total - free;
	return NVML_SUCCESS;
}

/* The driver does not split off memory reserved by the system: reserved is 0 and counted in used. */
static nvmlReturn_t driver_nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
	unsigned long long total, free;
	nvmlReturn_t r;

	DEV_QUERY(device, d, memory);
	if (memory->version != nvmlMemory_v2)
		return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
	r = mem_info(d, &total, &free);
	if (r != NVML_SUCCESS)
		return r;
	memory->total = total;
	memory->reserved = 0;
	memory->free = free;
	memory->used = total - free;
	return NVML_SUCCESS;
}

/* Read and write from cuDeviceCanAccessPeer (a device always reaches itself); NVLink, atomics and
 * the rest are not visible through the driver API: NOT_SUPPORTED status, which callers treat as
 * "no such path". */
static nvmlReturn_t driver_nvmlDeviceGetP2PStatus(nvmlDevice_t device1, nvmlDevice_t device2,
						  nvmlGpuP2PCapsIndex_t p2pIndex,
						  nvmlGpuP2PStatus_t *p2pStatus)
{
	struct nvmlDevice_st *d2;
	int can = 0;
	CUresult r;

	DEV_QUERY(device1, d1, p2pStatus);
	d2 = dev_of(device2);
	if (!d2 || (unsigned)p2pIndex > NVML_P2P_CAPS_INDEX_UNKNOWN)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (p2pIndex != NVML_P2P_CAPS_INDEX_READ && p2pIndex != NVML_P2P_CAPS_INDEX_WRITE) {
		*p2pStatus = NVML_P2P_STATUS_NOT_SUPPORTED;
		return NVML_SUCCESS;
	}
	if (d1 == d2) {
		*p2pStatus = NVML_P2P_STATUS_OK;
		return NVML_SUCCESS;
	}
	r = cu.cuDeviceCanAccessPeer(&can, d1->cu, d2->cu);
	if (r != CUDA_SUCCESS)
		return from_cu(r);
	*p2pStatus = can ? NVML_P2P_STATUS_OK : NVML_P2P_STATUS_NOT_SUPPORTED;
	return NVML_SUCCESS;
}

/* No field is known: the call succeeds and each value says NOT_SUPPORTED, as NVML does for a field a
 * device lacks (NCCL reads NVLink fields this way). */
static nvmlReturn_t driver_nvmlDeviceGetFieldValues(nvmlDevice_t device, int valuesCount,
						    nvmlFieldValue_t *values)
{
	DEV_QUERY(device, d, values || valuesCount == 0);
	(void)d;
	if (valuesCount < 0)
		return NVML_ERROR_INVALID_ARGUMENT;
	for (int i = 0; i < valuesCount; i++) {
		values[i].timestamp = 0;
		values[i].latencyUsec = 0;
		values[i].nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
	}
	return NVML_SUCCESS;
}

/* ---- forwarded entry points ---- */

/* Sends f to the worker's NVML. Returns false where nothing answered it there (not under crcuda, the
 * daemon has no NVML or not this function, the daemon gone): the caller's fallback answers then.
 * Otherwise *r is the real NVML's answer and the caller's buffers hold what it wrote. */
static bool forward(const struct crc_nvml_fn *f, const union crc_nvml_arg *a, nvmlReturn_t *r)
{
	char uuid[CRC_NVML_PARAMS_MAX][NVML_DEVICE_UUID_V2_BUFFER_SIZE];
	union crc_nvml_arg w[CRC_NVML_PARAMS_MAX];
	size_t lens[CRC_NVML_PARAMS_MAX] = {0}, req_len = CRC_NVML_NAME_MAX + 4, cap = 16, got = 0;
	uint8_t *req = NULL, *reply = NULL; /* reply: 8 bytes of header and 8 of padding, then buffers */
	int32_t ret;
	uint32_t worker_pid;
	int res;

	if (!initialized()) {
		*r = NVML_ERROR_UNINITIALIZED;
		return true;
	}
	if (!fwd_table)
		return false;
	for (unsigned i = 0; i < f->n; i++) {
		const struct crc_nvml_param *p = &f->params[i];

		w[i] = a[i];
		if (p->kind == CRC_NVML_DEV) {
			struct nvmlDevice_st *d = dev_of(a[i].p);

			if (!d || format_uuid(d, uuid[i], sizeof(uuid[i])) != NVML_SUCCESS) {
				*r = NVML_ERROR_INVALID_ARGUMENT;
				return true;
			}
			w[i].p = uuid[i];
			req_len += CRC_NVML_UUID_BYTES;
			continue;
		}
		if (p->kind == CRC_NVML_VAL) {
			req_len += sizeof(uint64_t);
			continue;
		}
		/* A count given by value that the wire cannot carry (or a negative one) is the caller's
		 * error; an in-out count is a capacity, and a smaller one is as good. */
		if (p->kind == CRC_NVML_ARR && !p->count_is_ptr &&
		    (a[p->ref].u > INT32_MAX || a[p->ref].u > CRC_NVML_BYTES_MAX / p->size)) {
			*r = NVML_ERROR_INVALID_ARGUMENT;
			return true;
		}
		lens[i] = a[i].p ? crc_nvml_param_bytes(f, a, i) : 0;
		req_len += 4 + lens[i];
		cap += 4 + lens[i];
	}
	req = malloc(req_len);
	reply = malloc(cap);
	if (!req || !reply) {
		free(req);
		free(reply);
		*r = NVML_ERROR_MEMORY;
		return true;
	}
	req_len = crc_nvml_encode_req(f, w, req, req_len);
	res = req_len ? fwd_table->call(req, req_len, reply, cap, &got) : CUDA_ERROR_INVALID_VALUE;
	if (res == CUDA_SUCCESS && crc_nvml_decode_reply(f, a, reply, got, &ret, &worker_pid))
		res = CUDA_ERROR_UNKNOWN;
	free(req);
	free(reply);
	if (res != CUDA_SUCCESS) {
		static atomic_flag logged = ATOMIC_FLAG_INIT;

		if (!atomic_flag_test_and_set(&logged))
			pr_info("%s: the daemon did not answer (CUDA error %d): answering here", f->name,
				res);
		return false;
	}
	if (ret == NVML_ERROR_FUNCTION_NOT_FOUND)
		return false; /* the daemon's NVML is older than this function */
	*r = (nvmlReturn_t)ret;
	if (f->flags & CRC_NVML_F_PID) {
		/* The worker's use of the GPU is the application's: it shows under the caller's pid. */
		for (unsigned i = 0; i < f->n; i++) {
			const struct crc_nvml_param *p = &f->params[i];
			uint64_t n;

			if (p->kind != CRC_NVML_ARR || !a[i].p)
				continue;
			n = crc_nvml_arr_count(f, a, i);
			if (n > lens[i] / p->size)
				n = lens[i] / p->size;
			for (uint64_t e = 0; e < n; e++) {
				uint8_t *pid_at = (uint8_t *)a[i].p + e * p->size;
				unsigned int pid;

				memcpy(&pid, pid_at, sizeof(pid));
				if (pid == worker_pid) {
					pid = (unsigned int)getpid();
					memcpy(pid_at, &pid, sizeof(pid));
				}
			}
		}
	}
	return true;
}

/* ---- generated entry points ---- */

static nvmlReturn_t unsupported(const char *name, atomic_flag *logged)
{
	if (!initialized())
		return NVML_ERROR_UNINITIALIZED;
	if (!atomic_flag_test_and_set(logged))
		pr_info("%s is not supported under crcuda: NVML_ERROR_NOT_SUPPORTED", name);
	return NVML_ERROR_NOT_SUPPORTED;
}

/* The GPU's processes are the daemon's; the application's own use is not visible here either. */
static nvmlReturn_t no_processes(nvmlDevice_t device, unsigned int *infoCount)
{
	DEV_QUERY(device, d, infoCount);
	(void)d;
	*infoCount = 0;
	return NVML_SUCCESS;
}

#define NVML_API(sym, policy, target, ret, params, args) NVML_API_##policy(sym, target, ret, params, args)
#define NVML_API_IMPLEMENTED(sym, target, ret, params, args)
#define NVML_API_UNSUPPORTED(sym, target, ret, params, args)                                                 \
	ret sym params                                                                                       \
	{                                                                                                    \
		static atomic_flag logged = ATOMIC_FLAG_INIT;                                                \
		return unsupported(#sym, &logged);                                                           \
	}
#define NVML_API_EMPTY(sym, target, ret, params, args)                                                       \
	ret sym params                                                                                       \
	{                                                                                                    \
		return no_processes(device, infoCount);                                                      \
	}
#define NVML_API_ALIAS(sym, target, ret, params, args)                                                       \
	ret sym params                                                                                       \
	{                                                                                                    \
		return target args;                                                                          \
	}
#define NVML_UNPAREN(...) __VA_ARGS__
#define NVML_FWD(sym, fallback, flags, ret, params, args, desc, pack, call)                                  \
	static const struct crc_nvml_param sym##_params[] = {NVML_UNPAREN desc};                             \
	static const struct crc_nvml_fn sym##_fwd = {#sym, sym##_params,                                     \
						     sizeof(sym##_params) / sizeof(sym##_params[0]), flags}; \
	ret sym params                                                                                       \
	{                                                                                                    \
		const union crc_nvml_arg a[] = {NVML_UNPAREN pack};                                          \
		nvmlReturn_t r;                                                                              \
                                                                                                             \
		if (forward(&sym##_fwd, a, &r))                                                              \
			return r;                                                                            \
		NVML_FALLBACK_##fallback(sym, args)                                                          \
	}
#define NVML_FALLBACK_NONE(sym, args)                                                                        \
	static atomic_flag logged = ATOMIC_FLAG_INIT;                                                        \
	return unsupported(#sym, &logged);
#define NVML_FALLBACK_DRIVER(sym, args) return driver_##sym args;
#define NVML_FALLBACK_EMPTY(sym, args)	return no_processes(device, infoCount);
#define NVML_API_FORWARD(sym, target, ret, params, args)
/* Generated stubs ignore their arguments. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
#include "nvml_exports.def"
#pragma GCC diagnostic pop
