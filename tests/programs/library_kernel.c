/* library_kernel: what cudart does with a registered fatbin. cuLibraryLoadData on the
 * __fatBinC_Wrapper_t (BINARY_IS_PRESERVED), cuLibraryGetKernel by mangled name, cuLaunchKernel on the
 * CUkernel itself; parameter info of a padded struct parameter; a library global; and the CUfunction
 * and module of the current context. */
#include <string.h>

#include "cuda_test.h"

extern const unsigned char library_kernel_fatbin[];

struct fatbin_wrapper { /* __fatBinC_Wrapper_t */
	int magic;
	int version;
	const void *data;
	void *filename_or_fatbins;
};

struct packed {
	double d;
	char c[13];
};

#define N 1000

int main(void)
{
	CUdevice dev;
	CUlibrary lib;
	CUkernel saxpy, pack;
	CUfunction saxpy_fn;
	CUmodule mod, fn_mod;
	CUdeviceptr dx, dy, dout, dseen;
	size_t offset, size, bytes;
	const char *name = NULL;
	int x[N], y[N], expected[N], a = -7, n = N, seen, max_threads = 0;
	unsigned kernel_count = 0;
	const struct fatbin_wrapper wrapper = {0x466243B1, 1, library_kernel_fatbin, NULL};
	CUlibraryOption option = CU_LIBRARY_BINARY_IS_PRESERVED;
	void *option_value = (void *)1;

	cu_test_init("library_kernel");
	cu_test_primary_context(&dev);
	CU_CHECK(cuLibraryLoadData(&lib, &wrapper, NULL, NULL, 0, &option, &option_value, 1));
	CU_CHECK(cuLibraryGetKernelCount(&kernel_count, lib));
	CHECK_EQ_INT(kernel_count, 2);
	CU_CHECK(cuLibraryGetKernel(&saxpy, lib, "_Z7saxpy_iiPKiPii"));
	CU_CHECK(cuLibraryGetKernel(&pack, lib, "_Z11pack_paramsiPx6Packeds"));
	CU_EXPECT(cuLibraryGetKernel(&pack, lib, "saxpy_i"), CUDA_ERROR_NOT_FOUND);
	CU_CHECK(cuLibraryGetKernel(&pack, lib, "_Z11pack_paramsiPx6Packeds"));
	{
		/* Enumerated: the same two kernels, the same handles, named as loaded. */
		CUkernel ks[2] = {0};
		const char *name;
		int seen = 0;

		CU_CHECK(cuLibraryEnumerateKernels(ks, 2, lib));
		for (unsigned i = 0; i < 2; i++) {
			CU_CHECK(cuKernelGetName(&name, ks[i]));
			if (!strcmp(name, "_Z7saxpy_iiPKiPii") && ks[i] == saxpy)
				seen |= 1;
			if (!strcmp(name, "_Z11pack_paramsiPx6Packeds") && ks[i] == pack)
				seen |= 2;
		}
		CHECK_EQ_INT(seen, 3);
		CU_EXPECT(cuLibraryEnumerateKernels(NULL, 2, lib), CUDA_ERROR_INVALID_VALUE);
	}
	CU_CHECK(cuKernelGetAttribute(&max_threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, saxpy, dev));
	CHECK(max_threads >= 256);

	/* (int, long long *, struct {double; char[13]}, short): the driver notes' measured layout. */
	const size_t want_offset[] = {0, 8, 16, 40}, want_size[] = {4, 8, 24, 2};
	for (unsigned i = 0; i < 4; i++) {
		CU_CHECK(cuKernelGetParamInfo(pack, i, &offset, &size));
		CHECK_EQ_INT(offset, want_offset[i]);
		CHECK_EQ_INT(size, want_size[i]);
	}
	CU_EXPECT(cuKernelGetParamInfo(pack, 4, &offset, &size), CUDA_ERROR_INVALID_VALUE);

	for (int i = 0; i < N; i++) {
		x[i] = i * 3 - 500;
		y[i] = 10000 - i;
		expected[i] = a * x[i] + y[i];
	}
	CU_CHECK(cuMemAlloc(&dx, sizeof(x)));
	CU_CHECK(cuMemAlloc(&dy, sizeof(y)));
	CU_CHECK(cuMemcpyHtoD(dx, x, sizeof(x)));
	CU_CHECK(cuMemcpyHtoD(dy, y, sizeof(y)));
	void *params[] = {&a, &dx, &dy, &n};
	/* The CUkernel goes straight to cuLaunchKernel, as cudart does. */
	CU_CHECK(cuLaunchKernel((CUfunction)saxpy, (N + 127) / 128, 1, 1, 128, 1, 1, 0, NULL, params, NULL));
	CU_CHECK(cuMemcpyDtoH(y, dy, sizeof(y)));
	CHECK(!memcmp(y, expected, sizeof(y)));

	CU_CHECK(cuLibraryGetGlobal(&dseen, &bytes, lib, "launches_seen"));
	CHECK_EQ_INT(bytes, sizeof(int));
	CU_CHECK(cuMemcpyDtoH(&seen, dseen, sizeof(seen)));
	CHECK_EQ_INT(seen, 101);

	/* The CUfunction of the current context names the same kernel and shares its globals. */
	CU_CHECK(cuKernelGetFunction(&saxpy_fn, saxpy));
	CU_CHECK(cuFuncGetName(&name, saxpy_fn));
	CHECK_EQ_STR(name, "_Z7saxpy_iiPKiPii");
	CU_CHECK(cuLibraryGetModule(&mod, lib));
	CU_CHECK(cuFuncGetModule(&fn_mod, saxpy_fn));
	CHECK(mod == fn_mod);
	CU_CHECK(cuLaunchKernel(saxpy_fn, (N + 127) / 128, 1, 1, 128, 1, 1, 0, NULL, params, NULL));
	CU_CHECK(cuMemcpyDtoH(&seen, dseen, sizeof(seen)));
	CHECK_EQ_INT(seen, 102);

	/* A struct parameter copied by its size, padding and all. */
	struct packed s = {.d = 12345.0};
	short t = -321;
	memset(s.c, 0, sizeof(s.c));
	s.c[12] = 77;
	CU_CHECK(cuMemAlloc(&dout, 4 * sizeof(long long)));
	void *pack_params[] = {&a, &dout, &s, &t};
	CU_CHECK(cuLaunchKernel((CUfunction)pack, 1, 1, 1, 32, 1, 1, 0, NULL, pack_params, NULL));
	long long out[4];
	CU_CHECK(cuMemcpyDtoH(out, dout, sizeof(out)));
	CHECK_EQ_INT(out[0], a);
	CHECK_EQ_INT(out[1], 12345);
	CHECK_EQ_INT(out[2], 77);
	CHECK_EQ_INT(out[3], -321);

	CU_CHECK(cuMemFree(dx));
	CU_CHECK(cuMemFree(dy));
	CU_CHECK(cuMemFree(dout));
	CU_CHECK(cuLibraryUnload(lib));
	CU_CHECK(cuDevicePrimaryCtxRelease(0));
	cu_test_pass("library_kernel");
}
