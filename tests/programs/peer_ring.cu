// Kernels of peer_ring: ranks in separate processes pass their data around a ring through each
// other's VMM memory (imported shareable handles), the way NCCL's P2P transport does: a collective
// kernel writes into the next rank's inbox, raises its flag, and waits for its own flag, which only
// the previous rank's kernel raises. One block per launch.
extern "C" __global__ void ring_step(unsigned *data, int n, unsigned salt)
{
	for (int i = threadIdx.x; i < n; i += blockDim.x)
		data[i] = data[i] * 1664525u + 1013904223u + salt;
}

extern "C" __global__ void coll_ring_exchange(unsigned *data, unsigned *next_inbox, unsigned *next_flag,
					      const unsigned *my_inbox, unsigned *my_flag, int n, unsigned step)
{
	for (int i = threadIdx.x; i < n; i += blockDim.x)
		next_inbox[i] = data[i];
	__threadfence_system();
	__syncthreads();
	if (threadIdx.x == 0) {
		*(volatile unsigned *)next_flag = step + 1;
		while (*(volatile unsigned *)my_flag < step + 1)
			;
	}
	__threadfence_system();
	__syncthreads();
	for (int i = threadIdx.x; i < n; i += blockDim.x)
		data[i] = data[i] * 3u + ((const volatile unsigned *)my_inbox)[i];
}
