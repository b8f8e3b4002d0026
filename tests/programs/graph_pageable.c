/* graph_pageable: CUDA graph copies whose host side is ordinary pageable memory (malloc'd and on the
 * stack), as NVIDIA's simpleCudaGraphs and jacobiCudaGraphs build them. Every result is compared with a
 * CPU model.
 * (a) An explicit graph: a 2D copy from a pitched pageable buffer (with x/y offsets) to the device, a
 *     kernel, a 2D copy back into another pitched pageable buffer whose padding must stay untouched,
 *     and a pageable-to-pageable copy; launched LAUNCHES times, the input rewritten between launches.
 *     A 1D copy of the first row into a pageable buffer is moved to a buffer on the stack in the
 *     executable graph (the driver refuses that for 2D copies: so must the layer); the 2D input copy
 *     is moved to another buffer in the graph. The copy nodes report their type and parameters.
 * (b) Stream capture of cuMemcpyHtoDAsync / cuMemcpyDtoHAsync with pageable memory around a kernel,
 *     replayed REPLAYS times, the input changed between replays.
 * The last lines are a checksum of every result and PASS. */
#include <stdlib.h>
#include <string.h>

#include "cuda_test.h"

extern const unsigned char graph_basic_fatbin[];

#define ROWS	 16
#define COLS	 64
#define N	 (ROWS * COLS)
#define BLOCK	 128
#define GRID	 (N / BLOCK)
#define PITCH	 80 /* words per row of the pageable host buffers: 16 of padding */
#define XOFF	 4  /* words of the input row skipped by the copy */
#define YOFF	 2  /* rows of the input buffer skipped by the copy */
#define PAD	 0x5a5a5a5au
#define LAUNCHES 40
#define REPLAYS	 30

static unsigned long long checksum = 0xcbf29ce484222325ull;

static void checksum_add(const unsigned *v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		for (int b = 0; b < 4; b++) {
			checksum ^= (v[i] >> (8 * b)) & 0xff;
			checksum *= 0x100000001b3ull;
		}
}

static void fail(const char *what, size_t i, unsigned got, unsigned want)
{
	fprintf(stderr, "graph_pageable: %s[%zu] = %#x, want %#x\n", what, i, got, want);
	exit(1);
}

/* graph_affine: x[i] = x[i] * mul + add + i. */
static unsigned affine(unsigned x, unsigned mul, unsigned add, unsigned i)
{
	return x * mul + add + i;
}

static CUDA_MEMCPY3D copy_2d_in(const unsigned *host, CUdeviceptr dev)
{
	return (CUDA_MEMCPY3D){.srcXInBytes = XOFF * sizeof(unsigned),
			       .srcY = YOFF,
			       .srcMemoryType = CU_MEMORYTYPE_HOST,
			       .srcHost = host,
			       .srcPitch = PITCH * sizeof(unsigned),
			       .dstMemoryType = CU_MEMORYTYPE_DEVICE,
			       .dstDevice = dev,
			       .dstPitch = COLS * sizeof(unsigned),
			       .WidthInBytes = COLS * sizeof(unsigned),
			       .Height = ROWS,
			       .Depth = 1};
}

static CUDA_MEMCPY3D copy_2d_out(CUdeviceptr dev, unsigned *host)
{
	return (CUDA_MEMCPY3D){.srcMemoryType = CU_MEMORYTYPE_DEVICE,
			       .srcDevice = dev,
			       .srcPitch = COLS * sizeof(unsigned),
			       .dstMemoryType = CU_MEMORYTYPE_HOST,
			       .dstHost = host,
			       .dstPitch = PITCH * sizeof(unsigned),
			       .WidthInBytes = COLS * sizeof(unsigned),
			       .Height = ROWS,
			       .Depth = 1};
}

static void fill_input(unsigned *in, unsigned salt)
{
	for (unsigned r = 0; r < ROWS + YOFF; r++)
		for (unsigned c = 0; c < PITCH; c++)
			in[r * PITCH + c] = r * 1000003u + c * 7919u + salt * 2654435761u;
}

/* What the graph leaves in out (pitched) and dev (model) after one launch from in. */
static void model_launch(const unsigned *in, unsigned *model_dev, unsigned mul, unsigned add)
{
	for (unsigned r = 0; r < ROWS; r++)
		for (unsigned c = 0; c < COLS; c++) {
			unsigned i = r * COLS + c;

			model_dev[i] = affine(in[(r + YOFF) * PITCH + XOFF + c], mul, add, i);
		}
}

static void check_out(const char *what, const unsigned *out, const unsigned *model_dev)
{
	for (unsigned r = 0; r < ROWS; r++)
		for (unsigned c = 0; c < PITCH; c++) {
			unsigned got = out[r * PITCH + c], want = c < COLS ? model_dev[r * COLS + c] : PAD;

			if (got != want)
				fail(what, r * PITCH + c, got, want);
		}
}

int main(void)
{
	static unsigned model_dev[N];
	unsigned *in = malloc((ROWS + YOFF) * PITCH * sizeof(unsigned));
	unsigned *in2 = malloc((ROWS + YOFF) * PITCH * sizeof(unsigned));
	unsigned *out = malloc(ROWS * PITCH * sizeof(unsigned));
	unsigned *row = malloc(COLS * sizeof(unsigned));
	unsigned row2[COLS]; /* on the stack, as simpleCudaGraphs' result */
	unsigned hh_src[COLS], hh_dst[COLS];
	unsigned cap_in[N], cap_out[N];
	CUcontext ctx;
	CUmodule mod;
	CUfunction affine_fn;
	CUdeviceptr dx;
	CUstream s;
	CUgraph g, cg;
	CUgraphNode nin, nk, nout, nrow, nhh;
	CUgraphExec x, cx;
	CUgraphNodeType type;
	CUDA_MEMCPY3D p, got;
	unsigned mul = 3, add = 11;
	int n = N;
	void *params[] = {&dx, &mul, &add, &n};

	if (!in || !in2 || !out || !row)
		return 1;
	cu_test_init("graph_pageable");
	ctx = cu_test_primary_context(NULL);
	CU_CHECK(cuModuleLoadData(&mod, graph_basic_fatbin));
	CU_CHECK(cuModuleGetFunction(&affine_fn, mod, "graph_affine"));
	CU_CHECK(cuMemAlloc(&dx, N * sizeof(unsigned)));
	CU_CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));

	/* (a) the explicit graph */
	CU_CHECK(cuGraphCreate(&g, 0));
	p = copy_2d_in(in, dx);
	CU_CHECK(cuGraphAddMemcpyNode(&nin, g, NULL, 0, &p, ctx));
	CUDA_KERNEL_NODE_PARAMS kp = {.func = affine_fn,
				      .gridDimX = GRID,
				      .gridDimY = 1,
				      .gridDimZ = 1,
				      .blockDimX = BLOCK,
				      .blockDimY = 1,
				      .blockDimZ = 1,
				      .kernelParams = params};
	CU_CHECK(cuGraphAddKernelNode(&nk, g, &nin, 1, &kp));
	p = copy_2d_out(dx, out);
	CU_CHECK(cuGraphAddMemcpyNode(&nout, g, &nk, 1, &p, ctx));
	p = (CUDA_MEMCPY3D){.srcMemoryType = CU_MEMORYTYPE_HOST,
			    .srcHost = hh_src,
			    .dstMemoryType = CU_MEMORYTYPE_HOST,
			    .dstHost = hh_dst,
			    .WidthInBytes = sizeof(hh_src),
			    .Height = 1,
			    .Depth = 1};
	CU_CHECK(cuGraphAddMemcpyNode(&nhh, g, &nout, 1, &p, ctx));
	p = (CUDA_MEMCPY3D){.srcMemoryType = CU_MEMORYTYPE_DEVICE,
			    .srcDevice = dx,
			    .dstMemoryType = CU_MEMORYTYPE_HOST,
			    .dstHost = row,
			    .WidthInBytes = COLS * sizeof(unsigned),
			    .Height = 1,
			    .Depth = 1};
	CU_CHECK(cuGraphAddMemcpyNode(&nrow, g, &nk, 1, &p, ctx));
	CU_CHECK(cuGraphNodeGetType(nout, &type));
	if (type != CU_GRAPH_NODE_TYPE_MEMCPY)
		fail("node type", 0, type, CU_GRAPH_NODE_TYPE_MEMCPY);
	CU_CHECK(cuGraphMemcpyNodeGetParams(nout, &got));
	if (got.dstHost != out || got.dstPitch != PITCH * sizeof(unsigned) || got.Height != ROWS)
		fail("copy parameters", 0, (unsigned)got.dstPitch, PITCH * sizeof(unsigned));
	CU_CHECK(cuGraphInstantiate(&x, g, 0));
	for (unsigned i = 0; i < ROWS * PITCH; i++)
		out[i] = PAD;
	for (unsigned l = 0; l < LAUNCHES; l++) {
		fill_input(in, l);
		for (unsigned i = 0; i < COLS; i++)
			hh_src[i] = l * 31u + i;
		CU_CHECK(cuGraphLaunch(x, s));
		CU_CHECK(cuStreamSynchronize(s));
		model_launch(in, model_dev, mul, add);
		check_out("out", out, model_dev);
		for (unsigned i = 0; i < COLS; i++) {
			if (hh_dst[i] != hh_src[i])
				fail("hh_dst", i, hh_dst[i], hh_src[i]);
			if (row[i] != model_dev[i])
				fail("row", i, row[i], model_dev[i]);
		}
		checksum_add(out, ROWS * PITCH);
	}
	/* In the executable graph: the 1D copy moves to the stack buffer, the 2D one cannot move. */
	p = copy_2d_out(dx, in2);
	CU_EXPECT(cuGraphExecMemcpyNodeSetParams(x, nout, &p, ctx), CUDA_ERROR_INVALID_VALUE);
	CU_CHECK(cuGraphMemcpyNodeGetParams(nrow, &p));
	p.dstHost = row2;
	CU_CHECK(cuGraphExecMemcpyNodeSetParams(x, nrow, &p, ctx));
	fill_input(in, 100);
	CU_CHECK(cuGraphLaunch(x, s));
	CU_CHECK(cuStreamSynchronize(s));
	model_launch(in, model_dev, mul, add);
	check_out("out", out, model_dev);
	for (unsigned i = 0; i < COLS; i++)
		if (row2[i] != model_dev[i])
			fail("row2", i, row2[i], model_dev[i]);
	checksum_add(row2, COLS);
	p = copy_2d_in(in2, dx);
	CU_CHECK(cuGraphMemcpyNodeSetParams(nin, &p));
	CU_CHECK(cuGraphMemcpyNodeGetParams(nin, &got));
	if (got.srcHost != in2)
		fail("new copy parameters", 0, 0, 1);
	CU_CHECK(cuGraphExecDestroy(x));
	CU_CHECK(cuGraphInstantiate(&x, g, 0));
	fill_input(in2, 200);
	CU_CHECK(cuGraphLaunch(x, s));
	CU_CHECK(cuStreamSynchronize(s));
	model_launch(in2, model_dev, mul, add);
	check_out("out after the graph's new input", out, model_dev);
	checksum_add(out, ROWS * PITCH);
	CU_CHECK(cuGraphExecDestroy(x));
	CU_CHECK(cuGraphDestroy(g));

	/* (b) a capture with pageable copies */
	CU_CHECK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
	CU_CHECK(cuMemcpyHtoDAsync(dx, cap_in, sizeof(cap_in), s));
	CU_CHECK(cuLaunchKernel(affine_fn, GRID, 1, 1, BLOCK, 1, 1, 0, s, params, NULL));
	CU_CHECK(cuMemcpyDtoHAsync(cap_out, dx, sizeof(cap_out), s));
	CU_CHECK(cuStreamEndCapture(s, &cg));
	CU_CHECK(cuGraphInstantiate(&cx, cg, 0));
	for (unsigned r = 0; r < REPLAYS; r++) {
		for (unsigned i = 0; i < N; i++)
			cap_in[i] = i * 48271u + r;
		CU_CHECK(cuGraphLaunch(cx, s));
		CU_CHECK(cuStreamSynchronize(s));
		for (unsigned i = 0; i < N; i++)
			if (cap_out[i] != affine(cap_in[i], mul, add, i))
				fail("cap_out", i, cap_out[i], affine(cap_in[i], mul, add, i));
		checksum_add(cap_out, N);
	}
	CU_CHECK(cuGraphExecDestroy(cx));
	CU_CHECK(cuGraphDestroy(cg));
	CU_CHECK(cuStreamDestroy(s));
	CU_CHECK(cuMemFree(dx));
	free(in);
	free(in2);
	free(out);
	free(row);
	printf("graph_pageable: checksum %016llx\n", checksum);
	cu_test_pass("graph_pageable");
}
