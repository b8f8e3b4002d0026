/* Tensor maps (struct crc_tmap_req): the driver encodes them on the host; the reply is the map. */
#include <string.h>

#include "worker.h"

/* After cuda.h: define and call entry points by their ABI names. */
#include "crcuda/cuda_api_undef.h"

CUresult crc_raw_tmap(struct crc_session *s, const struct crc_call_hdr *h, const uint8_t *args, size_t len)
{
	const struct crc_tmap_req *r = (const void *)args;
	void *address;
	CUtensorMap map, *out;
	CUresult res;

	(void)h;
	if (len < sizeof(*r) || r->rank > CRC_TMAP_RANK_MAX)
		return CUDA_ERROR_INVALID_VALUE;
	address = (void *)(uintptr_t)r->global_address;
	switch (s->msg->op) {
	case CRC_CU_cuTensorMapEncodeTiled:
		res = CALL(cuTensorMapEncodeTiled, &map, (CUtensorMapDataType)r->data_type, r->rank, address,
			   r->global_dim, r->global_strides, r->box_dim, r->element_strides,
			   (CUtensorMapInterleave)r->interleave, (CUtensorMapSwizzle)r->swizzle,
			   (CUtensorMapL2promotion)r->l2_promotion, (CUtensorMapFloatOOBfill)r->oob_fill);
		break;
	case CRC_CU_cuTensorMapEncodeIm2col:
		res = CALL(cuTensorMapEncodeIm2col, &map, (CUtensorMapDataType)r->data_type, r->rank, address,
			   r->global_dim, r->global_strides, r->lower_corner, r->upper_corner,
			   r->channels_per_pixel, r->pixels_per_column, r->element_strides,
			   (CUtensorMapInterleave)r->interleave, (CUtensorMapSwizzle)r->swizzle,
			   (CUtensorMapL2promotion)r->l2_promotion, (CUtensorMapFloatOOBfill)r->oob_fill);
		break;
	case CRC_CU_cuTensorMapEncodeIm2colWide:
		res = CALL(cuTensorMapEncodeIm2colWide, &map, (CUtensorMapDataType)r->data_type, r->rank,
			   address, r->global_dim, r->global_strides, r->lower_width, r->upper_width,
			   r->channels_per_pixel, r->pixels_per_column, r->element_strides,
			   (CUtensorMapInterleave)r->interleave, (CUtensorMapIm2ColWideMode)r->wide_mode,
			   (CUtensorMapSwizzle)r->swizzle, (CUtensorMapL2promotion)r->l2_promotion,
			   (CUtensorMapFloatOOBfill)r->oob_fill);
		break;
	default:
		memcpy(&map, r->map, sizeof(map));
		res = CALL(cuTensorMapReplaceAddress, &map, address);
		break;
	}
	if (res != CUDA_SUCCESS)
		return res;
	out = crc_out(s, sizeof(*out));
	if (!out)
		return CUDA_ERROR_OUT_OF_MEMORY;
	memcpy(out, &map, sizeof(map));
	return CUDA_SUCCESS;
}
