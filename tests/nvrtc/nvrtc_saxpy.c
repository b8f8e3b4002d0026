/* nvrtc_saxpy: a kernel compiled at run time with NVRTC (as PyTorch's fusers, CuPy and Triton-like
 * tools do), loaded as PTX with cuModuleLoadDataEx and launched; the result must equal the CPU's bit
 * for bit (FMA contraction off on both sides). NVRTC asks the driver for an export table of its own,
 * which crcuda refuses: this shows that compiling and running still work under the layer.
 * Exits 0 pass, 1 fail, 77 no device. */
#include <math.h>
#include <nvrtc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../programs/cuda_test.h"

#define N 100003

static const char *source = "extern \"C\" __global__ void saxpy(float a, const float *x, float *y, int n)\n"
			    "{\n"
			    "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
			    "    if (i < n)\n"
			    "        y[i] = a * x[i] + y[i];\n"
			    "}\n";

#define NVRTC_CHECK(call)                                                                                    \
	do {                                                                                                 \
		nvrtcResult r_ = (call);                                                                     \
		if (r_ != NVRTC_SUCCESS) {                                                                   \
			fprintf(stderr, "nvrtc_saxpy: %s failed: %s\n", #call, nvrtcGetErrorString(r_));     \
			exit(1);                                                                             \
		}                                                                                            \
	} while (0)

/* PTX for the device's architecture (virtual, so the driver JIT-compiles it). */
static char *compile(int major, int minor)
{
	char arch[64];
	const char *opts[] = {arch, "--fmad=false"};
	nvrtcProgram prog;
	size_t len;
	char *ptx;
	nvrtcResult res;

	snprintf(arch, sizeof(arch), "--gpu-architecture=compute_%d%d", major, minor);
	NVRTC_CHECK(nvrtcCreateProgram(&prog, source, "saxpy.cu", 0, NULL, NULL));
	res = nvrtcCompileProgram(prog, 2, opts);
	if (res != NVRTC_SUCCESS) {
		char log[8192] = "";

		nvrtcGetProgramLog(prog, log);
		fprintf(stderr, "nvrtc_saxpy: compiling for %s failed: %s\n%s\n", arch,
			nvrtcGetErrorString(res), log);
		exit(1);
	}
	NVRTC_CHECK(nvrtcGetPTXSize(prog, &len));
	ptx = malloc(len);
	if (!ptx)
		exit(1);
	NVRTC_CHECK(nvrtcGetPTX(prog, ptx));
	NVRTC_CHECK(nvrtcDestroyProgram(&prog));
	return ptx;
}

int main(void)
{
	static float x[N], y[N], want[N];
	const float a = 1.7f;
	int n = N, major, minor;
	CUdevice dev;
	CUcontext ctx;
	CUmodule mod;
	CUfunction fn;
	CUdeviceptr dx, dy;
	void *params[] = {(void *)&a, &dx, &dy, &n};
	CUresult res = cuInit(0);
	char *ptx;

	if (res == CUDA_ERROR_NO_DEVICE)
		return 77;
	CU_CHECK(res);
	CU_CHECK(cuDeviceGet(&dev, 0));
	CU_CHECK(cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
	CU_CHECK(cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev));
	CU_CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
	CU_CHECK(cuCtxSetCurrent(ctx));
	ptx = compile(major, minor);
	CU_CHECK(cuModuleLoadDataEx(&mod, ptx, 0, NULL, NULL));
	CU_CHECK(cuModuleGetFunction(&fn, mod, "saxpy"));
	for (int i = 0; i < N; i++) {
		x[i] = (float)i * 0.25f - 7.0f;
		y[i] = 1.0f / (float)(i + 1);
		want[i] = a * x[i];
		want[i] = want[i] + y[i]; /* two roundings, as the kernel with --fmad=false */
	}
	CU_CHECK(cuMemAlloc(&dx, sizeof(x)));
	CU_CHECK(cuMemAlloc(&dy, sizeof(y)));
	CU_CHECK(cuMemcpyHtoD(dx, x, sizeof(x)));
	CU_CHECK(cuMemcpyHtoD(dy, y, sizeof(y)));
	CU_CHECK(cuLaunchKernel(fn, (N + 255) / 256, 1, 1, 256, 1, 1, 0, NULL, params, NULL));
	CU_CHECK(cuMemcpyDtoH(y, dy, sizeof(y)));
	for (int i = 0; i < N; i++) {
		if (memcmp(&y[i], &want[i], sizeof(float))) {
			fprintf(stderr, "nvrtc_saxpy: y[%d] = %a, expected %a\n", i, (double)y[i],
				(double)want[i]);
			return 1;
		}
	}
	CU_CHECK(cuMemFree(dx));
	CU_CHECK(cuMemFree(dy));
	CU_CHECK(cuModuleUnload(mod));
	CU_CHECK(cuDevicePrimaryCtxRelease(dev));
	free(ptx);
	printf("nvrtc_saxpy: %d elements, PTX for compute_%d%d compiled at run time: PASS\n", N, major,
	       minor);
	return 0;
}
