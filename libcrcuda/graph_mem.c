/* Graph-owned memory: mem alloc and free nodes, and stream-ordered allocation on a capturing stream.
 *
 * Natively the driver places such memory at addresses it picks when the node is made, outside any
 * range a restore could ask for again, and maps it at each launch. Here each allocation is an ordinary
 * session allocation (cuMemAlloc: journaled, checkpointed and restored at its address like any other)
 * made when the node is, and the node the application holds is an empty node to the driver: a
 * checkpoint carries graph memory like the rest. Its type and parameters are answered as the alloc or
 * free node's. The memory stays mapped while a holder needs it: the graph whose node made it, the
 * graphs cloned from it or holding it as a child graph, and the executable graphs instantiated or
 * updated from any of them; it is freed with the last. Frees of it by free nodes, cuMemFreeAsync or
 * cuMemFree do nothing (natively they return it to the graph pool, from which the next launch takes
 * it again at the same address). The graph memory attributes count these allocations: in use and
 * reserved alike, from the node's making until the last holder is gone; trimming has nothing to do. */
#define LOG_PREFIX "libcrcuda: "
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "crcuda/log.h"
#include "crcuda/proto.h"
#include "hooks.h"

#define GMEM_DESCS_MAX 64

struct gmem {
	CUDA_MEM_ALLOC_NODE_PARAMS params; /* dptr set; accessDescs point at descs */
	CUmemAccessDesc descs[GMEM_DESCS_MAX];
	int dev;
	unsigned holds;
	struct gmem *next;
};

/* A node the application holds as an alloc node (mem set) or a free node (freed: the address). */
struct gmem_node {
	CUgraphNode node;
	CUgraph graph;
	struct gmem *mem;
	CUdeviceptr freed;
	struct gmem_node *next;
};

/* holder (a graph or an executable graph) keeps mem mapped. */
struct gmem_hold {
	uintptr_t holder;
	struct gmem *mem;
	struct gmem_hold *next;
};

static pthread_mutex_t gm_lock = PTHREAD_MUTEX_INITIALIZER;
static struct gmem *mems;
static struct gmem_node *gnodes;
static struct gmem_hold *holds;
static cuuint64_t in_use[CRC_MAX_DEVICES], in_use_high[CRC_MAX_DEVICES];

static struct gmem *mem_at(CUdeviceptr p)
{
	for (struct gmem *m = mems; m; m = m->next)
		if (m->params.dptr == p)
			return m;
	return NULL;
}

static struct gmem_node *node_find(CUgraphNode n)
{
	for (struct gmem_node *g = gnodes; g; g = g->next)
		if (g->node == n)
			return g;
	return NULL;
}

bool crc_graph_mem_owns(CUdeviceptr p)
{
	bool owned;

	pthread_mutex_lock(&gm_lock);
	owned = mem_at(p) != NULL;
	pthread_mutex_unlock(&gm_lock);
	return owned;
}

/* ---- holders (under gm_lock) ---------------------------------------------------------------------- */
static int hold_add(uintptr_t holder, struct gmem *m)
{
	struct gmem_hold *h;

	for (h = holds; h; h = h->next)
		if (h->holder == holder && h->mem == m)
			return 0;
	h = malloc(sizeof(*h));
	if (!h)
		return -1;
	*h = (struct gmem_hold){.holder = holder, .mem = m, .next = holds};
	holds = h;
	m->holds++;
	return 0;
}

/* to gets every allocation from holds. */
static CUresult hold_copy(uintptr_t to, uintptr_t from)
{
	CUresult res = CUDA_SUCCESS;

	pthread_mutex_lock(&gm_lock);
	for (struct gmem_hold *h = holds; h && res == CUDA_SUCCESS; h = h->next)
		if (h->holder == from && hold_add(to, h->mem))
			res = CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_unlock(&gm_lock);
	return res;
}

static void mem_unlink(struct gmem *m)
{
	for (struct gmem **pp = &mems; *pp; pp = &(*pp)->next)
		if (*pp == m) {
			*pp = m->next;
			break;
		}
	in_use[m->dev] -= m->params.bytesize;
}

/* The holder is gone: the allocations nothing holds any more are freed (after the lock). */
static void holder_gone(uintptr_t holder)
{
	struct gmem *dead = NULL;

	pthread_mutex_lock(&gm_lock);
	for (struct gmem_hold **pp = &holds; *pp;) {
		struct gmem_hold *h = *pp;

		if (h->holder != holder) {
			pp = &h->next;
			continue;
		}
		*pp = h->next;
		if (--h->mem->holds == 0) {
			mem_unlink(h->mem);
			h->mem->next = dead;
			dead = h->mem;
		}
		free(h);
	}
	for (struct gmem_node **pp = &gnodes; *pp;) {
		struct gmem_node *g = *pp;

		if ((uintptr_t)g->graph == holder) {
			*pp = g->next;
			free(g);
		} else {
			pp = &g->next;
		}
	}
	pthread_mutex_unlock(&gm_lock);
	while (dead) {
		struct gmem *m = dead;
		CUresult res = crc_fwd_cuMemFree_v2(m->params.dptr);

		if (res != CUDA_SUCCESS)
			pr_warn("freeing graph memory at 0x%llx: error %d",
				(unsigned long long)m->params.dptr, (int)res);
		dead = m->next;
		free(m);
	}
}

/* ---- allocations ---------------------------------------------------------------------------------- */
/* The memory, made as a session allocation on the node's device. A capture running in this process
 * may be in global mode, which an allocation call would invalidate: the thread's mode is relaxed
 * around it, as PyTorch's allocator does around cudaMalloc. */
static CUresult mem_make(const CUDA_MEM_ALLOC_NODE_PARAMS *p, struct gmem **out)
{
	CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
	int dev = p->poolProps.location.id;
	CUdevice cur = -1;
	CUcontext pushed = NULL, popped;
	bool relax = crc_capturing();
	struct gmem *m;
	CUresult res;

	if (!p->bytesize || p->accessDescCount > GMEM_DESCS_MAX || (p->accessDescCount && !p->accessDescs) ||
	    p->poolProps.allocType != CU_MEM_ALLOCATION_TYPE_PINNED)
		return CUDA_ERROR_INVALID_VALUE;
	if (p->poolProps.location.type != CU_MEM_LOCATION_TYPE_DEVICE) {
		pr_warn("graph memory outside a GPU (location type %d) is not supported under crcuda yet",
			(int)p->poolProps.location.type);
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	if (crc_check_device(dev) != CUDA_SUCCESS)
		return CUDA_ERROR_INVALID_DEVICE;
	m = calloc(1, sizeof(*m));
	if (!m)
		return CUDA_ERROR_OUT_OF_MEMORY;
	m->params = *p;
	memcpy(m->descs, p->accessDescs, p->accessDescCount * sizeof(*m->descs));
	m->params.accessDescs = m->descs;
	m->dev = dev;
	/* On the node's device: its primary context when another one (or none) is current. The primary
	 * context stays retained, as the driver keeps graph memory's device ready. */
	if (crc_ctx_device(0, &cur) != CUDA_SUCCESS || cur != dev) {
		res = crc_hook_cuDevicePrimaryCtxRetain(&pushed, dev);
		if (res == CUDA_SUCCESS)
			res = crc_hook_cuCtxPushCurrent_v2(pushed);
		if (res != CUDA_SUCCESS) {
			free(m);
			return res;
		}
	}
	if (relax)
		crc_hook_cuThreadExchangeStreamCaptureMode(&mode);
	res = crc_fwd_cuMemAlloc_v2(&m->params.dptr, p->bytesize);
	if (relax)
		crc_hook_cuThreadExchangeStreamCaptureMode(&mode);
	if (pushed)
		crc_hook_cuCtxPopCurrent_v2(&popped);
	if (res != CUDA_SUCCESS) {
		free(m);
		return res;
	}
	pthread_mutex_lock(&gm_lock);
	m->next = mems;
	mems = m;
	in_use[dev] += p->bytesize;
	if (in_use[dev] > in_use_high[dev])
		in_use_high[dev] = in_use[dev];
	pthread_mutex_unlock(&gm_lock);
	*out = m;
	return CUDA_SUCCESS;
}

/* The node stands for m's allocation (m) or its free (freed); graph holds m. */
static CUresult node_record(CUgraphNode node, CUgraph graph, struct gmem *m, CUdeviceptr freed)
{
	struct gmem_node *g = malloc(sizeof(*g));
	CUresult res = CUDA_SUCCESS;

	if (!g)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*g = (struct gmem_node){.node = node, .graph = graph, .mem = m, .freed = freed};
	pthread_mutex_lock(&gm_lock);
	g->next = gnodes;
	gnodes = g;
	if (m && hold_add((uintptr_t)graph, m))
		res = CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_unlock(&gm_lock);
	return res;
}

/* An allocation nothing holds yet (its node could not be made) goes at once. */
static void mem_drop(struct gmem *m)
{
	pthread_mutex_lock(&gm_lock);
	mem_unlink(m);
	pthread_mutex_unlock(&gm_lock);
	crc_fwd_cuMemFree_v2(m->params.dptr);
	free(m);
}

CUresult crc_hook_cuGraphAddMemAllocNode(CUgraphNode *phGraphNode, CUgraph hGraph,
					 const CUgraphNode *dependencies, size_t numDependencies,
					 CUDA_MEM_ALLOC_NODE_PARAMS *nodeParams)
{
	struct gmem *m;
	CUresult res = crc_ready();

	if (res != CUDA_SUCCESS)
		return res;
	if (!phGraphNode || !nodeParams || !hGraph || (numDependencies && !dependencies))
		return CUDA_ERROR_INVALID_VALUE;
	res = mem_make(nodeParams, &m);
	if (res != CUDA_SUCCESS)
		return res;
	res = crc_fwd_cuGraphAddEmptyNode(phGraphNode, hGraph, dependencies, numDependencies);
	if (res != CUDA_SUCCESS) {
		mem_drop(m);
		return res;
	}
	nodeParams->dptr = m->params.dptr;
	return node_record(*phGraphNode, hGraph, m, 0);
}

CUresult crc_hook_cuGraphAddMemFreeNode(CUgraphNode *phGraphNode, CUgraph hGraph,
					const CUgraphNode *dependencies, size_t numDependencies,
					CUdeviceptr dptr)
{
	CUresult res;

	if (!phGraphNode || !hGraph || (numDependencies && !dependencies) || !crc_graph_mem_owns(dptr))
		return CUDA_ERROR_INVALID_VALUE;
	res = crc_fwd_cuGraphAddEmptyNode(phGraphNode, hGraph, dependencies, numDependencies);
	return res == CUDA_SUCCESS ? node_record(*phGraphNode, hGraph, NULL, dptr) : res;
}

bool crc_graph_mem_node_type(CUgraphNode node, CUgraphNodeType *type)
{
	struct gmem_node *g;

	pthread_mutex_lock(&gm_lock);
	g = node_find(node);
	if (g)
		*type = g->mem ? CU_GRAPH_NODE_TYPE_MEM_ALLOC : CU_GRAPH_NODE_TYPE_MEM_FREE;
	pthread_mutex_unlock(&gm_lock);
	return g != NULL;
}

/* accessDescs point into the calling thread's copy, valid until its next call of this function. */
CUresult crc_hook_cuGraphMemAllocNodeGetParams(CUgraphNode hNode, CUDA_MEM_ALLOC_NODE_PARAMS *params_out)
{
	static __thread CUmemAccessDesc tl_descs[GMEM_DESCS_MAX];
	struct gmem_node *g;
	CUresult res = CUDA_ERROR_INVALID_VALUE;

	if (!params_out)
		return res;
	pthread_mutex_lock(&gm_lock);
	g = node_find(hNode);
	if (g && g->mem) {
		*params_out = g->mem->params;
		memcpy(tl_descs, g->mem->descs, g->mem->params.accessDescCount * sizeof(*tl_descs));
		params_out->accessDescs = tl_descs;
		res = CUDA_SUCCESS;
	}
	pthread_mutex_unlock(&gm_lock);
	return res;
}

CUresult crc_hook_cuGraphMemFreeNodeGetParams(CUgraphNode hNode, CUdeviceptr *dptr_out)
{
	struct gmem_node *g;
	CUresult res = CUDA_ERROR_INVALID_VALUE;

	if (!dptr_out)
		return res;
	pthread_mutex_lock(&gm_lock);
	g = node_find(hNode);
	if (g && !g->mem) {
		*dptr_out = g->freed;
		res = CUDA_SUCCESS;
	}
	pthread_mutex_unlock(&gm_lock);
	return res;
}

CUresult crc_hook_cuGraphDestroyNode(CUgraphNode hNode)
{
	CUresult res = crc_fwd_cuGraphDestroyNode(hNode);

	if (res != CUDA_SUCCESS)
		return res;
	/* The graph keeps holding an allocation whose node went: its memory may be in use by its execs. */
	pthread_mutex_lock(&gm_lock);
	for (struct gmem_node **pp = &gnodes; *pp; pp = &(*pp)->next)
		if ((*pp)->node == hNode) {
			struct gmem_node *g = *pp;

			*pp = g->next;
			free(g);
			break;
		}
	pthread_mutex_unlock(&gm_lock);
	return res;
}

/* ---- stream capture ------------------------------------------------------------------------------- */
/* The capture gets an empty node after its current dependencies, which then become that node: the
 * place an alloc or free node takes natively. */
static CUresult capture_node(CUstream stream, CUgraphNode *node, CUgraph *graph)
{
	CUstreamCaptureStatus status;
	const CUgraphNode *deps = NULL;
	size_t ndeps = 0;
	CUresult res = crc_capture_info_remote(stream, &status, NULL, graph, &deps, NULL, &ndeps);

	if (res == CUDA_SUCCESS && status != CU_STREAM_CAPTURE_STATUS_ACTIVE)
		res = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
	if (res == CUDA_SUCCESS)
		res = crc_fwd_cuGraphAddEmptyNode(node, *graph, deps, ndeps);
	if (res == CUDA_SUCCESS)
		res = crc_fwd_cuStreamUpdateCaptureDependencies(stream, node, 1,
								CU_STREAM_SET_CAPTURE_DEPENDENCIES);
	return res;
}

CUresult crc_graph_mem_capture_alloc(CUdeviceptr *dptr, size_t bytesize, const CUmemPoolProps *props,
				     CUstream stream)
{
	CUmemAccessDesc acc = {.location = props->location, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
	CUDA_MEM_ALLOC_NODE_PARAMS p = {
	    .poolProps = *props, .accessDescs = &acc, .accessDescCount = 1, .bytesize = bytesize};
	CUgraphNode node;
	CUgraph graph;
	struct gmem *m;
	CUresult res;

	if (!dptr)
		return CUDA_ERROR_INVALID_VALUE;
	res = mem_make(&p, &m);
	if (res != CUDA_SUCCESS)
		return res;
	res = capture_node(stream, &node, &graph);
	if (res != CUDA_SUCCESS) {
		mem_drop(m);
		return res;
	}
	*dptr = m->params.dptr;
	return node_record(node, graph, m, 0);
}

CUresult crc_graph_mem_capture_free(CUdeviceptr dptr, CUstream stream)
{
	CUgraphNode node;
	CUgraph graph;
	CUresult res = capture_node(stream, &node, &graph);

	return res == CUDA_SUCCESS ? node_record(node, graph, NULL, dptr) : res;
}

/* ---- holders ------------------------------------------------------------------------------------ */
CUresult crc_graph_mem_instantiated(CUgraphExec exec, CUgraph graph)
{
	return hold_copy((uintptr_t)exec, (uintptr_t)graph);
}

/* A graph launched from the device names its executable graph by the driver's handle inside kernels,
 * where the layer's handle cannot be translated: refused rather than left to fail on the device. */
CUresult crc_hook_cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph,
					      unsigned long long flags)
{
	CUresult res;

	if (flags & CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH) {
		pr_warn("graphs launched from the device (CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH) are not "
			"supported under crcuda yet");
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	res = crc_fwd_cuGraphInstantiateWithFlags(phGraphExec, hGraph, flags);

	return res == CUDA_SUCCESS ? crc_graph_mem_instantiated(*phGraphExec, hGraph) : res;
}

CUresult crc_hook_cuGraphExecUpdate(CUgraphExec hGraphExec, CUgraph hGraph, CUgraphNode *hErrorNode_out,
				    CUgraphExecUpdateResult *updateResult_out)
{
	CUresult res = crc_fwd_cuGraphExecUpdate(hGraphExec, hGraph, hErrorNode_out, updateResult_out);

	return res == CUDA_SUCCESS ? crc_graph_mem_instantiated(hGraphExec, hGraph) : res;
}

CUresult crc_hook_cuGraphAddChildGraphNode(CUgraphNode *phGraphNode, CUgraph hGraph,
					   const CUgraphNode *dependencies, size_t numDependencies,
					   CUgraph childGraph)
{
	CUresult res =
	    crc_fwd_cuGraphAddChildGraphNode(phGraphNode, hGraph, dependencies, numDependencies, childGraph);

	return res == CUDA_SUCCESS ? hold_copy((uintptr_t)hGraph, (uintptr_t)childGraph) : res;
}

/* The clone's alloc and free nodes are the original's, found in the clone. */
CUresult crc_hook_cuGraphClone(CUgraph *phGraphClone, CUgraph originalGraph)
{
	CUresult res = crc_fwd_cuGraphClone(phGraphClone, originalGraph);
	struct gmem_node *found = NULL;

	if (res != CUDA_SUCCESS)
		return res;
	res = hold_copy((uintptr_t)*phGraphClone, (uintptr_t)originalGraph);
	pthread_mutex_lock(&gm_lock);
	for (struct gmem_node *g = gnodes; g && res == CUDA_SUCCESS; g = g->next) {
		struct gmem_node *c;

		if (g->graph != originalGraph)
			continue;
		c = malloc(sizeof(*c));
		if (!c) {
			res = CUDA_ERROR_OUT_OF_MEMORY;
			break;
		}
		*c = *g;
		c->graph = *phGraphClone;
		c->next = found;
		found = c;
	}
	pthread_mutex_unlock(&gm_lock);
	/* Looked up without the lock: each lookup is a call to the daemon. */
	for (struct gmem_node *c = found, *next; c; c = next) {
		next = c->next;
		if (res == CUDA_SUCCESS &&
		    crc_fwd_cuGraphNodeFindInClone(&c->node, c->node, *phGraphClone) == CUDA_SUCCESS) {
			pthread_mutex_lock(&gm_lock);
			c->next = gnodes;
			gnodes = c;
			pthread_mutex_unlock(&gm_lock);
		} else {
			free(c);
		}
	}
	return res;
}

CUresult crc_hook_cuGraphDestroy(CUgraph hGraph)
{
	CUresult res = crc_fwd_cuGraphDestroy(hGraph);

	if (res == CUDA_SUCCESS)
		holder_gone((uintptr_t)hGraph);
	return res;
}

CUresult crc_hook_cuGraphExecDestroy(CUgraphExec hGraphExec)
{
	CUresult res = crc_fwd_cuGraphExecDestroy(hGraphExec);

	if (res == CUDA_SUCCESS)
		holder_gone((uintptr_t)hGraphExec);
	return res;
}

/* ---- attributes ------------------------------------------------------------------------------------ */
/* In use and reserved are one number here. Only the high watermarks are set, and only to 0: back to
 * what is in use now. */
static CUresult graph_mem_attr(CUdevice device, CUgraphMem_attribute attr, void *value, bool set)
{
	CUresult res = crc_ready();
	cuuint64_t v = 0;

	if (res != CUDA_SUCCESS)
		return res;
	if (!value)
		return CUDA_ERROR_INVALID_VALUE;
	res = crc_check_device(device);
	if (res != CUDA_SUCCESS)
		return res;
	if (set)
		memcpy(&v, value, sizeof(v));
	pthread_mutex_lock(&gm_lock);
	switch (attr) {
	case CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT:
	case CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT:
		if (set)
			res = CUDA_ERROR_INVALID_VALUE;
		v = in_use[device];
		break;
	case CU_GRAPH_MEM_ATTR_USED_MEM_HIGH:
	case CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH:
		if (set && v)
			res = CUDA_ERROR_INVALID_VALUE;
		else if (set)
			in_use_high[device] = in_use[device];
		v = in_use_high[device];
		break;
	default:
		res = CUDA_ERROR_INVALID_VALUE;
	}
	pthread_mutex_unlock(&gm_lock);
	if (res == CUDA_SUCCESS && !set)
		memcpy(value, &v, sizeof(v));
	return res;
}

CUresult crc_hook_cuDeviceGetGraphMemAttribute(CUdevice device, CUgraphMem_attribute attr, void *value)
{
	return graph_mem_attr(device, attr, value, false);
}

CUresult crc_hook_cuDeviceSetGraphMemAttribute(CUdevice device, CUgraphMem_attribute attr, void *value)
{
	return graph_mem_attr(device, attr, value, true);
}

CUresult crc_hook_cuDeviceGraphMemTrim(CUdevice device)
{
	CUresult res = crc_ready();

	if (res != CUDA_SUCCESS)
		return res;
	return crc_check_device(device);
}
