/* sim_checks (simulated device only; run with CRCUDA_SIM_DEVICES=2 CRCUDA_SIM_MEM_MB=1024): the test
 * double names itself, reports an sm_90 device per CRCUDA_SIM_DEVICES with distinct UUIDs, refuses
 * host pointers and stale or out-of-range device pointers where device memory is expected, returns
 * CUDA_ERROR_NOT_SUPPORTED from unimplemented entry points, answers cuGetProcAddress with its own
 * exports, and fails a launch of a kernel that has no host implementation. */
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_test.h"

extern const unsigned char sim_checks_fatbin[];

static void check_attribute(CUdevice dev, CUdevice_attribute attr, int want)
{
	int value = -12345;

	CU_CHECK(cuDeviceGetAttribute(&value, attr, dev));
	if (value != want) {
		fprintf(stderr, "sim_checks: attribute %d is %d, expected %d\n", (int)attr, value, want);
		exit(1);
	}
}

static void check_devices(void)
{
	int count = 0, version = 0;
	CUuuid uuid[2];
	char name[128], bus_id[32];
	size_t total;
	CUdevice by_bus;

	CU_CHECK(cuDriverGetVersion(&version));
	CHECK_EQ_INT(version, 13000);
	CU_CHECK(cuDeviceGetCount(&count));
	CHECK_EQ_INT(count, 2);
	for (int d = 0; d < 2; d++) {
		char want[64];

		CU_CHECK(cuDeviceGetName(name, sizeof(name), d));
		snprintf(want, sizeof(want), "crcuda simulated GPU %d", d);
		CHECK_EQ_STR(name, want);
		CU_CHECK(cuDeviceGetUuid(&uuid[d], d));
		CU_CHECK(cuDeviceTotalMem(&total, d));
		CHECK_EQ_INT(total, 1024ull << 20);
		check_attribute(d, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 9);
		check_attribute(d, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 0);
		check_attribute(d, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 132);
		check_attribute(d, CU_DEVICE_ATTRIBUTE_WARP_SIZE, 32);
		check_attribute(d, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, 1024);
		check_attribute(d, CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, 1);
		check_attribute(d, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 1);
		CU_CHECK(cuDeviceGetPCIBusId(bus_id, sizeof(bus_id), d));
		CU_CHECK(cuDeviceGetByPCIBusId(&by_bus, bus_id));
		CHECK_EQ_INT(by_bus, d);
	}
	CHECK(memcmp(&uuid[0], &uuid[1], sizeof(CUuuid)) != 0);
	CU_CHECK(cuDeviceGetUuid(&uuid[1], 0));
	CHECK(!memcmp(&uuid[0], &uuid[1], sizeof(CUuuid))); /* deterministic */
	CU_EXPECT(cuDeviceGetName(name, sizeof(name), 2), CUDA_ERROR_INVALID_DEVICE);
}

static void check_pointer_validation(void)
{
	CUdeviceptr d, stale;
	uint8_t *host = malloc(4096), buffer[64] = {0};
	CUdeviceptr host_as_device = (CUdeviceptr)(uintptr_t)host;
	unsigned memtype;
	size_t free_before, free_after, total;

	CHECK(host != NULL);
	CU_CHECK(cuMemGetInfo(&free_before, &total));
	CU_CHECK(cuMemAlloc(&d, 4096));
	CU_CHECK(cuMemGetInfo(&free_after, &total));
	CHECK(free_after < free_before);
	CHECK_EQ_INT(total, 1024ull << 20);
	/* Device addresses are not host addresses. */
	CHECK(d >= 0x5a0000000000ull && d < 0x5c0000000000ull);

	CU_EXPECT(cuMemcpyHtoD(host_as_device, buffer, sizeof(buffer)), CUDA_ERROR_INVALID_VALUE);
	CU_EXPECT(cuMemcpyDtoH(buffer, host_as_device, sizeof(buffer)), CUDA_ERROR_INVALID_VALUE);
	CU_EXPECT(cuMemcpyDtoD(d, host_as_device, sizeof(buffer)), CUDA_ERROR_INVALID_VALUE);
	CU_EXPECT(cuMemsetD8(host_as_device, 0, 16), CUDA_ERROR_INVALID_VALUE);
	CU_EXPECT(cuMemFree(host_as_device), CUDA_ERROR_INVALID_VALUE);
	CU_EXPECT(cuPointerGetAttribute(&memtype, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, host_as_device),
		  CUDA_ERROR_INVALID_VALUE);
	/* Past the end of the allocation. */
	CU_EXPECT(cuMemcpyHtoD(d + 4096 - 8, buffer, 16), CUDA_ERROR_INVALID_VALUE);
	CU_CHECK(cuMemcpyHtoD(d + 4096 - 16, buffer, 16));
	/* With unified addressing a host pointer is fine where either kind is allowed. */
	CU_CHECK(cuMemcpy(host_as_device, d, 64));
	/* A freed allocation is gone. */
	stale = d;
	CU_CHECK(cuMemFree(d));
	CU_EXPECT(cuMemcpyDtoH(buffer, stale, 16), CUDA_ERROR_INVALID_VALUE);
	CU_EXPECT(cuMemcpy(host_as_device, stale, 16), CUDA_ERROR_INVALID_VALUE);
	CU_EXPECT(cuMemFree(stale), CUDA_ERROR_INVALID_VALUE);
	CU_EXPECT(cuMemAlloc(&d, 2048ull << 20), CUDA_ERROR_OUT_OF_MEMORY);
	free(host);
}

static void check_entry_points(void)
{
	void *pfn = (void *)1;
	CUdriverProcAddressQueryResult status;
	char luid[8];
	unsigned luid_mask = 0;
	const void *table = NULL;
	const CUuuid some_id = {{0}};

	/* Unimplemented: NOT_SUPPORTED (and a log line naming it). */
	CU_EXPECT(cuDeviceGetLuid(luid, &luid_mask, 0), CUDA_ERROR_NOT_SUPPORTED);
	CU_EXPECT(cuGetExportTable(&table, &some_id), CUDA_ERROR_NOT_SUPPORTED);

	/* cudart's probe: empty symbol, SUCCESS with NULL. */
	CU_CHECK(cuGetProcAddress("", &pfn, 13000, 0, &status));
	CHECK(pfn == NULL);
	CU_CHECK(cuGetProcAddress("cuMemAlloc", &pfn, 3020, 0, &status));
	CHECK(pfn == dlsym(RTLD_DEFAULT, "cuMemAlloc_v2"));
	CHECK_EQ_INT(status, CU_GET_PROC_ADDRESS_SUCCESS);
	CU_CHECK(cuGetProcAddress("cuMemcpyHtoD", &pfn, 7000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
				  &status));
	CHECK(pfn != NULL && pfn == dlsym(RTLD_DEFAULT, "cuMemcpyHtoD_v2_ptds"));
	CU_CHECK(cuGetProcAddress("cuArrayCreate", &pfn, 13000, 0, &status));
	CHECK(pfn == dlsym(RTLD_DEFAULT, "cuArrayCreate_v2"));
	CU_CHECK(cuGetProcAddress("cuNoSuchEntryPoint", &pfn, 13000, 0, &status));
	CHECK(pfn == NULL);
	CHECK_EQ_INT(status, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
	CU_EXPECT(cuGetProcAddress("cuMemAlloc", &pfn, 99000, 0, &status), CUDA_ERROR_INVALID_VALUE);
}

static void check_contexts(void)
{
	CUcontext primary, explicit_ctx, popped, current;
	CUdevice dev;
	unsigned flags;
	int active;
	unsigned long long id_primary, id_explicit;

	CU_CHECK(cuDevicePrimaryCtxGetState(1, &flags, &active));
	CHECK_EQ_INT(active, 0);
	CU_CHECK(cuDevicePrimaryCtxSetFlags(1, CU_CTX_SCHED_BLOCKING_SYNC));
	CU_CHECK(cuDevicePrimaryCtxRetain(&primary, 1));
	CU_CHECK(cuDevicePrimaryCtxGetState(1, &flags, &active));
	CHECK_EQ_INT(active, 1);
	CHECK_EQ_INT(flags, CU_CTX_SCHED_BLOCKING_SYNC);

	CU_CHECK(cuCtxCreate(&explicit_ctx, NULL, 0, 1));
	CU_CHECK(cuCtxGetDevice(&dev));
	CHECK_EQ_INT(dev, 1);
	CU_CHECK(cuCtxPushCurrent(primary));
	CU_CHECK(cuCtxGetCurrent(&current));
	CHECK(current == primary);
	CU_CHECK(cuCtxGetId(primary, &id_primary));
	CU_CHECK(cuCtxGetId(explicit_ctx, &id_explicit));
	CHECK(id_primary != id_explicit);
	CU_CHECK(cuCtxPopCurrent(&popped));
	CHECK(popped == primary);
	CU_CHECK(cuCtxGetCurrent(&current));
	CHECK(current == explicit_ctx);
	CU_CHECK(cuCtxDestroy(explicit_ctx));

	CU_CHECK(cuDevicePrimaryCtxRelease(1));
	CU_CHECK(cuDevicePrimaryCtxGetState(1, &flags, &active));
	CHECK_EQ_INT(active, 0);
	CU_CHECK(cuDevicePrimaryCtxReset(1));
}

static void check_missing_host_kernel(void)
{
	CUmodule mod;
	CUfunction f;
	CUdeviceptr d;
	int n = 16;

	CU_CHECK(cuModuleLoadData(&mod, sim_checks_fatbin));
	CU_CHECK(cuModuleGetFunction(&f, mod, "_Z12no_host_implPi"));
	CU_CHECK(cuMemAlloc(&d, 64));
	void *params[] = {&d, &n};
	CU_EXPECT(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL), CUDA_ERROR_NOT_FOUND);
	CU_CHECK(cuModuleGetFunction(&f, mod, "_Z7add_onePii"));
	CU_EXPECT(cuLaunchKernel(f, 1, 1, 1, 2048, 1, 1, 0, NULL, params, NULL), CUDA_ERROR_INVALID_VALUE);
	CU_EXPECT(cuLaunchKernel(f, 1, 1, 1, 16, 1, 1, 0, NULL, NULL, NULL), CUDA_ERROR_INVALID_VALUE);
	CU_CHECK(cuLaunchKernel(f, 1, 1, 1, 16, 1, 1, 0, NULL, params, NULL));
	CU_CHECK(cuCtxSynchronize());
	CU_CHECK(cuMemFree(d));
	CU_CHECK(cuModuleUnload(mod));
}

int main(void)
{
	CUcontext ctx;
	char name[128];

	cu_test_init("sim_checks");
	CU_CHECK(cuDeviceGetName(name, sizeof(name), 0));
	if (strncmp(name, "crcuda simulated GPU", 20)) {
		fprintf(stderr, "sim_checks: skipped: \"%s\" is not the simulated device\n", name);
		return CHECK_SKIP;
	}
	check_devices();
	check_contexts();
	ctx = cu_test_primary_context(NULL);
	(void)ctx;
	check_pointer_validation();
	check_entry_points();
	check_missing_host_kernel();
	CU_CHECK(cuDevicePrimaryCtxRelease(0));
	cu_test_pass("sim_checks");
}
