/* probe_va_hint: which address hints cuMemAddressReserve takes on this driver (GPU machine diagnostics;
 * the reason managed memory moves to a GPU only in 32 MiB blocks, libcrcuda/hooks_mem.c). As the daemon
 * does before placing managed memory at the application's address: a memfd mapped at an aligned address,
 * registered and unregistered, moved away, then a reservation asked for at that address. Prints one line
 * per size and alignment: SAME when the driver took the hint. */
#include <cuda.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

#define MIB (1ull << 20)

static void probe(size_t size, size_t align)
{
	int fd = memfd_create("probe", 0);
	uint8_t *span = mmap(NULL, size + align, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	uintptr_t at = ((uintptr_t)span + align - 1) & ~(uintptr_t)(align - 1);
	CUdeviceptr got = 0;
	void *p, *view, *moved;
	CUresult reg, res;

	if (fd < 0 || ftruncate(fd, (off_t)size) || span == MAP_FAILED) {
		perror("probe_va_hint");
		return;
	}
	munmap(span, size + align);
	p = mmap((void *)at, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED_NOREPLACE, fd, 0);
	reg = cuMemHostRegister(p, size, CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP);
	if (reg == CUDA_SUCCESS)
		cuMemHostUnregister(p);
	view = mmap(NULL, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	moved = mremap(p, size, size, MREMAP_MAYMOVE | MREMAP_FIXED, view);
	res = cuMemAddressReserve(&got, size, 2 * MIB, at, 0);
	printf("size %4llu MiB, aligned to %4llu MiB: register %d, moved %d, reserve %d at %#llx: %s\n",
	       (unsigned long long)(size / MIB), (unsigned long long)(align / MIB), (int)reg, moved == view,
	       (int)res, (unsigned long long)got, got == at ? "SAME" : "DIFFERENT");
	if (res == CUDA_SUCCESS)
		cuMemAddressFree(got, size);
	munmap(moved == view ? view : p, size);
	close(fd);
}

int main(void)
{
	const size_t sizes[] = {4 * MIB, 32 * MIB, 64 * MIB, 256 * MIB},
		     aligns[] = {2 * MIB, 32 * MIB, 512 * MIB};
	CUdevice dev;
	CUcontext ctx;

	if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) ||
	    cuCtxSetCurrent(ctx)) {
		fprintf(stderr, "probe_va_hint: no CUDA device\n");
		return 77;
	}
	for (unsigned i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
		for (unsigned j = 0; j < sizeof(aligns) / sizeof(aligns[0]); j++)
			probe(sizes[i], aligns[j]);
	return 0;
}
