/* ctx_attach: CUDA 2.0's context usage count (cuCtxAttach, cuCtxDetach). A created context attached
 * twice stays through two detaches, working (a memset and a copy back in it), and goes with the third;
 * a wrong flag, a detach of a context that is not current, and an attach with none current are
 * refused. */
#include "cuda_test.h"

/* Deprecated since CUDA 4.0, still exported: old programs call them. */
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

int main(void)
{
	CUdevice dev;
	CUcontext c, a1 = NULL, a2 = NULL, popped, none = NULL;
	CUdeviceptr p;
	unsigned word = 0;

	cu_test_init("ctx_attach");
	CU_CHECK(cuDeviceGet(&dev, 0));
	CU_CHECK(cuCtxCreate(&c, NULL, 0, dev));
	CU_EXPECT(cuCtxAttach(&a1, 1), CUDA_ERROR_INVALID_VALUE);
	CU_CHECK(cuCtxAttach(&a1, 0));
	CU_CHECK(cuCtxAttach(&a2, 0));
	CHECK(a1 == c && a2 == c);
	CU_CHECK(cuCtxDetach(c));
	CU_CHECK(cuCtxDetach(c));
	/* Still the creator's: it works. */
	CU_CHECK(cuMemAlloc(&p, sizeof(word)));
	CU_CHECK(cuMemsetD32(p, 0x2a2a2a2a, 1));
	CU_CHECK(cuMemcpyDtoH(&word, p, sizeof(word)));
	CHECK(word == 0x2a2a2a2a);
	CU_CHECK(cuMemFree(p));
	/* Not current: refused; current again: the last detach destroys it. */
	CU_CHECK(cuCtxPopCurrent(&popped));
	CHECK(popped == c);
	CU_EXPECT(cuCtxDetach(c), CUDA_ERROR_INVALID_CONTEXT);
	CU_CHECK(cuCtxGetCurrent(&none));
	CHECK(none == NULL);
	CU_EXPECT(cuCtxAttach(&a1, 0), CUDA_ERROR_INVALID_CONTEXT);
	CU_CHECK(cuCtxPushCurrent(c));
	CU_CHECK(cuCtxDetach(c));
	CU_CHECK(cuCtxGetCurrent(&none));
	CHECK(none == NULL);
	printf("ctx_attach: word %#x\n", word);
	cu_test_pass("ctx_attach");
}
