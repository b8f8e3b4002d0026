// Kernels of sim_checks.c and sim_fault_injection.c; no_host_impl deliberately has no host implementation.
__global__ void add_one(int *data, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		data[i] += 1;
}

__global__ void no_host_impl(int *data)
{
	data[0] = 1;
}
