/* The hand-written entry points, declared from the driver API table (crcuda/cuda_api.def) so that a
 * missing one fails the link and hooks in different files can call one another: crc_hook_<sym> (HOOK
 * rows) and crc_local_<sym> (LOCAL rows). */
#ifndef CRCUDA_LIBCRCUDA_HOOKS_H
#define CRCUDA_LIBCRCUDA_HOOKS_H

#include <cuda.h>

#define CRC_CU_API(sym, parent, base, version, policy, pt, ret, params, args)                                \
	CRC_DECL_##policy##_##pt(sym, ret, params)
#define CRC_DECL_HOOK_NONE(sym, ret, params)  ret crc_hook_##sym params;
#define CRC_DECL_LOCAL_NONE(sym, ret, params) ret crc_local_##sym params;
#define CRC_DECL_FORWARD_NONE(sym, ret, params)
#define CRC_DECL_UNSUPPORTED_NONE(sym, ret, params)
#define CRC_DECL_HOOK_PTDS(sym, ret, params)
#define CRC_DECL_LOCAL_PTDS(sym, ret, params)
#define CRC_DECL_FORWARD_PTDS(sym, ret, params)
#define CRC_DECL_UNSUPPORTED_PTDS(sym, ret, params)
#define CRC_DECL_HOOK_PTSZ(sym, ret, params)
#define CRC_DECL_LOCAL_PTSZ(sym, ret, params)
#define CRC_DECL_FORWARD_PTSZ(sym, ret, params)
#define CRC_DECL_UNSUPPORTED_PTSZ(sym, ret, params)
#include "crcuda/cuda_api.def"
#undef CRC_CU_API

#endif
