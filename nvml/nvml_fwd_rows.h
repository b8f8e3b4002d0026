/* The `forward` rows of nvml.api as one table of descriptions and typed calls, for code that calls an
 * NVML by name: crcudad's worker (the real NVML of its GPU) and the tests (two NVMLs, compared).
 * Include it once, after the headers it names. */
#ifndef CRCUDA_NVML_FWD_ROWS_H
#define CRCUDA_NVML_FWD_ROWS_H

#include "crcuda/nvml_fwd.h"
#include "nvml_types.h"

struct crc_nvml_row {
	struct crc_nvml_fn fn;
	const char *fallback; /* "NONE", "DRIVER" or "EMPTY": the answer where nothing forwards */
	/* Calls fn (the row's function, from dlsym) with the arguments a. */
	nvmlReturn_t (*invoke)(void *fn, union crc_nvml_arg *a);
};

#define NVML_UNPAREN_(...)				 __VA_ARGS__
#define NVML_API(sym, policy, target, ret, params, args) ret sym params;
#define NVML_FWD(sym, fallback, flags, ret, params, args, desc, pack, call)                                  \
	static const struct crc_nvml_param sym##_params[] = {NVML_UNPAREN_ desc};                            \
	static nvmlReturn_t sym##_invoke(void *fn, union crc_nvml_arg *a)                                    \
	{                                                                                                    \
		return ((__typeof__(&sym))fn)call;                                                           \
	}
#include "nvml_exports.def"
#undef NVML_FWD
#undef NVML_API

#define NVML_API(sym, policy, target, ret, params, args)
#define NVML_FWD(sym, fallback, flags, ret, params, args, desc, pack, call)                                  \
	{{#sym, sym##_params, sizeof(sym##_params) / sizeof(sym##_params[0]), flags},                        \
	 #fallback,                                                                                          \
	 sym##_invoke},
/* Sorted by name, as the table is. */
static const struct crc_nvml_row crc_nvml_rows[] = {
#include "nvml_exports.def"
};
#undef NVML_FWD
#undef NVML_API
#undef NVML_UNPAREN_
#define CRC_NVML_ROWS (sizeof(crc_nvml_rows) / sizeof(crc_nvml_rows[0]))

#endif
