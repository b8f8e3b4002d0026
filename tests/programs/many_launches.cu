// Kernel of many_launches.c: every thread adds one.
__global__ void increment(unsigned long long *counter)
{
	atomicAdd(counter, 1ull);
}
