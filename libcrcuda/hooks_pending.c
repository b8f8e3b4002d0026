/* HOOK rows not implemented yet: each answers CUDA_ERROR_NOT_SUPPORTED with one log line naming the
 * function (crc_not_supported). This list is the one place that says so; a hook neither implemented
 * elsewhere nor listed here is a link error. Remove a line when its hook is written. */
#include "client.h"

/* The parameters are the row's, unused by design. */
#pragma GCC diagnostic ignored "-Wunused-parameter"

#define CRC_PENDING(sym)                                                                                     \
	CUresult crc_hook_##sym CRC_SIG_##sym;                                                               \
	CUresult crc_hook_##sym CRC_SIG_##sym                                                                \
	{                                                                                                    \
		return crc_not_supported(CRC_CU_##sym);                                                      \
	}

CRC_PENDING(cuMemMapArrayAsync)
