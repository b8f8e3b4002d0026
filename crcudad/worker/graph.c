/* CUDA graphs and stream capture, the hand-marshalled part: kernel nodes (their parameters travel as a
 * launch's do), memcpy nodes (host sides are page-locked memory the client shares: the client's
 * addresses are the daemon's mapping here), capture info with its dependency arrays. The rest of the
 * graph calls take the generated path. */
#define LOG_PREFIX "crcudad: "
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "crcuda/log.h"
#include "worker.h"

#include "crcuda/cuda_api_undef.h"

#define CALL(sym, ...) (crc_be.sym##_fn ? crc_be.sym##_fn(__VA_ARGS__) : CUDA_ERROR_NOT_SUPPORTED)

_Static_assert(sizeof(CUDA_MEMCPY3D) == CRC_MEMCPY3D_BYTES, "crc_graph_memcpy_wire carries a CUDA_MEMCPY3D");

/* The handle of a real object for the client: the one it has, or a new one. */
static uint64_t client_handle(struct crc_session *s, unsigned tag, void *real)
{
	uint64_t v;

	if (!real)
		return 0;
	v = crc_find_handle(s, tag, real);
	return v ? v : crc_register(s, tag, (union crc_slot){.ptr = real});
}

/* The node request's header: graph, node, exec and context translated, the dependencies decoded into
 * deps (freed by the caller). *rest: the node's own part. */
struct node_req {
	CUgraph graph;
	CUgraphNode node;
	CUgraphExec exec;
	CUcontext ctx;
	CUgraphNode *deps;
	size_t ndeps;
	const uint8_t *rest;
	size_t rest_len;
};

static CUresult node_req(struct crc_session *s, const struct crc_call_hdr *h, const uint8_t *args, size_t len,
			 struct node_req *nr)
{
	const struct crc_graph_node_req *q = (const void *)args;
	union crc_slot g, n, e, c;
	CUresult res;

	memset(nr, 0, sizeof(*nr));
	if (len < sizeof(*q) || (len - sizeof(*q)) / 8 < q->ndeps)
		return CUDA_ERROR_INVALID_VALUE;
	res = crc_translate(s, h, CRC_HT_GRAPH, q->graph, &g);
	if (res == CUDA_SUCCESS)
		res = crc_translate(s, h, CRC_HT_GRAPHNODE, q->node, &n);
	if (res == CUDA_SUCCESS)
		res = crc_translate(s, h, CRC_HT_GRAPHEXEC, q->exec, &e);
	if (res == CUDA_SUCCESS)
		res = crc_translate(s, h, CRC_HT_CTX, q->ctx, &c);
	if (res != CUDA_SUCCESS)
		return res;
	nr->graph = g.ptr;
	nr->node = n.ptr;
	nr->exec = e.ptr;
	nr->ctx = c.ptr;
	nr->ndeps = q->ndeps;
	nr->deps = calloc(q->ndeps ? q->ndeps : 1, sizeof(*nr->deps));
	if (!nr->deps)
		return CUDA_ERROR_OUT_OF_MEMORY;
	for (uint32_t i = 0; i < q->ndeps; i++) {
		uint64_t v;
		union crc_slot d;

		memcpy(&v, args + sizeof(*q) + 8 * i, 8);
		res = crc_translate(s, h, CRC_HT_GRAPHNODE, v, &d);
		if (res != CUDA_SUCCESS)
			return res;
		nr->deps[i] = d.ptr;
	}
	nr->rest = args + sizeof(*q) + 8 * (size_t)q->ndeps;
	nr->rest_len = len - sizeof(*q) - 8 * (size_t)q->ndeps;
	return CUDA_SUCCESS;
}

/* A new node's handle in the reply. */
static CUresult reply_node(struct crc_session *s, CUgraphNode node)
{
	uint64_t *out = crc_out(s, 8);

	if (!out)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*out = client_handle(s, CRC_HT_GRAPHNODE, node);
	return CUDA_SUCCESS;
}

/* ---- kernel nodes --------------------------------------------------------------------------------- */
CUresult crc_raw_graph_kernel(struct crc_session *s, const struct crc_call_hdr *h, const uint8_t *args,
			      size_t len)
{
	struct node_req nr;
	struct crc_launch_args la;
	CUDA_KERNEL_NODE_PARAMS_v2 p;
	CUgraphNode node = NULL;
	CUresult res = node_req(s, h, args, len, &nr);

	if (res == CUDA_SUCCESS)
		res = crc_launch_decode(s, h, nr.rest, nr.rest_len, &la);
	if (res != CUDA_SUCCESS)
		goto out;
	p = (CUDA_KERNEL_NODE_PARAMS_v2){.gridDimX = la.req->grid[0],
					 .gridDimY = la.req->grid[1],
					 .gridDimZ = la.req->grid[2],
					 .blockDimX = la.req->block[0],
					 .blockDimY = la.req->block[1],
					 .blockDimZ = la.req->block[2],
					 .sharedMemBytes = la.req->shared_bytes,
					 .kernelParams = la.kp,
					 .extra = la.ex};
	/* A CUkernel (what cudart hands) goes in kern, with the context it runs in. */
	if (crc_vhandle_tag(la.req->func) == CRC_HT_KERNEL) {
		p.kern = la.func;
		p.ctx = nr.ctx;
	} else {
		p.func = la.func;
	}
	switch (s->msg->op) {
	case CRC_CU_cuGraphAddKernelNode_v2:
		res = CALL(cuGraphAddKernelNode_v2, &node, nr.graph, nr.deps, nr.ndeps, &p);
		if (res == CUDA_SUCCESS)
			res = reply_node(s, node);
		break;
	case CRC_CU_cuGraphKernelNodeSetParams_v2:
		res = CALL(cuGraphKernelNodeSetParams_v2, nr.node, &p);
		break;
	default:
		res = CALL(cuGraphExecKernelNodeSetParams_v2, nr.exec, nr.node, &p);
		break;
	}
out:
	free(nr.deps);
	return res;
}

/* A kernel node's parameters, as a launch request carries them; the layout from the driver. */
CUresult crc_raw_graph_kernel_get(struct crc_session *s, const struct crc_call_hdr *h, const uint8_t *args,
				  size_t len)
{
	struct crc_kparam_wire pw[CRC_MAX_KPARAMS];
	CUDA_KERNEL_NODE_PARAMS_v2 p = {0};
	struct crc_launch_req *r;
	uint32_t n = 0, bytes = 0;
	struct node_req nr;
	uint8_t *out;
	CUresult res = node_req(s, h, args, len, &nr);

	free(nr.deps);
	if (res == CUDA_SUCCESS)
		res = CALL(cuGraphKernelNodeGetParams_v2, nr.node, &p);
	if (res != CUDA_SUCCESS)
		return res;
	for (; p.kernelParams && n < CRC_MAX_KPARAMS; n++) {
		size_t off, size;
		CUresult pr = p.func ? CALL(cuFuncGetParamInfo, p.func, n, &off, &size)
				     : CALL(cuKernelGetParamInfo, p.kern, n, &off, &size);

		if (pr != CUDA_SUCCESS)
			break;
		pw[n] = (struct crc_kparam_wire){.offset = (uint32_t)off, .size = (uint32_t)size};
		if (off + size > bytes)
			bytes = (uint32_t)(off + size);
	}
	out = crc_out(s, sizeof(*r) + n * sizeof(*pw) + crc_align8(bytes));
	if (!out)
		return CUDA_ERROR_OUT_OF_MEMORY;
	r = (struct crc_launch_req *)out;
	*r = (struct crc_launch_req){.func = p.func ? client_handle(s, CRC_HT_FUNC, p.func)
						    : client_handle(s, CRC_HT_KERNEL, p.kern),
				     .grid = {p.gridDimX, p.gridDimY, p.gridDimZ},
				     .block = {p.blockDimX, p.blockDimY, p.blockDimZ},
				     .shared_bytes = p.sharedMemBytes,
				     .nparams = n,
				     .param_bytes = bytes};
	memcpy(r + 1, pw, n * sizeof(*pw));
	for (uint32_t i = 0; i < n; i++)
		memcpy(out + sizeof(*r) + n * sizeof(*pw) + pw[i].offset, p.kernelParams[i], pw[i].size);
	return CUDA_SUCCESS;
}

/* ---- memcpy nodes --------------------------------------------------------------------------------- */
/* The last byte a side of a 3D copy touches, past its base address. */
static uint64_t copy_extent(size_t x, size_t y, size_t z, size_t pitch, size_t height, const CUDA_MEMCPY3D *p)
{
	size_t rows = (z + (p->Depth ? p->Depth : 1) - 1) * height + y + (p->Height ? p->Height : 1) - 1;

	return x + rows * (pitch ? pitch : p->WidthInBytes) + p->WidthInBytes;
}

/* A host side: the client's address, made the daemon's mapping of it (or back, to_client). */
static CUresult host_side(struct crc_session *s, CUmemorytype type, const void **host, CUdeviceptr *dev,
			  uint64_t extent, bool to_client)
{
	uint64_t addr, mapped;

	if (type != CU_MEMORYTYPE_HOST && type != CU_MEMORYTYPE_UNIFIED)
		return CUDA_SUCCESS;
	addr = type == CU_MEMORYTYPE_HOST ? (uintptr_t)*host : *dev;
	mapped = to_client ? crc_pin_client(s, addr) : crc_pin_local(s, addr, extent);
	if (!mapped)
		return type == CU_MEMORYTYPE_HOST && !to_client ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
	if (type == CU_MEMORYTYPE_HOST)
		*host = (const void *)(uintptr_t)mapped;
	else
		*dev = mapped;
	return CUDA_SUCCESS;
}

static CUresult memcpy_sides(struct crc_session *s, CUDA_MEMCPY3D *p, bool to_client)
{
	CUresult res =
	    host_side(s, p->srcMemoryType, &p->srcHost, &p->srcDevice,
		      copy_extent(p->srcXInBytes, p->srcY, p->srcZ, p->srcPitch, p->srcHeight, p), to_client);

	if (res == CUDA_SUCCESS)
		res = host_side(s, p->dstMemoryType, (const void **)&p->dstHost, &p->dstDevice,
				copy_extent(p->dstXInBytes, p->dstY, p->dstZ, p->dstPitch, p->dstHeight, p),
				to_client);
	return res;
}

CUresult crc_raw_graph_memcpy(struct crc_session *s, const struct crc_call_hdr *h, const uint8_t *args,
			      size_t len)
{
	struct node_req nr;
	CUDA_MEMCPY3D p;
	CUgraphNode node = NULL;
	CUresult res = node_req(s, h, args, len, &nr);

	if (res == CUDA_SUCCESS && nr.rest_len < sizeof(p))
		res = CUDA_ERROR_INVALID_VALUE;
	if (res != CUDA_SUCCESS)
		goto out;
	memcpy(&p, nr.rest, sizeof(p));
	if (p.srcMemoryType == CU_MEMORYTYPE_ARRAY || p.dstMemoryType == CU_MEMORYTYPE_ARRAY) {
		res = CUDA_ERROR_NOT_SUPPORTED;
		goto out;
	}
	res = memcpy_sides(s, &p, false);
	if (res != CUDA_SUCCESS)
		goto out;
	switch (s->msg->op) {
	case CRC_CU_cuGraphAddMemcpyNode:
		res = CALL(cuGraphAddMemcpyNode, &node, nr.graph, nr.deps, nr.ndeps, &p, nr.ctx);
		if (res == CUDA_SUCCESS)
			res = reply_node(s, node);
		break;
	case CRC_CU_cuGraphMemcpyNodeSetParams:
		res = CALL(cuGraphMemcpyNodeSetParams, nr.node, &p);
		break;
	default:
		res = CALL(cuGraphExecMemcpyNodeSetParams, nr.exec, nr.node, &p, nr.ctx);
		break;
	}
out:
	free(nr.deps);
	return res;
}

CUresult crc_raw_graph_memcpy_get(struct crc_session *s, const struct crc_call_hdr *h, const uint8_t *args,
				  size_t len)
{
	struct node_req nr;
	CUDA_MEMCPY3D p;
	void *out;
	CUresult res = node_req(s, h, args, len, &nr);

	free(nr.deps);
	if (res == CUDA_SUCCESS)
		res = CALL(cuGraphMemcpyNodeGetParams, nr.node, &p);
	if (res == CUDA_SUCCESS)
		res = memcpy_sides(s, &p, true);
	if (res != CUDA_SUCCESS)
		return res;
	out = crc_out(s, sizeof(p));
	if (!out)
		return CUDA_ERROR_OUT_OF_MEMORY;
	memcpy(out, &p, sizeof(p));
	return CUDA_SUCCESS;
}

/* ---- capture ---------------------------------------------------------------------------------------- */
CUresult crc_raw_capture_info(struct crc_session *s, const struct crc_call_hdr *h, const uint8_t *args,
			      size_t len)
{
	CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
	const CUgraphEdgeData *edges = NULL;
	const CUgraphNode *deps = NULL;
	struct crc_capture_info *info;
	cuuint64_t id = 0;
	CUgraph graph = NULL;
	size_t n = 0;
	union crc_slot st;
	uint64_t v;
	uint8_t *out;
	CUresult res;

	if (len < 8)
		return CUDA_ERROR_INVALID_VALUE;
	memcpy(&v, args, 8);
	res = crc_translate(s, h, CRC_HT_STREAM, v, &st);
	if (res == CUDA_SUCCESS)
		res = CALL(cuStreamGetCaptureInfo_v3, st.ptr, &status, &id, &graph, &deps, &edges, &n);
	if (res != CUDA_SUCCESS)
		return res;
	out = crc_out(s, sizeof(*info) + n * (8 + sizeof(CUgraphEdgeData)));
	if (!out)
		return CUDA_ERROR_OUT_OF_MEMORY;
	info = (struct crc_capture_info *)out;
	*info = (struct crc_capture_info){
	    .status = status, .id = id, .graph = client_handle(s, CRC_HT_GRAPH, graph), .ndeps = n};
	for (size_t i = 0; i < n; i++) {
		v = client_handle(s, CRC_HT_GRAPHNODE, deps[i]);
		memcpy(out + sizeof(*info) + 8 * i, &v, 8);
	}
	if (n && edges)
		memcpy(out + sizeof(*info) + 8 * n, edges, n * sizeof(CUgraphEdgeData));
	return CUDA_SUCCESS;
}

/* ---- checkpoint -------------------------------------------------------------------------------------- */
static uint32_t live_handles(struct crc_session *s, unsigned tag)
{
	uint32_t live = 0;

	for (uint32_t i = 1; i <= s->tables[tag].n; i++)
		live += s->tables[tag].real[i].ptr != NULL;
	return live;
}

int crc_graph_ckpt_refusal(struct crc_session *s, char *why, size_t len)
{
	uint32_t graphs = live_handles(s, CRC_HT_GRAPH), execs = live_handles(s, CRC_HT_GRAPHEXEC);
	CUstreamCaptureStatus st;

	/* A capture in progress: its graph is the driver's until it ends. */
	for (uint32_t i = 1; i <= s->tables[CRC_HT_STREAM].n; i++) {
		void *stream = s->tables[CRC_HT_STREAM].real[i].ptr;

		if (stream && CALL(cuStreamIsCapturing, stream, &st) == CUDA_SUCCESS &&
		    st != CU_STREAM_CAPTURE_STATUS_NONE) {
			snprintf(
			    why, len,
			    "session %llu is capturing a stream into a CUDA graph: a checkpoint during a "
			    "capture is not supported; try again when it has ended",
			    (unsigned long long)s->id);
			return -1;
		}
	}
	if (!graphs && !execs)
		return 0;
	snprintf(
	    why, len,
	    "session %llu holds CUDA graphs (%u graphs, %u executable graphs): checkpointing CUDA graphs is "
	    "not supported yet; the program runs on untouched",
	    (unsigned long long)s->id, graphs, execs);
	return -1;
}
