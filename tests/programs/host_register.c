/* host_register: the program's own memory registered (cuMemHostRegister), as simpleStreams and NPP do:
 * a malloc'd buffer (unaligned, its pages shared with other heap data) and an anonymous mapping, both
 * DEVICEMAP. A kernel updates the buffer through its device pointer while the CPU reads it after each
 * step; async copies from and to registered memory; the heap data on the same pages and the buffer's
 * contents from before the registration stay; unregistering leaves the memory usable; flags and double
 * registration answer as the driver does. Then the program's static data (an initialized array: a
 * private file mapping, as a library's static buffer that NPP registers), DEVICEMAP, stepped by a kernel
 * through its device pointer; and a variable on the stack, registered twice (as NPP does). Prints a checksum
 * and PASS. */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "cuda_test.h"

extern const unsigned char graph_basic_fatbin[];

#define N     4096
#define BLOCK 128
#define STEPS 20

/* Initialized, so in .data (the executable's private file mapping), on whole pages of its own. */
static unsigned static_data[N] __attribute__((aligned(4096))) = {1};

int main(void)
{
	static unsigned model[N];
	unsigned char *heap = malloc(N * sizeof(unsigned) + 64);
	unsigned *x, *y;
	CUmodule mod;
	CUfunction affine;
	CUstream s;
	CUdeviceptr dx, d;
	unsigned mul = 7, add = 1, flags = 0;
	int n = N;
	unsigned long long sum = 0xcbf29ce484222325ull;

	CHECK(heap);
	cu_test_init("host_register");
	cu_test_primary_context(NULL);
	CU_CHECK(cuModuleLoadData(&mod, graph_basic_fatbin));
	CU_CHECK(cuModuleGetFunction(&affine, mod, "graph_affine"));
	CU_CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	CU_CHECK(cuMemAlloc(&d, N * sizeof(unsigned)));

	/* An unaligned heap buffer: 16 bytes of other data before it, on the same page. */
	memset(heap, 0x5c, 16);
	x = (unsigned *)(heap + 16);
	for (unsigned i = 0; i < N; i++)
		model[i] = x[i] = i * 40503u + 17;
	CU_CHECK(cuMemHostRegister(x, N * sizeof(unsigned), CU_MEMHOSTREGISTER_DEVICEMAP));
	CU_EXPECT(cuMemHostRegister(x, 64, 0), CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
	CU_CHECK(cuMemHostGetFlags(&flags, x));
	CHECK(flags & CU_MEMHOSTREGISTER_DEVICEMAP);
	CU_CHECK(cuMemHostGetDevicePointer(&dx, x, 0));
	for (unsigned i = 0; i < 16; i++)
		CHECK(heap[i] == 0x5c);
	void *params[] = {&dx, &mul, &add, &n};
	for (int st = 0; st < STEPS; st++) {
		CU_CHECK(cuLaunchKernel(affine, N / BLOCK, 1, 1, BLOCK, 1, 1, 0, s, params, NULL));
		CU_CHECK(cuStreamSynchronize(s));
		for (unsigned i = 0; i < N; i++) {
			model[i] = model[i] * mul + add + i;
			CHECK(x[i] == model[i]);
		}
		x[st] += 1; /* the CPU writes between kernels */
		model[st] += 1;
	}

	/* An anonymous mapping, registered: async copies to and from it. */
	y = mmap(NULL, N * sizeof(unsigned), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(y != MAP_FAILED);
	CU_CHECK(cuMemHostRegister(y, N * sizeof(unsigned), CU_MEMHOSTREGISTER_PORTABLE));
	CU_CHECK(cuMemcpyHtoDAsync(d, x, N * sizeof(unsigned), s));
	CU_CHECK(cuMemcpyDtoHAsync(y, d, N * sizeof(unsigned), s));
	CU_CHECK(cuStreamSynchronize(s));
	CHECK(!memcmp(y, model, sizeof(model)));

	/* Unregistered, both stay usable memory of the program. */
	CU_CHECK(cuMemHostUnregister(x));
	CU_CHECK(cuMemHostUnregister(y));
	CU_EXPECT(cuMemHostUnregister(y), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
	for (unsigned i = 0; i < N; i++) {
		x[i] ^= y[i] + 1;
		sum = (sum ^ x[i]) * 0x100000001b3ull;
	}
	CU_CHECK(cuMemcpyHtoD(d, x, N * sizeof(unsigned)));
	CU_CHECK(cuMemcpyDtoH(y, d, N * sizeof(unsigned)));
	CHECK(!memcmp(x, y, N * sizeof(unsigned)));
	munmap(y, N * sizeof(unsigned));

	/* Static data, registered and stepped by a kernel through its device pointer. */
	for (unsigned i = 0; i < N; i++)
		model[i] = static_data[i] = i * 2654435761u + static_data[i];
	CU_CHECK(cuMemHostRegister(static_data, sizeof(static_data), CU_MEMHOSTREGISTER_DEVICEMAP));
	CU_CHECK(cuMemHostGetDevicePointer(&dx, static_data, 0));
	CU_CHECK(cuLaunchKernel(affine, N / BLOCK, 1, 1, BLOCK, 1, 1, 0, s, params, NULL));
	CU_CHECK(cuStreamSynchronize(s));
	for (unsigned i = 0; i < N; i++) {
		CHECK(static_data[i] == model[i] * mul + add + i);
		sum = (sum ^ static_data[i]) * 0x100000001b3ull;
	}
	CU_CHECK(cuMemHostUnregister(static_data));

	/* A variable on this thread's stack, as NPP registers one: a kernel writes it through its device
	 * pointer while the program's own frames live on the same page. */
	{
		volatile unsigned local[4] = {5, 6, 7, 8};
		CUdeviceptr dl;
		int four = 4;
		void *lp[] = {&dl, &mul, &add, &four};

		/* Twice, as NPP does call after call: the page registered before is registered again. */
		for (unsigned round = 0; round < 2; round++) {
			unsigned before[4];

			for (unsigned i = 0; i < 4; i++)
				before[i] = local[i];
			CU_CHECK(
			    cuMemHostRegister((void *)local, sizeof(local), CU_MEMHOSTREGISTER_DEVICEMAP));
			CU_CHECK(cuMemHostGetDevicePointer(&dl, (void *)local, 0));
			CU_CHECK(cuLaunchKernel(affine, 1, 1, 1, BLOCK, 1, 1, 0, s, lp, NULL));
			CU_CHECK(cuStreamSynchronize(s));
			for (unsigned i = 0; i < 4; i++) {
				CHECK(local[i] == before[i] * mul + add + i);
				sum = (sum ^ local[i]) * 0x100000001b3ull;
			}
			CU_CHECK(cuMemHostUnregister((void *)local));
		}
	}
	free(heap);
	CU_CHECK(cuMemFree(d));
	CU_CHECK(cuStreamDestroy(s));
	printf("host_register: checksum %016llx\n", sum);
	cu_test_pass("host_register");
}
