/* jit_link: the JIT linker, as ptxjit and numba use it: PTX linked with cuLinkCreate/AddData/Complete
 * (wall time, info and error logs, verbose), then the same PTX from a file with cuLinkAddFile; each
 * image loaded and its kernel run (scale_i32), results checked; a missing file is refused. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cuda_test.h"

extern const unsigned char vector_add_ptx[];

#define N 1024

static void run_image(const void *image, int factor)
{
	static int host[N];
	CUmodule mod;
	CUfunction f;
	CUdeviceptr d;
	int n = N;
	void *params[] = {&d, &factor, &n};

	CU_CHECK(cuModuleLoadData(&mod, image));
	CU_CHECK(cuModuleGetFunction(&f, mod, "scale_i32"));
	for (int i = 0; i < N; i++)
		host[i] = i - 100;
	CU_CHECK(cuMemAlloc(&d, sizeof(host)));
	CU_CHECK(cuMemcpyHtoD(d, host, sizeof(host)));
	CU_CHECK(cuLaunchKernel(f, N / 128, 1, 1, 128, 1, 1, 0, NULL, params, NULL));
	CU_CHECK(cuMemcpyDtoH(host, d, sizeof(host)));
	for (int i = 0; i < N; i++)
		CHECK(host[i] == (i - 100) * factor);
	CU_CHECK(cuMemFree(d));
	CU_CHECK(cuModuleUnload(mod));
}

int main(void)
{
	char info[8192], err[8192], path[] = "/tmp/jit_link.XXXXXX";
	CUjit_option opts[6] = {CU_JIT_WALL_TIME,
				CU_JIT_INFO_LOG_BUFFER,
				CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES,
				CU_JIT_ERROR_LOG_BUFFER,
				CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
				CU_JIT_LOG_VERBOSE};
	void *vals[6] = {NULL,	   info, (void *)(uintptr_t)sizeof(info), err, (void *)(uintptr_t)sizeof(err),
			 (void *)1};
	size_t ptx_len = strlen((const char *)vector_add_ptx) + 1, size = 0;
	CUlinkState link;
	void *image = NULL;
	int fd;

	cu_test_init("jit_link");
	cu_test_primary_context(NULL);
	info[0] = err[0] = '\0';
	CU_CHECK(cuLinkCreate(6, opts, vals, &link));
	CU_CHECK(cuLinkAddData(link, CU_JIT_INPUT_PTX, (void *)vector_add_ptx, ptx_len, "vector_add.ptx", 0,
			       NULL, NULL));
	CU_CHECK(cuLinkComplete(link, &image, &size));
	CHECK(image && size > 0);
	printf("jit_link: linked an image, info log %s, error log %s\n", info[0] ? "written" : "empty",
	       err[0] ? "written" : "empty");
	run_image(image, -7);
	CU_CHECK(cuLinkDestroy(link));

	/* From a file. */
	fd = mkstemp(path);
	CHECK(fd >= 0);
	CHECK(write(fd, vector_add_ptx, ptx_len - 1) == (ssize_t)(ptx_len - 1));
	close(fd);
	CU_CHECK(cuLinkCreate(0, NULL, NULL, &link));
	CU_CHECK(cuLinkAddFile(link, CU_JIT_INPUT_PTX, path, 0, NULL, NULL));
	CU_EXPECT(cuLinkAddFile(link, CU_JIT_INPUT_PTX, "/nonexistent/jit_link.ptx", 0, NULL, NULL),
		  CUDA_ERROR_FILE_NOT_FOUND);
	CU_CHECK(cuLinkComplete(link, &image, &size));
	unlink(path);
	run_image(image, 5);
	CU_CHECK(cuLinkDestroy(link));
	cu_test_pass("jit_link");
}
