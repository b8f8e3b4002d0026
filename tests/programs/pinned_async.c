/* pinned_async: cuMemAllocHost, cuMemHostAlloc(DEVICEMAP) and cuMemHostRegister buffers used with async
 * copies and kernels on two streams, a kernel touching mapped host memory directly, pointer
 * attributes, cuMemcpyAsync inferring directions from the addresses (unified addressing), and
 * page-locked memory as the source of a device-to-host copy. */
#include <stdlib.h>
#include <string.h>

#include "cuda_test.h"

extern const unsigned char pinned_async_fatbin[];

#define N     (1 << 18)
#define BLOCK 256

int main(void)
{
	CUmodule mod;
	CUfunction square, add_one;
	CUstream up, down;
	CUevent uploaded;
	CUdeviceptr din, dout, mapped_dptr;
	unsigned *in, *out, *mapped, *registered;
	unsigned int memtype, flags;
	CUcontext ctx, ptr_ctx;
	int n = N;
	const size_t bytes = N * sizeof(unsigned);

	cu_test_init("pinned_async");
	ctx = cu_test_primary_context(NULL);
	CU_CHECK(cuModuleLoadData(&mod, pinned_async_fatbin));
	CU_CHECK(cuModuleGetFunction(&square, mod, "_Z10square_u32PKjPji"));
	CU_CHECK(cuModuleGetFunction(&add_one, mod, "_Z14add_one_mappedPji"));
	CU_CHECK(cuMemAllocHost((void **)&in, bytes));
	CU_CHECK(
	    cuMemHostAlloc((void **)&mapped, bytes, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE));
	registered = aligned_alloc(4096, bytes);
	CHECK(registered != NULL);
	CU_CHECK(cuMemHostRegister(registered, bytes, CU_MEMHOSTREGISTER_PORTABLE));
	out = registered;
	CU_CHECK(cuMemAlloc(&din, bytes));
	CU_CHECK(cuMemAlloc(&dout, bytes));
	CU_CHECK(cuStreamCreate(&up, CU_STREAM_NON_BLOCKING));
	CU_CHECK(cuStreamCreate(&down, CU_STREAM_NON_BLOCKING));
	CU_CHECK(cuEventCreate(&uploaded, CU_EVENT_DISABLE_TIMING));

	CU_CHECK(
	    cuPointerGetAttribute(&memtype, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)(uintptr_t)in));
	CHECK_EQ_INT(memtype, CU_MEMORYTYPE_HOST);
	CU_CHECK(cuPointerGetAttribute(&memtype, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, din));
	CHECK_EQ_INT(memtype, CU_MEMORYTYPE_DEVICE);
	CU_CHECK(cuPointerGetAttribute(&ptr_ctx, CU_POINTER_ATTRIBUTE_CONTEXT, din));
	CHECK(ptr_ctx == ctx);
	CU_CHECK(cuMemHostGetFlags(&flags, mapped));
	CHECK(flags & CU_MEMHOSTALLOC_DEVICEMAP);

	/* Upload on one stream, square and download on another once the upload's event fires. */
	for (int i = 0; i < N; i++)
		in[i] = (unsigned)i * 3u + 1u;
	CU_CHECK(cuMemcpyHtoDAsync(din, in, bytes, up));
	CU_CHECK(cuEventRecord(uploaded, up));
	CU_CHECK(cuStreamWaitEvent(down, uploaded, 0));
	void *square_params[] = {&din, &dout, &n};
	CU_CHECK(cuLaunchKernel(square, N / BLOCK, 1, 1, BLOCK, 1, 1, 0, down, square_params, NULL));
	CU_CHECK(cuMemcpyDtoHAsync(out, dout, bytes, down));
	CU_CHECK(cuStreamSynchronize(down));
	for (int i = 0; i < N; i++)
		CHECK_EQ_INT(out[i], in[i] * in[i]);

	/* cuMemcpyAsync with unified addressing: host -> device -> device -> host. */
	memset(out, 0, bytes);
	CU_CHECK(cuMemcpyAsync(dout, (CUdeviceptr)(uintptr_t)in, bytes, up));
	CU_CHECK(cuMemcpyAsync(din, dout, bytes, up));
	CU_CHECK(cuMemcpyAsync((CUdeviceptr)(uintptr_t)out, din, bytes, up));
	CU_CHECK(cuStreamSynchronize(up));
	CHECK(!memcmp(out, in, bytes));

	/* Page-locked memory named as the device side of a copy into pageable memory (unified addressing;
	 * XLA does this), and a copy of nothing with no buffers. */
	{
		unsigned *pageable = malloc(bytes);

		CHECK(pageable);
		CU_CHECK(cuMemcpyDtoHAsync(pageable, (CUdeviceptr)(uintptr_t)in, bytes, up));
		CU_CHECK(cuStreamSynchronize(up));
		CHECK(!memcmp(pageable, in, bytes));
		CU_CHECK(cuMemcpyDtoH(pageable, (CUdeviceptr)(uintptr_t)in, 64));
		CU_CHECK(cuMemcpyDtoHAsync(NULL, 0, 0, up));
		free(pageable);
	}

	/* Zero-copy: the kernel updates mapped host memory through its device pointer. */
	for (int i = 0; i < N; i++)
		mapped[i] = (unsigned)i;
	CU_CHECK(cuMemHostGetDevicePointer(&mapped_dptr, mapped, 0));
	void *add_params[] = {&mapped_dptr, &n};
	CU_CHECK(cuLaunchKernel(add_one, N / BLOCK, 1, 1, BLOCK, 1, 1, 0, up, add_params, NULL));
	CU_CHECK(cuStreamSynchronize(up));
	for (int i = 0; i < N; i++)
		CHECK_EQ_INT(mapped[i], (unsigned)i + 1);

	CU_CHECK(cuEventDestroy(uploaded));
	CU_CHECK(cuStreamDestroy(up));
	CU_CHECK(cuStreamDestroy(down));
	CU_CHECK(cuMemFree(din));
	CU_CHECK(cuMemFree(dout));
	CU_CHECK(cuMemHostUnregister(registered));
	CU_EXPECT(cuMemHostUnregister(registered), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
	free(registered);
	CU_CHECK(cuMemFreeHost(mapped));
	CU_CHECK(cuMemFreeHost(in));
	CU_CHECK(cuModuleUnload(mod));
	CU_CHECK(cuDevicePrimaryCtxRelease(0));
	cu_test_pass("pinned_async");
}
