/* ptr_set_attr: cuPointerSetAttribute. SYNC_MEMOPS (the one settable attribute) set on device memory
 * through an inner pointer is what both forms of the get answer for the whole allocation, cleared and
 * set again; an allocation beside it keeps its own; a copy through the memory still works. The
 * refusals (another attribute, a NULL value, freed memory) and page-locked memory's answer are
 * printed, so natively and under the layer must print the same (sim_forward_ptr_set_attr, and on the
 * GPU tests/gpu/layer.sh). */
#include <string.h>

#include "cuda_test.h"

static unsigned get_sync(CUdeviceptr p)
{
	unsigned one = 7, arr = 7;
	CUpointer_attribute a = CU_POINTER_ATTRIBUTE_SYNC_MEMOPS;
	void *data = &arr;

	CU_CHECK(cuPointerGetAttribute(&one, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, p));
	CU_CHECK(cuPointerGetAttributes(1, &a, &data, p));
	CHECK(one == arr);
	return one;
}

int main(void)
{
	CUdeviceptr p, q, gone;
	unsigned zero = 0, one = 1, words[4] = {1, 2, 3, 4}, back[4] = {0};
	unsigned long long id = 5;
	void *host;
	CUresult res;

	cu_test_init("ptr_set_attr");
	cu_test_primary_context(NULL);
	CU_CHECK(cuMemAlloc(&p, 1 << 20));
	CU_CHECK(cuMemAlloc(&q, 1 << 20));
	printf("ptr_set_attr: device memory SYNC_MEMOPS %u\n", get_sync(p));
	CU_CHECK(cuPointerSetAttribute(&zero, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, p + 4096));
	CHECK(get_sync(p) == 0 && get_sync(p + 100) == 0);
	printf("ptr_set_attr: cleared: %u, the other allocation %u\n", get_sync(p), get_sync(q));
	CU_CHECK(cuMemcpyHtoD(p, words, sizeof(words)));
	CU_CHECK(cuMemcpyDtoH(back, p, sizeof(back)));
	CHECK(!memcmp(words, back, sizeof(words)));
	CU_CHECK(cuPointerSetAttribute(&one, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, p));
	CHECK(get_sync(p) == 1);
	CU_CHECK(cuPointerSetAttribute(&zero, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, q));
	CHECK(get_sync(q) == 0 && get_sync(p) == 1);

	/* Refusals: the driver's own errors, printed. */
	res = cuPointerSetAttribute(&id, CU_POINTER_ATTRIBUTE_BUFFER_ID, p);
	CHECK(res != CUDA_SUCCESS);
	printf("ptr_set_attr: BUFFER_ID: %s\n", cu_error_name(res));
	res = cuPointerSetAttribute(NULL, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, p);
	CHECK(res != CUDA_SUCCESS);
	printf("ptr_set_attr: NULL value: %s\n", cu_error_name(res));
	CU_CHECK(cuMemAlloc(&gone, 1 << 20));
	CU_CHECK(cuMemFree(gone));
	res = cuPointerSetAttribute(&zero, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, gone);
	CHECK(res != CUDA_SUCCESS);
	printf("ptr_set_attr: freed memory: %s\n", cu_error_name(res));
	CHECK(get_sync(p) == 1 && get_sync(q) == 0);

	/* Page-locked memory: what the driver says. */
	CU_CHECK(cuMemAllocHost(&host, 4096));
	printf("ptr_set_attr: page-locked memory SYNC_MEMOPS %u\n", get_sync((uintptr_t)host));
	res = cuPointerSetAttribute(&one, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, (uintptr_t)host);
	printf("ptr_set_attr: page-locked set: %s, now %u\n", cu_error_name(res), get_sync((uintptr_t)host));
	CU_CHECK(cuMemFreeHost(host));
	CU_CHECK(cuMemFree(p));
	CU_CHECK(cuMemFree(q));
	cu_test_pass("ptr_set_attr");
}
