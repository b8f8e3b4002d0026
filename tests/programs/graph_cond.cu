// Kernels of graph_cond.c: the body of a WHILE conditional node advances a counter and keeps looping
// while it is under the limit.
#include <cuda_runtime.h>

extern "C" __global__ void cond_step(unsigned *counter, unsigned limit, cudaGraphConditionalHandle h)
{
	if (threadIdx.x == 0 && blockIdx.x == 0) {
		unsigned c = ++*counter;
		cudaGraphSetConditional(h, c < limit);
	}
}
