/* pointer_attrs: what cuPointerGetAttribute and cuPointerGetAttributes answer for device memory
 * (cuMemAlloc, and a VMM mapping), pinned host memory and a plain host pointer, printed in a form that
 * does not depend on where memory landed (addresses relative to the queried pointer, ids as
 * "nonzero"). Libraries steer by these answers (cuBLASLt takes another path when the array form
 * fails), so tests/gpu/layer.sh (real driver) and sim_forward_pointer_attrs (simulated device) compare
 * this output natively and under crcuda line for line. The program itself checks what must hold
 * everywhere: the array form answers each attribute the single form answers, with the same value, and
 * all the attributes it answers alone also in one call. */
#include <inttypes.h>
#include <stdint.h>
#include <string.h>

#include "cuda_test.h"

#define NATTR 21 /* CU_POINTER_ATTRIBUTE_CONTEXT (1) .. CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE */

static CUcontext ctx;

/* The value of attribute a, printed relative to the queried pointer p where it is an address. */
static void print_value(CUpointer_attribute a, const uint64_t v[2], uint64_t p, char *buf, size_t len)
{
	switch (a) {
	case CU_POINTER_ATTRIBUTE_CONTEXT:
		snprintf(buf, len, "%s", !v[0] ? "null" : v[0] == (uintptr_t)ctx ? "current" : "other");
		break;
	case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
	case CU_POINTER_ATTRIBUTE_HOST_POINTER:
	case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
	case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR:
		if (v[0])
			snprintf(buf, len, "p%+" PRId64, (int64_t)(v[0] - p));
		else
			snprintf(buf, len, "0");
		break;
	case CU_POINTER_ATTRIBUTE_BUFFER_ID:
	case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID:
	case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
	case CU_POINTER_ATTRIBUTE_P2P_TOKENS:
		snprintf(buf, len, "%s", v[0] || v[1] ? "nonzero" : "0");
		break;
	case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
	case CU_POINTER_ATTRIBUTE_MAPPING_SIZE:
		snprintf(buf, len, "%" PRIu64, v[0]);
		break;
	default: /* 32-bit values */
		snprintf(buf, len, "%u", (unsigned)v[0]);
		break;
	}
}

static void query(const char *what, uint64_t p)
{
	CUpointer_attribute attrs[NATTR], ok_attrs[NATTR];
	uint64_t alone[NATTR][2], together[NATTR][2];
	void *data[NATTR];
	int nok = 0;
	CUresult res;

	for (int i = 0; i < NATTR; i++) {
		uint64_t single[2] = {0, 0};
		char sv[64], av[64];
		CUresult sres, ares;

		attrs[i] = (CUpointer_attribute)(i + 1);
		sres = cuPointerGetAttribute(single, attrs[i], (CUdeviceptr)p);
		memset(alone[i], 0, sizeof(alone[i]));
		data[0] = alone[i];
		ares = cuPointerGetAttributes(1, &attrs[i], data, (CUdeviceptr)p);
		print_value(attrs[i], single, p, sv, sizeof(sv));
		print_value(attrs[i], alone[i], p, av, sizeof(av));
		printf("%s: attr %2d single %d %s array %d %s\n", what, i + 1, (int)sres,
		       sres == CUDA_SUCCESS ? sv : "-", (int)ares, ares == CUDA_SUCCESS ? av : "-");
		/* The array form answers what the single form answers (P2P tokens are per call). */
		if (sres == CUDA_SUCCESS && attrs[i] != CU_POINTER_ATTRIBUTE_P2P_TOKENS &&
		    (ares != CUDA_SUCCESS || strcmp(sv, av))) {
			fprintf(stderr, "pointer_attrs: %s: attribute %d: single %s, array %d %s\n", what,
				i + 1, sv, (int)ares, av);
			exit(1);
		}
		if (ares == CUDA_SUCCESS)
			ok_attrs[nok++] = attrs[i];
	}
	/* All the attributes the array form answers alone, in one call: the same answers. */
	for (int i = 0; i < nok; i++) {
		memset(together[i], 0, sizeof(together[i]));
		data[i] = together[i];
	}
	res = cuPointerGetAttributes((unsigned)nok, ok_attrs, data, (CUdeviceptr)p);
	printf("%s: %d attributes in one array call: %d\n", what, nok, (int)res);
	for (int i = 0; i < nok; i++) {
		char av[64], tv[64];
		int k = (int)ok_attrs[i] - 1;

		print_value(ok_attrs[i], alone[k], p, av, sizeof(av));
		print_value(ok_attrs[i], together[i], p, tv, sizeof(tv));
		if (res != CUDA_SUCCESS ||
		    (strcmp(av, tv) && ok_attrs[i] != CU_POINTER_ATTRIBUTE_P2P_TOKENS)) {
			fprintf(stderr, "pointer_attrs: %s: attribute %d: alone %s, together %d %s\n", what,
				k + 1, av, (int)res, tv);
			exit(1);
		}
	}
}

int main(void)
{
	const size_t bytes = (3u << 20) + 5; /* not a multiple of any granule: shows how sizes round */
	CUdeviceptr d;
	void *pinned;
	static char plain[4096];
	CUmemGenericAllocationHandle h;
	CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
				    .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}};
	CUmemAccessDesc access = {.location = prop.location, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
	size_t gran;
	CUdeviceptr va;
	CUdevice dev;
	CUresult res = cuInit(0);

	if (res == CUDA_ERROR_NO_DEVICE)
		return 77;
	CU_CHECK(res);
	CU_CHECK(cuDeviceGet(&dev, 0));
	CU_CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
	CU_CHECK(cuCtxSetCurrent(ctx));

	CU_CHECK(cuMemAlloc(&d, bytes));
	query("cuMemAlloc base", d);
	query("cuMemAlloc +4096", d + 4096);
	CU_CHECK(cuMemAllocHost(&pinned, 1 << 20));
	query("cuMemAllocHost +64", (uintptr_t)pinned + 64);
	query("plain host", (uintptr_t)plain);

	CU_CHECK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
	CU_CHECK(cuMemAddressReserve(&va, 2 * gran, 0, 0, 0));
	CU_CHECK(cuMemCreate(&h, 2 * gran, &prop, 0));
	CU_CHECK(cuMemMap(va, 2 * gran, 0, h, 0));
	CU_CHECK(cuMemSetAccess(va, 2 * gran, &access, 1));
	query("VMM +gran", va + gran);
	CU_CHECK(cuMemUnmap(va, 2 * gran));
	CU_CHECK(cuMemRelease(h));
	CU_CHECK(cuMemAddressFree(va, 2 * gran));

	CU_CHECK(cuMemFreeHost(pinned));
	CU_CHECK(cuMemFree(d));
	CU_CHECK(cuDevicePrimaryCtxRelease(dev));
	printf("pointer_attrs: PASS\n");
	return 0;
}
