/* Modules, libraries, functions, kernels and launches of the simulated device.
 *
 * Images are real nvcc output (fatbin wrapper, fatbin, cubin or PTX), read with crcuda/modimage.h
 * for the simulated sm_90: kernel names and parameter layouts come from the cubin's .nv.info (or the
 * PTX), globals get device memory in the arena, initialised from .nv.global.init (zero otherwise).
 * A launch runs the kernel's host implementation (crcuda_sim_kernel.h) on the stream's worker. */
#define LOG_PREFIX "sim: "

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "crcuda/errno.h"
#include "crcuda/log.h"
#include "crcuda/coop_multi.h"
#include "crcuda/occupancy.h"
#include "crcuda/coop_multi.h"
#include "sim.h"

#define SIM_TARGET_SM		   90
#define SIM_DEFAULT_DYNAMIC_SHARED (48 * 1024)
#define SIM_MAX_DYNAMIC_SHARED	   (227 * 1024)
#define SIM_GLOBAL_ALIGN	   256

static CUresult modinfo_error(int err)
{
	switch (err) {
	case CRC_ENOTFOUND:
		return CUDA_ERROR_NO_BINARY_FOR_GPU;
	case CRC_ENOMEM:
		return CUDA_ERROR_OUT_OF_MEMORY;
	default:
		return CUDA_ERROR_INVALID_IMAGE;
	}
}

static CUresult parse_image(const void *image, size_t len, struct crc_modinfo *info)
{
	int err;

	if (!image)
		return CUDA_ERROR_INVALID_VALUE;
	err = crc_modinfo_from_image(image, len, SIM_TARGET_SM, info);
	if (err) {
		pr_err("cannot load module image: %s", crc_strerror(err));
		return modinfo_error(err);
	}
	return CUDA_SUCCESS;
}

/* The whole file in a malloc'd buffer. */
static CUresult read_file(const char *path, void **out, size_t *len)
{
	int rc = path ? crc_modimage_read_file(path, out, len) : CRC_EINVAL;

	if (rc == CRC_ENOTFOUND)
		return CUDA_ERROR_FILE_NOT_FOUND;
	if (rc)
		pr_err("cannot read module file %s: %s", path ? path : "(null)", crc_strerror(rc));
	return rc == CRC_EINVAL ? CUDA_ERROR_INVALID_VALUE : rc ? CUDA_ERROR_INVALID_IMAGE : CUDA_SUCCESS;
}

/* ---- modules ---- */

static void module_free(struct CUmod_st *mod)
{
	for (unsigned i = 0; i < mod->func_count; i++) {
		free(mod->funcs[i].name);
		free(mod->funcs[i].params);
		mod->funcs[i].magic = SIM_MAGIC_DEAD;
	}
	free(mod->funcs);
	for (unsigned i = 0; i < mod->global_count; i++)
		free(mod->globals[i].name);
	free(mod->globals);
	if (mod->globals_base)
		sim_mem_free_device(mod->globals_base, SIM_RANGE_GLOBAL);
	if (mod->managed_base)
		sim_mem_free_managed(mod->managed_base);
	mod->magic = SIM_MAGIC_DEAD;
	free(mod);
}

static size_t global_span(const struct crc_global *g)
{
	return (g->size + SIM_GLOBAL_ALIGN - 1) / SIM_GLOBAL_ALIGN * SIM_GLOBAL_ALIGN;
}

/* The __managed__ variables of an image in one managed allocation, in image order, initialised. */
static CUresult managed_globals_create(const struct crc_modinfo *info, size_t total, CUdeviceptr *base)
{
	size_t off = 0;
	CUresult res = sim_mem_alloc_managed(total, base);

	for (size_t i = 0; i < info->nglobals && res == CUDA_SUCCESS; i++) {
		const struct crc_global *g = &info->globals[i];

		if (!g->managed)
			continue;
		if (g->init)
			memcpy((void *)(uintptr_t)(*base + off), g->init, g->size);
		off += global_span(g);
	}
	return res;
}

/* Device globals in one arena allocation, __managed__ ones in one managed allocation (the host reads
 * and writes them at their address, as a GPU's driver lets it). */
static CUresult module_globals_create(struct CUmod_st *mod, const struct crc_modinfo *info)
{
	size_t total = 0, managed_total = 0, offset = 0, managed_offset = 0;
	CUresult res;

	if (!info->nglobals)
		return CUDA_SUCCESS;
	mod->globals = calloc(info->nglobals, sizeof(*mod->globals));
	if (!mod->globals)
		return CUDA_ERROR_OUT_OF_MEMORY;
	for (size_t i = 0; i < info->nglobals; i++)
		*(info->globals[i].managed ? &managed_total : &total) += global_span(&info->globals[i]);
	res = sim_mem_alloc_device(mod->ctx, total ? total : 1, SIM_RANGE_GLOBAL, &mod->globals_base);
	if (res != CUDA_SUCCESS)
		return res;
	/* A library's module shares the library's (their bytes initialised there, once). */
	if (mod->library && managed_total)
		managed_total = 0;
	if (managed_total)
		res = managed_globals_create(info, managed_total, &mod->managed_base);
	if (res != CUDA_SUCCESS)
		return res;
	for (size_t i = 0; i < info->nglobals; i++) {
		const struct crc_global *g = &info->globals[i];
		struct sim_global *sg = &mod->globals[mod->global_count];
		size_t *off = g->managed ? &managed_offset : &offset;

		sg->name = strdup(g->name);
		if (!sg->name)
			return CUDA_ERROR_OUT_OF_MEMORY;
		sg->managed = g->managed;
		sg->addr = (!g->managed	   ? mod->globals_base
			    : mod->library ? mod->library->managed_base
					   : mod->managed_base) +
			   *off;
		sg->size = g->size;
		/* Fresh arena pages are zero, which is what globals without initial bytes want. */
		if (g->init && !g->managed)
			memcpy((void *)(uintptr_t)sg->addr, g->init, g->size);
		*off += global_span(g);
		mod->global_count++;
	}
	return CUDA_SUCCESS;
}

static CUresult module_funcs_create(struct CUmod_st *mod, const struct crc_modinfo *info)
{
	if (!info->nkernels)
		return CUDA_SUCCESS;
	mod->funcs = calloc(info->nkernels, sizeof(*mod->funcs));
	if (!mod->funcs)
		return CUDA_ERROR_OUT_OF_MEMORY;
	for (size_t i = 0; i < info->nkernels; i++) {
		const struct crc_kernel *k = &info->kernels[i];
		struct CUfunc_st *f = &mod->funcs[i];

		f->magic = SIM_MAGIC_FUNC;
		f->module = mod;
		f->max_dynamic_shared = SIM_DEFAULT_DYNAMIC_SHARED;
		f->carveout = -1;
		mod->func_count++;
		f->name = strdup(k->name);
		if (!f->name)
			return CUDA_ERROR_OUT_OF_MEMORY;
		f->param_count = (unsigned)k->nparams;
		f->param_bytes = k->param_total;
		if (k->nparams) {
			f->params = calloc(k->nparams, sizeof(*f->params));
			if (!f->params)
				return CUDA_ERROR_OUT_OF_MEMORY;
		}
		for (size_t p = 0; p < k->nparams; p++) {
			f->params[p].offset = k->params[p].offset;
			f->params[p].size = k->params[p].size;
			if (f->params[p].offset + f->params[p].size > f->param_bytes)
				f->param_bytes = f->params[p].offset + f->params[p].size;
		}
	}
	return CUDA_SUCCESS;
}

/* A module in ctx from parsed image info (which stays the caller's). */
static CUresult module_create(struct CUctx_st *ctx, const struct crc_modinfo *info, struct CUlib_st *lib,
			      struct CUmod_st **out)
{
	struct CUmod_st *mod = calloc(1, sizeof(*mod));
	CUresult res;

	if (!mod)
		return CUDA_ERROR_OUT_OF_MEMORY;
	mod->magic = SIM_MAGIC_MODULE;
	mod->ctx = ctx;
	mod->library = lib;
	res = module_funcs_create(mod, info);
	if (res == CUDA_SUCCESS)
		res = module_globals_create(mod, info);
	if (res != CUDA_SUCCESS) {
		module_free(mod);
		return res;
	}
	pthread_mutex_lock(&sim_lock);
	mod->next_in_ctx = ctx->modules;
	ctx->modules = mod;
	pthread_mutex_unlock(&sim_lock);
	*out = mod;
	return CUDA_SUCCESS;
}

/* Unlinks mod from its context and library (sim_lock held). */
static void module_unlink(struct CUmod_st *mod)
{
	for (struct CUmod_st **p = &mod->ctx->modules; *p; p = &(*p)->next_in_ctx) {
		if (*p == mod) {
			*p = mod->next_in_ctx;
			break;
		}
	}
	if (mod->library) {
		struct CUlib_st *lib = mod->library;

		for (unsigned i = 0; i < lib->module_count; i++) {
			if (lib->modules[i].module == mod) {
				lib->modules[i] = lib->modules[--lib->module_count];
				break;
			}
		}
	}
}

void sim_module_unload_all(struct CUctx_st *ctx)
{
	for (;;) {
		struct CUmod_st *mod;

		pthread_mutex_lock(&sim_lock);
		mod = ctx->modules;
		if (mod)
			module_unlink(mod);
		pthread_mutex_unlock(&sim_lock);
		if (!mod)
			break;
		module_free(mod);
	}
}

static CUresult module_load_image(CUmodule *pmod, const void *image, size_t len)
{
	struct crc_modinfo info;
	struct CUctx_st *ctx;
	CUresult res;

	if (!pmod)
		return CUDA_ERROR_INVALID_VALUE;
	res = sim_ctx_require(&ctx);
	if (res != CUDA_SUCCESS)
		return res;
	res = parse_image(image, len, &info);
	if (res != CUDA_SUCCESS)
		return res;
	res = module_create(ctx, &info, NULL, pmod);
	crc_modinfo_free(&info);
	return res;
}

CUresult cuModuleLoadData(CUmodule *pmod, const void *image)
{
	SIM_ENTER(cuModuleLoadData);
	return module_load_image(pmod, image, CRC_MODIMAGE_UNBOUNDED);
}

CUresult cuModuleLoadDataEx(CUmodule *pmod, const void *image, unsigned int num_options,
			    CUjit_option *options, void **option_values)
{
	SIM_ENTER(cuModuleLoadDataEx);
	/* JIT options only tune or report on a compilation the sim does not do. */
	if (num_options && (!options || !option_values))
		return CUDA_ERROR_INVALID_VALUE;
	return module_load_image(pmod, image, CRC_MODIMAGE_UNBOUNDED);
}

CUresult cuModuleLoadFatBinary(CUmodule *pmod, const void *fat_cubin)
{
	SIM_ENTER(cuModuleLoadFatBinary);
	return module_load_image(pmod, fat_cubin, CRC_MODIMAGE_UNBOUNDED);
}

CUresult cuModuleLoad(CUmodule *pmod, const char *fname)
{
	void *buf;
	size_t len;
	CUresult res;

	SIM_ENTER(cuModuleLoad);
	if (!pmod)
		return CUDA_ERROR_INVALID_VALUE;
	res = read_file(fname, &buf, &len);
	if (res != CUDA_SUCCESS)
		return res;
	res = module_load_image(pmod, buf, len);
	free(buf);
	return res;
}

static bool module_valid(CUmodule mod)
{
	return mod && mod->magic == SIM_MAGIC_MODULE && mod->ctx->active;
}

CUresult cuModuleUnload(CUmodule mod)
{
	SIM_ENTER(cuModuleUnload);
	if (!module_valid(mod) || mod->library)
		return CUDA_ERROR_INVALID_HANDLE;
	/* Kernels of this module may still be queued. */
	sim_ctx_wait_idle(mod->ctx);
	pthread_mutex_lock(&sim_lock);
	module_unlink(mod);
	pthread_mutex_unlock(&sim_lock);
	module_free(mod);
	return CUDA_SUCCESS;
}

CUresult cuModuleGetLoadingMode(CUmoduleLoadingMode *mode)
{
	const char *env = getenv("CUDA_MODULE_LOADING");

	SIM_ENTER(cuModuleGetLoadingMode);
	if (!mode)
		return CUDA_ERROR_INVALID_VALUE;
	*mode = env && !strcmp(env, "EAGER") ? CU_MODULE_EAGER_LOADING : CU_MODULE_LAZY_LOADING;
	return CUDA_SUCCESS;
}

static struct CUfunc_st *module_find_func(CUmodule mod, const char *name)
{
	for (unsigned i = 0; i < mod->func_count; i++)
		if (!strcmp(mod->funcs[i].name, name))
			return &mod->funcs[i];
	return NULL;
}

static struct sim_global *module_find_global(CUmodule mod, const char *name)
{
	for (unsigned i = 0; i < mod->global_count; i++)
		if (!strcmp(mod->globals[i].name, name))
			return &mod->globals[i];
	return NULL;
}

CUresult cuModuleGetFunction(CUfunction *pfunc, CUmodule mod, const char *name)
{
	struct CUfunc_st *f;

	SIM_ENTER(cuModuleGetFunction);
	if (!pfunc || !name)
		return CUDA_ERROR_INVALID_VALUE;
	if (!module_valid(mod))
		return CUDA_ERROR_INVALID_HANDLE;
	f = module_find_func(mod, name);
	if (!f)
		return CUDA_ERROR_NOT_FOUND;
	*pfunc = f;
	return CUDA_SUCCESS;
}

CUresult cuModuleGetFunctionCount(unsigned int *count, CUmodule mod)
{
	SIM_ENTER(cuModuleGetFunctionCount);
	if (!count)
		return CUDA_ERROR_INVALID_VALUE;
	if (!module_valid(mod))
		return CUDA_ERROR_INVALID_HANDLE;
	*count = mod->func_count;
	return CUDA_SUCCESS;
}

CUresult cuModuleEnumerateFunctions(CUfunction *functions, unsigned int count, CUmodule mod)
{
	SIM_ENTER(cuModuleEnumerateFunctions);
	if (!functions)
		return CUDA_ERROR_INVALID_VALUE;
	if (!module_valid(mod))
		return CUDA_ERROR_INVALID_HANDLE;
	for (unsigned i = 0; i < count && i < mod->func_count; i++)
		functions[i] = &mod->funcs[i];
	return CUDA_SUCCESS;
}

static CUresult module_get_global(CUdeviceptr *dptr, size_t *bytes, CUmodule mod, const char *name)
{
	struct sim_global *g;

	if (!name)
		return CUDA_ERROR_INVALID_VALUE;
	if (!module_valid(mod))
		return CUDA_ERROR_INVALID_HANDLE;
	g = module_find_global(mod, name);
	if (!g)
		return CUDA_ERROR_NOT_FOUND;
	if (dptr)
		*dptr = g->addr;
	if (bytes)
		*bytes = g->size;
	return CUDA_SUCCESS;
}

CUresult cuModuleGetGlobal_v2(CUdeviceptr *dptr, size_t *bytes, CUmodule mod, const char *name)
{
	SIM_ENTER(cuModuleGetGlobal_v2);
	return module_get_global(dptr, bytes, mod, name);
}

void *sim_host_kernel_global(const struct crcuda_sim_block *blk, const char *name, size_t *size)
{
	const struct CUfunc_st *f = blk->sim_private;
	struct sim_global *g = module_find_global(f->module, name);

	if (!g)
		return NULL;
	if (size)
		*size = g->size;
	return (void *)(uintptr_t)g->addr;
}

/* ---- libraries ---- */

static void library_free(struct CUlib_st *lib)
{
	if (lib->managed_base)
		sim_mem_free_managed(lib->managed_base);
	crc_modinfo_free(&lib->info);
	free(lib->kernels);
	free(lib->modules);
	lib->magic = SIM_MAGIC_DEAD;
	free(lib);
}

static CUresult library_load(CUlibrary *plib, const void *image, size_t len)
{
	struct CUlib_st *lib;
	CUresult res;

	if (!plib)
		return CUDA_ERROR_INVALID_VALUE;
	lib = calloc(1, sizeof(*lib));
	if (!lib)
		return CUDA_ERROR_OUT_OF_MEMORY;
	res = parse_image(image, len, &lib->info);
	if (res != CUDA_SUCCESS) {
		free(lib);
		return res;
	}
	lib->magic = SIM_MAGIC_LIBRARY;
	if (lib->info.nkernels) {
		lib->kernels = calloc(lib->info.nkernels, sizeof(*lib->kernels));
		if (!lib->kernels) {
			library_free(lib);
			return CUDA_ERROR_OUT_OF_MEMORY;
		}
	}
	{
		size_t managed_total = 0;

		for (size_t i = 0; i < lib->info.nglobals; i++)
			if (lib->info.globals[i].managed)
				managed_total += global_span(&lib->info.globals[i]);
		res = managed_total ? managed_globals_create(&lib->info, managed_total, &lib->managed_base)
				    : CUDA_SUCCESS;
		if (res != CUDA_SUCCESS) {
			library_free(lib);
			return res;
		}
	}
	for (size_t i = 0; i < lib->info.nkernels; i++) {
		lib->kernels[i].magic = SIM_MAGIC_KERNEL;
		lib->kernels[i].library = lib;
		lib->kernels[i].index = (unsigned)i;
		lib->kernels[i].max_dynamic_shared = SIM_DEFAULT_DYNAMIC_SHARED;
		lib->kernels[i].carveout = -1;
	}
	*plib = lib;
	return CUDA_SUCCESS;
}

/* Library options (CU_LIBRARY_BINARY_IS_PRESERVED...) change nothing here: the sim parses the
 * image at once and keeps no pointer to it. */
static bool library_options_valid(void *jit_options, void **jit_values, unsigned num_jit, void *lib_options,
				  void **lib_values, unsigned num_lib)
{
	return (!num_jit || (jit_options && jit_values)) && (!num_lib || (lib_options && lib_values));
}

CUresult cuLibraryLoadData(CUlibrary *plib, const void *code, CUjit_option *jit_options, void **jit_values,
			   unsigned int num_jit, CUlibraryOption *lib_options, void **lib_values,
			   unsigned int num_lib)
{
	SIM_ENTER(cuLibraryLoadData);
	if (!library_options_valid(jit_options, jit_values, num_jit, lib_options, lib_values, num_lib))
		return CUDA_ERROR_INVALID_VALUE;
	return library_load(plib, code, CRC_MODIMAGE_UNBOUNDED);
}

CUresult cuLibraryLoadFromFile(CUlibrary *plib, const char *file_name, CUjit_option *jit_options,
			       void **jit_values, unsigned int num_jit, CUlibraryOption *lib_options,
			       void **lib_values, unsigned int num_lib)
{
	void *buf;
	size_t len;
	CUresult res;

	SIM_ENTER(cuLibraryLoadFromFile);
	if (!library_options_valid(jit_options, jit_values, num_jit, lib_options, lib_values, num_lib))
		return CUDA_ERROR_INVALID_VALUE;
	res = read_file(file_name, &buf, &len);
	if (res != CUDA_SUCCESS)
		return res;
	res = library_load(plib, buf, len);
	free(buf);
	return res;
}

static bool library_valid(CUlibrary lib)
{
	return lib && lib->magic == SIM_MAGIC_LIBRARY;
}

CUresult cuLibraryUnload(CUlibrary lib)
{
	SIM_ENTER(cuLibraryUnload);
	if (!library_valid(lib))
		return CUDA_ERROR_INVALID_HANDLE;
	for (;;) {
		struct CUmod_st *mod = NULL;

		pthread_mutex_lock(&sim_lock);
		if (lib->module_count) {
			mod = lib->modules[0].module;
			module_unlink(mod);
		}
		pthread_mutex_unlock(&sim_lock);
		if (!mod)
			break;
		sim_ctx_wait_idle(mod->ctx);
		module_free(mod);
	}
	library_free(lib);
	return CUDA_SUCCESS;
}

/* The library's module in ctx, loaded on first use as the driver does lazily. */
static CUresult library_module(struct CUlib_st *lib, struct CUctx_st *ctx, struct CUmod_st **out)
{
	struct sim_lib_module *grown;
	struct CUmod_st *mod = NULL;
	CUresult res;

	ctx = sim_ctx_base(ctx);
	pthread_mutex_lock(&sim_lock);
	for (unsigned i = 0; i < lib->module_count; i++)
		if (lib->modules[i].ctx == ctx)
			mod = lib->modules[i].module;
	pthread_mutex_unlock(&sim_lock);
	if (mod) {
		*out = mod;
		return CUDA_SUCCESS;
	}
	res = module_create(ctx, &lib->info, lib, &mod);
	if (res != CUDA_SUCCESS)
		return res;
	pthread_mutex_lock(&sim_lock);
	grown = realloc(lib->modules, (lib->module_count + 1) * sizeof(*lib->modules));
	if (grown) {
		lib->modules = grown;
		lib->modules[lib->module_count++] = (struct sim_lib_module){ctx, mod};
	} else {
		module_unlink(mod);
	}
	pthread_mutex_unlock(&sim_lock);
	if (!grown) {
		module_free(mod);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	*out = mod;
	return CUDA_SUCCESS;
}

static CUresult library_current_module(struct CUlib_st *lib, struct CUmod_st **out)
{
	struct CUctx_st *ctx;
	CUresult res = sim_ctx_require(&ctx);

	if (res != CUDA_SUCCESS)
		return res;
	return library_module(lib, ctx, out);
}

CUresult cuLibraryGetKernel(CUkernel *pkernel, CUlibrary lib, const char *name)
{
	SIM_ENTER(cuLibraryGetKernel);
	if (!pkernel || !name)
		return CUDA_ERROR_INVALID_VALUE;
	if (!library_valid(lib))
		return CUDA_ERROR_INVALID_HANDLE;
	for (size_t i = 0; i < lib->info.nkernels; i++) {
		if (!strcmp(lib->info.kernels[i].name, name)) {
			*pkernel = &lib->kernels[i];
			return CUDA_SUCCESS;
		}
	}
	return CUDA_ERROR_NOT_FOUND;
}

CUresult cuLibraryGetKernelCount(unsigned int *count, CUlibrary lib)
{
	SIM_ENTER(cuLibraryGetKernelCount);
	if (!count)
		return CUDA_ERROR_INVALID_VALUE;
	if (!library_valid(lib))
		return CUDA_ERROR_INVALID_HANDLE;
	*count = (unsigned)lib->info.nkernels;
	return CUDA_SUCCESS;
}

CUresult cuLibraryEnumerateKernels(CUkernel *kernels, unsigned int count, CUlibrary lib)
{
	SIM_ENTER(cuLibraryEnumerateKernels);
	if (!kernels)
		return CUDA_ERROR_INVALID_VALUE;
	if (!library_valid(lib))
		return CUDA_ERROR_INVALID_HANDLE;
	for (unsigned i = 0; i < count && i < lib->info.nkernels; i++)
		kernels[i] = &lib->kernels[i];
	return CUDA_SUCCESS;
}

CUresult cuLibraryGetModule(CUmodule *pmod, CUlibrary lib)
{
	SIM_ENTER(cuLibraryGetModule);
	if (!pmod)
		return CUDA_ERROR_INVALID_VALUE;
	if (!library_valid(lib))
		return CUDA_ERROR_INVALID_HANDLE;
	return library_current_module(lib, pmod);
}

/* No context needed: a library's managed variables are made when it loads, for every context. */
CUresult cuLibraryGetManaged(CUdeviceptr *dptr, size_t *bytes, CUlibrary lib, const char *name)
{
	size_t off = 0;

	SIM_ENTER(cuLibraryGetManaged);
	if (!name || (!dptr && !bytes))
		return CUDA_ERROR_INVALID_VALUE;
	if (!library_valid(lib))
		return CUDA_ERROR_INVALID_HANDLE;
	for (size_t i = 0; i < lib->info.nglobals; i++) {
		const struct crc_global *g = &lib->info.globals[i];

		if (!g->managed)
			continue;
		if (!strcmp(g->name, name)) {
			if (dptr)
				*dptr = lib->managed_base + off;
			if (bytes)
				*bytes = g->size;
			return CUDA_SUCCESS;
		}
		off += global_span(g);
	}
	return CUDA_ERROR_NOT_FOUND;
}

CUresult cuLibraryGetGlobal(CUdeviceptr *dptr, size_t *bytes, CUlibrary lib, const char *name)
{
	struct CUmod_st *mod;
	CUresult res;

	SIM_ENTER(cuLibraryGetGlobal);
	if (!library_valid(lib))
		return CUDA_ERROR_INVALID_HANDLE;
	res = library_current_module(lib, &mod);
	if (res != CUDA_SUCCESS)
		return res;
	return module_get_global(dptr, bytes, mod, name);
}

static bool kernel_valid(CUkernel k)
{
	return k && k->magic == SIM_MAGIC_KERNEL && library_valid(k->library);
}

/* The CUfunction of kernel k in ctx. */
static CUresult kernel_function(struct CUkern_st *k, struct CUctx_st *ctx, struct CUfunc_st **out)
{
	struct CUmod_st *mod;
	CUresult res = library_module(k->library, ctx, &mod);

	if (res != CUDA_SUCCESS)
		return res;
	*out = &mod->funcs[k->index];
	return CUDA_SUCCESS;
}

CUresult cuKernelGetFunction(CUfunction *pfunc, CUkernel k)
{
	struct CUctx_st *ctx;
	CUresult res;

	SIM_ENTER(cuKernelGetFunction);
	if (!pfunc)
		return CUDA_ERROR_INVALID_VALUE;
	if (!kernel_valid(k))
		return CUDA_ERROR_INVALID_HANDLE;
	res = sim_ctx_require(&ctx);
	if (res != CUDA_SUCCESS)
		return res;
	return kernel_function(k, ctx, pfunc);
}

CUresult cuKernelGetLibrary(CUlibrary *plib, CUkernel k)
{
	SIM_ENTER(cuKernelGetLibrary);
	if (!plib)
		return CUDA_ERROR_INVALID_VALUE;
	if (!kernel_valid(k))
		return CUDA_ERROR_INVALID_HANDLE;
	*plib = k->library;
	return CUDA_SUCCESS;
}

CUresult cuKernelGetName(const char **name, CUkernel k)
{
	SIM_ENTER(cuKernelGetName);
	if (!name)
		return CUDA_ERROR_INVALID_VALUE;
	if (!kernel_valid(k))
		return CUDA_ERROR_INVALID_HANDLE;
	*name = k->library->info.kernels[k->index].name;
	return CUDA_SUCCESS;
}

CUresult cuKernelGetParamInfo(CUkernel k, size_t index, size_t *offset, size_t *size)
{
	const struct crc_kernel *info;

	SIM_ENTER(cuKernelGetParamInfo);
	if (!kernel_valid(k))
		return CUDA_ERROR_INVALID_HANDLE;
	info = &k->library->info.kernels[k->index];
	if (index >= info->nparams)
		return CUDA_ERROR_INVALID_VALUE;
	if (offset)
		*offset = info->params[index].offset;
	if (size)
		*size = info->params[index].size;
	return CUDA_SUCCESS;
}

CUresult cuFuncGetParamInfo(CUfunction f, size_t index, size_t *offset, size_t *size)
{
	SIM_ENTER(cuFuncGetParamInfo);
	/* A CUkernel passed here is refused, as the driver does. */
	if (!f || f->magic != SIM_MAGIC_FUNC)
		return CUDA_ERROR_INVALID_HANDLE;
	if (index >= f->param_count)
		return CUDA_ERROR_INVALID_VALUE;
	if (offset)
		*offset = f->params[index].offset;
	if (size)
		*size = f->params[index].size;
	return CUDA_SUCCESS;
}

/* Attribute values shared by functions and kernels; the two settable ones are passed in. */
static CUresult function_attribute(int *value, CUfunction_attribute attr, int max_dynamic_shared,
				   int carveout)
{
	switch (attr) {
	case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
		*value = 1024;
		return CUDA_SUCCESS;
	case CU_FUNC_ATTRIBUTE_NUM_REGS:
		*value = 32;
		return CUDA_SUCCESS;
	case CU_FUNC_ATTRIBUTE_PTX_VERSION:
	case CU_FUNC_ATTRIBUTE_BINARY_VERSION:
		*value = SIM_TARGET_SM;
		return CUDA_SUCCESS;
	case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
		*value = max_dynamic_shared;
		return CUDA_SUCCESS;
	case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
		*value = carveout;
		return CUDA_SUCCESS;
	case CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES:
	case CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES:
	case CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES:
	case CU_FUNC_ATTRIBUTE_CACHE_MODE_CA:
	case CU_FUNC_ATTRIBUTE_CLUSTER_SIZE_MUST_BE_SET:
	case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH:
	case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT:
	case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH:
	case CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED:
	case CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
		*value = 0;
		return CUDA_SUCCESS;
	default:
		return CUDA_ERROR_INVALID_VALUE;
	}
}

/* Validates a settable attribute and stores it. */
static CUresult function_set_attribute(CUfunction_attribute attr, int value, int *max_dynamic_shared,
				       int *carveout)
{
	switch (attr) {
	case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
		if (value < 0 || value > SIM_MAX_DYNAMIC_SHARED)
			return CUDA_ERROR_INVALID_VALUE;
		*max_dynamic_shared = value;
		return CUDA_SUCCESS;
	case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
		if (value < -1 || value > 100)
			return CUDA_ERROR_INVALID_VALUE;
		*carveout = value;
		return CUDA_SUCCESS;
	case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH:
	case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT:
	case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH:
	case CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED:
	case CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
		return CUDA_SUCCESS; /* accepted, not simulated */
	default:
		return CUDA_ERROR_INVALID_VALUE;
	}
}

CUresult cuFuncGetAttribute(int *value, CUfunction_attribute attr, CUfunction f)
{
	SIM_ENTER(cuFuncGetAttribute);
	if (!value)
		return CUDA_ERROR_INVALID_VALUE;
	if (!f || f->magic != SIM_MAGIC_FUNC)
		return CUDA_ERROR_INVALID_HANDLE;
	return function_attribute(value, attr, f->max_dynamic_shared, f->carveout);
}

CUresult cuFuncSetAttribute(CUfunction f, CUfunction_attribute attr, int value)
{
	SIM_ENTER(cuFuncSetAttribute);
	if (!f || f->magic != SIM_MAGIC_FUNC)
		return CUDA_ERROR_INVALID_HANDLE;
	return function_set_attribute(attr, value, &f->max_dynamic_shared, &f->carveout);
}

CUresult cuKernelGetAttribute(int *value, CUfunction_attribute attr, CUkernel k, CUdevice dev)
{
	SIM_ENTER(cuKernelGetAttribute);
	if (!value)
		return CUDA_ERROR_INVALID_VALUE;
	if (!kernel_valid(k))
		return CUDA_ERROR_INVALID_HANDLE;
	if (!sim_device_get(dev))
		return CUDA_ERROR_INVALID_DEVICE;
	return function_attribute(value, attr, k->max_dynamic_shared, k->carveout);
}

CUresult cuKernelSetAttribute(CUfunction_attribute attr, int value, CUkernel k, CUdevice dev)
{
	SIM_ENTER(cuKernelSetAttribute);
	if (!kernel_valid(k))
		return CUDA_ERROR_INVALID_HANDLE;
	if (!sim_device_get(dev))
		return CUDA_ERROR_INVALID_DEVICE;
	return function_set_attribute(attr, value, &k->max_dynamic_shared, &k->carveout);
}

CUresult cuKernelSetCacheConfig(CUkernel k, CUfunc_cache config, CUdevice dev)
{
	SIM_ENTER(cuKernelSetCacheConfig);
	if (!kernel_valid(k))
		return CUDA_ERROR_INVALID_HANDLE;
	if (!sim_device_get(dev))
		return CUDA_ERROR_INVALID_DEVICE;
	return (unsigned)config > CU_FUNC_CACHE_PREFER_EQUAL ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

CUresult cuFuncSetCacheConfig(CUfunction f, CUfunc_cache config)
{
	SIM_ENTER(cuFuncSetCacheConfig);
	if (!f || f->magic != SIM_MAGIC_FUNC)
		return CUDA_ERROR_INVALID_HANDLE;
	return (unsigned)config > CU_FUNC_CACHE_PREFER_EQUAL ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

CUresult cuFuncGetName(const char **name, CUfunction f)
{
	SIM_ENTER(cuFuncGetName);
	if (!name)
		return CUDA_ERROR_INVALID_VALUE;
	if (!f || f->magic != SIM_MAGIC_FUNC)
		return CUDA_ERROR_INVALID_HANDLE;
	*name = f->name;
	return CUDA_SUCCESS;
}

CUresult cuFuncGetModule(CUmodule *pmod, CUfunction f)
{
	SIM_ENTER(cuFuncGetModule);
	if (!pmod)
		return CUDA_ERROR_INVALID_VALUE;
	if (!f || f->magic != SIM_MAGIC_FUNC)
		return CUDA_ERROR_INVALID_HANDLE;
	*pmod = f->module;
	return CUDA_SUCCESS;
}

CUresult cuFuncIsLoaded(CUfunctionLoadingState *state, CUfunction f)
{
	SIM_ENTER(cuFuncIsLoaded);
	if (!state)
		return CUDA_ERROR_INVALID_VALUE;
	if (!f || f->magic != SIM_MAGIC_FUNC)
		return CUDA_ERROR_INVALID_HANDLE;
	*state = CU_FUNCTION_LOADING_STATE_LOADED;
	return CUDA_SUCCESS;
}

CUresult cuFuncLoad(CUfunction f)
{
	SIM_ENTER(cuFuncLoad);
	if (!f || f->magic != SIM_MAGIC_FUNC)
		return CUDA_ERROR_INVALID_HANDLE;
	return CUDA_SUCCESS;
}

/* ---- launches ---- */

struct launch_args {
	const char *entry; /* for log lines */
	CUfunction f;	   /* a CUfunction, or a CUkernel cast to one */
	struct crcuda_sim_dim3 grid, block;
	unsigned shared_bytes;
	CUstream stream;
	void **kernel_params;
	void **extra;
};

/* Copies the arguments into one buffer laid out as the parameter constant bank. */
static CUresult launch_copy_params(const struct launch_args *a, struct CUfunc_st *f, struct sim_op *op)
{
	size_t bytes = f->param_bytes;
	uint8_t *buffer = calloc(1, bytes ? bytes : 1);
	void **ptrs = calloc(f->param_count ? f->param_count : 1, sizeof(*ptrs));

	op->kernel.param_buffer = buffer;
	op->kernel.param_ptrs = ptrs;
	op->kernel.param_count = f->param_count;
	if (!buffer || !ptrs)
		return CUDA_ERROR_OUT_OF_MEMORY;
	if (a->kernel_params && a->extra)
		return CUDA_ERROR_INVALID_VALUE;
	if (a->kernel_params) {
		for (unsigned i = 0; i < f->param_count; i++) {
			if (!a->kernel_params[i])
				return CUDA_ERROR_INVALID_VALUE;
			memcpy(buffer + f->params[i].offset, a->kernel_params[i], f->params[i].size);
		}
	} else if (a->extra) {
		const void *src = NULL;
		size_t src_size = 0;

		for (void **e = a->extra; *e != CU_LAUNCH_PARAM_END; e += 2) {
			if (e[0] == CU_LAUNCH_PARAM_BUFFER_POINTER)
				src = e[1];
			else if (e[0] == CU_LAUNCH_PARAM_BUFFER_SIZE && e[1])
				src_size = *(const size_t *)e[1];
			else
				return CUDA_ERROR_INVALID_VALUE;
		}
		if ((!src && bytes) || src_size < bytes)
			return CUDA_ERROR_INVALID_VALUE;
		if (bytes)
			memcpy(buffer, src, bytes);
	} else if (f->param_count) {
		return CUDA_ERROR_INVALID_VALUE;
	}
	for (unsigned i = 0; i < f->param_count; i++)
		ptrs[i] = buffer + f->params[i].offset;
	return CUDA_SUCCESS;
}

static crcuda_sim_kernel_fn *launch_host_fn(struct CUfunc_st *f)
{
	crcuda_sim_kernel_fn *fn;

	pthread_mutex_lock(&sim_lock);
	if (!f->host_fn_looked_up) {
		f->host_fn = sim_host_kernel_lookup(f->name);
		f->host_fn_looked_up = true;
	}
	fn = f->host_fn;
	pthread_mutex_unlock(&sim_lock);
	return fn;
}

CUresult sim_kernel_op_init(struct sim_op *op, const char *entry, CUfunction func, struct CUctx_st *ctx,
			    bool same_ctx, struct crcuda_sim_dim3 grid, struct crcuda_sim_dim3 block,
			    unsigned shared_bytes, void **kernel_params, void **extra)
{
	struct launch_args a = {
	    .entry = entry,
	    .f = func,
	    .grid = grid,
	    .block = block,
	    .shared_bytes = shared_bytes,
	    .kernel_params = kernel_params,
	    .extra = extra,
	};
	struct CUfunc_st *f;
	crcuda_sim_kernel_fn *host_fn;
	int max_dynamic_shared;
	CUresult res;
	unsigned long long threads = (unsigned long long)block.x * block.y * block.z;

	if (!func)
		return CUDA_ERROR_INVALID_HANDLE;
	if (func->magic == SIM_MAGIC_KERNEL) {
		/* The driver accepts a CUkernel cast to CUfunction: take the stream's context. */
		struct CUkern_st *k = (struct CUkern_st *)(void *)func;

		if (!kernel_valid(k))
			return CUDA_ERROR_INVALID_HANDLE;
		if (!ctx) {
			res = sim_ctx_require(&ctx);
			if (res != CUDA_SUCCESS)
				return res;
		}
		res = kernel_function(k, ctx, &f);
		if (res != CUDA_SUCCESS)
			return res;
		max_dynamic_shared = k->max_dynamic_shared;
	} else if (func->magic == SIM_MAGIC_FUNC && func->module->ctx->active) {
		f = func;
		max_dynamic_shared = f->max_dynamic_shared;
		if (same_ctx && sim_ctx_base(f->module->ctx) != sim_ctx_base(ctx))
			return CUDA_ERROR_INVALID_HANDLE;
	} else {
		return CUDA_ERROR_INVALID_HANDLE;
	}
	if (!grid.x || !grid.y || !grid.z || !threads || grid.y > 65535 || grid.z > 65535 ||
	    grid.x > 2147483647u || threads > 1024 || block.x > 1024 || block.y > 1024 || block.z > 64)
		return CUDA_ERROR_INVALID_VALUE;
	if (shared_bytes > (unsigned)max_dynamic_shared)
		return CUDA_ERROR_INVALID_VALUE;
	host_fn = launch_host_fn(f);
	if (!host_fn) {
		pr_err("%s: no host implementation of kernel %s (crcuda_sim_kernel_%s in CRCUDA_SIM_KERNELS)",
		       entry, f->name, f->name);
		return CUDA_ERROR_NOT_FOUND;
	}
	op->kind = SIM_OP_KERNEL;
	res = launch_copy_params(&a, f, op);
	if (res != CUDA_SUCCESS) {
		free(op->kernel.param_buffer);
		free(op->kernel.param_ptrs);
		op->kernel.param_buffer = NULL;
		op->kernel.param_ptrs = NULL;
		return res;
	}
	op->kernel.func = f;
	op->kernel.host_fn = host_fn;
	op->kernel.grid = grid;
	op->kernel.block = block;
	op->kernel.shared_bytes = shared_bytes;
	return CUDA_SUCCESS;
}

static CUresult launch(const struct launch_args *a, bool pt)
{
	struct CUstream_st *s;
	struct sim_op *op;
	CUresult res;

	if (!a->f)
		return CUDA_ERROR_INVALID_HANDLE;
	res = sim_stream_resolve(a->stream, pt, &s);
	if (res != CUDA_SUCCESS)
		return res;
	op = calloc(1, sizeof(*op));
	if (!op)
		return CUDA_ERROR_OUT_OF_MEMORY;
	res = sim_kernel_op_init(op, a->entry, a->f, s->ctx, true, a->grid, a->block, a->shared_bytes,
				 a->kernel_params, a->extra);
	if (res != CUDA_SUCCESS) {
		free(op);
		return res;
	}
	return sim_stream_submit(s, op);
}

static CUresult launch_kernel(bool pt, const char *entry, CUfunction f, unsigned gx, unsigned gy, unsigned gz,
			      unsigned bx, unsigned by, unsigned bz, unsigned shared_bytes, CUstream stream,
			      void **kernel_params, void **extra)
{
	struct launch_args a = {
	    .entry = entry,
	    .f = f,
	    .grid = {gx, gy, gz},
	    .block = {bx, by, bz},
	    .shared_bytes = shared_bytes,
	    .stream = stream,
	    .kernel_params = kernel_params,
	    .extra = extra,
	};

	return launch(&a, pt);
}

CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
			unsigned int by, unsigned int bz, unsigned int shared_bytes, CUstream stream,
			void **kernel_params, void **extra)
{
	SIM_ENTER(cuLaunchKernel);
	return launch_kernel(false, "cuLaunchKernel", f, gx, gy, gz, bx, by, bz, shared_bytes, stream,
			     kernel_params, extra);
}

CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
			     unsigned int by, unsigned int bz, unsigned int shared_bytes, CUstream stream,
			     void **kernel_params, void **extra)
{
	SIM_ENTER(cuLaunchKernel_ptsz);
	return launch_kernel(true, "cuLaunchKernel_ptsz", f, gx, gy, gz, bx, by, bz, shared_bytes, stream,
			     kernel_params, extra);
}

CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
				   unsigned int bx, unsigned int by, unsigned int bz,
				   unsigned int shared_bytes, CUstream stream, void **kernel_params)
{
	SIM_ENTER(cuLaunchCooperativeKernel);
	return launch_kernel(false, "cuLaunchCooperativeKernel", f, gx, gy, gz, bx, by, bz, shared_bytes,
			     stream, kernel_params, NULL);
}

CUresult cuLaunchCooperativeKernelMultiDevice(CUDA_LAUNCH_PARAMS *launchParamsList, unsigned int numDevices,
					      unsigned int flags)
{
	SIM_ENTER(cuLaunchCooperativeKernelMultiDevice);
	return crc_coop_multi(launchParamsList, numDevices, flags);
}

CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
					unsigned int bx, unsigned int by, unsigned int bz,
					unsigned int shared_bytes, CUstream stream, void **kernel_params)
{
	SIM_ENTER(cuLaunchCooperativeKernel_ptsz);
	return launch_kernel(true, "cuLaunchCooperativeKernel_ptsz", f, gx, gy, gz, bx, by, bz, shared_bytes,
			     stream, kernel_params, NULL);
}

static CUresult launch_kernel_ex(bool pt, const char *entry, const CUlaunchConfig *config, CUfunction f,
				 void **kernel_params, void **extra)
{
	if (!config || (config->numAttrs && !config->attrs))
		return CUDA_ERROR_INVALID_VALUE;
	/* Attributes (cluster shape, priority, programmatic serialisation...) do not change what a
	 * sequential host implementation computes. */
	return launch_kernel(pt, entry, f, config->gridDimX, config->gridDimY, config->gridDimZ,
			     config->blockDimX, config->blockDimY, config->blockDimZ, config->sharedMemBytes,
			     config->hStream, kernel_params, extra);
}

CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **kernel_params, void **extra)
{
	SIM_ENTER(cuLaunchKernelEx);
	return launch_kernel_ex(false, "cuLaunchKernelEx", config, f, kernel_params, extra);
}

CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f, void **kernel_params, void **extra)
{
	SIM_ENTER(cuLaunchKernelEx_ptsz);
	return launch_kernel_ex(true, "cuLaunchKernelEx_ptsz", config, f, kernel_params, extra);
}

/* ---- occupancy: threads, blocks and shared memory per multiprocessor (registers are not simulated) ---- */
static CUresult max_active_blocks(int *blocks, CUfunction f, int block_size, size_t smem, unsigned flags)
{
	int sm_threads = 0, sm_blocks = 0, sm_smem = 0, func_max = 0;
	CUresult res;

	if (!blocks || block_size <= 0 || (flags & ~(unsigned)CU_OCCUPANCY_DISABLE_CACHING_OVERRIDE))
		return CUDA_ERROR_INVALID_VALUE;
	if (!f || f->magic != SIM_MAGIC_FUNC)
		return CUDA_ERROR_INVALID_HANDLE;
	res = function_attribute(&func_max, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, f->max_dynamic_shared,
				 f->carveout);
	if (res == CUDA_SUCCESS)
		res =
		    cuDeviceGetAttribute(&sm_threads, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, 0);
	if (res == CUDA_SUCCESS)
		res = cuDeviceGetAttribute(&sm_blocks, CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR, 0);
	if (res == CUDA_SUCCESS)
		res = cuDeviceGetAttribute(&sm_smem, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR,
					   0);
	if (res != CUDA_SUCCESS)
		return res;
	if (block_size > func_max || smem > (size_t)sm_smem) {
		*blocks = 0;
		return CUDA_SUCCESS;
	}
	*blocks = sm_threads / block_size < sm_blocks ? sm_threads / block_size : sm_blocks;
	if (smem && (size_t)*blocks > (size_t)sm_smem / smem)
		*blocks = (int)((size_t)sm_smem / smem);
	return CUDA_SUCCESS;
}

CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int *blocks, CUfunction f, int block_size, size_t smem)
{
	SIM_ENTER(cuOccupancyMaxActiveBlocksPerMultiprocessor);
	return max_active_blocks(blocks, f, block_size, smem, 0);
}

CUresult cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int *blocks, CUfunction f, int block_size,
							      size_t smem, unsigned int flags)
{
	SIM_ENTER(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags);
	return max_active_blocks(blocks, f, block_size, smem, flags);
}

static CUresult current_device_attr(int *v, CUdevice_attribute a)
{
	CUdevice dev;
	CUresult res = cuCtxGetDevice(&dev);

	return res == CUDA_SUCCESS ? cuDeviceGetAttribute(v, a, dev) : res;
}

static const struct crc_occupancy_query occupancy_query = {max_active_blocks, cuFuncGetAttribute,
							   current_device_attr};

CUresult cuOccupancyMaxPotentialBlockSize(int *min_grid, int *block_size, CUfunction f,
					  CUoccupancyB2DSize smem_of, size_t smem, int limit)
{
	SIM_ENTER(cuOccupancyMaxPotentialBlockSize);
	return crc_occupancy_block_size(min_grid, block_size, f, smem_of, smem, limit, 0, &occupancy_query);
}

CUresult cuOccupancyMaxPotentialBlockSizeWithFlags(int *min_grid, int *block_size, CUfunction f,
						   CUoccupancyB2DSize smem_of, size_t smem, int limit,
						   unsigned int flags)
{
	SIM_ENTER(cuOccupancyMaxPotentialBlockSizeWithFlags);
	return crc_occupancy_block_size(min_grid, block_size, f, smem_of, smem, limit, flags,
					&occupancy_query);
}

/* ---- the JIT linker: one input, which is already what the simulated device loads ---- */
struct sim_link {
	uint32_t magic;
	unsigned nopts;
	CUjit_option opts[32];
	void **values;
	void *image;
	size_t size;
	int inputs;
	char name[128];
};
#define SIM_MAGIC_LINK 0x6c696e6bu

CUresult cuLinkCreate_v2(unsigned int n, CUjit_option *options, void **values, CUlinkState *out)
{
	struct sim_link *l;

	SIM_ENTER(cuLinkCreate_v2);
	if (!out || n > 32 || (n && (!options || !values)))
		return CUDA_ERROR_INVALID_VALUE;
	l = calloc(1, sizeof(*l));
	if (!l)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*l = (struct sim_link){.magic = SIM_MAGIC_LINK, .nopts = n, .values = values};
	if (n)
		memcpy(l->opts, options, n * sizeof(*options));
	*out = (CUlinkState)l;
	return CUDA_SUCCESS;
}

static struct sim_link *sim_link_of(CUlinkState s)
{
	struct sim_link *l = (struct sim_link *)s;

	return l && l->magic == SIM_MAGIC_LINK ? l : NULL;
}

CUresult cuLinkAddData_v2(CUlinkState s, CUjitInputType type, void *data, size_t size, const char *name,
			  unsigned int n, CUjit_option *options, void **values)
{
	struct sim_link *l = sim_link_of(s);

	SIM_ENTER(cuLinkAddData_v2);
	(void)n, (void)options, (void)values;
	if (!l || !data || !size || type >= CU_JIT_NUM_INPUT_TYPES)
		return CUDA_ERROR_INVALID_VALUE;
	if (l->inputs++) {
		pr_warn("the simulated device links one input: %s is one too many",
			name ? name : "(unnamed)");
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	l->image = malloc(size);
	if (!l->image)
		return CUDA_ERROR_OUT_OF_MEMORY;
	memcpy(l->image, data, size);
	l->size = size;
	snprintf(l->name, sizeof(l->name), "%s", name ? name : "");
	return CUDA_SUCCESS;
}

CUresult cuLinkAddFile_v2(CUlinkState s, CUjitInputType type, const char *path, unsigned int n,
			  CUjit_option *options, void **values)
{
	void *buf;
	size_t len;
	CUresult res = read_file(path, &buf, &len);

	if (res != CUDA_SUCCESS)
		return res;
	res = cuLinkAddData_v2(s, type, buf, type == CU_JIT_INPUT_PTX ? len : len - 1, path, n, options,
			       values);
	free(buf);
	return res;
}

CUresult cuLinkComplete(CUlinkState s, void **out, size_t *size)
{
	struct sim_link *l = sim_link_of(s);
	char log[160];

	SIM_ENTER(cuLinkComplete);
	if (!l || !out || !size || !l->image)
		return CUDA_ERROR_INVALID_VALUE;
	snprintf(log, sizeof(log), "sim: linked %s (%zu bytes)", l->name[0] ? l->name : "an image", l->size);
	for (unsigned i = 0; i < l->nopts; i++) {
		if (l->opts[i] == CU_JIT_WALL_TIME) {
			float zero = 0;

			memcpy(&l->values[i], &zero, sizeof(zero));
		}
		if (l->opts[i] != CU_JIT_INFO_LOG_BUFFER || !l->values[i])
			continue;
		for (unsigned j = 0; j < l->nopts; j++) {
			size_t cap = (uintptr_t)l->values[j];

			if (l->opts[j] != CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES || !cap)
				continue;
			snprintf(l->values[i], cap, "%s", log);
			l->values[j] = (void *)(uintptr_t)((strlen(log) < cap ? strlen(log) : cap - 1) + 1);
		}
	}
	*out = l->image;
	*size = l->size;
	return CUDA_SUCCESS;
}

CUresult cuLinkDestroy(CUlinkState s)
{
	struct sim_link *l = sim_link_of(s);

	SIM_ENTER(cuLinkDestroy);
	if (!l)
		return CUDA_ERROR_INVALID_VALUE;
	free(l->image);
	l->magic = 0;
	free(l);
	return CUDA_SUCCESS;
}

CUresult cuLinkCreate(unsigned int n, CUjit_option *options, void **values, CUlinkState *out)
{
	return cuLinkCreate_v2(n, options, values, out);
}

CUresult cuLinkAddData(CUlinkState s, CUjitInputType type, void *data, size_t size, const char *name,
		       unsigned int n, CUjit_option *options, void **values)
{
	return cuLinkAddData_v2(s, type, data, size, name, n, options, values);
}

CUresult cuLinkAddFile(CUlinkState s, CUjitInputType type, const char *path, unsigned int n,
		       CUjit_option *options, void **values)
{
	return cuLinkAddFile_v2(s, type, path, n, options, values);
}
