/* stream_attrs: stream attributes (cuStreamSetAttribute / cuStreamGetAttribute), as simpleAttributes sets
 * an L2 access policy window: the window over device memory, the synchronisation policy, the priority
 * read back, on a stream created here and on the per-thread default stream; a kernel on the stream
 * computes the right result; an attribute streams do not have is refused. Prints what it reads. */
#include "cuda_test.h"

extern const unsigned char graph_basic_fatbin[];

#define N 4096

int main(void)
{
	static unsigned host[N];
	CUmodule mod;
	CUfunction affine;
	CUstream s;
	CUdeviceptr x;
	CUstreamAttrValue v = {0}, got;
	unsigned mul = 2, add = 9;
	int n = N;

	cu_test_init("stream_attrs");
	cu_test_primary_context(NULL);
	CU_CHECK(cuModuleLoadData(&mod, graph_basic_fatbin));
	CU_CHECK(cuModuleGetFunction(&affine, mod, "graph_affine"));
	CU_CHECK(cuStreamCreateWithPriority(&s, CU_STREAM_NON_BLOCKING, 0));
	CU_CHECK(cuMemAlloc(&x, N * sizeof(unsigned)));
	CU_CHECK(cuMemsetD32(x, 1, N));

	v.accessPolicyWindow = (CUaccessPolicyWindow){.base_ptr = (void *)(uintptr_t)x,
						      .num_bytes = N * sizeof(unsigned),
						      .hitRatio = 0.5f,
						      .hitProp = CU_ACCESS_PROPERTY_PERSISTING,
						      .missProp = CU_ACCESS_PROPERTY_STREAMING};
	CU_CHECK(cuStreamSetAttribute(s, CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW, &v));
	CU_CHECK(cuStreamGetAttribute(s, CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW, &got));
	CHECK(got.accessPolicyWindow.base_ptr == v.accessPolicyWindow.base_ptr);
	printf("stream_attrs: window %zu bytes, hit ratio %.2f, hit %d, miss %d\n",
	       got.accessPolicyWindow.num_bytes, got.accessPolicyWindow.hitRatio,
	       (int)got.accessPolicyWindow.hitProp, (int)got.accessPolicyWindow.missProp);
	v.syncPolicy = CU_SYNC_POLICY_SPIN;
	CU_CHECK(cuStreamSetAttribute(s, CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY, &v));
	CU_CHECK(cuStreamGetAttribute(s, CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY, &got));
	printf("stream_attrs: synchronisation policy %d\n", (int)got.syncPolicy);
	CU_CHECK(cuStreamGetAttribute(s, CU_LAUNCH_ATTRIBUTE_PRIORITY, &got));
	printf("stream_attrs: priority %d\n", got.priority);
	CU_CHECK(
	    cuStreamGetAttribute(CU_STREAM_PER_THREAD, CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY, &got));
	printf("stream_attrs: per-thread stream's synchronisation policy %d\n", (int)got.syncPolicy);
	CU_EXPECT(cuStreamSetAttribute(s, CU_LAUNCH_ATTRIBUTE_COOPERATIVE, &v), CUDA_ERROR_INVALID_VALUE);

	void *params[] = {&x, &mul, &add, &n};
	CU_CHECK(cuLaunchKernel(affine, N / 128, 1, 1, 128, 1, 1, 0, s, params, NULL));
	CU_CHECK(cuStreamSynchronize(s));
	CU_CHECK(cuMemcpyDtoH(host, x, sizeof(host)));
	for (unsigned i = 0; i < N; i++)
		CHECK(host[i] == 2u + 9u + i);
	v.accessPolicyWindow.num_bytes = 0; /* the window off again */
	CU_CHECK(cuStreamSetAttribute(s, CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW, &v));
	CU_CHECK(cuMemFree(x));
	CU_CHECK(cuStreamDestroy(s));
	cu_test_pass("stream_attrs");
}
