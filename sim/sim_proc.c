/* cuGetProcAddress answers with the sim's own functions, chosen by crc_cu_resolve as the driver
 * chooses; cuGetExportTable refuses for now. */
#define LOG_PREFIX "sim: "

#include "crcuda/cuda_api.h"
#include "crcuda/log.h"
#include "sim.h"

static CUresult get_proc_address(const char *symbol, void **pfn, int cuda_version, cuuint64_t flags,
				 CUdriverProcAddressQueryResult *status)
{
	int found_status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
	int id;

	if (!pfn)
		return CUDA_ERROR_INVALID_VALUE;
	*pfn = NULL;
	if (flags &
	    ~(cuuint64_t)(CU_GET_PROC_ADDRESS_LEGACY_STREAM | CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM))
		return CUDA_ERROR_INVALID_VALUE;
	if (cuda_version > SIM_DRIVER_VERSION)
		return CUDA_ERROR_INVALID_VALUE;
	/* cudart probes with "": SUCCESS and NULL, as from the driver. */
	id = symbol && *symbol ? crc_cu_resolve(symbol, cuda_version, flags, &found_status) : -1;
	if (id >= 0)
		*pfn = sim_entry_point(id);
	if (status)
		*status = (CUdriverProcAddressQueryResult)found_status;
	return CUDA_SUCCESS;
}

CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cuda_version, cuuint64_t flags,
			     CUdriverProcAddressQueryResult *status)
{
	SIM_ENTER_NOINIT(cuGetProcAddress_v2);
	return get_proc_address(symbol, pfn, cuda_version, flags, status);
}

CUresult cuGetProcAddress(const char *symbol, void **pfn, int cuda_version, cuuint64_t flags)
{
	SIM_ENTER_NOINIT(cuGetProcAddress);
	return get_proc_address(symbol, pfn, cuda_version, flags, NULL);
}

/* The hidden tables come with the issue that serves them in libcrcuda; cudart cannot run here yet,
 * the driver-API programs can. */
CUresult cuGetExportTable(const void **table, const CUuuid *id)
{
	SIM_ENTER_NOINIT(cuGetExportTable);
	if (!table || !id)
		return CUDA_ERROR_INVALID_VALUE;
	*table = NULL;
	return CUDA_ERROR_NOT_SUPPORTED;
}
