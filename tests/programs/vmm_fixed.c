/* vmm_fixed: the daemon's pattern for stable device pointers. Reserve VA at a fixed hint (and get
 * exactly it), create two physical allocations, map them side by side, grant access, fill the range
 * from a kernel across both mappings, read it back; a second reservation at the same hint must be
 * moved silently; and a 4 TiB window at 0x600000000000 as the daemon asks for. */
#include <stdint.h>
#include <stdlib.h>

#include "cuda_test.h"

extern const unsigned char vmm_fixed_fatbin[];

/* Honoured on the GPU machine (notes/driver-interposition.md section 5), free under ASan as well. */
#define HINT	     0x555000000000ull
#define WINDOW_HINT  0x600000000000ull
#define WINDOW_SIZE  (4ull << 40)
#define RESERVE_SIZE (64ull << 20)

int main(void)
{
	CUdevice dev;
	CUmodule mod;
	CUfunction fill;
	CUdeviceptr base, moved, window;
	CUmemGenericAllocationHandle h1, h2, retained;
	CUmemAllocationProp prop = {0};
	CUmemAccessDesc access = {0};
	size_t granularity = 0, chunk;
	unsigned long long access_flags = 0, n;
	unsigned salt = 0x5eed;
	int vmm_supported = 0;

	cu_test_init("vmm_fixed");
	cu_test_primary_context(&dev);
	CU_CHECK(cuDeviceGetAttribute(&vmm_supported, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
				      dev));
	if (!vmm_supported) {
		fprintf(stderr, "vmm_fixed: skipped: the device has no VMM support\n");
		return CHECK_SKIP;
	}
	CU_CHECK(cuModuleLoadData(&mod, vmm_fixed_fatbin));
	CU_CHECK(cuModuleGetFunction(&fill, mod, "_Z10fill_indexPjjy"));

	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop.location.id = dev;
	CU_CHECK(cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
	CHECK_EQ_INT(granularity, 2u << 20);
	chunk = 2 * granularity;

	CU_CHECK(cuMemAddressReserve(&base, RESERVE_SIZE, 0, HINT, 0));
	if (base != HINT) {
		fprintf(stderr, "vmm_fixed: reserved at 0x%llx, not at the hint 0x%llx\n",
			(unsigned long long)base, HINT);
		return 1;
	}
	/* Overlapping the first: SUCCESS, somewhere else (always check ptr == hint). */
	CU_CHECK(cuMemAddressReserve(&moved, RESERVE_SIZE, 0, HINT, 0));
	CHECK(moved != HINT);
	CHECK(moved + RESERVE_SIZE <= base || moved >= base + RESERVE_SIZE);
	CU_CHECK(cuMemAddressFree(moved, RESERVE_SIZE));

	CU_CHECK(cuMemCreate(&h1, chunk, &prop, 0));
	CU_CHECK(cuMemCreate(&h2, chunk, &prop, 0));
	/* The handle's properties are what it was made with. */
	CUmemAllocationProp back;
	memset(&back, 0xff, sizeof(back));
	CU_CHECK(cuMemGetAllocationPropertiesFromHandle(&back, h2));
	CHECK(back.type == prop.type && back.location.type == prop.location.type &&
	      back.location.id == prop.location.id && back.requestedHandleTypes == prop.requestedHandleTypes);
	CU_CHECK(cuMemMap(base, chunk, 0, h1, 0));
	CU_CHECK(cuMemMap(base + chunk, chunk, 0, h2, 0));
	access.location = prop.location;
	access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	CU_CHECK(cuMemSetAccess(base, 2 * chunk, &access, 1));
	CU_CHECK(cuMemGetAccess(&access_flags, &prop.location, base + chunk + 12345));
	CHECK_EQ_INT(access_flags, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);

	n = 2 * chunk / sizeof(unsigned);
	void *params[] = {&base, &salt, &n};
	CU_CHECK(cuLaunchKernel(fill, (unsigned)(n / 256), 1, 1, 256, 1, 1, 0, NULL, params, NULL));
	CU_CHECK(cuCtxSynchronize());
	unsigned *host = malloc(2 * chunk);
	CHECK(host != NULL);
	CU_CHECK(cuMemcpyDtoH(host, base, 2 * chunk));
	for (unsigned long long i = 0; i < n; i++) {
		if (host[i] != (unsigned)i * 2654435761u + salt) {
			fprintf(stderr, "vmm_fixed: word %llu is 0x%x\n", i, host[i]);
			return 1;
		}
	}
	free(host);

	CU_CHECK(cuMemRetainAllocationHandle(&retained, (void *)(uintptr_t)(base + chunk + 100)));
	CHECK(retained == h2);
	CU_CHECK(cuMemRelease(retained));

	CU_CHECK(cuMemUnmap(base, 2 * chunk));
	CU_CHECK(cuMemRelease(h1));
	CU_CHECK(cuMemRelease(h2));
	CU_CHECK(cuMemAddressFree(base, RESERVE_SIZE));

	/* The daemon's window. ASan's allocator lives at 0x600000000000 in sanitized builds, so there the
	 * hint is (correctly) moved. */
	CU_CHECK(cuMemAddressReserve(&window, WINDOW_SIZE, 0, WINDOW_HINT, 0));
#ifndef __SANITIZE_ADDRESS__
	if (window != WINDOW_HINT) {
		fprintf(stderr, "vmm_fixed: 4 TiB window at 0x%llx, not 0x%llx\n", (unsigned long long)window,
			WINDOW_HINT);
		return 1;
	}
#endif
	CU_CHECK(cuMemCreate(&h1, granularity, &prop, 0));
	CU_CHECK(cuMemMap(window + WINDOW_SIZE - granularity, granularity, 0, h1, 0));
	CU_CHECK(cuMemSetAccess(window + WINDOW_SIZE - granularity, granularity, &access, 1));
	CU_CHECK(cuMemsetD32(window + WINDOW_SIZE - granularity, 0xabcdef01, granularity / 4));
	unsigned word = 0;
	CU_CHECK(cuMemcpyDtoH(&word, window + WINDOW_SIZE - 4, sizeof(word)));
	CHECK_EQ_INT(word, 0xabcdef01);
	CU_CHECK(cuMemUnmap(window + WINDOW_SIZE - granularity, granularity));
	CU_CHECK(cuMemRelease(h1));
	CU_CHECK(cuMemAddressFree(window, WINDOW_SIZE));

	CU_CHECK(cuModuleUnload(mod));
	CU_CHECK(cuDevicePrimaryCtxRelease(0));
	cu_test_pass("vmm_fixed");
}
