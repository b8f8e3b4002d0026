/* coredump: the coredump attributes (cuCoredump{Get,Set}Attribute[Global]). Each attribute's size
 * (a NULL value asks), the process's defaults (the default file and pipe names only by their prefix:
 * they carry a process id), a context's and the process's values set and read back (a bool, the
 * generation flags, the file name), a context made after the process's Set seeing the process's
 * file, and the refusals (a bad attribute, a NULL size, a string too long for its size, the pipe set
 * on a context) printed, so natively and under the layer must print the same
 * (sim_forward_coredump; tests/gpu/layer.sh). */
#include <stdbool.h>
#include <string.h>

#include "cuda_test.h"

/* A call whose answer is printed when it fails (the driver's answers are what the layer must give);
 * the checks after it count only while every call so far succeeded. */
static bool all_ok = true;
#define TRY(call)                                                                                            \
	do {                                                                                                 \
		CUresult try_res_ = (call);                                                                  \
		if (try_res_ != CUDA_SUCCESS) {                                                              \
			printf("coredump: %s: %s\n", #call, cu_error_name(try_res_));                        \
			all_ok = false;                                                                      \
		}                                                                                            \
	} while (0)
#define CHECK_IF_OK(cond)                                                                                    \
	do {                                                                                                 \
		if (all_ok)                                                                                  \
			CHECK(cond);                                                                         \
	} while (0)

static const char *names[CU_COREDUMP_MAX] = {
    "",	    "ENABLE_ON_EXCEPTION", "TRIGGER_HOST", "LIGHTWEIGHT", "ENABLE_USER_TRIGGER", "FILE",
    "PIPE", "GENERATION_FLAGS"};

int main(void)
{
	CUdevice dev;
	CUcontext c2;
	char file[1024], small[4];
	size_t size;
	bool b;
	int flags;
	CUresult res;

	cu_test_init("coredump");
	cu_test_primary_context(&dev);
	for (int a = CU_COREDUMP_ENABLE_ON_EXCEPTION; a < CU_COREDUMP_MAX; a++) {
		size_t gsize = 0, csize = 0;

		CU_CHECK(cuCoredumpGetAttributeGlobal((CUcoredumpSettings)a, NULL, &gsize));
		/* Not every attribute is a context's (the driver refuses the user trigger's). */
		res = cuCoredumpGetAttribute((CUcoredumpSettings)a, NULL, &csize);
		if (res != CUDA_SUCCESS) {
			printf("coredump: %s: a context's size: %s\n", names[a], cu_error_name(res));
			csize = gsize;
		}
		if (a == CU_COREDUMP_FILE || a == CU_COREDUMP_PIPE) {
			/* HOSTNAME.PID: the size is the name's. */
			size = sizeof(file);
			CU_CHECK(cuCoredumpGetAttributeGlobal((CUcoredumpSettings)a, file, &size));
			CHECK(gsize == csize && gsize >= 10);
			printf("coredump: %s: default %.*s...\n", names[a], a == CU_COREDUMP_FILE ? 10 : 14,
			       file);
			continue;
		}
		printf("coredump: %s: size %zu (context %zu)", names[a], gsize, csize);
		if (0) {
		} else if (a == CU_COREDUMP_GENERATION_FLAGS) {
			size = sizeof(flags);
			CU_CHECK(cuCoredumpGetAttributeGlobal((CUcoredumpSettings)a, &flags, &size));
			printf(", default %#x\n", flags);
		} else {
			size = sizeof(b);
			CU_CHECK(cuCoredumpGetAttributeGlobal((CUcoredumpSettings)a, &b, &size));
			printf(", default %d\n", b);
		}
	}

	/* The context's values. */
	strcpy(file, "/tmp/crcuda-coredump-ctx");
	size = sizeof(file);
	TRY(cuCoredumpSetAttribute(CU_COREDUMP_FILE, file, &size));
	flags = CU_COREDUMP_SKIP_GLOBAL_MEMORY | CU_COREDUMP_SKIP_ABORT;
	size = sizeof(flags);
	TRY(cuCoredumpSetAttribute(CU_COREDUMP_GENERATION_FLAGS, &flags, &size));
	memset(file, 0, sizeof(file));
	size = sizeof(file);
	TRY(cuCoredumpGetAttribute(CU_COREDUMP_FILE, file, &size));
	CHECK_IF_OK(!strcmp(file, "/tmp/crcuda-coredump-ctx"));
	flags = 0;
	size = sizeof(flags);
	TRY(cuCoredumpGetAttribute(CU_COREDUMP_GENERATION_FLAGS, &flags, &size));
	CHECK_IF_OK(flags == (CU_COREDUMP_SKIP_GLOBAL_MEMORY | CU_COREDUMP_SKIP_ABORT));
	/* LIGHTWEIGHT changes the generation flags on the H200's 580 driver: read before it, and after it
	 * only printed (native and layer must print the same). */
	b = true;
	size = sizeof(b);
	TRY(cuCoredumpSetAttribute(CU_COREDUMP_LIGHTWEIGHT, &b, &size));
	size = sizeof(flags);
	TRY(cuCoredumpGetAttribute(CU_COREDUMP_GENERATION_FLAGS, &flags, &size));
	printf("coredump: generation flags after LIGHTWEIGHT: %#x\n", (unsigned)flags);
	b = false;
	size = sizeof(b);
	TRY(cuCoredumpGetAttribute(CU_COREDUMP_LIGHTWEIGHT, &b, &size));
	CHECK_IF_OK(b);
	size = 0;
	TRY(cuCoredumpGetAttribute(CU_COREDUMP_FILE, NULL, &size));
	printf("coredump: context file %s (size %zu), flags %#x, lightweight %d\n", file, size, flags, b);

	/* The process's values: not the context's. */
	strcpy(file, "/tmp/crcuda-coredump-global");
	size = sizeof(file);
	TRY(cuCoredumpSetAttributeGlobal(CU_COREDUMP_FILE, file, &size));
	flags = CU_COREDUMP_SKIP_SHARED_MEMORY;
	size = sizeof(flags);
	TRY(cuCoredumpSetAttributeGlobal(CU_COREDUMP_GENERATION_FLAGS, &flags, &size));
	size = sizeof(file);
	TRY(cuCoredumpGetAttributeGlobal(CU_COREDUMP_FILE, file, &size));
	CHECK_IF_OK(!strcmp(file, "/tmp/crcuda-coredump-global"));
	size = sizeof(file);
	TRY(cuCoredumpGetAttribute(CU_COREDUMP_FILE, file, &size));
	CHECK_IF_OK(!strcmp(file, "/tmp/crcuda-coredump-ctx"));
	size = sizeof(flags);
	TRY(cuCoredumpGetAttributeGlobal(CU_COREDUMP_GENERATION_FLAGS, &flags, &size));
	CHECK_IF_OK(flags == CU_COREDUMP_SKIP_SHARED_MEMORY);
	CU_CHECK(cuCtxCreate(&c2, NULL, 0, dev));
	size = sizeof(file);
	TRY(cuCoredumpGetAttribute(CU_COREDUMP_FILE, file, &size));
	size = sizeof(flags);
	TRY(cuCoredumpGetAttribute(CU_COREDUMP_GENERATION_FLAGS, &flags, &size));
	printf("coredump: a new context: file %s, flags %#x\n", file, flags);
	CU_CHECK(cuCtxDestroy(c2));

	/* Refusals. */
	size = sizeof(b);
	res = cuCoredumpGetAttributeGlobal((CUcoredumpSettings)0, &b, &size);
	CHECK(res != CUDA_SUCCESS);
	printf("coredump: attribute 0: %s\n", cu_error_name(res));
	res = cuCoredumpGetAttributeGlobal(CU_COREDUMP_MAX, &b, &size);
	CHECK(res != CUDA_SUCCESS);
	printf("coredump: attribute MAX: %s\n", cu_error_name(res));
	res = cuCoredumpGetAttributeGlobal(CU_COREDUMP_LIGHTWEIGHT, &b, NULL);
	printf("coredump: NULL size: %s\n", cu_error_name(res));
	size = sizeof(small);
	res = cuCoredumpGetAttributeGlobal(CU_COREDUMP_FILE, small, &size);
	printf("coredump: file into %zu bytes: %s\n", sizeof(small), cu_error_name(res));
	strcpy(file, "/tmp/crcuda-pipe");
	size = sizeof(file);
	res = cuCoredumpSetAttribute(CU_COREDUMP_PIPE, file, &size);
	CHECK(res != CUDA_SUCCESS);
	printf("coredump: pipe on a context: %s\n", cu_error_name(res));
	cu_test_pass("coredump");
}
