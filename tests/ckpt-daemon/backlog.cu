// Kernels of backlog_client.c: spin holds its stream for `ms` milliseconds; bump counts its launches.
__device__ static unsigned long long now_ns(void)
{
	unsigned long long t;

	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}

extern "C" __global__ void backlog_spin(unsigned ms)
{
	unsigned long long end = now_ns() + ms * 1000000ull;

	while (now_ns() < end)
		__nanosleep(1000);
}

extern "C" __global__ void backlog_bump(unsigned long long *counter)
{
	atomicAdd(counter, 1ull);
}
