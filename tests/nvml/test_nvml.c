/* crcuda's libnvidia-ml.so.1 against the driver it answers from: dlopens the library given on the
 * command line and libcuda.so.1 from LD_LIBRARY_PATH (the simulated device in CI, libcrcuda under the
 * layer on the GPU machine) and checks NVML's answers against the driver's own, then that the process
 * holds no /dev/nvidia* descriptor or mapping.
 *
 * usage: test_nvml LIBNVML [--script check-no-dev-nvidia.sh] [--no-devices] */
#include <ctype.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda.h>

#include "check.h"
#include "nvml_types.h"

/* One pointer per exported function, typed from the table. */
static struct {
#define NVML_API(sym, policy, target, ret, params, args) ret(*sym) params;
#include "nvml_exports.def"
#undef NVML_API
} nv;

#define CU_FUNCS(X)                                                                                          \
	X(cuInit)                                                                                            \
	X(cuDriverGetVersion)                                                                                \
	X(cuDeviceGet)                                                                                       \
	X(cuDeviceGetCount)                                                                                  \
	X(cuDeviceGetName)                                                                                   \
	X(cuDeviceGetUuid_v2)                                                                                \
	X(cuDeviceTotalMem_v2)                                                                               \
	X(cuDeviceGetAttribute)                                                                              \
	X(cuDeviceGetPCIBusId)                                                                               \
	X(cuDeviceCanAccessPeer)                                                                             \
	X(cuDevicePrimaryCtxRetain)                                                                          \
	X(cuDevicePrimaryCtxRelease_v2)                                                                      \
	X(cuDevicePrimaryCtxGetState)                                                                        \
	X(cuCtxGetCurrent)                                                                                   \
	X(cuCtxSetCurrent)                                                                                   \
	X(cuMemAlloc_v2)                                                                                     \
	X(cuMemFree_v2)

static struct {
#define CU_MEMBER(f) __typeof__(f) *f;
	CU_FUNCS(CU_MEMBER)
#undef CU_MEMBER
} cu;

#define CU_OK(call) CHECK_EQ_INT((call), CUDA_SUCCESS)
#define NV_OK(call) CHECK_EQ_INT((call), NVML_SUCCESS)

struct pci {
	unsigned domain, bus, device, function;
};

static struct pci parse_pci(const char *s)
{
	struct pci p = {0};

	CHECK(sscanf(s, "%x:%x:%x.%x", &p.domain, &p.bus, &p.device, &p.function) == 4);
	return p;
}

static void load(const char *libnvml)
{
	void *h = dlopen(libnvml, RTLD_NOW | RTLD_LOCAL);
	void *c = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);

	if (!h || !c) {
		fprintf(stderr, "dlopen: %s\n", dlerror());
		exit(1);
	}
	/* Every row of the table is exported. */
#define NVML_API(sym, policy, target, ret, params, args)                                                     \
	nv.sym = (ret(*) params)dlsym(h, #sym);                                                              \
	if (!nv.sym) {                                                                                       \
		fprintf(stderr, "%s is not exported\n", #sym);                                               \
		exit(1);                                                                                     \
	}
#include "nvml_exports.def"
#undef NVML_API
#define CU_LOAD(f) CHECK((cu.f = (__typeof__(f) *)dlsym(c, #f)) != NULL);
	CU_FUNCS(CU_LOAD)
#undef CU_LOAD
}

static void check_uninitialized(void)
{
	unsigned n;
	int v;
	nvmlDevice_t d;
	unsigned t;

	CHECK_EQ_INT(nv.nvmlShutdown(), NVML_ERROR_UNINITIALIZED);
	CHECK_EQ_INT(nv.nvmlDeviceGetCount_v2(&n), NVML_ERROR_UNINITIALIZED);
	CHECK_EQ_INT(nv.nvmlDeviceGetCount(&n), NVML_ERROR_UNINITIALIZED);
	CHECK_EQ_INT(nv.nvmlDeviceGetHandleByIndex_v2(0, &d), NVML_ERROR_UNINITIALIZED);
	CHECK_EQ_INT(nv.nvmlSystemGetCudaDriverVersion_v2(&v), NVML_ERROR_UNINITIALIZED);
	CHECK_EQ_INT(nv.nvmlDeviceGetTemperature(NULL, 0, &t), NVML_ERROR_UNINITIALIZED);
	CHECK_EQ_INT(nv.nvmlDeviceGetComputeRunningProcesses(NULL, &n, NULL), NVML_ERROR_UNINITIALIZED);
	CHECK_EQ_STR(nv.nvmlErrorString(NVML_ERROR_NOT_SUPPORTED), "Not Supported");
	CHECK(nv.nvmlErrorString((nvmlReturn_t)12345) != NULL);
}

/* NVML's numbering is PCI order; find the driver's device at the same address. */
static CUdevice cu_device_at(const nvmlPciInfo_t *pci)
{
	int n;
	char bus[64];

	CU_OK(cu.cuDeviceGetCount(&n));
	for (int i = 0; i < n; i++) {
		CUdevice d;
		CU_OK(cu.cuDeviceGet(&d, i));
		CU_OK(cu.cuDeviceGetPCIBusId(bus, sizeof(bus), d));
		struct pci p = parse_pci(bus);
		if (p.domain == pci->domain && p.bus == pci->bus && p.device == pci->device)
			return d;
	}
	CHECK(!"no driver device at NVML's PCI address");
	return -1;
}

static void check_memory(nvmlDevice_t h, CUdevice d)
{
	nvmlMemory_t m;
	nvmlMemory_v2_t m2 = {0};
	size_t total;
	CUcontext ctx, cur;
	CUdeviceptr p;
	unsigned flags;
	int active;

	CU_OK(cu.cuDeviceTotalMem_v2(&total, d));
	/* No current context before: none after, and no primary context left behind. */
	CU_OK(cu.cuCtxSetCurrent(NULL));
	NV_OK(nv.nvmlDeviceGetMemoryInfo(h, &m));
	CHECK_EQ_INT(m.total, total);
	CHECK(m.free <= m.total);
	CHECK_EQ_INT(m.used, m.total - m.free);
	CU_OK(cu.cuCtxGetCurrent(&cur));
	CHECK(cur == NULL);
	CU_OK(cu.cuDevicePrimaryCtxGetState(d, &flags, &active));
	CHECK_EQ_INT(active, 0);

	CHECK_EQ_INT(nv.nvmlDeviceGetMemoryInfo_v2(h, &m2), NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
	m2.version = nvmlMemory_v2;
	CHECK_EQ_INT(m2.version, 0x02000028);
	NV_OK(nv.nvmlDeviceGetMemoryInfo_v2(h, &m2));
	CHECK_EQ_INT(m2.total, total);
	CHECK_EQ_INT(m2.reserved, 0);
	CHECK_EQ_INT(m2.used, m2.total - m2.free);

	/* The application's own context stays current, and its allocation shows as used. */
	CU_OK(cu.cuDevicePrimaryCtxRetain(&ctx, d));
	CU_OK(cu.cuCtxSetCurrent(ctx));
	CU_OK(cu.cuMemAlloc_v2(&p, 64 << 20));
	NV_OK(nv.nvmlDeviceGetMemoryInfo(h, &m));
	CU_OK(cu.cuCtxGetCurrent(&cur));
	CHECK(cur == ctx);
	CU_OK(cu.cuDevicePrimaryCtxGetState(d, &flags, &active));
	CHECK_EQ_INT(active, 1);
	CHECK(m.used >= (64ull << 20));
	CU_OK(cu.cuMemFree_v2(p));
	CU_OK(cu.cuCtxSetCurrent(NULL));
	CU_OK(cu.cuDevicePrimaryCtxRelease_v2(d));
}

static void check_device(unsigned i, unsigned count)
{
	nvmlDevice_t h, h2;
	nvmlPciInfo_t pci;
	unsigned char legacy[sizeof(nvmlPciInfo_t)];
	nvmlPciInfo_v1_t *v1 = (nvmlPciInfo_v1_t *)legacy;
	char name[NVML_DEVICE_NAME_BUFFER_SIZE], cname[256], uuid[NVML_DEVICE_UUID_BUFFER_SIZE], want[80],
	    bus[64], lower[64];
	unsigned idx, u, n;
	int major, minor, v;
	CUdevice d;
	CUuuid cu_uuid;

	NV_OK(nv.nvmlDeviceGetHandleByIndex_v2(i, &h));
	NV_OK(nv.nvmlDeviceGetHandleByIndex(i, &h2));
	CHECK(h == h2);
	NV_OK(nv.nvmlDeviceGetIndex(h, &idx));
	CHECK_EQ_INT(idx, i);

	/* PCI: the documented layout, matching the driver's address and ids. */
	memset(&pci, 0x55, sizeof(pci));
	NV_OK(nv.nvmlDeviceGetPciInfo_v3(h, &pci));
	d = cu_device_at(&pci);
	CU_OK(cu.cuDeviceGetPCIBusId(bus, sizeof(bus), d));
	struct pci p = parse_pci(bus);
	snprintf(want, sizeof(want), "%08X:%02X:%02X.0", p.domain, p.bus, p.device);
	CHECK_EQ_STR(pci.busId, want);
	snprintf(want, sizeof(want), "%04X:%02X:%02X.0", p.domain, p.bus, p.device);
	CHECK_EQ_STR(pci.busIdLegacy, want);
	CHECK_EQ_INT(pci.domain, p.domain);
	CHECK_EQ_INT(pci.bus, p.bus);
	CHECK_EQ_INT(pci.device, p.device);
	CU_OK(cu.cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_GPU_PCI_DEVICE_ID, d));
	CHECK_EQ_INT(pci.pciDeviceId, (unsigned)v);
	CU_OK(cu.cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_GPU_PCI_SUBSYSTEM_ID, d));
	CHECK_EQ_INT(pci.pciSubSystemId, (unsigned)v);
	nvmlPciInfo_t pci2;
	NV_OK(nv.nvmlDeviceGetPciInfo_v2(h, &pci2));
	CHECK(!memcmp(&pci2, &pci, sizeof(pci)) || !strcmp(pci2.busId, pci.busId));
	/* The unversioned symbol writes the old 52-byte layout and nothing past it. */
	memset(legacy, 0xaa, sizeof(legacy));
	NV_OK(nv.nvmlDeviceGetPciInfo(h, v1));
	CHECK_EQ_STR(v1->busId, want);
	CHECK_EQ_INT(v1->bus, p.bus);
	CHECK_EQ_INT(v1->reserved3, 0);
	for (size_t k = sizeof(*v1); k < sizeof(legacy); k++)
		CHECK_EQ_INT(legacy[k], 0xaa);

	/* Handle by PCI bus id, in every spelling the callers use. */
	NV_OK(nv.nvmlDeviceGetHandleByPciBusId_v2(pci.busId, &h2));
	CHECK(h2 == h);
	NV_OK(nv.nvmlDeviceGetHandleByPciBusId(pci.busIdLegacy, &h2));
	CHECK(h2 == h);
	NV_OK(nv.nvmlDeviceGetHandleByPciBusId_v2(bus, &h2));
	CHECK(h2 == h);
	for (size_t k = 0; k <= strlen(pci.busId); k++)
		lower[k] = (char)tolower((unsigned char)pci.busId[k]);
	NV_OK(nv.nvmlDeviceGetHandleByPciBusId_v2(lower, &h2));
	CHECK(h2 == h);
	snprintf(want, sizeof(want), "%02x:%02x.0", p.bus, p.device);
	if (p.domain == 0) {
		NV_OK(nv.nvmlDeviceGetHandleByPciBusId_v2(want, &h2));
		CHECK(h2 == h);
	}

	/* Name and UUID as the driver gives them. */
	NV_OK(nv.nvmlDeviceGetName(h, name, sizeof(name)));
	CU_OK(cu.cuDeviceGetName(cname, sizeof(cname), d));
	CHECK_EQ_STR(name, cname);
	CHECK_EQ_INT(nv.nvmlDeviceGetName(h, name, 1), NVML_ERROR_INSUFFICIENT_SIZE);
	NV_OK(nv.nvmlDeviceGetUUID(h, uuid, sizeof(uuid)));
	CU_OK(cu.cuDeviceGetUuid_v2(&cu_uuid, d));
	const unsigned char *b = (const unsigned char *)cu_uuid.bytes;
	snprintf(want, sizeof(want),
		 "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1], b[2],
		 b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
	CHECK_EQ_STR(uuid, want);
	CHECK_EQ_INT(strlen(uuid), 40);
	CHECK_EQ_INT(nv.nvmlDeviceGetUUID(h, uuid, 40), NVML_ERROR_INSUFFICIENT_SIZE);
	NV_OK(nv.nvmlDeviceGetHandleByUUID(want, &h2));
	CHECK(h2 == h);

	NV_OK(nv.nvmlDeviceGetCudaComputeCapability(h, &major, &minor));
	CU_OK(cu.cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d));
	CHECK_EQ_INT(major, v);
	CU_OK(cu.cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d));
	CHECK_EQ_INT(minor, v);
	NV_OK(nv.nvmlDeviceGetMinorNumber(h, &u));
	NV_OK(nv.nvmlDeviceIsMigDeviceHandle(h, &u));
	CHECK_EQ_INT(u, 0);
	nvmlComputeMode_t mode;
	NV_OK(nv.nvmlDeviceGetComputeMode(h, &mode));
	CU_OK(cu.cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_COMPUTE_MODE, d));
	CHECK_EQ_INT(mode, v);

	check_memory(h, d);

	/* Process lists are empty, whatever the buffer. */
	n = 0;
	NV_OK(nv.nvmlDeviceGetComputeRunningProcesses(h, &n, NULL));
	CHECK_EQ_INT(n, 0);
	nvmlProcessInfo_t procs[4];
	n = 4;
	NV_OK(nv.nvmlDeviceGetComputeRunningProcesses_v3(h, &n, procs));
	CHECK_EQ_INT(n, 0);
	n = 4;
	NV_OK(nv.nvmlDeviceGetGraphicsRunningProcesses_v2(h, &n, procs));
	CHECK_EQ_INT(n, 0);

	/* Field values: the call succeeds, each field says NOT_SUPPORTED. */
	nvmlFieldValue_t fv[2] = {{.fieldId = 165, .scopeId = 0}, {.fieldId = 170}};
	NV_OK(nv.nvmlDeviceGetFieldValues(h, 2, fv));
	CHECK_EQ_INT(fv[0].nvmlReturn, NVML_ERROR_NOT_SUPPORTED);
	CHECK_EQ_INT(fv[1].nvmlReturn, NVML_ERROR_NOT_SUPPORTED);

	/* P2P with every device, as NCCL asks at init. */
	for (unsigned j = 0; j < count; j++) {
		nvmlDevice_t hj;
		nvmlGpuP2PStatus_t st;
		nvmlPciInfo_t pj;
		int can;
		NV_OK(nv.nvmlDeviceGetHandleByIndex_v2(j, &hj));
		NV_OK(nv.nvmlDeviceGetP2PStatus(h, hj, NVML_P2P_CAPS_INDEX_READ, &st));
		if (j == i) {
			CHECK_EQ_INT(st, NVML_P2P_STATUS_OK);
		} else {
			NV_OK(nv.nvmlDeviceGetPciInfo_v3(hj, &pj));
			CU_OK(cu.cuDeviceCanAccessPeer(&can, d, cu_device_at(&pj)));
			CHECK_EQ_INT(st, can ? NVML_P2P_STATUS_OK : NVML_P2P_STATUS_NOT_SUPPORTED);
		}
		NV_OK(nv.nvmlDeviceGetP2PStatus(h, hj, NVML_P2P_CAPS_INDEX_NVLINK, &st));
		CHECK_EQ_INT(st, NVML_P2P_STATUS_NOT_SUPPORTED);
	}

	/* Unsupported queries: NOT_SUPPORTED (3). */
	nvmlUtilization_t util;
	nvmlEnableState_t es;
	nvmlIntNvLinkDeviceType_t lt;
	unsigned long long ull;
	CHECK_EQ_INT(nv.nvmlDeviceGetUtilizationRates(h, &util), NVML_ERROR_NOT_SUPPORTED);
	CHECK_EQ_INT(nv.nvmlDeviceGetTemperature(h, 0, &u), NVML_ERROR_NOT_SUPPORTED);
	CHECK_EQ_INT(nv.nvmlDeviceGetPowerUsage(h, &u), NVML_ERROR_NOT_SUPPORTED);
	CHECK_EQ_INT(nv.nvmlDeviceGetClockInfo(h, NVML_CLOCK_SM, &u), NVML_ERROR_NOT_SUPPORTED);
	CHECK_EQ_INT(nv.nvmlDeviceGetNvLinkState(h, 0, &es), NVML_ERROR_NOT_SUPPORTED);
	CHECK_EQ_INT(nv.nvmlDeviceGetNvLinkRemotePciInfo_v2(h, 0, &pci), NVML_ERROR_NOT_SUPPORTED);
	CHECK_EQ_INT(nv.nvmlDeviceGetNvLinkRemoteDeviceType(h, 0, &lt), NVML_ERROR_NOT_SUPPORTED);
	CHECK_EQ_INT(nv.nvmlDeviceGetCurrentClocksThrottleReasons(h, &ull), NVML_ERROR_NOT_SUPPORTED);
	/* Logged once, answered every time. */
	CHECK_EQ_INT(nv.nvmlDeviceGetCurrentClocksThrottleReasons(h, &ull), NVML_ERROR_NOT_SUPPORTED);
	CHECK_EQ_INT(nv.nvmlDeviceGetMaxClockInfo(h, NVML_CLOCK_VIDEO, &u), NVML_ERROR_NOT_SUPPORTED);
}

static void check_devices(void)
{
	unsigned n, prev_key = 0;
	int cn, version;
	nvmlDevice_t h;
	char buf[NVML_SYSTEM_NVML_VERSION_BUFFER_SIZE], want[64];

	/* Reference counted: two inits. */
	NV_OK(nv.nvmlInit());
	NV_OK(nv.nvmlInit_v2());

	CU_OK(cu.cuInit(0));
	CU_OK(cu.cuDeviceGetCount(&cn));
	NV_OK(nv.nvmlDeviceGetCount_v2(&n));
	CHECK_EQ_INT(n, cn);
	NV_OK(nv.nvmlDeviceGetCount(&n));
	CHECK_EQ_INT(n, cn);
	CHECK(n > 0);

	NV_OK(nv.nvmlSystemGetCudaDriverVersion(&version));
	CU_OK(cu.cuDriverGetVersion(&cn));
	CHECK_EQ_INT(version, cn);
	NV_OK(nv.nvmlSystemGetCudaDriverVersion_v2(&version));
	CHECK_EQ_INT(version, cn);
	/* The kernel driver's version: from the environment, else procfs, else NOT_SUPPORTED. */
	unsetenv("CRCUDA_NVML_DRIVER_VERSION");
	if (access("/proc/driver/nvidia/version", R_OK))
		CHECK_EQ_INT(nv.nvmlSystemGetDriverVersion(buf, sizeof(buf)), NVML_ERROR_NOT_SUPPORTED);
	setenv("CRCUDA_NVML_DRIVER_VERSION", "580.159.04", 1);
	NV_OK(nv.nvmlSystemGetDriverVersion(buf, sizeof(buf)));
	CHECK_EQ_STR(buf, "580.159.04");
	CHECK_EQ_INT(nv.nvmlSystemGetDriverVersion(buf, 5), NVML_ERROR_INSUFFICIENT_SIZE);
	NV_OK(nv.nvmlSystemGetNVMLVersion(buf, sizeof(buf)));
	snprintf(want, sizeof(want), "%d.580.159.04", cn / 1000);
	CHECK_EQ_STR(buf, want);
	unsetenv("CRCUDA_NVML_DRIVER_VERSION");

	for (unsigned i = 0; i < n; i++) {
		nvmlPciInfo_t pci;
		check_device(i, n);
		/* NVML numbers devices in PCI order. */
		NV_OK(nv.nvmlDeviceGetHandleByIndex_v2(i, &h));
		NV_OK(nv.nvmlDeviceGetPciInfo_v3(h, &pci));
		unsigned key = pci.domain << 16 | pci.bus << 8 | pci.device;
		CHECK(i == 0 || key > prev_key);
		prev_key = key;
	}

	/* Bad handles and arguments. */
	CHECK_EQ_INT(nv.nvmlDeviceGetHandleByIndex_v2(n, &h), NVML_ERROR_INVALID_ARGUMENT);
	CHECK_EQ_INT(nv.nvmlDeviceGetName(NULL, buf, sizeof(buf)), NVML_ERROR_INVALID_ARGUMENT);
	CHECK_EQ_INT(nv.nvmlDeviceGetName((nvmlDevice_t)(void *)buf, buf, sizeof(buf)),
		     NVML_ERROR_INVALID_ARGUMENT);
	CHECK_EQ_INT(nv.nvmlDeviceGetHandleByPciBusId_v2("0000:ff:1f.0", &h), NVML_ERROR_NOT_FOUND);
	CHECK_EQ_INT(nv.nvmlDeviceGetHandleByPciBusId_v2("not a bus id", &h), NVML_ERROR_INVALID_ARGUMENT);
	CHECK_EQ_INT(nv.nvmlDeviceGetHandleByUUID("GPU-00000000-0000-0000-0000-000000000000", &h),
		     NVML_ERROR_NOT_FOUND);
	CHECK_EQ_INT(nv.nvmlDeviceGetCount_v2(NULL), NVML_ERROR_INVALID_ARGUMENT);

	/* Two shutdowns end it; a third is an error; init works again. */
	NV_OK(nv.nvmlShutdown());
	NV_OK(nv.nvmlDeviceGetCount_v2(&n));
	NV_OK(nv.nvmlShutdown());
	CHECK_EQ_INT(nv.nvmlDeviceGetCount_v2(&n), NVML_ERROR_UNINITIALIZED);
	CHECK_EQ_INT(nv.nvmlDeviceGetUtilizationRates(NULL, NULL), NVML_ERROR_UNINITIALIZED);
	CHECK_EQ_INT(nv.nvmlShutdown(), NVML_ERROR_UNINITIALIZED);
	NV_OK(nv.nvmlInitWithFlags(0));
	NV_OK(nv.nvmlDeviceGetCount_v2(&n));
	NV_OK(nv.nvmlShutdown());
}

static void check_no_devices(void)
{
	unsigned n = 1;

	CHECK_EQ_INT(nv.nvmlInit_v2(), NVML_ERROR_DRIVER_NOT_LOADED);
	CHECK_EQ_INT(nv.nvmlDeviceGetCount_v2(&n), NVML_ERROR_UNINITIALIZED);
	NV_OK(nv.nvmlInitWithFlags(NVML_INIT_FLAG_NO_GPUS));
	NV_OK(nv.nvmlDeviceGetCount_v2(&n));
	CHECK_EQ_INT(n, 0);
	NV_OK(nv.nvmlShutdown());
}

/* The property the library exists for: no GPU device file in this process. */
static void check_no_dev_nvidia(const char *script)
{
	char line[4096], path[64], target[4096];
	FILE *f = fopen("/proc/self/maps", "re");

	CHECK(f);
	while (fgets(line, sizeof(line), f)) {
		if (strstr(line, "/dev/nvidia")) {
			fprintf(stderr, "mapped: %s", line);
			exit(1);
		}
	}
	fclose(f);
	for (int fd = 0; fd < 4096; fd++) {
		snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
		ssize_t n = readlink(path, target, sizeof(target) - 1);
		if (n < 0)
			continue;
		target[n] = 0;
		if (!strncmp(target, "/dev/nvidia", 11)) {
			fprintf(stderr, "open: fd %d -> %s\n", fd, target);
			exit(1);
		}
	}
	if (script) {
		char cmd[4200];
		snprintf(cmd, sizeof(cmd), "sh '%s' %d", script, (int)getpid());
		CHECK_EQ_INT(system(cmd), 0);
	}
}

int main(int argc, char **argv)
{
	const char *script = NULL;
	int no_devices = 0;

	if (argc < 2) {
		fprintf(stderr, "usage: %s LIBNVML [--script check-no-dev-nvidia.sh] [--no-devices]\n",
			argv[0]);
		return 2;
	}
	for (int i = 2; i < argc; i++) {
		if (!strcmp(argv[i], "--script") && i + 1 < argc)
			script = argv[++i];
		else if (!strcmp(argv[i], "--no-devices"))
			no_devices = 1;
	}
	load(argv[1]);
	check_uninitialized();
	if (no_devices)
		check_no_devices();
	else
		check_devices();
	check_no_dev_nvidia(script);
	printf("nvml: ok\n");
	return 0;
}
