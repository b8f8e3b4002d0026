/* state_app: a state-carrying CUDA program for checkpoint/restore. It fills --mb MiB of device
 * memory (in --chunks allocations), runs --steps steps that rewrite every word, and prints the
 * final checksum. State lives on the device (the words), in the driver (modules, streams) and on the
 * host (the step counter), so a restore must bring back all three for the checksum to match an
 * uninterrupted run. --verify recomputes everything on the CPU (small sizes) and compares.
 * Halfway (after step --ready-at, default steps/2) it writes "ready <step>" to --ready-file and
 * sleeps --pause-ms or waits until --go-file exists, so a test can checkpoint it with work done before
 * and after; --step-ms MS sleeps that long after every step (a program that runs for a while); with
 * --first-kernel-file it writes there the wall-clock time (seconds since the epoch) at
 * which the first step's kernels after the go finished (a restore's time to first kernel). --devices N
 * spreads the chunks over N devices (chunk c on device c % N), each with its own context (device 0's primary
 * one, a cuCtxCreate one elsewhere), module, stream and memory; the checksum does not depend on N. --graph
 * runs each step as one launch of a CUDA graph captured once (the step number then lives on the device;
 * devices 1 only): the same checksum, and a checkpoint must carry the graph. --ready-in-capture signals ready
 * (and waits for --go-file) while that capture is open, where a checkpoint must be refused and the program
 * run on. --graph-pageable is --graph with the step number kept in the program's pageable memory and copied
 * into the graph at each launch by a captured cuMemcpyHtoDAsync (a staged copy under the layer; the same
 * checksum). --managed allocates the chunks with cuMemAllocManaged, prefetches them to the GPU before every
 * other step, and after each step the CPU waits for it and rewrites one word of each chunk in place (a
 * different checksum: the CPU's writes are part of the state). --registered makes chunk 0 the program's own
 * heap memory, registered (cuMemHostRegister, DEVICEMAP): kernels work on it through its device pointer (the
 * same checksum). --pool takes the chunks from a memory pool of its own (cuMemAllocFromPoolAsync) on a stream
 * with a synchronisation-policy attribute, and checks at the end that the pool's books and the attribute are
 * still what they were (a restore must keep both).
 * --pinned-ready: at the ready step it allocates page-locked memory, copies chunk 0's first words into
 * it and frees it (the same checksum); the ready signal is then the layer's, from inside the allocation
 * (CRCUDA_TEST_PIN_PAUSE), so that a test checkpoints between its registration and its listing.
 * --graph-params: each step is one launch of a graph made once of one state_step node a chunk, whose
 * step parameter is set in the executable graph first (cuGraphExecKernelNodeSetParams); right after
 * the middle step (the default ready step) the executable graph is updated (cuGraphExecUpdate) from a
 * second graph of the same shape, destroyed right after; the last chunk's node is disabled
 * (cuGraphNodeSetEnabled) from a quarter to three quarters of the steps (a different checksum); the later
 * steps still name the first graph's nodes, as the driver wants. A restore must rebuild the executable graph
 * as it was changed (the node disabled too), and take the application's node handles for its nodes.
 * --graph-mem is --graph with the step number passed through graph memory: the capture takes a scratch word
 * from cuMemAllocAsync, copies the step into it, counts there, copies it back, the chunks' steps read it, and
 * cuMemFreeAsync ends it (the same checksum); a word zeroed first is set last by a stream memory operation (a
 * batch mem-op node); at the end the device's graph memory must still be reserved and the word set. A restore
 * must bring the graph's memory back at the address its nodes name. --graph-cond: each launch of a graph runs
 * COND_PER steps in a WHILE conditional node, whose body counts the step on the device, steps every chunk and
 * sets the condition while the step is not a multiple of COND_PER (the same checksum; --steps a
 * multiple of it); an empty graph's executable graph is launched before each; the graph owns a user
 * object, whose destroy callback must run once, when the graph and its executable graph are gone. A restore
 * must rebuild the graph and its executable graph with the node, its body and its handle (the body's last
 * kernel names it by value), and the empty one.
 * --texture: each step also reads a CUDA array through a texture object (every word mixed with an
 * element) and rewrites the array through a surface object, and the array joins the checksum (a
 * different one); a texture object made and destroyed first leaves a hole below the live objects'
 * values. A restore must bring back the array's contents and both objects at their values.
 * --sparse: a sparse CUDA array of 2x2 tiles, three mapped to tile-pool memory (cuMemMapArrayAsync)
 * and then one of them unmapped; each step writes a row into every tile (the unmapped tiles drop it),
 * and the whole array joins the checksum (a different one). A restore must map the tiles again, in
 * order, before the array's contents come back.
 * --green: the steps run on a stream of a green context (a split of device 0's SMs, at least 16), whose
 * CUcontext is current from then on (the checksum's memory is allocated in it); the end checks that the
 * stream is still the green context's and the green context's SMs are the group's (the same checksum).
 * --settings: settings kept by the driver that a restore must replay: SYNC_MEMOPS set on chunk 0
 * (cuPointerSetAttribute), also on memory freed before the steps (whose setting must not be replayed:
 * the allocation made after it, likely at its address, keeps the default), the context's coredump file
 * and the process's coredump generation flags; checked at the end (the same checksum).
 * --named-sem: a POSIX named semaphore kept under its name (as Python's multiprocessing keeps those its
 * spawned workers open by name), posted once a step and checked at the end (value = steps): its mapping
 * is glibc's temporary file, unlinked while the name still links it, which CRIU dumps only with a link
 * remap (the same checksum).
 * --deleted-shm: 8 MiB of /dev/shm, unlinked at once and kept mapped shared (as Python's multiprocessing
 * heap and PyTorch's CPU tensors passed between processes are), one word written a step and all checked
 * at the end: CRIU dumps such a file's contents as a ghost file, by default only up to 1 MiB (the same
 * checksum).
 * --child: a child process that uses no CUDA, forked once CUDA is set up (it inherits the layer's
 * connection), as a DataLoader's workers are (fork is its default on Linux); before the checksum it is
 * told to exit through exit(), destructors and all, which must leave this process's session alone.
 * CRIU dumps and restores it with its own pid (the same checksum).
 * --notify: a log callback and an async notification callback registered before the steps, which a
 * restore must register again: at the end an error the driver logs (an unsupported limit asked of
 * cuCtxGetLimit) must reach the callback when a dump shows a line for it, and where the environment
 * names the simulated device's memory budget (CRCUDA_SIM_MEM_BUDGET_MB) an allocation above it must
 * bring an over-budget notification within 2 s (the same checksum). */
#include <cuda.h>
#include <fcntl.h>
#include <semaphore.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cuda_test.h"

extern const unsigned char state_app_fatbin[];

#define COND_PER 4

/* --graph-cond: a user object the graph owns; its destroy callback counts here. */
static atomic_int uobj_gone;

static void uobj_destroy(void *arg)
{
	atomic_fetch_add((atomic_int *)arg, 1);
}

struct opts {
	unsigned long mb;
	unsigned chunks, steps, ready_at, pause_ms, step_ms, seed, devices;
	const char *ready_file, *go_file, *first_kernel_file;
	int verify, graph, graph_pageable, ready_in_capture, managed, registered, pool, pinned_ready, texture,
	    sparse;
	int graph_params, graph_mem, graph_cond, settings, notify, green, named_sem, deleted_shm, child;
};

/* --notify */
static atomic_int notify_lines, notify_notes;

static void CUDA_CB notify_log(void *data, CUlogLevel level, char *message, size_t length)
{
	(void)level;
	(void)message;
	(void)length;
	if (data == &notify_lines)
		atomic_fetch_add(&notify_lines, 1);
}

static void notify_async(CUasyncNotificationInfo *info, void *data, CUasyncCallbackHandle h)
{
	(void)h;
	if (data == &notify_notes && info->type == CU_ASYNC_NOTIFICATION_TYPE_OVER_BUDGET)
		atomic_fetch_add(&notify_notes, 1);
}

static void notify_set(CUdevice dev)
{
	CUlogsCallbackHandle lh;
	CUasyncCallbackHandle ah;
	CUresult res;

	CU_CHECK(cuLogsRegisterCallback(notify_log, &notify_lines, &lh));
	res = cuDeviceRegisterAsyncNotification(dev, notify_async, &notify_notes, &ah);
	if (res != CUDA_ERROR_NOT_SUPPORTED)
		CU_CHECK(res);
}

static int notify_check(CUcontext ctx)
{
	const char *budget = getenv("CRCUDA_SIM_MEM_BUDGET_MB");
	struct timespec ts = {0, 10 * 1000 * 1000};
	static char buf[32768];
	CUlogIterator it;
	size_t size = sizeof(buf), v;
	CUdeviceptr p;

	CU_CHECK(cuCtxSetCurrent(ctx));
	CU_CHECK(cuLogsCurrent(&it, 0));
	CU_EXPECT(cuCtxGetLimit(&v, (CUlimit)0x7fff), CUDA_ERROR_INVALID_VALUE);
	CU_CHECK(cuLogsDumpToMemory(&it, buf, &size, 0));
	if (size && !atomic_load(&notify_lines)) {
		fprintf(stderr, "state_app: the driver logged \"%s\" and the log callback got nothing\n",
			buf);
		return 1;
	}
	if (!budget || !*budget)
		return 0;
	CU_CHECK(cuMemAlloc(&p, (strtoull(budget, NULL, 10) + 64) << 20));
	for (int i = 0; i < 200 && !atomic_load(&notify_notes); i++)
		nanosleep(&ts, NULL);
	CU_CHECK(cuMemFree(p));
	if (!atomic_load(&notify_notes)) {
		fprintf(stderr, "state_app: over the memory budget of %s MiB and no notification\n", budget);
		return 1;
	}
	return 0;
}

#define SETTINGS_CORE_FILE "/tmp/crcuda-state-app-core"
#define SETTINGS_GEN_FLAGS (CU_COREDUMP_SKIP_SHARED_MEMORY | CU_COREDUMP_SKIP_LOCAL_MEMORY)

static unsigned sync_memops(CUdeviceptr p)
{
	unsigned v = 7;

	CU_CHECK(cuPointerGetAttribute(&v, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, p));
	return v;
}

/* --settings: returns an allocation made after a freed one whose SYNC_MEMOPS was set (unset, device
 * memory answers 0: measured, H200, driver 580). */
static CUdeviceptr settings_set(CUcontext ctx, CUdeviceptr chunk0)
{
	unsigned one = 1;
	int flags = SETTINGS_GEN_FLAGS;
	char file[] = SETTINGS_CORE_FILE;
	size_t size;
	CUdeviceptr gone, extra;

	CU_CHECK(cuCtxSetCurrent(ctx));
	CU_CHECK(cuPointerSetAttribute(&one, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, chunk0));
	CU_CHECK(cuMemAlloc(&gone, 4096));
	CU_CHECK(cuPointerSetAttribute(&one, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, gone));
	CU_CHECK(cuMemFree(gone));
	CU_CHECK(cuMemAlloc(&extra, 4096));
	size = sizeof(file);
	CU_CHECK(cuCoredumpSetAttribute(CU_COREDUMP_FILE, file, &size));
	size = sizeof(flags);
	CU_CHECK(cuCoredumpSetAttributeGlobal(CU_COREDUMP_GENERATION_FLAGS, &flags, &size));
	return extra;
}

static int settings_check(CUcontext ctx, CUdeviceptr chunk0, CUdeviceptr extra)
{
	char file[1024] = "";
	int flags = 0;
	size_t size = sizeof(file);
	unsigned s0, sx;

	CU_CHECK(cuCtxSetCurrent(ctx));
	CU_CHECK(cuCoredumpGetAttribute(CU_COREDUMP_FILE, file, &size));
	size = sizeof(flags);
	CU_CHECK(cuCoredumpGetAttributeGlobal(CU_COREDUMP_GENERATION_FLAGS, &flags, &size));
	s0 = sync_memops(chunk0);
	sx = sync_memops(extra);
	if (strcmp(file, SETTINGS_CORE_FILE) || flags != SETTINGS_GEN_FLAGS || s0 != 1 || sx != 0) {
		fprintf(stderr,
			"state_app: settings lost: coredump file %s, generation flags %#x, SYNC_MEMOPS %u "
			"(chunk 0) and %u (the allocation after the freed one)\n",
			file, flags, s0, sx);
		return 1;
	}
	return 0;
}

/* --child: the child's normal end, destructors and all. */
static void child_exit(int sig)
{
	(void)sig;
	exit(0);
}

static void parse(int argc, char **argv, struct opts *o)
{
	*o = (struct opts){
	    .mb = 64, .chunks = 4, .steps = 20, .ready_at = ~0u, .pause_ms = 0, .seed = 7, .devices = 1};
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--verify")) {
			o->verify = 1;
			continue;
		}
		if (!strcmp(a, "--graph-params")) {
			o->graph_params = 1;
			continue;
		}
		if (!strcmp(a, "--sparse")) {
			o->sparse = 1;
			continue;
		}
		if (!strcmp(a, "--texture")) {
			o->texture = 1;
			continue;
		}
		if (!strcmp(a, "--graph")) {
			o->graph = 1;
			continue;
		}
		if (!strcmp(a, "--graph-pageable")) {
			o->graph = o->graph_pageable = 1;
			continue;
		}
		if (!strcmp(a, "--graph-mem")) {
			o->graph = o->graph_mem = 1;
			continue;
		}
		if (!strcmp(a, "--graph-cond")) {
			o->graph_cond = 1;
			continue;
		}
		if (!strcmp(a, "--pinned-ready")) {
			o->pinned_ready = 1;
			continue;
		}
		if (!strcmp(a, "--pool")) {
			o->pool = 1;
			continue;
		}
		if (!strcmp(a, "--green")) {
			o->green = 1;
			continue;
		}
		if (!strcmp(a, "--settings")) {
			o->settings = 1;
			continue;
		}
		if (!strcmp(a, "--child")) {
			o->child = 1;
			continue;
		}
		if (!strcmp(a, "--deleted-shm")) {
			o->deleted_shm = 1;
			continue;
		}
		if (!strcmp(a, "--named-sem")) {
			o->named_sem = 1;
			continue;
		}
		if (!strcmp(a, "--notify")) {
			o->notify = 1;
			continue;
		}
		if (!strcmp(a, "--registered")) {
			o->registered = 1;
			continue;
		}
		if (!strcmp(a, "--managed")) {
			o->managed = 1;
			continue;
		}
		if (!strcmp(a, "--ready-in-capture")) {
			o->ready_in_capture = 1;
			continue;
		}
		if (!v)
			goto usage;
		i++;
		if (!strcmp(a, "--mb"))
			o->mb = strtoul(v, NULL, 0);
		else if (!strcmp(a, "--chunks"))
			o->chunks = (unsigned)strtoul(v, NULL, 0);
		else if (!strcmp(a, "--steps"))
			o->steps = (unsigned)strtoul(v, NULL, 0);
		else if (!strcmp(a, "--ready-at"))
			o->ready_at = (unsigned)strtoul(v, NULL, 0);
		else if (!strcmp(a, "--pause-ms"))
			o->pause_ms = (unsigned)strtoul(v, NULL, 0);
		else if (!strcmp(a, "--step-ms"))
			o->step_ms = (unsigned)strtoul(v, NULL, 0);
		else if (!strcmp(a, "--devices"))
			o->devices = (unsigned)strtoul(v, NULL, 0);
		else if (!strcmp(a, "--seed"))
			o->seed = (unsigned)strtoul(v, NULL, 0);
		else if (!strcmp(a, "--ready-file"))
			o->ready_file = v;
		else if (!strcmp(a, "--go-file"))
			o->go_file = v;
		else if (!strcmp(a, "--first-kernel-file"))
			o->first_kernel_file = v;
		else
			goto usage;
	}
	if (o->ready_at == ~0u)
		o->ready_at = o->steps / 2;
	if (o->chunks && o->mb && (o->mb << 20) % ((size_t)o->chunks * 4) == 0 && o->devices >= 1 &&
	    o->devices <= 8 && (!o->graph || o->devices == 1) && (o->graph || !o->ready_in_capture) &&
	    !(o->managed && (o->graph || o->verify)) && !(o->pool && o->devices != 1) &&
	    !(o->settings && (o->pool || o->managed || o->registered)) && !(o->green && o->devices != 1) &&
	    !(o->texture && (o->graph || o->verify || o->devices != 1)) &&
	    !(o->sparse && (o->graph || o->graph_cond || o->verify || o->devices != 1)) &&
	    !(o->graph_params && (o->graph || o->texture || o->managed || o->devices != 1)) &&
	    !(o->graph_mem && o->graph_pageable) && !(o->named_sem && o->graph_cond) &&
	    !(o->graph_cond && (o->graph || o->graph_params || o->texture || o->managed || o->devices != 1 ||
				o->steps % COND_PER)))
		return;
usage:
	fprintf(stderr,
		"usage: state_app [--mb N] [--chunks N] [--steps N] [--ready-at STEP] [--pause-ms MS] "
		"[--step-ms MS]\n"
		"                 [--ready-file PATH] [--go-file PATH] [--first-kernel-file PATH] [--seed N] "
		"[--devices N] [--verify]\n"
		"                 [--graph] [--graph-pageable] [--managed] [--registered] [--pool] "
		"[--texture] [--graph-params] [--sparse]\n"
		"                 [--pinned-ready] [--graph-mem] [--graph-cond] [--settings]\n"
		"                 [--notify] [--green] [--named-sem] [--deleted-shm] [--child]\n");
	exit(2);
}

static void signal_ready(const struct opts *o, unsigned step)
{
	if (!o->ready_file)
		return;
	char tmp[4096];
	snprintf(tmp, sizeof(tmp), "%s.tmp", o->ready_file);
	FILE *f = fopen(tmp, "w");
	if (!f || fprintf(f, "ready %u\n", step) < 0 || fclose(f) || rename(tmp, o->ready_file)) {
		perror("state_app: writing the ready file");
		exit(1);
	}
}

/* --graph-pageable: the step number, in pageable memory, copied in by the graph at each launch. */
static unsigned host_step;
/* --graph-mem: a word each launch zeroes first and a stream memory operation sets last. */
static CUdeviceptr graph_mark;
#define GRAPH_MARK 0x5eedu

/* --graph: one step captured from the stream (a counter kernel, then each chunk's step), instantiated. */
static CUgraphExec capture_step(const struct opts *o, CUmodule *mod, CUstream stream, CUdeviceptr *bufs,
				unsigned chunks, unsigned long long words, unsigned grid, unsigned block)
{
	CUfunction f_count, f_step;
	CUdeviceptr dstep;
	CUgraph graph;
	CUgraphExec exec;
	CUstreamCaptureStatus status;

	CU_CHECK(cuModuleGetFunction(&f_count, *mod, "state_count"));
	CU_CHECK(cuModuleGetFunction(&f_step, *mod, "state_step_dev"));
	CU_CHECK(cuMemAlloc(&dstep, sizeof(unsigned)));
	CU_CHECK(cuMemsetD32Async(dstep, 0, 1, stream));
	CU_CHECK(cuStreamSynchronize(stream));
	CU_CHECK(cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL));
	void *pc[] = {&dstep};
	CUdeviceptr counted = dstep;
	if (o->graph_mem) {
		CU_CHECK(cuMemAlloc(&graph_mark, sizeof(unsigned)));
		CU_CHECK(cuMemsetD32Async(graph_mark, 0, 1, stream));
		CU_CHECK(cuMemAllocAsync(&counted, sizeof(unsigned), stream));
		CU_CHECK(cuMemcpyDtoDAsync(counted, dstep, sizeof(unsigned), stream));
		pc[0] = &counted;
		CU_CHECK(cuLaunchKernel(f_count, 1, 1, 1, 1, 1, 1, 0, stream, pc, NULL));
		CU_CHECK(cuMemcpyDtoDAsync(dstep, counted, sizeof(unsigned), stream));
	} else if (o->graph_pageable)
		CU_CHECK(cuMemcpyHtoDAsync(dstep, &host_step, sizeof(host_step), stream));
	else
		CU_CHECK(cuLaunchKernel(f_count, 1, 1, 1, 1, 1, 1, 0, stream, pc, NULL));
	/* --ready-in-capture: a test checkpoints it now, with the capture open. */
	if (o->ready_in_capture) {
		signal_ready(o, 0);
		while (o->go_file && access(o->go_file, F_OK))
			usleep(10000);
	}
	for (unsigned c = 0; c < chunks; c++) {
		void *p[] = {&bufs[c], &words, &counted};
		CU_CHECK(cuLaunchKernel(f_step, grid, 1, 1, block, 1, 1, 0, stream, p, NULL));
	}
	if (o->graph_mem) {
		CU_CHECK(cuMemFreeAsync(counted, stream));
		CU_CHECK(cuStreamWriteValue32(stream, graph_mark, GRAPH_MARK, CU_STREAM_WRITE_VALUE_DEFAULT));
	}
	CU_CHECK(cuStreamIsCapturing(stream, &status));
	CHECK(status == CU_STREAM_CAPTURE_STATUS_ACTIVE);
	CU_CHECK(cuStreamEndCapture(stream, &graph));
	CU_CHECK(cuGraphInstantiateWithFlags(&exec, graph, 0));
	CU_CHECK(cuGraphDestroy(graph)); /* the executable graph lives on alone */
	return exec;
}

/* --graph-params: a graph of one state_step node a chunk (step 0), its nodes in nodes[]. */
#define PARAM_CHUNKS_MAX 64
static CUDA_KERNEL_NODE_PARAMS step_node(CUfunction f, unsigned grid, unsigned block, void **params)
{
	return (CUDA_KERNEL_NODE_PARAMS){.func = f,
					 .gridDimX = grid,
					 .gridDimY = 1,
					 .gridDimZ = 1,
					 .blockDimX = block,
					 .blockDimY = 1,
					 .blockDimZ = 1,
					 .kernelParams = params};
}

static CUgraph param_graph(CUfunction f, CUdeviceptr *bufs, unsigned chunks, unsigned long long *words,
			   unsigned grid, unsigned block, CUgraphNode *nodes)
{
	unsigned zero = 0;
	CUgraph g;

	CHECK(chunks <= PARAM_CHUNKS_MAX);
	CU_CHECK(cuGraphCreate(&g, 0));
	for (unsigned c = 0; c < chunks; c++) {
		void *p[] = {&bufs[c], words, &zero};
		CUDA_KERNEL_NODE_PARAMS kp = step_node(f, grid, block, p);

		CU_CHECK(cuGraphAddKernelNode(&nodes[c], g, c ? &nodes[c - 1] : NULL, c ? 1 : 0, &kp));
	}
	return g;
}

/* --graph-cond: a WHILE node whose body counts the step, steps every chunk, and loops until the step is a
 * multiple of COND_PER (the handle's default, 1, is set again at every launch). The graph is kept. */
static CUgraph cond_graph(CUmodule mod, CUcontext ctx, CUdeviceptr *bufs, unsigned chunks,
			  unsigned long long *words, unsigned grid, unsigned block, CUdeviceptr *dstep)
{
	CUfunction f_count, f_step, f_cond;
	CUgraphConditionalHandle h;
	CUgraphNodeParams cp = {.type = CU_GRAPH_NODE_TYPE_CONDITIONAL};
	CUgraphNode ncond, ncount, nsteps[PARAM_CHUNKS_MAX], nlast;
	unsigned per = COND_PER;
	CUgraph g, body;

	CHECK(chunks <= PARAM_CHUNKS_MAX);
	CU_CHECK(cuModuleGetFunction(&f_count, mod, "state_count"));
	CU_CHECK(cuModuleGetFunction(&f_step, mod, "state_step_dev"));
	CU_CHECK(cuModuleGetFunction(&f_cond, mod, "state_cond"));
	CU_CHECK(cuMemAlloc(dstep, sizeof(unsigned)));
	CU_CHECK(cuMemsetD32(*dstep, 0, 1));
	CU_CHECK(cuGraphCreate(&g, 0));
	CU_CHECK(cuGraphConditionalHandleCreate(&h, g, ctx, 1, CU_GRAPH_COND_ASSIGN_DEFAULT));
	cp.conditional.handle = h;
	cp.conditional.type = CU_GRAPH_COND_TYPE_WHILE;
	cp.conditional.size = 1;
	cp.conditional.ctx = ctx;
	CU_CHECK(cuGraphAddNode(&ncond, g, NULL, NULL, 0, &cp));
	body = cp.conditional.phGraph_out[0];
	void *pc[] = {dstep};
	CUDA_KERNEL_NODE_PARAMS kp = step_node(f_count, 1, 1, pc);
	CU_CHECK(cuGraphAddKernelNode(&ncount, body, NULL, 0, &kp));
	for (unsigned c = 0; c < chunks; c++) {
		void *p[] = {&bufs[c], words, dstep};

		kp = step_node(f_step, grid, block, p);
		CU_CHECK(cuGraphAddKernelNode(&nsteps[c], body, &ncount, 1, &kp));
	}
	void *pl[] = {dstep, &per, &h};
	kp = step_node(f_cond, 1, 1, pl);
	CU_CHECK(cuGraphAddKernelNode(&nlast, body, nsteps, chunks, &kp));
	return g;
}

/* Sets every node's step in the executable graph. */
static void param_graph_step(CUgraphExec exec, CUfunction f, CUdeviceptr *bufs, unsigned chunks,
			     unsigned long long *words, unsigned grid, unsigned block, CUgraphNode *nodes,
			     unsigned step)
{
	for (unsigned c = 0; c < chunks; c++) {
		void *p[] = {&bufs[c], words, &step};
		CUDA_KERNEL_NODE_PARAMS kp = step_node(f, grid, block, p);

		CU_CHECK(cuGraphExecKernelNodeSetParams(exec, nodes[c], &kp));
	}
}

/* --texture: a CUDA array, a texture and a surface object on it. */
#define TEX_W 64
#define TEX_H 16
struct texture {
	CUarray array;
	CUtexObject tex;
	CUsurfObject surf;
	CUfunction f_step, f_surf;
	int w, h;
};

static void texture_setup(struct texture *t, CUmodule mod, CUstream stream, unsigned seed)
{
	CUDA_ARRAY3D_DESCRIPTOR d = {.Width = TEX_W,
				     .Height = TEX_H,
				     .Format = CU_AD_FORMAT_UNSIGNED_INT32,
				     .NumChannels = 1,
				     .Flags = CUDA_ARRAY3D_SURFACE_LDST};
	CUDA_TEXTURE_DESC td = {.addressMode = {CU_TR_ADDRESS_MODE_CLAMP, CU_TR_ADDRESS_MODE_CLAMP},
				.filterMode = CU_TR_FILTER_MODE_POINT,
				.flags = CU_TRSF_READ_AS_INTEGER};
	CUDA_RESOURCE_DESC r = {.resType = CU_RESOURCE_TYPE_ARRAY};
	unsigned init[TEX_W * TEX_H];
	CUtexObject hole;

	t->w = TEX_W;
	t->h = TEX_H;
	for (unsigned i = 0; i < TEX_W * TEX_H; i++)
		init[i] = i * 2246822519u ^ seed;
	CU_CHECK(cuModuleGetFunction(&t->f_step, mod, "state_step_tex"));
	CU_CHECK(cuModuleGetFunction(&t->f_surf, mod, "surf_step"));
	CU_CHECK(cuArray3DCreate(&t->array, &d));
	CUDA_MEMCPY2D in = {.srcMemoryType = CU_MEMORYTYPE_HOST,
			    .srcHost = init,
			    .srcPitch = TEX_W * 4,
			    .dstMemoryType = CU_MEMORYTYPE_ARRAY,
			    .dstArray = t->array,
			    .WidthInBytes = TEX_W * 4,
			    .Height = TEX_H};
	/* On the steps' stream: a synchronous copy from pageable memory may return before its bytes land
	 * (CUDA's API synchronization behavior), and the stream does not wait for the legacy one. */
	CU_CHECK(cuMemcpy2DAsync(&in, stream));
	r.res.array.hArray = t->array;
	CU_CHECK(cuTexObjectCreate(&hole, &r, &td, NULL));
	CU_CHECK(cuTexObjectCreate(&t->tex, &r, &td, NULL));
	CU_CHECK(cuTexObjectDestroy(hole));
	CU_CHECK(cuSurfObjectCreate(&t->surf, &r));
}

static void texture_step(struct texture *t, CUstream stream, unsigned step)
{
	void *p[] = {&t->surf, &t->w, &t->h, &step};

	CU_CHECK(cuLaunchKernel(t->f_surf, 1, TEX_H, 1, TEX_W, 1, 1, 0, stream, p, NULL));
}

/* The array's words (checked to be what the objects name), as the checksum kernel sums a chunk. */
static unsigned long long texture_sum(struct texture *t)
{
	unsigned words[TEX_W * TEX_H];
	unsigned long long s = 0;
	CUDA_RESOURCE_DESC r;

	CU_CHECK(cuCtxSynchronize());
	CUDA_MEMCPY2D out = {.srcMemoryType = CU_MEMORYTYPE_ARRAY,
			     .srcArray = t->array,
			     .dstMemoryType = CU_MEMORYTYPE_HOST,
			     .dstHost = words,
			     .dstPitch = TEX_W * 4,
			     .WidthInBytes = TEX_W * 4,
			     .Height = TEX_H};
	CU_CHECK(cuMemcpy2D(&out));
	CU_CHECK(cuTexObjectGetResourceDesc(&r, t->tex));
	CHECK(r.resType == CU_RESOURCE_TYPE_ARRAY && r.res.array.hArray == t->array);
	CU_CHECK(cuSurfObjectGetResourceDesc(&r, t->surf));
	CHECK(r.res.array.hArray == t->array);
	for (unsigned i = 0; i < TEX_W * TEX_H; i++)
		s += words[i] ^ i;
	CU_CHECK(cuTexObjectDestroy(t->tex));
	CU_CHECK(cuSurfObjectDestroy(t->surf));
	CU_CHECK(cuArrayDestroy(t->array));
	return s;
}

/* --sparse: a sparse array of 2x2 tiles on tile-pool memory. */
struct sparse {
	CUarray array;
	CUmemGenericAllocationHandle pool;
	unsigned tw, th; /* a tile's extent in words */
	unsigned *row;
};

static CUarrayMapInfo sparse_entry(struct sparse *sp, unsigned tx, unsigned ty, bool map,
				   unsigned long long off)
{
	CUarrayMapInfo e = {.resourceType = CU_RESOURCE_TYPE_ARRAY,
			    .subresourceType = CU_ARRAY_SPARSE_SUBRESOURCE_TYPE_SPARSE_LEVEL,
			    .memOperationType = map ? CU_MEM_OPERATION_TYPE_MAP : CU_MEM_OPERATION_TYPE_UNMAP,
			    .memHandleType = CU_MEM_HANDLE_TYPE_GENERIC,
			    .offset = off,
			    .deviceBitMask = 1};

	e.resource.array = sp->array;
	e.subresource.sparseLevel.offsetX = tx * sp->tw;
	e.subresource.sparseLevel.offsetY = ty * sp->th;
	e.subresource.sparseLevel.extentWidth = sp->tw;
	e.subresource.sparseLevel.extentHeight = sp->th;
	e.subresource.sparseLevel.extentDepth = 1;
	e.memHandle.memHandle = map ? sp->pool : 0;
	return e;
}

static void sparse_setup(struct sparse *sp, CUdevice dev, CUstream stream)
{
	CUDA_ARRAY3D_DESCRIPTOR d = {.Width = 1024,
				     .Height = 1024,
				     .Format = CU_AD_FORMAT_UNSIGNED_INT32,
				     .NumChannels = 1,
				     .Flags = CUDA_ARRAY3D_SPARSE};
	CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
				    .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev}};
	CUDA_ARRAY_SPARSE_PROPERTIES props;
	size_t gran = 0, size = 2u << 20;

	/* The tile extent from a probe. */
	CU_CHECK(cuArray3DCreate(&sp->array, &d));
	CU_CHECK(cuArrayGetSparseProperties(&props, sp->array));
	CU_CHECK(cuArrayDestroy(sp->array));
	sp->tw = props.tileExtent.width;
	sp->th = props.tileExtent.height;
	d.Width = 2 * sp->tw;
	d.Height = 2 * sp->th;
	CU_CHECK(cuArray3DCreate(&sp->array, &d));
	prop.allocFlags.usage = CU_MEM_CREATE_USAGE_TILE_POOL;
	CU_CHECK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
	size = (size + gran - 1) / gran * gran;
	CU_CHECK(cuMemCreate(&sp->pool, size, &prop, 0));
	/* Tiles (0,0), (1,0), (1,1) mapped, then (1,0) unmapped: the replay keeps the order. */
	size_t tile = (size_t)sp->tw * sp->th * 4;
	CUarrayMapInfo map[3] = {sparse_entry(sp, 0, 0, true, 0), sparse_entry(sp, 1, 0, true, tile),
				 sparse_entry(sp, 1, 1, true, 2 * tile)};
	CUarrayMapInfo un = sparse_entry(sp, 1, 0, false, 0);
	CU_CHECK(cuMemMapArrayAsync(map, 3, stream));
	CU_CHECK(cuMemMapArrayAsync(&un, 1, stream));
	sp->row = calloc(2 * sp->tw, 4);
	CHECK(sp->row);
	/* Mapped tiles start with zeros too (a new tile pool's contents are not defined). */
	CUDA_MEMCPY2D z = {.srcMemoryType = CU_MEMORYTYPE_HOST,
			   .srcHost = sp->row,
			   .srcPitch = 0,
			   .dstMemoryType = CU_MEMORYTYPE_ARRAY,
			   .dstArray = sp->array,
			   .WidthInBytes = 2 * sp->tw * 4,
			   .Height = 1};
	for (unsigned y = 0; y < 2 * sp->th; y++) {
		z.dstY = y;
		CU_CHECK(cuMemcpy2DAsync(&z, stream));
		CU_CHECK(cuStreamSynchronize(stream));
	}
}

/* A row across both tile columns, at a row of each tile row that depends on the step. */
static void sparse_step(struct sparse *sp, CUstream stream, unsigned step)
{
	CUDA_MEMCPY2D c = {.srcMemoryType = CU_MEMORYTYPE_HOST,
			   .srcHost = sp->row,
			   .dstMemoryType = CU_MEMORYTYPE_ARRAY,
			   .dstArray = sp->array,
			   .WidthInBytes = 2 * sp->tw * 4,
			   .Height = 1};

	for (unsigned ty = 0; ty < 2; ty++) {
		for (unsigned x = 0; x < 2 * sp->tw; x++)
			sp->row[x] = (x + 1) * 2654435761u ^ step * 40503u ^ ty;
		c.dstY = ty * sp->th + (step * 7) % sp->th;
		CU_CHECK(cuMemcpy2DAsync(&c, stream));
		/* The row is rewritten next. */
		CU_CHECK(cuStreamSynchronize(stream));
	}
}

static unsigned long long sparse_sum(struct sparse *sp, CUstream stream)
{
	size_t n = (size_t)4 * sp->tw * sp->th;
	unsigned *words = malloc(n * 4);
	unsigned long long s = 0;
	CUarrayMapInfo rest[2] = {sparse_entry(sp, 0, 0, false, 0), sparse_entry(sp, 1, 1, false, 0)};

	CHECK(words);
	CU_CHECK(cuStreamSynchronize(stream));
	CUDA_MEMCPY2D out = {.srcMemoryType = CU_MEMORYTYPE_ARRAY,
			     .srcArray = sp->array,
			     .dstMemoryType = CU_MEMORYTYPE_HOST,
			     .dstHost = words,
			     .dstPitch = 2 * sp->tw * 4,
			     .WidthInBytes = 2 * sp->tw * 4,
			     .Height = 2 * sp->th};
	CU_CHECK(cuMemcpy2D(&out));
	for (size_t i = 0; i < n; i++)
		s += (unsigned long long)(words[i] ^ (unsigned)i) * (i % 7 + 1);
	CU_CHECK(cuMemMapArrayAsync(rest, 2, stream));
	CU_CHECK(cuStreamSynchronize(stream));
	CU_CHECK(cuArrayDestroy(sp->array));
	CU_CHECK(cuMemRelease(sp->pool));
	free(sp->row);
	free(words);
	return s;
}

int main(int argc, char **argv)
{
	struct opts o;
	parse(argc, argv, &o);
	pid_t child = -1;
	cu_test_init("state_app");

	/* What each device has: its context and the objects made in it. */
	struct per_dev {
		CUdevice dev;
		CUcontext ctx;
		CUmodule mod;
		CUfunction f_init, f_step, f_sum;
		CUstream stream;
		CUdeviceptr dsum;
	} d[8];
	int ndev = 0;
	CU_CHECK(cuDeviceGetCount(&ndev));
	if ((int)o.devices > ndev) {
		fprintf(stderr, "state_app: --devices %u, but only %d device(s)\n", o.devices, ndev);
		return 77;
	}
	for (unsigned i = 0; i < o.devices; i++) {
		struct per_dev *p = &d[i];

		CU_CHECK(cuDeviceGet(&p->dev, (int)i));
		if (i == 0) {
			CU_CHECK(cuDevicePrimaryCtxRetain(&p->ctx, p->dev));
			CU_CHECK(cuCtxSetCurrent(p->ctx));
		} else {
			CU_CHECK(cuCtxCreate(&p->ctx, NULL, 0, p->dev));
		}
		CU_CHECK(cuModuleLoadData(&p->mod, state_app_fatbin));
		CU_CHECK(cuModuleGetFunction(&p->f_init, p->mod, "state_init"));
		CU_CHECK(cuModuleGetFunction(&p->f_step, p->mod, "state_step"));
		CU_CHECK(cuModuleGetFunction(&p->f_sum, p->mod, "state_checksum"));
		CU_CHECK(cuStreamCreate(&p->stream, CU_STREAM_NON_BLOCKING));
	}
	/* After CUDA is set up, as a DataLoader's workers are forked (its default on Linux). */
	if (o.child) {
		/* Set before the fork: the parent may ask before the child would have set it. */
		signal(SIGUSR1, child_exit);
		child = fork();
		CHECK(child >= 0);
		if (!child) {
			/* Not left behind by a parent a failing test kills. */
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			for (;;)
				pause();
		}
		signal(SIGUSR1, SIG_DFL);
	}
	CUgreenCtx green = NULL;
	unsigned green_sms = 0;
	if (o.green) {
		CUdevResource sm, group;
		CUdevResourceDesc desc;
		unsigned n = 1;

		CU_CHECK(cuDeviceGetDevResource(d[0].dev, &sm, CU_DEV_RESOURCE_TYPE_SM));
		CU_CHECK(cuDevSmResourceSplitByCount(&group, &n, &sm, NULL, 0, 16));
		CU_CHECK(cuDevResourceGenerateDesc(&desc, &group, 1));
		CU_CHECK(cuGreenCtxCreate(&green, desc, d[0].dev, CU_GREEN_CTX_DEFAULT_STREAM));
		CU_CHECK(cuStreamDestroy(d[0].stream));
		CU_CHECK(cuGreenCtxStreamCreate(&d[0].stream, green, CU_STREAM_NON_BLOCKING, 0));
		CU_CHECK(cuCtxFromGreenCtx(&d[0].ctx, green));
		CU_CHECK(cuCtxSetCurrent(d[0].ctx));
		green_sms = group.sm.smCount;
	}
	unsigned long long words = ((unsigned long long)o.mb << 20) / 4 / o.chunks;
	CUdeviceptr *bufs = calloc(o.chunks, sizeof(*bufs));
	CHECK(bufs);
	unsigned grid = 264, block = 256;
	CUmemoryPool pool = NULL;
	if (o.pool) {
		CUmemPoolProps props = {.allocType = CU_MEM_ALLOCATION_TYPE_PINNED,
					.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = d[0].dev}};
		CUstreamAttrValue spin = {.syncPolicy = CU_SYNC_POLICY_SPIN};

		CU_CHECK(cuMemPoolCreate(&pool, &props));
		CU_CHECK(
		    cuStreamSetAttribute(d[0].stream, CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY, &spin));
	}
	for (unsigned c = 0; c < o.chunks; c++) {
		struct per_dev *pd = &d[c % o.devices];
		CU_CHECK(cuCtxSetCurrent(pd->ctx));
		if (o.pool) {
			CU_CHECK(cuMemAllocFromPoolAsync(&bufs[c], words * 4, pool, pd->stream));
		} else if (o.managed) {
			CU_CHECK(cuMemAllocManaged(&bufs[c], words * 4, CU_MEM_ATTACH_GLOBAL));
		} else if (o.registered && c == 0) {
			void *host = malloc(words * 4);

			CHECK(host);
			CU_CHECK(cuMemHostRegister(host, words * 4, CU_MEMHOSTREGISTER_DEVICEMAP));
			CU_CHECK(cuMemHostGetDevicePointer(&bufs[c], host, 0));
		} else
			CU_CHECK(cuMemAlloc(&bufs[c], words * 4));
		unsigned seed = o.seed + c;
		void *p[] = {&bufs[c], &words, &seed};
		CU_CHECK(cuLaunchKernel(pd->f_init, grid, 1, 1, block, 1, 1, 0, pd->stream, p, NULL));
	}
	CUdeviceptr extra = 0;
	if (o.settings)
		extra = settings_set(d[0].ctx, bufs[0]);
	if (o.notify)
		notify_set(d[0].dev);
	struct texture tx = {0};
	if (o.texture)
		texture_setup(&tx, d[0].mod, d[0].stream, o.seed);
	struct sparse sp = {0};
	if (o.sparse)
		sparse_setup(&sp, d[0].dev, d[0].stream);
	unsigned step = 0;	       /* host state: restored by CRIU, not by the layer */
	bool first_kernel_due = false; /* --first-kernel-file: the go came, the next step's time is due */
	CUgraphExec step_graph = NULL;
	CUgraph pgraph = NULL;
	CUgraphNode pnodes[PARAM_CHUNKS_MAX];
	if (o.graph_params) {
		pgraph = param_graph(d[0].f_step, bufs, o.chunks, &words, grid, block, pnodes);
		CU_CHECK(cuGraphInstantiateWithFlags(&step_graph, pgraph, 0));
	}
	if (o.graph)
		step_graph = capture_step(&o, &d[0].mod, d[0].stream, bufs, o.chunks, words, grid, block);
	CUdeviceptr cond_step = 0;
	CUgraphExec empty_exec =
	    NULL; /* --graph-cond: an empty graph's, launched too (torch.compile has some) */
	if (o.graph_cond) {
		CUgraph empty;

		CUuserObject uo;

		pgraph = cond_graph(d[0].mod, d[0].ctx, bufs, o.chunks, &words, grid, block, &cond_step);
		CU_CHECK(
		    cuUserObjectCreate(&uo, &uobj_gone, uobj_destroy, 1, CU_USER_OBJECT_NO_DESTRUCTOR_SYNC));
		CU_CHECK(cuGraphRetainUserObject(pgraph, uo, 1, CU_GRAPH_USER_OBJECT_MOVE));
		CU_CHECK(cuGraphInstantiateWithFlags(&step_graph, pgraph, 0));
		CU_CHECK(cuGraphCreate(&empty, 0));
		CU_CHECK(cuGraphInstantiateWithFlags(&empty_exec, empty, 0));
		CU_CHECK(cuGraphDestroy(empty));
	}
	sem_t *sem = SEM_FAILED;
	char sem_name[64];
	if (o.named_sem) {
		snprintf(sem_name, sizeof(sem_name), "/crcuda-state-app-%d", (int)getpid());
		sem = sem_open(sem_name, O_CREAT | O_EXCL, 0600, 0);
		CHECK(sem != SEM_FAILED);
	}
	unsigned *shm = NULL;
	const size_t shm_words = (8u << 20) / sizeof(unsigned);
	if (o.deleted_shm) {
		char path[64];
		int fd;

		snprintf(path, sizeof(path), "/dev/shm/crcuda-state-app-%d", (int)getpid());
		fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
		CHECK(fd >= 0);
		CHECK(unlink(path) == 0 && ftruncate(fd, (off_t)(shm_words * sizeof(unsigned))) == 0);
		shm = mmap(NULL, shm_words * sizeof(unsigned), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		CHECK(shm != MAP_FAILED);
		close(fd);
		/* Every page written: CRIU's limit counts the pages a file holds, not its size. */
		for (size_t i = 0; i < shm_words; i++)
			shm[i] = (unsigned)i * 0x9E3779B9u;
	}
	while (step < o.steps) {
		step++;
		if (sem != SEM_FAILED)
			CHECK(sem_post(sem) == 0);
		if (shm)
			shm[(step * 40503u) % shm_words] = step * 2654435761u;
		if (o.graph_cond) {
			/* One launch runs this step and the next COND_PER - 1. */
			if ((step - 1) % COND_PER == 0) {
				CU_CHECK(cuGraphLaunch(empty_exec, d[0].stream));
				CU_CHECK(cuGraphLaunch(step_graph, d[0].stream));
			}
			goto launched;
		}
		if (o.graph_params) {
			/* After the ready step, where a test checkpoints: a restored executable graph is
			 * updated then. */
			if (step == o.steps / 2 + 1) {
				/* The update: a second graph of the same shape. The executable graph's nodes
				 * are still named by the first graph's (the driver refuses the second's). */
				CUgraphNode g2nodes[PARAM_CHUNKS_MAX];
				CUgraph g2 =
				    param_graph(d[0].f_step, bufs, o.chunks, &words, grid, block, g2nodes);
				CUgraphExecUpdateResultInfo info;

				CU_CHECK(cuGraphExecUpdate(step_graph, g2, &info));
				CHECK(info.result == CU_GRAPH_EXEC_UPDATE_SUCCESS);
				CU_CHECK(cuGraphDestroy(g2));
			}
			/* The last chunk's node sits out from a quarter to three quarters of the steps. */
			if (step == o.steps / 4 + 1)
				CU_CHECK(cuGraphNodeSetEnabled(step_graph, pnodes[o.chunks - 1], 0));
			if (step == o.steps - o.steps / 4) {
				unsigned enabled = 1;

				CU_CHECK(cuGraphNodeGetEnabled(step_graph, pnodes[o.chunks - 1], &enabled));
				CHECK(enabled == 0);
				CU_CHECK(cuGraphNodeSetEnabled(step_graph, pnodes[o.chunks - 1], 1));
			}
			param_graph_step(step_graph, d[0].f_step, bufs, o.chunks, &words, grid, block, pnodes,
					 step);
			CU_CHECK(cuGraphLaunch(step_graph, d[0].stream));
			goto launched;
		}
		if (step_graph) {
			host_step = step;
			CU_CHECK(cuGraphLaunch(step_graph, d[0].stream));
			/* The copy reads host_step when the graph runs: it must not change before. */
			if (o.graph_pageable)
				CU_CHECK(cuStreamSynchronize(d[0].stream));
			goto launched;
		}
		for (unsigned c = 0; c < o.chunks; c++) {
			struct per_dev *pd = &d[c % o.devices];
			void *p[] = {&bufs[c], &words, &step};
			void *pt[] = {&bufs[c], &words, &step, &tx.tex, &tx.w, &tx.h};
			if (o.devices > 1)
				CU_CHECK(cuCtxSetCurrent(pd->ctx));
			if (o.managed && step % 2 == 0) {
				/* Into the GPU's memory for this step; the CPU's turn brings it back. */
				CUmemLocation gpu = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = pd->dev};

				CU_CHECK(cuMemPrefetchAsync(bufs[c], words * 4, gpu, 0, pd->stream));
			}
			CU_CHECK(cuLaunchKernel(o.texture ? tx.f_step : pd->f_step, grid, 1, 1, block, 1, 1,
						0, pd->stream, o.texture ? pt : p, NULL));
		}
		if (o.texture)
			texture_step(&tx, d[0].stream, step);
		if (o.sparse)
			sparse_step(&sp, d[0].stream, step);
	launched:
		if (first_kernel_due) {
			/* The first step's kernels after the go are done: when (a restore's time to first
			 * kernel). */
			struct timespec now;
			FILE *f;

			first_kernel_due = false;
			CU_CHECK(cuStreamSynchronize(d[0].stream));
			clock_gettime(CLOCK_REALTIME, &now);
			f = fopen(o.first_kernel_file, "w");
			if (!f || fprintf(f, "%lld.%09ld\n", (long long)now.tv_sec, now.tv_nsec) < 0 ||
			    fclose(f)) {
				fprintf(stderr, "state_app: cannot write %s\n", o.first_kernel_file);
				return 1;
			}
		}
		if (o.managed) {
			/* The CPU's turn: it reads the step's result and writes it back changed. */
			for (unsigned dv = 0; dv < o.devices; dv++)
				CU_CHECK(cuStreamSynchronize(d[dv].stream));
			for (unsigned c = 0; c < o.chunks; c++) {
				unsigned *w = (unsigned *)(uintptr_t)bufs[c];

				w[(step * 7919u) % words] = w[(step * 7919u) % words] * 31u + step;
			}
		}
		if (step == o.ready_at && o.pinned_ready) {
			unsigned *pin, first[16];

			CU_CHECK(cuMemAllocHost((void **)&pin, 1 << 20));
			CU_CHECK(cuStreamSynchronize(d[0].stream));
			CU_CHECK(cuMemcpyDtoHAsync(pin, bufs[0], sizeof(first), d[0].stream));
			CU_CHECK(cuMemcpyDtoH(first, bufs[0], sizeof(first)));
			CU_CHECK(cuStreamSynchronize(d[0].stream));
			CHECK(!memcmp(pin, first, sizeof(first)));
			CU_CHECK(cuMemFreeHost(pin));
		} else if (step == o.ready_at) {
			/* Some steps are left in flight on purpose: a checkpoint must drain them. */
			signal_ready(&o, step);
			if (o.pause_ms) {
				struct timespec ts = {o.pause_ms / 1000,
						      (long)(o.pause_ms % 1000) * 1000000L};
				while (nanosleep(&ts, &ts))
					;
			}
			while (o.go_file && access(o.go_file, F_OK))
				usleep(10000);
			first_kernel_due = o.first_kernel_file != NULL;
		}
		if (o.step_ms)
			usleep(o.step_ms * 1000u); /* --step-ms: a program that runs for a while */
	}
	if (o.green) {
		CUgreenCtx of = NULL;
		CUdevResource r;

		CU_CHECK(cuStreamGetGreenCtx(d[0].stream, &of));
		CU_CHECK(cuGreenCtxGetDevResource(green, &r, CU_DEV_RESOURCE_TYPE_SM));
		if (of != green || r.sm.smCount != green_sms) {
			fprintf(stderr,
				"state_app: green context lost: stream's %p (want %p), %u SMs (want %u)\n",
				(void *)of, (void *)green, r.sm.smCount, green_sms);
			return 1;
		}
	}
	if (child > 0) {
		/* It exits through exit(): the layer's goodbye must not end this process's session, whose
		 * connection the child shares (the checksum's kernels below need it). */
		int status = 0;

		CHECK(kill(child, SIGUSR1) == 0 && waitpid(child, &status, 0) == child);
		CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	}
	unsigned long long total = 0, part;
	for (unsigned i = 0; i < o.devices; i++) {
		CU_CHECK(cuCtxSetCurrent(d[i].ctx));
		CU_CHECK(cuMemAlloc(&d[i].dsum, sizeof(part)));
	}
	for (unsigned c = 0; c < o.chunks; c++) {
		struct per_dev *pd = &d[c % o.devices];
		CU_CHECK(cuCtxSetCurrent(pd->ctx));
		CU_CHECK(cuMemsetD8Async(pd->dsum, 0, sizeof(part), pd->stream));
		void *p[] = {&bufs[c], &words, &pd->dsum};
		CU_CHECK(cuLaunchKernel(pd->f_sum, grid, 1, 1, block, 1, 1, 0, pd->stream, p, NULL));
		CU_CHECK(cuMemcpyDtoHAsync(&part, pd->dsum, sizeof(part), pd->stream));
		CU_CHECK(cuStreamSynchronize(pd->stream));
		total += part * (c + 1); /* chunk order matters */
	}
	if (o.texture)
		total += texture_sum(&tx) * (o.chunks + 1);
	if (o.sparse)
		total += sparse_sum(&sp, d[0].stream) * (o.chunks + 2);
	if (o.pool) {
		cuuint64_t used = 0;
		CUstreamAttrValue v = {0};

		CU_CHECK(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used));
		CU_CHECK(cuStreamGetAttribute(d[0].stream, CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY, &v));
		if (used != o.chunks * words * 4 || v.syncPolicy != CU_SYNC_POLICY_SPIN) {
			fprintf(stderr,
				"state_app: the pool has %llu bytes in use (want %llu), sync policy %d\n",
				(unsigned long long)used, o.chunks * words * 4, (int)v.syncPolicy);
			return 1;
		}
	}
	if (o.settings && settings_check(d[0].ctx, bufs[0], extra))
		return 1;
	if (o.notify && notify_check(d[0].ctx))
		return 1;
	if (shm) {
		unsigned bad = 0;

		for (unsigned i = 1; i <= o.steps; i++) {
			size_t at = (i * 40503u) % shm_words;

			bad += shm[at] != i * 2654435761u;
			shm[at] = (unsigned)at * 0x9E3779B9u; /* then every word must be the fill's */
		}
		for (size_t i = 0; i < shm_words; i++)
			bad += shm[i] != (unsigned)i * 0x9E3779B9u;
		if (bad) {
			fprintf(stderr, "state_app: %u words of the deleted shared file lost\n", bad);
			return 1;
		}
	}
	if (sem != SEM_FAILED) {
		int value = -1;

		CHECK(sem_getvalue(sem, &value) == 0);
		sem_unlink(sem_name);
		if (value != (int)o.steps) {
			fprintf(stderr, "state_app: the named semaphore holds %d, want %u\n", value, o.steps);
			return 1;
		}
	}
	printf("state_app: mb=%lu chunks=%u steps=%u checksum=%016llx\n", o.mb, o.chunks, o.steps, total);

	if (o.verify) {
		unsigned long long want = 0;
		for (unsigned c = 0; c < o.chunks; c++) {
			unsigned long long s = 0;
			for (unsigned long long i = 0; i < words; i++) {
				unsigned x = (unsigned)(i * 2654435761ull) ^ (o.seed + c);
				for (unsigned k = 1; k <= o.steps; k++)
					x = x * 1664525u + 1013904223u + k;
				s += x ^ (unsigned)i;
			}
			want += s * (c + 1);
		}
		if (want != total) {
			fprintf(stderr, "state_app: checksum %016llx, CPU says %016llx\n", total, want);
			return 1;
		}
		printf("state_app: verified on the CPU\n");
	}
	if (o.graph_mem) {
		cuuint64_t reserved = 0;
		unsigned mark = 0;

		CU_CHECK(cuDeviceGetGraphMemAttribute(d[0].dev, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT,
						      &reserved));
		CHECK(reserved >= sizeof(unsigned));
		CU_CHECK(cuMemcpyDtoH(&mark, graph_mark, sizeof(mark)));
		CHECK(mark == GRAPH_MARK);
	}
	if (step_graph)
		CU_CHECK(cuGraphExecDestroy(step_graph));
	if (pgraph)
		CU_CHECK(cuGraphDestroy(pgraph));
	if (o.graph_cond) {
		/* The user object went with the graph and its executable graph, its callback run once. */
		CU_CHECK(cuCtxSynchronize());
		for (int i = 0; i < 300 && !atomic_load(&uobj_gone); i++)
			usleep(10000);
		CHECK(atomic_load(&uobj_gone) == 1);
	}
	for (unsigned c = 0; c < o.chunks; c++) {
		CU_CHECK(cuCtxSetCurrent(d[c % o.devices].ctx));
		CU_CHECK(cuMemFree(bufs[c]));
	}
	for (unsigned i = o.devices; i-- > 0;) {
		CU_CHECK(cuCtxSetCurrent(d[i].ctx));
		CU_CHECK(cuMemFree(d[i].dsum));
		CU_CHECK(cuStreamDestroy(d[i].stream));
		CU_CHECK(cuModuleUnload(d[i].mod));
		CU_CHECK(cuCtxSetCurrent(NULL));
		if (i == 0)
			CU_CHECK(cuDevicePrimaryCtxRelease(d[i].dev));
		else
			CU_CHECK(cuCtxDestroy(d[i].ctx));
	}
	free(bufs);
	return 0;
}
