// Kernel of graph_attr.c: each block folds in the size of its thread-block cluster, which only the
// launch's cluster-dimension attribute sets, so a graph node that lost the attribute computes another
// result.
extern "C" __global__ void attr_probe(unsigned *acc, unsigned salt)
{
	unsigned ncta;

	asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(ncta));
	if (threadIdx.x == 0)
		acc[blockIdx.x] = acc[blockIdx.x] * 3u + ncta * 1000u + salt + blockIdx.x;
}
