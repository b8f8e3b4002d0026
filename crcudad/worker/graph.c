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

_Static_assert(sizeof(CUkernelNodeAttrValue) == CRC_KNODE_ATTR_BYTES,
	       "crc_knode_attr carries CUkernelNodeAttrValue");

/* The kernel node attributes a checkpoint keeps (those valid for graph nodes): a captured launch's
 * cluster dimension or cooperative flag changes what the kernel computes. */
static const CUkernelNodeAttrID node_attrs[] = {
    CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW,
    CU_LAUNCH_ATTRIBUTE_COOPERATIVE,
    CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION,
    CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE,
    CU_LAUNCH_ATTRIBUTE_PRIORITY,
    CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP,
    CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN,
    CU_LAUNCH_ATTRIBUTE_PREFERRED_CLUSTER_DIMENSION,
    CU_LAUNCH_ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE,
    CU_LAUNCH_ATTRIBUTE_NVLINK_UTIL_CENTRIC_SCHEDULING,
};

_Static_assert(sizeof(CUDA_MEMCPY3D) == CRC_MEMCPY3D_BYTES, "crc_graph_memcpy_wire carries a CUDA_MEMCPY3D");

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

/* node_req, then the fixed part that follows the dependencies (size bytes) copied into wire. */
static CUresult node_req_wire(struct crc_session *s, const struct crc_call_hdr *h, const uint8_t *args,
			      size_t len, struct node_req *nr, void *wire, size_t size)
{
	CUresult res = node_req(s, h, args, len, nr);

	if (res == CUDA_SUCCESS && nr->rest_len < size)
		res = CUDA_ERROR_INVALID_VALUE;
	if (res == CUDA_SUCCESS)
		memcpy(wire, nr->rest, size);
	return res;
}

/* A new node's handle in the reply. */
static CUresult reply_node(struct crc_session *s, CUgraphNode node)
{
	uint64_t *out = crc_out(s, 8);

	if (!out)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*out = crc_handle_of(s, CRC_HT_GRAPHNODE, node);
	return CUDA_SUCCESS;
}

/* Application node handles, each with a node of the session's own. */
struct node_map {
	uint64_t *vh;
	CUgraphNode *node;
	size_t n;
};

/* An executable graph cannot be read back from the driver: each one keeps a clone of the graph it was
 * instantiated from (its shadow), which a checkpoint describes and a restore instantiates again. */
struct crc_gexec {
	CUgraphExec exec;
	CUgraph shadow;
	uint64_t flags;
	bool modified;	     /* changed in a way the shadow cannot say (a node disabled) */
	char no_shadow[256]; /* why the graph could not be copied (shadow NULL) */
	/* The application names an executable graph's nodes by the nodes of the graph it was instantiated
	 * from, also after an update. drv: for one a restore rebuilt from its shadow, the shadow's node the
	 * driver takes for each application node. sh: the shadow's node for each, once the shadow is no
	 * clone of that graph (after a restore or an update); until then cuGraphNodeFindInClone says. */
	struct node_map drv, sh;
	struct node_map off; /* the application's nodes disabled in it (cuGraphNodeSetEnabled 0) */
	/* A restored one updated since: the graph it was instantiated from, kept while it lives, as its
	 * nodes (drv) name the executable graph's nodes to the driver. */
	CUgraph origin;
	struct crc_gexec *next;
};
static struct crc_gexec *gexec_find(struct crc_session *s, CUgraphExec exec);
static CUgraphNode shadow_target(struct crc_session *s, struct crc_gexec *x, CUgraphNode node);
static CUgraphNode exec_target(struct crc_session *s, struct crc_gexec *x, CUgraphNode node);

/* What a node request does with its parameters, by the op: add a node (its handle in the reply), set
 * a node's parameters, or an executable graph's node's (and its shadow's). */
static CUresult node_apply(struct crc_session *s, const struct node_req *nr, CUgraphNodeParams *p)
{
	CUgraphNode node = NULL;
	CUresult res;

	switch (s->msg->op) {
	case CRC_CU_cuGraphAddKernelNode_v2:
	case CRC_CU_cuGraphAddMemcpyNode:
	case CRC_CU_cuGraphAddHostNode:
		res = CALL(cuGraphAddNode, &node, nr->graph, nr->deps, nr->ndeps, p);
		return res == CUDA_SUCCESS ? reply_node(s, node) : res;
	case CRC_CU_cuGraphKernelNodeSetParams_v2:
	case CRC_CU_cuGraphMemcpyNodeSetParams:
	case CRC_CU_cuGraphHostNodeSetParams:
		return CALL(cuGraphNodeSetParams, nr->node, p);
	default: {
		struct crc_gexec *x = gexec_find(s, nr->exec);
		CUgraphNode sn;

		res = CALL(cuGraphExecNodeSetParams, nr->exec, exec_target(s, x, nr->node), p);
		if (res != CUDA_SUCCESS || !x || x->modified)
			return res;
		/* The shadow's node gets the same parameters (see crc_graph_exec_changed). */
		sn = shadow_target(s, x, nr->node);
		if (!sn || CALL(cuGraphNodeSetParams, sn, p) != CUDA_SUCCESS)
			x->modified = true;
		return res;
	}
	}
}

/* ---- kernel nodes --------------------------------------------------------------------------------- */
CUresult crc_raw_graph_kernel(struct crc_session *s, const struct crc_call_hdr *h, const uint8_t *args,
			      size_t len)
{
	struct node_req nr;
	struct crc_launch_args la;
	CUgraphNodeParams p = {.type = CU_GRAPH_NODE_TYPE_KERNEL};
	CUresult res = node_req(s, h, args, len, &nr);

	if (res == CUDA_SUCCESS)
		res = crc_launch_decode(s, h, nr.rest, nr.rest_len, &la);
	if (res != CUDA_SUCCESS)
		goto out;
	p.kernel = (CUDA_KERNEL_NODE_PARAMS_v3){.gridDimX = la.req->grid[0],
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
		p.kernel.kern = la.func;
		p.kernel.ctx = nr.ctx;
	} else {
		p.kernel.func = la.func;
	}
	res = node_apply(s, &nr, &p);
out:
	free(nr.deps);
	return res;
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
	CUgraphNodeParams p = {.type = CU_GRAPH_NODE_TYPE_MEMCPY};
	CUresult res = node_req_wire(s, h, args, len, &nr, &p.memcpy.copyParams, sizeof(p.memcpy.copyParams));

	if (res != CUDA_SUCCESS)
		goto out;
	p.memcpy.copyCtx = nr.ctx;
	if (p.memcpy.copyParams.srcMemoryType == CU_MEMORYTYPE_ARRAY ||
	    p.memcpy.copyParams.dstMemoryType == CU_MEMORYTYPE_ARRAY) {
		res = CUDA_ERROR_NOT_SUPPORTED;
		goto out;
	}
	res = memcpy_sides(s, &p.memcpy.copyParams, false);
	if (res == CUDA_SUCCESS)
		res = node_apply(s, &nr, &p);
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

/* ---- host nodes ------------------------------------------------------------------------------------- */
CUresult crc_raw_graph_host(struct crc_session *s, const struct crc_call_hdr *h, const uint8_t *args,
			    size_t len)
{
	struct crc_hostfn_req r;
	CUDA_HOST_NODE_PARAMS hp;
	CUgraphNodeParams p = {.type = CU_GRAPH_NODE_TYPE_HOST};
	struct node_req nr;
	CUresult res = node_req_wire(s, h, args, len, &nr, &r, sizeof(r));

	if (res != CUDA_SUCCESS)
		goto out;
	if (!r.fn || s->tcp) {
		res = r.fn ? CUDA_ERROR_NOT_SUPPORTED : CUDA_ERROR_INVALID_VALUE;
		goto out;
	}
	res = crc_hostfn_node_params(s, r.fn, r.data, &hp);
	if (res != CUDA_SUCCESS)
		goto out;
	p.host.fn = hp.fn;
	p.host.userData = hp.userData;
	res = node_apply(s, &nr, &p);
out:
	free(nr.deps);
	return res;
}

CUresult crc_raw_graph_host_get(struct crc_session *s, const struct crc_call_hdr *h, const uint8_t *args,
				size_t len)
{
	CUDA_HOST_NODE_PARAMS p;
	struct crc_hostfn_req *out;
	struct node_req nr;
	CUresult res = node_req(s, h, args, len, &nr);

	free(nr.deps);
	if (res == CUDA_SUCCESS)
		res = CALL(cuGraphHostNodeGetParams, nr.node, &p);
	if (res != CUDA_SUCCESS)
		return res;
	out = crc_out(s, sizeof(*out));
	if (!out)
		return CUDA_ERROR_OUT_OF_MEMORY;
	if (!crc_hostfn_of(&p, &out->fn, &out->data))
		return CUDA_ERROR_NOT_SUPPORTED;
	return CUDA_SUCCESS;
}

/* ---- batch mem-op nodes ---------------------------------------------------------------------------- */
_Static_assert(sizeof(CUstreamBatchMemOpParams) == CRC_MEMOP_BYTES,
	       "crc_graph_memops_wire carries operations");

/* The operations travel as they are: their addresses are device addresses, the same here. */
CUresult crc_raw_graph_memops(struct crc_session *s, const struct crc_call_hdr *h, const uint8_t *args,
			      size_t len)
{
	struct crc_graph_memops_wire w;
	CUDA_BATCH_MEM_OP_NODE_PARAMS p = {0};
	CUstreamBatchMemOpParams *ops = NULL;
	CUgraphNode node = NULL;
	union crc_slot ctx;
	struct node_req nr;
	CUresult res = node_req_wire(s, h, args, len, &nr, &w, sizeof(w));

	if (res == CUDA_SUCCESS &&
	    (!w.count || w.count > CRC_MEMOPS_MAX || (nr.rest_len - sizeof(w)) / sizeof(*ops) < w.count))
		res = CUDA_ERROR_INVALID_VALUE;
	if (res == CUDA_SUCCESS)
		res = crc_translate(s, h, CRC_HT_CTX, w.ctx, &ctx);
	if (res == CUDA_SUCCESS && !(ops = malloc(w.count * sizeof(*ops))))
		res = CUDA_ERROR_OUT_OF_MEMORY;
	if (res != CUDA_SUCCESS)
		goto out;
	memcpy(ops, nr.rest + sizeof(w), w.count * sizeof(*ops));
	p = (CUDA_BATCH_MEM_OP_NODE_PARAMS){
	    .ctx = ctx.ptr, .count = w.count, .paramArray = ops, .flags = w.flags};
	switch (s->msg->op) {
	case CRC_CU_cuGraphAddBatchMemOpNode:
		res = CALL(cuGraphAddBatchMemOpNode, &node, nr.graph, nr.deps, nr.ndeps, &p);
		if (res == CUDA_SUCCESS)
			res = reply_node(s, node);
		break;
	case CRC_CU_cuGraphBatchMemOpNodeSetParams:
		res = CALL(cuGraphBatchMemOpNodeSetParams, nr.node, &p);
		break;
	default: {
		struct crc_gexec *x = gexec_find(s, nr.exec);
		CUgraphNode sn;

		res = CALL(cuGraphExecBatchMemOpNodeSetParams, nr.exec, exec_target(s, x, nr.node), &p);
		if (res != CUDA_SUCCESS || !x || x->modified)
			break;
		/* The shadow's node gets the same parameters (see crc_graph_exec_changed). */
		sn = shadow_target(s, x, nr.node);
		if (!sn || CALL(cuGraphBatchMemOpNodeSetParams, sn, &p) != CUDA_SUCCESS)
			x->modified = true;
	}
	}
out:
	free(ops);
	free(nr.deps);
	return res;
}

CUresult crc_raw_graph_memops_get(struct crc_session *s, const struct crc_call_hdr *h, const uint8_t *args,
				  size_t len)
{
	CUDA_BATCH_MEM_OP_NODE_PARAMS p;
	struct crc_graph_memops_wire *w;
	struct node_req nr;
	CUresult res = node_req(s, h, args, len, &nr);

	free(nr.deps);
	if (res == CUDA_SUCCESS)
		res = CALL(cuGraphBatchMemOpNodeGetParams, nr.node, &p);
	if (res == CUDA_SUCCESS && p.count > CRC_MEMOPS_MAX)
		res = CUDA_ERROR_NOT_SUPPORTED;
	if (res != CUDA_SUCCESS)
		return res;
	w = crc_out(s, sizeof(*w) + p.count * sizeof(*p.paramArray));
	if (!w)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*w = (struct crc_graph_memops_wire){
	    .ctx = crc_find_handle(s, CRC_HT_CTX, p.ctx), .count = p.count, .flags = p.flags};
	memcpy(w + 1, p.paramArray, p.count * sizeof(*p.paramArray));
	return CUDA_SUCCESS;
}

/* ---- conditional nodes ------------------------------------------------------------------------------ */
/* The driver has no call that reads a conditional node's parameters or bodies, nor a handle's default:
 * the session records them when they are made, for checkpoints to describe. A handle is an index into
 * its graph's handles, from 1 in creation order (measured: tests/gpu/probe_cond_handle.c), so a rebuild
 * that makes a graph's handles again in the same order gets the same values, which kernels hold. */
struct crc_cond_handle {
	CUgraph graph;
	uint64_t value, ctx; /* ctx: the client's handle */
	uint32_t dflt, flags;
	struct crc_cond_handle *next;
};

struct crc_cond_node {
	CUgraphNode node;
	CUgraph graph;
	uint64_t handle, ctx;
	uint32_t type, size;
	CUgraph *bodies;
	struct crc_cond_node *next;
};

static CUresult cond_handle_record(struct crc_session *s, CUgraph g, uint64_t value, uint64_t ctx,
				   uint32_t dflt, uint32_t flags)
{
	struct crc_cond_handle *c = calloc(1, sizeof(*c)), **tail = &s->cond_handles;

	if (!c)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*c = (struct crc_cond_handle){.graph = g, .value = value, .ctx = ctx, .dflt = dflt, .flags = flags};
	while (*tail) /* creation order, which a rebuild repeats */
		tail = &(*tail)->next;
	*tail = c;
	return CUDA_SUCCESS;
}

static CUresult cond_node_record(struct crc_session *s, CUgraphNode node, CUgraph g, uint64_t handle,
				 uint64_t ctx, uint32_t type, uint32_t size, CUgraph *bodies)
{
	struct crc_cond_node *c = calloc(1, sizeof(*c));

	if (!c || !(c->bodies = calloc(size, sizeof(*c->bodies)))) {
		free(c);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	memcpy(c->bodies, bodies, size * sizeof(*bodies));
	c->node = node;
	c->graph = g;
	c->handle = handle;
	c->ctx = ctx;
	c->type = type;
	c->size = size;
	c->next = s->cond_nodes;
	s->cond_nodes = c;
	return CUDA_SUCCESS;
}

static struct crc_cond_node *cond_node_find(struct crc_session *s, CUgraphNode node)
{
	for (struct crc_cond_node *c = s->cond_nodes; c; c = c->next)
		if (c->node == node)
			return c;
	return NULL;
}

static bool graph_is_body(struct crc_session *s, CUgraph g)
{
	for (struct crc_cond_node *c = s->cond_nodes; c; c = c->next)
		for (uint32_t i = 0; i < c->size; i++)
			if (c->bodies[i] == g)
				return true;
	return false;
}

static bool graph_has_cond(struct crc_session *s, CUgraph g)
{
	for (struct crc_cond_node *c = s->cond_nodes; c; c = c->next)
		if (c->graph == g)
			return true;
	return false;
}

static void cond_forget_node(struct crc_session *s, struct crc_cond_node *c);

/* A graph going away: its records and its conditional nodes' bodies' go with it. */
static void cond_forget_graph(struct crc_session *s, CUgraph g)
{
	for (struct crc_cond_handle **pp = &s->cond_handles; *pp;) {
		struct crc_cond_handle *c = *pp;

		if (c->graph == g) {
			*pp = c->next;
			free(c);
		} else {
			pp = &c->next;
		}
	}
	for (struct crc_cond_node *c = s->cond_nodes, *next; c; c = next) {
		next = c->next;
		if (c->graph == g) {
			cond_forget_node(s, c);
			next = s->cond_nodes; /* the list changed */
		}
	}
}

static void cond_forget_node(struct crc_session *s, struct crc_cond_node *c)
{
	for (struct crc_cond_node **pp = &s->cond_nodes; *pp; pp = &(*pp)->next)
		if (*pp == c) {
			*pp = c->next;
			break;
		}
	for (uint32_t i = 0; i < c->size; i++)
		cond_forget_graph(s, c->bodies[i]);
	free(c->bodies);
	free(c);
}

static void cond_free(struct crc_session *s)
{
	while (s->cond_handles) {
		struct crc_cond_handle *c = s->cond_handles;

		s->cond_handles = c->next;
		free(c);
	}
	while (s->cond_nodes) {
		struct crc_cond_node *c = s->cond_nodes;

		s->cond_nodes = c->next;
		free(c->bodies);
		free(c);
	}
}

/* ---- user objects -------------------------------------------------------------------------------- */
/* The driver reads neither a user object nor a graph's references back: the session records them. A
 * checkpoint describes the live objects (callback, the caller's references) and each graph's references;
 * a restore makes the objects again and has the rebuilt graphs take their references (an executable
 * graph takes its own from its rebuilt copy, as at instantiation). */
struct crc_uobj {
	uint64_t vh, fn, data;
	uint32_t flags;
	int64_t caller; /* references the application holds itself */
	struct crc_hostfn_arg *arg;
	struct crc_uobj *next;
};

struct crc_uobj_hold {
	CUgraph graph;
	uint64_t vh;
	uint32_t count;
	struct crc_uobj_hold *next;
};

static struct crc_uobj *uobj_find(struct crc_session *s, uint64_t vh)
{
	for (struct crc_uobj *u = s->uobjs; u; u = u->next)
		if (u->vh == vh)
			return u;
	return NULL;
}

CUresult crc_graph_userobj_made(struct crc_session *s, uint64_t vh, uint64_t destroy, uint64_t ptr,
				unsigned flags, unsigned refs, struct crc_hostfn_arg *arg)
{
	struct crc_uobj *u = calloc(1, sizeof(*u));

	if (!u)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*u = (struct crc_uobj){.vh = vh,
			       .fn = destroy,
			       .data = ptr,
			       .flags = flags,
			       .caller = refs,
			       .arg = arg,
			       .next = s->uobjs};
	s->uobjs = u;
	return CUDA_SUCCESS;
}

/* g's references to the object change by delta (a reference count of 0 drops the record). */
static CUresult uobj_hold(struct crc_session *s, CUgraph g, uint64_t vh, int64_t delta)
{
	struct crc_uobj_hold **pp, *h;

	for (pp = &s->uobj_holds; *pp && ((*pp)->graph != g || (*pp)->vh != vh); pp = &(*pp)->next)
		;
	if (!*pp) {
		if (delta <= 0)
			return CUDA_SUCCESS;
		if (!(*pp = calloc(1, sizeof(**pp))))
			return CUDA_ERROR_OUT_OF_MEMORY;
		**pp = (struct crc_uobj_hold){.graph = g, .vh = vh};
	}
	h = *pp;
	h->count = delta < 0 && (int64_t)h->count < -delta ? 0 : (uint32_t)((int64_t)h->count + delta);
	if (!h->count) {
		*pp = h->next;
		free(h);
	}
	return CUDA_SUCCESS;
}

/* A copy of from (the driver's clone) holds what from holds. */
static CUresult uobj_holds_copy(struct crc_session *s, CUgraph from, CUgraph to)
{
	CUresult res = CUDA_SUCCESS;

	for (struct crc_uobj_hold *h = s->uobj_holds; h && res == CUDA_SUCCESS; h = h->next)
		if (h->graph == from)
			res = uobj_hold(s, to, h->vh, h->count);
	return res;
}

static void uobj_forget_graph(struct crc_session *s, CUgraph g)
{
	for (struct crc_uobj_hold **pp = &s->uobj_holds; *pp;) {
		struct crc_uobj_hold *h = *pp;

		if (h->graph == g) {
			*pp = h->next;
			free(h);
		} else {
			pp = &h->next;
		}
	}
}

static void uobj_free(struct crc_session *s)
{
	while (s->uobjs) {
		struct crc_uobj *u = s->uobjs;

		s->uobjs = u->next;
		free(u);
	}
	while (s->uobj_holds) {
		struct crc_uobj_hold *h = s->uobj_holds;

		s->uobj_holds = h->next;
		free(h);
	}
}

CUresult crc_ovr_cuUserObjectRetain(struct crc_session *s, void *const *argv)
{
	CUuserObject obj = *(CUuserObject *)argv[0];
	unsigned count = *(unsigned *)argv[1];
	CUresult res = CALL(cuUserObjectRetain, obj, count);
	struct crc_uobj *u = uobj_find(s, crc_find_handle(s, CRC_HT_USEROBJECT, obj));

	if (res == CUDA_SUCCESS && u)
		u->caller += count;
	return res;
}

CUresult crc_ovr_cuUserObjectRelease(struct crc_session *s, void *const *argv)
{
	CUuserObject obj = *(CUuserObject *)argv[0];
	unsigned count = *(unsigned *)argv[1];
	struct crc_uobj *u = uobj_find(s, crc_find_handle(s, CRC_HT_USEROBJECT, obj));
	CUresult res = CALL(cuUserObjectRelease, obj, count);

	if (res == CUDA_SUCCESS && u)
		u->caller -= count;
	return res;
}

CUresult crc_ovr_cuGraphRetainUserObject(struct crc_session *s, void *const *argv)
{
	CUgraph g = *(CUgraph *)argv[0];
	CUuserObject obj = *(CUuserObject *)argv[1];
	unsigned count = *(unsigned *)argv[2], flags = *(unsigned *)argv[3];
	uint64_t vh = crc_find_handle(s, CRC_HT_USEROBJECT, obj);
	struct crc_uobj *u = uobj_find(s, vh);
	CUresult res = CALL(cuGraphRetainUserObject, g, obj, count, flags);

	if (res != CUDA_SUCCESS)
		return res;
	if (u && (flags & CU_GRAPH_USER_OBJECT_MOVE))
		u->caller -= count;
	return uobj_hold(s, g, vh, count);
}

CUresult crc_ovr_cuGraphReleaseUserObject(struct crc_session *s, void *const *argv)
{
	CUgraph g = *(CUgraph *)argv[0];
	CUuserObject obj = *(CUuserObject *)argv[1];
	unsigned count = *(unsigned *)argv[2];
	uint64_t vh = crc_find_handle(s, CRC_HT_USEROBJECT, obj);
	CUresult res = CALL(cuGraphReleaseUserObject, g, obj, count);

	return res == CUDA_SUCCESS ? uobj_hold(s, g, vh, -(int64_t)count) : res;
}

CUresult crc_ovr_cuGraphClone(struct crc_session *s, void *const *argv)
{
	CUgraph *out = argv[0], orig = *(CUgraph *)argv[1];
	CUresult res = CALL(cuGraphClone, out, orig);

	return res == CUDA_SUCCESS ? uobj_holds_copy(s, orig, *out) : res;
}

/* A graph of the daemon's own (a shadow, a rebuilt graph that failed) goes, with its records. */
static void shadow_destroy(struct crc_session *s, CUgraph g)
{
	cond_forget_graph(s, g);
	uobj_forget_graph(s, g);
	CALL(cuGraphDestroy, g);
}

CUresult crc_ovr_cuGraphConditionalHandleCreate(struct crc_session *s, void *const *argv)
{
	CUgraphConditionalHandle *out = argv[0];
	CUgraph g = *(CUgraph *)argv[1];
	CUcontext ctx = *(CUcontext *)argv[2];
	unsigned dflt = *(unsigned *)argv[3], flags = *(unsigned *)argv[4];
	CUresult res = CALL(cuGraphConditionalHandleCreate, out, g, ctx, dflt, flags);

	if (res == CUDA_SUCCESS)
		res = cond_handle_record(s, g, *out, crc_find_handle(s, CRC_HT_CTX, ctx), dflt, flags);
	return res;
}

CUresult crc_ovr_cuGraphDestroyNode(struct crc_session *s, void *const *argv)
{
	CUgraphNode node = *(CUgraphNode *)argv[0];
	struct crc_cond_node *c = cond_node_find(s, node);
	CUresult res = CALL(cuGraphDestroyNode, node);

	if (res == CUDA_SUCCESS && c)
		cond_forget_node(s, c);
	return res;
}

CUresult crc_raw_graph_cond(struct crc_session *s, const struct crc_call_hdr *h, const uint8_t *args,
			    size_t len)
{
	struct crc_graph_cond_wire w;
	CUgraphNodeParams p;
	CUgraphNode node = NULL;
	union crc_slot ctx;
	struct node_req nr;
	uint64_t *out;
	CUresult res = node_req_wire(s, h, args, len, &nr, &w, sizeof(w));

	if (res != CUDA_SUCCESS)
		goto out;
	if (!w.size || w.size > CRC_COND_BODIES_MAX) {
		res = CUDA_ERROR_INVALID_VALUE;
		goto out;
	}
	res = crc_translate(s, h, CRC_HT_CTX, w.ctx, &ctx);
	if (res != CUDA_SUCCESS)
		goto out;
	memset(&p, 0, sizeof(p));
	p.type = CU_GRAPH_NODE_TYPE_CONDITIONAL;
	p.conditional.handle = w.handle;
	p.conditional.type = (CUgraphConditionalNodeType)w.type;
	p.conditional.size = w.size;
	p.conditional.ctx = ctx.ptr;
	res = CALL(cuGraphAddNode, &node, nr.graph, nr.deps, nr.ndeps, &p);
	if (res == CUDA_SUCCESS)
		res = reply_node(s, node);
	if (res == CUDA_SUCCESS && !(out = crc_out(s, 8 * (size_t)w.size)))
		res = CUDA_ERROR_OUT_OF_MEMORY;
	for (uint32_t i = 0; res == CUDA_SUCCESS && i < w.size; i++)
		out[i] = crc_handle_of(s, CRC_HT_GRAPH, p.conditional.phGraph_out[i]);
	if (res == CUDA_SUCCESS)
		res = cond_node_record(s, node, nr.graph, w.handle, w.ctx, w.type, w.size,
				       p.conditional.phGraph_out);
out:
	free(nr.deps);
	return res;
}

/* ---- kernel node attributes -------------------------------------------------------------------------- */
CUresult crc_raw_knode_attr(struct crc_session *s, const struct crc_call_hdr *h, const uint8_t *args,
			    size_t len)
{
	struct crc_knode_attr a, *out;
	CUkernelNodeAttrValue v;
	union crc_slot node;
	CUresult res;

	if (len < sizeof(a))
		return CUDA_ERROR_INVALID_VALUE;
	memcpy(&a, args, sizeof(a));
	res = crc_translate(s, h, CRC_HT_GRAPHNODE, a.node, &node);
	if (res != CUDA_SUCCESS)
		return res;
	memcpy(&v, a.value, sizeof(v));
	if (s->msg->op == CRC_CU_cuGraphKernelNodeSetAttribute)
		return CALL(cuGraphKernelNodeSetAttribute, node.ptr, (CUkernelNodeAttrID)a.attr, &v);
	res = CALL(cuGraphKernelNodeGetAttribute, node.ptr, (CUkernelNodeAttrID)a.attr, &v);
	if (res != CUDA_SUCCESS)
		return res;
	out = crc_out(s, sizeof(*out));
	if (!out)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*out = a;
	memcpy(out->value, &v, sizeof(v));
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
	    .status = status, .id = id, .graph = crc_handle_of(s, CRC_HT_GRAPH, graph), .ndeps = n};
	for (size_t i = 0; i < n; i++) {
		v = crc_handle_of(s, CRC_HT_GRAPHNODE, deps[i]);
		memcpy(out + sizeof(*info) + 8 * i, &v, 8);
	}
	if (n && edges)
		memcpy(out + sizeof(*info) + 8 * n, edges, n * sizeof(CUgraphEdgeData));
	return CUDA_SUCCESS;
}

/* ---- executable graphs ---------------------------------------------------------------------------- */

static int graph_copy(struct crc_session *s, CUgraph g, CUgraph *out, CUgraphNode **orig, CUgraphNode **copy,
		      size_t *n, char *whynot, size_t whynot_len);
static int map_add(struct node_map *m, uint64_t vh, CUgraphNode node);

static CUresult gexec_add(struct crc_session *s, CUgraphExec exec, CUgraph shadow, uint64_t flags)
{
	struct crc_gexec *x = calloc(1, sizeof(*x));

	if (!x)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*x = (struct crc_gexec){.exec = exec, .shadow = shadow, .flags = flags, .next = s->gexecs};
	s->gexecs = x;
	return CUDA_SUCCESS;
}

CUresult crc_ovr_cuGraphInstantiateWithFlags(struct crc_session *s, void *const *argv)
{
	CUgraphExec *out = argv[0];
	CUgraph graph = *(CUgraph *)argv[1], shadow = NULL;
	unsigned long long flags = *(unsigned long long *)argv[2];
	CUgraphNode *orig = NULL, *copy = NULL;
	size_t n = 0;
	struct crc_gexec *x;
	CUresult res = CALL(cuGraphInstantiateWithFlags, out, graph, flags);

	if (res != CUDA_SUCCESS || !out)
		return res;
	/* A graph that cannot be copied leaves the exec without a shadow: it runs, and a checkpoint says it
	 * cannot carry it. (Graph memory, which the driver does not clone, is the client's: graph_mem.c.) */
	char whynot[256] = "";

	if (graph_copy(s, graph, &shadow, &orig, &copy, &n, whynot, sizeof(whynot)))
		shadow = NULL;
	if (gexec_add(s, *out, shadow, flags) != CUDA_SUCCESS) {
		if (shadow)
			shadow_destroy(s, shadow);
		CALL(cuGraphExecDestroy, *out);
		res = CUDA_ERROR_OUT_OF_MEMORY;
	}
	/* A rebuilt copy: which of its nodes stands for each of the application's. */
	x = res == CUDA_SUCCESS ? gexec_find(s, *out) : NULL;
	if (x && !shadow) {
		snprintf(x->no_shadow, sizeof(x->no_shadow), "%s", whynot);
		pr_warn(
		    "session %llu: an executable graph cannot be checkpointed: its graph could not be copied "
		    "(%s)",
		    (unsigned long long)s->id, whynot);
	}
	if (!copy)
		x = NULL;
	for (size_t k = 0; x && k < n; k++) {
		uint64_t vh = crc_find_handle(s, CRC_HT_GRAPHNODE, orig[k]);

		if (vh && map_add(&x->sh, vh, copy[k]))
			x->modified = true;
	}
	free(orig);
	free(copy);
	return res;
}

static struct crc_gexec *gexec_find(struct crc_session *s, CUgraphExec exec)
{
	for (struct crc_gexec *x = s->gexecs; x; x = x->next)
		if (x->exec == exec)
			return x;
	return NULL;
}

static CUgraphNode map_find(const struct node_map *m, uint64_t vh)
{
	for (size_t i = 0; vh && i < m->n; i++)
		if (m->vh[i] == vh)
			return m->node[i];
	return NULL;
}

static CUgraphNode map_lookup(struct crc_session *s, const struct node_map *m, CUgraphNode node)
{
	return map_find(m, crc_find_handle(s, CRC_HT_GRAPHNODE, node));
}

static void map_remove(struct node_map *m, uint64_t vh)
{
	for (size_t i = 0; i < m->n; i++)
		if (m->vh[i] == vh) {
			m->vh[i] = m->vh[m->n - 1];
			m->node[i] = m->node[m->n - 1];
			m->n--;
			return;
		}
}

static int map_add(struct node_map *m, uint64_t vh, CUgraphNode node)
{
	uint64_t *v = realloc(m->vh, (m->n + 1) * sizeof(*v));
	CUgraphNode *n;

	if (!v)
		return -1;
	m->vh = v;
	n = realloc(m->node, (m->n + 1) * sizeof(*n));
	if (!n)
		return -1;
	m->node = n;
	m->vh[m->n] = vh;
	m->node[m->n++] = node;
	return 0;
}

static void map_free(struct node_map *m)
{
	free(m->vh);
	free(m->node);
	*m = (struct node_map){0};
}

static void gexec_map_free(struct crc_gexec *x)
{
	map_free(&x->drv);
	map_free(&x->sh);
	map_free(&x->off);
}

/* The shadow's node standing for an application node (NULL: none). */
static CUgraphNode shadow_target(struct crc_session *s, struct crc_gexec *x, CUgraphNode node)
{
	CUgraphNode sn = NULL;

	if (x->sh.n)
		return map_lookup(s, &x->sh, node);
	if (!x->shadow || CALL(cuGraphNodeFindInClone, &sn, node, x->shadow) != CUDA_SUCCESS)
		return NULL;
	return sn;
}

/* The node an executable graph's driver object takes for the application's node. */
static CUgraphNode exec_target(struct crc_session *s, struct crc_gexec *x, CUgraphNode node)
{
	CUgraphNode t = x && x->drv.n ? map_lookup(s, &x->drv, node) : NULL;

	return t ? t : node;
}

/* Each application node handle with its shadow node (sh, or found in the clone), as fn(vh, node). */
static int each_shadow_node(struct crc_session *s, struct crc_gexec *x,
			    int (*fn)(void *arg, uint64_t vh, CUgraphNode sn), void *arg)
{
	const struct crc_htable *t = &s->tables[CRC_HT_GRAPHNODE];
	int rc = 0;

	for (size_t i = 0; i < x->sh.n && !rc; i++)
		rc = fn(arg, x->sh.vh[i], x->sh.node[i]);
	for (uint32_t v = 1; !x->sh.n && v <= t->n && !rc; v++) {
		CUgraphNode sn = NULL;

		if (t->real[v].ptr &&
		    CALL(cuGraphNodeFindInClone, &sn, t->real[v].ptr, x->shadow) == CUDA_SUCCESS)
			rc = fn(arg, crc_vhandle(CRC_HT_GRAPHNODE, v), sn);
	}
	return rc;
}

void crc_graph_exec_remap(struct crc_session *s, int op, void *const *argv)
{
	struct crc_gexec *x;

	s->exec_app_node = NULL;
	if (op == CRC_CU_cuGraphExecUpdate || !(x = gexec_find(s, *(CUgraphExec *)argv[0])))
		return;
	s->exec_app_node = *(CUgraphNode *)argv[1];
	*(CUgraphNode *)argv[1] = exec_target(s, x, *(CUgraphNode *)argv[1]);
}

/* An update pairs the old shadow's nodes with the new graph's in the order the driver lists them,
 * which for graphs built or captured the same way is the order of creation (the driver's own pairing,
 * which an update of graphs of the same topology follows). */
struct repair {
	CUgraphNode *old, *new_, *copy; /* copy[k]: the new copy's node for new_[k] (NULL: find in clone) */
	size_t n;
	CUgraph clone;
	struct node_map sh;
};

static int repair_one(void *arg, uint64_t vh, CUgraphNode sn)
{
	struct repair *r = arg;
	CUgraphNode cn = NULL;

	for (size_t k = 0; k < r->n; k++)
		if (r->old[k] == sn) {
			if (r->copy)
				return map_add(&r->sh, vh, r->copy[k]);
			return CALL(cuGraphNodeFindInClone, &cn, r->new_[k], r->clone) != CUDA_SUCCESS ||
			       map_add(&r->sh, vh, cn);
		}
	return -1;
}

static int graph_nodes(CUgraph g, CUgraphNode **out, size_t *n)
{
	*n = 0;
	*out = NULL;
	if (CALL(cuGraphGetNodes, g, NULL, n) != CUDA_SUCCESS || !(*out = calloc(*n + 1, sizeof(**out))))
		return -1;
	/* An empty graph (torch.compile makes some): the driver refuses a list call with room for none. */
	return !*n || CALL(cuGraphGetNodes, g, *out, n) == CUDA_SUCCESS ? 0 : -1;
}

static int exec_updated(struct crc_session *s, struct crc_gexec *x, CUgraph g)
{
	struct repair r = {0};
	size_t n2 = 0;
	int rc = -1;

	if (!x->shadow || graph_nodes(x->shadow, &r.old, &r.n) ||
	    graph_copy(s, g, &r.clone, &r.new_, &r.copy, &n2, x->no_shadow, sizeof(x->no_shadow)) ||
	    n2 != r.n)
		goto out;
	rc = each_shadow_node(s, x, repair_one, &r);
	if (!rc) {
		if (x->drv.n && !x->origin)
			x->origin = x->shadow;
		else
			shadow_destroy(s, x->shadow);
		x->shadow = r.clone;
		map_free(&x->sh);
		x->sh = r.sh;
		r.clone = NULL;
		r.sh = (struct node_map){0};
	}
out:
	if (r.clone)
		shadow_destroy(s, r.clone);
	map_free(&r.sh);
	free(r.old);
	free(r.new_);
	free(r.copy);
	return rc;
}

/* A change the driver made to an executable graph, made to its shadow too, so that a checkpoint still
 * describes it: an update replaces the shadow by a clone of the new graph (the application's nodes
 * paired with the clone's); a node's new parameters go to the shadow's node; a node disabled is kept in
 * the exec's list (a restore disables it again in the executable graph it makes). What cannot be
 * mirrored marks it modified, and a checkpoint then refuses, saying so. */
void crc_graph_exec_changed(struct crc_session *s, int op, void *const *argv)
{
	struct crc_gexec *x = gexec_find(s, *(CUgraphExec *)argv[0]);
	CUgraphNode sn;
	CUresult res = CUDA_ERROR_NOT_SUPPORTED;

	if (!x || x->modified)
		return;
	if (op == CRC_CU_cuGraphExecUpdate) {
		if (exec_updated(s, x, *(CUgraph *)argv[1]))
			x->modified = true;
		return;
	}
	sn = s->exec_app_node ? shadow_target(s, x, s->exec_app_node) : NULL;
	if (sn) {
		switch (op) {
		case CRC_CU_cuGraphExecMemsetNodeSetParams:
			res = CALL(cuGraphMemsetNodeSetParams, sn, (const CUDA_MEMSET_NODE_PARAMS *)argv[2]);
			break;
		case CRC_CU_cuGraphExecEventRecordNodeSetEvent:
			res = CALL(cuGraphEventRecordNodeSetEvent, sn, *(CUevent *)argv[2]);
			break;
		case CRC_CU_cuGraphExecEventWaitNodeSetEvent:
			res = CALL(cuGraphEventWaitNodeSetEvent, sn, *(CUevent *)argv[2]);
			break;
		case CRC_CU_cuGraphExecChildGraphNodeSetParams: {
			CUgraphNodeParams p = {.type = CU_GRAPH_NODE_TYPE_GRAPH};

			p.graph.graph = *(CUgraph *)argv[2];
			res = CALL(cuGraphNodeSetParams, sn, &p);
			break;
		}
		case CRC_CU_cuGraphNodeSetEnabled: {
			uint64_t vh = crc_find_handle(s, CRC_HT_GRAPHNODE, s->exec_app_node);

			res = vh ? CUDA_SUCCESS : CUDA_ERROR_NOT_SUPPORTED;
			map_remove(&x->off, vh);
			if (vh && !*(unsigned *)argv[2] && map_add(&x->off, vh, sn))
				res = CUDA_ERROR_OUT_OF_MEMORY;
			break;
		}
		}
	}
	if (res != CUDA_SUCCESS)
		x->modified = true;
}

void crc_graph_free(struct crc_session *s)
{
	cond_free(s);
	uobj_free(s);
	while (s->gexecs) {
		struct crc_gexec *x = s->gexecs;

		s->gexecs = x->next;
		gexec_map_free(x);
		free(x);
	}
}

/* The handles of a graph's nodes, its child graphs' included (their objects go with it), added to *vh. */
static void graph_node_handles(struct crc_session *s, CUgraph g, int depth, uint64_t **vh, size_t *n)
{
	CUgraphNode *nodes = NULL;
	size_t count = 0;

	if (depth > 32 || graph_nodes(g, &nodes, &count)) {
		free(nodes);
		return;
	}
	for (size_t i = 0; i < count; i++) {
		CUgraphNodeType type;
		CUgraph child;
		uint64_t v = crc_find_handle(s, CRC_HT_GRAPHNODE, nodes[i]);
		uint64_t *grown;

		struct crc_cond_node *c = cond_node_find(s, nodes[i]);

		if (CALL(cuGraphNodeGetType, nodes[i], &type) == CUDA_SUCCESS &&
		    type == CU_GRAPH_NODE_TYPE_GRAPH &&
		    CALL(cuGraphChildGraphNodeGetGraph, nodes[i], &child) == CUDA_SUCCESS)
			graph_node_handles(s, child, depth + 1, vh, n);
		for (uint32_t b = 0; c && b < c->size; b++)
			graph_node_handles(s, c->bodies[b], depth + 1, vh, n);
		if (!v || !(grown = realloc(*vh, (*n + 1) * sizeof(**vh))))
			continue;
		*vh = grown;
		(*vh)[(*n)++] = v;
	}
	free(nodes);
}

/* A destroyed graph's node handles go with it: a stale one would name freed memory (the first exec
 * update after an instantiation looks for every node handle in the shadow). */
CUresult crc_ovr_cuGraphDestroy(struct crc_session *s, void *const *argv)
{
	CUgraph g = *(CUgraph *)argv[0];
	uint64_t *vh = NULL;
	size_t n = 0;
	CUresult res;

	graph_node_handles(s, g, 0, &vh, &n);
	res = CALL(cuGraphDestroy, g);
	for (size_t i = 0; res == CUDA_SUCCESS && i < n; i++)
		crc_forget(s, vh[i]);
	if (res == CUDA_SUCCESS) {
		cond_forget_graph(s, g);
		uobj_forget_graph(s, g);
	}
	free(vh);
	return res;
}

/* The shadow goes with its executable graph (a program that instantiates in a loop keeps none). */
CUresult crc_ovr_cuGraphExecDestroy(struct crc_session *s, void *const *argv)
{
	CUgraphExec exec = *(CUgraphExec *)argv[0];
	CUresult res = CALL(cuGraphExecDestroy, exec);

	if (res != CUDA_SUCCESS)
		return res;
	for (struct crc_gexec **pp = &s->gexecs; *pp; pp = &(*pp)->next) {
		if ((*pp)->exec == exec) {
			struct crc_gexec *x = *pp;

			*pp = x->next;
			if (x->shadow)
				shadow_destroy(s, x->shadow);
			if (x->origin)
				shadow_destroy(s, x->origin);
			gexec_map_free(x);
			free(x);
			break;
		}
	}
	return CUDA_SUCCESS;
}

/* Drops (and destroys the shadows of) executable graphs the application destroyed. */
static void gexec_prune(struct crc_session *s)
{
	for (struct crc_gexec **pp = &s->gexecs; *pp;) {
		struct crc_gexec *x = *pp;

		if (crc_find_handle(s, CRC_HT_GRAPHEXEC, x->exec)) {
			pp = &x->next;
			continue;
		}
		*pp = x->next;
		if (x->shadow)
			shadow_destroy(s, x->shadow);
		if (x->origin)
			shadow_destroy(s, x->origin);
		gexec_map_free(x);
		free(x);
	}
}

void crc_graph_release(struct crc_session *s)
{
	gexec_prune(s);
	while (s->gexecs) {
		struct crc_gexec *x = s->gexecs;

		s->gexecs = x->next;
		CALL(cuGraphExecDestroy, x->exec);
		if (x->shadow)
			shadow_destroy(s, x->shadow);
		if (x->origin)
			shadow_destroy(s, x->origin);
		gexec_map_free(x);
		free(x);
	}
}

/* ---- graph descriptions (checkpoint) ------------------------------------------------------------------ */

/* A graph, as a checkpoint keeps it: u32 nodes, u32 edges; per node u32 type, u32 payload bytes, u64 the
 * client's handle of the node (0: none), payload; per edge u32 from, u32 to (node indices). Payloads:
 * kernel: a crc_launch_req (func: a FUNC or KERNEL handle) and its parameters; memcpy: CUDA_MEMCPY3D
 * with the client's host addresses; memset: CUDA_MEMSET_NODE_PARAMS; event record/wait: the event's
 * handle; child graph: a graph description; empty: nothing. Kernel payloads end with the node's
 * attributes: u32 count, then per attribute u32 id, u32 0, CUkernelNodeAttrValue. */
/* 2: kernel nodes carry their attributes; 3: execs their node map; 4: graphs their conditional handles
 * first, conditional nodes (u64 handle, u64 context, u32 type, u32 size, then each body's description);
 * 5: the live user objects after the counts (u32 n, then per object u64 handle, u64 destroy, u64 ptr,
 * u32 flags, u32 the application's own references), and graphs their references after the handles;
 * 6: execs, after their node map, the application's nodes disabled in them (u32 n, u64 handles). */
#define GRAPH_DESC_VERSION 6

struct gbuf {
	uint8_t *p;
	size_t n, cap;
	bool oom;
	bool anonymous; /* no node handles: a copy for a shadow, which the application does not name */
};

static void *gbuf_put(struct gbuf *b, const void *src, size_t n)
{
	void *at;

	if (b->oom)
		return NULL;
	if (b->n + n > b->cap) {
		size_t cap = b->cap ? b->cap : 4096;
		uint8_t *p;

		while (cap < b->n + n)
			cap *= 2;
		p = realloc(b->p, cap);
		if (!p) {
			b->oom = true;
			return NULL;
		}
		b->p = p;
		b->cap = cap;
	}
	at = b->p + b->n;
	if (src)
		memcpy(at, src, n);
	else
		memset(at, 0, n);
	b->n += n;
	return at;
}

static void gbuf_u32(struct gbuf *b, uint32_t v)
{
	gbuf_put(b, &v, 4);
}

static void gbuf_u64(struct gbuf *b, uint64_t v)
{
	gbuf_put(b, &v, 8);
}

/* The client's name of a kernel node's function: its CUfunction's handle, else the CUkernel whose
 * function (in this context) it is (cudart launches CUkernels). */
static uint64_t function_handle(struct crc_session *s, CUfunction f, CUkernel k)
{
	const struct crc_htable *t = &s->tables[CRC_HT_KERNEL];
	uint64_t v = f ? crc_find_handle(s, CRC_HT_FUNC, f) : 0;

	if (!v && k)
		v = crc_find_handle(s, CRC_HT_KERNEL, k);
	for (uint32_t i = 1; !v && f && i <= t->n; i++) {
		CUfunction kf = NULL;

		if (t->real[i].ptr && CALL(cuKernelGetFunction, &kf, t->real[i].ptr) == CUDA_SUCCESS &&
		    kf == f)
			v = crc_vhandle(CRC_HT_KERNEL, i);
	}
	return v;
}

static int describe_graph(struct crc_session *s, CUgraph g, struct gbuf *b, char *why, size_t len, int depth);

/* A kernel node's parameters as a launch request carries them (func: the client's handle): the
 * layout from the driver, or the node's `extra` buffer. -1 (why) where they cannot be read. */
static int node_launch_req(struct crc_session *s, const CUDA_KERNEL_NODE_PARAMS_v2 *p, struct gbuf *b,
			   char *why, size_t len)
{
	struct crc_kparam_wire pw[CRC_MAX_KPARAMS];
	struct crc_launch_req r = {.func = function_handle(s, p->func, p->kern),
				   .grid = {p->gridDimX, p->gridDimY, p->gridDimZ},
				   .block = {p->blockDimX, p->blockDimY, p->blockDimZ},
				   .shared_bytes = p->sharedMemBytes};
	const void *ebuf = NULL;
	size_t esize = 0;
	uint32_t n = 0, bytes = 0;
	uint8_t *pb;

	if (!r.func) {
		snprintf(why, len, "a kernel node's function is unknown to the session");
		return -1;
	}
	if (!p->kernelParams && p->extra) {
		for (size_t i = 0; p->extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
			if (p->extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER)
				ebuf = p->extra[i + 1];
			else if (p->extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE)
				esize = *(size_t *)p->extra[i + 1];
		}
		if (!ebuf || esize > 65536) {
			snprintf(why, len, "a kernel node's parameter buffer cannot be read");
			return -1;
		}
		r.nparams = UINT32_MAX;
		r.param_bytes = (uint32_t)esize;
		gbuf_put(b, &r, sizeof(r));
		pb = gbuf_put(b, NULL, crc_align8(esize));
		if (pb)
			memcpy(pb, ebuf, esize);
		return 0;
	}
	for (; p->kernelParams; n++) {
		size_t off, size;
		CUresult res = p->func ? CALL(cuFuncGetParamInfo, p->func, n, &off, &size)
				       : CALL(cuKernelGetParamInfo, p->kern, n, &off, &size);

		if (res == CUDA_ERROR_INVALID_VALUE)
			break; /* past the last parameter */
		if (res != CUDA_SUCCESS || n == CRC_MAX_KPARAMS) {
			snprintf(why, len, "a kernel node's parameter layout cannot be read (error %d)",
				 (int)res);
			return -1;
		}
		pw[n] = (struct crc_kparam_wire){.offset = (uint32_t)off, .size = (uint32_t)size};
		if (off + size > bytes)
			bytes = (uint32_t)(off + size);
	}
	r.nparams = n;
	r.param_bytes = bytes;
	gbuf_put(b, &r, sizeof(r));
	gbuf_put(b, pw, n * sizeof(*pw));
	pb = gbuf_put(b, NULL, crc_align8(bytes));
	for (uint32_t i = 0; pb && i < n; i++)
		memcpy(pb + pw[i].offset, p->kernelParams[i], pw[i].size);
	return 0;
}

static int describe_node(struct crc_session *s, CUgraphNode node, struct gbuf *b, char *why, size_t len,
			 int depth)
{
	CUgraphNodeType type;
	size_t at;
	CUresult res = CALL(cuGraphNodeGetType, node, &type);

	if (res != CUDA_SUCCESS) {
		snprintf(why, len, "cuGraphNodeGetType: error %d", (int)res);
		return -1;
	}
	gbuf_u32(b, (uint32_t)type);
	at = b->n;
	gbuf_u32(b, 0); /* payload bytes, below */
	gbuf_u64(b, b->anonymous ? 0 : crc_find_handle(s, CRC_HT_GRAPHNODE, node));
	switch (type) {
	case CU_GRAPH_NODE_TYPE_KERNEL: {
		CUDA_KERNEL_NODE_PARAMS_v2 p = {0};

		res = CALL(cuGraphKernelNodeGetParams_v2, node, &p);
		if (res == CUDA_SUCCESS && node_launch_req(s, &p, b, why, len))
			return -1;
		/* Then the attributes set on it: u32 count, then (u32 id, u32 0, value) each. */
		if (res == CUDA_SUCCESS) {
			static const CUkernelNodeAttrValue unset;
			size_t at_count = b->n;
			uint32_t count = 0;

			gbuf_u32(b, 0);
			for (size_t i = 0; i < sizeof(node_attrs) / sizeof(node_attrs[0]); i++) {
				CUkernelNodeAttrValue v;

				memset(&v, 0, sizeof(v));
				if (CALL(cuGraphKernelNodeGetAttribute, node, node_attrs[i], &v) !=
					CUDA_SUCCESS ||
				    !memcmp(&v, &unset, sizeof(v)))
					continue;
				gbuf_u32(b, (uint32_t)node_attrs[i]);
				gbuf_u32(b, 0);
				gbuf_put(b, &v, sizeof(v));
				count++;
			}
			if (!b->oom)
				memcpy(b->p + at_count, &count, 4);
		}
		break;
	}
	case CU_GRAPH_NODE_TYPE_MEMCPY: {
		CUDA_MEMCPY3D p;

		res = CALL(cuGraphMemcpyNodeGetParams, node, &p);
		if (res == CUDA_SUCCESS)
			res = memcpy_sides(s, &p, true);
		if (res != CUDA_SUCCESS || p.srcMemoryType == CU_MEMORYTYPE_ARRAY ||
		    p.dstMemoryType == CU_MEMORYTYPE_ARRAY) {
			snprintf(why, len, "a memcpy node cannot be described (error %d, or a CUDA array)",
				 (int)res);
			return -1;
		}
		gbuf_put(b, &p, sizeof(p));
		break;
	}
	case CU_GRAPH_NODE_TYPE_MEMSET: {
		CUDA_MEMSET_NODE_PARAMS p;

		res = CALL(cuGraphMemsetNodeGetParams, node, &p);
		if (res == CUDA_SUCCESS) /* else p was not written: said below */
			gbuf_put(b, &p, sizeof(p));
		break;
	}
	case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
	case CU_GRAPH_NODE_TYPE_WAIT_EVENT: {
		CUevent e = NULL;

		res = type == CU_GRAPH_NODE_TYPE_WAIT_EVENT ? CALL(cuGraphEventWaitNodeGetEvent, node, &e)
							    : CALL(cuGraphEventRecordNodeGetEvent, node, &e);
		gbuf_u64(b, crc_find_handle(s, CRC_HT_EVENT, e));
		break;
	}
	case CU_GRAPH_NODE_TYPE_GRAPH: {
		CUgraph child = NULL;

		res = CALL(cuGraphChildGraphNodeGetGraph, node, &child);
		if (res == CUDA_SUCCESS && describe_graph(s, child, b, why, len, depth + 1))
			return -1;
		break;
	}
	case CU_GRAPH_NODE_TYPE_HOST: {
		CUDA_HOST_NODE_PARAMS p;
		uint64_t fn, data;

		res = CALL(cuGraphHostNodeGetParams, node, &p);
		if (res != CUDA_SUCCESS)
			break; /* said below: nothing of the node is written */
		if (!crc_hostfn_of(&p, &fn, &data)) {
			snprintf(why, len, "a host node whose function is not the application's");
			return -1;
		}
		gbuf_u64(b, fn);
		gbuf_u64(b, data);
		break;
	}
	case CU_GRAPH_NODE_TYPE_CONDITIONAL: {
		struct crc_cond_node *c = cond_node_find(s, node);

		if (!c) {
			snprintf(
			    why, len,
			    "a conditional node whose making crcuda did not see (inside a child graph node, "
			    "or in a graph's copy) cannot be checkpointed: the driver cannot read it back");
			return -1;
		}
		gbuf_u64(b, c->handle);
		gbuf_u64(b, c->ctx);
		gbuf_u32(b, c->type);
		gbuf_u32(b, c->size);
		for (uint32_t i = 0; i < c->size; i++)
			if (describe_graph(s, c->bodies[i], b, why, len, depth + 1))
				return -1;
		break;
	}
	case CU_GRAPH_NODE_TYPE_BATCH_MEM_OP: {
		CUDA_BATCH_MEM_OP_NODE_PARAMS p;

		res = CALL(cuGraphBatchMemOpNodeGetParams, node, &p);
		if (res == CUDA_SUCCESS) {
			gbuf_u64(b, crc_find_handle(s, CRC_HT_CTX, p.ctx));
			gbuf_u32(b, p.count);
			gbuf_u32(b, p.flags);
			gbuf_put(b, p.paramArray, p.count * sizeof(*p.paramArray));
		}
		break;
	}
	case CU_GRAPH_NODE_TYPE_EMPTY:
		break;
	default:
		snprintf(why, len, "a graph node of type %d cannot be checkpointed yet", (int)type);
		return -1;
	}
	if (res != CUDA_SUCCESS) {
		snprintf(why, len, "reading a graph node of type %d: error %d", (int)type, (int)res);
		return -1;
	}
	if (!b->oom) {
		uint32_t bytes = (uint32_t)(b->n - at - 12);

		memcpy(b->p + at, &bytes, 4);
	}
	return 0;
}

/* The graph's conditional handles: u32 count, then (u64 value, u64 context, u32 default, u32 flags) each,
 * in creation order. Only numbered 1..count on a graph that is no conditional body: a rebuild makes
 * them again there in that order and must get the same values. */
static int describe_handles(struct crc_session *s, CUgraph g, struct gbuf *b, char *why, size_t len)
{
	uint32_t count = 0;

	for (struct crc_cond_handle *c = s->cond_handles; c; c = c->next)
		if (c->graph == g && c->value != ++count)
			break;
	for (struct crc_cond_handle *c = s->cond_handles; c; c = c->next)
		if (c->graph == g && (c->value > count || graph_is_body(s, g))) {
			snprintf(why, len,
				 "conditional handles made on a conditional node's body, or numbered out of "
				 "order, "
				 "cannot be checkpointed yet");
			return -1;
		}
	gbuf_u32(b, count);
	for (struct crc_cond_handle *c = s->cond_handles; c; c = c->next)
		if (c->graph == g) {
			gbuf_u64(b, c->value);
			gbuf_u64(b, c->ctx);
			gbuf_u32(b, c->dflt);
			gbuf_u32(b, c->flags);
		}
	return 0;
}

/* A graph's references: u32 count, then (u64 object, u32 references, u32 0) each (version 5). */
static void describe_holds(struct crc_session *s, CUgraph g, struct gbuf *b)
{
	uint32_t count = 0;

	for (struct crc_uobj_hold *h = s->uobj_holds; h; h = h->next)
		count += h->graph == g;
	gbuf_u32(b, count);
	for (struct crc_uobj_hold *h = s->uobj_holds; h; h = h->next)
		if (h->graph == g) {
			gbuf_u64(b, h->vh);
			gbuf_u32(b, h->count);
			gbuf_u32(b, 0);
		}
}

static int describe_graph(struct crc_session *s, CUgraph g, struct gbuf *b, char *why, size_t len, int depth)
{
	CUgraphNode *nodes = NULL, *from = NULL, *to = NULL;
	size_t n = 0, ne = 0;
	int rc = -1;

	if (depth > 32) {
		snprintf(why, len, "graphs nested deeper than 32");
		return -1;
	}
	if (CALL(cuGraphGetNodes, g, NULL, &n) != CUDA_SUCCESS ||
	    CALL(cuGraphGetEdges, g, NULL, NULL, &ne) != CUDA_SUCCESS) {
		snprintf(why, len, "cannot list a graph's nodes and edges");
		return -1;
	}
	nodes = calloc(n + 1, sizeof(*nodes));
	from = calloc(ne + 1, sizeof(*from));
	to = calloc(ne + 1, sizeof(*to));
	if (!nodes || !from || !to || (n && CALL(cuGraphGetNodes, g, nodes, &n) != CUDA_SUCCESS) ||
	    (ne && CALL(cuGraphGetEdges, g, from, to, &ne) != CUDA_SUCCESS)) {
		snprintf(why, len, "cannot list a graph's nodes and edges");
		goto out;
	}
	if (describe_handles(s, g, b, why, len))
		goto out;
	describe_holds(s, g, b);
	gbuf_u32(b, (uint32_t)n);
	gbuf_u32(b, (uint32_t)ne);
	for (size_t i = 0; i < n; i++)
		if (describe_node(s, nodes[i], b, why, len, depth))
			goto out;
	for (size_t e = 0; e < ne; e++) {
		uint32_t fi = UINT32_MAX, ti = UINT32_MAX;

		for (size_t i = 0; i < n; i++) {
			if (nodes[i] == from[e])
				fi = (uint32_t)i;
			if (nodes[i] == to[e])
				ti = (uint32_t)i;
		}
		gbuf_u32(b, fi);
		gbuf_u32(b, ti);
	}
	rc = 0;
out:
	free(nodes);
	free(from);
	free(to);
	return rc;
}

static char *hex_of(const struct gbuf *b)
{
	static const char digits[] = "0123456789abcdef";
	char *h = malloc(2 * b->n + 1);

	for (size_t i = 0; h && i < b->n; i++) {
		h[2 * i] = digits[b->p[i] >> 4];
		h[2 * i + 1] = digits[b->p[i] & 15];
	}
	if (h)
		h[2 * b->n] = '\0';
	return h;
}

struct origin_of {
	CUgraphNode *nodes;
	uint64_t *origin;
	size_t n;
};

static int origin_one(void *arg, uint64_t vh, CUgraphNode sn)
{
	struct origin_of *o = arg;

	for (size_t i = 0; i < o->n; i++)
		if (o->nodes[i] == sn)
			o->origin[i] = vh;
	return 0;
}

/* After an executable graph's shadow: u32 n, then for each of the shadow's top-level nodes (in
 * cuGraphGetNodes order, as described) the application's handle of the node it stands for, 0 if none:
 * a restore instantiates the shadow, and later calls naming the application's nodes go to its nodes. */
static int describe_exec_map(struct crc_session *s, struct crc_gexec *x, struct gbuf *b, char *why,
			     size_t len)
{
	struct origin_of o = {0};

	if (graph_nodes(x->shadow, &o.nodes, &o.n) || !(o.origin = calloc(o.n + 1, sizeof(*o.origin)))) {
		free(o.nodes);
		snprintf(why, len, "cannot list a graph's nodes and edges");
		return -1;
	}
	each_shadow_node(s, x, origin_one, &o);
	gbuf_u32(b, (uint32_t)o.n);
	gbuf_put(b, o.origin, o.n * sizeof(*o.origin));
	free(o.nodes);
	free(o.origin);
	return 0;
}

static void describe_uobjs(struct crc_session *s, struct gbuf *b)
{
	uint32_t n = 0;

	for (struct crc_uobj *u = s->uobjs; u; u = u->next)
		n += crc_hostfn_alive(u->arg);
	gbuf_u32(b, n);
	for (struct crc_uobj *u = s->uobjs; u; u = u->next)
		if (crc_hostfn_alive(u->arg)) {
			gbuf_u64(b, u->vh);
			gbuf_u64(b, u->fn);
			gbuf_u64(b, u->data);
			gbuf_u32(b, u->flags);
			gbuf_u32(b, (uint32_t)(u->caller > 0 ? u->caller : 0));
		}
}

/* The session's graphs and executable graphs, described (NULL and why: what cannot be). Format: u32
 * version (1), u32 graphs, u32 execs; per graph u64 handle + description; per exec u64 handle, u64
 * flags, description of its shadow. Hex, as metadata is text. */
char *crc_graph_describe(struct crc_session *s, char *why, size_t len)
{
	const struct crc_htable *t = &s->tables[CRC_HT_GRAPH];
	struct gbuf b = {0};
	uint32_t ngraphs = 0, nexecs = 0;
	size_t counts;
	char *hex = NULL;

	gexec_prune(s);
	gbuf_u32(&b, GRAPH_DESC_VERSION);
	counts = b.n;
	gbuf_u32(&b, 0);
	gbuf_u32(&b, 0);
	describe_uobjs(s, &b);
	for (uint32_t i = 1; i <= t->n; i++) {
		if (!t->real[i].ptr)
			continue;
		gbuf_u64(&b, crc_vhandle(CRC_HT_GRAPH, i));
		if (describe_graph(s, t->real[i].ptr, &b, why, len, 0))
			goto out;
		ngraphs++;
	}
	for (struct crc_gexec *x = s->gexecs; x; x = x->next) {
		if (x->modified) {
			snprintf(
			    why, len, "%s",
			    "an executable graph had a change its shadow could not take (a node inside a "
			    "conditional body changed): checkpointing it is not supported yet");
			goto out;
		}
		if (!x->shadow) {
			snprintf(
			    why, len,
			    "an executable graph's graph could not be copied when it was instantiated (%s): "
			    "checkpointing it is not supported",
			    x->no_shadow[0] ? x->no_shadow : "no reason kept");
			goto out;
		}
		gbuf_u64(&b, crc_find_handle(s, CRC_HT_GRAPHEXEC, x->exec));
		gbuf_u64(&b, x->flags);
		if (describe_graph(s, x->shadow, &b, why, len, 0) || describe_exec_map(s, x, &b, why, len))
			goto out;
		gbuf_u32(&b, (uint32_t)x->off.n);
		gbuf_put(&b, x->off.vh, x->off.n * sizeof(*x->off.vh));
		nexecs++;
	}
	if (b.oom) {
		snprintf(why, len, "out of memory describing the session's graphs");
		goto out;
	}
	memcpy(b.p + counts, &ngraphs, 4);
	memcpy(b.p + counts + 4, &nexecs, 4);
	hex = hex_of(&b);
	if (ngraphs || nexecs)
		pr_info("session %llu: %u graphs and %u executable graphs described (%zu bytes)",
			(unsigned long long)s->id, ngraphs, nexecs, b.n);
	if (!hex)
		snprintf(why, len, "out of memory describing the session's graphs");
out:
	free(b.p);
	return hex;
}

/* ---- graph descriptions (restore) --------------------------------------------------------------------- */
struct grd {
	const uint8_t *p;
	size_t n, off;
	bool bad;
	uint32_t version; /* of the description */
};

static const void *grd_take(struct grd *r, size_t n)
{
	const void *at = r->p + r->off;

	if (r->bad || n > r->n - r->off) {
		r->bad = true;
		return NULL;
	}
	r->off += n;
	return at;
}

static uint32_t grd_u32(struct grd *r)
{
	const void *p = grd_take(r, 4);
	uint32_t v = 0;

	if (p)
		memcpy(&v, p, 4);
	return v;
}

static uint64_t grd_u64(struct grd *r)
{
	const void *p = grd_take(r, 8);
	uint64_t v = 0;

	if (p)
		memcpy(&v, p, 8);
	return v;
}

static CUresult rebuild_graph(struct crc_session *s, struct grd *r, CUgraph *out, int depth,
			      CUgraphNode **keep, uint32_t *nkeep);
static CUresult rebuild_into(struct crc_session *s, struct grd *r, CUgraph g, int depth, CUgraphNode **keep,
			     uint32_t *nkeep);

static CUresult rebuild_node(struct crc_session *s, struct grd *r, CUgraph g, CUgraphNode *node, int depth)
{
	uint32_t type = grd_u32(r), bytes = grd_u32(r);
	uint64_t vh = grd_u64(r);
	struct grd pl = {.p = grd_take(r, bytes), .n = bytes, .version = r->version};
	struct crc_call_hdr h = {0};
	union crc_slot slot;
	CUresult res = CUDA_ERROR_INVALID_VALUE;

	if (r->bad || depth > 32)
		return CUDA_ERROR_INVALID_VALUE;
	switch (type) {
	case CU_GRAPH_NODE_TYPE_KERNEL: {
		struct crc_launch_args la;
		CUDA_KERNEL_NODE_PARAMS_v2 p;
		/* The request sits at any offset of the description: decoded from an aligned copy, which
		 * the parameters point into until the node is made. */
		uint8_t *req = pl.p ? malloc(bytes ? bytes : 1) : NULL;

		if (!req)
			break;
		memcpy(req, pl.p, bytes);
		res = crc_launch_decode(s, &h, req, pl.n, &la);
		if (res != CUDA_SUCCESS) {
			free(req);
			break;
		}
		p = (CUDA_KERNEL_NODE_PARAMS_v2){.gridDimX = la.req->grid[0],
						 .gridDimY = la.req->grid[1],
						 .gridDimZ = la.req->grid[2],
						 .blockDimX = la.req->block[0],
						 .blockDimY = la.req->block[1],
						 .blockDimZ = la.req->block[2],
						 .sharedMemBytes = la.req->shared_bytes,
						 .kernelParams = la.kp,
						 .extra = la.ex};
		if (crc_vhandle_tag(la.req->func) == CRC_HT_KERNEL) {
			p.kern = la.func;
			p.ctx = crc_session_ctx(s);
		} else {
			p.func = la.func;
		}
		res = CALL(cuGraphAddKernelNode_v2, node, g, NULL, 0, &p);
		/* The attributes after the parameters (describe_node). */
		if (res == CUDA_SUCCESS) {
			struct grd at = {.p = la.buf, .n = bytes - (size_t)(la.buf - req)};
			uint32_t count;

			grd_take(&at, crc_align8(la.req->param_bytes));
			count = grd_u32(&at);
			for (uint32_t i = 0; res == CUDA_SUCCESS && i < count && !at.bad; i++) {
				CUkernelNodeAttrID id = (CUkernelNodeAttrID)grd_u32(&at);
				const void *v;

				grd_u32(&at);
				v = grd_take(&at, sizeof(CUkernelNodeAttrValue));
				if (v) {
					CUkernelNodeAttrValue val;

					memcpy(&val, v, sizeof(val));
					res = CALL(cuGraphKernelNodeSetAttribute, *node, id, &val);
				}
			}
			if (at.bad)
				res = CUDA_ERROR_INVALID_VALUE;
		}
		free(req);
		break;
	}
	case CU_GRAPH_NODE_TYPE_MEMCPY: {
		CUDA_MEMCPY3D p;

		if (bytes < sizeof(p))
			break;
		memcpy(&p, pl.p, sizeof(p));
		res = memcpy_sides(s, &p, false);
		if (res == CUDA_SUCCESS)
			res = CALL(cuGraphAddMemcpyNode, node, g, NULL, 0, &p, crc_session_ctx(s));
		break;
	}
	case CU_GRAPH_NODE_TYPE_MEMSET: {
		CUDA_MEMSET_NODE_PARAMS p;

		if (bytes < sizeof(p))
			break;
		memcpy(&p, pl.p, sizeof(p));
		res = CALL(cuGraphAddMemsetNode, node, g, NULL, 0, &p, crc_session_ctx(s));
		break;
	}
	case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
	case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
		res = crc_translate(s, &h, CRC_HT_EVENT, grd_u64(&pl), &slot);
		if (res == CUDA_SUCCESS)
			res = type == CU_GRAPH_NODE_TYPE_WAIT_EVENT
				  ? CALL(cuGraphAddEventWaitNode, node, g, NULL, 0, slot.ptr)
				  : CALL(cuGraphAddEventRecordNode, node, g, NULL, 0, slot.ptr);
		break;
	case CU_GRAPH_NODE_TYPE_GRAPH: {
		CUgraph child = NULL;

		res = rebuild_graph(s, &pl, &child, depth + 1, NULL, NULL);
		if (res == CUDA_SUCCESS)
			res = CALL(cuGraphAddChildGraphNode, node, g, NULL, 0, child);
		if (child)
			CALL(cuGraphDestroy, child); /* the node holds its own copy */
		break;
	}
	case CU_GRAPH_NODE_TYPE_HOST: {
		CUDA_HOST_NODE_PARAMS p;
		uint64_t fn = grd_u64(&pl), data = grd_u64(&pl);

		res = pl.bad ? CUDA_ERROR_INVALID_VALUE : crc_hostfn_node_params(s, fn, data, &p);
		if (res == CUDA_SUCCESS)
			res = CALL(cuGraphAddHostNode, node, g, NULL, 0, &p);
		break;
	}
	case CU_GRAPH_NODE_TYPE_EMPTY:
		res = CALL(cuGraphAddEmptyNode, node, g, NULL, 0);
		break;
	case CU_GRAPH_NODE_TYPE_BATCH_MEM_OP: {
		uint64_t ctx = grd_u64(&pl);
		uint32_t count = grd_u32(&pl), flags = grd_u32(&pl);
		const void *ops =
		    count <= CRC_MEMOPS_MAX ? grd_take(&pl, count * sizeof(CUstreamBatchMemOpParams)) : NULL;
		CUDA_BATCH_MEM_OP_NODE_PARAMS p = {.count = count, .flags = flags};

		if (!ops || pl.bad)
			break;
		res = crc_translate(s, &h, CRC_HT_CTX, ctx, &slot);
		if (res != CUDA_SUCCESS)
			break;
		p.ctx = slot.ptr;
		p.paramArray = malloc(count * sizeof(*p.paramArray));
		if (!p.paramArray) {
			res = CUDA_ERROR_OUT_OF_MEMORY;
			break;
		}
		memcpy(p.paramArray, ops, count * sizeof(*p.paramArray));
		res = CALL(cuGraphAddBatchMemOpNode, node, g, NULL, 0, &p);
		free(p.paramArray);
		break;
	}
	case CU_GRAPH_NODE_TYPE_CONDITIONAL: {
		CUgraphNodeParams p = {.type = CU_GRAPH_NODE_TYPE_CONDITIONAL};
		uint64_t handle = grd_u64(&pl), ctx = grd_u64(&pl);
		uint32_t ctype = grd_u32(&pl), size = grd_u32(&pl);

		if (pl.bad || !size || size > CRC_COND_BODIES_MAX)
			break;
		res = crc_translate(s, &h, CRC_HT_CTX, ctx, &slot);
		if (res != CUDA_SUCCESS)
			break;
		p.conditional.handle = handle;
		p.conditional.type = (CUgraphConditionalNodeType)ctype;
		p.conditional.size = size;
		p.conditional.ctx = slot.ptr;
		res = CALL(cuGraphAddNode, node, g, NULL, 0, &p);
		if (res == CUDA_SUCCESS)
			res = cond_node_record(s, *node, g, handle, ctx, ctype, size,
					       p.conditional.phGraph_out);
		for (uint32_t i = 0; res == CUDA_SUCCESS && i < size; i++)
			res = rebuild_into(s, &pl, p.conditional.phGraph_out[i], depth + 1, NULL, NULL);
		break;
	}
	default:
		break;
	}
	if (res == CUDA_SUCCESS)
		crc_register_at(s, vh, (union crc_slot){.ptr = *node});
	else
		pr_warn("session %llu: cannot rebuild a graph node of type %u: CUDA error %d",
			(unsigned long long)s->id, type, (int)res);
	return res;
}

/* The graph's conditional handles made again, in their order: the same values (version 4). */
static CUresult rebuild_handles(struct crc_session *s, struct grd *r, CUgraph g)
{
	uint32_t count = r->version >= 4 ? grd_u32(r) : 0;
	struct crc_call_hdr h = {0};
	CUresult res = r->bad || count > 65536 ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;

	for (uint32_t i = 0; res == CUDA_SUCCESS && i < count; i++) {
		uint64_t value = grd_u64(r), ctx = grd_u64(r);
		uint32_t dflt = grd_u32(r), flags = grd_u32(r);
		CUgraphConditionalHandle got = 0;
		union crc_slot slot;

		res = r->bad ? CUDA_ERROR_INVALID_VALUE : crc_translate(s, &h, CRC_HT_CTX, ctx, &slot);
		if (res == CUDA_SUCCESS)
			res = CALL(cuGraphConditionalHandleCreate, &got, g, slot.ptr, dflt, flags);
		if (res == CUDA_SUCCESS && got != value) {
			pr_warn("session %llu: a conditional handle came back as %llu, not %llu",
				(unsigned long long)s->id, (unsigned long long)got,
				(unsigned long long)value);
			res = CUDA_ERROR_INVALID_VALUE;
		}
		if (res == CUDA_SUCCESS)
			res = cond_handle_record(s, g, value, ctx, dflt, flags);
	}
	return res;
}

/* The graph takes its references to user objects again (version 5). */
static CUresult rebuild_holds(struct crc_session *s, struct grd *r, CUgraph g)
{
	uint32_t count = r->version >= 5 ? grd_u32(r) : 0;
	struct crc_call_hdr h = {0};
	CUresult res = r->bad || count > 65536 ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;

	for (uint32_t i = 0; res == CUDA_SUCCESS && i < count; i++) {
		uint64_t vh = grd_u64(r);
		uint32_t refs = grd_u32(r);
		union crc_slot slot;

		grd_u32(r);
		res = r->bad || !refs ? CUDA_ERROR_INVALID_VALUE
				      : crc_translate(s, &h, CRC_HT_USEROBJECT, vh, &slot);
		if (res == CUDA_SUCCESS)
			res = CALL(cuGraphRetainUserObject, g, slot.ptr, refs, 0);
		if (res == CUDA_SUCCESS)
			res = uobj_hold(s, g, vh, refs);
	}
	return res;
}

/* The live user objects made again at their handles, each with the application's references, or one
 * to be released once the graphs took theirs (*release: their handles, *nrelease of them). */
static CUresult rebuild_uobjs(struct crc_session *s, struct grd *r, uint64_t **release, uint32_t *nrelease)
{
	uint32_t n = r->version >= 5 ? grd_u32(r) : 0;
	CUresult res = r->bad || n > 65536 ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;

	*nrelease = 0;
	*release = calloc(n + 1, sizeof(**release));
	if (!*release)
		return CUDA_ERROR_OUT_OF_MEMORY;
	for (uint32_t i = 0; res == CUDA_SUCCESS && i < n; i++) {
		uint64_t vh = grd_u64(r), fn = grd_u64(r), data = grd_u64(r);
		uint32_t flags = grd_u32(r), caller = grd_u32(r);
		struct crc_hostfn_arg *arg;
		CUuserObject obj = NULL;

		res = r->bad ? CUDA_ERROR_INVALID_VALUE
			     : crc_hostfn_userobj_make(s, fn, data, caller ? caller : 1, flags, &obj, &arg);
		if (res != CUDA_SUCCESS)
			break;
		crc_register_at(s, vh, (union crc_slot){.ptr = obj});
		res = crc_graph_userobj_made(s, vh, fn, data, flags, caller, arg);
		if (!caller)
			(*release)[(*nrelease)++] = vh;
	}
	return res;
}

/* Fills the graph g from its description. keep (may be NULL): its nodes in description order, *nkeep of
 * them, for the caller to free. */
static CUresult rebuild_into(struct crc_session *s, struct grd *r, CUgraph g, int depth, CUgraphNode **keep,
			     uint32_t *nkeep)
{
	CUresult res = rebuild_handles(s, r, g);
	uint32_t n, ne;

	if (res == CUDA_SUCCESS)
		res = rebuild_holds(s, r, g);
	n = grd_u32(r);
	ne = grd_u32(r);
	CUgraphNode *nodes;

	if (res != CUDA_SUCCESS || r->bad || n > (1u << 24) || ne > (1u << 26))
		return res != CUDA_SUCCESS ? res : CUDA_ERROR_INVALID_VALUE;
	nodes = calloc(n + 1, sizeof(*nodes));
	if (!nodes)
		return CUDA_ERROR_OUT_OF_MEMORY;
	for (uint32_t i = 0; res == CUDA_SUCCESS && i < n; i++)
		res = rebuild_node(s, r, g, &nodes[i], depth);
	for (uint32_t e = 0; res == CUDA_SUCCESS && e < ne; e++) {
		uint32_t fi = grd_u32(r), ti = grd_u32(r);

		res = r->bad || fi >= n || ti >= n
			  ? CUDA_ERROR_INVALID_VALUE
			  : CALL(cuGraphAddDependencies, g, &nodes[fi], &nodes[ti], 1);
	}
	if (res == CUDA_SUCCESS && keep) {
		*keep = nodes;
		*nkeep = n;
		nodes = NULL;
	}
	free(nodes);
	return res;
}

static CUresult rebuild_graph(struct crc_session *s, struct grd *r, CUgraph *out, int depth,
			      CUgraphNode **keep, uint32_t *nkeep)
{
	CUresult res = CALL(cuGraphCreate, out, 0);

	if (res == CUDA_SUCCESS)
		res = rebuild_into(s, r, *out, depth, keep, nkeep);
	if (res != CUDA_SUCCESS && *out) {
		shadow_destroy(s, *out);
		*out = NULL;
	}
	return res;
}

/* ---- copies of graphs ---------------------------------------------------------------------------------- */
/* A copy of g for an executable graph's shadow, and g's top-level nodes (*orig, *n of them, in
 * cuGraphGetNodes order). The driver's clone, except for a graph with conditional nodes, whose bodies a
 * clone would hide (nothing reads a conditional node back), or one the driver does not clone: that one
 * is rebuilt from g's description, and *copy then holds its nodes in *orig's order (else NULL:
 * cuGraphNodeFindInClone pairs them). 0, or -1 with why not; the caller frees *orig and *copy. */
static int graph_copy(struct crc_session *s, CUgraph g, CUgraph *out, CUgraphNode **orig, CUgraphNode **copy,
		      size_t *n, char *whynot, size_t whynot_len)
{
	struct gbuf b = {.anonymous = true};
	char why[256];
	uint32_t nk = 0;
	int rc = -1;

	*out = NULL;
	*copy = NULL;
	if (graph_nodes(g, orig, n)) {
		size_t count = 0;

		snprintf(whynot, whynot_len, "its nodes could not be listed: CUDA error %d",
			 (int)CALL(cuGraphGetNodes, g, NULL, &count));
		return -1;
	}
	if (!graph_has_cond(s, g)) {
		CUresult res = CALL(cuGraphClone, out, g);

		if (res == CUDA_SUCCESS && uobj_holds_copy(s, g, *out) == CUDA_SUCCESS)
			return 0;
		if (res == CUDA_SUCCESS)
			shadow_destroy(s, *out);
		*out = NULL;
		pr_info(
		    "session %llu: the driver does not clone a graph (CUDA error %d): its copy is rebuilt "
		    "from its description",
		    (unsigned long long)s->id, (int)res);
	}
	if (!describe_graph(s, g, &b, why, sizeof(why), 0) && !b.oom) {
		struct grd r = {.p = b.p, .n = b.n, .version = GRAPH_DESC_VERSION};
		CUresult res = rebuild_graph(s, &r, out, 0, copy, &nk);

		rc = res == CUDA_SUCCESS && nk == *n ? 0 : -1;
		if (rc)
			snprintf(whynot, whynot_len,
				 "rebuilding it from its description failed (CUDA error %d)", (int)res);
	} else {
		snprintf(whynot, whynot_len, "%s", b.oom ? "out of memory" : why);
	}
	free(b.p);
	return rc;
}

int crc_graph_restore(struct crc_session *s, const char *hex, char *why, size_t len)
{
	size_t hl = hex ? strlen(hex) : 0;
	uint8_t *bin;
	struct grd r;
	uint32_t ngraphs, nexecs, version, nrelease = 0;
	uint64_t *release = NULL;
	CUresult res = CUDA_SUCCESS;

	if (!hl)
		return 0; /* none, or a checkpoint from before graphs were kept */
	bin = malloc(hl / 2 + 1);
	if (!bin || hl % 2) {
		free(bin);
		snprintf(why, len, "the checkpoint's graph description is damaged");
		return -1;
	}
	for (size_t i = 0; i < hl / 2; i++) {
		unsigned v;

		if (sscanf(hex + 2 * i, "%2x", &v) != 1) {
			free(bin);
			snprintf(why, len, "the checkpoint's graph description is damaged");
			return -1;
		}
		bin[i] = (uint8_t)v;
	}
	r = (struct grd){.p = bin, .n = hl / 2};
	version = grd_u32(&r);
	r.version = version;
	if (version < 2 || version > GRAPH_DESC_VERSION) {
		free(bin);
		snprintf(why, len, "the checkpoint's graph description has an unknown version");
		return -1;
	}
	ngraphs = grd_u32(&r);
	nexecs = grd_u32(&r);
	res = rebuild_uobjs(s, &r, &release, &nrelease);
	for (uint32_t i = 0; res == CUDA_SUCCESS && i < ngraphs; i++) {
		uint64_t vh = grd_u64(&r);
		CUgraph g = NULL;

		res = rebuild_graph(s, &r, &g, 0, NULL, NULL);
		if (res == CUDA_SUCCESS)
			crc_register_at(s, vh, (union crc_slot){.ptr = g});
	}
	for (uint32_t i = 0; res == CUDA_SUCCESS && i < nexecs; i++) {
		uint64_t vh = grd_u64(&r), flags = grd_u64(&r);
		CUgraph shadow = NULL;
		CUgraphExec exec = NULL;
		CUgraphNode *nodes = NULL;
		uint32_t n = 0;

		res = rebuild_graph(s, &r, &shadow, 0, &nodes, &n);
		if (res == CUDA_SUCCESS)
			res = CALL(cuGraphInstantiateWithFlags, &exec, shadow, flags);
		if (res == CUDA_SUCCESS)
			res = gexec_add(s, exec, shadow, flags);
		/* Version 3: which node of the shadow each application node handle names. */
		if (res == CUDA_SUCCESS && version >= 3) {
			struct crc_gexec *x = gexec_find(s, exec);
			uint32_t m = grd_u32(&r);

			for (uint32_t k = 0; res == CUDA_SUCCESS && k < m; k++) {
				uint64_t vh = grd_u64(&r);

				if (vh && k < n &&
				    (map_add(&x->drv, vh, nodes[k]) || map_add(&x->sh, vh, nodes[k])))
					res = CUDA_ERROR_OUT_OF_MEMORY;
			}
			if (m != n)
				r.bad = true;
		}
		/* Version 6: the application's nodes disabled in it, disabled again. */
		if (res == CUDA_SUCCESS && version >= 6) {
			struct crc_gexec *x = gexec_find(s, exec);
			uint32_t m = grd_u32(&r);

			for (uint32_t k = 0; res == CUDA_SUCCESS && k < m && !r.bad; k++) {
				uint64_t off = grd_u64(&r);
				CUgraphNode sn = map_find(&x->drv, off);

				res =
				    sn ? CALL(cuGraphNodeSetEnabled, exec, sn, 0) : CUDA_ERROR_INVALID_VALUE;
				if (res == CUDA_SUCCESS && map_add(&x->off, off, sn))
					res = CUDA_ERROR_OUT_OF_MEMORY;
			}
		}
		free(nodes);
		if (res == CUDA_SUCCESS)
			crc_register_at(s, vh, (union crc_slot){.ptr = exec});
	}
	/* Objects the application held no reference to itself: made with one, which goes now. */
	for (uint32_t i = 0; res == CUDA_SUCCESS && i < nrelease; i++) {
		struct crc_call_hdr h = {0};
		union crc_slot slot;

		res = crc_translate(s, &h, CRC_HT_USEROBJECT, release[i], &slot);
		if (res == CUDA_SUCCESS)
			res = CALL(cuUserObjectRelease, slot.ptr, 1);
	}
	free(release);
	free(bin);
	if (res == CUDA_SUCCESS && !r.bad && (ngraphs || nexecs))
		pr_info("session %llu: %u graphs and %u executable graphs rebuilt", (unsigned long long)s->id,
			ngraphs, nexecs);
	if (res != CUDA_SUCCESS || r.bad) {
		snprintf(why, len, "cannot rebuild the checkpoint's CUDA graphs: error %d%s", (int)res,
			 r.bad ? " (damaged description)" : "");
		return -1;
	}
	return 0;
}

int crc_graph_restore_pending(struct crc_session *s)
{
	char why[CRC_CTL_MSG_MAX] = "";
	char *desc = s->graphs_pending;
	CUcontext prev;
	int rc;

	s->graphs_pending = NULL;
	rc = crc_session_some_ctx(s, &prev) == CUDA_SUCCESS ? crc_graph_restore(s, desc, why, sizeof(why))
							    : -1;
	crc_session_ctx_back(prev);
	free(desc);
	if (rc) {
		pr_err("session %llu: %s", (unsigned long long)s->id,
		       why[0] ? why : "no context for its graphs");
		s->sticky = CUDA_ERROR_UNKNOWN;
	}
	return rc;
}

/* ---- kernel node parameters back ---------------------------------------------------------------- */
/* A kernel node's parameters, as a launch request carries them. */
CUresult crc_raw_graph_kernel_get(struct crc_session *s, const struct crc_call_hdr *h, const uint8_t *args,
				  size_t len)
{
	CUDA_KERNEL_NODE_PARAMS_v2 p = {0};
	struct gbuf b = {0};
	struct node_req nr;
	char why[256];
	void *out;
	CUresult res = node_req(s, h, args, len, &nr);

	free(nr.deps);
	if (res == CUDA_SUCCESS)
		res = CALL(cuGraphKernelNodeGetParams_v2, nr.node, &p);
	if (res != CUDA_SUCCESS)
		return res;
	if (node_launch_req(s, &p, &b, why, sizeof(why))) {
		pr_warn("cuGraphKernelNodeGetParams: %s", why);
		res = CUDA_ERROR_NOT_SUPPORTED;
	} else if (b.oom || !(out = crc_out(s, b.n))) {
		res = CUDA_ERROR_OUT_OF_MEMORY;
	} else {
		memcpy(out, b.p, b.n);
	}
	free(b.p);
	return res;
}

/* ---- checkpoint ---------------------------------------------------------------------------------- */
int crc_graph_capturing(struct crc_session *s, char *why, size_t len)
{
	const struct crc_htable *t = &s->tables[CRC_HT_STREAM];
	bool capturing = false;

	for (uint32_t i = 1; i <= t->n && !capturing; i++)
		capturing = t->real[i].ptr && crc_stream_capturing(t->real[i].ptr);
	for (unsigned i = 0; i < s->n_ptstreams && !capturing; i++)
		capturing = crc_stream_capturing(s->ptstreams[i].stream);
	if (!capturing)
		return 0;
	snprintf(
	    why, len,
	    "session %llu is capturing a stream into a CUDA graph, and its capture did not end within 2 s: "
	    "a checkpoint during a capture is not supported; the program runs on untouched, try again "
	    "when the capture has ended",
	    (unsigned long long)s->id);
	return -1;
}
