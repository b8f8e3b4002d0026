/* graph_jacobi: the two ways NVIDIA's jacobiCudaGraphs replays a captured iteration, as a program for
 * checkpoints at any instant (cr-stress --prog). Each iteration is a memset of a device buffer, a kernel
 * that advances x into xnew (or back: the buffers swap every iteration), a kernel that copies the
 * result into the buffer, and a copy of its first words into a variable on the stack (pageable: staged
 * under the layer). (1) One capture, instantiated once; every iteration sets both kernel nodes'
 * parameters on the executable graph (cuGraphExecKernelNodeSetParams). (2) A new capture every
 * iteration, applied to the executable graph with cuGraphExecUpdate, the old graphs kept alive (as the
 * sample does) until the end. Every result is checked against a CPU model; prints a checksum every 100
 * iterations, then PASS. Usage: graph_jacobi [ITERATIONS [PAUSE_US]] (defaults 200, 0). */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cuda_test.h"

extern const unsigned char graph_basic_fatbin[];

#define N     1024
#define BLOCK 128
#define WORDS 4 /* copied back each iteration */

struct state {
	CUfunction mix2;
	CUstream s;
	CUdeviceptr x, xnew, out;
	unsigned mx[N], mxnew[N], mout[N];
	unsigned long long sum;
};

static void mix2_params(CUDA_KERNEL_NODE_PARAMS *p, CUfunction f, CUdeviceptr *dst, CUdeviceptr *src,
			unsigned *mul, int *n, void **args)
{
	args[0] = dst;
	args[1] = src;
	args[2] = mul;
	args[3] = n;
	*p = (CUDA_KERNEL_NODE_PARAMS){.func = f,
				       .gridDimX = N / BLOCK,
				       .gridDimY = 1,
				       .gridDimZ = 1,
				       .blockDimX = BLOCK,
				       .blockDimY = 1,
				       .blockDimZ = 1,
				       .kernelParams = args};
}

/* One iteration's work on the stream (captured by the caller). */
static void queue_iteration(struct state *st, unsigned k, unsigned *host_words)
{
	static unsigned mul = 3, one = 1;
	static int n = N;
	CUdeviceptr *dst = k % 2 ? &st->x : &st->xnew, *src = k % 2 ? &st->xnew : &st->x;
	void *a1[] = {dst, src, &mul, &n}, *a2[] = {&st->out, dst, &one, &n};

	CU_CHECK(cuMemsetD32Async(st->out, 0, N, st->s));
	CU_CHECK(cuLaunchKernel(st->mix2, N / BLOCK, 1, 1, BLOCK, 1, 1, 0, st->s, a1, NULL));
	CU_CHECK(cuLaunchKernel(st->mix2, N / BLOCK, 1, 1, BLOCK, 1, 1, 0, st->s, a2, NULL));
	CU_CHECK(cuMemcpyDtoHAsync(host_words, st->out, WORDS * sizeof(unsigned), st->s));
}

/* The CPU model of iteration k, and the check of what came back. */
static void model_iteration(struct state *st, unsigned k, const unsigned *host_words)
{
	unsigned *dst = k % 2 ? st->mx : st->mxnew, *src = k % 2 ? st->mxnew : st->mx;

	for (unsigned i = 0; i < N; i++) {
		dst[i] = dst[i] * 3u + src[i];
		st->mout[i] = dst[i];
	}
	for (unsigned i = 0; i < WORDS; i++) {
		if (host_words[i] != st->mout[i]) {
			fprintf(stderr, "graph_jacobi: iteration %u: word %u is %#x, want %#x\n", k, i,
				host_words[i], st->mout[i]);
			exit(1);
		}
		st->sum = (st->sum ^ host_words[i]) * 0x100000001b3ull;
	}
}

/* Launches iteration k's executable graph, waits, checks it; a checksum every 100 iterations. */
static void run_iteration(struct state *st, CUgraphExec exec, unsigned k, const unsigned *words,
			  unsigned pause_us)
{
	CU_CHECK(cuGraphLaunch(exec, st->s));
	CU_CHECK(cuStreamSynchronize(st->s));
	model_iteration(st, k, words);
	if (k % 100 == 99)
		printf("graph_jacobi: iteration %u checksum %016llx\n", k + 1, st->sum);
	if (pause_us)
		usleep(pause_us);
}

static void by_node_params(struct state *st, unsigned iterations, unsigned pause_us)
{
	unsigned words[WORDS];
	CUgraph graph;
	CUgraphExec exec;
	CUgraphNode nodes[8], kernels[2];
	size_t count = 8, nk = 0;

	CU_CHECK(cuStreamBeginCapture(st->s, CU_STREAM_CAPTURE_MODE_GLOBAL));
	queue_iteration(st, 0, words);
	CU_CHECK(cuStreamEndCapture(st->s, &graph));
	CU_CHECK(cuGraphGetNodes(graph, nodes, &count));
	for (size_t i = 0; i < count && nk < 2; i++) {
		CUgraphNodeType type;

		CU_CHECK(cuGraphNodeGetType(nodes[i], &type));
		if (type == CU_GRAPH_NODE_TYPE_KERNEL)
			kernels[nk++] = nodes[i];
	}
	CHECK(nk == 2);
	CU_CHECK(cuGraphInstantiateWithFlags(&exec, graph, 0));
	for (unsigned k = 0; k < iterations; k++) {
		static unsigned mul = 3, one = 1;
		static int n = N;
		CUdeviceptr *dst = k % 2 ? &st->x : &st->xnew, *src = k % 2 ? &st->xnew : &st->x;
		CUDA_KERNEL_NODE_PARAMS p;
		void *a1[4], *a2[4];

		mix2_params(&p, st->mix2, dst, src, &mul, &n, a1);
		CU_CHECK(cuGraphExecKernelNodeSetParams(exec, kernels[0], &p));
		mix2_params(&p, st->mix2, &st->out, dst, &one, &n, a2);
		CU_CHECK(cuGraphExecKernelNodeSetParams(exec, kernels[1], &p));
		run_iteration(st, exec, k, words, pause_us);
	}
	CU_CHECK(cuGraphExecDestroy(exec));
	CU_CHECK(cuGraphDestroy(graph));
}

static void by_exec_update(struct state *st, unsigned iterations, unsigned pause_us)
{
	unsigned words[WORDS];
	CUgraphExec exec = NULL;
	CUgraph *kept = calloc(iterations ? iterations : 1, sizeof(*kept));

	CHECK(kept);
	for (unsigned k = 0; k < iterations; k++) {
		CUgraph graph; /* kept alive until the end, as the sample keeps its graphs */
		CUgraphExecUpdateResultInfo info;

		CU_CHECK(cuStreamBeginCapture(st->s, CU_STREAM_CAPTURE_MODE_GLOBAL));
		queue_iteration(st, k, words);
		CU_CHECK(cuStreamEndCapture(st->s, &graph));
		kept[k] = graph;
		if (!exec)
			CU_CHECK(cuGraphInstantiateWithFlags(&exec, graph, 0));
		else
			CU_CHECK(cuGraphExecUpdate(exec, graph, &info));
		run_iteration(st, exec, k, words, pause_us);
	}
	CU_CHECK(cuGraphExecDestroy(exec));
	for (unsigned k = 0; k < iterations; k++)
		CU_CHECK(cuGraphDestroy(kept[k]));
	free(kept);
}

int main(int argc, char **argv)
{
	static struct state st;
	unsigned iterations = argc > 1 ? (unsigned)strtoul(argv[1], NULL, 0) : 200;
	unsigned pause_us = argc > 2 ? (unsigned)strtoul(argv[2], NULL, 0) : 0;
	CUmodule mod;
	CUdevice dev;

	cu_test_init("graph_jacobi");
	cu_test_primary_context(&dev);
	CU_CHECK(cuModuleLoadData(&mod, graph_basic_fatbin));
	CU_CHECK(cuModuleGetFunction(&st.mix2, mod, "graph_mix2"));
	CU_CHECK(cuStreamCreate(&st.s, CU_STREAM_NON_BLOCKING));
	CU_CHECK(cuMemAlloc(&st.x, N * sizeof(unsigned)));
	CU_CHECK(cuMemAlloc(&st.xnew, N * sizeof(unsigned)));
	CU_CHECK(cuMemAlloc(&st.out, N * sizeof(unsigned)));
	for (unsigned i = 0; i < N; i++) {
		st.mx[i] = i * 2654435761u;
		st.mxnew[i] = i ^ 0x9e3779b9u;
	}
	CU_CHECK(cuMemcpyHtoD(st.x, st.mx, sizeof(st.mx)));
	CU_CHECK(cuMemcpyHtoD(st.xnew, st.mxnew, sizeof(st.mxnew)));
	st.sum = 0xcbf29ce484222325ull;
	by_node_params(&st, iterations, pause_us);
	by_exec_update(&st, iterations, pause_us);
	printf("graph_jacobi: checksum %016llx\n", st.sum);
	cu_test_pass("graph_jacobi");
}
