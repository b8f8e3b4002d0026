/* graph_attr: a kernel launched with a cluster-dimension attribute (2 blocks a cluster), captured into
 * a graph and replayed --steps times (--sleep-ms between replays, for random-instant checkpoints). The
 * kernel folds the cluster size it sees into its output, so a replay (or a graph rebuilt by a restore)
 * that lost the attribute gives another checksum; the program checks every block against the CPU.
 * --capture-hold-ms holds the capture open that long (in CU_STREAM_CAPTURE_MODE_GLOBAL: another thread's
 * unsafe call meanwhile breaks it; under the layer, the daemon's own threads must not).
 * The simulated device has no clusters: its host kernel uses the size the launch asked for. */
#include <string.h>
#include <time.h>

#include "cuda_test.h"

extern const unsigned char graph_attr_fatbin[];

#define BLOCKS	8
#define CLUSTER 2
#define SALT	7u

static void pause_ms(unsigned ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};

	if (ms)
		nanosleep(&ts, NULL);
}

int main(int argc, char **argv)
{
	unsigned steps = 50, sleep_ms = 0, hold_ms = 0;
	CUcontext ctx;
	CUdevice dev;
	CUmodule mod;
	CUfunction probe;
	CUstream s;
	CUgraph g;
	CUgraphExec x;
	CUdeviceptr acc;
	unsigned host[BLOCKS], want[BLOCKS] = {0}, salt = SALT;
	unsigned long long sum = 0;
	int cluster_ok = 0;

	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--steps"))
			steps = (unsigned)strtoul(argv[i + 1], NULL, 0);
		else if (!strcmp(argv[i], "--sleep-ms"))
			sleep_ms = (unsigned)strtoul(argv[i + 1], NULL, 0);
		else if (!strcmp(argv[i], "--capture-hold-ms"))
			hold_ms = (unsigned)strtoul(argv[i + 1], NULL, 0);
	}
	cu_test_init("graph_attr");
	CU_CHECK(cuDeviceGet(&dev, 0));
	CU_CHECK(cuDeviceGetAttribute(&cluster_ok, CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH, dev));
	if (!cluster_ok) {
		fprintf(stderr, "graph_attr: skipped: no cluster launch here\n");
		return CHECK_SKIP;
	}
	CU_CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
	CU_CHECK(cuCtxSetCurrent(ctx));
	CU_CHECK(cuModuleLoadData(&mod, graph_attr_fatbin));
	CU_CHECK(cuModuleGetFunction(&probe, mod, "attr_probe"));
	CU_CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	CU_CHECK(cuMemAlloc(&acc, sizeof(host)));
	CU_CHECK(cuMemsetD32(acc, 0, BLOCKS));

	CUlaunchAttribute attr = {.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION};
	attr.value.clusterDim.x = CLUSTER;
	attr.value.clusterDim.y = 1;
	attr.value.clusterDim.z = 1;
	CUlaunchConfig cfg = {.gridDimX = BLOCKS,
			      .gridDimY = 1,
			      .gridDimZ = 1,
			      .blockDimX = 32,
			      .blockDimY = 1,
			      .blockDimZ = 1,
			      .hStream = s,
			      .attrs = &attr,
			      .numAttrs = 1};
	void *params[] = {&acc, &salt};
	CU_CHECK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
	CU_CHECK(cuLaunchKernelEx(&cfg, probe, params, NULL));
	pause_ms(hold_ms);
	CU_CHECK(cuStreamEndCapture(s, &g));
	CU_CHECK(cuGraphInstantiateWithFlags(&x, g, 0));
	CU_CHECK(cuGraphDestroy(g));
	for (unsigned step = 0; step < steps; step++) {
		CU_CHECK(cuGraphLaunch(x, s));
		CU_CHECK(cuStreamSynchronize(s));
		for (unsigned b = 0; b < BLOCKS; b++)
			want[b] = want[b] * 3u + CLUSTER * 1000u + SALT + b;
		pause_ms(sleep_ms);
	}
	CU_CHECK(cuMemcpyDtoH(host, acc, sizeof(host)));
	for (unsigned b = 0; b < BLOCKS; b++) {
		if (host[b] != want[b]) {
			fprintf(stderr, "graph_attr: block %u: %#x, expected %#x (cluster size lost?)\n", b,
				host[b], want[b]);
			return 1;
		}
		sum = sum * 131 + host[b];
	}
	printf("graph_attr: steps=%u checksum=%016llx\n", steps, sum);
	CU_CHECK(cuGraphExecDestroy(x));
	CU_CHECK(cuMemFree(acc));
	CU_CHECK(cuStreamDestroy(s));
	CU_CHECK(cuModuleUnload(mod));
	CU_CHECK(cuDevicePrimaryCtxRelease(dev));
	printf("graph_attr: PASS\n");
	return 0;
}
