/* Initialisation, configuration, devices, error strings, fault injection and the host-kernel
 * libraries of the simulated device. */
#define LOG_PREFIX "sim: "

#include <ctype.h>
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "crcuda/log.h"
#include "sim.h"

pthread_mutex_t sim_lock = PTHREAD_MUTEX_INITIALIZER;
struct sim_device sim_devices[SIM_MAX_DEVICES];
int sim_device_count;
atomic_bool sim_initialized;
atomic_bool sim_fail_armed;

static pthread_once_t sim_init_once = PTHREAD_ONCE_INIT;
static CUresult sim_init_result;
static _Atomic unsigned long long sim_id_counter;

unsigned long long sim_next_id(void)
{
	return atomic_fetch_add(&sim_id_counter, 1) + 1;
}

/* ---- fault injection: CRCUDA_SIM_FAIL="sym:n:err[,sym:n:err...]" fails the n-th call of sym ---- */

struct sim_fail_rule {
	char symbol[96];
	unsigned long nth;
	int error;
	_Atomic unsigned long calls;
};
#define SIM_MAX_FAIL_RULES 32
static struct sim_fail_rule sim_fail_rules[SIM_MAX_FAIL_RULES];
static int sim_fail_rule_count;

static void sim_fail_parse(const char *spec)
{
	char *copy = strdup(spec), *save = NULL;

	if (!copy)
		return;
	for (char *item = strtok_r(copy, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
		char symbol[96];
		unsigned long nth;
		int error, consumed = 0;

		if (sscanf(item, " %95[^:]:%lu:%d%n", symbol, &nth, &error, &consumed) != 3 ||
		    item[consumed] != '\0' || nth == 0) {
			pr_err("CRCUDA_SIM_FAIL: cannot parse \"%s\" (want symbol:nth-call:error)", item);
			continue;
		}
		if (sim_fail_rule_count == SIM_MAX_FAIL_RULES) {
			pr_err("CRCUDA_SIM_FAIL: more than %d rules, ignoring the rest", SIM_MAX_FAIL_RULES);
			break;
		}
		struct sim_fail_rule *rule = &sim_fail_rules[sim_fail_rule_count++];
		snprintf(rule->symbol, sizeof(rule->symbol), "%s", symbol);
		rule->nth = nth;
		rule->error = error;
		pr_info("fault injection: call %lu of %s fails with %d", nth, symbol, error);
	}
	free(copy);
	atomic_store(&sim_fail_armed, sim_fail_rule_count > 0);
}

CUresult sim_fail_check(const char *symbol)
{
	for (int i = 0; i < sim_fail_rule_count; i++) {
		struct sim_fail_rule *rule = &sim_fail_rules[i];

		if (strcmp(rule->symbol, symbol))
			continue;
		if (atomic_fetch_add(&rule->calls, 1) + 1 == rule->nth) {
			pr_warn("fault injection: %s fails with %d (call %lu)", symbol, rule->error,
				rule->nth);
			return (CUresult)rule->error;
		}
	}
	return CUDA_SUCCESS;
}

atomic_int sim_sticky_error;

void sim_trap(int error)
{
	int none = 0;

	if (atomic_compare_exchange_strong(&sim_sticky_error, &none,
					   error ? error : CUDA_ERROR_LAUNCH_FAILED))
		pr_warn("device-side fault in a kernel: error %d from now on (sticky, as on a GPU)", error);
}

/* Parsed when the library is loaded, so that cuInit itself can be made to fail. */
__attribute__((constructor)) static void sim_fail_setup(void)
{
	const char *spec = getenv("CRCUDA_SIM_FAIL");

	if (spec && *spec)
		sim_fail_parse(spec);
}

/* ---- host-kernel libraries ---- */

#define SIM_MAX_KERNEL_LIBS 16
static void *sim_kernel_libs[SIM_MAX_KERNEL_LIBS];
static int sim_kernel_lib_count;

static void sim_kernel_libs_open(void)
{
	const char *paths = getenv("CRCUDA_SIM_KERNELS");
	char *copy, *save = NULL;

	if (!paths || !*paths) {
		pr_info("CRCUDA_SIM_KERNELS is not set: kernel launches will fail");
		return;
	}
	copy = strdup(paths);
	if (!copy)
		return;
	for (char *path = strtok_r(copy, ":", &save); path; path = strtok_r(NULL, ":", &save)) {
		void *lib;

		if (sim_kernel_lib_count == SIM_MAX_KERNEL_LIBS) {
			pr_err("CRCUDA_SIM_KERNELS: more than %d libraries, ignoring %s", SIM_MAX_KERNEL_LIBS,
			       path);
			continue;
		}
		lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
		if (!lib) {
			pr_err("CRCUDA_SIM_KERNELS: cannot load %s: %s", path, dlerror());
			continue;
		}
		sim_kernel_libs[sim_kernel_lib_count++] = lib;
		pr_debug("host kernels from %s", path);
	}
	free(copy);
}

crcuda_sim_kernel_fn *sim_host_kernel_lookup(const char *mangled)
{
	static const char prefix[] = "crcuda_sim_kernel_";
	size_t len = strlen(mangled);
	char *symbol = malloc(sizeof(prefix) + 4 * len);
	crcuda_sim_kernel_fn *fn = NULL;
	char *p;

	if (!symbol)
		return NULL;
	p = symbol + sprintf(symbol, "%s", prefix);
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)mangled[i];

		if (isalnum(c) || c == '_')
			*p++ = (char)c;
		else
			p += sprintf(p, "_x%02x", c);
	}
	*p = '\0';
	for (int i = 0; i <= sim_kernel_lib_count && !fn; i++) {
		/* Then the process's own (crcudad's worker has kernels of its own). */
		void *sym = dlsym(i < sim_kernel_lib_count ? sim_kernel_libs[i] : RTLD_DEFAULT, symbol);

		/* POSIX guarantees object and function pointers convert through void *. */
		memcpy(&fn, &sym, sizeof(fn));
	}
	free(symbol);
	return fn;
}

/* ---- devices ---- */

static unsigned long sim_env_ulong(const char *name, unsigned long fallback, unsigned long min,
				   unsigned long max)
{
	const char *text = getenv(name);
	char *end;
	unsigned long value;

	if (!text || !*text)
		return fallback;
	errno = 0;
	value = strtoul(text, &end, 10);
	if (errno || *end || value < min || value > max) {
		pr_err("%s=%s is not a number in %lu..%lu; using %lu", name, text, min, max, fallback);
		return fallback;
	}
	return value;
}

static void sim_do_init(void)
{
	int count = (int)sim_env_ulong("CRCUDA_SIM_DEVICES", 1, 0, SIM_MAX_DEVICES);
	size_t mem_mb = sim_env_ulong("CRCUDA_SIM_MEM_MB", 4096, 64, SIM_ARENA_SIZE >> 20);

	for (int i = 0; i < count; i++) {
		struct sim_device *dev = &sim_devices[i];
		CUresult res;

		dev->ordinal = i;
		snprintf(dev->name, sizeof(dev->name), "crcuda simulated GPU %d", i);
		/* Deterministic and distinct: a fixed random-looking prefix, the ordinal last. */
		static const unsigned char uuid_prefix[15] = {0xc7, 0xc0, 0xda, 0x51, 0x3d, 0x2e, 0x4a, 0x90,
							      0x8c, 0x1f, 0x5e, 0x0d, 0x77, 0x20, 0x00};
		memcpy(dev->uuid.bytes, uuid_prefix, sizeof(uuid_prefix));
		dev->uuid.bytes[15] = (char)i;
		dev->pci_bus = 0x1b + i;
		dev->total_mem = mem_mb << 20;
		dev->primary_flags = 0;
		res = sim_mem_init_device(dev);
		if (res != CUDA_SUCCESS) {
			sim_init_result = res;
			return;
		}
	}
	sim_device_count = count;
	sim_kernel_libs_open();
	sim_init_result = count ? CUDA_SUCCESS : CUDA_ERROR_NO_DEVICE;
	pr_info("crcuda simulated device in use: %d simulated GPU(s), %zu MiB each (this is not a real "
		"driver)",
		count, mem_mb);
	atomic_store_explicit(&sim_initialized, count > 0, memory_order_release);
}

CUresult cuInit(unsigned int flags)
{
	SIM_ENTER_NOINIT(cuInit);
	if (flags)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_once(&sim_init_once, sim_do_init);
	return sim_init_result;
}

CUresult cuDriverGetVersion(int *version)
{
	SIM_ENTER_NOINIT(cuDriverGetVersion);
	if (!version)
		return CUDA_ERROR_INVALID_VALUE;
	*version = SIM_DRIVER_VERSION;
	return CUDA_SUCCESS;
}

struct sim_device *sim_device_get(CUdevice dev)
{
	if (dev < 0 || dev >= sim_device_count)
		return NULL;
	return &sim_devices[dev];
}

CUresult cuDeviceGet(CUdevice *device, int ordinal)
{
	SIM_ENTER(cuDeviceGet);
	if (!device)
		return CUDA_ERROR_INVALID_VALUE;
	if (!sim_device_get(ordinal))
		return CUDA_ERROR_INVALID_DEVICE;
	*device = ordinal;
	return CUDA_SUCCESS;
}

CUresult cuDeviceGetCount(int *count)
{
	SIM_ENTER(cuDeviceGetCount);
	if (!count)
		return CUDA_ERROR_INVALID_VALUE;
	*count = sim_device_count;
	return CUDA_SUCCESS;
}

CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
	struct sim_device *d;

	SIM_ENTER(cuDeviceGetName);
	d = sim_device_get(dev);
	if (!d)
		return CUDA_ERROR_INVALID_DEVICE;
	if (!name || len <= 0)
		return CUDA_ERROR_INVALID_VALUE;
	snprintf(name, (size_t)len, "%s", d->name);
	return CUDA_SUCCESS;
}

static CUresult device_get_uuid(CUuuid *uuid, CUdevice dev)
{
	struct sim_device *d = sim_device_get(dev);

	if (!d)
		return CUDA_ERROR_INVALID_DEVICE;
	if (!uuid)
		return CUDA_ERROR_INVALID_VALUE;
	*uuid = d->uuid;
	return CUDA_SUCCESS;
}

CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev)
{
	SIM_ENTER(cuDeviceGetUuid);
	return device_get_uuid(uuid, dev);
}

CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev)
{
	SIM_ENTER(cuDeviceGetUuid_v2);
	return device_get_uuid(uuid, dev);
}

CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
	struct sim_device *d;

	SIM_ENTER(cuDeviceTotalMem_v2);
	d = sim_device_get(dev);
	if (!d)
		return CUDA_ERROR_INVALID_DEVICE;
	if (!bytes)
		return CUDA_ERROR_INVALID_VALUE;
	*bytes = d->total_mem;
	return CUDA_SUCCESS;
}

/* Plausible values of an sm_90 (H100-class) device. */
static int sim_attribute_value(CUdevice_attribute attr, const struct sim_device *d)
{
	switch (attr) {
	case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
		return 1024;
	case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X:
	case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y:
		return 1024;
	case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z:
		return 64;
	case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X:
		return 2147483647;
	case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y:
	case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z:
		return 65535;
	case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK:
		return 48 * 1024;
	case CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY:
		return 64 * 1024;
	case CU_DEVICE_ATTRIBUTE_WARP_SIZE:
		return 32;
	case CU_DEVICE_ATTRIBUTE_MAX_PITCH:
		return 2147483647;
	case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK:
	case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR:
		return 65536;
	case CU_DEVICE_ATTRIBUTE_CLOCK_RATE:
		return 1980000;
	case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE:
		return 2619000;
	case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH:
		return 5120;
	case CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT:
		return 512;
	case CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT:
		return 32;
	case CU_DEVICE_ATTRIBUTE_SURFACE_ALIGNMENT:
		return 512;
	case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT:
		return 132;
	case CU_DEVICE_ATTRIBUTE_COMPUTE_MODE:
		return CU_COMPUTEMODE_DEFAULT;
	case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID:
		return d->pci_bus;
	case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID:
	case CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID:
	case CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD_GROUP_ID:
		return 0;
	case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE:
		return 50 * 1024 * 1024;
	case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR:
		return 2048;
	case CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT:
		return 3;
	case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR:
		return 9;
	case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR:
		return 0;
	case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR:
		return 228 * 1024;
	case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN:
		return 227 * 1024;
	case CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK:
		return 1024;
	case CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR:
		return 32;
	case CU_DEVICE_ATTRIBUTE_SINGLE_TO_DOUBLE_PRECISION_PERF_RATIO:
		return 2;
	case CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE:
		return 30 * 1024 * 1024;
	case CU_DEVICE_ATTRIBUTE_MAX_ACCESS_POLICY_WINDOW_SIZE:
		return 134213632;
	case CU_DEVICE_ATTRIBUTE_MEM_SYNC_DOMAIN_COUNT:
		return 4;
	case CU_DEVICE_ATTRIBUTE_NUMA_ID:
	case CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID:
		return -1;
	case CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES:
		return CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
	case CU_DEVICE_ATTRIBUTE_GPU_PCI_DEVICE_ID:
		return 0x233010de;
	case CU_DEVICE_ATTRIBUTE_GPU_PCI_SUBSYSTEM_ID:
		return 0x16c110de;
	/* Capabilities the simulated device has. */
	case CU_DEVICE_ATTRIBUTE_GPU_OVERLAP:
	case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY:
	case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS:
	case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING:
	case CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED:
	case CU_DEVICE_ATTRIBUTE_GLOBAL_L1_CACHE_SUPPORTED:
	case CU_DEVICE_ATTRIBUTE_LOCAL_L1_CACHE_SUPPORTED:
	case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY:
	case CU_DEVICE_ATTRIBUTE_COMPUTE_PREEMPTION_SUPPORTED:
	case CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM:
	case CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH:
	case CU_DEVICE_ATTRIBUTE_COOPERATIVE_MULTI_DEVICE_LAUNCH:
	case CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED:
	case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
	case CU_DEVICE_ATTRIBUTE_SPARSE_CUDA_ARRAY_SUPPORTED:
	case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED:
	case CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED:
	case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED:
	case CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH:
	case CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS:
	case CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR:
	case CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED:
	case CU_DEVICE_ATTRIBUTE_TENSOR_MAP_ACCESS_SUPPORTED:
	case CU_DEVICE_ATTRIBUTE_UNIFIED_FUNCTION_POINTERS:
	case CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS:
		return 1;
	default:
		return 0;
	}
}

CUresult cuDeviceGetAttribute(int *value, CUdevice_attribute attr, CUdevice dev)
{
	struct sim_device *d;

	SIM_ENTER(cuDeviceGetAttribute);
	d = sim_device_get(dev);
	if (!d)
		return CUDA_ERROR_INVALID_DEVICE;
	if (!value || attr <= 0 || attr >= CU_DEVICE_ATTRIBUTE_MAX)
		return CUDA_ERROR_INVALID_VALUE;
	*value = sim_attribute_value(attr, d);
	return CUDA_SUCCESS;
}

CUresult cuDeviceGetPCIBusId(char *bus_id, int len, CUdevice dev)
{
	struct sim_device *d;

	SIM_ENTER(cuDeviceGetPCIBusId);
	d = sim_device_get(dev);
	if (!d)
		return CUDA_ERROR_INVALID_DEVICE;
	if (!bus_id || len <= 0)
		return CUDA_ERROR_INVALID_VALUE;
	snprintf(bus_id, (size_t)len, "00000000:%02X:00.0", d->pci_bus);
	return CUDA_SUCCESS;
}

CUresult cuDeviceGetByPCIBusId(CUdevice *dev, const char *bus_id)
{
	unsigned domain = 0, bus = 0, slot = 0, function = 0;

	SIM_ENTER(cuDeviceGetByPCIBusId);
	if (!dev || !bus_id)
		return CUDA_ERROR_INVALID_VALUE;
	if (sscanf(bus_id, "%x:%x:%x.%x", &domain, &bus, &slot, &function) != 4 &&
	    sscanf(bus_id, "%x:%x.%x", &bus, &slot, &function) != 3)
		return CUDA_ERROR_INVALID_VALUE;
	for (int i = 0; i < sim_device_count; i++) {
		if (!domain && (unsigned)sim_devices[i].pci_bus == bus && !slot && !function) {
			*dev = i;
			return CUDA_SUCCESS;
		}
	}
	return CUDA_ERROR_INVALID_DEVICE;
}

CUresult cuDeviceComputeCapability(int *major, int *minor, CUdevice dev)
{
	SIM_ENTER(cuDeviceComputeCapability);
	if (!sim_device_get(dev))
		return CUDA_ERROR_INVALID_DEVICE;
	if (!major || !minor)
		return CUDA_ERROR_INVALID_VALUE;
	*major = 9;
	*minor = 0;
	return CUDA_SUCCESS;
}

CUresult cuDeviceCanAccessPeer(int *can_access, CUdevice dev, CUdevice peer)
{
	SIM_ENTER(cuDeviceCanAccessPeer);
	if (!sim_device_get(dev) || !sim_device_get(peer))
		return CUDA_ERROR_INVALID_DEVICE;
	if (!can_access)
		return CUDA_ERROR_INVALID_VALUE;
	*can_access = 0;
	return CUDA_SUCCESS;
}

/* ---- error strings ---- */

static const char *error_name(CUresult error)
{
	switch ((int)error) {
#define SIM_ERROR(sym, value)                                                                                \
	case value:                                                                                          \
		return #sym;
#include "sim_errors.h"
#undef SIM_ERROR
	default:
		return NULL;
	}
}

CUresult cuGetErrorName(CUresult error, const char **name)
{
	SIM_ENTER_NOINIT(cuGetErrorName);
	if (!name)
		return CUDA_ERROR_INVALID_VALUE;
	*name = error_name(error);
	return *name ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* "CUDA_ERROR_INVALID_VALUE" -> "invalid value": close to the real driver's short messages. */
CUresult cuGetErrorString(CUresult error, const char **text)
{
	static char messages[1000][64];
	static pthread_mutex_t messages_lock = PTHREAD_MUTEX_INITIALIZER;
	const char *name = error_name(error);

	SIM_ENTER_NOINIT(cuGetErrorString);
	if (!text)
		return CUDA_ERROR_INVALID_VALUE;
	if (!name || (unsigned)error >= 1000) {
		*text = NULL;
		return CUDA_ERROR_INVALID_VALUE;
	}
	if (error == CUDA_SUCCESS) {
		*text = "no error";
		return CUDA_SUCCESS;
	}
	pthread_mutex_lock(&messages_lock);
	if (!messages[error][0]) {
		const char *src = name + (strncmp(name, "CUDA_ERROR_", 11) ? 5 : 11);
		size_t i;

		for (i = 0; src[i] && i + 1 < sizeof(messages[error]); i++)
			messages[error][i] = src[i] == '_' ? ' ' : (char)tolower((unsigned char)src[i]);
		messages[error][i] = '\0';
	}
	*text = messages[error];
	pthread_mutex_unlock(&messages_lock);
	return CUDA_SUCCESS;
}
