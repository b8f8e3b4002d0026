/* Graph copies with pageable host memory. The graph runs in the daemon, which cannot reach this
 * process's pageable memory; natively the driver stages such a copy itself. Here the copy becomes a
 * child graph of the same meaning: a host node (run in this process, hooks_stream.c) copies the
 * application's bytes into page-locked memory the daemon maps, then the copy runs from there; or the
 * copy runs into page-locked memory and a host node copies it out. The node the application holds is
 * the child graph node; its type and parameters are answered as the copy's. A stream capture gets the
 * same three steps as captured stream work.
 *
 * Staging buffers are keyed by the host side (address and layout), so a program that builds its graphs
 * in a loop over the same buffers reuses them; they are never freed (graphs and their executables may
 * outlive the application's graph handle). Two graphs that copy the same host buffer at the same
 * time share its staging buffer: natively such copies race on the host buffer itself. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "crcuda/copy2d.h"
#include "crcuda/log.h"
#include "crcuda/proto.h"
#include "hooks.h"

/* One host side of a copy, and its page-locked mirror with the same layout from the first byte. */
struct stage {
	uint8_t *app, *buf;
	size_t width, pitch, slice_rows, rows, depth;
	struct stage *next;
};

/* The application's node (a child graph node) and the copy it stands for. */
struct staged_node {
	CUgraphNode node;
	CUDA_MEMCPY3D copy;
	struct staged_node *next;
};

static pthread_mutex_t stage_lock = PTHREAD_MUTEX_INITIALIZER;
static struct stage *stages;
static struct staged_node *staged_nodes;

static void stage_each_row(const struct stage *s, bool to_app)
{
	for (size_t d = 0; d < s->depth; d++)
		for (size_t h = 0; h < s->rows; h++) {
			size_t off = (d * s->slice_rows + h) * s->pitch;

			if (to_app)
				memcpy(s->app + off, s->buf + off, s->width);
			else
				memcpy(s->buf + off, s->app + off, s->width);
		}
}

static void CUDA_CB stage_in(void *arg)
{
	stage_each_row(arg, false);
}

static void CUDA_CB stage_out(void *arg)
{
	stage_each_row(arg, true);
}

/* A host side the daemon cannot reach: pageable memory of this process. */
static bool pageable(CUmemorytype type, const void *host, CUdeviceptr dev)
{
	uint64_t p = type == CU_MEMORYTYPE_HOST ? (uintptr_t)host : dev;

	if (type != CU_MEMORYTYPE_HOST && type != CU_MEMORYTYPE_UNIFIED)
		return false;
	return !crc_client.tcp && crc_locate(p, 1) == CRC_LOC_INLINE;
}

bool crc_stage_wanted(const CUDA_MEMCPY3D *p)
{
	return p && (pageable(p->srcMemoryType, p->srcHost, p->srcDevice) ||
		     pageable(p->dstMemoryType, p->dstHost, p->dstDevice));
}

/* Page-locked memory, also while this thread captures in the global mode (which forbids allocating
 * it): the application asked for a copy, not an allocation. */
static CUresult stage_alloc(void **buf, size_t bytes)
{
	CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
	CUresult res = crc_hook_cuThreadExchangeStreamCaptureMode(&mode);

	if (res != CUDA_SUCCESS)
		return res;
	res = crc_hook_cuMemAllocHost_v2(buf, bytes);
	crc_hook_cuThreadExchangeStreamCaptureMode(&mode);
	return res;
}

/* The stage of one host side (x, y, z, pointer, pitch, height of the copy's layout). */
static struct stage *stage_of(const CUDA_MEMCPY3D *p, size_t x, size_t y, size_t z, const void *host,
			      size_t pitch, size_t slice_rows)
{
	struct stage key, *s;
	size_t span;
	void *buf;

	key = (struct stage){.width = p->WidthInBytes,
			     .pitch = pitch ? pitch : p->WidthInBytes,
			     .rows = p->Height ? p->Height : 1,
			     .depth = p->Depth ? p->Depth : 1};
	key.slice_rows = slice_rows ? slice_rows : key.rows;
	key.app = (uint8_t *)host + x + (y + z * key.slice_rows) * key.pitch;
	if (!key.width || key.pitch < key.width || key.slice_rows < key.rows)
		return NULL;
	span = crc_copy3d_extent(key.width, key.rows, key.depth, key.pitch, key.slice_rows);
	pthread_mutex_lock(&stage_lock);
	for (s = stages; s; s = s->next)
		if (s->app == key.app && s->width == key.width && s->pitch == key.pitch &&
		    s->slice_rows == key.slice_rows && s->rows == key.rows && s->depth == key.depth)
			break;
	pthread_mutex_unlock(&stage_lock);
	if (s)
		return s;
	s = malloc(sizeof(*s));
	if (!s || stage_alloc(&buf, span) != CUDA_SUCCESS) {
		free(s);
		return NULL;
	}
	*s = key;
	s->buf = buf;
	pthread_mutex_lock(&stage_lock);
	s->next = stages;
	stages = s;
	pthread_mutex_unlock(&stage_lock);
	return s;
}

/* The copy p with its pageable sides replaced by their stages (in, out: NULL where none). */
static CUresult staged_copy(const CUDA_MEMCPY3D *p, CUDA_MEMCPY3D *q, struct stage **in, struct stage **out)
{
	*q = *p;
	*in = *out = NULL;
	if (pageable(p->srcMemoryType, p->srcHost, p->srcDevice)) {
		*in = stage_of(p, p->srcXInBytes, p->srcY, p->srcZ,
			       p->srcMemoryType == CU_MEMORYTYPE_HOST ? p->srcHost
								      : (const void *)(uintptr_t)p->srcDevice,
			       p->srcPitch, p->srcHeight);
		if (!*in)
			return CUDA_ERROR_INVALID_VALUE;
		q->srcMemoryType = CU_MEMORYTYPE_HOST;
		q->srcHost = (*in)->buf;
		q->srcDevice = 0;
		q->srcXInBytes = q->srcY = q->srcZ = 0;
		q->srcPitch = (*in)->pitch;
		q->srcHeight = (*in)->slice_rows;
	}
	if (pageable(p->dstMemoryType, p->dstHost, p->dstDevice)) {
		*out = stage_of(p, p->dstXInBytes, p->dstY, p->dstZ,
				p->dstMemoryType == CU_MEMORYTYPE_HOST ? p->dstHost
								       : (void *)(uintptr_t)p->dstDevice,
				p->dstPitch, p->dstHeight);
		if (!*out)
			return CUDA_ERROR_INVALID_VALUE;
		q->dstMemoryType = CU_MEMORYTYPE_HOST;
		q->dstHost = (*out)->buf;
		q->dstDevice = 0;
		q->dstXInBytes = q->dstY = q->dstZ = 0;
		q->dstPitch = (*out)->pitch;
		q->dstHeight = (*out)->slice_rows;
	}
	return CUDA_SUCCESS;
}

/* A child graph: [stage in ->] copy [-> stage out]. */
static CUresult stage_graph(const CUDA_MEMCPY3D *p, CUcontext ctx, CUgraph *child)
{
	struct stage *in, *out;
	CUgraphNode prev = NULL, node;
	CUDA_MEMCPY3D q;
	CUresult res = staged_copy(p, &q, &in, &out);

	if (res == CUDA_SUCCESS)
		res = crc_fwd_cuGraphCreate(child, 0);
	if (res != CUDA_SUCCESS)
		return res;
	if (in) {
		CUDA_HOST_NODE_PARAMS h = {.fn = stage_in, .userData = in};

		res = crc_hook_cuGraphAddHostNode(&prev, *child, NULL, 0, &h);
	}
	if (res == CUDA_SUCCESS)
		res =
		    crc_hook_cuGraphAddMemcpyNode(&node, *child, prev ? &prev : NULL, prev ? 1 : 0, &q, ctx);
	if (res == CUDA_SUCCESS && out) {
		CUDA_HOST_NODE_PARAMS h = {.fn = stage_out, .userData = out};

		res = crc_hook_cuGraphAddHostNode(&prev, *child, &node, 1, &h);
	}
	if (res != CUDA_SUCCESS)
		crc_fwd_cuGraphDestroy(*child);
	return res;
}

static struct staged_node *find_node(CUgraphNode node)
{
	struct staged_node *n;

	pthread_mutex_lock(&stage_lock);
	for (n = staged_nodes; n && n->node != node; n = n->next)
		;
	pthread_mutex_unlock(&stage_lock);
	return n;
}

CUresult crc_stage_add_node(CUgraphNode *out, CUgraph graph, const CUgraphNode *deps, size_t ndeps,
			    const CUDA_MEMCPY3D *p, CUcontext ctx)
{
	struct staged_node *n = malloc(sizeof(*n));
	CUgraph child;
	CUresult res = n ? stage_graph(p, ctx, &child) : CUDA_ERROR_OUT_OF_MEMORY;

	if (res == CUDA_SUCCESS) {
		res = crc_fwd_cuGraphAddChildGraphNode(out, graph, deps, ndeps, child);
		crc_fwd_cuGraphDestroy(child);
	}
	if (res != CUDA_SUCCESS) {
		free(n);
		return res;
	}
	*n = (struct staged_node){.node = *out, .copy = *p};
	pthread_mutex_lock(&stage_lock);
	n->next = staged_nodes;
	staged_nodes = n;
	pthread_mutex_unlock(&stage_lock);
	return CUDA_SUCCESS;
}

bool crc_stage_node_params(CUgraphNode node, CUDA_MEMCPY3D *p)
{
	struct staged_node *n = find_node(node);

	if (n && p)
		*p = n->copy;
	return n != NULL;
}

/* The same sides staged: the child graph keeps its shape (a new stage may replace the old). */
static bool same_shape(const CUDA_MEMCPY3D *a, const CUDA_MEMCPY3D *b)
{
	return pageable(a->srcMemoryType, a->srcHost, a->srcDevice) ==
		   pageable(b->srcMemoryType, b->srcHost, b->srcDevice) &&
	       pageable(a->dstMemoryType, a->dstHost, a->dstDevice) ==
		   pageable(b->dstMemoryType, b->dstHost, b->dstDevice);
}

/* New parameters for a staged node, in its graph (exec 0) or in one executable graph. */
CUresult crc_stage_set_params(CUgraphExec exec, CUgraphNode node, const CUDA_MEMCPY3D *p, CUcontext ctx)
{
	struct staged_node *n = find_node(node);
	CUgraph child;
	CUresult res;

	if (!n || !p)
		return CUDA_ERROR_INVALID_VALUE;
	/* The driver's rule for executable graphs: 1D copies only. */
	if (exec && ((n->copy.Height > 1 || n->copy.Depth > 1) || (p->Height > 1 || p->Depth > 1)))
		return CUDA_ERROR_INVALID_VALUE;
	if (!same_shape(&n->copy, p)) {
		pr_warn(
		    "a graph copy with pageable host memory cannot become one with another kind of memory "
		    "under crcuda: the node is a staged copy");
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	res = stage_graph(p, ctx, &child);
	if (res != CUDA_SUCCESS)
		return res;
	if (exec) {
		res = crc_fwd_cuGraphExecChildGraphNodeSetParams(exec, node, child);
	} else {
		/* The graph's node: its embedded graph takes the new nodes' parameters, node by node. */
		CUgraph embedded;
		CUgraphNode old[3], fresh[3];
		size_t nold = 3, nfresh = 3;

		res = crc_fwd_cuGraphChildGraphNodeGetGraph(node, &embedded);
		if (res == CUDA_SUCCESS)
			res = crc_fwd_cuGraphGetNodes(embedded, old, &nold);
		if (res == CUDA_SUCCESS)
			res = crc_fwd_cuGraphGetNodes(child, fresh, &nfresh);
		if (res == CUDA_SUCCESS && nold != nfresh)
			res = CUDA_ERROR_INVALID_VALUE;
		for (size_t i = 0; res == CUDA_SUCCESS && i < nold; i++) {
			CUDA_HOST_NODE_PARAMS h;
			CUDA_MEMCPY3D c;

			if (crc_hook_cuGraphHostNodeGetParams(fresh[i], &h) == CUDA_SUCCESS)
				res = crc_hook_cuGraphHostNodeSetParams(old[i], &h);
			else if ((res = crc_hook_cuGraphMemcpyNodeGetParams(fresh[i], &c)) == CUDA_SUCCESS)
				res = crc_hook_cuGraphMemcpyNodeSetParams(old[i], &c);
		}
	}
	crc_fwd_cuGraphDestroy(child);
	if (res == CUDA_SUCCESS && !exec)
		n->copy = *p;
	return res;
}

/* A copy on a capturing stream with a pageable side: captured as stage in, copy, stage out. */
CUresult crc_stage_capture(CUstream stream, uint64_t dst, uint64_t src, size_t bytes,
			   CUresult (*copy)(uint64_t dst, uint64_t src, size_t bytes, CUstream stream))
{
	CUDA_MEMCPY3D p = {.srcMemoryType = CU_MEMORYTYPE_UNIFIED,
			   .srcDevice = src,
			   .dstMemoryType = CU_MEMORYTYPE_UNIFIED,
			   .dstDevice = dst,
			   .WidthInBytes = bytes,
			   .Height = 1,
			   .Depth = 1},
		      q;
	struct stage *in, *out;
	CUresult res = staged_copy(&p, &q, &in, &out);

	if (res == CUDA_SUCCESS && in)
		res = crc_hook_cuLaunchHostFunc(stream, stage_in, in);
	if (res == CUDA_SUCCESS)
		res = copy(q.dstMemoryType == CU_MEMORYTYPE_HOST ? (uintptr_t)q.dstHost : q.dstDevice,
			   q.srcMemoryType == CU_MEMORYTYPE_HOST ? (uintptr_t)q.srcHost : q.srcDevice, bytes,
			   stream);
	if (res == CUDA_SUCCESS && out)
		res = crc_hook_cuLaunchHostFunc(stream, stage_out, out);
	return res;
}
