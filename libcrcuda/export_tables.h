/* The driver's undocumented export tables (cuGetExportTable), served from inside libcrcuda.
 *
 * cudart, cuBLAS(Lt), cuDNN and NCCL each fetch these tables by UUID and call the function pointers in
 * them, so they cannot be forwarded to the daemon: every table lives in the application process.
 * The functions in them need a little driver state (contexts, device identity), which the rest of
 * libcrcuda supplies through struct crc_export_env. Layouts, slot semantics and sources are in
 * EXPORT_TABLES.md next to this file. */
#ifndef CRCUDA_EXPORT_TABLES_H
#define CRCUDA_EXPORT_TABLES_H

#include <stddef.h>
#include <stdint.h>

#include <cuda.h>

/* What the tables need from the rest of libcrcuda. Every callback must answer exactly as the
 * corresponding public entry point answers the application: cudart recomputes the integrity hash
 * from what cuDriverGetVersion, cuDeviceGetCount, cuDeviceGetUuid and cuDeviceGetAttribute(PCI_*)
 * told it, and compares. All callbacks may be called from any thread; none may call back into the
 * export tables. */
struct crc_export_env {
	/* dev's primary context handle, without retaining or activating it (the real driver leaves the
	 * primary context inactive here: cuDevicePrimaryCtxGetState still reports active=0 after it).
	 * Serves CUDART_INTERFACE slot 2. */
	CUresult (*primary_ctx)(CUdevice dev, CUcontext *out);
	/* The calling thread's current context, NULL if none (cuCtxGetCurrent). Called on every
	 * context-local-storage access that passes a NULL context, thousands of times a run: keep it
	 * local, no round trip to the daemon. */
	CUresult (*current_ctx)(CUcontext *out);
	/* cuCtxGetId for a non-NULL context (cuBLASLt's 21318c60 slot 4). */
	CUresult (*ctx_id)(CUcontext ctx, unsigned long long *id);
	/* cuDriverGetVersion. */
	CUresult (*driver_version)(int *version);
	/* cuDeviceGetCount. */
	CUresult (*device_count)(int *count);
	/* cuDeviceGetUuid (the 16 bytes cuDeviceGetUuid_v2 returns) and
	 * cuDeviceGetAttribute(CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID / _PCI_BUS_ID / _PCI_DEVICE_ID) of the
	 * device with this ordinal. */
	CUresult (*device_identity)(int ordinal, CUuuid *uuid, int *pci_domain, int *pci_bus,
				    int *pci_device);
	/* cuStreamGetId of stream; for the special handles 0, 1 and 2, of that default stream of ctx
	 * (NULL: the current context), the per-thread one for 0 when per_thread. cuBLASLt's 21318c60
	 * slot 51. */
	CUresult (*stream_id)(CUcontext ctx, CUstream stream, int per_thread, unsigned long long *id);
	/* Calls fn(arg, function, name) for each function of module, as cuModuleGetFunction would name
	 * it; the number of functions, or -1. The 6e163fbe table's slot 7, which cuFFT calls. */
	int (*module_functions)(CUmodule module, void (*fn)(void *arg, CUfunction f, const char *name),
				void *arg);
};

/* Sets the callbacks (copied). Call once, before the application can reach cuGetExportTable; a
 * later call replaces them. Until then, slots that need them return CUDA_ERROR_NOT_INITIALIZED. */
void crc_export_tables_init(const struct crc_export_env *env);

/* cuGetExportTable. Known UUID: *table = our static table, CUDA_SUCCESS. Anything else:
 * *table = NULL, CUDA_ERROR_INVALID_VALUE (logged once per UUID at info level). */
CUresult crc_export_table_get(const void **table, const CUuuid *id);

/* Call when a context is destroyed or a primary context is reset (cuCtxDestroy,
 * cuDevicePrimaryCtxReset, a primary context's last release): runs the destructor callbacks that
 * context-local-storage puts registered for ctx, as dtor(ctx, key, value), and drops the entries.
 * The destructors run on the calling thread with no lock held. */
void crc_export_ctx_destroyed(CUcontext ctx);

/* ---- The integrity hash (INTEGRITY_CHECK slot 1), as a pure function for tests ---------------- */

/* The fixed-size part of the hashed message, in this order, each field little-endian. */
struct crc_integrity_input {
	uint32_t driver_version;  /* cuDriverGetVersion, e.g. 13000 */
	uint32_t version;	  /* slot 1's first argument, e.g. 13002 */
	uint32_t pid;		  /* getpid() */
	uint32_t tid;		  /* the low 32 bits of pthread_self() */
	uint64_t cudart_table;	  /* address of our CUDART_INTERFACE table (its size word) */
	uint64_t integrity_table; /* address of our INTEGRITY_CHECK table (its size word) */
	uint64_t fn_address;	  /* the function pointer in INTEGRITY_CHECK slot 1 */
	uint64_t unix_seconds;	  /* slot 1's second argument */
};

/* One per device, ordinal order, appended to the message: 16 UUID bytes then three int32. */
struct crc_integrity_device {
	CUuuid uuid;
	int32_t pci_domain;
	int32_t pci_bus;
	int32_t pci_device;
};

/* out = HMAC-MD2 over (input || devices), as the two little-endian 64-bit words the caller gets;
 * versions ending in 0 or 1 give the fixed answers instead (see EXPORT_TABLES.md). */
void crc_integrity_hash(const struct crc_integrity_input *in, const struct crc_integrity_device *devs,
			unsigned ndev, uint64_t out[2]);

/* MD2 (RFC 1319) of len bytes, exposed for the test's known-answer checks. */
void crc_md2(const void *data, size_t len, uint8_t digest[16]);

#endif
