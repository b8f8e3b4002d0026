/* The generated marshalling specs (crcuda/cuda_marshal.def) for a few signatures: argument kinds,
 * sizes, handle tags and posting mode, as the client and the daemon both expand them. */
#define __CUDA_API_VERSION_INTERNAL
#include <cuda.h>
#include <cudaProfiler.h>
#include <stdbool.h>

#include "check.h"
#include "crcuda/cuda_api.h"
#include "crcuda/proto.h"

struct spec {
	const char *sym;
	int nargs;
	bool async;
	struct crc_arg_spec args[16];
};

#define CRC_MODE_SYNC  false
#define CRC_MODE_ASYNC true

static const struct spec specs[] = {
#define CRC_FWD_BEGIN(sym, n, mode)                                                                          \
	{                                                                                                    \
#sym, n, CRC_MODE_##mode,                                                                    \
		{
#define CRC_FWD_ARG(sym, i, kind, type, name) [i] = CRC_ARG_SPEC(kind, type),
#define CRC_FWD_ARR(sym, i, kind, type, name, count, elem)                                                   \
	[i] = CRC_ARG_ARRAY_SPEC(kind, type, count, CRC_HT_NONE),
#define CRC_FWD_END(sym)                                                                                     \
	}                                                                                                    \
	}                                                                                                    \
	,
#include "crcuda/cuda_marshal.def"
};

static const struct spec *find(const char *sym)
{
	for (size_t i = 0; i < sizeof(specs) / sizeof(specs[0]); i++)
		if (!strcmp(specs[i].sym, sym))
			return &specs[i];
	fprintf(stderr, "no spec for %s\n", sym);
	exit(1);
}

static void check_arg(const struct spec *s, int i, int kind, int tag, size_t size)
{
	CHECK(i < s->nargs);
	CHECK_EQ_INT(s->args[i].kind, kind);
	CHECK_EQ_INT(s->args[i].tag, tag);
	CHECK_EQ_INT(s->args[i].size, size);
}

int main(void)
{
	const struct spec *s;

	s = find("cuDeviceGetAttribute");
	CHECK_EQ_INT(s->nargs, 3);
	CHECK(!s->async);
	check_arg(s, 0, CRC_ARG_OUT, CRC_HT_NONE, sizeof(int));
	check_arg(s, 1, CRC_ARG_VAL, CRC_HT_NONE, sizeof(CUdevice_attribute));
	check_arg(s, 2, CRC_ARG_VAL, CRC_HT_NONE, sizeof(CUdevice));

	s = find("cuStreamCreateWithPriority");
	check_arg(s, 0, CRC_ARG_HOUT, CRC_HT_STREAM, sizeof(CUstream));

	s = find("cuModuleGetGlobal_v2");
	CHECK_EQ_INT(s->nargs, 4);
	check_arg(s, 0, CRC_ARG_OUT, CRC_HT_NONE, sizeof(CUdeviceptr));
	check_arg(s, 1, CRC_ARG_OUT, CRC_HT_NONE, sizeof(size_t));
	check_arg(s, 2, CRC_ARG_HANDLE, CRC_HT_MODULE, sizeof(CUmodule));
	check_arg(s, 3, CRC_ARG_STR, CRC_HT_NONE, 1);

	s = find("cuEventRecord");
	CHECK(s->async);
	check_arg(s, 0, CRC_ARG_HANDLE, CRC_HT_EVENT, 8);
	check_arg(s, 1, CRC_ARG_HANDLE, CRC_HT_STREAM, 8);

	s = find("cuMemsetD32Async");
	CHECK(s->async);
	s = find("cuMemGetAccess");
	check_arg(s, 1, CRC_ARG_IN, CRC_HT_NONE, sizeof(CUmemLocation));
	/* A versioned handle typedef is still the handle. */
	s = find("cuMemMap");
	check_arg(s, 3, CRC_ARG_HANDLE, CRC_HT_MEMHANDLE, sizeof(CUmemGenericAllocationHandle));
	s = find("cuCtxSynchronize");
	CHECK_EQ_INT(s->nargs, 0);

	/* Every FORWARD row without a variant suffix has a spec. */
	for (int id = 0; id < CRC_CU_COUNT; id++) {
		const struct crc_cu_entry *e = &crc_cu_table[id];

		if (e->policy == CRC_CU_POLICY_FORWARD && e->pt == CRC_CU_PT_NONE)
			find(e->sym);
	}
	printf("unit_forward_marshal: PASS\n");
	return 0;
}
