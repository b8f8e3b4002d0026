/* Compile-level proof that every signature of cuda_api.def is valid C and agrees with cuda.h: define every
 * exported function under its ABI name, returning CUDA_ERROR_NOT_SUPPORTED. With
 * __CUDA_API_VERSION_INTERNAL, cuda.h declares the per-thread variants and the old ABI variants too, so a
 * definition that disagrees with a declaration fails to compile. Built as a shared library with
 * -Wl,--no-undefined; test_cuda_api_sigs.c then looks every symbol up in it. */
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>
#include <cudaProfiler.h>

#include "crcuda/cuda_api_undef.h"

#define CRC_CU_API(sym, parent, base, version, policy, pt, ret, params, args)                                \
	ret CUDAAPI sym params                                                                               \
	{                                                                                                    \
		return CUDA_ERROR_NOT_SUPPORTED;                                                             \
	}
#include "crcuda/cuda_api.def"
#undef CRC_CU_API
