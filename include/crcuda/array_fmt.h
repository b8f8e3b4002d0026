/* CUDA arrays: the bytes of one element and the extent of an array, for the simulated device (which
 * lays arrays out in linear memory) and crcudad (which copies their contents into a checkpoint). */
#ifndef CRCUDA_ARRAY_FMT_H
#define CRCUDA_ARRAY_FMT_H

#include <cuda.h>
#include <stddef.h>

/* Bytes of one element of `channels` channels, 0 for the formats neither handles: block-compressed,
 * planar video and packed YUV formats. The *X1/X2/X4 formats name their channels themselves. */
static inline size_t crc_array_elem_bytes(CUarray_format format, unsigned channels)
{
	switch (format) {
	case CU_AD_FORMAT_UNSIGNED_INT8:
	case CU_AD_FORMAT_SIGNED_INT8:
		return channels;
	case CU_AD_FORMAT_UNSIGNED_INT16:
	case CU_AD_FORMAT_SIGNED_INT16:
	case CU_AD_FORMAT_HALF:
		return 2u * channels;
	case CU_AD_FORMAT_UNSIGNED_INT32:
	case CU_AD_FORMAT_SIGNED_INT32:
	case CU_AD_FORMAT_FLOAT:
		return 4u * channels;
	case CU_AD_FORMAT_UNORM_INT8X1:
	case CU_AD_FORMAT_SNORM_INT8X1:
		return 1;
	case CU_AD_FORMAT_UNORM_INT8X2:
	case CU_AD_FORMAT_SNORM_INT8X2:
	case CU_AD_FORMAT_UNORM_INT16X1:
	case CU_AD_FORMAT_SNORM_INT16X1:
		return 2;
	case CU_AD_FORMAT_UNORM_INT8X4:
	case CU_AD_FORMAT_SNORM_INT8X4:
	case CU_AD_FORMAT_UNORM_INT16X2:
	case CU_AD_FORMAT_SNORM_INT16X2:
	case CU_AD_FORMAT_UNORM_INT_101010_2:
		return 4;
	case CU_AD_FORMAT_UNORM_INT16X4:
	case CU_AD_FORMAT_SNORM_INT16X4:
		return 8;
	default:
		return 0;
	}
}

/* An array's box for a whole-array copy: bytes a row, rows, slices (a 1D array has one row, a 2D
 * array one slice; layers and cubemap faces are slices). */
struct crc_array_box {
	size_t row_bytes, rows, slices;
};

/* 0, or -1 for a format crc_array_elem_bytes does not know. */
static inline int crc_array_box_of(const CUDA_ARRAY3D_DESCRIPTOR *d, struct crc_array_box *b)
{
	size_t e = crc_array_elem_bytes(d->Format, d->NumChannels);

	if (!e || !d->Width)
		return -1;
	b->row_bytes = d->Width * e;
	b->rows = d->Height ? d->Height : 1;
	b->slices = d->Depth ? d->Depth : 1;
	return 0;
}

#endif
