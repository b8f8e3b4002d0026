/* graph_mem: graph-owned memory (issue 11). A graph allocates a scratch buffer (mem alloc node), zeroes
 * it, fills it from a persistent buffer (graph_affine, then graph_mix2: scratch * mix + persist), copies the
 * result to page-locked memory and frees the scratch (mem free node); launched 50 times, each launch checked
 * against a CPU model. Also the graph memory attributes (in use after a launch, none after the graph is gone
 * and trimmed) and cuGraphMemAllocNodeGetParams. Then the same work captured from a stream, its scratch from
 * cuMemAllocAsync / cuMemFreeAsync on the capturing stream (as cuBLAS takes its workspace), replayed.
 * The simulated device has no graph memory: it skips (77) there. */
#include <string.h>

#include "cuda_test.h"

extern const unsigned char graph_basic_fatbin[];

#define N	 4096
#define BLOCK	 128
#define LAUNCHES 50

static void model_affine(unsigned *x, unsigned mul, unsigned add)
{
	for (unsigned i = 0; i < N; i++)
		x[i] = x[i] * mul + add + i;
}

int main(void)
{
	CUcontext ctx;
	CUdevice dev;
	CUmodule mod;
	CUfunction affine, mix2;
	CUstream s;
	CUgraph g;
	CUgraphExec x;
	CUgraphNode nalloc, naff, nset, nmix, ncopy, nfree, deps[2];
	CUdeviceptr persist;
	unsigned *pinned, model[N], want[N];
	int n = N;
	unsigned mul = 3, add = 7, mix = 2654435761u;
	cuuint64_t used = 0;
	CUresult res;

	cu_test_init("graph_mem");
	CU_CHECK(cuDeviceGet(&dev, 0));
	CU_CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
	CU_CHECK(cuCtxSetCurrent(ctx));
	CU_CHECK(cuModuleLoadData(&mod, graph_basic_fatbin));
	CU_CHECK(cuModuleGetFunction(&affine, mod, "graph_affine"));
	CU_CHECK(cuModuleGetFunction(&mix2, mod, "graph_mix2"));
	CU_CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	CU_CHECK(cuMemAlloc(&persist, N * sizeof(unsigned)));
	CU_CHECK(cuMemsetD32(persist, 1, N));
	CU_CHECK(cuMemAllocHost((void **)&pinned, N * sizeof(unsigned)));
	for (unsigned i = 0; i < N; i++)
		model[i] = 1;

	CU_CHECK(cuGraphCreate(&g, 0));
	CUDA_MEM_ALLOC_NODE_PARAMS ap = {0};
	CUmemAccessDesc acc = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0},
			       .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
	ap.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
	ap.poolProps.location = acc.location;
	ap.accessDescs = &acc;
	ap.accessDescCount = 1;
	ap.bytesize = N * sizeof(unsigned);
	res = cuGraphAddMemAllocNode(&nalloc, g, NULL, 0, &ap);
	if (res == CUDA_ERROR_NOT_SUPPORTED) {
		fprintf(stderr, "graph_mem: skipped: no graph memory nodes here\n");
		CU_CHECK(cuGraphDestroy(g));
		return CHECK_SKIP;
	}
	CU_CHECK(res);
	CHECK(ap.dptr != 0);
	CUdeviceptr scratch = ap.dptr;

	/* persist = persist * mul + add + i; scratch = 0 * mix + persist; pinned = scratch. */
	void *pa[] = {&persist, &mul, &add, &n};
	CUDA_KERNEL_NODE_PARAMS kp = {.func = affine,
				      .gridDimX = N / BLOCK,
				      .gridDimY = 1,
				      .gridDimZ = 1,
				      .blockDimX = BLOCK,
				      .blockDimY = 1,
				      .blockDimZ = 1,
				      .kernelParams = pa};
	CU_CHECK(cuGraphAddKernelNode(&naff, g, &nalloc, 1, &kp));
	CUDA_MEMSET_NODE_PARAMS ms = {.dst = scratch, .value = 0, .elementSize = 4, .width = N, .height = 1};
	CU_CHECK(cuGraphAddMemsetNode(&nset, g, &nalloc, 1, &ms, ctx));
	void *pm[] = {&scratch, &persist, &mix, &n};
	kp.func = mix2;
	kp.kernelParams = pm;
	deps[0] = naff;
	deps[1] = nset;
	CU_CHECK(cuGraphAddKernelNode(&nmix, g, deps, 2, &kp));
	CUDA_MEMCPY3D cp = {0};
	cp.srcMemoryType = CU_MEMORYTYPE_DEVICE;
	cp.srcDevice = scratch;
	cp.dstMemoryType = CU_MEMORYTYPE_HOST;
	cp.dstHost = pinned;
	cp.WidthInBytes = N * sizeof(unsigned);
	cp.Height = 1;
	cp.Depth = 1;
	CU_CHECK(cuGraphAddMemcpyNode(&ncopy, g, &nmix, 1, &cp, ctx));
	CU_CHECK(cuGraphAddMemFreeNode(&nfree, g, &ncopy, 1, scratch));

	CUDA_MEM_ALLOC_NODE_PARAMS back;
	CU_CHECK(cuGraphMemAllocNodeGetParams(nalloc, &back));
	CHECK(back.dptr == scratch && back.bytesize == ap.bytesize && back.accessDescCount == 1 &&
	      back.accessDescs[0].location.id == 0 && back.poolProps.location.id == 0);

	CU_CHECK(cuGraphInstantiateWithFlags(&x, g, 0));
	for (int l = 0; l < LAUNCHES; l++) {
		CU_CHECK(cuGraphLaunch(x, s));
		CU_CHECK(cuStreamSynchronize(s));
		model_affine(model, mul, add);
		for (unsigned i = 0; i < N; i++)
			want[i] = model[i];
		if (memcmp(pinned, want, sizeof(want))) {
			fprintf(stderr, "graph_mem: launch %d: wrong result\n", l);
			return 1;
		}
		if (l == 0) {
			CU_CHECK(
			    cuDeviceGetGraphMemAttribute(dev, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, &used));
			CHECK(used >= N * sizeof(unsigned));
		}
	}
	unsigned long long sum = 0;
	for (unsigned i = 0; i < N; i++)
		sum = sum * 31 + pinned[i];
	CU_CHECK(cuGraphExecDestroy(x));
	CU_CHECK(cuGraphDestroy(g));

	/* Captured: stream-ordered scratch on the capturing stream becomes graph memory. */
	CUgraph cg;
	CUdeviceptr cscratch = 0;

	CU_CHECK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
	CU_CHECK(cuMemAllocAsync(&cscratch, N * sizeof(unsigned), s));
	CU_CHECK(cuMemsetD32Async(cscratch, 0, N, s));
	CU_CHECK(cuLaunchKernel(affine, N / BLOCK, 1, 1, BLOCK, 1, 1, 0, s, pa, NULL));
	void *pc[] = {&cscratch, &persist, &mix, &n};
	CU_CHECK(cuLaunchKernel(mix2, N / BLOCK, 1, 1, BLOCK, 1, 1, 0, s, pc, NULL));
	CU_CHECK(cuMemcpyDtoHAsync(pinned, cscratch, N * sizeof(unsigned), s));
	CU_CHECK(cuMemFreeAsync(cscratch, s));
	CU_CHECK(cuStreamEndCapture(s, &cg));
	CU_CHECK(cuGraphInstantiateWithFlags(&x, cg, 0));
	for (int l = 0; l < LAUNCHES; l++) {
		CU_CHECK(cuGraphLaunch(x, s));
		CU_CHECK(cuStreamSynchronize(s));
		model_affine(model, mul, add);
		if (memcmp(pinned, model, sizeof(model))) {
			fprintf(stderr, "graph_mem: captured launch %d: wrong result\n", l);
			return 1;
		}
	}
	for (unsigned i = 0; i < N; i++)
		sum = sum * 31 + pinned[i];
	CU_CHECK(cuGraphExecDestroy(x));
	CU_CHECK(cuGraphDestroy(cg));
	CU_CHECK(cuCtxSynchronize());
	CU_CHECK(cuDeviceGraphMemTrim(dev));
	CU_CHECK(cuDeviceGetGraphMemAttribute(dev, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, &used));
	CHECK(used == 0);
	used = 0;
	CU_CHECK(cuDeviceSetGraphMemAttribute(dev, CU_GRAPH_MEM_ATTR_USED_MEM_HIGH, &used));
	printf("graph_mem: checksum %016llx\n", sum);
	CU_CHECK(cuMemFreeHost(pinned));
	CU_CHECK(cuMemFree(persist));
	CU_CHECK(cuStreamDestroy(s));
	CU_CHECK(cuModuleUnload(mod));
	CU_CHECK(cuDevicePrimaryCtxRelease(dev));
	printf("graph_mem: PASS\n");
	return 0;
}
