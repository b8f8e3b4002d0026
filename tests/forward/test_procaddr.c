/* cuGetProcAddress through the built libcrcuda (dlopened), with the requests cudart makes: the empty
 * probe, ABI variants by version, per-thread variants by flag, itself, unknown names. No daemon is
 * needed: lookups never leave the process. */
#include <cuda.h>
#include <dlfcn.h>

#include "check.h"

typedef CUresult (*procaddr_fn)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);

int main(int argc, char **argv)
{
	CUdriverProcAddressQueryResult st;
	procaddr_fn get;
	void *lib, *p;

	CHECK(argc == 2);
	lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		fprintf(stderr, "%s\n", dlerror());
		return 1;
	}
	get = (procaddr_fn)dlsym(lib, "cuGetProcAddress_v2");
	CHECK(get != NULL);
#define SYM(name) dlsym(lib, name)

	/* cudart's first probe: empty symbol, SUCCESS with NULL. */
	p = (void *)1;
	CHECK_EQ_INT(get("", &p, 13000, 0, &st), CUDA_SUCCESS);
	CHECK(p == NULL);
	CHECK_EQ_INT(st, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);

	CHECK_EQ_INT(get("cuMemcpyHtoD", &p, 3020, 0, &st), CUDA_SUCCESS);
	CHECK(p == SYM("cuMemcpyHtoD_v2"));
	CHECK_EQ_INT(st, CU_GET_PROC_ADDRESS_SUCCESS);
	CHECK_EQ_INT(get("cuMemcpyHtoD", &p, 2000, 0, NULL), CUDA_SUCCESS);
	CHECK(p == SYM("cuMemcpyHtoD"));
	/* Per-thread default stream (flags 2, version 7000). */
	CHECK_EQ_INT(get("cuMemcpyHtoD", &p, 7000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, NULL),
		     CUDA_SUCCESS);
	CHECK(p == SYM("cuMemcpyHtoD_v2_ptds"));
	CHECK_EQ_INT(get("cuLaunchKernel", &p, 7000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, NULL),
		     CUDA_SUCCESS);
	CHECK(p == SYM("cuLaunchKernel_ptsz"));
	CHECK_EQ_INT(get("cuLaunchKernel", &p, 12000, CU_GET_PROC_ADDRESS_LEGACY_STREAM, NULL), CUDA_SUCCESS);
	CHECK(p == SYM("cuLaunchKernel"));
	/* Itself, at both versions cudart asks. */
	CHECK_EQ_INT(get("cuGetProcAddress", &p, 11030, 0, NULL), CUDA_SUCCESS);
	CHECK(p == SYM("cuGetProcAddress"));
	CHECK_EQ_INT(get("cuGetProcAddress", &p, 12000, 0, NULL), CUDA_SUCCESS);
	CHECK(p == SYM("cuGetProcAddress_v2"));
	/* A version newer than ours: our newest variant. */
	CHECK_EQ_INT(get("cuCtxCreate", &p, 99000, 0, &st), CUDA_SUCCESS);
	CHECK(p == SYM("cuCtxCreate_v4"));
	/* Unknown, and known only in later versions: SUCCESS, NULL, and the status says which. */
	CHECK_EQ_INT(get("cuNoSuchEntryPoint", &p, 13000, 0, &st), CUDA_SUCCESS);
	CHECK(p == NULL);
	CHECK_EQ_INT(st, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
	CHECK_EQ_INT(get("cuLibraryLoadData", &p, 11000, 0, &st), CUDA_SUCCESS);
	CHECK(p == NULL);
	CHECK_EQ_INT(st, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
	/* ABI names are not base names: cuGetProcAddress does not know "cuMemAlloc_v2". */
	CHECK_EQ_INT(get("cuMemAlloc_v2", &p, 13000, 0, &st), CUDA_SUCCESS);
	CHECK(p == NULL);
	/* Every exported symbol is a real dlsym-able symbol too. */
	CHECK(SYM("cuMemAlloc_v2") != NULL && SYM("cuStreamSynchronize_ptsz") != NULL);
	printf("unit_forward_procaddr: PASS\n");
	return 0;
}
