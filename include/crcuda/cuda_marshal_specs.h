/* The marshalling spec of every FORWARD row, generated from crcuda/cuda_marshal.def:
 *   static const struct crc_arg_spec spec_<sym>[nargs + 1]
 * Included by the client (libcrcuda/exports.c) and the daemon (crcudad/worker/session.c), so both read a
 * request with the same table (entries: CRC_ARG_SPEC, crcuda/proto.h). */
#ifndef CRCUDA_CUDA_MARSHAL_SPECS_H
#define CRCUDA_CUDA_MARSHAL_SPECS_H

#include "crcuda/proto.h"

#define CRC_FWD_BEGIN(sym, nargs, mode)	      static const struct crc_arg_spec spec_##sym[(nargs) + 1] = {
#define CRC_FWD_ARG(sym, i, kind, type, name) [i] = CRC_ARG_SPEC(kind, type),
#define CRC_ARR_TAG_HANDLE(type)	      CRC_HT_##type
#define CRC_ARR_TAG_PLAIN(type)		      CRC_HT_NONE
#define CRC_FWD_ARR(sym, i, kind, type, name, count, elem)                                                   \
	[i] = CRC_ARG_ARRAY_SPEC(kind, type, count, CRC_ARR_TAG_##elem(type)),
#define CRC_FWD_END(sym)                                                                                     \
	}                                                                                                    \
	;
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpedantic"
#include "crcuda/cuda_marshal.def"
#pragma GCC diagnostic pop
#undef CRC_FWD_BEGIN
#undef CRC_FWD_ARG
#undef CRC_FWD_ARR
#undef CRC_ARR_TAG_HANDLE
#undef CRC_ARR_TAG_PLAIN
#undef CRC_FWD_END

#endif
