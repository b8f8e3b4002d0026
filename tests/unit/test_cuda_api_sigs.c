/* The shared library built from cuda_api_sigs.c (argv[1]) exports every symbol of the table, and a call
 * through NVIDIA's own typedef reaches the generated body. */
#include <cuda.h>
#include <cudaTypedefs.h>
#include <dlfcn.h>

#include "check.h"
#include "crcuda/cuda_api.h"

int main(int argc, char **argv)
{
	void *lib;
	PFN_cuDriverGetVersion_v2020 get_version;
	PFN_cuMemcpyHtoD_v7000_ptds htod;
	int v = 0;

	if (argc != 2) {
		fprintf(stderr, "usage: %s path/to/libcrc_test_cuda_api_sigs.so\n", argv[0]);
		return 2;
	}
	lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		fprintf(stderr, "dlopen: %s\n", dlerror());
		return 1;
	}
	for (int i = 0; i < CRC_CU_COUNT; i++) {
		if (!dlsym(lib, crc_cu_table[i].sym)) {
			fprintf(stderr, "%s does not define %s\n", argv[1], crc_cu_table[i].sym);
			return 1;
		}
	}
	*(void **)&get_version = dlsym(lib, "cuDriverGetVersion");
	CHECK_EQ_INT(get_version(&v), CUDA_ERROR_NOT_SUPPORTED);
	*(void **)&htod = dlsym(lib, "cuMemcpyHtoD_v2_ptds");
	CHECK_EQ_INT(htod(0, "", 0), CUDA_ERROR_NOT_SUPPORTED);
	printf("%d signatures compiled and exported\n", CRC_CU_COUNT);
	dlclose(lib);
	return 0;
}
