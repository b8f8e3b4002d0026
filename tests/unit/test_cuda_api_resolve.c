/* crc_cu_find and crc_cu_resolve: cuGetProcAddress's choice of ABI variant by version and flags. */
#include "check.h"
#include "crcuda/cuda_api.h"

/* CUdriverProcAddressQueryResult and CUdriverProcAddress_flags, as cuda.h numbers them. */
enum { SUCCESS = 0, SYMBOL_NOT_FOUND = 1, VERSION_NOT_SUFFICIENT = 2 };
enum { DEFAULT = 0, LEGACY_STREAM = 1, PER_THREAD = 2 };

static void expect(const char *base, int version, unsigned long long flags, const char *want, int want_status)
{
	int status = -7;
	int id = crc_cu_resolve(base, version, flags, &status);

	if (!want) {
		if (id != -1 || status != want_status) {
			fprintf(stderr, "resolve(%s, %d, %llu) = %s, status %d; want none, status %d\n",
				base ? base : "(null)", version, flags,
				id >= 0 ? crc_cu_table[id].sym : "none", status, want_status);
			exit(1);
		}
		return;
	}
	if (id < 0 || strcmp(crc_cu_table[id].sym, want) || status != want_status) {
		fprintf(stderr, "resolve(%s, %d, %llu) = %s, status %d; want %s, status %d\n", base, version,
			flags, id >= 0 ? crc_cu_table[id].sym : "none", status, want, want_status);
		exit(1);
	}
}

int main(void)
{
	/* find: exact ABI symbols only */
	CHECK(crc_cu_find("cuMemAlloc_v2") >= 0);
	CHECK_EQ_STR(crc_cu_table[crc_cu_find("cuMemcpyHtoD_v2_ptds")].sym, "cuMemcpyHtoD_v2_ptds");
	CHECK_EQ_INT(crc_cu_find("cuMemcpyHtoD_v2_ptds"), CRC_CU_cuMemcpyHtoD_v2_ptds);
	CHECK_EQ_INT(crc_cu_table[CRC_CU_cuMemcpyHtoD_v2_ptds].parent, CRC_CU_cuMemcpyHtoD_v2);
	CHECK_EQ_INT(crc_cu_table[CRC_CU_cuMemcpyHtoD_v2_ptds].version, 7000);
	CHECK_EQ_INT(crc_cu_table[CRC_CU_cuMemcpyHtoD_v2_ptds].pt, CRC_CU_PT_PTDS);
	CHECK_EQ_INT(crc_cu_table[CRC_CU_cuMemcpyHtoD_v2].version, 3020);
	CHECK_EQ_INT(crc_cu_table[CRC_CU_cuGetProcAddress_v2].policy, CRC_CU_POLICY_HOOK);
	CHECK_EQ_INT(crc_cu_table[CRC_CU_cuDriverGetVersion].policy, CRC_CU_POLICY_LOCAL);
	CHECK_EQ_INT(crc_cu_table[CRC_CU_cuMulticastCreate].policy, CRC_CU_POLICY_UNSUPPORTED);
	CHECK_EQ_INT(crc_cu_find("cuNoSuchFunction"), -1);
	CHECK_EQ_INT(crc_cu_find(""), -1);
	CHECK_EQ_INT(crc_cu_find(NULL), -1);
	CHECK_EQ_INT(crc_cu_find("cuMemAlloc_v"), -1);

	/* versions */
	expect("cuMemcpyHtoD", 3020, DEFAULT, "cuMemcpyHtoD_v2", SUCCESS);
	expect("cuMemcpyHtoD", 13000, DEFAULT, "cuMemcpyHtoD_v2", SUCCESS);
	expect("cuMemcpyHtoD", 3010, DEFAULT, "cuMemcpyHtoD", SUCCESS);
	expect("cuMemcpyHtoD", 2000, DEFAULT, "cuMemcpyHtoD", SUCCESS);
	expect("cuMemcpyHtoD", 1000, DEFAULT, NULL, VERSION_NOT_SUFFICIENT);
	expect("cuGetProcAddress", 12000, DEFAULT, "cuGetProcAddress_v2", SUCCESS);
	expect("cuGetProcAddress", 11030, DEFAULT, "cuGetProcAddress", SUCCESS);
	expect("cuGetProcAddress", 11020, DEFAULT, NULL, VERSION_NOT_SUFFICIENT);
	expect("cuCtxCreate", 11040, DEFAULT, "cuCtxCreate_v3", SUCCESS);
	expect("cuCtxCreate", 12050, DEFAULT, "cuCtxCreate_v4", SUCCESS);
	expect("cuStreamGetCaptureInfo", 12030, DEFAULT, "cuStreamGetCaptureInfo_v3", SUCCESS);

	/* per-thread default stream */
	expect("cuMemcpyHtoD", 7000, PER_THREAD, "cuMemcpyHtoD_v2_ptds", SUCCESS);
	expect("cuMemcpyHtoD", 13000, PER_THREAD, "cuMemcpyHtoD_v2_ptds", SUCCESS);
	expect("cuMemcpyHtoD", 7000, LEGACY_STREAM, "cuMemcpyHtoD_v2", SUCCESS);
	expect("cuMemcpyHtoD", 3020, PER_THREAD, "cuMemcpyHtoD_v2", SUCCESS); /* before per-thread streams */
	expect("cuMemcpyHtoD", 2000, PER_THREAD, "cuMemcpyHtoD", SUCCESS);    /* v1 has no variant */
	expect("cuLaunchKernel", 13000, PER_THREAD, "cuLaunchKernel_ptsz", SUCCESS);
	expect("cuLaunchKernel", 7000, PER_THREAD, "cuLaunchKernel_ptsz", SUCCESS);
	expect("cuLaunchKernel", 13000, DEFAULT, "cuLaunchKernel", SUCCESS);
	expect("cuLaunchKernelEx", 13000, PER_THREAD, "cuLaunchKernelEx_ptsz", SUCCESS);
	expect("cuStreamGetCaptureInfo", 11030, PER_THREAD, "cuStreamGetCaptureInfo_v2_ptsz", SUCCESS);
	expect("cuMemAlloc", 13000, PER_THREAD, "cuMemAlloc_v2", SUCCESS); /* no variant: the normal one */

	/* not found: unknown, empty, NULL, and ABI symbols (cuGetProcAddress takes base names) */
	expect("cuNoSuchFunction", 13000, DEFAULT, NULL, SYMBOL_NOT_FOUND);
	expect("", 13000, DEFAULT, NULL, SYMBOL_NOT_FOUND);
	expect(NULL, 13000, DEFAULT, NULL, SYMBOL_NOT_FOUND);
	expect("cuMemAlloc_v2", 13000, DEFAULT, NULL, SYMBOL_NOT_FOUND);
	expect("cuMemcpyHtoD_v2_ptds", 13000, PER_THREAD, NULL, SYMBOL_NOT_FOUND);
	expect("cuMem", 13000, DEFAULT, NULL, SYMBOL_NOT_FOUND);
	CHECK_EQ_INT(crc_cu_resolve("cuInit", 13000, 0, NULL), CRC_CU_cuInit); /* status may be NULL */

	/* every normal symbol is what its own base and version resolve to */
	for (int i = 0; i < CRC_CU_COUNT; i++) {
		const struct crc_cu_entry *e = &crc_cu_table[i];
		int status;

		if (e->pt != CRC_CU_PT_NONE)
			continue;
		CHECK_EQ_INT(crc_cu_resolve(e->base, e->version, LEGACY_STREAM, &status), i);
		CHECK_EQ_INT(status, SUCCESS);
	}
	printf("crc_cu_resolve: ok\n");
	return 0;
}
