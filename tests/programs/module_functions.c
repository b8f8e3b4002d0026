/* module_functions: a module's functions enumerated (cuModuleGetFunctionCount, cuModuleEnumerateFunctions,
 * cuFuncGetName) and, where the driver serves it, through the tools' module table that cuFFT iterates
 * (export table 6e163fbe, slot 7: fn(arg, function, name) for each function, returning their number);
 * an enumerated function launched. Prints the sorted names and PASS. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_test.h"

extern const unsigned char graph_basic_fatbin[];

#define MAX 64

static const char *seen[MAX];
static CUfunction seen_f[MAX];
static unsigned nseen;

static void each(void *arg, CUfunction f, const char *name)
{
	CHECK(arg == (void *)&nseen && nseen < MAX && name);
	seen_f[nseen] = f;
	seen[nseen++] = name;
}

static int by_name(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

int main(void)
{
	static const CUuuid tools_module = {
	    {0x6e, 0x16, 0x3f, 0xbe, 0xb9, 0x58, 0x44, 0x4d, 0x83, 0x5c, 0xe1, 0x82, 0xaf, 0xf1, 0x99, 0x1e}};
	const char *names[MAX];
	CUfunction fs[MAX], mix = NULL;
	const void **table = NULL;
	unsigned count = 0, n;
	CUmodule mod;
	CUdeviceptr d;

	cu_test_init("module_functions");
	cu_test_primary_context(NULL);
	CU_CHECK(cuModuleLoadData(&mod, graph_basic_fatbin));
	if (cuGetExportTable((const void **)&table, &tools_module) == CUDA_SUCCESS && table) {
		int (*iterate)(CUcontext, CUmodule, void (*)(void *, CUfunction, const char *), void *) =
		    (int (*)(CUcontext, CUmodule, void (*)(void *, CUfunction, const char *),
			     void *))table[7];

		CHECK_EQ_INT(iterate(NULL, mod, each, &nseen), (int)nseen);
		CHECK(nseen > 0);
	}
	/* The public calls: every function named (lazy loading may count only loaded ones until then). */
	for (unsigned i = 0; i < nseen; i++) {
		const char *name = NULL;

		CU_CHECK(cuFuncGetName(&name, seen_f[i]));
		CHECK(!strcmp(name, seen[i]));
	}
	CU_CHECK(cuModuleGetFunctionCount(&count, mod));
	CHECK(count <= MAX);
	CU_CHECK(cuModuleEnumerateFunctions(fs, count, mod));
	for (n = 0; n < count; n++) {
		CU_CHECK(cuFuncGetName(&names[n], fs[n]));
		if (!strcmp(names[n], "graph_mix"))
			mix = fs[n];
	}
	if (nseen) {
		memcpy(names, seen, nseen * sizeof(*names));
		n = nseen;
		for (unsigned i = 0; i < nseen; i++)
			if (!strcmp(seen[i], "graph_mix"))
				mix = seen_f[i];
	}
	CHECK(mix != NULL);
	/* The enumerated function runs. */
	unsigned host[64], salt = 3;
	int len = 64;
	void *p[] = {&d, &salt, &len};
	CU_CHECK(cuMemAlloc(&d, sizeof(host)));
	CU_CHECK(cuMemsetD32(d, 1, 64));
	CU_CHECK(cuLaunchKernel(mix, 1, 1, 1, 64, 1, 1, 0, NULL, p, NULL));
	CU_CHECK(cuMemcpyDtoH(host, d, sizeof(host)));
	for (unsigned i = 0; i < 64; i++)
		CHECK(host[i] == 2654435761u + 3u);
	qsort(names, n, sizeof(*names), by_name);
	for (unsigned i = 0; i < n; i++)
		printf("module_functions: %s\n", names[i]);
	CU_CHECK(cuMemFree(d));
	CU_CHECK(cuModuleUnload(mod));
	cu_test_pass("module_functions");
}
