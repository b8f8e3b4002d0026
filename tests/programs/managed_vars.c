/* managed_vars: __managed__ variables of a module (cuModuleGetGlobal) and of a library
 * (cuLibraryGetManaged), read and written by the CPU in place between kernels, passed to a kernel as a
 * pointer, copied with cuMemcpy, and seen from another thread; a __device__ variable beside them is not
 * managed (CUDA_ERROR_NOT_FOUND from cuLibraryGetManaged). */
#include <pthread.h>
#include <string.h>

#include "cuda_test.h"

extern const unsigned char managed_vars_fatbin[];

#define TABLE 300

static int *count_seen_by_thread;

static void *read_count(void *arg)
{
	*(int *)arg = *count_seen_by_thread;
	return NULL;
}

/* One round on the variables of one image: count at *count, table at table. */
static void exercise(const char *what, CUfunction bump, CUfunction read, int *count, unsigned *table,
		     CUdeviceptr dout)
{
	unsigned expect[TABLE];
	int n = 7, out[2], from_thread = 0;
	pthread_t t;
	void *args[] = {&n};

	printf("%s: count %d table[0] %u\n", what, *count, table[0]);
	CHECK_EQ_INT(*count, 5);
	for (int i = 0; i < TABLE; i++) {
		table[i] = (unsigned)(i * 1000 + 1);
		expect[i] = table[i];
	}
	for (int round = 0; round < 3; round++) {
		CU_CHECK(cuLaunchKernel(bump, 1, 1, 1, TABLE, 1, 1, 0, NULL, args, NULL));
		for (int i = 0; i < TABLE; i++)
			expect[i] = expect[i] * 3 + (unsigned)i + 11;
		CU_CHECK(cuCtxSynchronize());
		CHECK_EQ_INT(*count, 5 + n * (round + 1));
		CHECK(!memcmp(table, expect, sizeof(expect)));
		table[round] += 100; /* the CPU's turn */
		expect[round] += 100;
	}
	/* The table's address is the kernel's too; the next kernel sees the CPU's last write. */
	{
		void *rargs[] = {&dout, &table};

		CU_CHECK(cuLaunchKernel(read, 1, 1, 1, 1, 1, 1, 0, NULL, rargs, NULL));
		CU_CHECK(cuMemcpyDtoH(out, dout, sizeof(out)));
		CHECK_EQ_INT(out[0], 5 + 3 * n);
		CHECK_EQ_INT(out[1], (int)expect[TABLE - 1]);
	}
	/* Copies name the variable itself. */
	{
		int v = 1234, back = 0;

		CU_CHECK(cuMemcpyHtoD((CUdeviceptr)(uintptr_t)count, &v, sizeof(v)));
		CHECK_EQ_INT(*count, 1234);
		*count = 4321;
		CU_CHECK(cuMemcpyDtoH(&back, (CUdeviceptr)(uintptr_t)count, sizeof(back)));
		CHECK_EQ_INT(back, 4321);
	}
	/* Another thread (no context of its own) reads it after a kernel. */
	CU_CHECK(cuLaunchKernel(bump, 1, 1, 1, TABLE, 1, 1, 0, NULL, args, NULL));
	CU_CHECK(cuCtxSynchronize());
	count_seen_by_thread = count;
	CHECK(!pthread_create(&t, NULL, read_count, &from_thread) && !pthread_join(t, NULL));
	CHECK_EQ_INT(from_thread, 4321 + n);
	printf("%s: count %d table[299] %u\n", what, *count, table[TABLE - 1]);
}

int main(void)
{
	CUdevice dev;
	CUmodule mod;
	CUlibrary lib;
	CUkernel kbump, kread;
	CUfunction bump, read;
	CUdeviceptr dcount, dtable, dout, dplain;
	size_t bytes = 0;

	cu_test_init("managed_vars");
	cu_test_primary_context(&dev);
	CU_CHECK(cuMemAlloc(&dout, 2 * sizeof(int)));

	CU_CHECK(cuModuleLoadData(&mod, managed_vars_fatbin));
	CU_CHECK(cuModuleGetFunction(&bump, mod, "_Z7mv_bumpi"));
	CU_CHECK(cuModuleGetFunction(&read, mod, "_Z7mv_readPiPKj"));
	CU_CHECK(cuModuleGetGlobal(&dcount, &bytes, mod, "mv_count"));
	CHECK_EQ_INT((int)bytes, (int)sizeof(int));
	CU_CHECK(cuModuleGetGlobal(&dtable, &bytes, mod, "mv_table"));
	CHECK_EQ_INT((int)bytes, TABLE * 4);
	{
		unsigned is_managed = 0;

		CU_CHECK(cuPointerGetAttribute(&is_managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, dtable));
		CHECK_EQ_INT((int)is_managed, 1);
	}
	exercise("module", bump, read, (int *)(uintptr_t)dcount, (unsigned *)(uintptr_t)dtable, dout);

	CU_CHECK(cuLibraryLoadData(&lib, managed_vars_fatbin, NULL, NULL, 0, NULL, NULL, 0));
	CU_CHECK(cuLibraryGetManaged(&dcount, &bytes, lib, "mv_count"));
	CHECK_EQ_INT((int)bytes, (int)sizeof(int));
	CU_CHECK(cuLibraryGetManaged(&dtable, NULL, lib, "mv_table"));
	CU_EXPECT(cuLibraryGetManaged(&dplain, &bytes, lib, "mv_plain"), CUDA_ERROR_NOT_FOUND);
	CU_EXPECT(cuLibraryGetManaged(NULL, NULL, lib, "mv_count"), CUDA_ERROR_INVALID_VALUE);
	CU_CHECK(cuLibraryGetKernel(&kbump, lib, "_Z7mv_bumpi"));
	CU_CHECK(cuLibraryGetKernel(&kread, lib, "_Z7mv_readPiPKj"));
	CU_CHECK(cuKernelGetFunction(&bump, kbump));
	CU_CHECK(cuKernelGetFunction(&read, kread));
	exercise("library", bump, read, (int *)(uintptr_t)dcount, (unsigned *)(uintptr_t)dtable, dout);

	CU_CHECK(cuLibraryUnload(lib));
	CU_CHECK(cuModuleUnload(mod));
	CU_CHECK(cuMemFree(dout));
	cu_test_pass("managed_vars");
	return 0;
}
