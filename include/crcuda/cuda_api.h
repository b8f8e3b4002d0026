/* The driver API table: every function libcuda.so.1 exports, from "crcuda/cuda_api.def" (generated from
 * common/cuda-api/cuda_driver.api). This header needs no CUDA header; expanding the signatures of the .def
 * does (see the .def's own comment). */
#ifndef CRCUDA_CUDA_API_H
#define CRCUDA_CUDA_API_H

/** What libcrcuda does with a call; a per-thread variant has its parent's policy. */
enum crc_cu_policy {
	CRC_CU_POLICY_FORWARD,	   /**< generated pass-through to crcudad */
	CRC_CU_POLICY_HOOK,	   /**< hand-written in libcrcuda */
	CRC_CU_POLICY_LOCAL,	   /**< answered in the client from cached state */
	CRC_CU_POLICY_UNSUPPORTED, /**< CUDA_ERROR_NOT_SUPPORTED */
};

/** Per-thread-default-stream flavour of a symbol. */
enum crc_cu_pt {
	CRC_CU_PT_NONE,
	CRC_CU_PT_PTDS,
	CRC_CU_PT_PTSZ,
};

/** One id per exported symbol, in the order of the table (byte order of the symbol). */
enum crc_cu_id {
#define CRC_CU_API(sym, parent, base, version, policy, pt, ret, params, args) CRC_CU_##sym,
#include "crcuda/cuda_api.def"
#undef CRC_CU_API
	CRC_CU_COUNT
};

struct crc_cu_entry {
	const char *sym;  /**< ABI symbol: cuMemcpyHtoD_v2_ptds */
	const char *base; /**< name given to cuGetProcAddress: cuMemcpyHtoD */
	int parent;	  /**< id of the symbol without _ptds/_ptsz; its own id for a normal symbol */
	int version;	  /**< of its typedef PFN_<base>_v<version>[_ptds|_ptsz]: 7000 */
	enum crc_cu_policy policy;
	enum crc_cu_pt pt;
};

/** Indexed by enum crc_cu_id, so sorted by sym. */
extern const struct crc_cu_entry crc_cu_table[CRC_CU_COUNT];

/** @return the id of the ABI symbol @p sym (exact match, as dlsym sees it), or -1. */
int crc_cu_find(const char *sym);

/**
 * cuGetProcAddress's choice, as the driver documents it.
 *
 * Among the symbols whose base name is @p base (cuGetProcAddress takes base names only: "cuMemAlloc_v2"
 * is not found, as with the real driver; dlsym-style lookups use crc_cu_find), take the normal one with
 * the greatest version <= @p cuda_version. With CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM (2) in
 * @p flags, answer that symbol's _ptds/_ptsz variant instead, if it has one whose version is also <=
 * @p cuda_version (cuMemcpyHtoD at 7000 gives cuMemcpyHtoD_v2_ptds; at 3020, before per-thread streams
 * existed, cuMemcpyHtoD_v2). CU_GET_PROC_ADDRESS_LEGACY_STREAM (1) and CU_GET_PROC_ADDRESS_DEFAULT (0)
 * give the normal symbol (a driver has no build-time per-thread default).
 *
 * @param status  if not NULL, a CUdriverProcAddressQueryResult: CU_GET_PROC_ADDRESS_SUCCESS,
 *                CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND (unknown, empty or NULL @p base) or
 *                CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT (known, but only in later versions).
 * @return the id of the chosen symbol, or -1.
 */
int crc_cu_resolve(const char *base, int cuda_version, unsigned long long flags, int *status);

#endif
