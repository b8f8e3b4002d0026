/* CUDA graphs and stream capture of the simulated device.
 *
 * A graph is a list of nodes (in creation order) with dependency edges kept both ways. Node
 * parameters are owned copies: a kernel node holds its parameter bytes laid out as the launch's
 * constant bank (kernelParams of GetParams point into them, as natively), a child graph node its
 * own clone of the child graph. An executable graph is a deep clone of the graph at instantiate
 * time plus a topological order (Kahn's, ties in creation order); exec-node calls find the clone of
 * the original graph's node by its id. A launch runs the nodes one after another on the launch
 * stream: each node becomes ops queued like any other work (child graphs expanded), each op with
 * its own copy of the parameters, so several launches may be queued.
 *
 * Stream capture: a capturing stream has a struct sim_stream_capture (its capture and its current
 * dependency set). stream_submit hands every op of a capturing stream to sim_capture_take, which
 * turns it into a node depending on the stream's set, which then becomes that node. cuEventRecord
 * in a capture remembers the set in the event; cuStreamWaitEvent with such an event joins the
 * waiting stream into the capture (or merges the sets). All graph and capture state is guarded by
 * one lock, taken before sim_lock and the stream and event locks, never after them. */
#define LOG_PREFIX "sim: "

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "crcuda/copy2d.h"
#include "crcuda/log.h"
#include "crcuda/memops.h"
#include "sim.h"

static pthread_mutex_t graph_lock = PTHREAD_MUTEX_INITIALIZER;

/* ---- node vectors ---- */

struct node_vec {
	struct CUgraphNode_st **v;
	size_t n, cap;
};

static bool vec_push(struct node_vec *vec, struct CUgraphNode_st *node)
{
	if (vec->n == vec->cap) {
		size_t cap = vec->cap ? vec->cap * 2 : 4;
		struct CUgraphNode_st **v = realloc(vec->v, cap * sizeof(*v));

		if (!v)
			return false;
		vec->v = v;
		vec->cap = cap;
	}
	vec->v[vec->n++] = node;
	return true;
}

static bool vec_has(const struct node_vec *vec, const struct CUgraphNode_st *node)
{
	for (size_t i = 0; i < vec->n; i++)
		if (vec->v[i] == node)
			return true;
	return false;
}

static bool vec_remove(struct node_vec *vec, const struct CUgraphNode_st *node)
{
	for (size_t i = 0; i < vec->n; i++) {
		if (vec->v[i] == node) {
			memmove(&vec->v[i], &vec->v[i + 1], (vec->n - i - 1) * sizeof(vec->v[0]));
			vec->n--;
			return true;
		}
	}
	return false;
}

static void vec_free(struct node_vec *vec)
{
	free(vec->v);
	vec->v = NULL;
	vec->n = vec->cap = 0;
}

/* dst = src (a copy; dst's old contents are dropped). */
static bool vec_assign(struct node_vec *dst, struct CUgraphNode_st *const *src, size_t n)
{
	dst->n = 0;
	for (size_t i = 0; i < n; i++)
		if (!vec_has(dst, src[i]) && !vec_push(dst, src[i]))
			return false;
	return true;
}

/* ---- objects ---- */

#define KNODE_ATTRS 32 /* CUkernelNodeAttrID values below this are kept */

struct node_kernel {
	CUkernelNodeAttrValue attrs[KNODE_ATTRS]; /* set by cuGraphKernelNodeSetAttribute; zero: unset */
	struct CUfunc_st *func;
	struct CUctx_st *ctx;
	crcuda_sim_kernel_fn *host_fn;
	struct crcuda_sim_dim3 grid, block;
	unsigned shared_bytes;
	void *buffer; /* the parameter bytes, func->param_bytes of them */
	void **ptrs;  /* one pointer per parameter, into buffer */
	unsigned count;
};

struct CUgraphNode_st {
	uint32_t magic;
	CUgraphNodeType type;
	struct CUgraph_st *graph;
	unsigned long long id;
	/* Clones and executable graphs: the node this one was copied from, and (executable graphs) the
	 * node of the graph of the latest cuGraphExecUpdate; 0 if none. */
	unsigned long long origin_id;
	struct node_vec deps, outs;
	bool disabled; /* executable graphs: cuGraphNodeSetEnabled(0) */
	size_t index;  /* scratch for the algorithms below */
	unsigned long long mark;
	union {
		struct node_kernel kernel;
		struct {
			CUDA_MEMCPY3D p;
			struct CUctx_st *ctx;
		} copy;
		struct {
			CUDA_MEMSET_NODE_PARAMS p;
			struct CUctx_st *ctx;
		} set;
		CUDA_HOST_NODE_PARAMS host;
		struct CUgraph_st *child;
		struct CUevent_st *event;
		struct sim_gmem *gmem; /* a mem alloc node's memory, shared by its copies */
		CUdeviceptr freed;     /* a mem free node's address */
		struct {
			CUgraphConditionalHandle handle;
			CUgraphConditionalNodeType type;
			unsigned size;
			struct CUgraph_st **bodies; /* size of them, owned (their owner is the node) */
		} cond;
		struct {
			CUDA_BATCH_MEM_OP_NODE_PARAMS p; /* paramArray: the node's own copy */
		} memops;
	};
};

/* A conditional handle of a graph: handle h is cond[h - 1] of the graph's root (bodies count with it). */
struct sim_cond_handle {
	unsigned dflt, flags;
};

struct CUgraph_st {
	uint32_t magic;
	unsigned long long id;
	struct node_vec nodes;	      /* creation order */
	struct CUgraphNode_st *owner; /* the child graph or conditional node this graph belongs to */
	unsigned captures;	      /* active captures adding to it */
	struct sim_cond_handle *cond; /* conditional handles made on it, ncond of them */
	unsigned ncond;
	struct uobj_ref *uobjs; /* user objects it holds references to */
};

/* A user object: destroy(ptr) runs when the last reference goes (the graphs' and the caller's). */
struct CUuserObject_st {
	uint32_t magic;
	void *ptr;
	CUhostFn destroy;
	unsigned refs; /* under graph_lock */
};

struct uobj_ref {
	struct CUuserObject_st *obj;
	unsigned count;
	struct uobj_ref *next;
};

struct CUgraphExec_st {
	uint32_t magic;
	struct CUctx_st *ctx;
	unsigned long long flags;
	struct CUgraph_st *graph; /* the snapshot */
	struct node_vec order;	  /* its nodes, in a topological order */
	struct sim_conds *conds;  /* its conditional handles' values (NULL: none) */
};

struct sim_capture {
	unsigned long long id;
	struct CUgraph_st *graph;
	bool own_graph; /* false for cuStreamBeginCaptureToGraph */
	struct CUstream_st *origin;
	CUstreamCaptureMode mode;
	pthread_t thread;
	bool invalidated;
	struct CUstream_st **streams;
	size_t nstreams, streams_cap;
	struct sim_capture *next;
};

struct sim_stream_capture {
	struct sim_capture *cap;
	struct node_vec deps;
	/* What cuStreamGetCaptureInfo last returned (valid until the next call on the stream). */
	struct CUgraphNode_st **info;
	CUgraphEdgeData *info_edges;
	size_t info_cap;
};

struct sim_event_capture {
	unsigned long long capture_id;
	struct node_vec nodes;
};

static struct sim_capture *captures; /* active ones */
static atomic_int capture_count;
static unsigned long long mark_gen;
static _Thread_local CUstreamCaptureMode thread_capture_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

/* An entry point that only forwards to impl; SIM_ENTER comes first, as in every entry point. */
#define GRAPH_API(name, params, impl, ...)                                                                   \
	CUresult name params                                                                                 \
	{                                                                                                    \
		SIM_ENTER(name);                                                                             \
		return impl(__VA_ARGS__);                                                                    \
	}

/* An entry point and its per-thread-default-stream twin around impl(per_thread, ...). */
#define GRAPH_STREAM_API_PAIR(name, name_pt, impl, params, ...)                                              \
	GRAPH_API(name, params, impl, false, __VA_ARGS__)                                                    \
	GRAPH_API(name_pt, params, impl, true, __VA_ARGS__)

static bool graph_valid(CUgraph g)
{
	return g && g->magic == SIM_MAGIC_GRAPH;
}

static bool node_valid(CUgraphNode n)
{
	return n && n->magic == SIM_MAGIC_GRAPH_NODE;
}

static bool exec_valid(CUgraphExec x)
{
	return x && x->magic == SIM_MAGIC_GRAPH_EXEC;
}

static bool event_valid(CUevent e)
{
	return e && e->magic == SIM_MAGIC_EVENT;
}

static struct CUgraph_st *graph_new(void)
{
	struct CUgraph_st *g = calloc(1, sizeof(*g));

	if (!g)
		return NULL;
	g->magic = SIM_MAGIC_GRAPH;
	g->id = sim_next_id();
	return g;
}

static void graph_free(struct CUgraph_st *g);

/* ---- user objects ---- */
static bool uobj_valid(CUuserObject o)
{
	return o && o->magic == SIM_MAGIC_USER_OBJECT;
}

/* Under graph_lock. The callback may not call CUDA (as natively). */
static void uobj_release(struct CUuserObject_st *o, unsigned count)
{
	if (count > o->refs)
		count = o->refs;
	o->refs -= count;
	if (o->refs)
		return;
	o->magic = SIM_MAGIC_DEAD;
	o->destroy(o->ptr);
	free(o);
}

/* g holds count more references to o (under graph_lock). */
static bool uobj_hold(struct CUgraph_st *g, struct CUuserObject_st *o, unsigned count)
{
	struct uobj_ref *r;

	for (r = g->uobjs; r && r->obj != o; r = r->next)
		;
	if (!r) {
		r = calloc(1, sizeof(*r));
		if (!r)
			return false;
		*r = (struct uobj_ref){.obj = o, .next = g->uobjs};
		g->uobjs = r;
	}
	r->count += count;
	return true;
}

CUresult cuUserObjectCreate(CUuserObject *out, void *ptr, CUhostFn destroy, unsigned refs, unsigned flags)
{
	struct CUuserObject_st *o;

	SIM_ENTER(cuUserObjectCreate);
	if (!out || !destroy || !refs || flags != CU_USER_OBJECT_NO_DESTRUCTOR_SYNC)
		return CUDA_ERROR_INVALID_VALUE;
	o = calloc(1, sizeof(*o));
	if (!o)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*o = (struct CUuserObject_st){
	    .magic = SIM_MAGIC_USER_OBJECT, .ptr = ptr, .destroy = destroy, .refs = refs};
	*out = o;
	return CUDA_SUCCESS;
}

static CUresult uobj_change(CUuserObject o, unsigned count, bool retain)
{
	CUresult res = CUDA_SUCCESS;

	pthread_mutex_lock(&graph_lock);
	if (!uobj_valid(o) || !count)
		res = CUDA_ERROR_INVALID_VALUE;
	else if (retain)
		o->refs += count;
	else
		uobj_release(o, count);
	pthread_mutex_unlock(&graph_lock);
	return res;
}

GRAPH_API(cuUserObjectRetain, (CUuserObject o, unsigned count), uobj_change, o, count, true)
GRAPH_API(cuUserObjectRelease, (CUuserObject o, unsigned count), uobj_change, o, count, false)

/* MOVE: the graph takes over count of the caller's references; else it gets count new ones. */
CUresult cuGraphRetainUserObject(CUgraph g, CUuserObject o, unsigned count, unsigned flags)
{
	CUresult res = CUDA_SUCCESS;

	SIM_ENTER(cuGraphRetainUserObject);
	pthread_mutex_lock(&graph_lock);
	if (!graph_valid(g) || !uobj_valid(o) || !count || (flags & ~(unsigned)CU_GRAPH_USER_OBJECT_MOVE))
		res = CUDA_ERROR_INVALID_VALUE;
	else if (!uobj_hold(g, o, count))
		res = CUDA_ERROR_OUT_OF_MEMORY;
	else if (!(flags & CU_GRAPH_USER_OBJECT_MOVE))
		o->refs += count;
	pthread_mutex_unlock(&graph_lock);
	return res;
}

CUresult cuGraphReleaseUserObject(CUgraph g, CUuserObject o, unsigned count)
{
	struct uobj_ref *r = NULL;
	CUresult res = CUDA_ERROR_INVALID_VALUE;

	SIM_ENTER(cuGraphReleaseUserObject);
	pthread_mutex_lock(&graph_lock);
	if (graph_valid(g) && uobj_valid(o) && count)
		for (r = g->uobjs; r && r->obj != o; r = r->next)
			;
	if (r && r->count >= count) {
		r->count -= count;
		uobj_release(o, count);
		res = CUDA_SUCCESS;
	}
	pthread_mutex_unlock(&graph_lock);
	return res;
}

/* Releases what a node's parameters own (the node struct itself stays). */
/* ---- graph memory ----
 * Made when its alloc node is, in the device's arena, and kept while any copy of the node (clones,
 * executable graphs, child graphs) lives: crcuda's layer serves graph memory the same way (the driver
 * maps it at each launch). The attributes count it from the node's making to its last copy's end. */
#define GMEM_DESCS_MAX 64

struct sim_gmem {
	CUDA_MEM_ALLOC_NODE_PARAMS p; /* accessDescs point at descs */
	CUmemAccessDesc descs[GMEM_DESCS_MAX];
	int dev;
	unsigned refs;
	struct sim_gmem *next;
};

static struct sim_gmem *gmems; /* live ones, under graph_lock */
static cuuint64_t gmem_in_use[SIM_MAX_DEVICES], gmem_high[SIM_MAX_DEVICES];

static struct sim_gmem *gmem_at(CUdeviceptr p)
{
	for (struct sim_gmem *m = gmems; m; m = m->next)
		if (m->p.dptr == p)
			return m;
	return NULL;
}

static void gmem_unref(struct sim_gmem *m)
{
	if (!m || --m->refs)
		return;
	for (struct sim_gmem **pp = &gmems; *pp; pp = &(*pp)->next)
		if (*pp == m) {
			*pp = m->next;
			break;
		}
	gmem_in_use[m->dev] -= m->p.bytesize;
	sim_mem_free_device(m->p.dptr, SIM_RANGE_DEVICE);
	free(m);
}

static CUresult proto_memalloc(struct CUgraphNode_st *proto, const CUDA_MEM_ALLOC_NODE_PARAMS *p)
{
	struct CUctx_st *ctx;
	struct sim_gmem *m;
	CUresult res;

	if (!p || !p->bytesize || p->accessDescCount > GMEM_DESCS_MAX ||
	    (p->accessDescCount && !p->accessDescs) ||
	    p->poolProps.allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
	    p->poolProps.location.type != CU_MEM_LOCATION_TYPE_DEVICE)
		return CUDA_ERROR_INVALID_VALUE;
	res = sim_ctx_require(&ctx);
	if (res != CUDA_SUCCESS)
		return res;
	if (p->poolProps.location.id != ctx->dev->ordinal)
		return CUDA_ERROR_INVALID_DEVICE;
	m = calloc(1, sizeof(*m));
	if (!m)
		return CUDA_ERROR_OUT_OF_MEMORY;
	m->p = *p;
	memcpy(m->descs, p->accessDescs, p->accessDescCount * sizeof(*m->descs));
	m->p.accessDescs = m->descs;
	m->dev = ctx->dev->ordinal;
	m->refs = 1;
	res = sim_mem_alloc_device(ctx, p->bytesize, SIM_RANGE_DEVICE, &m->p.dptr);
	if (res != CUDA_SUCCESS) {
		free(m);
		return res;
	}
	m->next = gmems;
	gmems = m;
	gmem_in_use[m->dev] += p->bytesize;
	if (gmem_in_use[m->dev] > gmem_high[m->dev])
		gmem_high[m->dev] = gmem_in_use[m->dev];
	proto->type = CU_GRAPH_NODE_TYPE_MEM_ALLOC;
	proto->gmem = m;
	return CUDA_SUCCESS;
}

static CUresult proto_memfree(struct CUgraphNode_st *proto, CUdeviceptr dptr)
{
	if (!gmem_at(dptr))
		return CUDA_ERROR_INVALID_VALUE;
	proto->type = CU_GRAPH_NODE_TYPE_MEM_FREE;
	proto->freed = dptr;
	return CUDA_SUCCESS;
}

static void params_release(struct CUgraphNode_st *n)
{
	switch (n->type) {
	case CU_GRAPH_NODE_TYPE_KERNEL:
		free(n->kernel.buffer);
		free(n->kernel.ptrs);
		n->kernel.buffer = NULL;
		n->kernel.ptrs = NULL;
		break;
	case CU_GRAPH_NODE_TYPE_GRAPH:
		if (n->child) {
			n->child->owner = NULL;
			graph_free(n->child);
			n->child = NULL;
		}
		break;
	case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
	case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
		if (n->event)
			sim_event_unref(n->event);
		n->event = NULL;
		break;
	case CU_GRAPH_NODE_TYPE_MEM_ALLOC:
		gmem_unref(n->gmem);
		n->gmem = NULL;
		break;
	case CU_GRAPH_NODE_TYPE_BATCH_MEM_OP:
		free(n->memops.p.paramArray);
		n->memops.p.paramArray = NULL;
		break;
	case CU_GRAPH_NODE_TYPE_CONDITIONAL:
		for (unsigned i = 0; n->cond.bodies && i < n->cond.size; i++)
			if (n->cond.bodies[i]) {
				n->cond.bodies[i]->owner = NULL;
				graph_free(n->cond.bodies[i]);
			}
		free(n->cond.bodies);
		n->cond.bodies = NULL;
		break;
	default:
		break;
	}
}

static void node_free(struct CUgraphNode_st *n)
{
	params_release(n);
	vec_free(&n->deps);
	vec_free(&n->outs);
	n->magic = SIM_MAGIC_DEAD;
	free(n);
}

static void graph_free(struct CUgraph_st *g)
{
	for (size_t i = 0; i < g->nodes.n; i++)
		node_free(g->nodes.v[i]);
	vec_free(&g->nodes);
	free(g->cond);
	while (g->uobjs) {
		struct uobj_ref *r = g->uobjs;

		g->uobjs = r->next;
		uobj_release(r->obj, r->count);
		free(r);
	}
	g->magic = SIM_MAGIC_DEAD;
	free(g);
}

/* A kernel node's parameters copied (the bytes and pointers into them). */
static bool kernel_copy(struct node_kernel *dst, const struct node_kernel *src)
{
	size_t bytes = src->func->param_bytes;

	*dst = *src;
	dst->buffer = malloc(bytes ? bytes : 1);
	dst->ptrs = calloc(src->count ? src->count : 1, sizeof(void *));
	if (!dst->buffer || !dst->ptrs) {
		free(dst->buffer);
		free(dst->ptrs);
		dst->buffer = NULL;
		dst->ptrs = NULL;
		return false;
	}
	if (bytes)
		memcpy(dst->buffer, src->buffer, bytes);
	for (unsigned i = 0; i < src->count; i++)
		dst->ptrs[i] = (uint8_t *)dst->buffer + src->func->params[i].offset;
	return true;
}

static struct CUgraph_st *graph_clone(struct CUgraph_st *src);

/* dst (a node of type src->type, without parameters) gets copies of src's parameters. */
static bool params_copy(struct CUgraphNode_st *dst, const struct CUgraphNode_st *src)
{
	switch (src->type) {
	case CU_GRAPH_NODE_TYPE_KERNEL:
		return kernel_copy(&dst->kernel, &src->kernel);
	case CU_GRAPH_NODE_TYPE_MEMCPY:
		dst->copy = src->copy;
		return true;
	case CU_GRAPH_NODE_TYPE_MEMSET:
		dst->set = src->set;
		return true;
	case CU_GRAPH_NODE_TYPE_HOST:
		dst->host = src->host;
		return true;
	case CU_GRAPH_NODE_TYPE_GRAPH:
		dst->child = graph_clone(src->child);
		return dst->child != NULL;
	case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
	case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
		dst->event = src->event;
		sim_event_ref(dst->event);
		return true;
	case CU_GRAPH_NODE_TYPE_MEM_ALLOC:
		dst->gmem = src->gmem;
		dst->gmem->refs++;
		return true;
	case CU_GRAPH_NODE_TYPE_MEM_FREE:
		dst->freed = src->freed;
		return true;
	case CU_GRAPH_NODE_TYPE_BATCH_MEM_OP:
		dst->memops = src->memops;
		dst->memops.p.paramArray = malloc(src->memops.p.count * sizeof(*src->memops.p.paramArray));
		if (dst->memops.p.paramArray)
			memcpy(dst->memops.p.paramArray, src->memops.p.paramArray,
			       src->memops.p.count * sizeof(*src->memops.p.paramArray));
		return dst->memops.p.paramArray != NULL;
	case CU_GRAPH_NODE_TYPE_CONDITIONAL:
		dst->cond = src->cond;
		dst->cond.bodies = calloc(src->cond.size, sizeof(*dst->cond.bodies));
		for (unsigned i = 0; dst->cond.bodies && i < src->cond.size; i++) {
			dst->cond.bodies[i] = graph_clone(src->cond.bodies[i]);
			if (!dst->cond.bodies[i])
				return false; /* the caller frees what was made (params_release) */
			dst->cond.bodies[i]->owner = dst;
		}
		return dst->cond.bodies != NULL;
	default:
		return true;
	}
}

/* A node's parameters changed to proto's (moved: proto's resources now belong to n). */
static void params_move(struct CUgraphNode_st *n, struct CUgraphNode_st *proto)
{
	if (n->type == CU_GRAPH_NODE_TYPE_KERNEL) /* new parameters keep the node's attributes */
		memcpy(proto->kernel.attrs, n->kernel.attrs, sizeof(n->kernel.attrs));
	params_release(n);
	switch (n->type) {
	case CU_GRAPH_NODE_TYPE_KERNEL:
		n->kernel = proto->kernel;
		break;
	case CU_GRAPH_NODE_TYPE_MEMCPY:
		n->copy = proto->copy;
		break;
	case CU_GRAPH_NODE_TYPE_MEMSET:
		n->set = proto->set;
		break;
	case CU_GRAPH_NODE_TYPE_HOST:
		n->host = proto->host;
		break;
	case CU_GRAPH_NODE_TYPE_GRAPH:
		n->child = proto->child;
		n->child->owner = n;
		break;
	case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
	case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
		n->event = proto->event;
		break;
	case CU_GRAPH_NODE_TYPE_MEM_ALLOC:
		n->gmem = proto->gmem;
		break;
	case CU_GRAPH_NODE_TYPE_MEM_FREE:
		n->freed = proto->freed;
		break;
	case CU_GRAPH_NODE_TYPE_BATCH_MEM_OP:
		n->memops = proto->memops;
		break;
	case CU_GRAPH_NODE_TYPE_CONDITIONAL:
		n->cond = proto->cond;
		for (unsigned i = 0; i < n->cond.size; i++)
			n->cond.bodies[i]->owner = n;
		break;
	default:
		break;
	}
	memset(proto, 0, sizeof(*proto));
}

/* A new node (not yet in a graph) from proto, whose parameters it takes. */
static struct CUgraphNode_st *node_from_proto(struct CUgraphNode_st *proto)
{
	struct CUgraphNode_st *n = calloc(1, sizeof(*n));

	if (!n) {
		params_release(proto);
		return NULL;
	}
	n->magic = SIM_MAGIC_GRAPH_NODE;
	n->type = proto->type;
	n->id = sim_next_id();
	params_move(n, proto);
	return n;
}

/* Adds n to g with edges from deps (checked by the caller); frees n on failure. */
static CUresult node_link(struct CUgraph_st *g, struct CUgraphNode_st *n, struct CUgraphNode_st *const *deps,
			  size_t ndeps)
{
	if (!vec_push(&g->nodes, n)) {
		node_free(n);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	n->graph = g;
	for (size_t i = 0; i < ndeps; i++) {
		if (vec_has(&n->deps, deps[i]))
			continue;
		if (!vec_push(&n->deps, deps[i]) || !vec_push(&deps[i]->outs, n)) {
			/* Undo: the node leaves the graph with its edges. */
			for (size_t j = 0; j < n->deps.n; j++)
				vec_remove(&n->deps.v[j]->outs, n);
			vec_remove(&g->nodes, n);
			node_free(n);
			return CUDA_ERROR_OUT_OF_MEMORY;
		}
	}
	return CUDA_SUCCESS;
}

/* The dependencies argument of a cuGraphAdd*Node: valid nodes of g, no duplicates. */
static CUresult deps_check(struct CUgraph_st *g, const CUgraphNode *deps, size_t ndeps)
{
	if (ndeps && !deps)
		return CUDA_ERROR_INVALID_VALUE;
	for (size_t i = 0; i < ndeps; i++) {
		if (!node_valid(deps[i]) || deps[i]->graph != g)
			return CUDA_ERROR_INVALID_VALUE;
		for (size_t j = 0; j < i; j++)
			if (deps[j] == deps[i])
				return CUDA_ERROR_INVALID_VALUE;
	}
	return CUDA_SUCCESS;
}

/* Deep copy: every node's origin_id is the node it was copied from. */
static struct CUgraph_st *graph_clone(struct CUgraph_st *src)
{
	struct CUgraph_st *g = graph_new();

	if (!g)
		return NULL;
	if (src->ncond) {
		g->cond = malloc(src->ncond * sizeof(*g->cond));
		if (!g->cond)
			goto fail;
		memcpy(g->cond, src->cond, src->ncond * sizeof(*g->cond));
		g->ncond = src->ncond;
	}
	for (struct uobj_ref *r = src->uobjs; r; r = r->next) {
		if (!uobj_hold(g, r->obj, r->count))
			goto fail;
		r->obj->refs += r->count;
	}
	for (size_t i = 0; i < src->nodes.n; i++) {
		struct CUgraphNode_st *s = src->nodes.v[i];
		struct CUgraphNode_st *n = calloc(1, sizeof(*n));

		s->index = i;
		if (!n)
			goto fail;
		n->magic = SIM_MAGIC_GRAPH_NODE;
		n->type = s->type;
		n->id = sim_next_id();
		n->origin_id = s->id;
		n->graph = g;
		if (!params_copy(n, s)) {
			n->type = CU_GRAPH_NODE_TYPE_EMPTY;
			node_free(n);
			goto fail;
		}
		if (n->type == CU_GRAPH_NODE_TYPE_GRAPH)
			n->child->owner = n;
		if (!vec_push(&g->nodes, n)) {
			node_free(n);
			goto fail;
		}
	}
	for (size_t i = 0; i < src->nodes.n; i++) {
		struct CUgraphNode_st *s = src->nodes.v[i], *n = g->nodes.v[i];

		for (size_t j = 0; j < s->deps.n; j++)
			if (!vec_push(&n->deps, g->nodes.v[s->deps.v[j]->index]))
				goto fail;
		for (size_t j = 0; j < s->outs.n; j++)
			if (!vec_push(&n->outs, g->nodes.v[s->outs.v[j]->index]))
				goto fail;
	}
	return g;
fail:
	graph_free(g);
	return NULL;
}

/* g's nodes in a topological order (Kahn's, ties in creation order); INVALID_VALUE on a cycle. */
static CUresult topo_order(struct CUgraph_st *g, struct node_vec *out)
{
	size_t n = g->nodes.n, head = 0;
	size_t *indeg = calloc(n ? n : 1, sizeof(*indeg));

	out->n = 0;
	if (!indeg)
		return CUDA_ERROR_OUT_OF_MEMORY;
	for (size_t i = 0; i < n; i++) {
		g->nodes.v[i]->index = i;
		indeg[i] = g->nodes.v[i]->deps.n;
	}
	for (size_t i = 0; i < n; i++)
		if (!indeg[i] && !vec_push(out, g->nodes.v[i]))
			goto oom;
	while (head < out->n) {
		struct CUgraphNode_st *node = out->v[head++];

		for (size_t j = 0; j < node->outs.n; j++)
			if (!--indeg[node->outs.v[j]->index] && !vec_push(out, node->outs.v[j]))
				goto oom;
	}
	free(indeg);
	return out->n == n ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
oom:
	free(indeg);
	return CUDA_ERROR_OUT_OF_MEMORY;
}

/* Every graph and child graph is acyclic. */
static CUresult graph_check(struct CUgraph_st *g, struct CUgraphNode_st **err_node)
{
	struct node_vec order = {0};
	CUresult res = topo_order(g, &order);

	vec_free(&order);
	if (res != CUDA_SUCCESS)
		return res;
	for (size_t i = 0; i < g->nodes.n; i++) {
		struct CUgraphNode_st *n = g->nodes.v[i];

		if (n->type == CU_GRAPH_NODE_TYPE_GRAPH) {
			res = graph_check(n->child, err_node);
			if (res != CUDA_SUCCESS) {
				if (err_node && !*err_node)
					*err_node = n;
				return res;
			}
		}
	}
	return CUDA_SUCCESS;
}

/* ---- node parameters ---- */

static CUresult ctx_or_current(CUcontext ctx, struct CUctx_st **out)
{
	if (!ctx)
		return sim_ctx_require(out);
	if (!sim_ctx_valid(ctx))
		return CUDA_ERROR_INVALID_CONTEXT;
	*out = ctx;
	return CUDA_SUCCESS;
}

static CUresult proto_kernel(struct CUgraphNode_st *proto, CUfunction func, CUkernel kern, CUcontext ctx,
			     const unsigned grid[3], const unsigned block[3], unsigned shared_bytes,
			     void **kernel_params, void **extra)
{
	struct sim_op op;
	CUresult res;

	memset(proto, 0, sizeof(*proto));
	proto->type = CU_GRAPH_NODE_TYPE_KERNEL;
	if (!func) {
		if (!kern)
			return CUDA_ERROR_INVALID_VALUE;
		func = (CUfunction)(void *)kern;
		if (ctx && !sim_ctx_valid(ctx))
			return CUDA_ERROR_INVALID_CONTEXT;
	} else {
		ctx = NULL; /* ignored with a function */
	}
	memset(&op, 0, sizeof(op));
	res = sim_kernel_op_init(&op, "cuGraphAddKernelNode", func, ctx, false,
				 (struct crcuda_sim_dim3){grid[0], grid[1], grid[2]},
				 (struct crcuda_sim_dim3){block[0], block[1], block[2]}, shared_bytes,
				 kernel_params, extra);
	if (res != CUDA_SUCCESS)
		return res;
	proto->kernel.func = op.kernel.func;
	proto->kernel.ctx = op.kernel.func->module->ctx;
	proto->kernel.host_fn = op.kernel.host_fn;
	proto->kernel.grid = op.kernel.grid;
	proto->kernel.block = op.kernel.block;
	proto->kernel.shared_bytes = op.kernel.shared_bytes;
	proto->kernel.buffer = op.kernel.param_buffer;
	proto->kernel.ptrs = op.kernel.param_ptrs;
	proto->kernel.count = op.kernel.param_count;
	return CUDA_SUCCESS;
}

#define KERNEL_PROTO(proto, p, kern, ctx)                                                                    \
	proto_kernel((proto), (p)->func, (kern), (ctx),                                                      \
		     (const unsigned[3]){(p)->gridDimX, (p)->gridDimY, (p)->gridDimZ},                       \
		     (const unsigned[3]){(p)->blockDimX, (p)->blockDimY, (p)->blockDimZ},                    \
		     (p)->sharedMemBytes, (p)->kernelParams, (p)->extra)

/* One side of a 3D copy: its first byte and its row pitch and rows per slice. */
struct copy_side {
	uint8_t *base;
	size_t pitch, height;
};

static CUresult copy_side(CUmemorytype type, const void *host, CUdeviceptr dev, size_t x, size_t y, size_t z,
			  size_t pitch, size_t height, const CUDA_MEMCPY3D *p, bool write, bool check,
			  struct copy_side *out)
{
	size_t width = p->WidthInBytes, extent;
	uintptr_t base;
	CUresult res;

	if (!pitch)
		pitch = width;
	if (!height)
		height = p->Height;
	if ((p->Height > 1 || p->Depth > 1) && pitch < x + width)
		return CUDA_ERROR_INVALID_VALUE;
	if (p->Depth > 1 && height < y + p->Height)
		return CUDA_ERROR_INVALID_VALUE;
	switch (type) {
	case CU_MEMORYTYPE_HOST:
		base = (uintptr_t)host;
		break;
	case CU_MEMORYTYPE_DEVICE:
	case CU_MEMORYTYPE_UNIFIED:
		base = (uintptr_t)dev;
		break;
	case CU_MEMORYTYPE_ARRAY:
		return CUDA_ERROR_NOT_SUPPORTED; /* graph copies with arrays are not simulated */
	default:
		return CUDA_ERROR_INVALID_VALUE;
	}
	if (!base)
		return CUDA_ERROR_INVALID_VALUE;
	base += x + (y + z * height) * pitch;
	extent = crc_copy3d_extent(width, p->Height, p->Depth, pitch, height);
	if (check && width) {
		if (type == CU_MEMORYTYPE_DEVICE)
			res = sim_mem_check_device(base, extent, write);
		else if (type == CU_MEMORYTYPE_UNIFIED)
			res = sim_mem_check_any(base, extent, write);
		else
			res = CUDA_SUCCESS;
		if (res != CUDA_SUCCESS)
			return res;
	}
	out->base = (uint8_t *)base;
	out->pitch = pitch;
	out->height = height;
	return CUDA_SUCCESS;
}

static CUresult copy_resolve(const CUDA_MEMCPY3D *p, bool check, struct copy_side *src, struct copy_side *dst)
{
	CUresult res;

	if (!p->Height || !p->Depth)
		return CUDA_ERROR_INVALID_VALUE;
	res = copy_side(p->srcMemoryType, p->srcHost, p->srcDevice, p->srcXInBytes, p->srcY, p->srcZ,
			p->srcPitch, p->srcHeight, p, false, check, src);
	if (res == CUDA_SUCCESS)
		res = copy_side(p->dstMemoryType, p->dstHost, p->dstDevice, p->dstXInBytes, p->dstY, p->dstZ,
				p->dstPitch, p->dstHeight, p, true, check, dst);
	return res;
}

static CUresult proto_memcpy(struct CUgraphNode_st *proto, const CUDA_MEMCPY3D *p, CUcontext ctx)
{
	struct copy_side src, dst;
	CUresult res;

	memset(proto, 0, sizeof(*proto));
	proto->type = CU_GRAPH_NODE_TYPE_MEMCPY;
	if (!p)
		return CUDA_ERROR_INVALID_VALUE;
	res = copy_resolve(p, true, &src, &dst);
	if (res == CUDA_SUCCESS)
		res = ctx_or_current(ctx, &proto->copy.ctx);
	if (res != CUDA_SUCCESS)
		return res;
	proto->copy.p = *p;
	return CUDA_SUCCESS;
}

static CUresult memset_check(const CUDA_MEMSET_NODE_PARAMS *p)
{
	size_t row_bytes;

	if (p->elementSize != 1 && p->elementSize != 2 && p->elementSize != 4)
		return CUDA_ERROR_INVALID_VALUE;
	if (!p->height || p->dst % p->elementSize)
		return CUDA_ERROR_INVALID_VALUE;
	row_bytes = p->width * p->elementSize;
	if (p->height > 1 && (p->pitch < row_bytes || p->pitch % p->elementSize))
		return CUDA_ERROR_INVALID_VALUE;
	if (!p->width)
		return CUDA_SUCCESS;
	return sim_mem_check_device(p->dst, (p->height - 1) * p->pitch + row_bytes, true);
}

static CUresult proto_memset(struct CUgraphNode_st *proto, const CUDA_MEMSET_NODE_PARAMS *p, CUcontext ctx)
{
	CUresult res;

	memset(proto, 0, sizeof(*proto));
	proto->type = CU_GRAPH_NODE_TYPE_MEMSET;
	if (!p)
		return CUDA_ERROR_INVALID_VALUE;
	res = memset_check(p);
	if (res == CUDA_SUCCESS)
		res = ctx_or_current(ctx, &proto->set.ctx);
	if (res != CUDA_SUCCESS)
		return res;
	proto->set.p = *p;
	return CUDA_SUCCESS;
}

static CUresult proto_host(struct CUgraphNode_st *proto, CUhostFn fn, void *data)
{
	memset(proto, 0, sizeof(*proto));
	proto->type = CU_GRAPH_NODE_TYPE_HOST;
	if (!fn)
		return CUDA_ERROR_INVALID_VALUE;
	proto->host.fn = fn;
	proto->host.userData = data;
	return CUDA_SUCCESS;
}

static CUresult proto_event(struct CUgraphNode_st *proto, CUgraphNodeType type, CUevent e)
{
	memset(proto, 0, sizeof(*proto));
	proto->type = type;
	if (!event_valid(e))
		return CUDA_ERROR_INVALID_HANDLE;
	sim_event_ref(e);
	proto->event = e;
	return CUDA_SUCCESS;
}

static CUresult proto_child(struct CUgraphNode_st *proto, CUgraph child, bool move)
{
	memset(proto, 0, sizeof(*proto));
	proto->type = CU_GRAPH_NODE_TYPE_GRAPH;
	if (!graph_valid(child))
		return CUDA_ERROR_INVALID_VALUE;
	if (move) {
		if (child->owner || child->captures)
			return CUDA_ERROR_INVALID_VALUE;
		proto->child = child;
		return CUDA_SUCCESS;
	}
	proto->child = graph_clone(child);
	return proto->child ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

/* ---- batch mem-op nodes ---- */
static CUresult proto_memops(struct CUgraphNode_st *proto, const CUDA_BATCH_MEM_OP_NODE_PARAMS *p)
{
	CUstreamBatchMemOpParams *ops;
	struct CUctx_st *ctx;
	CUresult res;

	if (!p || !p->count || !p->paramArray || p->flags || p->count > 256)
		return CUDA_ERROR_INVALID_VALUE;
	res = ctx_or_current(p->ctx, &ctx);
	if (res != CUDA_SUCCESS)
		return res;
	for (unsigned i = 0; i < p->count; i++) {
		const CUstreamBatchMemOpParams *o = &p->paramArray[i];
		bool write = o->operation == CU_STREAM_MEM_OP_WRITE_VALUE_32 ||
			     o->operation == CU_STREAM_MEM_OP_WRITE_VALUE_64;
		bool wide = o->operation == CU_STREAM_MEM_OP_WAIT_VALUE_64 ||
			    o->operation == CU_STREAM_MEM_OP_WRITE_VALUE_64;
		void *m;

		if (o->operation == CU_STREAM_MEM_OP_BARRIER ||
		    o->operation == CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES)
			continue;
		if (!write && o->operation != CU_STREAM_MEM_OP_WAIT_VALUE_32 &&
		    o->operation != CU_STREAM_MEM_OP_WAIT_VALUE_64)
			return CUDA_ERROR_INVALID_VALUE;
		/* Checked as the stream operation checks it. */
		m = sim_memop_make(write, wide, write ? o->writeValue.address : o->waitValue.address,
				   write ? o->writeValue.value64 : o->waitValue.value64,
				   write ? o->writeValue.flags : o->waitValue.flags, &res);
		free(m);
		if (res != CUDA_SUCCESS)
			return res;
	}
	ops = malloc(p->count * sizeof(*ops));
	if (!ops)
		return CUDA_ERROR_OUT_OF_MEMORY;
	memcpy(ops, p->paramArray, p->count * sizeof(*ops));
	proto->type = CU_GRAPH_NODE_TYPE_BATCH_MEM_OP;
	proto->memops.p = *p;
	proto->memops.p.ctx = ctx;
	proto->memops.p.paramArray = ops;
	return CUDA_SUCCESS;
}

/* ---- conditional nodes ----
 * A handle is an index into the conditional handles of the graph's root, from 1 in creation order (as
 * the driver numbers them). An executable graph keeps the values (sim_conds); each launch first sets
 * those with CU_GRAPH_COND_ASSIGN_DEFAULT to their default; kernels set them through the block's
 * set_conditional. The node runs on the stream's worker as a host function that runs the chosen body
 * (a copy taken when the launch was queued) there, op by op. */
static struct CUgraph_st *graph_root(struct CUgraph_st *g)
{
	while (g->owner)
		g = g->owner->graph;
	return g;
}

static CUresult proto_cond(struct CUgraphNode_st *proto, CUDA_CONDITIONAL_NODE_PARAMS *p)
{
	unsigned max = p->type == CU_GRAPH_COND_TYPE_WHILE ? 1 : p->type == CU_GRAPH_COND_TYPE_IF ? 2 : 4096;

	if ((p->type != CU_GRAPH_COND_TYPE_IF && p->type != CU_GRAPH_COND_TYPE_WHILE &&
	     p->type != CU_GRAPH_COND_TYPE_SWITCH) ||
	    !p->size || p->size > max || !p->handle)
		return CUDA_ERROR_INVALID_VALUE;
	proto->type = CU_GRAPH_NODE_TYPE_CONDITIONAL;
	proto->cond.handle = p->handle;
	proto->cond.type = p->type;
	proto->cond.size = p->size;
	proto->cond.bodies = calloc(p->size, sizeof(*proto->cond.bodies));
	if (!proto->cond.bodies)
		return CUDA_ERROR_OUT_OF_MEMORY;
	for (unsigned i = 0; i < p->size; i++)
		if (!(proto->cond.bodies[i] = graph_new()))
			return CUDA_ERROR_OUT_OF_MEMORY; /* released by the caller */
	/* The driver owns the array for the node's life: the node's own. */
	p->phGraph_out = proto->cond.bodies;
	return CUDA_SUCCESS;
}

CUresult cuGraphConditionalHandleCreate(CUgraphConditionalHandle *out, CUgraph g, CUcontext ctx,
					unsigned dflt, unsigned flags)
{
	struct CUgraph_st *root;
	struct sim_cond_handle *c;

	SIM_ENTER(cuGraphConditionalHandleCreate);
	if (!out || (flags & ~(unsigned)CU_GRAPH_COND_ASSIGN_DEFAULT))
		return CUDA_ERROR_INVALID_VALUE;
	(void)ctx;
	pthread_mutex_lock(&graph_lock);
	if (!graph_valid(g)) {
		pthread_mutex_unlock(&graph_lock);
		return CUDA_ERROR_INVALID_VALUE;
	}
	root = graph_root(g);
	c = realloc(root->cond, (root->ncond + 1) * sizeof(*c));
	if (!c) {
		pthread_mutex_unlock(&graph_lock);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	root->cond = c;
	c[root->ncond++] = (struct sim_cond_handle){.dflt = dflt, .flags = flags};
	*out = root->ncond;
	pthread_mutex_unlock(&graph_lock);
	return CUDA_SUCCESS;
}

void sim_conds_unref(struct sim_conds *c)
{
	if (c && atomic_fetch_sub(&c->refs, 1) == 1)
		free(c);
}

static struct sim_conds *conds_ref(struct sim_conds *c)
{
	if (c)
		atomic_fetch_add(&c->refs, 1);
	return c;
}

static struct sim_conds *conds_new(const struct CUgraph_st *g)
{
	struct sim_conds *c = calloc(1, sizeof(*c) + g->ncond * sizeof(c->v[0]));

	if (!c)
		return NULL;
	atomic_init(&c->refs, 1);
	c->n = g->ncond;
	for (unsigned i = 0; i < g->ncond; i++)
		atomic_init(&c->v[i], g->cond[i].dflt);
	return c;
}

void sim_set_conditional(const struct crcuda_sim_block *blk, unsigned long long handle, unsigned value)
{
	struct sim_conds *c = (struct sim_conds *)blk->launch_private;

	if (c && handle >= 1 && handle <= c->n)
		atomic_store(&c->v[handle - 1], value);
}

/* A CUgraphNodeParams (cuGraphAddNode, cuGraphNodeSetParams...) as a proto. */
static CUresult proto_generic(struct CUgraphNode_st *proto, CUgraphNodeParams *p)
{
	memset(proto, 0, sizeof(*proto));
	if (!p)
		return CUDA_ERROR_INVALID_VALUE;
	switch (p->type) {
	case CU_GRAPH_NODE_TYPE_KERNEL:
		return KERNEL_PROTO(proto, &p->kernel, p->kernel.kern, p->kernel.ctx);
	case CU_GRAPH_NODE_TYPE_MEMCPY:
		if (p->memcpy.flags || p->memcpy.reserved)
			return CUDA_ERROR_INVALID_VALUE;
		return proto_memcpy(proto, &p->memcpy.copyParams, p->memcpy.copyCtx);
	case CU_GRAPH_NODE_TYPE_MEMSET: {
		CUDA_MEMSET_NODE_PARAMS m = {
		    .dst = p->memset.dst,
		    .pitch = p->memset.pitch,
		    .value = p->memset.value,
		    .elementSize = p->memset.elementSize,
		    .width = p->memset.width,
		    .height = p->memset.height,
		};

		return proto_memset(proto, &m, p->memset.ctx);
	}
	case CU_GRAPH_NODE_TYPE_HOST:
		return proto_host(proto, p->host.fn, p->host.userData);
	case CU_GRAPH_NODE_TYPE_GRAPH:
		if (p->graph.ownership != CU_GRAPH_CHILD_GRAPH_OWNERSHIP_CLONE &&
		    p->graph.ownership != CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE)
			return CUDA_ERROR_INVALID_VALUE;
		return proto_child(proto, p->graph.graph,
				   p->graph.ownership == CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE);
	case CU_GRAPH_NODE_TYPE_EMPTY:
		proto->type = CU_GRAPH_NODE_TYPE_EMPTY;
		return CUDA_SUCCESS;
	case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
		return proto_event(proto, CU_GRAPH_NODE_TYPE_WAIT_EVENT, p->eventWait.event);
	case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
		return proto_event(proto, CU_GRAPH_NODE_TYPE_EVENT_RECORD, p->eventRecord.event);
	case CU_GRAPH_NODE_TYPE_MEM_ALLOC: {
		CUresult res = proto_memalloc(proto, (CUDA_MEM_ALLOC_NODE_PARAMS *)&p->alloc);

		if (res == CUDA_SUCCESS)
			p->alloc.dptr = proto->gmem->p.dptr;
		return res;
	}
	case CU_GRAPH_NODE_TYPE_MEM_FREE:
		return proto_memfree(proto, p->free.dptr);
	case CU_GRAPH_NODE_TYPE_CONDITIONAL:
		return proto_cond(proto, &p->conditional);
	case CU_GRAPH_NODE_TYPE_BATCH_MEM_OP:
		return proto_memops(proto, (const CUDA_BATCH_MEM_OP_NODE_PARAMS *)&p->memOp);
	default:
		return CUDA_ERROR_NOT_SUPPORTED;
	}
}

/* ---- adding nodes ---- */

/* The common tail of every cuGraphAdd*Node: proto built (res its result), under graph_lock. */
static CUresult graph_add(CUgraphNode *ph, CUgraph g, const CUgraphNode *deps, size_t ndeps,
			  struct CUgraphNode_st *proto, CUresult res)
{
	struct CUgraphNode_st *n;

	if (res != CUDA_SUCCESS) {
		params_release(proto);
		return res;
	}
	n = node_from_proto(proto);
	if (!n)
		return CUDA_ERROR_OUT_OF_MEMORY;
	res = node_link(g, n, deps, ndeps);
	if (res == CUDA_SUCCESS)
		*ph = n;
	return res;
}

/* Checks the arguments every cuGraphAdd*Node has; takes graph_lock when they are fine. */
static CUresult add_begin(CUgraphNode *ph, CUgraph g, const CUgraphNode *deps, size_t ndeps)
{
	CUresult res;

	if (!ph)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&graph_lock);
	if (!graph_valid(g))
		res = CUDA_ERROR_INVALID_VALUE;
	else
		res = deps_check(g, deps, ndeps);
	if (res != CUDA_SUCCESS)
		pthread_mutex_unlock(&graph_lock);
	return res;
}

#define GRAPH_ADD(sym, ph, g, deps, ndeps, build)                                                            \
	do {                                                                                                 \
		/* Empty: a NULL p fails before a builder fills it, and graph_add releases it. */            \
		struct CUgraphNode_st proto_ = {.type = CU_GRAPH_NODE_TYPE_EMPTY};                           \
		CUresult res_;                                                                               \
                                                                                                             \
		SIM_ENTER(sym);                                                                              \
		res_ = add_begin((ph), (g), (deps), (ndeps));                                                \
		if (res_ != CUDA_SUCCESS)                                                                    \
			return res_;                                                                         \
		res_ = graph_add((ph), (g), (deps), (ndeps), &proto_, build);                                \
		pthread_mutex_unlock(&graph_lock);                                                           \
		return res_;                                                                                 \
	} while (0)

CUresult cuGraphAddKernelNode(CUgraphNode *ph, CUgraph g, const CUgraphNode *deps, size_t ndeps,
			      const CUDA_KERNEL_NODE_PARAMS_v1 *p)
{
	GRAPH_ADD(cuGraphAddKernelNode, ph, g, deps, ndeps,
		  p ? KERNEL_PROTO(&proto_, p, NULL, NULL) : CUDA_ERROR_INVALID_VALUE);
}

CUresult cuGraphAddKernelNode_v2(CUgraphNode *ph, CUgraph g, const CUgraphNode *deps, size_t ndeps,
				 const CUDA_KERNEL_NODE_PARAMS_v2 *p)
{
	GRAPH_ADD(cuGraphAddKernelNode_v2, ph, g, deps, ndeps,
		  p ? KERNEL_PROTO(&proto_, p, p->kern, p->ctx) : CUDA_ERROR_INVALID_VALUE);
}

CUresult cuGraphAddMemcpyNode(CUgraphNode *ph, CUgraph g, const CUgraphNode *deps, size_t ndeps,
			      const CUDA_MEMCPY3D_v2 *p, CUcontext ctx)
{
	GRAPH_ADD(cuGraphAddMemcpyNode, ph, g, deps, ndeps, proto_memcpy(&proto_, p, ctx));
}

CUresult cuGraphAddMemsetNode(CUgraphNode *ph, CUgraph g, const CUgraphNode *deps, size_t ndeps,
			      const CUDA_MEMSET_NODE_PARAMS_v1 *p, CUcontext ctx)
{
	GRAPH_ADD(cuGraphAddMemsetNode, ph, g, deps, ndeps, proto_memset(&proto_, p, ctx));
}

CUresult cuGraphAddHostNode(CUgraphNode *ph, CUgraph g, const CUgraphNode *deps, size_t ndeps,
			    const CUDA_HOST_NODE_PARAMS_v1 *p)
{
	GRAPH_ADD(cuGraphAddHostNode, ph, g, deps, ndeps,
		  p ? proto_host(&proto_, p->fn, p->userData) : CUDA_ERROR_INVALID_VALUE);
}

static CUresult proto_empty(struct CUgraphNode_st *proto)
{
	memset(proto, 0, sizeof(*proto));
	proto->type = CU_GRAPH_NODE_TYPE_EMPTY;
	return CUDA_SUCCESS;
}

CUresult cuGraphAddEmptyNode(CUgraphNode *ph, CUgraph g, const CUgraphNode *deps, size_t ndeps)
{
	GRAPH_ADD(cuGraphAddEmptyNode, ph, g, deps, ndeps, proto_empty(&proto_));
}

CUresult cuGraphAddChildGraphNode(CUgraphNode *ph, CUgraph g, const CUgraphNode *deps, size_t ndeps,
				  CUgraph child)
{
	GRAPH_ADD(cuGraphAddChildGraphNode, ph, g, deps, ndeps,
		  child == g ? CUDA_ERROR_INVALID_VALUE : proto_child(&proto_, child, false));
}

CUresult cuGraphAddEventRecordNode(CUgraphNode *ph, CUgraph g, const CUgraphNode *deps, size_t ndeps,
				   CUevent e)
{
	GRAPH_ADD(cuGraphAddEventRecordNode, ph, g, deps, ndeps,
		  proto_event(&proto_, CU_GRAPH_NODE_TYPE_EVENT_RECORD, e));
}

CUresult cuGraphAddEventWaitNode(CUgraphNode *ph, CUgraph g, const CUgraphNode *deps, size_t ndeps, CUevent e)
{
	GRAPH_ADD(cuGraphAddEventWaitNode, ph, g, deps, ndeps,
		  proto_event(&proto_, CU_GRAPH_NODE_TYPE_WAIT_EVENT, e));
}

static CUresult add_memalloc(struct CUgraphNode_st *proto, CUDA_MEM_ALLOC_NODE_PARAMS *p)
{
	CUresult res = proto_memalloc(proto, p);

	if (res == CUDA_SUCCESS)
		p->dptr = proto->gmem->p.dptr;
	return res;
}

CUresult cuGraphAddMemAllocNode(CUgraphNode *ph, CUgraph g, const CUgraphNode *deps, size_t ndeps,
				CUDA_MEM_ALLOC_NODE_PARAMS *p)
{
	GRAPH_ADD(cuGraphAddMemAllocNode, ph, g, deps, ndeps, add_memalloc(&proto_, p));
}

CUresult cuGraphAddMemFreeNode(CUgraphNode *ph, CUgraph g, const CUgraphNode *deps, size_t ndeps,
			       CUdeviceptr dptr)
{
	GRAPH_ADD(cuGraphAddMemFreeNode, ph, g, deps, ndeps, proto_memfree(&proto_, dptr));
}

CUresult cuGraphAddBatchMemOpNode(CUgraphNode *ph, CUgraph g, const CUgraphNode *deps, size_t ndeps,
				  const CUDA_BATCH_MEM_OP_NODE_PARAMS *p)
{
	GRAPH_ADD(cuGraphAddBatchMemOpNode, ph, g, deps, ndeps, proto_memops(&proto_, p));
}

/* cuGraphAddNode's proto: a child graph node may not hold the graph it is added to. */
static CUresult proto_add_generic(struct CUgraphNode_st *proto, CUgraph g, CUgraphNodeParams *p)
{
	if (p && p->type == CU_GRAPH_NODE_TYPE_GRAPH && p->graph.graph == g)
		return CUDA_ERROR_INVALID_VALUE;
	return proto_generic(proto, p);
}

CUresult cuGraphAddNode(CUgraphNode *ph, CUgraph g, const CUgraphNode *deps, size_t ndeps,
			CUgraphNodeParams *p)
{
	GRAPH_ADD(cuGraphAddNode, ph, g, deps, ndeps, proto_add_generic(&proto_, g, p));
}

CUresult cuGraphAddNode_v2(CUgraphNode *ph, CUgraph g, const CUgraphNode *deps, const CUgraphEdgeData *edges,
			   size_t ndeps, CUgraphNodeParams *p)
{
	(void)edges; /* edge data (programmatic ports) does not change a sequential execution */
	GRAPH_ADD(cuGraphAddNode_v2, ph, g, deps, ndeps, proto_add_generic(&proto_, g, p));
}

/* ---- graphs ---- */

CUresult cuGraphCreate(CUgraph *ph, unsigned int flags)
{
	SIM_ENTER(cuGraphCreate);
	if (!ph || flags)
		return CUDA_ERROR_INVALID_VALUE;
	*ph = graph_new();
	return *ph ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult cuGraphDestroy(CUgraph g)
{
	CUresult res = CUDA_SUCCESS;

	SIM_ENTER(cuGraphDestroy);
	pthread_mutex_lock(&graph_lock);
	if (!graph_valid(g) || g->owner)
		res = CUDA_ERROR_INVALID_VALUE;
	else if (g->captures)
		res = CUDA_ERROR_ILLEGAL_STATE; /* an active capture adds to it */
	else
		graph_free(g);
	pthread_mutex_unlock(&graph_lock);
	return res;
}

CUresult cuGraphClone(CUgraph *ph, CUgraph original)
{
	CUresult res = CUDA_SUCCESS;

	SIM_ENTER(cuGraphClone);
	if (!ph)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&graph_lock);
	if (!graph_valid(original)) {
		res = CUDA_ERROR_INVALID_VALUE;
	} else {
		*ph = graph_clone(original);
		if (!*ph)
			res = CUDA_ERROR_OUT_OF_MEMORY;
	}
	pthread_mutex_unlock(&graph_lock);
	return res;
}

/* The node of g (or of its child graphs) copied from the node with id `id`. */
static struct CUgraphNode_st *find_copy(struct CUgraph_st *g, unsigned long long id, bool recurse)
{
	for (size_t i = 0; i < g->nodes.n; i++) {
		struct CUgraphNode_st *n = g->nodes.v[i];

		if (n->origin_id == id)
			return n;
	}
	if (recurse) {
		for (size_t i = 0; i < g->nodes.n; i++) {
			struct CUgraphNode_st *n = g->nodes.v[i], *found;

			if (n->type == CU_GRAPH_NODE_TYPE_GRAPH && (found = find_copy(n->child, id, true)))
				return found;
		}
	}
	return NULL;
}

CUresult cuGraphNodeFindInClone(CUgraphNode *ph, CUgraphNode original, CUgraph clone)
{
	CUresult res = CUDA_SUCCESS;

	SIM_ENTER(cuGraphNodeFindInClone);
	if (!ph)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&graph_lock);
	if (!node_valid(original) || !graph_valid(clone))
		res = CUDA_ERROR_INVALID_VALUE;
	else if (!(*ph = find_copy(clone, original->id, true)))
		res = CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_unlock(&graph_lock);
	return res;
}

static void capture_forget_node(struct CUgraphNode_st *n);

CUresult cuGraphDestroyNode(CUgraphNode n)
{
	SIM_ENTER(cuGraphDestroyNode);
	pthread_mutex_lock(&graph_lock);
	if (!node_valid(n)) {
		pthread_mutex_unlock(&graph_lock);
		return CUDA_ERROR_INVALID_VALUE;
	}
	for (size_t i = 0; i < n->deps.n; i++)
		vec_remove(&n->deps.v[i]->outs, n);
	for (size_t i = 0; i < n->outs.n; i++)
		vec_remove(&n->outs.v[i]->deps, n);
	vec_remove(&n->graph->nodes, n);
	capture_forget_node(n);
	node_free(n);
	pthread_mutex_unlock(&graph_lock);
	return CUDA_SUCCESS;
}

/* A locked read of one field of a handle (a node, an executable graph) checked by valid. */
#define HANDLE_GET_API(name, handle_type, valid, out_type, get)                                              \
	CUresult name(handle_type h, out_type *out)                                                          \
	{                                                                                                    \
		CUresult res = CUDA_SUCCESS;                                                                 \
                                                                                                             \
		SIM_ENTER(name);                                                                             \
		if (!out)                                                                                    \
			return CUDA_ERROR_INVALID_VALUE;                                                     \
		pthread_mutex_lock(&graph_lock);                                                             \
		if (valid(h))                                                                                \
			get;                                                                                 \
		else                                                                                         \
			res = CUDA_ERROR_INVALID_VALUE;                                                      \
		pthread_mutex_unlock(&graph_lock);                                                           \
		return res;                                                                                  \
	}

HANDLE_GET_API(cuGraphNodeGetType, CUgraphNode, node_valid, CUgraphNodeType, *out = h->type)

/* The query convention: NULL array → count only; otherwise up to *count entries, the rest of a
 * longer array NULL, *count set to the number there are. */
static void list_out(struct CUgraphNode_st *const *src, size_t n, CUgraphNode *out, CUgraphEdgeData *edges,
		     size_t *count)
{
	if (out) {
		size_t room = *count;

		for (size_t i = 0; i < room; i++) {
			out[i] = i < n ? src[i] : NULL;
			if (edges)
				memset(&edges[i], 0, sizeof(edges[i]));
		}
		if (room > n)
			*count = n;
	} else {
		*count = n;
	}
}

CUresult cuGraphGetNodes(CUgraph g, CUgraphNode *nodes, size_t *count)
{
	SIM_ENTER(cuGraphGetNodes);
	if (!count)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&graph_lock);
	if (!graph_valid(g)) {
		pthread_mutex_unlock(&graph_lock);
		return CUDA_ERROR_INVALID_VALUE;
	}
	list_out(g->nodes.v, g->nodes.n, nodes, NULL, count);
	pthread_mutex_unlock(&graph_lock);
	return CUDA_SUCCESS;
}

CUresult cuGraphGetRootNodes(CUgraph g, CUgraphNode *nodes, size_t *count)
{
	struct node_vec roots = {0};
	CUresult res = CUDA_SUCCESS;

	SIM_ENTER(cuGraphGetRootNodes);
	if (!count)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&graph_lock);
	if (!graph_valid(g)) {
		res = CUDA_ERROR_INVALID_VALUE;
		goto out;
	}
	for (size_t i = 0; i < g->nodes.n; i++) {
		if (!g->nodes.v[i]->deps.n && !vec_push(&roots, g->nodes.v[i])) {
			res = CUDA_ERROR_OUT_OF_MEMORY;
			goto out;
		}
	}
	list_out(roots.v, roots.n, nodes, NULL, count);
out:
	pthread_mutex_unlock(&graph_lock);
	vec_free(&roots);
	return res;
}

static CUresult get_edges(CUgraph g, CUgraphNode *from, CUgraphNode *to, CUgraphEdgeData *edges,
			  size_t *count)
{
	size_t total = 0, k = 0;

	if (!count || (!from) != (!to) || (edges && !from))
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&graph_lock);
	if (!graph_valid(g)) {
		pthread_mutex_unlock(&graph_lock);
		return CUDA_ERROR_INVALID_VALUE;
	}
	for (size_t i = 0; i < g->nodes.n; i++)
		total += g->nodes.v[i]->outs.n;
	if (from) {
		for (size_t i = 0; i < g->nodes.n; i++) {
			struct CUgraphNode_st *n = g->nodes.v[i];

			for (size_t j = 0; j < n->outs.n && k < *count; j++, k++) {
				from[k] = n;
				to[k] = n->outs.v[j];
			}
		}
		for (; k < *count; k++)
			from[k] = to[k] = NULL;
		if (edges)
			memset(edges, 0, *count * sizeof(*edges));
		if (*count > total)
			*count = total;
	} else {
		*count = total;
	}
	pthread_mutex_unlock(&graph_lock);
	return CUDA_SUCCESS;
}

GRAPH_API(cuGraphGetEdges, (CUgraph g, CUgraphNode *from, CUgraphNode *to, size_t *count), get_edges, g, from,
	  to, NULL, count)
GRAPH_API(cuGraphGetEdges_v2,
	  (CUgraph g, CUgraphNode *from, CUgraphNode *to, CUgraphEdgeData *edges, size_t *count), get_edges,
	  g, from, to, edges, count)

static CUresult node_neighbours(CUgraphNode n, bool deps, CUgraphNode *out, CUgraphEdgeData *edges,
				size_t *count)
{
	if (!count || (edges && !out))
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&graph_lock);
	if (!node_valid(n)) {
		pthread_mutex_unlock(&graph_lock);
		return CUDA_ERROR_INVALID_VALUE;
	}
	if (deps)
		list_out(n->deps.v, n->deps.n, out, edges, count);
	else
		list_out(n->outs.v, n->outs.n, out, edges, count);
	pthread_mutex_unlock(&graph_lock);
	return CUDA_SUCCESS;
}

GRAPH_API(cuGraphNodeGetDependencies, (CUgraphNode n, CUgraphNode *deps, size_t *count), node_neighbours, n,
	  true, deps, NULL, count)
GRAPH_API(cuGraphNodeGetDependencies_v2,
	  (CUgraphNode n, CUgraphNode *deps, CUgraphEdgeData *edges, size_t *count), node_neighbours, n, true,
	  deps, edges, count)
GRAPH_API(cuGraphNodeGetDependentNodes, (CUgraphNode n, CUgraphNode *outs, size_t *count), node_neighbours, n,
	  false, outs, NULL, count)
GRAPH_API(cuGraphNodeGetDependentNodes_v2,
	  (CUgraphNode n, CUgraphNode *outs, CUgraphEdgeData *edges, size_t *count), node_neighbours, n,
	  false, outs, edges, count)

/* edges (programmatic ports) are ignored: they do not change a sequential execution. */
static CUresult edges_change(CUgraph g, const CUgraphNode *from, const CUgraphNode *to,
			     const CUgraphEdgeData *edges, size_t count, bool add)
{
	CUresult res = CUDA_SUCCESS;

	(void)edges;
	if (count && (!from || !to))
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&graph_lock);
	if (!graph_valid(g)) {
		res = CUDA_ERROR_INVALID_VALUE;
		goto out;
	}
	/* All checked first, so that a bad entry changes nothing. */
	for (size_t i = 0; i < count; i++) {
		if (!node_valid(from[i]) || !node_valid(to[i]) || from[i]->graph != g || to[i]->graph != g ||
		    from[i] == to[i] || vec_has(&to[i]->deps, from[i]) != !add) {
			res = CUDA_ERROR_INVALID_VALUE;
			goto out;
		}
		for (size_t j = 0; j < i; j++) {
			if (from[j] == from[i] && to[j] == to[i]) {
				res = CUDA_ERROR_INVALID_VALUE;
				goto out;
			}
		}
	}
	for (size_t i = 0; i < count; i++) {
		if (!add) {
			vec_remove(&to[i]->deps, from[i]);
			vec_remove(&from[i]->outs, to[i]);
		} else if (!vec_push(&to[i]->deps, from[i])) {
			res = CUDA_ERROR_OUT_OF_MEMORY;
			break;
		} else if (!vec_push(&from[i]->outs, to[i])) {
			vec_remove(&to[i]->deps, from[i]);
			res = CUDA_ERROR_OUT_OF_MEMORY;
			break;
		}
	}
out:
	pthread_mutex_unlock(&graph_lock);
	return res;
}

GRAPH_API(cuGraphAddDependencies, (CUgraph g, const CUgraphNode *from, const CUgraphNode *to, size_t count),
	  edges_change, g, from, to, NULL, count, true)
GRAPH_API(cuGraphAddDependencies_v2,
	  (CUgraph g, const CUgraphNode *from, const CUgraphNode *to, const CUgraphEdgeData *edges,
	   size_t count),
	  edges_change, g, from, to, edges, count, true)
GRAPH_API(cuGraphRemoveDependencies,
	  (CUgraph g, const CUgraphNode *from, const CUgraphNode *to, size_t count), edges_change, g, from,
	  to, NULL, count, false)
GRAPH_API(cuGraphRemoveDependencies_v2,
	  (CUgraph g, const CUgraphNode *from, const CUgraphNode *to, const CUgraphEdgeData *edges,
	   size_t count),
	  edges_change, g, from, to, edges, count, false)

/* ---- node parameters: get and set ---- */

/* Takes graph_lock when n is a valid node of that type (any type for type < 0); *out = n, the
 * node to read or change, as exec_node_begin gives x's copy, so one body serves both. */
static CUresult node_begin(CUgraphNode n, int type, struct CUgraphNode_st **out)
{
	pthread_mutex_lock(&graph_lock);
	if (!node_valid(n) || (type >= 0 && n->type != (CUgraphNodeType)type)) {
		pthread_mutex_unlock(&graph_lock);
		return CUDA_ERROR_INVALID_VALUE;
	}
	*out = n;
	return CUDA_SUCCESS;
}

/* Takes graph_lock; *out is x's copy of n (of that type, any for type < 0). */
static CUresult exec_node_begin(CUgraphExec x, CUgraphNode n, int type, struct CUgraphNode_st **out)
{
	pthread_mutex_lock(&graph_lock);
	if (!exec_valid(x) || !node_valid(n) || !(*out = find_copy(x->graph, n->id, true)) ||
	    (type >= 0 && (*out)->type != (CUgraphNodeType)type)) {
		pthread_mutex_unlock(&graph_lock);
		return CUDA_ERROR_INVALID_VALUE;
	}
	return CUDA_SUCCESS;
}

/* Replaces n's parameters with proto's (built with result res), under graph_lock, which it drops. */
static CUresult node_set_end(struct CUgraphNode_st *n, struct CUgraphNode_st *proto, CUresult res)
{
	if (res == CUDA_SUCCESS && proto->type != n->type)
		res = CUDA_ERROR_INVALID_VALUE;
	if (res == CUDA_SUCCESS)
		params_move(n, proto);
	else
		params_release(proto);
	pthread_mutex_unlock(&graph_lock);
	return res;
}

#define KERNEL_GET(p, n)                                                                                     \
	do {                                                                                                 \
		(p)->func = (n)->kernel.func;                                                                \
		(p)->gridDimX = (n)->kernel.grid.x;                                                          \
		(p)->gridDimY = (n)->kernel.grid.y;                                                          \
		(p)->gridDimZ = (n)->kernel.grid.z;                                                          \
		(p)->blockDimX = (n)->kernel.block.x;                                                        \
		(p)->blockDimY = (n)->kernel.block.y;                                                        \
		(p)->blockDimZ = (n)->kernel.block.z;                                                        \
		(p)->sharedMemBytes = (n)->kernel.shared_bytes;                                              \
		(p)->kernelParams = (n)->kernel.ptrs;                                                        \
		(p)->extra = NULL;                                                                           \
	} while (0)

static void kernel_get_v2(CUDA_KERNEL_NODE_PARAMS_v2 *p, const struct CUgraphNode_st *n)
{
	KERNEL_GET(p, n);
	p->kern = NULL;
	p->ctx = n->kernel.ctx;
}

/* A getter of a node of CU_GRAPH_NODE_TYPE_<type>: get (a statement) fills *out from en. */
#define NODE_GET_API(name, type, out_type, get)                                                              \
	CUresult name(CUgraphNode n, out_type *out)                                                          \
	{                                                                                                    \
		struct CUgraphNode_st *en;                                                                   \
		CUresult res;                                                                                \
                                                                                                             \
		SIM_ENTER(name);                                                                             \
		if (!out)                                                                                    \
			return CUDA_ERROR_INVALID_VALUE;                                                     \
		res = node_begin(n, CU_GRAPH_NODE_TYPE_##type, &en);                                         \
		if (res != CUDA_SUCCESS)                                                                     \
			return res;                                                                          \
		get;                                                                                         \
		pthread_mutex_unlock(&graph_lock);                                                           \
		return CUDA_SUCCESS;                                                                         \
	}

NODE_GET_API(cuGraphKernelNodeGetParams, KERNEL, CUDA_KERNEL_NODE_PARAMS_v1, KERNEL_GET(out, en))
NODE_GET_API(cuGraphKernelNodeGetParams_v2, KERNEL, CUDA_KERNEL_NODE_PARAMS_v2, kernel_get_v2(out, en))
NODE_GET_API(cuGraphMemcpyNodeGetParams, MEMCPY, CUDA_MEMCPY3D_v2, *out = en->copy.p)
NODE_GET_API(cuGraphMemsetNodeGetParams, MEMSET, CUDA_MEMSET_NODE_PARAMS_v1, *out = en->set.p)

/* Kernel node attributes are kept, not acted on (the simulated device has no clusters, priorities or
 * access policies); an unset one reads as zeros. */
static CUresult knode_attr(CUgraphNode n, CUkernelNodeAttrID id, CUkernelNodeAttrValue *v, bool set)
{
	struct CUgraphNode_st *en;
	CUresult res;

	if (!v || (unsigned)id >= KNODE_ATTRS)
		return CUDA_ERROR_INVALID_VALUE;
	res = node_begin(n, CU_GRAPH_NODE_TYPE_KERNEL, &en);
	if (res != CUDA_SUCCESS)
		return res;
	if (set)
		en->kernel.attrs[id] = *v;
	else
		*v = en->kernel.attrs[id];
	pthread_mutex_unlock(&graph_lock);
	return CUDA_SUCCESS;
}

GRAPH_API(cuGraphKernelNodeGetAttribute, (CUgraphNode n, CUkernelNodeAttrID id, CUkernelNodeAttrValue *v),
	  knode_attr, n, id, v, false)
GRAPH_API(cuGraphKernelNodeSetAttribute,
	  (CUgraphNode n, CUkernelNodeAttrID id, const CUkernelNodeAttrValue *v), knode_attr, n, id,
	  (CUkernelNodeAttrValue *)v, true)

CUresult cuGraphKernelNodeCopyAttributes(CUgraphNode dst, CUgraphNode src)
{
	struct CUgraphNode_st *d;
	CUresult res = CUDA_ERROR_INVALID_VALUE;

	SIM_ENTER(cuGraphKernelNodeCopyAttributes);
	pthread_mutex_lock(&graph_lock);
	if (node_valid(dst) && node_valid(src) && dst->type == CU_GRAPH_NODE_TYPE_KERNEL &&
	    src->type == CU_GRAPH_NODE_TYPE_KERNEL) {
		d = dst;
		memcpy(d->kernel.attrs, src->kernel.attrs, sizeof(d->kernel.attrs));
		res = CUDA_SUCCESS;
	}
	pthread_mutex_unlock(&graph_lock);
	return res;
}
/* accessDescs point at the node's own copy, valid while the node lives (natively: the same). */
NODE_GET_API(cuGraphMemAllocNodeGetParams, MEM_ALLOC, CUDA_MEM_ALLOC_NODE_PARAMS_v1, *out = en->gmem->p)
NODE_GET_API(cuGraphMemFreeNodeGetParams, MEM_FREE, CUdeviceptr, *out = en->freed)
/* paramArray points at the node's own copy, valid while its parameters stay. */
NODE_GET_API(cuGraphBatchMemOpNodeGetParams, BATCH_MEM_OP, CUDA_BATCH_MEM_OP_NODE_PARAMS_v1,
	     *out = en->memops.p)

/* Graph memory's attributes: in use and reserved alike (see sim_gmem). */
static CUresult gmem_attr(CUdevice dev, CUgraphMem_attribute attr, cuuint64_t *v, bool set)
{
	CUresult res = CUDA_SUCCESS;

	if (!v)
		return CUDA_ERROR_INVALID_VALUE;
	if (!sim_device_get(dev))
		return CUDA_ERROR_INVALID_DEVICE;
	pthread_mutex_lock(&graph_lock);
	switch (attr) {
	case CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT:
	case CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT:
		if (set)
			res = CUDA_ERROR_INVALID_VALUE;
		else
			*v = gmem_in_use[dev];
		break;
	case CU_GRAPH_MEM_ATTR_USED_MEM_HIGH:
	case CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH:
		if (set && *v)
			res = CUDA_ERROR_INVALID_VALUE;
		else if (set)
			gmem_high[dev] = gmem_in_use[dev];
		else
			*v = gmem_high[dev];
		break;
	default:
		res = CUDA_ERROR_INVALID_VALUE;
	}
	pthread_mutex_unlock(&graph_lock);
	return res;
}

CUresult cuDeviceGetGraphMemAttribute(CUdevice dev, CUgraphMem_attribute attr, void *value)
{
	SIM_ENTER(cuDeviceGetGraphMemAttribute);
	return gmem_attr(dev, attr, value, false);
}

CUresult cuDeviceSetGraphMemAttribute(CUdevice dev, CUgraphMem_attribute attr, void *value)
{
	SIM_ENTER(cuDeviceSetGraphMemAttribute);
	return gmem_attr(dev, attr, value, true);
}

/* Nothing is kept beyond the graphs that hold it. */
CUresult cuDeviceGraphMemTrim(CUdevice dev)
{
	SIM_ENTER(cuDeviceGraphMemTrim);
	return sim_device_get(dev) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}
NODE_GET_API(cuGraphHostNodeGetParams, HOST, CUDA_HOST_NODE_PARAMS_v1, *out = en->host)
NODE_GET_API(cuGraphChildGraphNodeGetGraph, GRAPH, CUgraph, *out = en->child)
NODE_GET_API(cuGraphEventRecordNodeGetEvent, EVENT_RECORD, CUevent, *out = en->event)
NODE_GET_API(cuGraphEventWaitNodeGetEvent, WAIT_EVENT, CUevent, *out = en->event)

/* A setter's body: need (a parameter that must not be NULL, or true where build checks) is
 * checked before begin takes graph_lock and finds en, the node to change; build makes its new
 * parameters in proto. */
#define NODE_SET_BODY(name, begin, need, build)                                                              \
	{                                                                                                    \
		struct CUgraphNode_st proto = {.type = CU_GRAPH_NODE_TYPE_EMPTY}, *en;                       \
		CUresult res;                                                                                \
                                                                                                             \
		SIM_ENTER(name);                                                                             \
		if (!(need))                                                                                 \
			return CUDA_ERROR_INVALID_VALUE;                                                     \
		res = begin;                                                                                 \
		if (res != CUDA_SUCCESS)                                                                     \
			return res;                                                                          \
		return node_set_end(en, &proto, build);                                                      \
	}

/* cuGraphXxxNodeSetParams: on a node of a graph. */
#define NODE_SET_API(name, type, need, build, ...)                                                           \
	CUresult name(CUgraphNode n, __VA_ARGS__)                                                            \
	    NODE_SET_BODY(name, node_begin(n, CU_GRAPH_NODE_TYPE_##type, &en), need, build)

/* cuGraphExecXxxNodeSetParams: on x's copy of a node. */
#define EXEC_SET_API(name, type, need, build, ...)                                                           \
	CUresult name(CUgraphExec x, CUgraphNode n, __VA_ARGS__)                                             \
	    NODE_SET_BODY(name, exec_node_begin(x, n, CU_GRAPH_NODE_TYPE_##type, &en), need, build)

/* Both, where the new parameters come from the arguments alone. */
#define NODE_EXEC_SET_API(name, exec_name, type, need, build, ...)                                           \
	NODE_SET_API(name, type, need, build, __VA_ARGS__)                                                   \
	EXEC_SET_API(exec_name, type, need, build, __VA_ARGS__)

NODE_EXEC_SET_API(cuGraphKernelNodeSetParams, cuGraphExecKernelNodeSetParams, KERNEL, p,
		  KERNEL_PROTO(&proto, p, NULL, NULL), const CUDA_KERNEL_NODE_PARAMS_v1 *p)
NODE_EXEC_SET_API(cuGraphKernelNodeSetParams_v2, cuGraphExecKernelNodeSetParams_v2, KERNEL, p,
		  KERNEL_PROTO(&proto, p, p->kern, p->ctx), const CUDA_KERNEL_NODE_PARAMS_v2 *p)
NODE_EXEC_SET_API(cuGraphHostNodeSetParams, cuGraphExecHostNodeSetParams, HOST, p,
		  proto_host(&proto, p->fn, p->userData), const CUDA_HOST_NODE_PARAMS_v1 *p)
NODE_EXEC_SET_API(cuGraphEventRecordNodeSetEvent, cuGraphExecEventRecordNodeSetEvent, EVENT_RECORD, true,
		  proto_event(&proto, CU_GRAPH_NODE_TYPE_EVENT_RECORD, e), CUevent e)
NODE_EXEC_SET_API(cuGraphEventWaitNodeSetEvent, cuGraphExecEventWaitNodeSetEvent, WAIT_EVENT, true,
		  proto_event(&proto, CU_GRAPH_NODE_TYPE_WAIT_EVENT, e), CUevent e)
/* A copy or a set keeps the node's context; an executable graph's takes the one given. */
NODE_SET_API(cuGraphMemcpyNodeSetParams, MEMCPY, true, proto_memcpy(&proto, p, en->copy.ctx),
	     const CUDA_MEMCPY3D_v2 *p)
NODE_SET_API(cuGraphMemsetNodeSetParams, MEMSET, true, proto_memset(&proto, p, en->set.ctx),
	     const CUDA_MEMSET_NODE_PARAMS_v1 *p)
/* The driver moves only 1D copies in an executable graph. */
static CUresult proto_exec_memcpy(struct CUgraphNode_st *proto, const struct CUgraphNode_st *en,
				  const CUDA_MEMCPY3D *p, CUcontext ctx)
{
	if (p && (p->Height > 1 || p->Depth > 1 || en->copy.p.Height > 1 || en->copy.p.Depth > 1))
		return CUDA_ERROR_INVALID_VALUE;
	return proto_memcpy(proto, p, ctx);
}

EXEC_SET_API(cuGraphExecMemcpyNodeSetParams, MEMCPY, true, proto_exec_memcpy(&proto, en, p, ctx),
	     const CUDA_MEMCPY3D_v2 *p, CUcontext ctx)
EXEC_SET_API(cuGraphExecMemsetNodeSetParams, MEMSET, true, proto_memset(&proto, p, ctx),
	     const CUDA_MEMSET_NODE_PARAMS_v1 *p, CUcontext ctx)
NODE_EXEC_SET_API(cuGraphBatchMemOpNodeSetParams, cuGraphExecBatchMemOpNodeSetParams, BATCH_MEM_OP, p,
		  proto_memops(&proto, p), const CUDA_BATCH_MEM_OP_NODE_PARAMS_v1 *p)

CUresult cuGraphNodeSetParams(CUgraphNode n, CUgraphNodeParams *p)
{
	struct CUgraphNode_st proto = {.type = CU_GRAPH_NODE_TYPE_EMPTY}, *en;
	CUresult res;

	SIM_ENTER(cuGraphNodeSetParams);
	if (!p)
		return CUDA_ERROR_INVALID_VALUE;
	res = node_begin(n, -1, &en);
	if (res != CUDA_SUCCESS)
		return res;
	if (p->type != en->type || en->type == CU_GRAPH_NODE_TYPE_EMPTY ||
	    en->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC || en->type == CU_GRAPH_NODE_TYPE_MEM_FREE ||
	    en->type == CU_GRAPH_NODE_TYPE_CONDITIONAL ||
	    (en->type == CU_GRAPH_NODE_TYPE_GRAPH && p->graph.graph == en->graph)) {
		pthread_mutex_unlock(&graph_lock);
		return CUDA_ERROR_INVALID_VALUE;
	}
	return node_set_end(en, &proto, proto_generic(&proto, p));
}

/* ---- executable graphs ---- */

static void exec_free(struct CUgraphExec_st *x)
{
	if (x->graph)
		graph_free(x->graph);
	sim_conds_unref(x->conds);
	vec_free(&x->order);
	x->magic = SIM_MAGIC_DEAD;
	free(x);
}

static CUresult instantiate(CUgraphExec *px, CUgraph g, unsigned long long flags, CUgraphNode *err_node,
			    CUgraphInstantiateResult *result)
{
	const unsigned long long known =
	    CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH | CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD |
	    CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH | CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY;
	struct CUgraphNode_st *bad = NULL;
	struct CUgraphExec_st *x;
	struct CUctx_st *ctx;
	CUresult res;

	if (result)
		*result = CUDA_GRAPH_INSTANTIATE_ERROR;
	if (err_node)
		*err_node = NULL;
	if (!px || (flags & ~known))
		return CUDA_ERROR_INVALID_VALUE;
	res = sim_ctx_require(&ctx);
	if (res != CUDA_SUCCESS)
		return res;
	x = calloc(1, sizeof(*x));
	if (!x)
		return CUDA_ERROR_OUT_OF_MEMORY;
	x->magic = SIM_MAGIC_GRAPH_EXEC;
	x->ctx = ctx;
	x->flags = flags;
	pthread_mutex_lock(&graph_lock);
	if (!graph_valid(g)) {
		res = CUDA_ERROR_INVALID_VALUE;
		goto fail;
	}
	res = graph_check(g, &bad);
	if (res != CUDA_SUCCESS) {
		if (result && res == CUDA_ERROR_INVALID_VALUE)
			*result = CUDA_GRAPH_INSTANTIATE_INVALID_STRUCTURE;
		if (err_node)
			*err_node = bad;
		goto fail;
	}
	x->graph = graph_clone(g);
	if (!x->graph) {
		res = CUDA_ERROR_OUT_OF_MEMORY;
		goto fail;
	}
	res = topo_order(x->graph, &x->order);
	if (res == CUDA_SUCCESS && x->graph->ncond && !(x->conds = conds_new(x->graph)))
		res = CUDA_ERROR_OUT_OF_MEMORY;
	if (res != CUDA_SUCCESS)
		goto fail;
	pthread_mutex_unlock(&graph_lock);
	if (result)
		*result = CUDA_GRAPH_INSTANTIATE_SUCCESS;
	*px = x;
	return CUDA_SUCCESS;
fail:
	pthread_mutex_unlock(&graph_lock);
	exec_free(x);
	return res;
}

static CUresult instantiate_log(CUgraphExec *px, CUgraph g, CUgraphNode *err_node, char *log, size_t log_size)
{
	CUresult res = instantiate(px, g, 0, err_node, NULL);

	if (log && log_size)
		snprintf(log, log_size, "%s",
			 res == CUDA_SUCCESS ? ""
					     : "graph instantiation failed (a cycle or an invalid node)");
	return res;
}

GRAPH_API(cuGraphInstantiate,
	  (CUgraphExec * px, CUgraph g, CUgraphNode *err_node, char *log, size_t log_size), instantiate_log,
	  px, g, err_node, log, log_size)
GRAPH_API(cuGraphInstantiate_v2,
	  (CUgraphExec * px, CUgraph g, CUgraphNode *err_node, char *log, size_t log_size), instantiate_log,
	  px, g, err_node, log, log_size)
GRAPH_API(cuGraphInstantiateWithFlags, (CUgraphExec * px, CUgraph g, unsigned long long flags), instantiate,
	  px, g, flags, NULL, NULL)

static CUresult instantiate_with_params(bool pt, CUgraphExec *px, CUgraph g, CUDA_GRAPH_INSTANTIATE_PARAMS *p)
{
	struct CUstream_st *s;
	CUresult res;

	if (!p)
		return CUDA_ERROR_INVALID_VALUE;
	if (p->flags & CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD) {
		res = sim_stream_resolve(p->hUploadStream, pt, &s);
		if (res != CUDA_SUCCESS)
			return res;
	}
	return instantiate(px, g, p->flags, &p->hErrNode_out, &p->result_out);
}

GRAPH_STREAM_API_PAIR(cuGraphInstantiateWithParams, cuGraphInstantiateWithParams_ptsz,
		      instantiate_with_params,
		      (CUgraphExec * px, CUgraph g, CUDA_GRAPH_INSTANTIATE_PARAMS *p), px, g, p)

CUresult cuGraphExecDestroy(CUgraphExec x)
{
	SIM_ENTER(cuGraphExecDestroy);
	pthread_mutex_lock(&graph_lock);
	if (!exec_valid(x)) {
		pthread_mutex_unlock(&graph_lock);
		return CUDA_ERROR_INVALID_VALUE;
	}
	exec_free(x);
	pthread_mutex_unlock(&graph_lock);
	return CUDA_SUCCESS;
}

HANDLE_GET_API(cuGraphExecGetFlags, CUgraphExec, exec_valid, cuuint64_t, *out = h->flags)

/* ---- launches ---- */

/* A strided copy, run on the stream's worker as a host function (frees itself). */
struct copy_run {
	struct copy_side src, dst;
	size_t width, height, depth;
};

static void copy_run(void *arg)
{
	struct copy_run *c = arg;

	for (size_t z = 0; z < c->depth; z++)
		for (size_t y = 0; y < c->height; y++)
			memmove(c->dst.base + (z * c->dst.height + y) * c->dst.pitch,
				c->src.base + (z * c->src.height + y) * c->src.pitch, c->width);
	free(c);
}

struct op_list {
	struct sim_op **v;
	size_t n, cap;
};

static struct sim_op *ops_new(struct op_list *ops, enum sim_op_kind kind)
{
	struct sim_op *op;

	if (ops->n == ops->cap) {
		size_t cap = ops->cap ? ops->cap * 2 : 16;
		struct sim_op **v = realloc(ops->v, cap * sizeof(*v));

		if (!v)
			return NULL;
		ops->v = v;
		ops->cap = cap;
	}
	op = calloc(1, sizeof(*op));
	if (!op)
		return NULL;
	op->kind = kind;
	ops->v[ops->n++] = op;
	return op;
}

struct cond_run;
static void cond_run_free(struct cond_run *r);
static void CUDA_CB cond_run(void *arg);
static void CUDA_CB cond_reset_run(void *arg);
static void cond_reset_free(void *arg);

/* An op that will not run, with what its host function would have freed. Without graph_lock. */
static void ops_drop(struct sim_op *op)
{
	if (op->kind == SIM_OP_HOST_FUNC &&
	    (op->host_func.fn == copy_run || op->host_func.fn == sim_memop_run))
		free(op->host_func.data);
	if (op->kind == SIM_OP_HOST_FUNC && op->host_func.fn == cond_run)
		cond_run_free(op->host_func.data);
	if (op->kind == SIM_OP_HOST_FUNC && op->host_func.fn == cond_reset_run)
		cond_reset_free(op->host_func.data);
	sim_op_free(op);
}

static void ops_free(struct op_list *ops, size_t from)
{
	for (size_t i = from; i < ops->n; i++)
		ops_drop(ops->v[i]);
	free(ops->v);
}

/* Appends node's work. Event generations are taken at submission, not here (a record op freed
 * unsubmitted has generation 0, which completes nothing). */
static CUresult node_ops(struct CUgraphNode_st *n, struct op_list *ops, struct sim_conds *conds);

/* A conditional node's run: its handle's value picks the body (again and again for WHILE). */
struct cond_run {
	struct sim_conds *conds;
	CUgraphConditionalHandle handle;
	CUgraphConditionalNodeType type;
	unsigned size;
	struct CUgraph_st **bodies; /* copies, this run's own */
};

static unsigned cond_value(const struct cond_run *r)
{
	return r->conds && r->handle <= r->conds->n ? atomic_load(&r->conds->v[r->handle - 1]) : 0;
}

static void cond_body(struct cond_run *r, struct CUgraph_st *body)
{
	struct node_vec order = {0};
	struct op_list ops = {0};
	CUresult res;

	pthread_mutex_lock(&graph_lock);
	res = topo_order(body, &order);
	for (size_t i = 0; res == CUDA_SUCCESS && i < order.n; i++)
		res = node_ops(order.v[i], &ops, r->conds);
	pthread_mutex_unlock(&graph_lock);
	vec_free(&order);
	for (size_t i = 0; i < ops.n; i++) {
		if (res == CUDA_SUCCESS && !atomic_load(&sim_sticky_error))
			sim_op_run(ops.v[i]);
		else
			ops_drop(ops.v[i]);
	}
	free(ops.v);
}

static void cond_run_free(struct cond_run *r)
{
	pthread_mutex_lock(&graph_lock);
	for (unsigned i = 0; r->bodies && i < r->size; i++)
		if (r->bodies[i])
			graph_free(r->bodies[i]);
	pthread_mutex_unlock(&graph_lock);
	free(r->bodies);
	sim_conds_unref(r->conds);
	free(r);
}

static void CUDA_CB cond_run(void *arg)
{
	struct cond_run *r = arg;
	unsigned v = cond_value(r);

	switch (r->type) {
	case CU_GRAPH_COND_TYPE_IF:
		if (v || r->size == 2)
			cond_body(r, r->bodies[v ? 0 : 1]);
		break;
	case CU_GRAPH_COND_TYPE_WHILE:
		while (v && !atomic_load(&sim_sticky_error)) {
			cond_body(r, r->bodies[0]);
			v = cond_value(r);
		}
		break;
	default:
		if (v < r->size)
			cond_body(r, r->bodies[v]);
		break;
	}
	cond_run_free(r);
}

/* A launch's first op: the handles with CU_GRAPH_COND_ASSIGN_DEFAULT back at their default. */
struct cond_reset {
	struct sim_conds *conds;
	unsigned n;
	unsigned value[]; /* ~0u: left as it is */
};

static void cond_reset_free(void *arg)
{
	struct cond_reset *r = arg;

	sim_conds_unref(r->conds);
	free(r);
}

static void CUDA_CB cond_reset_run(void *arg)
{
	struct cond_reset *r = arg;

	for (unsigned i = 0; i < r->n; i++)
		if (r->value[i] != ~0u)
			atomic_store(&r->conds->v[i], r->value[i]);
	cond_reset_free(r);
}

static CUresult cond_reset_op(const struct CUgraph_st *g, struct sim_conds *conds, struct op_list *ops)
{
	struct cond_reset *r = malloc(sizeof(*r) + g->ncond * sizeof(r->value[0]));
	struct sim_op *op = r ? ops_new(ops, SIM_OP_HOST_FUNC) : NULL;

	if (!op) {
		free(r);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	r->conds = conds_ref(conds);
	r->n = g->ncond;
	for (unsigned i = 0; i < g->ncond; i++)
		r->value[i] = g->cond[i].flags & CU_GRAPH_COND_ASSIGN_DEFAULT ? g->cond[i].dflt : ~0u;
	op->host_func.fn = cond_reset_run;
	op->host_func.data = r;
	return CUDA_SUCCESS;
}

/* A batch mem-op node's operations, each a host function of the stream's worker, in order. */
static CUresult memop_node_op(void *arg, bool write, bool wide, CUdeviceptr addr, cuuint64_t value,
			      unsigned flags)
{
	CUresult res;
	void *m = sim_memop_make(write, wide, addr, value, flags, &res);
	struct sim_op *op = m ? ops_new(arg, SIM_OP_HOST_FUNC) : NULL;

	if (!op) {
		free(m);
		return m ? CUDA_ERROR_OUT_OF_MEMORY : res;
	}
	op->host_func.fn = sim_memop_run;
	op->host_func.data = m;
	return CUDA_SUCCESS;
}

static CUresult memop_node_wait(void *arg, bool wide, CUdeviceptr addr, cuuint64_t value, unsigned flags)
{
	return memop_node_op(arg, false, wide, addr, value, flags);
}

static CUresult memop_node_write(void *arg, bool wide, CUdeviceptr addr, cuuint64_t value, unsigned flags)
{
	return memop_node_op(arg, true, wide, addr, value, flags);
}

static const struct crc_memop_fns memop_node_fns = {memop_node_wait, memop_node_write};

static CUresult node_ops(struct CUgraphNode_st *n, struct op_list *ops, struct sim_conds *conds)
{
	struct sim_op *op;
	CUresult res;

	switch (n->type) {
	case CU_GRAPH_NODE_TYPE_KERNEL: {
		struct node_kernel k;

		if (!kernel_copy(&k, &n->kernel))
			return CUDA_ERROR_OUT_OF_MEMORY;
		op = ops_new(ops, SIM_OP_KERNEL);
		if (!op) {
			free(k.buffer);
			free(k.ptrs);
			return CUDA_ERROR_OUT_OF_MEMORY;
		}
		op->kernel.func = k.func;
		op->kernel.host_fn = k.host_fn;
		op->kernel.grid = k.grid;
		op->kernel.block = k.block;
		op->kernel.shared_bytes = k.shared_bytes;
		op->kernel.param_buffer = k.buffer;
		op->kernel.param_ptrs = k.ptrs;
		op->kernel.param_count = k.count;
		op->kernel.conds = conds_ref(conds);
		return CUDA_SUCCESS;
	}
	case CU_GRAPH_NODE_TYPE_BATCH_MEM_OP:
		return crc_batch_memops(n->memops.p.count, n->memops.p.paramArray, n->memops.p.flags,
					&memop_node_fns, ops);
	case CU_GRAPH_NODE_TYPE_CONDITIONAL: {
		struct cond_run *r = calloc(1, sizeof(*r));

		if (!r)
			return CUDA_ERROR_OUT_OF_MEMORY;
		r->conds = conds_ref(conds);
		r->handle = n->cond.handle;
		r->type = n->cond.type;
		r->size = n->cond.size;
		r->bodies = calloc(n->cond.size, sizeof(*r->bodies));
		for (unsigned i = 0; r->bodies && i < n->cond.size; i++)
			if (!(r->bodies[i] = graph_clone(n->cond.bodies[i])))
				break;
		op = r->bodies && r->bodies[n->cond.size - 1] ? ops_new(ops, SIM_OP_HOST_FUNC) : NULL;
		if (!op) {
			pthread_mutex_unlock(&graph_lock); /* cond_run_free takes it */
			cond_run_free(r);
			pthread_mutex_lock(&graph_lock);
			return CUDA_ERROR_OUT_OF_MEMORY;
		}
		op->host_func.fn = cond_run;
		op->host_func.data = r;
		return CUDA_SUCCESS;
	}
	case CU_GRAPH_NODE_TYPE_MEMCPY: {
		const CUDA_MEMCPY3D *p = &n->copy.p;
		struct copy_side src, dst;
		struct copy_run *c;

		res = copy_resolve(p, true, &src, &dst);
		if (res != CUDA_SUCCESS)
			return res;
		if (!p->WidthInBytes)
			return CUDA_SUCCESS;
		if (p->Height == 1 && p->Depth == 1) {
			op = ops_new(ops, SIM_OP_COPY);
			if (!op)
				return CUDA_ERROR_OUT_OF_MEMORY;
			op->copy.dst = dst.base;
			op->copy.src = src.base;
			op->copy.bytes = p->WidthInBytes;
			return CUDA_SUCCESS;
		}
		c = malloc(sizeof(*c));
		if (!c)
			return CUDA_ERROR_OUT_OF_MEMORY;
		*c = (struct copy_run){src, dst, p->WidthInBytes, p->Height, p->Depth};
		op = ops_new(ops, SIM_OP_HOST_FUNC);
		if (!op) {
			free(c);
			return CUDA_ERROR_OUT_OF_MEMORY;
		}
		op->host_func.fn = copy_run;
		op->host_func.data = c;
		return CUDA_SUCCESS;
	}
	case CU_GRAPH_NODE_TYPE_MEMSET: {
		const CUDA_MEMSET_NODE_PARAMS *p = &n->set.p;

		res = memset_check(p);
		if (res != CUDA_SUCCESS || !p->width)
			return res;
		op = ops_new(ops, SIM_OP_SET);
		if (!op)
			return CUDA_ERROR_OUT_OF_MEMORY;
		op->set.dst = (void *)(uintptr_t)p->dst;
		op->set.value = p->value;
		op->set.elem_size = p->elementSize;
		op->set.count = p->width;
		op->set.rows = p->height;
		op->set.pitch = p->pitch;
		return CUDA_SUCCESS;
	}
	case CU_GRAPH_NODE_TYPE_HOST:
		op = ops_new(ops, SIM_OP_HOST_FUNC);
		if (!op)
			return CUDA_ERROR_OUT_OF_MEMORY;
		op->host_func.fn = n->host.fn;
		op->host_func.data = n->host.userData;
		return CUDA_SUCCESS;
	case CU_GRAPH_NODE_TYPE_GRAPH: {
		struct node_vec order = {0};

		res = topo_order(n->child, &order);
		for (size_t i = 0; res == CUDA_SUCCESS && i < order.n; i++)
			res = node_ops(order.v[i], ops, conds);
		vec_free(&order);
		return res;
	}
	case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
	case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
		op = ops_new(ops, n->type == CU_GRAPH_NODE_TYPE_EVENT_RECORD ? SIM_OP_EVENT_RECORD
									     : SIM_OP_WAIT_EVENT);
		if (!op)
			return CUDA_ERROR_OUT_OF_MEMORY;
		sim_event_ref(n->event);
		op->event.event = n->event;
		return CUDA_SUCCESS;
	default:
		return CUDA_SUCCESS;
	}
}

static CUresult stream_join(struct sim_capture *cap, struct CUstream_st *s,
			    struct CUgraphNode_st *const *deps, size_t ndeps);
static CUresult capture_add(struct sim_stream_capture *sc, struct CUgraphNode_st *proto,
			    struct CUgraphNode_st **out);

/* A launch into a capturing stream: x's nodes are copied into the capture with their edges (a
 * disabled node as an empty one), the first ones depending on the stream's set, which becomes the
 * last ones. */
static CUresult launch_captured(struct CUgraphExec_st *x, struct sim_stream_capture *sc)
{
	struct CUgraph_st *g = sc->cap->graph;
	struct node_vec made = {0}, tails = {0}, deps = {0};
	CUresult res = CUDA_SUCCESS;

	if (sc->cap->invalidated)
		return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
	made.v = malloc((x->order.n ? x->order.n : 1) * sizeof(*made.v));
	if (!made.v)
		return CUDA_ERROR_OUT_OF_MEMORY;
	made.cap = x->order.n;
	for (size_t i = 0; i < x->order.n && res == CUDA_SUCCESS; i++) {
		struct CUgraphNode_st *src = x->order.v[i], *n, proto;

		src->index = i;
		memset(&proto, 0, sizeof(proto));
		proto.type = src->disabled ? CU_GRAPH_NODE_TYPE_EMPTY : src->type;
		if (!src->disabled && !params_copy(&proto, src)) {
			params_release(&proto);
			res = CUDA_ERROR_OUT_OF_MEMORY;
			break;
		}
		n = node_from_proto(&proto);
		if (!n) {
			res = CUDA_ERROR_OUT_OF_MEMORY;
			break;
		}
		deps.n = 0;
		if (!src->deps.n) {
			if (!vec_assign(&deps, sc->deps.v, sc->deps.n))
				res = CUDA_ERROR_OUT_OF_MEMORY;
		} else {
			for (size_t j = 0; j < src->deps.n && res == CUDA_SUCCESS; j++)
				if (!vec_push(&deps, made.v[src->deps.v[j]->index]))
					res = CUDA_ERROR_OUT_OF_MEMORY;
		}
		if (res != CUDA_SUCCESS) {
			node_free(n);
			break;
		}
		res = node_link(g, n, deps.v, deps.n); /* frees n on failure */
		if (res == CUDA_SUCCESS)
			made.v[made.n++] = n;
	}
	for (size_t i = 0; res == CUDA_SUCCESS && i < x->order.n; i++)
		if (!x->order.v[i]->outs.n && !vec_push(&tails, made.v[i]))
			res = CUDA_ERROR_OUT_OF_MEMORY;
	if (res == CUDA_SUCCESS && x->order.n && !vec_assign(&sc->deps, tails.v, tails.n))
		res = CUDA_ERROR_OUT_OF_MEMORY;
	vec_free(&made);
	vec_free(&tails);
	vec_free(&deps);
	return res;
}

/* Resolves h (per-thread default stream if pt) and, when it is fine, takes graph_lock. */
static CUresult stream_lock(CUstream h, bool pt, struct CUstream_st **s)
{
	CUresult res = sim_stream_resolve(h, pt, s);

	if (res == CUDA_SUCCESS)
		pthread_mutex_lock(&graph_lock);
	return res;
}

static CUresult graph_launch(bool pt, CUgraphExec x, CUstream h)
{
	struct op_list ops = {0};
	struct CUstream_st *s;
	CUresult res;
	size_t i;

	if (!x)
		return CUDA_ERROR_INVALID_VALUE;
	res = stream_lock(h, pt, &s);
	if (res != CUDA_SUCCESS)
		return res;
	if (!exec_valid(x)) {
		pthread_mutex_unlock(&graph_lock);
		return CUDA_ERROR_INVALID_HANDLE;
	}
	if (s->capture) {
		res = launch_captured(x, s->capture);
		pthread_mutex_unlock(&graph_lock);
		return res;
	}
	if (x->conds)
		res = cond_reset_op(x->graph, x->conds, &ops);
	for (i = 0; i < x->order.n && res == CUDA_SUCCESS; i++) {
		struct CUgraphNode_st *n = x->order.v[i];

		if (!n->disabled)
			res = node_ops(n, &ops, x->conds);
	}
	pthread_mutex_unlock(&graph_lock);
	if (res != CUDA_SUCCESS) {
		ops_free(&ops, 0);
		return res;
	}
	for (i = 0; i < ops.n && res == CUDA_SUCCESS; i++) {
		struct sim_op *op = ops.v[i];

		if (op->kind == SIM_OP_EVENT_RECORD || op->kind == SIM_OP_WAIT_EVENT) {
			struct CUevent_st *e = op->event.event;

			pthread_mutex_lock(&e->st->lock);
			op->event.generation =
			    op->kind == SIM_OP_EVENT_RECORD ? ++e->st->recorded_gen : e->st->recorded_gen;
			pthread_mutex_unlock(&e->st->lock);
		}
		/* On failure the op is freed, a record completed (sim_op_free). */
		res = sim_stream_submit(s, op);
	}
	ops_free(&ops, i);
	return res;
}

GRAPH_STREAM_API_PAIR(cuGraphLaunch, cuGraphLaunch_ptsz, graph_launch, (CUgraphExec x, CUstream h), x, h)

static CUresult graph_upload(bool pt, CUgraphExec x, CUstream h)
{
	struct CUstream_st *s;
	CUresult res = stream_lock(h, pt, &s);

	if (res != CUDA_SUCCESS)
		return res;
	res = exec_valid(x) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_unlock(&graph_lock);
	return res;
}

GRAPH_STREAM_API_PAIR(cuGraphUpload, cuGraphUpload_ptsz, graph_upload, (CUgraphExec x, CUstream h), x, h)

/* ---- executable graph updates ---- */

/* Whether b has a's topology and node types (pairing nodes in creation order), for
 * cuGraphExecUpdate; the first difference goes to info. */
static bool graphs_match(struct CUgraph_st *a, struct CUgraph_st *b, CUgraphExecUpdateResultInfo *info)
{
	if (a->nodes.n != b->nodes.n) {
		info->result = CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED;
		return false;
	}
	for (size_t i = 0; i < a->nodes.n; i++) {
		a->nodes.v[i]->index = i;
		b->nodes.v[i]->index = i;
	}
	for (size_t i = 0; i < a->nodes.n; i++) {
		struct CUgraphNode_st *na = a->nodes.v[i], *nb = b->nodes.v[i];

		if (na->type != nb->type) {
			info->result = CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED;
			info->errorNode = nb;
			return false;
		}
		if (na->deps.n != nb->deps.n) {
			info->result = CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED;
			info->errorNode = nb;
			return false;
		}
		for (size_t j = 0; j < nb->deps.n; j++) {
			bool found = false;

			for (size_t k = 0; k < na->deps.n && !found; k++)
				found = na->deps.v[k]->index == nb->deps.v[j]->index;
			if (!found) {
				info->result = CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED;
				info->errorNode = nb;
				info->errorFromNode = nb->deps.v[j];
				return false;
			}
		}
		if (na->type == CU_GRAPH_NODE_TYPE_KERNEL && na->kernel.ctx != nb->kernel.ctx) {
			info->result = CU_GRAPH_EXEC_UPDATE_ERROR_UNSUPPORTED_FUNCTION_CHANGE;
			info->errorNode = nb;
			return false;
		}
		if (na->type == CU_GRAPH_NODE_TYPE_GRAPH) {
			CUgraphExecUpdateResultInfo inner = {0};

			if (!graphs_match(na->child, nb->child, &inner)) {
				info->result = inner.result;
				info->errorNode = nb;
				return false;
			}
			/* The recursion reused the index fields: set them again for this level. */
			for (size_t k = 0; k < a->nodes.n; k++) {
				a->nodes.v[k]->index = k;
				b->nodes.v[k]->index = k;
			}
		}
	}
	return true;
}

/* a (matching b) takes copies of b's parameters; false when out of memory (a partly updated). */
static bool graph_update(struct CUgraph_st *a, struct CUgraph_st *b)
{
	for (size_t i = 0; i < a->nodes.n; i++) {
		struct CUgraphNode_st *na = a->nodes.v[i], *nb = b->nodes.v[i], tmp;

		if (na->type == CU_GRAPH_NODE_TYPE_GRAPH) {
			if (!graph_update(na->child, nb->child))
				return false;
			continue;
		}
		memset(&tmp, 0, sizeof(tmp));
		tmp.type = nb->type;
		if (!params_copy(&tmp, nb))
			return false;
		params_move(na, &tmp);
	}
	return true;
}

static CUresult exec_update(CUgraphExec x, CUgraph g, CUgraphExecUpdateResultInfo *info)
{
	CUresult res = CUDA_SUCCESS;

	memset(info, 0, sizeof(*info));
	pthread_mutex_lock(&graph_lock);
	if (!exec_valid(x) || !graph_valid(g)) {
		res = CUDA_ERROR_INVALID_VALUE;
	} else if (!graphs_match(x->graph, g, info)) {
		res = CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE;
	} else if (!graph_update(x->graph, g)) {
		info->result = CU_GRAPH_EXEC_UPDATE_ERROR;
		res = CUDA_ERROR_OUT_OF_MEMORY;
	}
	pthread_mutex_unlock(&graph_lock);
	return res;
}

CUresult cuGraphExecUpdate_v2(CUgraphExec x, CUgraph g, CUgraphExecUpdateResultInfo *info)
{
	SIM_ENTER(cuGraphExecUpdate_v2);
	if (!info)
		return CUDA_ERROR_INVALID_VALUE;
	return exec_update(x, g, info);
}

CUresult cuGraphExecUpdate(CUgraphExec x, CUgraph g, CUgraphNode *err_node, CUgraphExecUpdateResult *result)
{
	CUgraphExecUpdateResultInfo info;
	CUresult res;

	SIM_ENTER(cuGraphExecUpdate);
	if (!err_node || !result)
		return CUDA_ERROR_INVALID_VALUE;
	res = exec_update(x, g, &info);
	*err_node = info.errorNode;
	*result = info.result;
	return res;
}

/* en, a child graph node of an executable graph, takes the parameters of child, which must have
 * its topology; under graph_lock, which it drops. */
static CUresult exec_child_update(struct CUgraphNode_st *en, CUgraph child)
{
	CUgraphExecUpdateResultInfo info = {0};
	CUresult res = CUDA_SUCCESS;

	if (!graph_valid(child) || !graphs_match(en->child, child, &info))
		res = CUDA_ERROR_INVALID_VALUE;
	else if (!graph_update(en->child, child))
		res = CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_unlock(&graph_lock);
	return res;
}

CUresult cuGraphExecChildGraphNodeSetParams(CUgraphExec x, CUgraphNode n, CUgraph child)
{
	struct CUgraphNode_st *en;
	CUresult res;

	SIM_ENTER(cuGraphExecChildGraphNodeSetParams);
	res = exec_node_begin(x, n, CU_GRAPH_NODE_TYPE_GRAPH, &en);
	if (res != CUDA_SUCCESS)
		return res;
	return exec_child_update(en, child);
}

CUresult cuGraphExecNodeSetParams(CUgraphExec x, CUgraphNode n, CUgraphNodeParams *p)
{
	struct CUgraphNode_st proto = {.type = CU_GRAPH_NODE_TYPE_EMPTY}, *en;
	CUresult res;

	SIM_ENTER(cuGraphExecNodeSetParams);
	if (!p)
		return CUDA_ERROR_INVALID_VALUE;
	res = exec_node_begin(x, n, -1, &en);
	if (res != CUDA_SUCCESS)
		return res;
	if (p->type != en->type || en->type == CU_GRAPH_NODE_TYPE_EMPTY ||
	    en->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC || en->type == CU_GRAPH_NODE_TYPE_MEM_FREE ||
	    en->type == CU_GRAPH_NODE_TYPE_CONDITIONAL) {
		pthread_mutex_unlock(&graph_lock);
		return CUDA_ERROR_INVALID_VALUE;
	}
	if (en->type == CU_GRAPH_NODE_TYPE_GRAPH)
		return exec_child_update(en, p->graph.graph);
	return node_set_end(en, &proto, proto_generic(&proto, p));
}

/* cuGraphNodeSetEnabled (set given) and cuGraphNodeGetEnabled (get given): only kernel, copy and
 * set nodes can be disabled. */
static CUresult exec_enabled(CUgraphExec x, CUgraphNode n, const unsigned *set, unsigned *get)
{
	struct CUgraphNode_st *en;
	CUresult res = exec_node_begin(x, n, -1, &en);

	if (res != CUDA_SUCCESS)
		return res;
	if (en->type != CU_GRAPH_NODE_TYPE_KERNEL && en->type != CU_GRAPH_NODE_TYPE_MEMCPY &&
	    en->type != CU_GRAPH_NODE_TYPE_MEMSET)
		res = CUDA_ERROR_INVALID_VALUE;
	else if (set)
		en->disabled = !*set;
	else
		*get = !en->disabled;
	pthread_mutex_unlock(&graph_lock);
	return res;
}

CUresult cuGraphNodeSetEnabled(CUgraphExec x, CUgraphNode n, unsigned int enabled)
{
	SIM_ENTER(cuGraphNodeSetEnabled);
	return exec_enabled(x, n, &enabled, NULL);
}

CUresult cuGraphNodeGetEnabled(CUgraphExec x, CUgraphNode n, unsigned int *enabled)
{
	SIM_ENTER(cuGraphNodeGetEnabled);
	if (!enabled)
		return CUDA_ERROR_INVALID_VALUE;
	return exec_enabled(x, n, NULL, enabled);
}

/* ---- stream capture ---- */

static struct sim_capture *capture_find(unsigned long long id)
{
	for (struct sim_capture *c = captures; c; c = c->next)
		if (c->id == id)
			return c;
	return NULL;
}

static bool node_in_graph(const struct CUgraphNode_st *n, const struct CUgraph_st *g)
{
	return vec_has(&g->nodes, n);
}

/* s joins cap with dependency set deps (nodes of cap->graph). */
static CUresult stream_join(struct sim_capture *cap, struct CUstream_st *s,
			    struct CUgraphNode_st *const *deps, size_t ndeps)
{
	struct sim_stream_capture *sc = calloc(1, sizeof(*sc));

	if (!sc)
		return CUDA_ERROR_OUT_OF_MEMORY;
	if (cap->nstreams == cap->streams_cap) {
		size_t n = cap->streams_cap ? cap->streams_cap * 2 : 4;
		struct CUstream_st **v = realloc(cap->streams, n * sizeof(*v));

		if (!v) {
			free(sc);
			return CUDA_ERROR_OUT_OF_MEMORY;
		}
		cap->streams = v;
		cap->streams_cap = n;
	}
	for (size_t i = 0; i < ndeps; i++) {
		if (node_in_graph(deps[i], cap->graph) && !vec_has(&sc->deps, deps[i]) &&
		    !vec_push(&sc->deps, deps[i])) {
			vec_free(&sc->deps);
			free(sc);
			return CUDA_ERROR_OUT_OF_MEMORY;
		}
	}
	sc->cap = cap;
	cap->streams[cap->nstreams++] = s;
	s->capture = sc;
	atomic_store(&s->capturing, true);
	return CUDA_SUCCESS;
}

static void stream_leave(struct CUstream_st *s)
{
	struct sim_stream_capture *sc = s->capture;
	struct sim_capture *cap = sc->cap;

	for (size_t i = 0; i < cap->nstreams; i++) {
		if (cap->streams[i] == s) {
			cap->streams[i] = cap->streams[--cap->nstreams];
			break;
		}
	}
	atomic_store(&s->capturing, false);
	s->capture = NULL;
	vec_free(&sc->deps);
	free(sc->info);
	free(sc->info_edges);
	free(sc);
}

/* Ends cap: its streams leave it and it goes; its graph is the caller's. */
static void capture_end(struct sim_capture *cap)
{
	while (cap->nstreams)
		stream_leave(cap->streams[0]);
	for (struct sim_capture **p = &captures; *p; p = &(*p)->next) {
		if (*p == cap) {
			*p = cap->next;
			break;
		}
	}
	cap->graph->captures--;
	atomic_fetch_sub(&capture_count, 1);
	free(cap->streams);
	free(cap);
}

static void capture_invalidate(struct sim_capture *cap)
{
	if (!cap->invalidated)
		pr_debug("stream capture %llu invalidated", cap->id);
	cap->invalidated = true;
}

/* A node of the capture graph from proto, depending on the stream's set, which becomes it. */
static CUresult capture_add(struct sim_stream_capture *sc, struct CUgraphNode_st *proto,
			    struct CUgraphNode_st **out)
{
	struct CUgraphNode_st *n = node_from_proto(proto);
	CUresult res;

	if (!n)
		return CUDA_ERROR_OUT_OF_MEMORY;
	res = node_link(sc->cap->graph, n, sc->deps.v, sc->deps.n);
	if (res != CUDA_SUCCESS)
		return res;
	sc->deps.n = 0;
	if (!vec_push(&sc->deps, n))
		return CUDA_ERROR_OUT_OF_MEMORY; /* the node stays, without the stream depending on it */
	if (out)
		*out = n;
	return CUDA_SUCCESS;
}

static void capture_forget_node(struct CUgraphNode_st *n)
{
	for (struct sim_capture *c = captures; c; c = c->next)
		if (c->graph == n->graph)
			for (size_t i = 0; i < c->nstreams; i++)
				vec_remove(&c->streams[i]->capture->deps, n);
}

/* One side of a captured copy: host memory (page-locked or not) as host memory, the rest as device. */
static void captured_side(const void *p, size_t bytes, CUmemorytype *type, const void **host,
			  CUdeviceptr *dev)
{
	struct sim_range r;

	if (!sim_mem_find((uintptr_t)p, bytes, &r) || sim_mem_is_pinned_host(p, bytes)) {
		*type = CU_MEMORYTYPE_HOST;
		*host = p;
	} else {
		*type = CU_MEMORYTYPE_DEVICE;
		*dev = (CUdeviceptr)(uintptr_t)p;
	}
}

/* The stream's capture with graph_lock held, *res INVALIDATED if it was (else SUCCESS); NULL (and the
 * lock not held) when the stream does not capture. */
static struct sim_stream_capture *capture_locked(struct CUstream_st *s, CUresult *res)
{
	struct sim_stream_capture *sc;

	pthread_mutex_lock(&graph_lock);
	sc = s->capture;
	if (!sc)
		pthread_mutex_unlock(&graph_lock);
	else
		*res = sc->cap->invalidated ? CUDA_ERROR_STREAM_CAPTURE_INVALIDATED : CUDA_SUCCESS;
	return sc;
}

bool sim_capture_take(struct CUstream_st *s, struct sim_op *op, CUresult *res)
{
	struct sim_stream_capture *sc = capture_locked(s, res);
	struct CUgraphNode_st proto;

	if (!sc)
		return false;
	memset(&proto, 0, sizeof(proto));
	if (*res == CUDA_SUCCESS) {
		switch (op->kind) {
		case SIM_OP_COPY:
			proto.type = CU_GRAPH_NODE_TYPE_MEMCPY;
			proto.copy.ctx = s->ctx;
			/* As the driver reports captured copies. */
			captured_side(op->copy.src, op->copy.bytes, &proto.copy.p.srcMemoryType,
				      &proto.copy.p.srcHost, &proto.copy.p.srcDevice);
			proto.copy.p.srcPitch = op->copy.bytes;
			captured_side(op->copy.dst, op->copy.bytes, &proto.copy.p.dstMemoryType,
				      (const void **)&proto.copy.p.dstHost, &proto.copy.p.dstDevice);
			proto.copy.p.dstPitch = op->copy.bytes;
			proto.copy.p.WidthInBytes = op->copy.bytes;
			proto.copy.p.Height = 1;
			proto.copy.p.Depth = 1;
			break;
		case SIM_OP_SET:
			proto.type = CU_GRAPH_NODE_TYPE_MEMSET;
			proto.set.ctx = s->ctx;
			proto.set.p.dst = (CUdeviceptr)(uintptr_t)op->set.dst;
			proto.set.p.pitch = op->set.pitch;
			proto.set.p.value = op->set.value;
			proto.set.p.elementSize = op->set.elem_size;
			proto.set.p.width = op->set.count;
			proto.set.p.height = op->set.rows;
			break;
		case SIM_OP_KERNEL:
			proto.type = CU_GRAPH_NODE_TYPE_KERNEL;
			proto.kernel.func = op->kernel.func;
			proto.kernel.ctx = op->kernel.func->module->ctx;
			proto.kernel.host_fn = op->kernel.host_fn;
			proto.kernel.grid = op->kernel.grid;
			proto.kernel.block = op->kernel.block;
			proto.kernel.shared_bytes = op->kernel.shared_bytes;
			proto.kernel.buffer = op->kernel.param_buffer;
			proto.kernel.ptrs = op->kernel.param_ptrs;
			proto.kernel.count = op->kernel.param_count;
			op->kernel.param_buffer = NULL;
			op->kernel.param_ptrs = NULL;
			break;
		case SIM_OP_HOST_FUNC:
			if (op->host_func.fn == sim_memop_run) {
				/* A stream memory operation: a batch mem-op node, as the driver captures it.
				 */
				CUstreamBatchMemOpParams one;
				CUDA_BATCH_MEM_OP_NODE_PARAMS bp = {
				    .ctx = s->ctx, .count = 1, .paramArray = &one};

				sim_memop_params(op->host_func.data, &one);
				free(op->host_func.data);
				op->host_func.data = NULL;
				*res = proto_memops(&proto, &bp);
				break;
			}
			proto.type = CU_GRAPH_NODE_TYPE_HOST;
			proto.host.fn = op->host_func.fn;
			proto.host.userData = op->host_func.data;
			break;
		default:
			/* Event ops and stream waits are handled before they become ops. */
			capture_invalidate(sc->cap);
			*res = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
			break;
		}
		if (*res == CUDA_SUCCESS)
			*res = capture_add(sc, &proto, NULL);
	}
	sim_op_free(op);
	pthread_mutex_unlock(&graph_lock);
	return true;
}

bool sim_graph_mem_owns(CUdeviceptr p)
{
	bool owned;

	pthread_mutex_lock(&graph_lock);
	owned = gmem_at(p) != NULL;
	pthread_mutex_unlock(&graph_lock);
	return owned;
}

/* Stream-ordered allocation and free on a capturing stream: an alloc or free node of the capture. False
 * when the stream is not capturing. */
bool sim_capture_mem(struct CUstream_st *s, const CUmemPoolProps *props, size_t bytes, CUdeviceptr *dptr,
		     CUresult *res)
{
	struct sim_stream_capture *sc = capture_locked(s, res);
	struct CUgraphNode_st proto;

	if (!sc)
		return false;
	memset(&proto, 0, sizeof(proto));
	if (*res == CUDA_SUCCESS && props) {
		CUmemAccessDesc acc = {.location = props->location,
				       .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
		CUDA_MEM_ALLOC_NODE_PARAMS p = {
		    .poolProps = *props, .accessDescs = &acc, .accessDescCount = 1, .bytesize = bytes};

		*res = dptr ? proto_memalloc(&proto, &p) : CUDA_ERROR_INVALID_VALUE;
		if (*res == CUDA_SUCCESS)
			*dptr = proto.gmem->p.dptr;
	} else if (*res == CUDA_SUCCESS) {
		*res = proto_memfree(&proto, *dptr);
	}
	if (*res == CUDA_SUCCESS)
		*res = capture_add(sc, &proto, NULL);
	else
		params_release(&proto);
	pthread_mutex_unlock(&graph_lock);
	return true;
}

/* The event's capture record, allocated on first use. */
static struct sim_event_capture *event_capture(struct CUevent_st *e)
{
	if (!e->capture)
		e->capture = calloc(1, sizeof(*e->capture));
	return e->capture;
}

bool sim_capture_event_record(struct CUstream_st *s, struct CUevent_st *e, unsigned flags, CUresult *res)
{
	struct sim_stream_capture *sc;
	struct sim_event_capture *ec;

	if (!atomic_load(&s->capturing) && !atomic_load(&capture_count))
		return false; /* a stale e->capture names an ended capture: harmless */
	pthread_mutex_lock(&graph_lock);
	sc = s->capture;
	if (!sc) {
		if (e->capture)
			e->capture->capture_id = 0; /* an ordinary record: the event leaves the capture */
		pthread_mutex_unlock(&graph_lock);
		return false;
	}
	*res = CUDA_SUCCESS;
	if (sc->cap->invalidated) {
		*res = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
	} else if (flags & CU_EVENT_RECORD_EXTERNAL) {
		struct CUgraphNode_st proto;

		*res = proto_event(&proto, CU_GRAPH_NODE_TYPE_EVENT_RECORD, e);
		if (*res == CUDA_SUCCESS)
			*res = capture_add(sc, &proto, NULL);
	}
	if (*res == CUDA_SUCCESS) {
		ec = event_capture(e);
		if (!ec || !vec_assign(&ec->nodes, sc->deps.v, sc->deps.n))
			*res = CUDA_ERROR_OUT_OF_MEMORY;
		else
			ec->capture_id = sc->cap->id;
	}
	pthread_mutex_unlock(&graph_lock);
	return true;
}

bool sim_capture_wait_event(struct CUstream_st *s, struct CUevent_st *e, unsigned flags, CUresult *res)
{
	struct sim_stream_capture *sc;
	struct sim_capture *ecap;
	struct sim_event_capture *ec;
	bool recorded;

	if (!atomic_load(&s->capturing) && !atomic_load(&capture_count))
		return false;
	pthread_mutex_lock(&graph_lock);
	sc = s->capture;
	ec = e->capture;
	ecap = ec && ec->capture_id ? capture_find(ec->capture_id) : NULL;
	*res = CUDA_SUCCESS;
	if (!sc) {
		if (!ecap) {
			pthread_mutex_unlock(&graph_lock);
			return false; /* an ordinary wait */
		}
		/* Waiting for a captured event: s joins that capture. */
		if (s->is_legacy) {
			capture_invalidate(ecap);
			*res = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
		} else {
			*res = stream_join(ecap, s, ec->nodes.v, ec->nodes.n);
			if (*res == CUDA_SUCCESS && ecap->invalidated)
				*res = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
		}
		pthread_mutex_unlock(&graph_lock);
		return true;
	}
	if (sc->cap->invalidated) {
		*res = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
	} else if (ecap == sc->cap) {
		for (size_t i = 0; i < ec->nodes.n && *res == CUDA_SUCCESS; i++) {
			struct CUgraphNode_st *n = ec->nodes.v[i];

			if (node_in_graph(n, sc->cap->graph) && !vec_has(&sc->deps, n) &&
			    !vec_push(&sc->deps, n))
				*res = CUDA_ERROR_OUT_OF_MEMORY;
		}
	} else if (ecap) {
		/* Merging two capture sequences. */
		capture_invalidate(sc->cap);
		*res = CUDA_ERROR_STREAM_CAPTURE_ISOLATION;
	} else if (flags & CU_EVENT_WAIT_EXTERNAL) {
		struct CUgraphNode_st proto;

		*res = proto_event(&proto, CU_GRAPH_NODE_TYPE_WAIT_EVENT, e);
		if (*res == CUDA_SUCCESS)
			*res = capture_add(sc, &proto, NULL);
	} else {
		pthread_mutex_lock(&e->st->lock);
		recorded = e->st->recorded_gen != 0;
		pthread_mutex_unlock(&e->st->lock);
		if (recorded) {
			/* A dependency on work outside the capture. */
			capture_invalidate(sc->cap);
			*res = CUDA_ERROR_STREAM_CAPTURE_ISOLATION;
		}
	}
	pthread_mutex_unlock(&graph_lock);
	return true;
}

/* Under graph_lock, for a thread not in the relaxed mode: CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED where
 * a capture forbids it potentially unsafe calls (its own, unless relaxed; another thread's global one),
 * its own capture invalidated, and another thread's too where invalidate_others. */
static CUresult captures_forbid(bool invalidate_others)
{
	CUresult res = CUDA_SUCCESS;
	pthread_t self = pthread_self();

	for (struct sim_capture *c = captures; c; c = c->next) {
		bool own = pthread_equal(c->thread, self) && c->mode != CU_STREAM_CAPTURE_MODE_RELAXED;

		if (own || c->mode == CU_STREAM_CAPTURE_MODE_GLOBAL) {
			if (own || invalidate_others)
				capture_invalidate(c);
			res = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
		}
	}
	return res;
}

CUresult sim_capture_check_sync(struct CUstream_st *s)
{
	CUresult res = CUDA_SUCCESS;

	if (!atomic_load(&capture_count))
		return CUDA_SUCCESS;
	pthread_mutex_lock(&graph_lock);
	if (s->capture) {
		capture_invalidate(s->capture->cap);
		res = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
	} else if (thread_capture_mode != CU_STREAM_CAPTURE_MODE_RELAXED) {
		res = captures_forbid(false);
	}
	pthread_mutex_unlock(&graph_lock);
	return res;
}

/* As sim_capture_check_sync, except that another thread's GLOBAL capture is invalidated too: the
 * driver did that when a thread of the process unregistered host memory during it (H100, driver
 * 580.159.04: the capture's end answered CUDA_ERROR_STREAM_CAPTURE_INVALIDATED). */
CUresult sim_capture_check_unsafe(void)
{
	CUresult res;

	if (!atomic_load(&capture_count) || thread_capture_mode == CU_STREAM_CAPTURE_MODE_RELAXED)
		return CUDA_SUCCESS;
	pthread_mutex_lock(&graph_lock);
	res = captures_forbid(true);
	pthread_mutex_unlock(&graph_lock);
	return res;
}

CUresult sim_capture_check_legacy(struct CUctx_st *ctx)
{
	CUresult res = CUDA_SUCCESS;

	if (!atomic_load(&capture_count))
		return CUDA_SUCCESS;
	pthread_mutex_lock(&graph_lock);
	for (struct sim_capture *c = captures; c; c = c->next) {
		for (size_t i = 0; i < c->nstreams; i++) {
			struct CUstream_st *t = c->streams[i];

			if (t->ctx == ctx && !(t->flags & CU_STREAM_NON_BLOCKING)) {
				capture_invalidate(c);
				res = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
			}
		}
	}
	pthread_mutex_unlock(&graph_lock);
	return res;
}

void sim_capture_stream_gone(struct CUstream_st *s)
{
	struct sim_capture *cap;

	if (!atomic_load(&s->capturing))
		return;
	pthread_mutex_lock(&graph_lock);
	if (s->capture) {
		cap = s->capture->cap;
		capture_invalidate(cap);
		if (cap->origin == s) {
			struct CUgraph_st *g = cap->graph;
			bool own = cap->own_graph;

			capture_end(cap);
			if (own)
				graph_free(g);
		} else {
			stream_leave(s);
		}
	}
	pthread_mutex_unlock(&graph_lock);
}

void sim_capture_event_free(struct CUevent_st *e)
{
	/* The last reference is gone: nobody else can see the event. */
	if (e->capture) {
		vec_free(&e->capture->nodes);
		free(e->capture);
		e->capture = NULL;
	}
}

static CUresult begin_capture(bool pt, CUstream h, CUgraph g, const CUgraphNode *deps, size_t ndeps,
			      CUstreamCaptureMode mode)
{
	struct sim_capture *cap;
	struct CUstream_st *s;
	CUresult res = sim_stream_resolve(h, pt, &s);

	if (res != CUDA_SUCCESS)
		return res;
	if (mode != CU_STREAM_CAPTURE_MODE_GLOBAL && mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
	    mode != CU_STREAM_CAPTURE_MODE_RELAXED)
		return CUDA_ERROR_INVALID_VALUE;
	if (s->is_legacy)
		return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
	pthread_mutex_lock(&graph_lock);
	if (s->capture) {
		res = CUDA_ERROR_ILLEGAL_STATE;
		goto out;
	}
	if (g && (!graph_valid(g) || g->owner)) {
		res = CUDA_ERROR_INVALID_VALUE;
		goto out;
	}
	if (g && (res = deps_check(g, deps, ndeps)) != CUDA_SUCCESS)
		goto out;
	cap = calloc(1, sizeof(*cap));
	if (!cap) {
		res = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	cap->graph = g ? g : graph_new();
	if (!cap->graph) {
		free(cap);
		res = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	cap->own_graph = !g;
	cap->id = sim_next_id();
	cap->origin = s;
	cap->mode = mode;
	cap->thread = pthread_self();
	cap->next = captures;
	captures = cap;
	cap->graph->captures++;
	atomic_fetch_add(&capture_count, 1);
	res = stream_join(cap, s, g ? deps : NULL, g ? ndeps : 0);
	if (res != CUDA_SUCCESS) {
		capture_end(cap);
		if (!g)
			graph_free(cap->graph);
	}
out:
	pthread_mutex_unlock(&graph_lock);
	return res;
}

static CUresult begin_capture_v1(bool pt, CUstream h)
{
	return begin_capture(pt, h, NULL, NULL, 0, CU_STREAM_CAPTURE_MODE_GLOBAL);
}
GRAPH_STREAM_API_PAIR(cuStreamBeginCapture, cuStreamBeginCapture_ptsz, begin_capture_v1, (CUstream h), h)

static CUresult begin_capture_v2(bool pt, CUstream h, CUstreamCaptureMode mode)
{
	return begin_capture(pt, h, NULL, NULL, 0, mode);
}
GRAPH_STREAM_API_PAIR(cuStreamBeginCapture_v2, cuStreamBeginCapture_v2_ptsz, begin_capture_v2,
		      (CUstream h, CUstreamCaptureMode mode), h, mode)

static CUresult begin_capture_to_graph(bool pt, CUstream h, CUgraph g, const CUgraphNode *deps,
				       const CUgraphEdgeData *edges, size_t ndeps, CUstreamCaptureMode mode)
{
	(void)edges;
	if (!g)
		return CUDA_ERROR_INVALID_VALUE;
	return begin_capture(pt, h, g, deps, ndeps, mode);
}
GRAPH_STREAM_API_PAIR(cuStreamBeginCaptureToGraph, cuStreamBeginCaptureToGraph_ptsz, begin_capture_to_graph,
		      (CUstream h, CUgraph g, const CUgraphNode *deps, const CUgraphEdgeData *edges,
		       size_t ndeps, CUstreamCaptureMode mode),
		      h, g, deps, edges, ndeps, mode)

/* Every stream that joined cap has rejoined its origin: its last nodes are the origin's or come
 * before them. */
static bool capture_joined(struct sim_capture *cap)
{
	struct node_vec stack = {0};
	unsigned long long mark = ++mark_gen;
	bool joined = true;

	for (size_t i = 0; i < cap->origin->capture->deps.n; i++)
		if (!vec_push(&stack, cap->origin->capture->deps.v[i]))
			goto oom;
	while (stack.n) {
		struct CUgraphNode_st *n = stack.v[--stack.n];

		if (n->mark == mark)
			continue;
		n->mark = mark;
		for (size_t i = 0; i < n->deps.n; i++)
			if (n->deps.v[i]->mark != mark && !vec_push(&stack, n->deps.v[i]))
				goto oom;
	}
	for (size_t i = 0; i < cap->nstreams && joined; i++) {
		struct sim_stream_capture *sc = cap->streams[i]->capture;

		if (cap->streams[i] == cap->origin)
			continue;
		for (size_t j = 0; j < sc->deps.n && joined; j++)
			joined = sc->deps.v[j]->mark == mark;
	}
	vec_free(&stack);
	return joined;
oom:
	vec_free(&stack);
	return true; /* cannot tell: let it end */
}

static CUresult end_capture(bool pt, CUstream h, CUgraph *ph)
{
	struct sim_capture *cap;
	struct CUstream_st *s;
	struct CUgraph_st *g;
	CUresult res;
	bool own;

	if (!ph)
		return CUDA_ERROR_INVALID_VALUE;
	res = stream_lock(h, pt, &s);
	if (res != CUDA_SUCCESS)
		return res;
	if (!s->capture) {
		pthread_mutex_unlock(&graph_lock);
		return CUDA_ERROR_ILLEGAL_STATE;
	}
	cap = s->capture->cap;
	if (cap->origin != s) {
		capture_invalidate(cap);
		pthread_mutex_unlock(&graph_lock);
		return CUDA_ERROR_STREAM_CAPTURE_UNMATCHED;
	}
	if (cap->mode != CU_STREAM_CAPTURE_MODE_RELAXED && !pthread_equal(cap->thread, pthread_self())) {
		pthread_mutex_unlock(&graph_lock);
		return CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD;
	}
	if (cap->invalidated)
		res = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
	else if (!capture_joined(cap))
		res = CUDA_ERROR_STREAM_CAPTURE_UNJOINED;
	g = cap->graph;
	own = cap->own_graph;
	capture_end(cap);
	if (res == CUDA_SUCCESS) {
		*ph = g;
	} else {
		*ph = NULL;
		if (own)
			graph_free(g);
	}
	pthread_mutex_unlock(&graph_lock);
	return res;
}
GRAPH_STREAM_API_PAIR(cuStreamEndCapture, cuStreamEndCapture_ptsz, end_capture, (CUstream h, CUgraph *ph), h,
		      ph)

static CUresult capture_info(bool pt, CUstream h, CUstreamCaptureStatus *status, cuuint64_t *id,
			     CUgraph *graph, const CUgraphNode **deps, const CUgraphEdgeData **edges,
			     size_t *ndeps)
{
	struct sim_stream_capture *sc;
	struct CUstream_st *s;
	CUresult res = sim_stream_resolve(h, pt, &s);

	if (res == CUDA_SUCCESS && !status)
		res = CUDA_ERROR_INVALID_VALUE;
	if (res != CUDA_SUCCESS)
		return res;
	pthread_mutex_lock(&graph_lock);
	sc = s->capture;
	if (!sc || sc->cap->invalidated) {
		*status = sc ? CU_STREAM_CAPTURE_STATUS_INVALIDATED : CU_STREAM_CAPTURE_STATUS_NONE;
		if (sc && id)
			*id = sc->cap->id;
		if (graph)
			*graph = NULL;
		if (deps)
			*deps = NULL;
		if (edges)
			*edges = NULL;
		if (ndeps)
			*ndeps = 0;
		pthread_mutex_unlock(&graph_lock);
		return CUDA_SUCCESS;
	}
	*status = CU_STREAM_CAPTURE_STATUS_ACTIVE;
	if (id)
		*id = sc->cap->id;
	if (graph)
		*graph = sc->cap->graph;
	if (deps || edges) {
		size_t n = sc->deps.n;

		if (n > sc->info_cap) {
			struct CUgraphNode_st **info = realloc(sc->info, n * sizeof(*info));
			CUgraphEdgeData *info_edges;

			if (info)
				sc->info = info;
			info_edges = info ? realloc(sc->info_edges, n * sizeof(*info_edges)) : NULL;
			if (!info_edges) {
				pthread_mutex_unlock(&graph_lock);
				return CUDA_ERROR_OUT_OF_MEMORY;
			}
			sc->info_edges = info_edges;
			sc->info_cap = n;
		}
		if (n) {
			memcpy(sc->info, sc->deps.v, n * sizeof(*sc->info));
			memset(sc->info_edges, 0, n * sizeof(*sc->info_edges));
		}
		if (deps)
			*deps = n ? (const CUgraphNode *)sc->info : NULL;
		if (edges)
			*edges = n ? sc->info_edges : NULL;
	}
	if (ndeps)
		*ndeps = sc->deps.n;
	pthread_mutex_unlock(&graph_lock);
	return CUDA_SUCCESS;
}

/* The status alone: none, active or invalidated, as capture_info says it. */
static CUresult stream_is_capturing(bool pt, CUstream h, CUstreamCaptureStatus *status)
{
	return capture_info(pt, h, status, NULL, NULL, NULL, NULL, NULL);
}
GRAPH_STREAM_API_PAIR(cuStreamIsCapturing, cuStreamIsCapturing_ptsz, stream_is_capturing,
		      (CUstream h, CUstreamCaptureStatus *status), h, status)

static CUresult capture_info_v1(bool pt, CUstream h, CUstreamCaptureStatus *status, cuuint64_t *id)
{
	return capture_info(pt, h, status, id, NULL, NULL, NULL, NULL);
}
GRAPH_STREAM_API_PAIR(cuStreamGetCaptureInfo, cuStreamGetCaptureInfo_ptsz, capture_info_v1,
		      (CUstream h, CUstreamCaptureStatus *status, cuuint64_t *id), h, status, id)

static CUresult capture_info_v2(bool pt, CUstream h, CUstreamCaptureStatus *status, cuuint64_t *id,
				CUgraph *graph, const CUgraphNode **deps, size_t *ndeps)
{
	return capture_info(pt, h, status, id, graph, deps, NULL, ndeps);
}
GRAPH_STREAM_API_PAIR(cuStreamGetCaptureInfo_v2, cuStreamGetCaptureInfo_v2_ptsz, capture_info_v2,
		      (CUstream h, CUstreamCaptureStatus *status, cuuint64_t *id, CUgraph *graph,
		       const CUgraphNode **deps, size_t *ndeps),
		      h, status, id, graph, deps, ndeps)
GRAPH_STREAM_API_PAIR(cuStreamGetCaptureInfo_v3, cuStreamGetCaptureInfo_v3_ptsz, capture_info,
		      (CUstream h, CUstreamCaptureStatus *status, cuuint64_t *id, CUgraph *graph,
		       const CUgraphNode **deps, const CUgraphEdgeData **edges, size_t *ndeps),
		      h, status, id, graph, deps, edges, ndeps)

static CUresult update_capture_deps(bool pt, CUstream h, CUgraphNode *deps, const CUgraphEdgeData *edges,
				    size_t ndeps, unsigned flags)
{
	struct sim_stream_capture *sc;
	struct node_vec next = {0};
	struct CUstream_st *s;
	CUresult res = sim_stream_resolve(h, pt, &s);

	(void)edges;
	if (res != CUDA_SUCCESS)
		return res;
	if ((flags != CU_STREAM_ADD_CAPTURE_DEPENDENCIES && flags != CU_STREAM_SET_CAPTURE_DEPENDENCIES) ||
	    (ndeps && !deps))
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&graph_lock);
	sc = s->capture;
	if (!sc) {
		res = CUDA_ERROR_ILLEGAL_STATE;
		goto out;
	}
	if (sc->cap->invalidated) {
		res = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
		goto out;
	}
	for (size_t i = 0; i < ndeps; i++) {
		if (!node_valid(deps[i]) || deps[i]->graph != sc->cap->graph) {
			res = CUDA_ERROR_INVALID_VALUE;
			goto out;
		}
	}
	if (flags == CU_STREAM_ADD_CAPTURE_DEPENDENCIES && !vec_assign(&next, sc->deps.v, sc->deps.n)) {
		res = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	for (size_t i = 0; i < ndeps; i++) {
		if (!vec_has(&next, deps[i]) && !vec_push(&next, deps[i])) {
			res = CUDA_ERROR_OUT_OF_MEMORY;
			goto out;
		}
	}
	vec_free(&sc->deps);
	sc->deps = next;
	next = (struct node_vec){0};
out:
	pthread_mutex_unlock(&graph_lock);
	vec_free(&next);
	return res;
}

static CUresult update_capture_deps_v1(bool pt, CUstream h, CUgraphNode *deps, size_t ndeps, unsigned flags)
{
	return update_capture_deps(pt, h, deps, NULL, ndeps, flags);
}
GRAPH_STREAM_API_PAIR(cuStreamUpdateCaptureDependencies, cuStreamUpdateCaptureDependencies_ptsz,
		      update_capture_deps_v1,
		      (CUstream h, CUgraphNode *deps, size_t ndeps, unsigned int flags), h, deps, ndeps,
		      flags)
GRAPH_STREAM_API_PAIR(cuStreamUpdateCaptureDependencies_v2, cuStreamUpdateCaptureDependencies_v2_ptsz,
		      update_capture_deps,
		      (CUstream h, CUgraphNode *deps, const CUgraphEdgeData *edges, size_t ndeps,
		       unsigned int flags),
		      h, deps, edges, ndeps, flags)

CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode)
{
	CUstreamCaptureMode previous = thread_capture_mode;

	SIM_ENTER(cuThreadExchangeStreamCaptureMode);
	if (!mode ||
	    (*mode != CU_STREAM_CAPTURE_MODE_GLOBAL && *mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
	     *mode != CU_STREAM_CAPTURE_MODE_RELAXED))
		return CUDA_ERROR_INVALID_VALUE;
	thread_capture_mode = *mode;
	*mode = previous;
	return CUDA_SUCCESS;
}
