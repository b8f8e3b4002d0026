/* Hooks: module and library loading (the image bytes go to the daemon), function and kernel lookups
 * (the answer carries the parameter layout, cached here), launches (kernelParams packed by that
 * layout, posted without waiting), function attributes. */
#define LOG_PREFIX "libcrcuda: "
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "client.h"
#include "crcuda/coop_multi.h"
#include "crcuda/occupancy.h"
#include "hooks.h"
#include "crcuda/errno.h"
#include "crcuda/log.h"
#include "crcuda/modimage.h"

/* ---- loading -------------------------------------------------------------------------------------- */
/* Sends the image in records of at most the channel's payload; all but the last are posted. */
static CUresult load(uint16_t op, const void *image, size_t bytes, uint64_t *handle)
{
	size_t max = crc_chan_max_payload(&crc_client.chan) - sizeof(struct crc_call_hdr) -
		     sizeof(struct crc_load_req);
	struct crc_load_req *r;
	struct crc_call c;
	CUresult res;

	if (!__atomic_load_n(&crc_initialized, __ATOMIC_ACQUIRE))
		return CUDA_ERROR_NOT_INITIALIZED;
	for (size_t off = 0;; off += max) {
		size_t n = bytes - off < max ? bytes - off : max;
		bool last = off + n == bytes;

		/* One call holds the channel for every record of the image: a quiesce never finds half an
		 * image assembled in the daemon. */
		res = off ? crc_call_next(&c, op, last ? 0 : CRC_MSG_NOREPLY, sizeof(*r) + n, (void **)&r)
			  : crc_call_begin(&c, op, last ? 0 : CRC_MSG_NOREPLY, sizeof(*r) + n, (void **)&r);
		if (res != CUDA_SUCCESS)
			return res;
		*r = (struct crc_load_req){.image_bytes = bytes, .offset = off, .chunk = n};
		memcpy(r + 1, (const uint8_t *)image + off, n);
		if (!last) {
			res = crc_call_post_more(&c);
			if (res != CUDA_SUCCESS)
				return res;
			continue;
		}
		res = crc_call_wait(&c, NULL, NULL);
		if (res == CUDA_SUCCESS) {
			if (c.reply_len >= 8)
				memcpy(handle, c.reply, 8);
			else
				res = CUDA_ERROR_UNKNOWN;
		}
		crc_call_end(&c);
		return res;
	}
}

/* The bytes of an image given by pointer: a fatbin wrapper stands for the fatbin it points to. */
static CUresult load_image(uint16_t op, const void *image, uint64_t *handle)
{
	struct crc_modimage_kind kind;

	if (!image || !handle)
		return CUDA_ERROR_INVALID_VALUE;
	if (crc_modimage_identify(image, &kind))
		return CUDA_ERROR_INVALID_IMAGE;
	return load(op, kind.data, kind.size, handle);
}

static CUresult load_file(uint16_t op, const char *path, uint64_t *handle)
{
	CUresult res;
	size_t len;
	void *buf;
	int rc;

	if (!path || !handle)
		return CUDA_ERROR_INVALID_VALUE;
	rc = crc_modimage_read_file(path, &buf, &len);
	if (rc)
		return rc == CRC_ENOTFOUND ? CUDA_ERROR_FILE_NOT_FOUND : CUDA_ERROR_OUT_OF_MEMORY;
	res = load_image(op, buf, handle);
	free(buf);
	return res;
}

CUresult crc_hook_cuModuleLoadData(CUmodule *module, const void *image)
{
	return load_image(CRC_CU_cuModuleLoadData, image, (uint64_t *)module);
}

/* JIT options are not forwarded: the daemon loads with its defaults. */
CUresult crc_hook_cuModuleLoadDataEx(CUmodule *module, const void *image, unsigned int numOptions,
				     CUjit_option *options, void **optionValues)
{
	(void)numOptions, (void)options, (void)optionValues;
	return load_image(CRC_CU_cuModuleLoadData, image, (uint64_t *)module);
}

CUresult crc_hook_cuModuleLoadFatBinary(CUmodule *module, const void *fatCubin)
{
	return load_image(CRC_CU_cuModuleLoadData, fatCubin, (uint64_t *)module);
}

CUresult crc_hook_cuModuleLoad(CUmodule *module, const char *fname)
{
	return load_file(CRC_CU_cuModuleLoadData, fname, (uint64_t *)module);
}

CUresult crc_hook_cuLibraryLoadData(CUlibrary *library, const void *code, CUjit_option *jitOptions,
				    void **jitOptionsValues, unsigned int numJitOptions,
				    CUlibraryOption *libraryOptions, void **libraryOptionValues,
				    unsigned int numLibraryOptions)
{
	(void)jitOptions, (void)jitOptionsValues, (void)numJitOptions;
	(void)libraryOptions, (void)libraryOptionValues, (void)numLibraryOptions;
	return load_image(CRC_CU_cuLibraryLoadData, code, (uint64_t *)library);
}

CUresult crc_hook_cuLibraryLoadFromFile(CUlibrary *library, const char *fileName, CUjit_option *jitOptions,
					void **jitOptionsValues, unsigned int numJitOptions,
					CUlibraryOption *libraryOptions, void **libraryOptionValues,
					unsigned int numLibraryOptions)
{
	(void)jitOptions, (void)jitOptionsValues, (void)numJitOptions;
	(void)libraryOptions, (void)libraryOptionValues, (void)numLibraryOptions;
	return load_file(CRC_CU_cuLibraryLoadData, fileName, (uint64_t *)library);
}

CUresult crc_hook_cuModuleUnload(CUmodule hmod)
{
	CUresult res = crc_fwd_cuModuleUnload(hmod);

	if (res == CUDA_SUCCESS)
		crc_mvar_unloaded((uintptr_t)hmod, false);
	return res;
}

CUresult crc_hook_cuLibraryUnload(CUlibrary library)
{
	CUresult res = crc_fwd_cuLibraryUnload(library);

	if (res == CUDA_SUCCESS)
		crc_mvar_unloaded((uintptr_t)library, true);
	return res;
}

CUresult crc_hook_cuLibraryGetModule(CUmodule *pMod, CUlibrary library)
{
	return crc_fwd_cuLibraryGetModule(pMod, library);
}

/* A global the daemon found: a __managed__ one is given as its copy here (managed_vars.c), which
 * the program's CPU reads and writes. */
static CUresult global_found(CUresult res, uint64_t owner, bool library, const char *name, bool managed,
			     CUdeviceptr dev, size_t size, CUdeviceptr *dptr, size_t *bytes)
{
	int is_managed = managed;

	if (res != CUDA_SUCCESS)
		return res;
	if (!managed &&
	    crc_hook_cuPointerGetAttribute(&is_managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, dev) != CUDA_SUCCESS)
		is_managed = 0;
	if (is_managed && !crc_client.tcp) {
		res = crc_mvar_found(owner, library, name, dev, size, &dev);
		if (res != CUDA_SUCCESS)
			return res;
	}
	if (dptr)
		*dptr = dev;
	if (bytes)
		*bytes = size;
	return CUDA_SUCCESS;
}

CUresult crc_hook_cuModuleGetGlobal_v2(CUdeviceptr *dptr, size_t *bytes, CUmodule hmod, const char *name)
{
	CUdeviceptr dev = 0;
	size_t size = 0;
	CUresult res = crc_fwd_cuModuleGetGlobal_v2(&dev, &size, hmod, name);

	return global_found(res, (uintptr_t)hmod, false, name, false, dev, size, dptr, bytes);
}

CUresult crc_hook_cuLibraryGetGlobal(CUdeviceptr *dptr, size_t *bytes, CUlibrary library, const char *name)
{
	CUdeviceptr dev = 0;
	size_t size = 0;
	CUresult res = crc_fwd_cuLibraryGetGlobal(&dev, &size, library, name);

	return global_found(res, (uintptr_t)library, true, name, false, dev, size, dptr, bytes);
}

CUresult crc_hook_cuLibraryGetManaged(CUdeviceptr *dptr, size_t *bytes, CUlibrary library, const char *name)
{
	CUdeviceptr dev = 0;
	size_t size = 0;
	CUresult res;

	if (!dptr && !bytes)
		return CUDA_ERROR_INVALID_VALUE;
	res = crc_fwd_cuLibraryGetManaged(&dev, &size, library, name);
	return global_found(res, (uintptr_t)library, true, name, true, dev, size, dptr, bytes);
}

/* ---- lookups -------------------------------------------------------------------------------------- */
static CUresult get_function(uint16_t op, uint64_t owner, const char *name, uint64_t *out)
{
	size_t name_len = name ? strlen(name) + 1 : 0;
	const struct crc_getfn_reply *r;
	struct crc_getfn_req *q;
	struct crc_call c;
	CUresult res;

	if (!out)
		return CUDA_ERROR_INVALID_VALUE;
	res = crc_call_begin(&c, op, 0, sizeof(*q) + name_len, (void **)&q);
	if (res != CUDA_SUCCESS)
		return res;
	q->owner = owner;
	q->name_len = name_len;
	if (name_len)
		memcpy(q + 1, name, name_len);
	res = crc_call_wait(&c, NULL, NULL);
	if (res == CUDA_SUCCESS) {
		r = c.reply;
		if (c.reply_len < sizeof(*r) ||
		    (r->nparams != UINT32_MAX &&
		     (r->nparams > CRC_MAX_KPARAMS ||
		      c.reply_len < sizeof(*r) + r->nparams * sizeof(struct crc_kparam_wire)))) {
			res = CUDA_ERROR_UNKNOWN;
		} else {
			if (!crc_func_store(r->owner ? r->owner : owner, name, r,
					    (const struct crc_kparam_wire *)(r + 1)))
				res = CUDA_ERROR_OUT_OF_MEMORY;
			*out = r->handle;
		}
	}
	crc_call_end(&c);
	return res;
}

CUresult crc_hook_cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name)
{
	if (!name)
		return CUDA_ERROR_INVALID_VALUE;
	return get_function(CRC_CU_cuModuleGetFunction, (uintptr_t)hmod, name, (uint64_t *)hfunc);
}

CUresult crc_hook_cuLibraryGetKernel(CUkernel *pKernel, CUlibrary library, const char *name)
{
	if (!name)
		return CUDA_ERROR_INVALID_VALUE;
	return get_function(CRC_CU_cuLibraryGetKernel, (uintptr_t)library, name, (uint64_t *)pKernel);
}

CUresult crc_hook_cuKernelGetFunction(CUfunction *pFunc, CUkernel kernel)
{
	struct crc_func_info *k = crc_func_lookup((uintptr_t)kernel);

	return get_function(CRC_CU_cuKernelGetFunction, (uintptr_t)kernel, k ? k->name : NULL,
			    (uint64_t *)pFunc);
}

/* ---- a module's functions, a library's kernels ------------------------------------------------- */
/* Each function of the module (enum_op cuModuleEnumerateFunctions) or kernel of the library
 * (cuLibraryEnumerateKernels), named, as cuModuleGetFunction / cuLibraryGetKernel gives it (journaled
 * like any other lookup): fn(arg, handle, name); the number of them, or -1 with *err. keep: the names
 * outlive the call (a caller of the tools' table may keep the pointers it is given; a few per module). */
static int each_function(int enum_op, uint64_t owner, void (*fn)(void *arg, CUfunction f, const char *name),
			 void *arg, unsigned max, bool keep, CUresult *err)
{
	int get_op = enum_op == CRC_CU_cuLibraryEnumerateKernels ? CRC_CU_cuLibraryGetKernel
								 : CRC_CU_cuModuleGetFunction;
	const struct crc_module_functions_reply *r;
	struct crc_call c;
	char *names = NULL;
	uint32_t count = 0;
	CUresult res;
	void *q;

	res = crc_call_begin(&c, (uint16_t)enum_op, 0, sizeof(owner), &q);
	if (res != CUDA_SUCCESS)
		goto out;
	memcpy(q, &owner, sizeof(owner));
	res = crc_call_wait(&c, NULL, NULL);
	r = c.reply;
	if (res == CUDA_SUCCESS && (c.reply_len < sizeof(*r) || c.reply_len - sizeof(*r) < r->bytes))
		res = CUDA_ERROR_UNKNOWN;
	if (res == CUDA_SUCCESS) {
		names = malloc(r->bytes ? r->bytes : 1);
		count = r->count;
		if (names)
			memcpy(names, r + 1, r->bytes);
		else
			res = CUDA_ERROR_OUT_OF_MEMORY;
	}
	crc_call_end(&c);
	for (uint32_t i = 0, off = 0; res == CUDA_SUCCESS && i < count && i < max; i++) {
		uint64_t f = 0;
		const char *name = names + off;

		res = get_function(get_op, owner, name, &f);
		if (res == CUDA_SUCCESS)
			fn(arg, (CUfunction)(uintptr_t)f, name);
		off += (uint32_t)strlen(name) + 1;
	}
	if (!keep)
		free(names);
out:
	*err = res;
	return res == CUDA_SUCCESS ? (int)count : -1;
}

int crc_module_functions(CUmodule module, void (*fn)(void *arg, CUfunction f, const char *name), void *arg)
{
	CUresult err;

	return each_function(CRC_CU_cuModuleEnumerateFunctions, (uintptr_t)module, fn, arg, UINT32_MAX, true,
			     &err);
}

struct enum_into {
	void **out;
	unsigned n;
};

static void enum_put(void *arg, CUfunction f, const char *name)
{
	struct enum_into *e = arg;

	(void)name;
	e->out[e->n++] = (void *)f;
}

/* cuModuleEnumerateFunctions / cuLibraryEnumerateKernels: the first n handles into out. */
static CUresult enumerate(int enum_op, uint64_t owner, void **out, unsigned n)
{
	struct enum_into e = {out, 0};
	CUresult err;

	if (!out)
		return CUDA_ERROR_INVALID_VALUE;
	each_function(enum_op, owner, enum_put, &e, n, false, &err);
	return err;
}

CUresult crc_hook_cuModuleEnumerateFunctions(CUfunction *functions, unsigned int numFunctions, CUmodule mod)
{
	return enumerate(CRC_CU_cuModuleEnumerateFunctions, (uintptr_t)mod, (void **)functions, numFunctions);
}

CUresult crc_hook_cuLibraryEnumerateKernels(CUkernel *kernels, unsigned int numKernels, CUlibrary lib)
{
	return enumerate(CRC_CU_cuLibraryEnumerateKernels, (uintptr_t)lib, (void **)kernels, numKernels);
}

/* Attribute setters: forwarded, and the cached attributes follow. */
CUresult crc_hook_cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute attrib, int value)
{
	CUresult res = crc_fwd_cuFuncSetAttribute(hfunc, attrib, value);
	struct crc_func_info *f = crc_func_lookup((uintptr_t)hfunc);

	if (res == CUDA_SUCCESS && f && attrib >= 0 && attrib < CRC_FUNC_ATTR_SLOTS)
		f->attrs[attrib] = value;
	return res;
}

CUresult crc_hook_cuKernelSetAttribute(CUfunction_attribute attrib, int val, CUkernel kernel, CUdevice dev)
{
	CUresult res = crc_fwd_cuKernelSetAttribute(attrib, val, kernel, dev);
	struct crc_func_info *f = crc_func_lookup((uintptr_t)kernel);

	if (res == CUDA_SUCCESS && f && attrib >= 0 && attrib < CRC_FUNC_ATTR_SLOTS)
		f->attrs[attrib] = val;
	return res;
}

CUresult crc_hook_cuFuncSetCacheConfig(CUfunction hfunc, CUfunc_cache config)
{
	return crc_fwd_cuFuncSetCacheConfig(hfunc, config);
}

CUresult crc_hook_cuKernelSetCacheConfig(CUkernel kernel, CUfunc_cache config, CUdevice dev)
{
	return crc_fwd_cuKernelSetCacheConfig(kernel, config, dev);
}

CUresult crc_hook_cuFuncSetSharedMemConfig(CUfunction hfunc, CUsharedconfig config)
{
	return crc_fwd_cuFuncSetSharedMemConfig(hfunc, config);
}

/* ---- launches ------------------------------------------------------------------------------------- */
/* The `extra` buffer: CU_LAUNCH_PARAM_BUFFER_POINTER/SIZE, sent verbatim. */
static bool extra_buffer(void **extra, const void **buf, size_t *size)
{
	*buf = NULL;
	*size = 0;
	for (size_t i = 0; extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
		if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER)
			*buf = extra[i + 1];
		else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE)
			*size = *(size_t *)extra[i + 1];
		else
			return false;
	}
	return *buf || !*size;
}

CUresult crc_launch_prepare(struct crc_launch_pack *lp, uint64_t f, void **kernelParams, void **extra,
			    unsigned nattrs)
{
	struct crc_func_info *fi = crc_func_lookup(f);

	*lp = (struct crc_launch_pack){.fi = fi, .kernel_params = kernelParams, .nattrs = nattrs};
	if (!fi)
		return CUDA_ERROR_INVALID_HANDLE;
	if (kernelParams) {
		if (fi->nparams == UINT32_MAX) {
			pr_err("launch of %s: its parameter layout is unknown; kernelParams cannot be sent",
			       fi->name);
			return CUDA_ERROR_NOT_SUPPORTED;
		}
		lp->n = fi->nparams;
		lp->bytes = fi->param_bytes;
	} else if (extra) {
		if (!extra_buffer(extra, &lp->ebuf, &lp->esize) || lp->esize > 65536)
			return CUDA_ERROR_INVALID_VALUE;
		lp->n = UINT32_MAX;
		lp->bytes = (uint32_t)lp->esize;
	} else {
		lp->n = fi->nparams == UINT32_MAX ? 0 : fi->nparams;
		if (lp->n)
			return CUDA_ERROR_INVALID_VALUE;
		lp->bytes = 0;
	}
	lp->len = sizeof(struct crc_launch_req) +
		  (lp->n == UINT32_MAX ? 0 : lp->n * sizeof(struct crc_kparam_wire)) + crc_align8(lp->bytes) +
		  nattrs * sizeof(CUlaunchAttribute);
	return CUDA_SUCCESS;
}

void crc_launch_write(const struct crc_launch_pack *lp, struct crc_launch_req *r,
		      const CUlaunchAttribute *attrs)
{
	struct crc_kparam_wire *pw = (struct crc_kparam_wire *)(r + 1);
	uint8_t *buf = (uint8_t *)(pw + (lp->n == UINT32_MAX ? 0 : lp->n));

	r->nparams = lp->n;
	r->param_bytes = lp->bytes;
	r->nattrs = lp->nattrs;
	memset(buf, 0, crc_align8(lp->bytes));
	if (lp->n == UINT32_MAX) {
		memcpy(buf, lp->ebuf, lp->esize);
	} else {
		if (lp->n) /* a kernel without parameters may have no table at all */
			memcpy(pw, lp->fi->params, lp->n * sizeof(*pw));
		for (uint32_t i = 0; i < lp->n; i++)
			memcpy(buf + lp->fi->params[i].offset, lp->kernel_params[i], lp->fi->params[i].size);
	}
	if (lp->nattrs)
		memcpy(buf + crc_align8(lp->bytes), attrs, lp->nattrs * sizeof(*attrs));
}

static CUresult launch(uint16_t op, uint64_t f, const unsigned grid[3], const unsigned block[3],
		       unsigned shared, uint64_t stream, void **kernelParams, void **extra,
		       const CUlaunchAttribute *attrs, unsigned nattrs, bool cooperative)
{
	struct crc_launch_pack lp;
	struct crc_launch_req *r;
	struct crc_call c;
	CUresult res = crc_launch_prepare(&lp, f, kernelParams, extra, nattrs);

	if (res != CUDA_SUCCESS)
		return res;
	/* A collective is counted by the gate (crcuda/proto.h): a process tree stops after the same one. */
	crc_self()->collective = lp.fi->collective;
	res = crc_call_begin(&c, op, CRC_MSG_NOREPLY, lp.len, (void **)&r);
	crc_self()->collective = false;
	if (res != CUDA_SUCCESS)
		return res;
	*r = (struct crc_launch_req){.func = f,
				     .stream = stream,
				     .grid = {grid[0], grid[1], grid[2]},
				     .block = {block[0], block[1], block[2]},
				     .shared_bytes = shared,
				     .cooperative = cooperative};
	crc_launch_write(&lp, r, attrs);
	return crc_call_post(&c);
}

CUresult crc_hook_cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
				 unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
				 unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
				 void **kernelParams, void **extra)
{
	const unsigned grid[3] = {gridDimX, gridDimY, gridDimZ}, block[3] = {blockDimX, blockDimY, blockDimZ};

	return launch(CRC_CU_cuLaunchKernel, (uintptr_t)f, grid, block, sharedMemBytes, (uintptr_t)hStream,
		      kernelParams, extra, NULL, 0, false);
}

CUresult crc_hook_cuLaunchCooperativeKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
					    unsigned int gridDimZ, unsigned int blockDimX,
					    unsigned int blockDimY, unsigned int blockDimZ,
					    unsigned int sharedMemBytes, CUstream hStream,
					    void **kernelParams)
{
	const unsigned grid[3] = {gridDimX, gridDimY, gridDimZ}, block[3] = {blockDimX, blockDimY, blockDimZ};

	return launch(CRC_CU_cuLaunchCooperativeKernel, (uintptr_t)f, grid, block, sharedMemBytes,
		      (uintptr_t)hStream, kernelParams, NULL, NULL, 0, true);
}

/* Deprecated: one cooperative launch per entry through the layer's own entry points (the launches
 * above), with the driver's argument checks and its pre- and post-launch synchronisation between the
 * streams (crcuda/coop_multi.h). */
CUresult crc_hook_cuLaunchCooperativeKernelMultiDevice(CUDA_LAUNCH_PARAMS *launchParamsList,
						       unsigned int numDevices, unsigned int flags)
{
	CUresult res = crc_ready();

	return res != CUDA_SUCCESS ? res : crc_coop_multi(launchParamsList, numDevices, flags);
}

CUresult crc_hook_cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **kernelParams,
				   void **extra)
{
	unsigned grid[3], block[3];

	if (!config || config->numAttrs > 16 || (config->numAttrs && !config->attrs))
		return CUDA_ERROR_INVALID_VALUE;
	grid[0] = config->gridDimX, grid[1] = config->gridDimY, grid[2] = config->gridDimZ;
	block[0] = config->blockDimX, block[1] = config->blockDimY, block[2] = config->blockDimZ;
	return launch(CRC_CU_cuLaunchKernelEx, (uintptr_t)f, grid, block, config->sharedMemBytes,
		      (uintptr_t)config->hStream, kernelParams, extra, config->attrs, config->numAttrs,
		      false);
}

/* Occupancy queries that take a launch configuration: sent as a launch request without parameters,
 * answered with one int. cuBLASLt asks for cluster occupancy while it creates a handle. */
static CUresult occupancy_with_config(uint16_t op, int *out, CUfunction f, const CUlaunchConfig *config)
{
	uint8_t buf[sizeof(struct crc_launch_req) + 16 * sizeof(CUlaunchAttribute)];
	struct crc_launch_req *r = (struct crc_launch_req *)buf;

	if (!out || !config || config->numAttrs > 16 || (config->numAttrs && !config->attrs))
		return CUDA_ERROR_INVALID_VALUE;
	*r = (struct crc_launch_req){.func = (uintptr_t)f,
				     .stream = (uintptr_t)config->hStream,
				     .grid = {config->gridDimX, config->gridDimY, config->gridDimZ},
				     .block = {config->blockDimX, config->blockDimY, config->blockDimZ},
				     .shared_bytes = config->sharedMemBytes,
				     .nattrs = config->numAttrs};
	if (config->numAttrs)
		memcpy(r + 1, config->attrs, config->numAttrs * sizeof(CUlaunchAttribute));
	return crc_rpc(op, buf, sizeof(*r) + config->numAttrs * sizeof(CUlaunchAttribute), out, sizeof(*out));
}

CUresult crc_hook_cuOccupancyMaxActiveClusters(int *numClusters, CUfunction func,
					       const CUlaunchConfig *config)
{
	return occupancy_with_config(CRC_CU_cuOccupancyMaxActiveClusters, numClusters, func, config);
}

CUresult crc_hook_cuOccupancyMaxPotentialClusterSize(int *clusterSize, CUfunction func,
						     const CUlaunchConfig *config)
{
	return occupancy_with_config(CRC_CU_cuOccupancyMaxPotentialClusterSize, clusterSize, func, config);
}

/* ---- the potential block size: searched here over the daemon's answers (crcuda/occupancy.h) ---- */
static CUresult occ_max_blocks(int *blocks, CUfunction f, int block_size, size_t smem, unsigned flags)
{
	return crc_fwd_cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(blocks, f, block_size, smem,
									    flags);
}

static CUresult occ_dev_attr(int *v, CUdevice_attribute a)
{
	CUdevice dev;
	CUresult res = crc_ctx_device(0, &dev);

	return res == CUDA_SUCCESS ? crc_local_cuDeviceGetAttribute(v, a, dev) : res;
}

static const struct crc_occupancy_query occ_query = {occ_max_blocks, crc_local_cuFuncGetAttribute,
						     occ_dev_attr};

CUresult crc_hook_cuOccupancyMaxPotentialBlockSize(int *minGridSize, int *blockSize, CUfunction func,
						   CUoccupancyB2DSize blockSizeToDynamicSMemSize,
						   size_t dynamicSMemSize, int blockSizeLimit)
{
	return crc_occupancy_block_size(minGridSize, blockSize, func, blockSizeToDynamicSMemSize,
					dynamicSMemSize, blockSizeLimit, CU_OCCUPANCY_DEFAULT, &occ_query);
}

CUresult crc_hook_cuOccupancyMaxPotentialBlockSizeWithFlags(int *minGridSize, int *blockSize, CUfunction func,
							    CUoccupancyB2DSize blockSizeToDynamicSMemSize,
							    size_t dynamicSMemSize, int blockSizeLimit,
							    unsigned int flags)
{
	return crc_occupancy_block_size(minGridSize, blockSize, func, blockSizeToDynamicSMemSize,
					dynamicSMemSize, blockSizeLimit, flags, &occ_query);
}
