/* stream_memops: stream memory operations, as NCCL and schedulers use them to order streams through
 * memory: a stream waits for a flag (>=, ==, AND) that another stream writes after a kernel; 64-bit
 * writes and waits; a batch (cuStreamBatchMemOp) of writes and a wait; the same as graph nodes (a batch
 * mem-op node, changed in its executable graph and its graph, and a captured write). Every result is
 * checked. */
#include "cuda_test.h"

extern const unsigned char graph_basic_fatbin[];

#define N 4096

int main(void)
{
	static unsigned host[N];
	CUmodule mod;
	CUfunction affine;
	CUstream a, b;
	CUdeviceptr x, flags;
	unsigned mul = 3, add = 1, got32[2];
	unsigned long long got64 = 0;
	int n = N;
	void *params[] = {&x, &mul, &add, &n};

	cu_test_init("stream_memops");
	cu_test_primary_context(NULL);
	CU_CHECK(cuModuleLoadData(&mod, graph_basic_fatbin));
	CU_CHECK(cuModuleGetFunction(&affine, mod, "graph_affine"));
	CU_CHECK(cuStreamCreate(&a, CU_STREAM_NON_BLOCKING));
	CU_CHECK(cuStreamCreate(&b, CU_STREAM_NON_BLOCKING));
	CU_CHECK(cuMemAlloc(&x, N * sizeof(unsigned)));
	CU_CHECK(cuMemAlloc(&flags, 64));
	CU_CHECK(cuMemsetD32(x, 2, N));
	CU_CHECK(cuMemsetD32(flags, 0, 16));

	/* b: kernel, then the flag to 5; a: waits for flag >= 5, then its kernel (on b's result). */
	CU_CHECK(cuLaunchKernel(affine, N / 128, 1, 1, 128, 1, 1, 0, b, params, NULL));
	CU_CHECK(cuStreamWriteValue32(b, flags, 5, CU_STREAM_WRITE_VALUE_DEFAULT));
	CU_CHECK(cuStreamWaitValue32(a, flags, 5, CU_STREAM_WAIT_VALUE_GEQ));
	CU_CHECK(cuLaunchKernel(affine, N / 128, 1, 1, 128, 1, 1, 0, a, params, NULL));
	/* a then writes 0x30 to the second word, b waits for it with AND 0x10, then ==. */
	CU_CHECK(cuStreamWriteValue32(a, flags + 4, 0x30, CU_STREAM_WRITE_VALUE_DEFAULT));
	CU_CHECK(cuStreamWaitValue32(b, flags + 4, 0x10, CU_STREAM_WAIT_VALUE_AND));
	CU_CHECK(cuStreamWaitValue32(b, flags + 4, 0x30, CU_STREAM_WAIT_VALUE_EQ));
	CU_CHECK(cuStreamWriteValue64(b, flags + 8, 0x123456789abcdefull, CU_STREAM_WRITE_VALUE_DEFAULT));
	CU_CHECK(cuStreamWaitValue64(a, flags + 8, 0x123456789abcdefull, CU_STREAM_WAIT_VALUE_EQ));
	CU_CHECK(cuStreamSynchronize(a));
	CU_CHECK(cuStreamSynchronize(b));
	CU_CHECK(cuMemcpyDtoH(host, x, sizeof(host)));
	for (unsigned i = 0; i < N; i++)
		CHECK(host[i] == ((2u * 3u + 1u + i) * 3u + 1u + i));
	CU_CHECK(cuMemcpyDtoH(got32, flags, sizeof(got32)));
	CU_CHECK(cuMemcpyDtoH(&got64, flags + 8, sizeof(got64)));
	CHECK(got32[0] == 5 && got32[1] == 0x30 && got64 == 0x123456789abcdefull);

	/* A batch on a: two writes and a wait on the first. */
	CUstreamBatchMemOpParams ops[3] = {0};
	ops[0].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
	ops[0].writeValue.address = flags + 16;
	ops[0].writeValue.value = 77;
	ops[1].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_64;
	ops[1].writeValue.address = flags + 24;
	ops[1].writeValue.value64 = 0xfeedfacecafebeefull;
	ops[2].waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_32;
	ops[2].waitValue.address = flags + 16;
	ops[2].waitValue.value = 77;
	ops[2].waitValue.flags = CU_STREAM_WAIT_VALUE_EQ;
	CU_CHECK(cuStreamBatchMemOp(a, 3, ops, 0));
	CU_CHECK(cuStreamSynchronize(a));
	CU_CHECK(cuMemcpyDtoH(got32, flags + 16, sizeof(unsigned)));
	CU_CHECK(cuMemcpyDtoH(&got64, flags + 24, sizeof(got64)));
	CHECK(got32[0] == 77 && got64 == 0xfeedfacecafebeefull);
	printf("stream_memops: flags %u %#x %#llx\n", got32[0], 0x30u, got64);

	/* As graph nodes: a batch mem-op node (two writes), its parameters read back, changed in the
	 * executable graph and in the graph; and a write captured from a stream, which the driver makes a
	 * batch mem-op node too. */
	CUcontext ctx;
	CUgraph g, cg;
	CUgraphExec ge, cge;
	CUgraphNode nm, cn[2];
	CUgraphNodeType type;
	size_t count = 2;
	CUstreamBatchMemOpParams gops[2] = {0};
	CU_CHECK(cuCtxGetCurrent(&ctx));
	gops[0].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
	gops[0].writeValue.address = flags + 32;
	gops[0].writeValue.value = 41;
	gops[1].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_64;
	gops[1].writeValue.address = flags + 40;
	gops[1].writeValue.value64 = 0x1122334455667788ull;
	CUDA_BATCH_MEM_OP_NODE_PARAMS bp = {.ctx = ctx, .count = 2, .paramArray = gops}, back = {0};
	CU_CHECK(cuGraphCreate(&g, 0));
	CU_CHECK(cuGraphAddBatchMemOpNode(&nm, g, NULL, 0, &bp));
	CU_CHECK(cuGraphNodeGetType(nm, &type));
	CHECK(type == CU_GRAPH_NODE_TYPE_BATCH_MEM_OP);
	CU_CHECK(cuGraphBatchMemOpNodeGetParams(nm, &back));
	CHECK(back.count == 2 && back.paramArray[0].writeValue.value == 41 &&
	      back.paramArray[1].writeValue.address == flags + 40 &&
	      back.paramArray[1].writeValue.value64 == 0x1122334455667788ull);
	CU_CHECK(cuGraphInstantiateWithFlags(&ge, g, 0));
	gops[0].writeValue.value = 42;
	CU_CHECK(cuGraphExecBatchMemOpNodeSetParams(ge, nm, &bp));
	CU_CHECK(cuGraphLaunch(ge, a));
	CU_CHECK(cuStreamSynchronize(a));
	CU_CHECK(cuMemcpyDtoH(got32, flags + 32, sizeof(unsigned)));
	CU_CHECK(cuMemcpyDtoH(&got64, flags + 40, sizeof(got64)));
	CHECK(got32[0] == 42 && got64 == 0x1122334455667788ull);
	gops[0].writeValue.value = 43;
	CU_CHECK(cuGraphBatchMemOpNodeSetParams(nm, &bp));
	CU_CHECK(cuGraphBatchMemOpNodeGetParams(nm, &back));
	CHECK(back.paramArray[0].writeValue.value == 43);
	CU_CHECK(cuStreamBeginCapture(a, CU_STREAM_CAPTURE_MODE_GLOBAL));
	CU_CHECK(cuStreamWriteValue32(a, flags + 48, 99, CU_STREAM_WRITE_VALUE_DEFAULT));
	CU_CHECK(cuStreamEndCapture(a, &cg));
	CU_CHECK(cuGraphGetNodes(cg, cn, &count));
	CHECK(count == 1);
	CU_CHECK(cuGraphNodeGetType(cn[0], &type));
	CHECK(type == CU_GRAPH_NODE_TYPE_BATCH_MEM_OP);
	CU_CHECK(cuGraphInstantiateWithFlags(&cge, cg, 0));
	CU_CHECK(cuGraphLaunch(cge, a));
	CU_CHECK(cuStreamSynchronize(a));
	CU_CHECK(cuMemcpyDtoH(got32 + 1, flags + 48, sizeof(unsigned)));
	CHECK(got32[1] == 99);
	printf("stream_memops: graph nodes wrote %u %#llx, a captured write %u\n", got32[0], got64, got32[1]);
	CU_CHECK(cuGraphExecDestroy(cge));
	CU_CHECK(cuGraphDestroy(cg));
	CU_CHECK(cuGraphExecDestroy(ge));
	CU_CHECK(cuGraphDestroy(g));
	CU_CHECK(cuMemFree(x));
	CU_CHECK(cuMemFree(flags));
	CU_CHECK(cuStreamDestroy(a));
	CU_CHECK(cuStreamDestroy(b));
	cu_test_pass("stream_memops");
}
