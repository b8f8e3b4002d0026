/* The __fatBinC_Wrapper_t of a real nvcc-built host object (kernels.cu compiled with -cudart none):
 * its static constructor calls __cudaRegisterFatBinary and friends, defined here, before main. The
 * wrapper pointer is identified and parsed as the driver would get it, and every function and
 * variable the object registers must appear in the parsed module with the registered size. */
#include <stdint.h>

#include "check.h"
#include "crcuda/errno.h"
#include "crcuda/modimage.h"

#define MAX_REG 32

static const void *wrappers[4];
static int nwrappers;
static const char *funcs[MAX_REG];
static int nfuncs;
static struct {
	const char *name;
	size_t size;
	int constant, managed;
} vars[MAX_REG];
static int nvars;
static void *handle_storage[4];

void **__cudaRegisterFatBinary(void *fatCubin)
{
	if (nwrappers < 4)
		wrappers[nwrappers] = fatCubin;
	return &handle_storage[nwrappers++ & 3];
}

void __cudaRegisterFatBinaryEnd(void **handle)
{
	(void)handle;
}

void __cudaUnregisterFatBinary(void **handle)
{
	(void)handle;
}

void __cudaRegisterFunction(void **handle, const char *hostFun, char *deviceFun, const char *deviceName,
			    int thread_limit, void *tid, void *bid, void *bDim, void *gDim, int *wSize)
{
	(void)handle, (void)hostFun, (void)deviceFun, (void)thread_limit, (void)tid, (void)bid, (void)bDim,
	    (void)gDim, (void)wSize;
	if (nfuncs < MAX_REG)
		funcs[nfuncs++] = deviceName;
}

static void add_var(const char *name, size_t size, int constant, int managed)
{
	if (nvars < MAX_REG) {
		vars[nvars].name = name;
		vars[nvars].size = size;
		vars[nvars].constant = constant;
		vars[nvars].managed = managed;
		nvars++;
	}
}

void __cudaRegisterVar(void **handle, char *hostVar, char *deviceAddress, const char *deviceName, int ext,
		       size_t size, int constant, int global)
{
	(void)handle, (void)hostVar, (void)deviceAddress, (void)ext, (void)global;
	add_var(deviceName, size, constant, 0);
}

void __cudaRegisterManagedVar(void **handle, void **hostVarPtrAddress, char *deviceAddress,
			      const char *deviceName, int ext, size_t size, int constant, int global)
{
	(void)handle, (void)hostVarPtrAddress, (void)deviceAddress, (void)ext, (void)global;
	add_var(deviceName, size, constant, 1);
}

char __cudaInitModule(void **handle)
{
	(void)handle;
	return 0;
}

/* Launch paths: never reached (the test launches nothing). */
int __cudaPopCallConfiguration(void *a, void *b, void *c, void *d)
{
	(void)a, (void)b, (void)c, (void)d;
	abort();
}

int __cudaGetKernel(void *a, const void *b)
{
	(void)a, (void)b;
	abort();
}

int __cudaLaunchKernel(void)
{
	abort();
}

int main(void)
{
	CHECK_EQ_INT(nwrappers, 1);
	struct crc_modimage_kind k;
	CHECK_EQ_INT(crc_modimage_identify(wrappers[0], &k), 0);
	CHECK_EQ_INT(k.type, CRC_MODIMAGE_WRAPPER);
	CHECK_EQ_INT(k.wrapper_version, 1);
	CHECK_EQ_INT(k.inner, CRC_MODIMAGE_FATBIN);
	const unsigned char *fb = k.data;
	uint16_t hsize;
	uint64_t fsize;
	memcpy(&hsize, fb + 6, 2);
	memcpy(&fsize, fb + 8, 8);
	CHECK_EQ_INT(k.size, hsize + fsize);
	fprintf(stderr, "wrapper %p -> fatbin %p, %zu bytes\n", wrappers[0], k.data, k.size);

	/* The copied bytes alone are a complete image. */
	unsigned char *copy = malloc(k.size);
	CHECK(copy);
	memcpy(copy, k.data, k.size);
	struct crc_modinfo mi, mc;
	CHECK_EQ_INT(crc_modinfo_from_image(wrappers[0], CRC_MODIMAGE_UNBOUNDED, 90, &mi), 0);
	CHECK_EQ_INT(crc_modinfo_from_image(copy, k.size, 90, &mc), 0);
	CHECK_EQ_INT(mi.source, CRC_MODIMAGE_ELF);
	CHECK_EQ_INT(mi.nkernels, mc.nkernels);
	CHECK_EQ_INT(mi.nglobals, mc.nglobals);

	CHECK_EQ_INT(nfuncs, 3);
	CHECK_EQ_INT(mi.nkernels, 3);
	for (int i = 0; i < nfuncs; i++) {
		fprintf(stderr, "registered kernel %s\n", funcs[i]);
		CHECK(crc_modinfo_kernel(&mi, funcs[i]));
	}
	CHECK_EQ_INT(nvars, 4);
	for (int i = 0; i < nvars; i++) {
		const struct crc_global *g = crc_modinfo_global(&mi, vars[i].name);
		fprintf(stderr, "registered var %s size %zu constant %d managed %d\n", vars[i].name,
			vars[i].size, vars[i].constant, vars[i].managed);
		CHECK(g);
		CHECK_EQ_INT(g->size, vars[i].size);
		CHECK_EQ_INT(g->space == CRC_GLOBAL_CONST, vars[i].constant != 0);
		CHECK_EQ_INT(g->managed, vars[i].managed);
	}
	/* The PTX fallback (sm_100 has no matching SASS here) lists the same kernels. */
	crc_modinfo_free(&mc);
	CHECK_EQ_INT(crc_modinfo_from_image(wrappers[0], CRC_MODIMAGE_UNBOUNDED, 100, &mc), 0);
	CHECK_EQ_INT(mc.source, CRC_MODIMAGE_PTX);
	for (int i = 0; i < nfuncs; i++)
		CHECK(crc_modinfo_kernel(&mc, funcs[i]));
	crc_modinfo_free(&mi);
	crc_modinfo_free(&mc);
	free(copy);
	fprintf(stderr, "unit_modimage_wrapper: ok\n");
	return 0;
}
