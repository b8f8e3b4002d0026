// Kernels of fault_app.c (host implementations in sim_kernels.c): each faults on purpose.
#include <assert.h>

// A device-side assert that fails: CUDA_ERROR_ASSERT (710), sticky.
extern "C" __global__ void fault_assert(const int *flag)
{
	assert(*flag == 0);
}

// A write through a pointer into no allocation: CUDA_ERROR_ILLEGAL_ADDRESS (700), sticky.
extern "C" __global__ void fault_oob(int *base, long long offset)
{
	base[offset] = 1;
}
