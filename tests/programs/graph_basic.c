/* graph_basic: CUDA graphs and stream capture through the driver API, every result compared with a
 * CPU model.
 * (a) An explicit graph: a memset, a diamond of kernels (two after the memset, a third combining
 *     them, added through CU_LAUNCH_PARAM_BUFFER_POINTER), a child graph (a kernel and a copy), a
 *     host node, a 2D copy into pinned memory and an event record; launched 100 times.
 * (b) cuGraphExecKernelNodeSetParams between queued launches, a disabled node, edits of the graph
 *     after instantiation (not seen by the executable graph), cuGraphExecUpdate from a modified
 *     clone, and an update that must fail (an edge removed).
 * (c) Stream capture over two streams (fork and join through events), capture queries, replays;
 *     a capture invalidated by a synchronisation, and one with a stream that never rejoins.
 * (d) Graph introspection: nodes, types, edges, roots, dependencies, node parameters.
 * The last lines are a checksum of every result (the same on a GPU and on the simulated device)
 * and PASS. */
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>

#include "cuda_test.h"

extern const unsigned char graph_basic_fatbin[];

#define ROWS	     32
#define COLS	     32
#define N	     (ROWS * COLS)
#define BLOCK	     128
#define GRID	     (N / BLOCK)
#define HOST_PITCH   40 /* words per row of the pinned copy: 8 of padding */
#define PAD	     0xdeadbeefu
#define LAUNCHES     100
#define SET_LAUNCHES 20
#define UPD_LAUNCHES 30
#define REPLAYS	     50

static atomic_int host_node_runs;
static atomic_int capture_host_runs;

static void count_run(void *arg)
{
	atomic_fetch_add((atomic_int *)arg, 1);
}

/* The explicit graph's buffers, as the CPU sees them. */
struct model {
	unsigned t[N], p[N], q[N], acc[N], snap[N];
};

static void model_launch(struct model *m, unsigned set_value, unsigned mul, unsigned add, bool k2,
			 unsigned salt)
{
	for (unsigned i = 0; i < N; i++)
		m->t[i] = set_value;
	for (unsigned i = 0; i < N; i++) {
		m->p[i] = m->t[i] * mul + m->acc[i];
		if (k2)
			m->q[i] = m->t[i] * 5u + (m->acc[i] >> 3) + add;
	}
	for (unsigned i = 0; i < N; i++) {
		m->acc[i] = m->acc[i] * 3u + (m->p[i] ^ m->q[i]) + i;
		m->acc[i] = m->acc[i] * 2654435761u + salt;
		m->snap[i] = m->acc[i];
	}
}

static unsigned long long checksum = 0xcbf29ce484222325ull;

static void checksum_add(const unsigned *v, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		for (int b = 0; b < 4; b++) {
			checksum ^= (v[i] >> (8 * b)) & 0xff;
			checksum *= 0x100000001b3ull;
		}
	}
}

static void expect_words(const unsigned *got, const unsigned *want, size_t n, const char *what)
{
	for (size_t i = 0; i < n; i++) {
		if (got[i] != want[i]) {
			fprintf(stderr, "graph_basic: %s: word %zu is %#x, expected %#x\n", what, i, got[i],
				want[i]);
			exit(1);
		}
	}
}

/* The pinned 2D copy holds acc row by row, its padding untouched. */
static void expect_pinned(const unsigned *pinned, const unsigned *acc, const char *what)
{
	for (unsigned r = 0; r < ROWS; r++) {
		expect_words(pinned + r * HOST_PITCH, acc + r * COLS, COLS, what);
		for (unsigned c = COLS; c < HOST_PITCH; c++) {
			if (pinned[r * HOST_PITCH + c] != PAD) {
				fprintf(stderr, "graph_basic: %s: padding word %u of row %u was written\n",
					what, c, r);
				exit(1);
			}
		}
	}
}

static void expect_device(CUdeviceptr d, const unsigned *want, const char *what)
{
	static unsigned host[N];

	CU_CHECK(cuMemcpyDtoH(host, d, sizeof(host)));
	expect_words(host, want, N, what);
}

static CUgraphNode kernel_node(CUgraph g, const CUgraphNode *deps, size_t ndeps, CUfunction f, void **params,
			       void **extra)
{
	CUDA_KERNEL_NODE_PARAMS p;
	CUgraphNode node;

	memset(&p, 0, sizeof(p));
	p.func = f;
	p.gridDimX = GRID;
	p.gridDimY = 1;
	p.gridDimZ = 1;
	p.blockDimX = BLOCK;
	p.blockDimY = 1;
	p.blockDimZ = 1;
	p.kernelParams = params;
	p.extra = extra;
	CU_CHECK(cuGraphAddKernelNode(&node, g, deps, ndeps, &p));
	return node;
}

static void set_k1_mul(CUgraphExec x, CUgraphNode k1, CUfunction f, CUdeviceptr dp, CUdeviceptr dt,
		       CUdeviceptr dacc, unsigned mul, bool on_graph)
{
	int n = N;
	void *params[] = {&dp, &dt, &dacc, &mul, &n};
	CUDA_KERNEL_NODE_PARAMS p;

	memset(&p, 0, sizeof(p));
	p.func = f;
	p.gridDimX = GRID;
	p.gridDimY = 1;
	p.gridDimZ = 1;
	p.blockDimX = BLOCK;
	p.blockDimY = 1;
	p.blockDimZ = 1;
	p.kernelParams = params;
	if (on_graph)
		CU_CHECK(cuGraphKernelNodeSetParams(k1, &p));
	else
		CU_CHECK(cuGraphExecKernelNodeSetParams(x, k1, &p));
}

static void set_k2_add(CUgraphNode k2, CUfunction f, CUdeviceptr dq, CUdeviceptr dt, CUdeviceptr dacc,
		       unsigned add)
{
	int n = N;
	void *params[] = {&dq, &dt, &dacc, &add, &n};
	CUDA_KERNEL_NODE_PARAMS p;

	memset(&p, 0, sizeof(p));
	p.func = f;
	p.gridDimX = GRID;
	p.gridDimY = 1;
	p.gridDimZ = 1;
	p.blockDimX = BLOCK;
	p.blockDimY = 1;
	p.blockDimZ = 1;
	p.kernelParams = params;
	CU_CHECK(cuGraphKernelNodeSetParams(k2, &p));
}

static size_t count_nodes(CUgraph g)
{
	size_t n = 0;

	CU_CHECK(cuGraphGetNodes(g, NULL, &n));
	return n;
}

static size_t count_edges(CUgraph g)
{
	size_t n = 0;

	CU_CHECK(cuGraphGetEdges(g, NULL, NULL, NULL, &n));
	return n;
}

static void launch(CUfunction f, CUstream s, void **params)
{
	CU_CHECK(cuLaunchKernel(f, GRID, 1, 1, BLOCK, 1, 1, 0, s, params, NULL));
}

/* The capture part's CPU model, one replay. */
static void capture_model(unsigned *u, unsigned *v, unsigned *w, unsigned *wsnap)
{
	for (unsigned i = 0; i < N; i++) {
		u[i] = u[i] * 3u + 1u + i;
		v[i] = v[i] * 5u + u[i];
		w[i] = w[i] * 9u + 2u + i;
		w[i] = w[i] * 3u + v[i];
		wsnap[i] = w[i];
	}
}

int main(void)
{
	static struct model m;
	static unsigned u[N], v[N], w[N], wsnap[N];
	CUcontext ctx;
	CUmodule mod;
	CUfunction k1, k2, k3, mix, affine, mix2;
	CUdeviceptr dt, dp, dq, dacc, dsnap, du, dv, dw, dwsnap;
	unsigned *pinned;
	CUstream s, sa, sb;
	CUevent ev, fork_ev, join_ev;
	CUgraph g, child, child_in_node, clone, bad_clone, cg;
	CUgraphNode nm, n1, n2, n3, nchild, nhost, ncopy, nev, ckern, ccopy, deps[2];
	CUgraphExec x, x_bad, cx;
	int n = N;
	unsigned mul = 2, add = 7, salt = 11;

	cu_test_init("graph_basic");
	ctx = cu_test_primary_context(NULL);
	CU_CHECK(cuModuleLoadData(&mod, graph_basic_fatbin));
	CU_CHECK(cuModuleGetFunction(&k1, mod, "graph_k1"));
	CU_CHECK(cuModuleGetFunction(&k2, mod, "graph_k2"));
	CU_CHECK(cuModuleGetFunction(&k3, mod, "graph_k3"));
	CU_CHECK(cuModuleGetFunction(&mix, mod, "graph_mix"));
	CU_CHECK(cuModuleGetFunction(&affine, mod, "graph_affine"));
	CU_CHECK(cuModuleGetFunction(&mix2, mod, "graph_mix2"));
	CU_CHECK(cuMemAlloc(&dt, N * sizeof(unsigned)));
	CU_CHECK(cuMemAlloc(&dp, N * sizeof(unsigned)));
	CU_CHECK(cuMemAlloc(&dq, N * sizeof(unsigned)));
	CU_CHECK(cuMemAlloc(&dacc, N * sizeof(unsigned)));
	CU_CHECK(cuMemAlloc(&dsnap, N * sizeof(unsigned)));
	CU_CHECK(cuMemsetD32(dt, 0, N));
	CU_CHECK(cuMemsetD32(dp, 0, N));
	CU_CHECK(cuMemsetD32(dq, 0, N));
	CU_CHECK(cuMemsetD32(dacc, 0, N));
	CU_CHECK(cuMemsetD32(dsnap, 0, N));
	CU_CHECK(cuMemAllocHost((void **)&pinned, ROWS * HOST_PITCH * sizeof(unsigned)));
	for (unsigned i = 0; i < ROWS * HOST_PITCH; i++)
		pinned[i] = PAD;
	CU_CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	CU_CHECK(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));

	/* ---- (a) the explicit graph ---- */
	CU_CHECK(cuGraphCreate(&g, 0));
	CUDA_MEMSET_NODE_PARAMS set = {
	    .dst = dt, .pitch = 0, .value = 3, .elementSize = 4, .width = N, .height = 1};
	CU_CHECK(cuGraphAddMemsetNode(&nm, g, NULL, 0, &set, ctx));
	void *k1_params[] = {&dp, &dt, &dacc, &mul, &n};
	void *k2_params[] = {&dq, &dt, &dacc, &add, &n};
	n1 = kernel_node(g, &nm, 1, k1, k1_params, NULL);
	n2 = kernel_node(g, &nm, 1, k2, k2_params, NULL);
	struct {
		CUdeviceptr acc, p, q;
	} k3_args = {dacc, dp, dq};
	size_t k3_size = sizeof(k3_args);
	void *k3_extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &k3_args, CU_LAUNCH_PARAM_BUFFER_SIZE, &k3_size,
			    CU_LAUNCH_PARAM_END};
	deps[0] = n1;
	deps[1] = n2;
	n3 = kernel_node(g, deps, 2, k3, NULL, k3_extra);
	/* The parameters were copied: changing the variables now changes nothing. */
	mul = 1000;
	add = 1000;

	/* The child graph: mix, then a copy acc -> snap. It is cloned into the node. */
	CU_CHECK(cuGraphCreate(&child, 0));
	void *mix_params[] = {&dacc, &salt, &n};
	ckern = kernel_node(child, NULL, 0, mix, mix_params, NULL);
	CUDA_MEMCPY3D copy;
	memset(&copy, 0, sizeof(copy));
	copy.srcMemoryType = CU_MEMORYTYPE_DEVICE;
	copy.srcDevice = dacc;
	copy.srcPitch = N * sizeof(unsigned);
	copy.dstMemoryType = CU_MEMORYTYPE_DEVICE;
	copy.dstDevice = dsnap;
	copy.dstPitch = N * sizeof(unsigned);
	copy.WidthInBytes = N * sizeof(unsigned);
	copy.Height = 1;
	copy.Depth = 1;
	CU_CHECK(cuGraphAddMemcpyNode(&ccopy, child, &ckern, 1, &copy, ctx));
	CU_CHECK(cuGraphAddChildGraphNode(&nchild, g, &n3, 1, child));
	CU_CHECK(cuGraphDestroy(child));

	/* A host node through cuGraphAddNode, the 2D copy into pinned memory, the event record. */
	CUgraphNodeParams hp;
	memset(&hp, 0, sizeof(hp));
	hp.type = CU_GRAPH_NODE_TYPE_HOST;
	hp.host.fn = count_run;
	hp.host.userData = &host_node_runs;
	CU_CHECK(cuGraphAddNode(&nhost, g, &nchild, NULL, 1, &hp));
	memset(&copy, 0, sizeof(copy));
	copy.srcMemoryType = CU_MEMORYTYPE_DEVICE;
	copy.srcDevice = dacc;
	copy.srcPitch = COLS * sizeof(unsigned);
	copy.dstMemoryType = CU_MEMORYTYPE_HOST;
	copy.dstHost = pinned;
	copy.dstPitch = HOST_PITCH * sizeof(unsigned);
	copy.WidthInBytes = COLS * sizeof(unsigned);
	copy.Height = ROWS;
	copy.Depth = 1;
	CU_CHECK(cuGraphAddMemcpyNode(&ncopy, g, &nchild, 1, &copy, ctx));
	deps[0] = ncopy;
	deps[1] = nhost;
	CU_CHECK(cuGraphAddEventRecordNode(&nev, g, deps, 2, ev));

	/* ---- (d) introspection ---- */
	{
		CUgraphNode nodes[16], from[16], to[16], roots[4];
		CUgraphNodeType type;
		size_t count = 16;
		const CUgraphNodeType want[] = {CU_GRAPH_NODE_TYPE_MEMSET, CU_GRAPH_NODE_TYPE_KERNEL,
						CU_GRAPH_NODE_TYPE_KERNEL, CU_GRAPH_NODE_TYPE_KERNEL,
						CU_GRAPH_NODE_TYPE_GRAPH,  CU_GRAPH_NODE_TYPE_HOST,
						CU_GRAPH_NODE_TYPE_MEMCPY, CU_GRAPH_NODE_TYPE_EVENT_RECORD};
		const CUgraphNode mine[] = {nm, n1, n2, n3, nchild, nhost, ncopy, nev};
		unsigned seen = 0;

		CHECK_EQ_INT(count_nodes(g), 8);
		CU_CHECK(cuGraphGetNodes(g, nodes, &count));
		CHECK_EQ_INT(count, 8);
		for (size_t i = 0; i < count; i++) {
			for (unsigned j = 0; j < 8; j++) {
				if (nodes[i] == mine[j]) {
					seen |= 1u << j;
					CU_CHECK(cuGraphNodeGetType(nodes[i], &type));
					CHECK_EQ_INT(type, want[j]);
				}
			}
		}
		CHECK_EQ_INT(seen, 0xff);
		CHECK_EQ_INT(count_edges(g), 9);
		count = 16;
		CU_CHECK(cuGraphGetEdges(g, from, to, NULL, &count));
		CHECK_EQ_INT(count, 9);
		count = 4;
		CU_CHECK(cuGraphGetRootNodes(g, roots, &count));
		CHECK_EQ_INT(count, 1);
		CHECK(roots[0] == nm);
		count = 0;
		CU_CHECK(cuGraphNodeGetDependencies(n3, NULL, NULL, &count));
		CHECK_EQ_INT(count, 2);
		count = 0;
		CU_CHECK(cuGraphNodeGetDependentNodes(nm, NULL, NULL, &count));
		CHECK_EQ_INT(count, 2);
		count = 4;
		CU_CHECK(cuGraphNodeGetDependentNodes(nchild, roots, NULL, &count));
		CHECK_EQ_INT(count, 2);
		CHECK((roots[0] == nhost && roots[1] == ncopy) || (roots[0] == ncopy && roots[1] == nhost));

		CUDA_KERNEL_NODE_PARAMS kp;
		memset(&kp, 0, sizeof(kp));
		CU_CHECK(cuGraphKernelNodeGetParams(n1, &kp));
		CHECK(kp.func == k1);
		CHECK_EQ_INT(kp.gridDimX, GRID);
		CHECK_EQ_INT(kp.gridDimY, 1);
		CHECK_EQ_INT(kp.gridDimZ, 1);
		CHECK_EQ_INT(kp.blockDimX, BLOCK);
		CHECK_EQ_INT(kp.blockDimY, 1);
		CHECK_EQ_INT(kp.blockDimZ, 1);
		CHECK_EQ_INT(kp.sharedMemBytes, 0);
		CHECK(kp.kernelParams != NULL);
		CHECK(*(CUdeviceptr *)kp.kernelParams[0] == dp);
		CHECK(*(CUdeviceptr *)kp.kernelParams[1] == dt);
		CHECK(*(CUdeviceptr *)kp.kernelParams[2] == dacc);
		CHECK_EQ_INT(*(unsigned *)kp.kernelParams[3], 2);
		CHECK_EQ_INT(*(int *)kp.kernelParams[4], N);

		CUDA_MEMSET_NODE_PARAMS sp;
		CU_CHECK(cuGraphMemsetNodeGetParams(nm, &sp));
		CHECK(sp.dst == dt && sp.value == 3 && sp.elementSize == 4 && sp.width == N &&
		      sp.height == 1);
		CUDA_MEMCPY3D cp;
		CU_CHECK(cuGraphMemcpyNodeGetParams(ncopy, &cp));
		CHECK(cp.WidthInBytes == COLS * sizeof(unsigned) && cp.Height == ROWS &&
		      cp.dstHost == pinned);
		CUDA_HOST_NODE_PARAMS hq;
		CU_CHECK(cuGraphHostNodeGetParams(nhost, &hq));
		CHECK(hq.fn == count_run && hq.userData == &host_node_runs);
		CUevent got_ev;
		CU_CHECK(cuGraphEventRecordNodeGetEvent(nev, &got_ev));
		CHECK(got_ev == ev);
		CU_CHECK(cuGraphChildGraphNodeGetGraph(nchild, &child_in_node));
		CHECK_EQ_INT(count_nodes(child_in_node), 2);
		CHECK_EQ_INT(count_edges(child_in_node), 1);
	}

	/* ---- (a) instantiate and launch 100 times, nothing waited for in between ---- */
	CU_CHECK(cuGraphInstantiate(&x, g, 0));
	CU_CHECK(cuGraphUpload(x, s));
	for (int i = 0; i < LAUNCHES; i++) {
		CU_CHECK(cuGraphLaunch(x, s));
		model_launch(&m, 3, 2, 7, true, 11);
	}
	CU_CHECK(cuStreamSynchronize(s));
	CU_CHECK(cuEventQuery(ev));
	CHECK_EQ_INT(atomic_load(&host_node_runs), LAUNCHES);
	expect_pinned(pinned, m.acc, "pinned copy after 100 launches");
	expect_device(dsnap, m.snap, "child graph copy after 100 launches");
	expect_device(dacc, m.acc, "accumulator after 100 launches");
	checksum_add(m.acc, N);

	/* ---- (b) changes between launches ---- */
	/* Edits of the graph do not reach the executable graph instantiated from it. */
	set_k2_add(n2, k2, dq, dt, dacc, 1000);
	set_k1_mul(x, n1, k1, dp, dt, dacc, 77, true);
	for (unsigned j = 0; j < SET_LAUNCHES; j++) {
		set_k1_mul(x, n1, k1, dp, dt, dacc, j + 3, false);
		CU_CHECK(cuGraphLaunch(x, s));
		model_launch(&m, 3, j + 3, 7, true, 11);
	}
	unsigned enabled = 2;
	CU_CHECK(cuGraphNodeSetEnabled(x, n2, 0));
	CU_CHECK(cuGraphNodeGetEnabled(x, n2, &enabled));
	CHECK_EQ_INT(enabled, 0);
	CU_CHECK(cuGraphLaunch(x, s));
	model_launch(&m, 3, SET_LAUNCHES + 2, 7, false, 11);
	CU_CHECK(cuGraphNodeSetEnabled(x, n2, 1));
	CU_CHECK(cuGraphLaunch(x, s));
	model_launch(&m, 3, SET_LAUNCHES + 2, 7, true, 11);
	CU_CHECK(cuStreamSynchronize(s));
	expect_pinned(pinned, m.acc, "pinned copy after the parameter changes");
	expect_device(dq, m.q, "k2 output after a disabled launch");
	CHECK_EQ_INT(atomic_load(&host_node_runs), LAUNCHES + SET_LAUNCHES + 2);
	checksum_add(m.acc, N);

	/* cuGraphExecUpdate from a clone: k1 multiplies by 4, the memset writes 5, k2 adds 1000 (set
	 * on the graph above, so in the clone too). */
	CU_CHECK(cuGraphClone(&clone, g));
	CHECK_EQ_INT(count_nodes(clone), 8);
	CHECK_EQ_INT(count_edges(clone), 9);
	CUgraphNode c1, cm;
	CU_CHECK(cuGraphNodeFindInClone(&c1, n1, clone));
	CU_CHECK(cuGraphNodeFindInClone(&cm, nm, clone));
	CHECK(c1 != n1 && cm != nm);
	set_k1_mul(x, c1, k1, dp, dt, dacc, 4, true);
	set.value = 5;
	CU_CHECK(cuGraphMemsetNodeSetParams(cm, &set));
	CUgraphExecUpdateResultInfo info;
	memset(&info, 0xff, sizeof(info));
	CU_CHECK(cuGraphExecUpdate(x, clone, &info));
	CHECK_EQ_INT(info.result, CU_GRAPH_EXEC_UPDATE_SUCCESS);
	for (int i = 0; i < UPD_LAUNCHES; i++) {
		CU_CHECK(cuGraphLaunch(x, s));
		model_launch(&m, 5, 4, 1000, true, 11);
	}
	CU_CHECK(cuStreamSynchronize(s));
	expect_pinned(pinned, m.acc, "pinned copy after cuGraphExecUpdate");
	expect_device(dsnap, m.snap, "child graph copy after cuGraphExecUpdate");
	checksum_add(m.acc, N);

	/* A different topology cannot update an executable graph. */
	CU_CHECK(cuGraphClone(&bad_clone, g));
	CUgraphNode b1, b3;
	CU_CHECK(cuGraphNodeFindInClone(&b1, n1, bad_clone));
	CU_CHECK(cuGraphNodeFindInClone(&b3, n3, bad_clone));
	CU_CHECK(cuGraphRemoveDependencies(bad_clone, &b1, &b3, NULL, 1));
	CHECK_EQ_INT(count_edges(bad_clone), 8);
	CU_CHECK(cuGraphInstantiate(&x_bad, g, 0));
	memset(&info, 0, sizeof(info));
	CU_EXPECT(cuGraphExecUpdate(x_bad, bad_clone, &info), CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE);
	CHECK(info.result != CU_GRAPH_EXEC_UPDATE_SUCCESS);
	CU_CHECK(cuGraphExecDestroy(x_bad));
	CU_CHECK(cuGraphDestroy(bad_clone));
	CU_CHECK(cuGraphDestroy(clone));

	/* ---- (c) stream capture over two streams ---- */
	CU_CHECK(cuMemAlloc(&du, N * sizeof(unsigned)));
	CU_CHECK(cuMemAlloc(&dv, N * sizeof(unsigned)));
	CU_CHECK(cuMemAlloc(&dw, N * sizeof(unsigned)));
	CU_CHECK(cuMemAlloc(&dwsnap, N * sizeof(unsigned)));
	for (unsigned i = 0; i < N; i++) {
		u[i] = i * 7u + 1u;
		v[i] = i ^ 0x5a5au;
		w[i] = 3u * i;
		wsnap[i] = 0;
	}
	CU_CHECK(cuMemcpyHtoD(du, u, sizeof(u)));
	CU_CHECK(cuMemcpyHtoD(dv, v, sizeof(v)));
	CU_CHECK(cuMemcpyHtoD(dw, w, sizeof(w)));
	CU_CHECK(cuMemcpyHtoD(dwsnap, wsnap, sizeof(wsnap)));
	CU_CHECK(cuStreamCreate(&sa, CU_STREAM_NON_BLOCKING));
	CU_CHECK(cuStreamCreate(&sb, CU_STREAM_NON_BLOCKING));
	CU_CHECK(cuEventCreate(&fork_ev, CU_EVENT_DISABLE_TIMING));
	CU_CHECK(cuEventCreate(&join_ev, CU_EVENT_DISABLE_TIMING));

	CUstreamCaptureStatus status;
	cuuint64_t id_a = 0, id_b = 0;
	CUgraph graph_a = NULL, graph_b = NULL;
	const CUgraphNode *cap_deps = NULL;
	const CUgraphEdgeData *cap_edges = NULL;
	size_t ndeps = 0;
	unsigned three = 3, one = 1, five = 5, nine = 9, two = 2;
	void *affine_u[] = {&du, &three, &one, &n};
	void *mix2_v[] = {&dv, &du, &five, &n};
	void *affine_w[] = {&dw, &nine, &two, &n};
	void *mix2_w[] = {&dw, &dv, &three, &n};

	CU_CHECK(cuStreamIsCapturing(sa, &status));
	CHECK_EQ_INT(status, CU_STREAM_CAPTURE_STATUS_NONE);
	CU_CHECK(cuStreamBeginCapture(sa, CU_STREAM_CAPTURE_MODE_GLOBAL));
	CU_CHECK(cuStreamIsCapturing(sa, &status));
	CHECK_EQ_INT(status, CU_STREAM_CAPTURE_STATUS_ACTIVE);
	CU_CHECK(cuStreamIsCapturing(sb, &status));
	CHECK_EQ_INT(status, CU_STREAM_CAPTURE_STATUS_NONE);
	launch(affine, sa, affine_u);
	CU_CHECK(cuEventRecord(fork_ev, sa));
	CU_CHECK(cuStreamWaitEvent(sb, fork_ev, 0)); /* sb joins the capture */
	CU_CHECK(cuStreamIsCapturing(sb, &status));
	CHECK_EQ_INT(status, CU_STREAM_CAPTURE_STATUS_ACTIVE);
	CU_CHECK(cuStreamGetCaptureInfo(sb, &status, &id_b, &graph_b, &cap_deps, &cap_edges, &ndeps));
	CHECK_EQ_INT(status, CU_STREAM_CAPTURE_STATUS_ACTIVE);
	CHECK(id_b != 0 && graph_b != NULL);
	CHECK_EQ_INT(ndeps, 1);
	CHECK(cap_deps != NULL && cap_deps[0] != NULL);
	launch(mix2, sb, mix2_v);
	launch(affine, sa, affine_w);
	CU_CHECK(cuEventRecord(join_ev, sb));
	CU_CHECK(cuStreamWaitEvent(sa, join_ev, 0)); /* sb's work rejoins sa */
	CU_CHECK(cuStreamGetCaptureInfo(sa, &status, &id_a, &graph_a, &cap_deps, NULL, &ndeps));
	CHECK_EQ_INT(status, CU_STREAM_CAPTURE_STATUS_ACTIVE);
	CHECK(id_a == id_b && graph_a == graph_b);
	CHECK_EQ_INT(ndeps, 2);
	launch(mix2, sa, mix2_w);
	CU_CHECK(cuMemcpyDtoDAsync(dwsnap, dw, N * sizeof(unsigned), sa));
	CU_CHECK(cuLaunchHostFunc(sa, count_run, &capture_host_runs));
	CU_CHECK(cuStreamEndCapture(sa, &cg));
	CHECK(cg != NULL);
	CU_CHECK(cuStreamIsCapturing(sa, &status));
	CHECK_EQ_INT(status, CU_STREAM_CAPTURE_STATUS_NONE);
	CU_CHECK(cuStreamIsCapturing(sb, &status));
	CHECK_EQ_INT(status, CU_STREAM_CAPTURE_STATUS_NONE);
	CHECK_EQ_INT(count_nodes(cg), 6);
	CHECK_EQ_INT(count_edges(cg), 6);

	/* Nothing ran during the capture. */
	CHECK_EQ_INT(atomic_load(&capture_host_runs), 0);
	expect_device(du, u, "u before the first replay");
	expect_device(dv, v, "v before the first replay");
	expect_device(dw, w, "w before the first replay");
	expect_device(dwsnap, wsnap, "w's copy before the first replay");

	CU_CHECK(cuGraphInstantiate(&cx, cg, 0));
	for (int i = 0; i < REPLAYS; i++) {
		CU_CHECK(cuGraphLaunch(cx, i % 2 ? sa : sb));
		CU_CHECK(cuEventRecord(fork_ev, i % 2 ? sa : sb));
		CU_CHECK(cuStreamWaitEvent(i % 2 ? sb : sa, fork_ev, 0));
		capture_model(u, v, w, wsnap);
	}
	CU_CHECK(cuStreamSynchronize(sa));
	CU_CHECK(cuStreamSynchronize(sb));
	CHECK_EQ_INT(atomic_load(&capture_host_runs), REPLAYS);
	expect_device(du, u, "u after the replays");
	expect_device(dv, v, "v after the replays");
	expect_device(dw, w, "w after the replays");
	expect_device(dwsnap, wsnap, "w's copy after the replays");
	checksum_add(u, N);
	checksum_add(v, N);
	checksum_add(w, N);
	checksum_add(wsnap, N);

	/* Waiting for a capturing stream invalidates the capture. */
	CUgraph none = g; /* must come back NULL */
	CU_CHECK(cuStreamBeginCapture(sa, CU_STREAM_CAPTURE_MODE_GLOBAL));
	launch(affine, sa, affine_u);
	CU_EXPECT(cuStreamSynchronize(sa), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
	CU_CHECK(cuStreamIsCapturing(sa, &status));
	CHECK_EQ_INT(status, CU_STREAM_CAPTURE_STATUS_INVALIDATED);
	CU_EXPECT(cuStreamEndCapture(sa, &none), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
	CHECK(none == NULL);
	CU_CHECK(cuStreamIsCapturing(sa, &status));
	CHECK_EQ_INT(status, CU_STREAM_CAPTURE_STATUS_NONE);

	/* A forked stream that never rejoins. */
	none = g;
	CU_CHECK(cuStreamBeginCapture(sa, CU_STREAM_CAPTURE_MODE_GLOBAL));
	CU_CHECK(cuEventRecord(fork_ev, sa));
	CU_CHECK(cuStreamWaitEvent(sb, fork_ev, 0));
	launch(affine, sb, affine_u);
	CU_EXPECT(cuStreamEndCapture(sa, &none), CUDA_ERROR_STREAM_CAPTURE_UNJOINED);
	CHECK(none == NULL);
	CU_CHECK(cuStreamSynchronize(s));
	expect_device(du, u, "u after the failed captures");

	printf("graph_basic: checksum %016llx\n", checksum);
	CU_CHECK(cuGraphExecDestroy(cx));
	CU_CHECK(cuGraphDestroy(cg));
	CU_CHECK(cuGraphExecDestroy(x));
	CU_CHECK(cuGraphDestroy(g));
	CU_CHECK(cuEventDestroy(ev));
	CU_CHECK(cuEventDestroy(fork_ev));
	CU_CHECK(cuEventDestroy(join_ev));
	CU_CHECK(cuStreamDestroy(s));
	CU_CHECK(cuStreamDestroy(sa));
	CU_CHECK(cuStreamDestroy(sb));
	CU_CHECK(cuMemFreeHost(pinned));
	CU_CHECK(cuMemFree(dt));
	CU_CHECK(cuMemFree(dp));
	CU_CHECK(cuMemFree(dq));
	CU_CHECK(cuMemFree(dacc));
	CU_CHECK(cuMemFree(dsnap));
	CU_CHECK(cuMemFree(du));
	CU_CHECK(cuMemFree(dv));
	CU_CHECK(cuMemFree(dw));
	CU_CHECK(cuMemFree(dwsnap));
	CU_CHECK(cuModuleUnload(mod));
	CU_CHECK(cuDevicePrimaryCtxRelease(0));
	cu_test_pass("graph_basic");
}
