/* Every libcuda.so.1 export, from the driver API table: a weak stub for each (CUDA_ERROR_NOT_SUPPORTED,
 * logged once by name) that the sim's real implementations, strong symbols in the other files,
 * replace at link time; and the table of what the linker chose, for cuGetProcAddress. */
#define LOG_PREFIX "sim: "

#include <string.h>

#include "crcuda/cuda_api.h"
#include "crcuda/log.h"
#include "sim.h"

static atomic_bool unimplemented_logged[CRC_CU_COUNT];

static CUresult sim_unimplemented(enum crc_cu_id id)
{
	CUresult injected;

	if (atomic_load_explicit(&sim_fail_armed, memory_order_relaxed)) {
		injected = sim_fail_check(crc_cu_table[id].sym);
		if (injected != CUDA_SUCCESS)
			return injected;
	}
	if (!atomic_exchange(&unimplemented_logged[id], true))
		pr_warn("%s is not implemented by the simulated device", crc_cu_table[id].sym);
	return CUDA_ERROR_NOT_SUPPORTED;
}

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
#define CRC_CU_API(sym, parent, base, version, policy, pt, ret, params, args)                                \
	__attribute__((weak)) ret sym params                                                                 \
	{                                                                                                    \
		return sim_unimplemented(CRC_CU_##sym);                                                      \
	}
#include "crcuda/cuda_api.def"
#undef CRC_CU_API
#pragma GCC diagnostic pop

/* Indexed by enum crc_cu_id; the linker has put the implemented functions in place of the stubs. */
static void *const sim_entry_points[CRC_CU_COUNT] = {
#define CRC_CU_API(sym, parent, base, version, policy, pt, ret, params, args) [CRC_CU_##sym] = (void *)sym,
#include "crcuda/cuda_api.def"
#undef CRC_CU_API
};

void *sim_entry_point(int id)
{
	return id >= 0 && id < CRC_CU_COUNT ? sim_entry_points[id] : NULL;
}
