/* The NVML types crcuda's libnvidia-ml.so.1 needs, written from NVML's public API documentation
 * (docs.nvidia.com/deploy/nvml-api): values and layouts are the documented ABI; the declarations
 * are ours (NVIDIA's nvml.h is not used). Structs that only pass through unsupported entry points
 * stay incomplete, and enums that only pass through them are unsigned int (the size of a C enum). */
#ifndef CRCUDA_NVML_TYPES_H
#define CRCUDA_NVML_TYPES_H

typedef enum nvmlReturn_enum {
	NVML_SUCCESS = 0,
	NVML_ERROR_UNINITIALIZED = 1,
	NVML_ERROR_INVALID_ARGUMENT = 2,
	NVML_ERROR_NOT_SUPPORTED = 3,
	NVML_ERROR_NO_PERMISSION = 4,
	NVML_ERROR_ALREADY_INITIALIZED = 5,
	NVML_ERROR_NOT_FOUND = 6,
	NVML_ERROR_INSUFFICIENT_SIZE = 7,
	NVML_ERROR_INSUFFICIENT_POWER = 8,
	NVML_ERROR_DRIVER_NOT_LOADED = 9,
	NVML_ERROR_TIMEOUT = 10,
	NVML_ERROR_IRQ_ISSUE = 11,
	NVML_ERROR_LIBRARY_NOT_FOUND = 12,
	NVML_ERROR_FUNCTION_NOT_FOUND = 13,
	NVML_ERROR_CORRUPTED_INFOROM = 14,
	NVML_ERROR_GPU_IS_LOST = 15,
	NVML_ERROR_RESET_REQUIRED = 16,
	NVML_ERROR_OPERATING_SYSTEM = 17,
	NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18,
	NVML_ERROR_IN_USE = 19,
	NVML_ERROR_MEMORY = 20,
	NVML_ERROR_NO_DATA = 21,
	NVML_ERROR_VGPU_ECC_NOT_SUPPORTED = 22,
	NVML_ERROR_INSUFFICIENT_RESOURCES = 23,
	NVML_ERROR_FREQ_NOT_SUPPORTED = 24,
	NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
	NVML_ERROR_DEPRECATED = 26,
	NVML_ERROR_NOT_READY = 27,
	NVML_ERROR_GPU_NOT_FOUND = 28,
	NVML_ERROR_INVALID_STATE = 29,
	NVML_ERROR_UNKNOWN = 999,
} nvmlReturn_t;

/* Opaque to the application; nvml.c completes it. */
typedef struct nvmlDevice_st *nvmlDevice_t;

#define NVML_INIT_FLAG_NO_GPUS		       1u
#define NVML_INIT_FLAG_NO_ATTACH	       2u
#define NVML_DEVICE_UUID_BUFFER_SIZE	       80
#define NVML_DEVICE_UUID_V2_BUFFER_SIZE	       96
#define NVML_DEVICE_NAME_BUFFER_SIZE	       64
#define NVML_DEVICE_NAME_V2_BUFFER_SIZE	       96
#define NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE     32
#define NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE  16
#define NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE 80
#define NVML_SYSTEM_NVML_VERSION_BUFFER_SIZE   80
#define NVML_DEVICE_PCI_BUS_ID_FMT	       "%08X:%02X:%02X.0"
#define NVML_DEVICE_PCI_BUS_ID_LEGACY_FMT      "%04X:%02X:%02X.0"
#define NVML_NVLINK_MAX_LINKS		       18
#define NVML_VALUE_NOT_AVAILABLE	       (~0ull)
/* Versioned structs carry sizeof | (version << 24) in their first word. */
#define NVML_STRUCT_VERSION(type, ver) ((unsigned int)(sizeof(type) | ((ver) << 24u)))

typedef struct nvmlMemory_st {
	unsigned long long total;
	unsigned long long free;
	unsigned long long used;
} nvmlMemory_t;

typedef struct nvmlMemory_v2_st {
	unsigned int version;
	unsigned long long total;
	unsigned long long reserved;
	unsigned long long free;
	unsigned long long used;
} nvmlMemory_v2_t;
#define nvmlMemory_v2 NVML_STRUCT_VERSION(nvmlMemory_v2_t, 2)

/* pciDeviceId and pciSubSystemId: the 16-bit device (subsystem) id above the 16-bit vendor id. */
typedef struct nvmlPciInfo_st {
	char busIdLegacy[NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE];
	unsigned int domain;
	unsigned int bus;
	unsigned int device;
	unsigned int pciDeviceId;
	unsigned int pciSubSystemId;
	char busId[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
} nvmlPciInfo_t;

/* Our name for the layout the unversioned nvmlDeviceGetPciInfo and nvmlDeviceGetNvLinkRemotePciInfo
 * still write (before NVML's _v2): a 16-byte bus id first and four reserved words last. */
typedef struct nvmlPciInfo_v1_st {
	char busId[NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE];
	unsigned int domain;
	unsigned int bus;
	unsigned int device;
	unsigned int pciDeviceId;
	unsigned int pciSubSystemId;
	unsigned int reserved0;
	unsigned int reserved1;
	unsigned int reserved2;
	unsigned int reserved3;
} nvmlPciInfo_v1_t;

typedef struct nvmlProcessInfo_v1_st {
	unsigned int pid;
	unsigned long long usedGpuMemory;
} nvmlProcessInfo_v1_t;

/* nvmlProcessInfo_v2_t in NVML's terms; the _v2 and _v3 process queries fill it. */
typedef struct nvmlProcessInfo_st {
	unsigned int pid;
	unsigned long long usedGpuMemory;
	unsigned int gpuInstanceId;
	unsigned int computeInstanceId;
} nvmlProcessInfo_t;

typedef struct nvmlUtilization_st {
	unsigned int gpu;
	unsigned int memory;
} nvmlUtilization_t;

typedef enum nvmlEnableState_enum {
	NVML_FEATURE_DISABLED = 0,
	NVML_FEATURE_ENABLED = 1,
} nvmlEnableState_t;

typedef enum nvmlComputeMode_enum {
	NVML_COMPUTEMODE_DEFAULT = 0,
	NVML_COMPUTEMODE_EXCLUSIVE_THREAD = 1,
	NVML_COMPUTEMODE_PROHIBITED = 2,
	NVML_COMPUTEMODE_EXCLUSIVE_PROCESS = 3,
} nvmlComputeMode_t;

typedef enum nvmlClockType_enum {
	NVML_CLOCK_GRAPHICS = 0,
	NVML_CLOCK_SM = 1,
	NVML_CLOCK_MEM = 2,
	NVML_CLOCK_VIDEO = 3,
} nvmlClockType_t;

typedef enum nvmlGpuP2PCapsIndex_enum {
	NVML_P2P_CAPS_INDEX_READ = 0,
	NVML_P2P_CAPS_INDEX_WRITE = 1,
	NVML_P2P_CAPS_INDEX_NVLINK = 2,
	NVML_P2P_CAPS_INDEX_ATOMICS = 3,
	NVML_P2P_CAPS_INDEX_PCI = 4,
	NVML_P2P_CAPS_INDEX_UNKNOWN = 5,
} nvmlGpuP2PCapsIndex_t;

typedef enum nvmlGpuP2PStatus_enum {
	NVML_P2P_STATUS_OK = 0,
	NVML_P2P_STATUS_CHIPSET_NOT_SUPPORTED = 1,
	NVML_P2P_STATUS_GPU_NOT_SUPPORTED = 2,
	NVML_P2P_STATUS_IOH_TOPOLOGY_NOT_SUPPORTED = 3,
	NVML_P2P_STATUS_DISABLED_BY_REGKEY = 4,
	NVML_P2P_STATUS_NOT_SUPPORTED = 5,
	NVML_P2P_STATUS_UNKNOWN = 6,
} nvmlGpuP2PStatus_t;

typedef enum nvmlValueType_enum {
	NVML_VALUE_TYPE_DOUBLE = 0,
	NVML_VALUE_TYPE_UNSIGNED_INT = 1,
	NVML_VALUE_TYPE_UNSIGNED_LONG = 2,
	NVML_VALUE_TYPE_UNSIGNED_LONG_LONG = 3,
	NVML_VALUE_TYPE_SIGNED_LONG_LONG = 4,
	NVML_VALUE_TYPE_SIGNED_INT = 5,
	NVML_VALUE_TYPE_UNSIGNED_SHORT = 6,
} nvmlValueType_t;

typedef union nvmlValue_st {
	double dVal;
	int siVal;
	unsigned int uiVal;
	unsigned long ulVal;
	unsigned long long ullVal;
	signed long long sllVal;
	unsigned short usVal;
} nvmlValue_t;

typedef struct nvmlFieldValue_st {
	unsigned int fieldId;
	unsigned int scopeId;
	long long timestamp;
	long long latencyUsec;
	nvmlValueType_t valueType;
	nvmlReturn_t nvmlReturn;
	nvmlValue_t value;
} nvmlFieldValue_t;

typedef struct nvmlBAR1Memory_st {
	unsigned long long bar1Total;
	unsigned long long bar1Free;
	unsigned long long bar1Used;
} nvmlBAR1Memory_t;

typedef struct nvmlProcessUtilizationSample_st {
	unsigned int pid;
	unsigned long long timeStamp;
	unsigned int smUtil;
	unsigned int memUtil;
	unsigned int encUtil;
	unsigned int decUtil;
} nvmlProcessUtilizationSample_t;

typedef struct nvmlViolationTime_st {
	unsigned long long referenceTime;
	unsigned long long violationTime;
} nvmlViolationTime_t;

/* Enumerations the library only passes on or copies (4 bytes, as NVML's enums). */
typedef unsigned int nvmlAffinityScope_t;
typedef unsigned int nvmlBrandType_t;
typedef unsigned int nvmlClockId_t;
typedef unsigned int nvmlDeviceArchitecture_t;
typedef unsigned int nvmlEccCounterType_t;
typedef unsigned int nvmlGpuTopologyLevel_t;
typedef unsigned int nvmlGpuVirtualizationMode_t;
typedef unsigned int nvmlInforomObject_t;
typedef unsigned int nvmlIntNvLinkDeviceType_t;
typedef unsigned int nvmlMemoryErrorType_t;
typedef unsigned int nvmlMemoryLocation_t;
typedef unsigned int nvmlNvLinkCapability_t;
typedef unsigned int nvmlPcieUtilCounter_t;
typedef unsigned int nvmlPerfPolicyType_t;
typedef unsigned int nvmlPstates_t;
typedef unsigned int nvmlTemperatureSensors_t;
typedef unsigned int nvmlTemperatureThresholds_t;
typedef struct nvmlEventSet_st *nvmlEventSet_t;
typedef struct nvmlConfComputeSystemState_st nvmlConfComputeSystemState_t;
typedef struct nvmlEventData_st nvmlEventData_t;
typedef struct nvmlGpuFabricInfo_st nvmlGpuFabricInfo_t;
typedef struct nvmlGpuFabricInfo_v2_st nvmlGpuFabricInfoV_t;
typedef struct nvmlPlatformInfo_st nvmlPlatformInfo_t;
typedef struct nvmlSystemConfComputeSettings_st nvmlSystemConfComputeSettings_t;

/* nvmlDeviceGetTemperatureV: version is nvmlTemperature_v1. */
typedef struct nvmlTemperature_st {
	unsigned int version;
	nvmlTemperatureSensors_t sensorType;
	int temperature;
} nvmlTemperature_t;
#define nvmlTemperature_v1 NVML_STRUCT_VERSION(nvmlTemperature_t, 1)

#endif
