/* Hooks: stream capture and CUDA graphs. Most graph calls are generated forwards (cuda_driver.api);
 * here are the ones that need more: capture begin/end (the process counts its captures, so capture
 * queries stay local while none runs), capture info, the instantiate forms, exec update v2, kernel
 * nodes (parameters packed as a launch packs them), memcpy nodes (host sides must be page-locked
 * memory shared with the daemon) and the generic cuGraphAddNode / cuGraph[Exec]NodeSetParams. Graph
 * memory is graph_mem.c's. */
#define LOG_PREFIX "libcrcuda: "
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "client.h"
#include "crcuda/log.h"
#include "hooks.h"

_Static_assert(sizeof(CUDA_MEMCPY3D) == CRC_MEMCPY3D_BYTES, "crc_graph_memcpy_wire carries a CUDA_MEMCPY3D");

/* ---- capture ------------------------------------------------------------------------------------ */
static atomic_int captures; /* begun and not ended by this process */

bool crc_capturing(void)
{
	return atomic_load_explicit(&captures, memory_order_acquire) > 0;
}

static CUresult capture_begun(CUresult res)
{
	if (res == CUDA_SUCCESS)
		atomic_fetch_add(&captures, 1);
	return res;
}

CUresult crc_hook_cuStreamBeginCapture(CUstream hStream)
{
	return capture_begun(crc_fwd_cuStreamBeginCapture(hStream));
}

CUresult crc_hook_cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode)
{
	return capture_begun(crc_fwd_cuStreamBeginCapture_v2(hStream, mode));
}

CUresult crc_hook_cuStreamBeginCaptureToGraph(CUstream hStream, CUgraph hGraph,
					      const CUgraphNode *dependencies,
					      const CUgraphEdgeData *dependencyData, size_t numDependencies,
					      CUstreamCaptureMode mode)
{
	return capture_begun(crc_fwd_cuStreamBeginCaptureToGraph(hStream, hGraph, dependencies,
								 dependencyData, numDependencies, mode));
}

CUresult crc_hook_cuStreamEndCapture(CUstream hStream, CUgraph *phGraph)
{
	CUresult res = crc_fwd_cuStreamEndCapture(hStream, phGraph);

	/* Ended, with a graph or invalidated. Other errors (not the origin stream, not capturing, unjoined
	 * work) leave the count: a count too high only costs round trips. */
	if ((res == CUDA_SUCCESS || res == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED) &&
	    atomic_fetch_sub(&captures, 1) <= 0)
		atomic_fetch_add(&captures, 1);
	/* A capture that ended without a graph says so with NULL, as the driver does. */
	if ((res == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED || res == CUDA_ERROR_STREAM_CAPTURE_UNJOINED) &&
	    phGraph)
		*phGraph = NULL;
	return res;
}

/* The capture mode is the thread's; the daemon serves the process's threads on one thread of its own,
 * which gets the mode each time it changes while a capture may run (PyTorch's allocator relaxes it
 * around cudaMalloc during capture). */
CUresult crc_hook_cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode)
{
	static __thread CUstreamCaptureMode current = CU_STREAM_CAPTURE_MODE_GLOBAL;
	CUstreamCaptureMode old, set;

	if (!mode)
		return CUDA_ERROR_INVALID_VALUE;
	old = current;
	current = *mode;
	*mode = old;
	if (current != old && crc_capturing()) {
		set = current;
		return crc_fwd_cuThreadExchangeStreamCaptureMode(&set);
	}
	return CUDA_SUCCESS;
}

CUresult crc_capture_status(CUstream hStream, CUstreamCaptureStatus *status)
{
	return crc_fwd_cuStreamIsCapturing(hStream, status);
}

/* cuStreamGetCaptureInfo_v2/_v3 while a capture may run: the daemon's answer. The dependency arrays
 * are the calling thread's, valid until its next such call (natively: until the next call on the
 * stream). */
CUresult crc_capture_info_remote(CUstream hStream, CUstreamCaptureStatus *status, cuuint64_t *id,
				 CUgraph *graph, const CUgraphNode **deps, const CUgraphEdgeData **edges,
				 size_t *ndeps)
{
	static __thread CUgraphNode *tl_deps;
	static __thread CUgraphEdgeData *tl_edges;
	static __thread size_t tl_cap;
	uint64_t stream = (uintptr_t)hStream;
	struct crc_capture_info info;
	const uint8_t *r;
	struct crc_call c;
	void *args;
	CUresult res;

	if (!status)
		return CUDA_ERROR_INVALID_VALUE;
	res = crc_call_begin(&c, CRC_CU_cuStreamGetCaptureInfo_v3, 0, sizeof(stream), &args);
	if (res != CUDA_SUCCESS)
		return res;
	memcpy(args, &stream, sizeof(stream));
	res = crc_call_wait(&c, NULL, NULL);
	r = c.reply;
	if (res == CUDA_SUCCESS && c.reply_len < sizeof(info))
		res = CUDA_ERROR_UNKNOWN;
	if (res == CUDA_SUCCESS) {
		memcpy(&info, r, sizeof(info));
		if (c.reply_len < sizeof(info) + info.ndeps * (8 + sizeof(CUgraphEdgeData)))
			res = CUDA_ERROR_UNKNOWN;
	}
	if (res == CUDA_SUCCESS && info.ndeps > tl_cap) {
		CUgraphNode *d = realloc(tl_deps, info.ndeps * sizeof(*d));
		CUgraphEdgeData *e = d ? realloc(tl_edges, info.ndeps * sizeof(*e)) : NULL;

		if (d)
			tl_deps = d;
		if (e)
			tl_edges = e;
		if (d && e)
			tl_cap = info.ndeps;
		else
			res = CUDA_ERROR_OUT_OF_MEMORY;
	}
	if (res == CUDA_SUCCESS) {
		for (uint64_t k = 0; k < info.ndeps; k++) {
			uint64_t v;

			memcpy(&v, r + sizeof(info) + k * 8, 8);
			tl_deps[k] = (CUgraphNode)(uintptr_t)v;
		}
		if (info.ndeps)
			memcpy(tl_edges, r + sizeof(info) + info.ndeps * 8,
			       info.ndeps * sizeof(CUgraphEdgeData));
		*status = (CUstreamCaptureStatus)info.status;
		if (id)
			*id = info.id;
		if (graph)
			*graph = (CUgraph)(uintptr_t)info.graph;
		if (deps)
			*deps = info.ndeps ? tl_deps : NULL;
		if (edges)
			*edges = info.ndeps ? tl_edges : NULL;
		if (ndeps)
			*ndeps = info.ndeps;
	}
	crc_call_end(&c);
	return res;
}

bool crc_capturing_on(CUstream hStream)
{
	CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;

	return crc_capturing() && crc_capture_status(hStream, &st) == CUDA_SUCCESS &&
	       st != CU_STREAM_CAPTURE_STATUS_NONE;
}

/* A host function cannot be captured: the daemon cannot call into the application. */
bool crc_capture_refuses_host_fn(CUstream hStream)
{
	if (!crc_capturing_on(hStream))
		return false;
	pr_warn("a host function on a capturing stream is not supported under crcuda yet");
	return true;
}

/* ---- instantiate, update ------------------------------------------------------------------------ */
CUresult crc_hook_cuGraphInstantiate_v2(CUgraphExec *phGraphExec, CUgraph hGraph, CUgraphNode *phErrorNode,
					char *logBuffer, size_t bufferSize)
{
	if (phErrorNode)
		*phErrorNode = NULL;
	if (logBuffer && bufferSize)
		logBuffer[0] = '\0';
	return crc_hook_cuGraphInstantiateWithFlags(phGraphExec, hGraph, 0);
}

CUresult crc_hook_cuGraphInstantiate(CUgraphExec *phGraphExec, CUgraph hGraph, CUgraphNode *phErrorNode,
				     char *logBuffer, size_t bufferSize)
{
	return crc_hook_cuGraphInstantiate_v2(phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize);
}

CUresult crc_hook_cuGraphInstantiateWithParams(CUgraphExec *phGraphExec, CUgraph hGraph,
					       CUDA_GRAPH_INSTANTIATE_PARAMS *params)
{
	CUresult res;

	if (!params)
		return CUDA_ERROR_INVALID_VALUE;
	/* The upload the flag asks for is one more posted call on the given stream. */
	res = crc_hook_cuGraphInstantiateWithFlags(
	    phGraphExec, hGraph, params->flags & ~(cuuint64_t)CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD);
	params->hErrNode_out = NULL;
	params->result_out =
	    res == CUDA_SUCCESS ? CUDA_GRAPH_INSTANTIATE_SUCCESS : CUDA_GRAPH_INSTANTIATE_ERROR;
	if (res == CUDA_SUCCESS && (params->flags & CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD))
		res = crc_fwd_cuGraphUpload(*phGraphExec, params->hUploadStream);
	return res;
}

CUresult crc_hook_cuGraphExecUpdate_v2(CUgraphExec hGraphExec, CUgraph hGraph,
				       CUgraphExecUpdateResultInfo *resultInfo)
{
	CUgraphNode err = NULL;
	CUgraphExecUpdateResult result = CU_GRAPH_EXEC_UPDATE_SUCCESS;
	CUresult res;

	if (!resultInfo)
		return CUDA_ERROR_INVALID_VALUE;
	res = crc_hook_cuGraphExecUpdate(hGraphExec, hGraph, &err, &result);
	resultInfo->result = result;
	resultInfo->errorNode = err;
	resultInfo->errorFromNode = NULL;
	return res;
}

/* A relative path names a file in the application's directory, not the daemon's. */
CUresult crc_hook_cuGraphDebugDotPrint(CUgraph hGraph, const char *path, unsigned int flags)
{
	char abs[4096];

	if (path && path[0] != '/') {
		if (!getcwd(abs, sizeof(abs)) || strlen(abs) + 1 + strlen(path) >= sizeof(abs))
			return CUDA_ERROR_INVALID_VALUE;
		strcat(abs, "/");
		strcat(abs, path);
		path = abs;
	}
	return crc_fwd_cuGraphDebugDotPrint(hGraph, path, flags);
}

/* ---- kernel nodes ------------------------------------------------------------------------------- */
/* The node request header and its dependency handles; returns where the node's own part goes. */
static void *node_header(void *args, uint64_t graph, uint64_t node, uint64_t exec, uint64_t ctx,
			 const CUgraphNode *deps, size_t ndeps)
{
	struct crc_graph_node_req *q = args;
	uint64_t *d = (uint64_t *)(q + 1);

	*q = (struct crc_graph_node_req){
	    .graph = graph, .node = node, .exec = exec, .ctx = ctx, .ndeps = (uint32_t)ndeps};
	for (size_t i = 0; i < ndeps; i++)
		d[i] = (uintptr_t)deps[i];
	return d + ndeps;
}

static CUresult node_call(struct crc_call *c, CUgraphNode *out)
{
	CUresult res = crc_call_wait(c, NULL, NULL);

	if (res == CUDA_SUCCESS && out) {
		uint64_t v = 0;

		if (c->reply_len >= 8)
			memcpy(&v, c->reply, 8);
		*out = (CUgraphNode)(uintptr_t)v;
	}
	crc_call_end(c);
	return res;
}

static CUresult kernel_node(uint16_t op, CUgraphNode *out, uint64_t graph, uint64_t node, uint64_t exec,
			    const CUgraphNode *deps, size_t ndeps, const CUDA_KERNEL_NODE_PARAMS_v2 *p)
{
	uint64_t f = p ? (uintptr_t)(p->func ? (void *)p->func : (void *)p->kern) : 0;
	struct crc_launch_pack lp;
	struct crc_launch_req *r;
	struct crc_call c;
	void *args;
	CUresult res;

	if (!p || (ndeps && !deps) || ndeps > 65536)
		return CUDA_ERROR_INVALID_VALUE;
	res = crc_launch_prepare(&lp, f, p->kernelParams, p->extra, 0);
	if (res != CUDA_SUCCESS)
		return res;
	res = crc_call_begin(&c, op, 0, sizeof(struct crc_graph_node_req) + ndeps * 8 + lp.len, &args);
	if (res != CUDA_SUCCESS)
		return res;
	r = node_header(args, graph, node, exec, (uintptr_t)p->ctx, deps, ndeps);
	*r = (struct crc_launch_req){.func = f,
				     .grid = {p->gridDimX, p->gridDimY, p->gridDimZ},
				     .block = {p->blockDimX, p->blockDimY, p->blockDimZ},
				     .shared_bytes = p->sharedMemBytes};
	crc_launch_write(&lp, r, NULL);
	return node_call(&c, out);
}

static CUDA_KERNEL_NODE_PARAMS_v2 kernel_v2(const CUDA_KERNEL_NODE_PARAMS_v1 *p)
{
	return (CUDA_KERNEL_NODE_PARAMS_v2){.func = p->func,
					    .gridDimX = p->gridDimX,
					    .gridDimY = p->gridDimY,
					    .gridDimZ = p->gridDimZ,
					    .blockDimX = p->blockDimX,
					    .blockDimY = p->blockDimY,
					    .blockDimZ = p->blockDimZ,
					    .sharedMemBytes = p->sharedMemBytes,
					    .kernelParams = p->kernelParams,
					    .extra = p->extra};
}

CUresult crc_hook_cuGraphAddKernelNode_v2(CUgraphNode *phGraphNode, CUgraph hGraph,
					  const CUgraphNode *dependencies, size_t numDependencies,
					  const CUDA_KERNEL_NODE_PARAMS_v2 *nodeParams)
{
	if (!phGraphNode)
		return CUDA_ERROR_INVALID_VALUE;
	return kernel_node(CRC_CU_cuGraphAddKernelNode_v2, phGraphNode, (uintptr_t)hGraph, 0, 0, dependencies,
			   numDependencies, nodeParams);
}

CUresult crc_hook_cuGraphAddKernelNode(CUgraphNode *phGraphNode, CUgraph hGraph,
				       const CUgraphNode *dependencies, size_t numDependencies,
				       const CUDA_KERNEL_NODE_PARAMS_v1 *nodeParams)
{
	CUDA_KERNEL_NODE_PARAMS_v2 p;

	if (!nodeParams)
		return CUDA_ERROR_INVALID_VALUE;
	p = kernel_v2(nodeParams);
	return crc_hook_cuGraphAddKernelNode_v2(phGraphNode, hGraph, dependencies, numDependencies, &p);
}

CUresult crc_hook_cuGraphKernelNodeSetParams_v2(CUgraphNode hNode,
						const CUDA_KERNEL_NODE_PARAMS_v2 *nodeParams)
{
	return kernel_node(CRC_CU_cuGraphKernelNodeSetParams_v2, NULL, 0, (uintptr_t)hNode, 0, NULL, 0,
			   nodeParams);
}

CUresult crc_hook_cuGraphKernelNodeSetParams(CUgraphNode hNode, const CUDA_KERNEL_NODE_PARAMS_v1 *nodeParams)
{
	CUDA_KERNEL_NODE_PARAMS_v2 p;

	if (!nodeParams)
		return CUDA_ERROR_INVALID_VALUE;
	p = kernel_v2(nodeParams);
	return crc_hook_cuGraphKernelNodeSetParams_v2(hNode, &p);
}

CUresult crc_hook_cuGraphExecKernelNodeSetParams_v2(CUgraphExec hGraphExec, CUgraphNode hNode,
						    const CUDA_KERNEL_NODE_PARAMS_v2 *nodeParams)
{
	return kernel_node(CRC_CU_cuGraphExecKernelNodeSetParams_v2, NULL, 0, (uintptr_t)hNode,
			   (uintptr_t)hGraphExec, NULL, 0, nodeParams);
}

CUresult crc_hook_cuGraphExecKernelNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
						 const CUDA_KERNEL_NODE_PARAMS_v1 *nodeParams)
{
	CUDA_KERNEL_NODE_PARAMS_v2 p;

	if (!nodeParams)
		return CUDA_ERROR_INVALID_VALUE;
	p = kernel_v2(nodeParams);
	return crc_hook_cuGraphExecKernelNodeSetParams_v2(hGraphExec, hNode, &p);
}

/* The node's parameters; kernelParams point into the calling thread's copy, valid until its next call
 * of this function (natively: while the node lives). */
CUresult crc_hook_cuGraphKernelNodeGetParams_v2(CUgraphNode hNode, CUDA_KERNEL_NODE_PARAMS_v2 *nodeParams)
{
	static __thread uint8_t *tl_bytes;
	static __thread void **tl_ptrs;
	struct crc_graph_node_req q = {.node = (uintptr_t)hNode};
	const struct crc_launch_req *r;
	const struct crc_kparam_wire *pw;
	struct crc_call c;
	void *args;
	CUresult res;
	uint32_t n;

	if (!nodeParams)
		return CUDA_ERROR_INVALID_VALUE;
	res = crc_call_begin(&c, CRC_CU_cuGraphKernelNodeGetParams_v2, 0, sizeof(q), &args);
	if (res != CUDA_SUCCESS)
		return res;
	memcpy(args, &q, sizeof(q));
	res = crc_call_wait(&c, NULL, NULL);
	r = c.reply;
	if (res == CUDA_SUCCESS && c.reply_len < sizeof(*r))
		res = CUDA_ERROR_UNKNOWN;
	n = res == CUDA_SUCCESS && r->nparams != UINT32_MAX ? r->nparams : 0;
	pw = (const struct crc_kparam_wire *)(r + 1);
	if (res == CUDA_SUCCESS &&
	    (n > 4096 || c.reply_len < sizeof(*r) + n * sizeof(*pw) + crc_align8(r->param_bytes)))
		res = CUDA_ERROR_UNKNOWN;
	if (res == CUDA_SUCCESS) {
		uint8_t *bytes = realloc(tl_bytes, r->param_bytes ? r->param_bytes : 1);
		void **ptrs = bytes ? realloc(tl_ptrs, (n ? n : 1) * sizeof(*ptrs)) : NULL;

		if (bytes)
			tl_bytes = bytes;
		if (ptrs)
			tl_ptrs = ptrs;
		if (!bytes || !ptrs) {
			res = CUDA_ERROR_OUT_OF_MEMORY;
		} else {
			memcpy(bytes, pw + n, r->param_bytes);
			for (uint32_t i = 0; i < n; i++)
				ptrs[i] = pw[i].offset < r->param_bytes ? bytes + pw[i].offset : bytes;
			*nodeParams = (CUDA_KERNEL_NODE_PARAMS_v2){
			    .func = (CUfunction)(uintptr_t)r->func,
			    .gridDimX = r->grid[0],
			    .gridDimY = r->grid[1],
			    .gridDimZ = r->grid[2],
			    .blockDimX = r->block[0],
			    .blockDimY = r->block[1],
			    .blockDimZ = r->block[2],
			    .sharedMemBytes = r->shared_bytes,
			    .kernelParams = ptrs,
			};
		}
	}
	crc_call_end(&c);
	return res;
}

CUresult crc_hook_cuGraphKernelNodeGetParams(CUgraphNode hNode, CUDA_KERNEL_NODE_PARAMS_v1 *nodeParams)
{
	CUDA_KERNEL_NODE_PARAMS_v2 p;
	CUresult res;

	if (!nodeParams)
		return CUDA_ERROR_INVALID_VALUE;
	res = crc_hook_cuGraphKernelNodeGetParams_v2(hNode, &p);
	if (res == CUDA_SUCCESS)
		*nodeParams = (CUDA_KERNEL_NODE_PARAMS_v1){.func = p.func,
							   .gridDimX = p.gridDimX,
							   .gridDimY = p.gridDimY,
							   .gridDimZ = p.gridDimZ,
							   .blockDimX = p.blockDimX,
							   .blockDimY = p.blockDimY,
							   .blockDimZ = p.blockDimZ,
							   .sharedMemBytes = p.sharedMemBytes,
							   .kernelParams = p.kernelParams};
	return res;
}

/* ---- memcpy nodes ------------------------------------------------------------------------------- */
/* A host side of a graph copy: only page-locked memory the daemon maps can be read when the graph
 * runs there. */
static bool host_side_ok(CUmemorytype type, const void *host, CUdeviceptr dev, const char *which)
{
	const void *p = type == CU_MEMORYTYPE_HOST ? host : (const void *)(uintptr_t)dev;
	struct crc_pinned *pin;

	if (type == CU_MEMORYTYPE_ARRAY) {
		pr_warn("a graph memcpy node with a CUDA array %s is not supported under crcuda yet", which);
		return false;
	}
	if (type != CU_MEMORYTYPE_HOST && type != CU_MEMORYTYPE_UNIFIED)
		return true;
	pin = crc_pinned_find(p, 1);
	if (pin && pin->memfd >= 0)
		return true;
	if (type == CU_MEMORYTYPE_UNIFIED && !pin)
		return true; /* a device address; the daemon's driver checks it */
	pr_warn("a graph memcpy node %s pageable host memory (%p) is not supported under crcuda: the daemon "
		"cannot reach it when the graph runs; use page-locked memory (cuMemAllocHost)",
		which, p);
	return false;
}

static CUresult memcpy_node(uint16_t op, CUgraphNode *out, uint64_t graph, uint64_t node, uint64_t exec,
			    const CUgraphNode *deps, size_t ndeps, const CUDA_MEMCPY3D *p, CUcontext ctx)
{
	struct crc_call c;
	void *args, *w;
	CUresult res;

	if (!p || (ndeps && !deps) || ndeps > 65536)
		return CUDA_ERROR_INVALID_VALUE;
	if (!host_side_ok(p->srcMemoryType, p->srcHost, p->srcDevice, "reading from") ||
	    !host_side_ok(p->dstMemoryType, p->dstHost, p->dstDevice, "writing to"))
		return CUDA_ERROR_NOT_SUPPORTED;
	res = crc_call_begin(&c, op, 0, sizeof(struct crc_graph_node_req) + ndeps * 8 + CRC_MEMCPY3D_BYTES,
			     &args);
	if (res != CUDA_SUCCESS)
		return res;
	w = node_header(args, graph, node, exec, (uintptr_t)ctx, deps, ndeps);
	memcpy(w, p, CRC_MEMCPY3D_BYTES);
	return node_call(&c, out);
}

CUresult crc_hook_cuGraphAddMemcpyNode(CUgraphNode *phGraphNode, CUgraph hGraph,
				       const CUgraphNode *dependencies, size_t numDependencies,
				       const CUDA_MEMCPY3D *copyParams, CUcontext ctx)
{
	if (!phGraphNode)
		return CUDA_ERROR_INVALID_VALUE;
	if (crc_stage_wanted(copyParams))
		return crc_stage_add_node(phGraphNode, hGraph, dependencies, numDependencies, copyParams,
					  ctx);
	return memcpy_node(CRC_CU_cuGraphAddMemcpyNode, phGraphNode, (uintptr_t)hGraph, 0, 0, dependencies,
			   numDependencies, copyParams, ctx);
}

CUresult crc_hook_cuGraphMemcpyNodeSetParams(CUgraphNode hNode, const CUDA_MEMCPY3D *nodeParams)
{
	if (crc_stage_node_params(hNode, NULL))
		return crc_stage_set_params(NULL, hNode, nodeParams, NULL);
	return memcpy_node(CRC_CU_cuGraphMemcpyNodeSetParams, NULL, 0, (uintptr_t)hNode, 0, NULL, 0,
			   nodeParams, NULL);
}

CUresult crc_hook_cuGraphExecMemcpyNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
						 const CUDA_MEMCPY3D *copyParams, CUcontext ctx)
{
	if (crc_stage_node_params(hNode, NULL))
		return hGraphExec ? crc_stage_set_params(hGraphExec, hNode, copyParams, ctx)
				  : CUDA_ERROR_INVALID_VALUE;
	return memcpy_node(CRC_CU_cuGraphExecMemcpyNodeSetParams, NULL, 0, (uintptr_t)hNode,
			   (uintptr_t)hGraphExec, NULL, 0, copyParams, ctx);
}

/* A staged copy (graph_stage.c) is a child graph node to the driver and a copy to the application;
 * graph memory's nodes (graph_mem.c) are empty nodes to it. */
CUresult crc_hook_cuGraphNodeGetType(CUgraphNode hNode, CUgraphNodeType *type)
{
	if (type && crc_stage_node_params(hNode, NULL)) {
		*type = CU_GRAPH_NODE_TYPE_MEMCPY;
		return CUDA_SUCCESS;
	}
	if (type && crc_graph_mem_node_type(hNode, type))
		return CUDA_SUCCESS;
	return crc_fwd_cuGraphNodeGetType(hNode, type);
}

CUresult crc_hook_cuGraphMemcpyNodeGetParams(CUgraphNode hNode, CUDA_MEMCPY3D *nodeParams)
{
	struct crc_graph_node_req q = {.node = (uintptr_t)hNode};

	if (!nodeParams)
		return CUDA_ERROR_INVALID_VALUE;
	if (crc_stage_node_params(hNode, nodeParams))
		return CUDA_SUCCESS;
	return crc_rpc(CRC_CU_cuGraphMemcpyNodeGetParams, &q, sizeof(q), nodeParams, sizeof(*nodeParams));
}

/* ---- host nodes ---------------------------------------------------------------------------------- */
/* The application's function travels; the daemon's node runs it here (hooks_stream.c). */
static CUresult host_node(uint16_t op, CUgraphNode *out, uint64_t graph, uint64_t node, uint64_t exec,
			  const CUgraphNode *deps, size_t ndeps, const CUDA_HOST_NODE_PARAMS *p)
{
	struct crc_hostfn_req *r;
	struct crc_call c;
	void *args;
	CUresult res;

	if (!p || !p->fn || (ndeps && !deps) || ndeps > 65536)
		return CUDA_ERROR_INVALID_VALUE;
	if (!crc_hostfn_ready()) {
		pr_warn("graph host nodes need the daemon to reach this process: not over TCP");
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	res = crc_call_begin(&c, op, 0, sizeof(struct crc_graph_node_req) + ndeps * 8 + sizeof(*r), &args);
	if (res != CUDA_SUCCESS)
		return res;
	r = node_header(args, graph, node, exec, 0, deps, ndeps);
	*r = (struct crc_hostfn_req){.fn = (uintptr_t)p->fn, .data = (uintptr_t)p->userData};
	return node_call(&c, out);
}

CUresult crc_hook_cuGraphAddHostNode(CUgraphNode *phGraphNode, CUgraph hGraph,
				     const CUgraphNode *dependencies, size_t numDependencies,
				     const CUDA_HOST_NODE_PARAMS *nodeParams)
{
	if (!phGraphNode)
		return CUDA_ERROR_INVALID_VALUE;
	return host_node(CRC_CU_cuGraphAddHostNode, phGraphNode, (uintptr_t)hGraph, 0, 0, dependencies,
			 numDependencies, nodeParams);
}

CUresult crc_hook_cuGraphHostNodeSetParams(CUgraphNode hNode, const CUDA_HOST_NODE_PARAMS *nodeParams)
{
	return host_node(CRC_CU_cuGraphHostNodeSetParams, NULL, 0, (uintptr_t)hNode, 0, NULL, 0, nodeParams);
}

CUresult crc_hook_cuGraphExecHostNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
					       const CUDA_HOST_NODE_PARAMS *nodeParams)
{
	return host_node(CRC_CU_cuGraphExecHostNodeSetParams, NULL, 0, (uintptr_t)hNode,
			 (uintptr_t)hGraphExec, NULL, 0, nodeParams);
}

CUresult crc_hook_cuGraphHostNodeGetParams(CUgraphNode hNode, CUDA_HOST_NODE_PARAMS *nodeParams)
{
	struct crc_graph_node_req q = {.node = (uintptr_t)hNode};
	struct crc_hostfn_req r;
	CUresult res;

	if (!nodeParams)
		return CUDA_ERROR_INVALID_VALUE;
	res = crc_rpc(CRC_CU_cuGraphHostNodeGetParams, &q, sizeof(q), &r, sizeof(r));
	if (res == CUDA_SUCCESS)
		*nodeParams = (CUDA_HOST_NODE_PARAMS){.fn = (CUhostFn)(uintptr_t)r.fn,
						      .userData = (void *)(uintptr_t)r.data};
	return res;
}

/* ---- batch mem-op nodes ------------------------------------------------------------------------------ */
_Static_assert(sizeof(CUstreamBatchMemOpParams) == CRC_MEMOP_BYTES,
	       "crc_graph_memops_wire carries operations");

static CUresult memop_node(uint16_t op, CUgraphNode *out, uint64_t graph, uint64_t node, uint64_t exec,
			   const CUgraphNode *deps, size_t ndeps, const CUDA_BATCH_MEM_OP_NODE_PARAMS *p)
{
	struct crc_graph_memops_wire *w;
	struct crc_call c;
	void *args;
	CUresult res;

	if (!p || !p->count || p->count > CRC_MEMOPS_MAX || !p->paramArray || (ndeps && !deps) ||
	    ndeps > 65536)
		return CUDA_ERROR_INVALID_VALUE;
	res = crc_call_begin(&c, op, 0,
			     sizeof(struct crc_graph_node_req) + ndeps * 8 + sizeof(*w) +
				 p->count * sizeof(*p->paramArray),
			     &args);
	if (res != CUDA_SUCCESS)
		return res;
	w = node_header(args, graph, node, exec, 0, deps, ndeps);
	*w = (struct crc_graph_memops_wire){.ctx = (uintptr_t)p->ctx, .count = p->count, .flags = p->flags};
	memcpy(w + 1, p->paramArray, p->count * sizeof(*p->paramArray));
	return node_call(&c, out);
}

CUresult crc_hook_cuGraphAddBatchMemOpNode(CUgraphNode *phGraphNode, CUgraph hGraph,
					   const CUgraphNode *dependencies, size_t numDependencies,
					   const CUDA_BATCH_MEM_OP_NODE_PARAMS *nodeParams)
{
	if (!phGraphNode)
		return CUDA_ERROR_INVALID_VALUE;
	return memop_node(CRC_CU_cuGraphAddBatchMemOpNode, phGraphNode, (uintptr_t)hGraph, 0, 0, dependencies,
			  numDependencies, nodeParams);
}

CUresult crc_hook_cuGraphBatchMemOpNodeSetParams(CUgraphNode hNode,
						 const CUDA_BATCH_MEM_OP_NODE_PARAMS *nodeParams)
{
	return memop_node(CRC_CU_cuGraphBatchMemOpNodeSetParams, NULL, 0, (uintptr_t)hNode, 0, NULL, 0,
			  nodeParams);
}

CUresult crc_hook_cuGraphExecBatchMemOpNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
						     const CUDA_BATCH_MEM_OP_NODE_PARAMS *nodeParams)
{
	return memop_node(CRC_CU_cuGraphExecBatchMemOpNodeSetParams, NULL, 0, (uintptr_t)hNode,
			  (uintptr_t)hGraphExec, NULL, 0, nodeParams);
}

/* paramArray points into the calling thread's copy, valid until its next call of this function. */
CUresult crc_hook_cuGraphBatchMemOpNodeGetParams(CUgraphNode hNode,
						 CUDA_BATCH_MEM_OP_NODE_PARAMS *nodeParams_out)
{
	static __thread CUstreamBatchMemOpParams tl_ops[CRC_MEMOPS_MAX];
	struct crc_graph_node_req q = {.node = (uintptr_t)hNode};
	const struct crc_graph_memops_wire *w;
	struct crc_call c;
	void *args;
	CUresult res;

	if (!nodeParams_out)
		return CUDA_ERROR_INVALID_VALUE;
	res = crc_call_begin(&c, CRC_CU_cuGraphBatchMemOpNodeGetParams, 0, sizeof(q), &args);
	if (res != CUDA_SUCCESS)
		return res;
	memcpy(args, &q, sizeof(q));
	res = crc_call_wait(&c, NULL, NULL);
	w = c.reply;
	if (res == CUDA_SUCCESS && (c.reply_len < sizeof(*w) || w->count > CRC_MEMOPS_MAX ||
				    c.reply_len < sizeof(*w) + w->count * sizeof(*tl_ops)))
		res = CUDA_ERROR_UNKNOWN;
	if (res == CUDA_SUCCESS) {
		memcpy(tl_ops, w + 1, w->count * sizeof(*tl_ops));
		*nodeParams_out = (CUDA_BATCH_MEM_OP_NODE_PARAMS){.ctx = (CUcontext)(uintptr_t)w->ctx,
								  .count = w->count,
								  .paramArray = tl_ops,
								  .flags = w->flags};
	}
	crc_call_end(&c);
	return res;
}

/* ---- conditional nodes ------------------------------------------------------------------------------ */
/* The bodies' array is "CUDA-owned" and lives as long as the node: kept for the process's life, on a
 * list (what the process still holds, as a leak checker sees it). */
struct kept_bodies {
	struct kept_bodies *next;
	CUgraph graphs[];
};
static struct kept_bodies *kept_bodies;
static pthread_mutex_t kept_bodies_lock = PTHREAD_MUTEX_INITIALIZER;

static CUresult conditional_node(CUgraphNode *ph, CUgraph g, const CUgraphNode *deps, size_t n,
				 CUDA_CONDITIONAL_NODE_PARAMS *p)
{
	struct crc_graph_cond_wire *w;
	struct kept_bodies *kept;
	struct crc_call c;
	CUgraph *bodies;
	void *args;
	CUresult res;

	if (!p->size || p->size > CRC_COND_BODIES_MAX || (n && !deps) || n > 65536)
		return CUDA_ERROR_INVALID_VALUE;
	kept = calloc(1, sizeof(*kept) + p->size * sizeof(CUgraph));
	if (!kept)
		return CUDA_ERROR_OUT_OF_MEMORY;
	bodies = kept->graphs;
	res = crc_call_begin(&c, CRC_CU_cuGraphAddNode, 0,
			     sizeof(struct crc_graph_node_req) + n * 8 + sizeof(*w), &args);
	if (res != CUDA_SUCCESS) {
		free(kept);
		return res;
	}
	w = node_header(args, (uintptr_t)g, 0, 0, 0, deps, n);
	*w = (struct crc_graph_cond_wire){
	    .handle = p->handle, .type = p->type, .size = p->size, .ctx = (uintptr_t)p->ctx};
	res = crc_call_wait(&c, NULL, NULL);
	if (res == CUDA_SUCCESS && c.reply_len < 8 + 8 * (size_t)p->size)
		res = CUDA_ERROR_UNKNOWN;
	if (res == CUDA_SUCCESS) {
		uint64_t v;

		memcpy(&v, c.reply, 8);
		*ph = (CUgraphNode)(uintptr_t)v;
		for (unsigned i = 0; i < p->size; i++) {
			memcpy(&v, (const uint8_t *)c.reply + 8 + 8 * i, 8);
			bodies[i] = (CUgraph)(uintptr_t)v;
		}
		p->phGraph_out = bodies;
		pthread_mutex_lock(&kept_bodies_lock);
		kept->next = kept_bodies;
		kept_bodies = kept;
		pthread_mutex_unlock(&kept_bodies_lock);
	} else {
		free(kept);
	}
	crc_call_end(&c);
	return res;
}

/* ---- kernel node attributes ------------------------------------------------------------------------ */
_Static_assert(sizeof(CUkernelNodeAttrValue) == CRC_KNODE_ATTR_BYTES,
	       "crc_knode_attr carries CUkernelNodeAttrValue");

CUresult crc_hook_cuGraphKernelNodeGetAttribute(CUgraphNode hNode, CUkernelNodeAttrID attr,
						CUkernelNodeAttrValue_v1 *value_out)
{
	struct crc_knode_attr a = {.node = (uintptr_t)hNode, .attr = (uint32_t)attr};
	CUresult res;

	if (!value_out)
		return CUDA_ERROR_INVALID_VALUE;
	res = crc_rpc(CRC_CU_cuGraphKernelNodeGetAttribute, &a, sizeof(a), &a, sizeof(a));
	if (res == CUDA_SUCCESS)
		memcpy(value_out, a.value, sizeof(*value_out));
	return res;
}

CUresult crc_hook_cuGraphKernelNodeSetAttribute(CUgraphNode hNode, CUkernelNodeAttrID attr,
						const CUkernelNodeAttrValue_v1 *value)
{
	struct crc_knode_attr a = {.node = (uintptr_t)hNode, .attr = (uint32_t)attr};

	if (!value)
		return CUDA_ERROR_INVALID_VALUE;
	memcpy(a.value, value, sizeof(*value));
	return crc_rpc(CRC_CU_cuGraphKernelNodeSetAttribute, &a, sizeof(a), NULL, 0);
}

/* ---- user objects ----------------------------------------------------------------------------------- */
/* The destroy callback runs here, as a host function, when the driver drops the last reference. */
CUresult crc_hook_cuUserObjectCreate(CUuserObject *object_out, void *ptr, CUhostFn destroy,
				     unsigned int initialRefcount, unsigned int flags)
{
	struct crc_userobj_req r = {
	    .ptr = (uintptr_t)ptr, .destroy = (uintptr_t)destroy, .refs = initialRefcount, .flags = flags};
	uint64_t v = 0;
	CUresult res;

	if (!object_out || !destroy)
		return CUDA_ERROR_INVALID_VALUE;
	if (!crc_hostfn_ready()) {
		pr_warn("user objects need the daemon to reach this process: not over TCP");
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	res = crc_rpc(CRC_CU_cuUserObjectCreate, &r, sizeof(r), &v, sizeof(v));
	if (res == CUDA_SUCCESS)
		*object_out = (CUuserObject)(uintptr_t)v;
	return res;
}

/* ---- the generic node forms ---------------------------------------------------------------------- */
static bool edges_plain(const CUgraphEdgeData *e, size_t n)
{
	static const CUgraphEdgeData zero;

	for (size_t i = 0; e && i < n; i++)
		if (memcmp(&e[i], &zero, sizeof(zero)))
			return false;
	return true;
}

static CUDA_MEMSET_NODE_PARAMS_v1 memset_v1(const CUDA_MEMSET_NODE_PARAMS_v2 *m)
{
	return (CUDA_MEMSET_NODE_PARAMS_v1){.dst = m->dst,
					    .pitch = m->pitch,
					    .value = m->value,
					    .elementSize = m->elementSize,
					    .width = m->width,
					    .height = m->height};
}

static CUDA_HOST_NODE_PARAMS host_v1(const CUDA_HOST_NODE_PARAMS_v2 *h)
{
	return (CUDA_HOST_NODE_PARAMS){.fn = h->fn, .userData = h->userData};
}

static CUresult add_node(CUgraphNode *ph, CUgraph g, const CUgraphNode *deps, size_t n, CUgraphNodeParams *p)
{
	CUDA_MEMSET_NODE_PARAMS_v1 ms;
	CUDA_HOST_NODE_PARAMS hp;

	switch (p->type) {
	case CU_GRAPH_NODE_TYPE_KERNEL:
		return crc_hook_cuGraphAddKernelNode_v2(ph, g, deps, n,
							(const CUDA_KERNEL_NODE_PARAMS_v2 *)&p->kernel);
	case CU_GRAPH_NODE_TYPE_MEMCPY:
		return crc_hook_cuGraphAddMemcpyNode(ph, g, deps, n, &p->memcpy.copyParams,
						     p->memcpy.copyCtx);
	case CU_GRAPH_NODE_TYPE_MEMSET:
		ms = memset_v1(&p->memset);
		return crc_fwd_cuGraphAddMemsetNode(ph, g, deps, n, &ms, p->memset.ctx);
	case CU_GRAPH_NODE_TYPE_EMPTY:
		return crc_fwd_cuGraphAddEmptyNode(ph, g, deps, n);
	case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
		return crc_fwd_cuGraphAddEventRecordNode(ph, g, deps, n, p->eventRecord.event);
	case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
		return crc_fwd_cuGraphAddEventWaitNode(ph, g, deps, n, p->eventWait.event);
	case CU_GRAPH_NODE_TYPE_GRAPH:
		return crc_hook_cuGraphAddChildGraphNode(ph, g, deps, n, p->graph.graph);
	case CU_GRAPH_NODE_TYPE_HOST:
		hp = host_v1(&p->host);
		return crc_hook_cuGraphAddHostNode(ph, g, deps, n, &hp);
	case CU_GRAPH_NODE_TYPE_MEM_ALLOC:
		return crc_hook_cuGraphAddMemAllocNode(ph, g, deps, n,
						       (CUDA_MEM_ALLOC_NODE_PARAMS *)&p->alloc);
	case CU_GRAPH_NODE_TYPE_MEM_FREE:
		return crc_hook_cuGraphAddMemFreeNode(ph, g, deps, n, p->free.dptr);
	case CU_GRAPH_NODE_TYPE_CONDITIONAL:
		return conditional_node(ph, g, deps, n, &p->conditional);
	case CU_GRAPH_NODE_TYPE_BATCH_MEM_OP:
		return crc_hook_cuGraphAddBatchMemOpNode(ph, g, deps, n,
							 (const CUDA_BATCH_MEM_OP_NODE_PARAMS *)&p->memOp);
	default:
		pr_warn("cuGraphAddNode of node type %d is not supported under crcuda yet", (int)p->type);
		return CUDA_ERROR_NOT_SUPPORTED;
	}
}

CUresult crc_hook_cuGraphAddNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
				 size_t numDependencies, CUgraphNodeParams *nodeParams)
{
	if (!nodeParams || !phGraphNode)
		return CUDA_ERROR_INVALID_VALUE;
	return add_node(phGraphNode, hGraph, dependencies, numDependencies, nodeParams);
}

CUresult crc_hook_cuGraphAddNode_v2(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
				    const CUgraphEdgeData *dependencyData, size_t numDependencies,
				    CUgraphNodeParams *nodeParams)
{
	CUresult res;

	if (!nodeParams || !phGraphNode || (numDependencies && !dependencies))
		return CUDA_ERROR_INVALID_VALUE;
	if (edges_plain(dependencyData, numDependencies))
		return add_node(phGraphNode, hGraph, dependencies, numDependencies, nodeParams);
	/* Edges with data: the node first, then its incoming edges. */
	res = add_node(phGraphNode, hGraph, NULL, 0, nodeParams);
	for (size_t i = 0; res == CUDA_SUCCESS && i < numDependencies; i++)
		res = crc_fwd_cuGraphAddDependencies_v2(hGraph, &dependencies[i], phGraphNode,
							&dependencyData[i], 1);
	return res;
}

CUresult crc_hook_cuGraphNodeSetParams(CUgraphNode hNode, CUgraphNodeParams *nodeParams)
{
	CUDA_MEMSET_NODE_PARAMS_v1 ms;
	CUDA_HOST_NODE_PARAMS hp;

	if (!nodeParams)
		return CUDA_ERROR_INVALID_VALUE;
	switch (nodeParams->type) {
	case CU_GRAPH_NODE_TYPE_KERNEL:
		return crc_hook_cuGraphKernelNodeSetParams_v2(
		    hNode, (const CUDA_KERNEL_NODE_PARAMS_v2 *)&nodeParams->kernel);
	case CU_GRAPH_NODE_TYPE_MEMCPY:
		return crc_hook_cuGraphMemcpyNodeSetParams(hNode, &nodeParams->memcpy.copyParams);
	case CU_GRAPH_NODE_TYPE_MEMSET:
		ms = memset_v1(&nodeParams->memset);
		return crc_fwd_cuGraphMemsetNodeSetParams(hNode, &ms);
	case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
		return crc_fwd_cuGraphEventRecordNodeSetEvent(hNode, nodeParams->eventRecord.event);
	case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
		return crc_fwd_cuGraphEventWaitNodeSetEvent(hNode, nodeParams->eventWait.event);
	case CU_GRAPH_NODE_TYPE_HOST:
		hp = host_v1(&nodeParams->host);
		return crc_hook_cuGraphHostNodeSetParams(hNode, &hp);
	default:
		pr_warn("cuGraphNodeSetParams of node type %d is not supported under crcuda yet",
			(int)nodeParams->type);
		return CUDA_ERROR_NOT_SUPPORTED;
	}
}

CUresult crc_hook_cuGraphExecNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
					   CUgraphNodeParams *nodeParams)
{
	CUDA_HOST_NODE_PARAMS hp;
	CUDA_MEMSET_NODE_PARAMS_v1 ms;

	if (!nodeParams)
		return CUDA_ERROR_INVALID_VALUE;
	switch (nodeParams->type) {
	case CU_GRAPH_NODE_TYPE_KERNEL:
		return crc_hook_cuGraphExecKernelNodeSetParams_v2(
		    hGraphExec, hNode, (const CUDA_KERNEL_NODE_PARAMS_v2 *)&nodeParams->kernel);
	case CU_GRAPH_NODE_TYPE_MEMCPY:
		return crc_hook_cuGraphExecMemcpyNodeSetParams(
		    hGraphExec, hNode, &nodeParams->memcpy.copyParams, nodeParams->memcpy.copyCtx);
	case CU_GRAPH_NODE_TYPE_MEMSET:
		ms = memset_v1(&nodeParams->memset);
		return crc_fwd_cuGraphExecMemsetNodeSetParams(hGraphExec, hNode, &ms, nodeParams->memset.ctx);
	case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
		return crc_fwd_cuGraphExecEventRecordNodeSetEvent(hGraphExec, hNode,
								  nodeParams->eventRecord.event);
	case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
		return crc_fwd_cuGraphExecEventWaitNodeSetEvent(hGraphExec, hNode,
								nodeParams->eventWait.event);
	case CU_GRAPH_NODE_TYPE_GRAPH:
		return crc_fwd_cuGraphExecChildGraphNodeSetParams(hGraphExec, hNode, nodeParams->graph.graph);
	case CU_GRAPH_NODE_TYPE_HOST:
		hp = host_v1(&nodeParams->host);
		return crc_hook_cuGraphExecHostNodeSetParams(hGraphExec, hNode, &hp);
	default:
		pr_warn("cuGraphExecNodeSetParams of node type %d is not supported under crcuda yet",
			(int)nodeParams->type);
		return CUDA_ERROR_NOT_SUPPORTED;
	}
}
