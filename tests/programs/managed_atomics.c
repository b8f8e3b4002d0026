/* managed_atomics: the CPU and a kernel add to one managed word at the same time, with system-wide
 * atomics on both sides (NVIDIA's systemWideAtomics sample in small): the total must be exact. Under
 * crcuda the word is memory both processes map, and the CPU's and the GPU's atomics across the bus are
 * not atomic with each other, so the layer serialises them (the CPU's touch waits for the GPU's work).
 * --serial (under the layer only) checks that wait itself: the CPU reads a word a slow kernel writes,
 * right after the launch, and must read what the kernel wrote; a word attached to the host is read at
 * once. */
#include <stdbool.h>
#include <string.h>
#include <time.h>

#include "cuda_test.h"

extern const unsigned char managed_atomics_fatbin[];

#define BLOCKS	   64
#define THREADS	   256
#define PER_THREAD 50

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
	CUmodule mod;
	CUfunction add, slow;
	CUdeviceptr word, host_word;
	int per_thread = PER_THREAD, cpu_adds = BLOCKS * THREADS * PER_THREAD, value = 42;
	bool serial = argc > 1 && !strcmp(argv[1], "--serial");

	cu_test_init("managed_atomics");
	cu_test_primary_context(NULL);
	CU_CHECK(cuModuleLoadData(&mod, managed_atomics_fatbin));
	CU_CHECK(cuModuleGetFunction(&add, mod, "_Z10add_systemPii"));
	CU_CHECK(cuModuleGetFunction(&slow, mod, "_Z10slow_writePii"));
	CU_CHECK(cuMemAllocManaged(&word, 64, CU_MEM_ATTACH_GLOBAL));
	*(int *)(uintptr_t)word = 0;
	{
		void *args[] = {&word, &per_thread};

		CU_CHECK(cuLaunchKernel(add, BLOCKS, 1, 1, THREADS, 1, 1, 0, NULL, args, NULL));
	}
	for (int i = 0; i < cpu_adds; i++)
		__atomic_fetch_add((int *)(uintptr_t)word, 1, __ATOMIC_RELAXED);
	CU_CHECK(cuCtxSynchronize());
	printf("managed_atomics: %d adds each side, total %d\n", cpu_adds, *(int *)(uintptr_t)word);
	CHECK_EQ_INT(*(int *)(uintptr_t)word, 2 * cpu_adds);

	if (serial) {
		void *args[] = {&word, &value};
		double t0;
		int seen;

		CU_CHECK(cuMemAllocManaged(&host_word, 64, CU_MEM_ATTACH_HOST));
		*(int *)(uintptr_t)host_word = 7;
		*(int *)(uintptr_t)word = 0;
		CU_CHECK(cuLaunchKernel(slow, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL));
		t0 = now();
		CHECK_EQ_INT(*(volatile int *)(uintptr_t)host_word, 7); /* no wait for the host's */
		CHECK(now() - t0 < 0.1);
		seen = *(volatile int *)(uintptr_t)word;
		printf("managed_atomics: read %d after the slow kernel's launch (%.0f ms)\n", seen,
		       (now() - t0) * 1e3);
		CHECK_EQ_INT(seen, value);
		CU_CHECK(cuMemFree(host_word));
	}
	CU_CHECK(cuMemFree(word));
	CU_CHECK(cuModuleUnload(mod));
	cu_test_pass("managed_atomics");
	return 0;
}
