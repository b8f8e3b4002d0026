// Kernels of managed_atomics.c.
// System-wide atomic adds on a word the CPU adds to at the same time.
__global__ void add_system(int *word, int per_thread)
{
	for (int i = 0; i < per_thread; i++)
		atomicAdd_system(word, 1);
}

// <<<1, 1>>>: about 200 ms of work, then *word = value.
__global__ void slow_write(int *word, int value)
{
	long long t0 = clock64();

	while (clock64() - t0 < 400000000ll)
		;
	*word = value;
}
