/* graph_cond: a conditional node (issue 11): a WHILE node whose body kernel advances a counter and
 * sets the condition while the counter is under a limit; the condition starts at 1 at every launch
 * (CU_GRAPH_COND_ASSIGN_DEFAULT). The first launch loops up to the limit, each later one once. A user
 * object moved into the graph has its destroy callback run once the graph is gone. The simulated
 * device has neither kernel node attributes nor user objects: those two parts are left out where the
 * calls answer CUDA_ERROR_NOT_SUPPORTED (the GPU runs them). */
#include <stdatomic.h>
#include <stdbool.h>
#include <time.h>

#include "cuda_test.h"

static atomic_int destroyed;

static void user_object_gone(void *arg)
{
	atomic_fetch_add((atomic_int *)arg, 1);
}

extern const unsigned char graph_cond_fatbin[];

#define LIMIT	 37
#define LAUNCHES 5

int main(void)
{
	CUcontext ctx;
	CUdevice dev;
	CUmodule mod;
	CUfunction step;
	CUstream s;
	CUgraph g, body;
	CUgraphExec x;
	CUgraphNode ncond, nstep;
	CUgraphConditionalHandle h;
	CUdeviceptr counter;
	unsigned limit = LIMIT, got = 0;
	CUgraphNodeParams p = {0};
	CUresult res;

	cu_test_init("graph_cond");
	CU_CHECK(cuDeviceGet(&dev, 0));
	CU_CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
	CU_CHECK(cuCtxSetCurrent(ctx));
	CU_CHECK(cuModuleLoadData(&mod, graph_cond_fatbin));
	CU_CHECK(cuModuleGetFunction(&step, mod, "cond_step"));
	CU_CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	CU_CHECK(cuMemAlloc(&counter, sizeof(unsigned)));
	CU_CHECK(cuMemsetD32(counter, 0, 1));
	CU_CHECK(cuGraphCreate(&g, 0));
	res = cuGraphConditionalHandleCreate(&h, g, ctx, 1, CU_GRAPH_COND_ASSIGN_DEFAULT);
	if (res == CUDA_ERROR_NOT_SUPPORTED) {
		fprintf(stderr, "graph_cond: skipped: no conditional nodes here\n");
		CU_CHECK(cuGraphDestroy(g));
		return CHECK_SKIP;
	}
	CU_CHECK(res);
	p.type = CU_GRAPH_NODE_TYPE_CONDITIONAL;
	p.conditional.handle = h;
	p.conditional.type = CU_GRAPH_COND_TYPE_WHILE;
	p.conditional.size = 1;
	p.conditional.ctx = ctx;
	CU_CHECK(cuGraphAddNode(&ncond, g, NULL, NULL, 0, &p));
	CHECK(p.conditional.phGraph_out != NULL);
	body = p.conditional.phGraph_out[0];
	void *params[] = {&counter, &limit, &h};
	CUDA_KERNEL_NODE_PARAMS kp = {.func = step,
				      .gridDimX = 1,
				      .gridDimY = 1,
				      .gridDimZ = 1,
				      .blockDimX = 32,
				      .blockDimY = 1,
				      .blockDimZ = 1,
				      .kernelParams = params};
	CU_CHECK(cuGraphAddKernelNode(&nstep, body, NULL, 0, &kp));
	/* A kernel node attribute, set and read back: the highest priority the context has. */
	int least, greatest;
	CU_CHECK(cuCtxGetStreamPriorityRange(&least, &greatest));
	CUkernelNodeAttrValue prio = {.priority = greatest}, back = {0};
	res = cuGraphKernelNodeSetAttribute(nstep, CU_KERNEL_NODE_ATTRIBUTE_PRIORITY, &prio);
	if (res != CUDA_ERROR_NOT_SUPPORTED) {
		CU_CHECK(res);
		CU_CHECK(cuGraphKernelNodeGetAttribute(nstep, CU_KERNEL_NODE_ATTRIBUTE_PRIORITY, &back));
		CHECK_EQ_INT(back.priority, greatest);
	}
	/* A user object the graph owns: destroyed with the graph and its executable graph. */
	CUuserObject uo;
	res = cuUserObjectCreate(&uo, &destroyed, user_object_gone, 1, CU_USER_OBJECT_NO_DESTRUCTOR_SYNC);
	bool user_objects = res != CUDA_ERROR_NOT_SUPPORTED;
	if (user_objects) {
		CU_CHECK(res);
		CU_CHECK(cuGraphRetainUserObject(g, uo, 1, CU_GRAPH_USER_OBJECT_MOVE));
	}
	CU_CHECK(cuGraphInstantiateWithFlags(&x, g, 0));
	for (int l = 0; l < LAUNCHES; l++) {
		CU_CHECK(cuGraphLaunch(x, s));
		CU_CHECK(cuStreamSynchronize(s));
		CU_CHECK(cuMemcpyDtoH(&got, counter, sizeof(got)));
		CHECK_EQ_INT((int)got, LIMIT + l);
	}
	printf("graph_cond: counter %u after %d launches\n", got, LAUNCHES);
	CU_CHECK(cuGraphExecDestroy(x));
	CU_CHECK(cuGraphDestroy(g));
	CU_CHECK(cuCtxSynchronize());
	for (int i = 0; user_objects && i < 200 && !atomic_load(&destroyed); i++) {
		struct timespec ts = {0, 10000000L};
		nanosleep(&ts, NULL);
	}
	CHECK_EQ_INT(atomic_load(&destroyed), user_objects);
	CU_CHECK(cuMemFree(counter));
	CU_CHECK(cuStreamDestroy(s));
	CU_CHECK(cuModuleUnload(mod));
	CU_CHECK(cuDevicePrimaryCtxRelease(dev));
	printf("graph_cond: PASS\n");
	return 0;
}
