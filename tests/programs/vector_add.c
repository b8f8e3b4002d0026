/* vector_add: loads one kernel source four ways (fatbin from memory, fatbin from a file, a bare sm_90
 * cubin, PTX text), launches with kernelParams, with `extra` and with cuLaunchKernelEx, and checks
 * every element against the CPU. */
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "cuda_test.h"

extern const unsigned char vector_add_fatbin[], vector_add_cubin[], vector_add_ptx[];
extern const unsigned long vector_add_fatbin_size;

#define N     100003 /* not a multiple of the block size */
#define BLOCK 256
static const char *const vector_add_name = "_Z10vector_addPKfS0_Pfi";

static float a[N], b[N], c[N];

static void check_result(const char *how)
{
	for (int i = 0; i < N; i++) {
		if (c[i] != a[i] + b[i]) {
			fprintf(stderr, "vector_add (%s): c[%d] = %g, expected %g\n", how, i, (double)c[i],
				(double)(a[i] + b[i]));
			exit(1);
		}
	}
}

static void run_module(CUmodule mod, const char *how)
{
	CUfunction f, scale;
	CUdeviceptr da, db, dc;
	int n = N, factor = -3;
	unsigned grid = (N + BLOCK - 1) / BLOCK;
	size_t offset, size;

	CU_CHECK(cuModuleGetFunction(&f, mod, vector_add_name));
	CU_EXPECT(cuModuleGetFunction(&scale, mod, "no_such_kernel"), CUDA_ERROR_NOT_FOUND);
	CU_CHECK(cuModuleGetFunction(&scale, mod, "scale_i32"));
	/* (const float *, const float *, float *, int) */
	for (unsigned i = 0; i < 4; i++) {
		CU_CHECK(cuFuncGetParamInfo(f, i, &offset, &size));
		CHECK_EQ_INT(offset, 8 * i);
		CHECK_EQ_INT(size, i < 3 ? 8 : 4);
	}
	CU_EXPECT(cuFuncGetParamInfo(f, 4, &offset, &size), CUDA_ERROR_INVALID_VALUE);

	CU_CHECK(cuMemAlloc(&da, sizeof(a)));
	CU_CHECK(cuMemAlloc(&db, sizeof(b)));
	CU_CHECK(cuMemAlloc(&dc, sizeof(c)));
	CU_CHECK(cuMemcpyHtoD(da, a, sizeof(a)));
	CU_CHECK(cuMemcpyHtoD(db, b, sizeof(b)));

	/* kernelParams */
	memset(c, 0, sizeof(c));
	CU_CHECK(cuMemsetD8(dc, 0, sizeof(c)));
	void *params[] = {&da, &db, &dc, &n};
	CU_CHECK(cuLaunchKernel(f, grid, 1, 1, BLOCK, 1, 1, 0, NULL, params, NULL));
	CU_CHECK(cuMemcpyDtoH(c, dc, sizeof(c)));
	check_result(how);

	/* extra: one buffer laid out as the parameter bank */
	struct {
		CUdeviceptr a, b, c;
		int n;
		int pad;
	} buffer = {da, db, dc, n, 0};
	size_t buffer_size = 28;
	void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &buffer, CU_LAUNCH_PARAM_BUFFER_SIZE, &buffer_size,
			 CU_LAUNCH_PARAM_END};
	memset(c, 0, sizeof(c));
	CU_CHECK(cuMemsetD8(dc, 0, sizeof(c)));
	CU_CHECK(cuLaunchKernel(f, grid, 1, 1, BLOCK, 1, 1, 0, NULL, NULL, extra));
	CU_CHECK(cuMemcpyDtoH(c, dc, sizeof(c)));
	check_result(how);

	/* cuLaunchKernelEx, then an extern "C" kernel on the result */
	CUlaunchConfig config = {.gridDimX = grid,
				 .gridDimY = 1,
				 .gridDimZ = 1,
				 .blockDimX = BLOCK,
				 .blockDimY = 1,
				 .blockDimZ = 1};
	memset(c, 0, sizeof(c));
	CU_CHECK(cuMemsetD8(dc, 0, sizeof(c)));
	CU_CHECK(cuLaunchKernelEx(&config, f, params, NULL));
	CU_CHECK(cuCtxSynchronize());
	CU_CHECK(cuMemcpyDtoH(c, dc, sizeof(c)));
	check_result(how);

	/* An extern "C" kernel, in place on an int array. */
	static int ints[N], scaled[N];
	for (int i = 0; i < N; i++)
		ints[i] = i - N / 2;
	CU_CHECK(cuMemcpyHtoD(da, ints, sizeof(ints)));
	void *scale_params[] = {&da, &factor, &n};
	CU_CHECK(cuLaunchKernel(scale, grid, 1, 1, BLOCK, 1, 1, 0, NULL, scale_params, NULL));
	CU_CHECK(cuMemcpyDtoH(scaled, da, sizeof(scaled)));
	for (int i = 0; i < N; i++) {
		if (scaled[i] != ints[i] * factor) {
			fprintf(stderr, "scale_i32 (%s): element %d is %d, expected %d\n", how, i, scaled[i],
				ints[i] * factor);
			exit(1);
		}
	}

	CU_CHECK(cuMemFree(da));
	CU_CHECK(cuMemFree(db));
	CU_CHECK(cuMemFree(dc));
}

int main(void)
{
	CUdevice dev;
	CUcontext ctx, current;
	CUmodule mod;
	char path[] = "/tmp/crcuda-vector-add-XXXXXX";
	int fd;

	cu_test_init("vector_add");
	for (int i = 0; i < N; i++) {
		a[i] = (float)(i % 1000) * 0.5f;
		b[i] = (float)(i / 7) - 1000.0f;
	}
	CU_CHECK(cuDeviceGet(&dev, 0));
	CU_CHECK(cuCtxCreate(&ctx, NULL, 0, dev));
	CU_CHECK(cuCtxGetCurrent(&current));
	CHECK(current == ctx);

	CU_CHECK(cuModuleLoadData(&mod, vector_add_fatbin));
	run_module(mod, "fatbin");
	CU_CHECK(cuModuleUnload(mod));

	fd = mkstemp(path);
	CHECK(fd >= 0);
	CHECK(write(fd, vector_add_fatbin, vector_add_fatbin_size) == (ssize_t)vector_add_fatbin_size);
	close(fd);
	CU_CHECK(cuModuleLoad(&mod, path));
	unlink(path);
	run_module(mod, "fatbin file");
	CU_CHECK(cuModuleUnload(mod));

	CU_CHECK(cuModuleLoadData(&mod, vector_add_cubin));
	run_module(mod, "cubin");
	CU_CHECK(cuModuleUnload(mod));

	CU_CHECK(cuModuleLoadDataEx(&mod, vector_add_ptx, 0, NULL, NULL));
	run_module(mod, "ptx");
	CU_CHECK(cuModuleUnload(mod));

	CU_CHECK(cuCtxDestroy(ctx));
	cu_test_pass("vector_add");
}
