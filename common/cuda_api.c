/* The driver API table from cuda_api.def, and the lookups libcrcuda's dlsym and cuGetProcAddress use. */
#include <cuda.h>
#include <stdlib.h>
#include <string.h>

#include "crcuda/cuda_api.h"

const struct crc_cu_entry crc_cu_table[CRC_CU_COUNT] = {
#define CRC_CU_API(sym, parent, base, version, policy, pt, ret, params, args)                                \
	[CRC_CU_##sym] = {#sym, #base, CRC_CU_##parent, version, CRC_CU_POLICY_##policy, CRC_CU_PT_##pt},
#include "crcuda/cuda_api.def"
#undef CRC_CU_API
};

_Static_assert(CU_GET_PROC_ADDRESS_SUCCESS == 0 && CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND == 1 &&
		   CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT == 2,
	       "CUdriverProcAddressQueryResult values are part of the driver ABI");

static int cmp_sym(const void *key, const void *elem)
{
	return strcmp(key, ((const struct crc_cu_entry *)elem)->sym);
}

int crc_cu_find(const char *sym)
{
	const struct crc_cu_entry *e;

	if (!sym)
		return -1;
	e = bsearch(sym, crc_cu_table, CRC_CU_COUNT, sizeof(crc_cu_table[0]), cmp_sym);
	return e ? (int)(e - crc_cu_table) : -1;
}

/* First index whose sym is >= key (CRC_CU_COUNT if none). */
static int lower_bound(const char *key)
{
	int lo = 0, hi = CRC_CU_COUNT;

	while (lo < hi) {
		int mid = lo + (hi - lo) / 2;

		if (strcmp(crc_cu_table[mid].sym, key) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

int crc_cu_resolve(const char *base, int cuda_version, unsigned long long flags, int *status)
{
	int best = -1, found = 0, i;
	size_t n;

	if (status)
		*status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
	if (!base || !*base)
		return -1;
	/* Every symbol of a base starts with the base name (base, base_v2, base_v2_ptds), and the symbols
	 * sharing a prefix are contiguous in byte order: scan that run. */
	n = strlen(base);
	for (i = lower_bound(base); i < CRC_CU_COUNT && !strncmp(crc_cu_table[i].sym, base, n); i++) {
		const struct crc_cu_entry *e = &crc_cu_table[i];

		if (e->pt != CRC_CU_PT_NONE || strcmp(e->base, base))
			continue;
		found = 1;
		if (e->version <= cuda_version && (best < 0 || e->version > crc_cu_table[best].version))
			best = i;
	}
	if (best < 0) {
		if (status && found)
			*status = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
		return -1;
	}
	if (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) {
		/* The variant is the parent's symbol plus _ptds or _ptsz: in the run that follows the parent
		 * and has its symbol as a prefix (not always right after it: cuLaunchKernel,
		 * cuLaunchKernelEx, cuLaunchKernelEx_ptsz, cuLaunchKernel_ptsz). */
		const char *psym = crc_cu_table[best].sym;
		size_t pn = strlen(psym);
		int parent = best;

		for (i = parent + 1; i < CRC_CU_COUNT && !strncmp(crc_cu_table[i].sym, psym, pn); i++) {
			if (crc_cu_table[i].parent == parent && crc_cu_table[i].version <= cuda_version) {
				best = i;
				break;
			}
		}
	}
	if (status)
		*status = CU_GET_PROC_ADDRESS_SUCCESS;
	return best;
}
