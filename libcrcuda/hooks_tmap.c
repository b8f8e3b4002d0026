/* Hooks: tensor maps (TMA descriptors). The driver computes a CUtensorMap on the host from its
 * arguments; the daemon's driver does it here (struct crc_tmap_req), and the map names a device address,
 * which is the same for the application and the daemon, before and after a restore. */
#include <string.h>

#include "client.h"
#include "crcuda/proto.h"
#include "hooks.h"

_Static_assert(sizeof(CUtensorMap) == CRC_TMAP_BYTES, "a CUtensorMap is 128 bytes");

/* The arrays every encode has: rank globalDim, rank - 1 globalStrides, rank elementStrides. */
static CUresult tmap_common(struct crc_tmap_req *r, CUtensorMapDataType type, cuuint32_t rank, void *address,
			    const cuuint64_t *dims, const cuuint64_t *strides,
			    const cuuint32_t *element_strides, CUtensorMapInterleave interleave,
			    CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2,
			    CUtensorMapFloatOOBfill oob)
{
	if (!rank || rank > CRC_TMAP_RANK_MAX || !dims || !element_strides || (rank > 1 && !strides))
		return CUDA_ERROR_INVALID_VALUE;
	*r = (struct crc_tmap_req){.global_address = (uintptr_t)address,
				   .data_type = (uint32_t)type,
				   .rank = rank,
				   .interleave = (uint32_t)interleave,
				   .swizzle = (uint32_t)swizzle,
				   .l2_promotion = (uint32_t)l2,
				   .oob_fill = (uint32_t)oob};
	memcpy(r->global_dim, dims, rank * sizeof(*dims));
	if (rank > 1)
		memcpy(r->global_strides, strides, (rank - 1) * sizeof(*strides));
	memcpy(r->element_strides, element_strides, rank * sizeof(*element_strides));
	return CUDA_SUCCESS;
}

static CUresult tmap_call(uint16_t op, const struct crc_tmap_req *r, CUtensorMap *out)
{
	return out ? crc_rpc(op, r, sizeof(*r), out, sizeof(*out)) : CUDA_ERROR_INVALID_VALUE;
}

CUresult crc_hook_cuTensorMapEncodeTiled(CUtensorMap *tensorMap, CUtensorMapDataType tensorDataType,
					 cuuint32_t tensorRank, void *globalAddress,
					 const cuuint64_t *globalDim, const cuuint64_t *globalStrides,
					 const cuuint32_t *boxDim, const cuuint32_t *elementStrides,
					 CUtensorMapInterleave interleave, CUtensorMapSwizzle swizzle,
					 CUtensorMapL2promotion l2Promotion, CUtensorMapFloatOOBfill oobFill)
{
	struct crc_tmap_req r;
	CUresult res = tmap_common(&r, tensorDataType, tensorRank, globalAddress, globalDim, globalStrides,
				   elementStrides, interleave, swizzle, l2Promotion, oobFill);

	if (res != CUDA_SUCCESS || !boxDim)
		return res != CUDA_SUCCESS ? res : CUDA_ERROR_INVALID_VALUE;
	memcpy(r.box_dim, boxDim, tensorRank * sizeof(*boxDim));
	return tmap_call(CRC_CU_cuTensorMapEncodeTiled, &r, tensorMap);
}

CUresult crc_hook_cuTensorMapEncodeIm2col(CUtensorMap *tensorMap, CUtensorMapDataType tensorDataType,
					  cuuint32_t tensorRank, void *globalAddress,
					  const cuuint64_t *globalDim, const cuuint64_t *globalStrides,
					  const int *pixelBoxLowerCorner, const int *pixelBoxUpperCorner,
					  cuuint32_t channelsPerPixel, cuuint32_t pixelsPerColumn,
					  const cuuint32_t *elementStrides, CUtensorMapInterleave interleave,
					  CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2Promotion,
					  CUtensorMapFloatOOBfill oobFill)
{
	struct crc_tmap_req r;
	CUresult res = tmap_common(&r, tensorDataType, tensorRank, globalAddress, globalDim, globalStrides,
				   elementStrides, interleave, swizzle, l2Promotion, oobFill);

	if (res != CUDA_SUCCESS)
		return res;
	/* The corners have a coordinate per spatial dimension: rank - 2 of them. */
	if (tensorRank < 3 || !pixelBoxLowerCorner || !pixelBoxUpperCorner)
		return CUDA_ERROR_INVALID_VALUE;
	memcpy(r.lower_corner, pixelBoxLowerCorner, (tensorRank - 2) * sizeof(int));
	memcpy(r.upper_corner, pixelBoxUpperCorner, (tensorRank - 2) * sizeof(int));
	r.channels_per_pixel = channelsPerPixel;
	r.pixels_per_column = pixelsPerColumn;
	return tmap_call(CRC_CU_cuTensorMapEncodeIm2col, &r, tensorMap);
}

CUresult crc_hook_cuTensorMapEncodeIm2colWide(
    CUtensorMap *tensorMap, CUtensorMapDataType tensorDataType, cuuint32_t tensorRank, void *globalAddress,
    const cuuint64_t *globalDim, const cuuint64_t *globalStrides, int pixelBoxLowerCornerWidth,
    int pixelBoxUpperCornerWidth, cuuint32_t channelsPerPixel, cuuint32_t pixelsPerColumn,
    const cuuint32_t *elementStrides, CUtensorMapInterleave interleave, CUtensorMapIm2ColWideMode mode,
    CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2Promotion, CUtensorMapFloatOOBfill oobFill)
{
	struct crc_tmap_req r;
	CUresult res = tmap_common(&r, tensorDataType, tensorRank, globalAddress, globalDim, globalStrides,
				   elementStrides, interleave, swizzle, l2Promotion, oobFill);

	if (res != CUDA_SUCCESS)
		return res;
	r.lower_width = pixelBoxLowerCornerWidth;
	r.upper_width = pixelBoxUpperCornerWidth;
	r.channels_per_pixel = channelsPerPixel;
	r.pixels_per_column = pixelsPerColumn;
	r.wide_mode = (uint32_t)mode;
	return tmap_call(CRC_CU_cuTensorMapEncodeIm2colWide, &r, tensorMap);
}

CUresult crc_hook_cuTensorMapReplaceAddress(CUtensorMap *tensorMap, void *globalAddress)
{
	struct crc_tmap_req r = {.global_address = (uintptr_t)globalAddress};

	if (!tensorMap)
		return CUDA_ERROR_INVALID_VALUE;
	memcpy(r.map, tensorMap, sizeof(r.map));
	return tmap_call(CRC_CU_cuTensorMapReplaceAddress, &r, tensorMap);
}
