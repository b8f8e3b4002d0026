/* Prints what an NVML tells of device 0, one "key value" line each, as nvidia-smi-like tools and XLA
 * ask it (XLA: handle by PCI bus id, then the current PCIe link generation and width). It first makes
 * a CUDA context holding 64 MiB, so that this process is one of the GPU's, and reports whether the
 * compute-process list shows it. Values are "error N" where NVML refuses. tests/gpu/nvml.sh runs it
 * natively and under crcuda and compares.
 *   nvml_query    (libnvidia-ml.so.1 and libcuda.so.1 as the loader finds them) */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda.h>

#include "nvml_types.h"

/* The prototypes, from the table (this program calls whichever NVML it finds, through dlsym). */
#define NVML_API(sym, policy, target, ret, params, args) ret sym params;
#include "nvml_exports.def"
#undef NVML_API

static void *nvml;

static void *need(void *lib, const char *name)
{
	void *p = dlsym(lib, name);

	if (!p) {
		fprintf(stderr, "nvml_query: no %s\n", name);
		exit(1);
	}
	return p;
}

#define NV(fn) ((__typeof__(&fn))need(nvml, #fn))

static void put_u(const char *key, nvmlReturn_t r, unsigned long long v)
{
	if (r == NVML_SUCCESS)
		printf("%s %llu\n", key, v);
	else
		printf("%s error %d\n", key, (int)r);
}

static void put_s(const char *key, nvmlReturn_t r, const char *v)
{
	if (r == NVML_SUCCESS)
		printf("%s %s\n", key, v);
	else
		printf("%s error %d\n", key, (int)r);
}

/* Queries of the form f(device, unsigned int *). */
#define U1(key, fn)                                                                                          \
	do {                                                                                                 \
		unsigned int v_ = 0;                                                                         \
		nvmlReturn_t r_ = NV(fn)(dev, &v_);                                                          \
		put_u(key, r_, v_);                                                                          \
	} while (0)
/* f(device, unsigned int arg, unsigned int *). */
#define U2(key, fn, arg)                                                                                     \
	do {                                                                                                 \
		unsigned int v_ = 0;                                                                         \
		nvmlReturn_t r_ = NV(fn)(dev, arg, &v_);                                                     \
		put_u(key, r_, v_);                                                                          \
	} while (0)
#define STR(key, fn)                                                                                         \
	do {                                                                                                 \
		char s_[96] = "";                                                                            \
		nvmlReturn_t r_ = NV(fn)(dev, s_, sizeof(s_));                                               \
		put_s(key, r_, s_);                                                                          \
	} while (0)

int main(void)
{
	void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
	nvmlDevice_t dev, by_bus;
	nvmlPciInfo_t pci;
	nvmlMemory_t mem;
	nvmlBAR1Memory_t bar1;
	nvmlUtilization_t util;
	nvmlProcessInfo_t procs[64];
	unsigned int n = 64, mine = 0;
	unsigned long long used = 0, energy = 0;
	CUcontext ctx;
	CUdeviceptr p;
	nvmlReturn_t r;

	nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!cuda || !nvml) {
		fprintf(stderr, "nvml_query: %s\n", dlerror());
		return 1;
	}
	if (((__typeof__(&cuInit))need(cuda, "cuInit"))(0) ||
	    ((__typeof__(&cuDevicePrimaryCtxRetain))need(cuda, "cuDevicePrimaryCtxRetain"))(&ctx, 0) ||
	    ((__typeof__(&cuCtxSetCurrent))need(cuda, "cuCtxSetCurrent"))(ctx) ||
	    ((__typeof__(&cuMemAlloc_v2))need(cuda, "cuMemAlloc_v2"))(&p, 64 << 20)) {
		fprintf(stderr, "nvml_query: no CUDA context\n");
		return 1;
	}
	if (NV(nvmlInit_v2)() != NVML_SUCCESS || NV(nvmlDeviceGetHandleByIndex_v2)(0, &dev) != NVML_SUCCESS) {
		fprintf(stderr, "nvml_query: nvmlInit_v2 or handle 0 failed\n");
		return 1;
	}
	STR("name", nvmlDeviceGetName);
	STR("uuid", nvmlDeviceGetUUID);
	r = NV(nvmlDeviceGetPciInfo_v3)(dev, &pci);
	put_s("pci.busId", r, pci.busId);
	/* XLA's PCIe bandwidth: by bus id, then the current link. */
	r = NV(nvmlDeviceGetHandleByPciBusId_v2)(pci.busId, &by_bus);
	put_u("xla.handle_by_bus_id_same", r, by_bus == dev);
	U1("pcie.link.gen.current", nvmlDeviceGetCurrPcieLinkGeneration);
	U1("pcie.link.width.current", nvmlDeviceGetCurrPcieLinkWidth);
	U1("pcie.link.gen.max", nvmlDeviceGetMaxPcieLinkGeneration);
	U1("pcie.link.width.max", nvmlDeviceGetMaxPcieLinkWidth);
	U1("pcie.link.gen.gpumax", nvmlDeviceGetGpuMaxPcieLinkGeneration);
	U1("pcie.speed.max", nvmlDeviceGetPcieLinkMaxSpeed);
	U2("pcie.tx_kbps", nvmlDeviceGetPcieThroughput, 0);
	U2("pcie.rx_kbps", nvmlDeviceGetPcieThroughput, 1);
	r = NV(nvmlDeviceGetMemoryInfo)(dev, &mem);
	put_u("memory.total", r, mem.total);
	put_u("memory.used", r, mem.used);
	r = NV(nvmlDeviceGetBAR1MemoryInfo)(dev, &bar1);
	put_u("bar1.total", r, bar1.bar1Total);
	U2("clocks.max.sm", nvmlDeviceGetMaxClockInfo, NVML_CLOCK_SM);
	U2("clocks.max.mem", nvmlDeviceGetMaxClockInfo, NVML_CLOCK_MEM);
	U2("clocks.current.sm", nvmlDeviceGetClockInfo, NVML_CLOCK_SM);
	U2("clocks.current.mem", nvmlDeviceGetClockInfo, NVML_CLOCK_MEM);
	r = NV(nvmlDeviceGetUtilizationRates)(dev, &util);
	put_u("utilization.gpu", r, util.gpu);
	put_u("utilization.memory", r, util.memory);
	U2("temperature.gpu", nvmlDeviceGetTemperature, 0);
	U2("temperature.threshold.slowdown", nvmlDeviceGetTemperatureThreshold, 1);
	U1("power.draw_mw", nvmlDeviceGetPowerUsage);
	U1("power.limit_mw", nvmlDeviceGetEnforcedPowerLimit);
	U1("power.default_limit_mw", nvmlDeviceGetPowerManagementDefaultLimit);
	r = NV(nvmlDeviceGetTotalEnergyConsumption)(dev, &energy);
	put_u("energy.total_mj.nonzero", r, energy > 0);
	U1("pstate", nvmlDeviceGetPerformanceState);
	U1("persistence_mode", nvmlDeviceGetPersistenceMode);
	U1("cores", nvmlDeviceGetNumGpuCores);
	U1("memory.bus_width", nvmlDeviceGetMemoryBusWidth);
	U1("architecture", nvmlDeviceGetArchitecture);
	STR("serial", nvmlDeviceGetSerial);
	STR("vbios", nvmlDeviceGetVbiosVersion);
	r = NV(nvmlDeviceGetComputeRunningProcesses_v3)(dev, &n, procs);
	for (unsigned i = 0; r == NVML_SUCCESS && i < n; i++)
		if (procs[i].pid == (unsigned int)getpid()) {
			mine = 1;
			used = procs[i].usedGpuMemory;
		}
	put_u("processes.self_listed", r, mine);
	put_u("processes.self_uses_64MiB", r, used >= (64ull << 20));
	NV(nvmlShutdown)();
	return 0;
}
