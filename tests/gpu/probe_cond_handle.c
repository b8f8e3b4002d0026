/* probe_cond_handle: what a CUgraphConditionalHandle's value is made of, on the real driver. Prints the
 * handles of two graphs, then of a graph made after both are gone; run twice, the two runs say whether
 * the same creation order in a fresh process gives the same values (a restore re-creates them). */
#include <cuda.h>
#include <stdio.h>

#define CK(x)                                                                                                \
	do {                                                                                                 \
		CUresult r_ = (x);                                                                           \
		if (r_ != CUDA_SUCCESS) {                                                                    \
			fprintf(stderr, "%s: error %d\n", #x, (int)r_);                                      \
			return 1;                                                                            \
		}                                                                                            \
	} while (0)

int main(void)
{
	CUdevice dev;
	CUcontext ctx;
	CUgraph g1, g2, g3;
	CUgraphConditionalHandle h[7];

	CK(cuInit(0));
	CK(cuDeviceGet(&dev, 0));
	CK(cuDevicePrimaryCtxRetain(&ctx, dev));
	CK(cuCtxSetCurrent(ctx));
	CK(cuGraphCreate(&g1, 0));
	CK(cuGraphCreate(&g2, 0));
	CK(cuGraphConditionalHandleCreate(&h[0], g1, ctx, 0, 0));
	CK(cuGraphConditionalHandleCreate(&h[1], g1, ctx, 1, CU_GRAPH_COND_ASSIGN_DEFAULT));
	CK(cuGraphConditionalHandleCreate(&h[2], g2, ctx, 0, 0));
	CK(cuGraphConditionalHandleCreate(&h[3], g1, ctx, 0, 0));
	CK(cuGraphDestroy(g1));
	CK(cuGraphDestroy(g2));
	CK(cuGraphCreate(&g3, 0));
	CK(cuGraphConditionalHandleCreate(&h[4], g3, ctx, 0, 0));
	CK(cuGraphConditionalHandleCreate(&h[5], g3, ctx, 0, 0));
	CK(cuGraphConditionalHandleCreate(&h[6], g3, ctx, 0, 0));
	for (int i = 0; i < 7; i++)
		printf("handle %d: %016llx\n", i, (unsigned long long)h[i]);
	printf("graphs %p %p %p\n", (void *)g1, (void *)g2, (void *)g3);
	return 0;
}
