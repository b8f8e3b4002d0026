/* What a managed allocation was told (cuMemAdvise) and where it was last prefetched, and the answers
 * of cuMemRangeGetAttribute from that: kept per allocation (a range inside it answers as the whole).
 * Shared by the simulated device and libcrcuda, neither of which migrates pages by advice: the
 * advice is remembered for the queries. Also the shape checks of the batch prefetches and discards. */
#ifndef CRCUDA_UVM_ADVICE_H
#define CRCUDA_UVM_ADVICE_H

#include <cuda.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

struct crc_uvm_advice {
	int read_mostly;
	int preferred;	      /* a device ordinal, CU_DEVICE_CPU or CU_DEVICE_INVALID */
	int last_prefetch;    /* the same */
	uint32_t accessed_by; /* device ordinals (bit d), bit 31: the CPU */
};

static inline void crc_uvm_advice_init(struct crc_uvm_advice *a)
{
	*a = (struct crc_uvm_advice){.preferred = CU_DEVICE_INVALID, .last_prefetch = CU_DEVICE_INVALID};
}

/* A location as the v1 calls name it: a device ordinal or CU_DEVICE_CPU; -3 for one that is neither. */
static inline int crc_uvm_location(CUmemLocation l)
{
	switch (l.type) {
	case CU_MEM_LOCATION_TYPE_DEVICE:
		return l.id >= 0 && l.id < 31 ? l.id : -3;
	case CU_MEM_LOCATION_TYPE_HOST:
	case CU_MEM_LOCATION_TYPE_HOST_NUMA:
	case CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT:
		return CU_DEVICE_CPU;
	default:
		return -3;
	}
}

/* A batch of prefetches or discards (cuMemPrefetchBatchAsync, cuMemDiscardBatchAsync,
 * cuMemDiscardAndPrefetchBatchAsync): its shape, CUDA_SUCCESS or INVALID_VALUE. With locations (locs
 * non-NULL expected), locs[k] applies to operations idxs[k] .. idxs[k + 1] - 1: idxs starts at 0 and
 * rises, each below count, and there are at most count of them. */
static inline CUresult crc_uvm_batch_check(const CUdeviceptr *dptrs, const size_t *sizes, size_t count,
					   const CUmemLocation *locs, const size_t *idxs, size_t nlocs,
					   unsigned long long flags, bool with_locations)
{
	if (!dptrs || !sizes || !count || flags)
		return CUDA_ERROR_INVALID_VALUE;
	if (!with_locations)
		return CUDA_SUCCESS;
	if (!locs || !idxs || !nlocs || nlocs > count || idxs[0] != 0)
		return CUDA_ERROR_INVALID_VALUE;
	for (size_t k = 1; k < nlocs; k++)
		if (idxs[k] <= idxs[k - 1] || idxs[k] >= count)
			return CUDA_ERROR_INVALID_VALUE;
	return CUDA_SUCCESS;
}

/* Where operation i of a checked batch goes. */
static inline CUmemLocation crc_uvm_batch_location(size_t i, const CUmemLocation *locs, const size_t *idxs,
						   size_t nlocs)
{
	size_t k = nlocs - 1;

	while (k > 0 && idxs[k] > i)
		k--;
	return locs[k];
}

/* device: an ordinal below ndev, or CU_DEVICE_CPU. */
static inline CUresult crc_uvm_advise(struct crc_uvm_advice *a, CUmem_advise advice, int device, int ndev)
{
	uint32_t bit = device == CU_DEVICE_CPU ? 1u << 31 : 1u << (device & 30);
	bool valid = device == CU_DEVICE_CPU || (device >= 0 && device < ndev && device < 31);

	switch (advice) {
	case CU_MEM_ADVISE_SET_READ_MOSTLY:
		a->read_mostly = 1;
		return CUDA_SUCCESS;
	case CU_MEM_ADVISE_UNSET_READ_MOSTLY:
		a->read_mostly = 0;
		return CUDA_SUCCESS;
	case CU_MEM_ADVISE_SET_PREFERRED_LOCATION:
		if (!valid)
			return CUDA_ERROR_INVALID_DEVICE;
		a->preferred = device;
		return CUDA_SUCCESS;
	case CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION:
		a->preferred = CU_DEVICE_INVALID;
		return CUDA_SUCCESS;
	case CU_MEM_ADVISE_SET_ACCESSED_BY:
	case CU_MEM_ADVISE_UNSET_ACCESSED_BY:
		if (!valid)
			return CUDA_ERROR_INVALID_DEVICE;
		if (advice == CU_MEM_ADVISE_SET_ACCESSED_BY)
			a->accessed_by |= bit;
		else
			a->accessed_by &= ~bit;
		return CUDA_SUCCESS;
	default:
		return CUDA_ERROR_INVALID_VALUE;
	}
}

static inline CUresult crc_uvm_prefetch(struct crc_uvm_advice *a, int device, int ndev)
{
	if (device != CU_DEVICE_CPU && (device < 0 || device >= ndev))
		return CUDA_ERROR_INVALID_DEVICE;
	a->last_prefetch = device;
	return CUDA_SUCCESS;
}

static inline CUresult crc_uvm_put_int(void *data, size_t size, int v)
{
	if (size < sizeof(int) || size % sizeof(int))
		return CUDA_ERROR_INVALID_VALUE;
	memcpy(data, &v, sizeof(v));
	return CUDA_SUCCESS;
}

static inline int crc_uvm_location_type(int device)
{
	return device == CU_DEVICE_CPU	     ? CU_MEM_LOCATION_TYPE_HOST
	       : device == CU_DEVICE_INVALID ? CU_MEM_LOCATION_TYPE_INVALID
					     : CU_MEM_LOCATION_TYPE_DEVICE;
}

static inline CUresult crc_uvm_range_attribute(const struct crc_uvm_advice *a, void *data, size_t size,
					       CUmem_range_attribute attr)
{
	if (!data)
		return CUDA_ERROR_INVALID_VALUE;
	switch (attr) {
	case CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY:
		return crc_uvm_put_int(data, size, a->read_mostly);
	case CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION:
		return crc_uvm_put_int(data, size, a->preferred);
	case CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION:
		return crc_uvm_put_int(data, size, a->last_prefetch);
	case CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_TYPE:
		return crc_uvm_put_int(data, size, crc_uvm_location_type(a->preferred));
	case CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_ID:
		return crc_uvm_put_int(data, size, a->preferred == CU_DEVICE_CPU ? 0 : a->preferred);
	case CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_TYPE:
		return crc_uvm_put_int(data, size, crc_uvm_location_type(a->last_prefetch));
	case CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_ID:
		return crc_uvm_put_int(data, size, a->last_prefetch == CU_DEVICE_CPU ? 0 : a->last_prefetch);
	case CU_MEM_RANGE_ATTRIBUTE_ACCESSED_BY: {
		/* The devices (and the CPU) with the advice, then CU_DEVICE_INVALID to the end. */
		int *out = data;
		size_t n = size / sizeof(int), k = 0;

		if (!n || size % sizeof(int))
			return CUDA_ERROR_INVALID_VALUE;
		if ((a->accessed_by >> 31) && k < n)
			out[k++] = CU_DEVICE_CPU;
		for (int d = 0; d < 31 && k < n; d++)
			if (a->accessed_by >> d & 1)
				out[k++] = d;
		while (k < n)
			out[k++] = CU_DEVICE_INVALID;
		return CUDA_SUCCESS;
	}
	default:
		return CUDA_ERROR_INVALID_VALUE;
	}
}

#endif
