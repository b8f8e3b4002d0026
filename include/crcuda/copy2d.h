/* A 2D or 3D copy (CUDA_MEMCPY2D, CUDA_MEMCPY3D) as 1D copies: one when both sides are contiguous, else one
 * per row. Shared by the simulated device and libcrcuda, which both have a 1D copy of any memory to build it
 * on. */
#ifndef CRCUDA_COPY2D_H
#define CRCUDA_COPY2D_H

#include <cuda.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "crcuda/array_fmt.h"

/* row(dst, src, bytes, last, arg): one 1D copy; last is true for the final one (a synchronous 2D copy
 * waits there). CUDA arrays are not handled here: CUDA_ERROR_NOT_SUPPORTED. */
typedef CUresult (*crc_copy_row_fn)(uint64_t dst, uint64_t src, size_t bytes, bool last, void *arg);

static inline uint64_t crc_copy2d_side(CUmemorytype type, const void *host, CUdeviceptr dev, size_t x,
				       size_t y, size_t pitch)
{
	return (type == CU_MEMORYTYPE_HOST ? (uintptr_t)host : dev) + x + y * pitch;
}

static inline CUresult crc_copy2d_rows(const CUDA_MEMCPY2D *p, crc_copy_row_fn row, void *arg)
{
	uint64_t src, dst;
	CUresult res = CUDA_SUCCESS;

	if (!p)
		return CUDA_ERROR_INVALID_VALUE;
	if (p->srcMemoryType == CU_MEMORYTYPE_ARRAY || p->dstMemoryType == CU_MEMORYTYPE_ARRAY)
		return CUDA_ERROR_NOT_SUPPORTED;
	if (p->Height > 1 && (p->srcPitch < p->WidthInBytes || p->dstPitch < p->WidthInBytes))
		return CUDA_ERROR_INVALID_VALUE;
	src =
	    crc_copy2d_side(p->srcMemoryType, p->srcHost, p->srcDevice, p->srcXInBytes, p->srcY, p->srcPitch);
	dst =
	    crc_copy2d_side(p->dstMemoryType, p->dstHost, p->dstDevice, p->dstXInBytes, p->dstY, p->dstPitch);
	if (!p->WidthInBytes || !p->Height)
		return CUDA_SUCCESS;
	if (p->Height == 1 || (p->srcPitch == p->WidthInBytes && p->dstPitch == p->WidthInBytes))
		return row(dst, src, p->WidthInBytes * p->Height, true, arg);
	for (size_t r = 0; r < p->Height && res == CUDA_SUCCESS; r++)
		res = row(dst + r * p->dstPitch, src + r * p->srcPitch, p->WidthInBytes, r + 1 == p->Height,
			  arg);
	return res;
}

/* cuMemcpyBatchAsync: its checks, then each copy in order (the stream's caller makes them async).
 * The attributes only permit more freedom than copies in order give, so they are checked, not used.
 * *fail (when not NULL): the index of the copy that failed, or SIZE_MAX. */
static inline CUresult crc_copy_batch(const CUdeviceptr *dsts, const CUdeviceptr *srcs, const size_t *sizes,
				      size_t count, const CUmemcpyAttributes *attrs, const size_t *idxs,
				      size_t nattrs, CUstream stream, crc_copy_row_fn row, void *arg,
				      size_t *fail)
{
	CUresult res = CUDA_SUCCESS;

	if (fail)
		*fail = (size_t)-1;
	if (!count || !dsts || !srcs || !sizes || !nattrs || !attrs || !idxs || idxs[0] || nattrs > count ||
	    stream == CU_STREAM_LEGACY)
		return CUDA_ERROR_INVALID_VALUE;
	for (size_t i = 1; i < nattrs; i++)
		if (idxs[i] <= idxs[i - 1] || idxs[i] >= count)
			return CUDA_ERROR_INVALID_VALUE;
	for (size_t i = 0; i < count && res == CUDA_SUCCESS; i++) {
		res = sizes[i] ? row(dsts[i], srcs[i], sizes[i], true, arg) : CUDA_SUCCESS;
		if (res != CUDA_SUCCESS && fail)
			*fail = i;
	}
	return res;
}

/* The same for a 3D copy (CUDA_MEMCPY3D): slices of rows, or one copy when both sides are contiguous. */
static inline CUresult crc_copy3d_rows(const CUDA_MEMCPY3D *p, crc_copy_row_fn row, void *arg)
{
	uint64_t src, dst;
	size_t sh, dh, depth, height;
	CUresult res = CUDA_SUCCESS;

	if (!p)
		return CUDA_ERROR_INVALID_VALUE;
	if (p->srcMemoryType == CU_MEMORYTYPE_ARRAY || p->dstMemoryType == CU_MEMORYTYPE_ARRAY)
		return CUDA_ERROR_NOT_SUPPORTED;
	height = p->Height ? p->Height : 1;
	depth = p->Depth ? p->Depth : 1;
	sh = p->srcHeight ? p->srcHeight : height;
	dh = p->dstHeight ? p->dstHeight : height;
	if ((height > 1 || depth > 1) && (p->srcPitch < p->WidthInBytes || p->dstPitch < p->WidthInBytes))
		return CUDA_ERROR_INVALID_VALUE;
	if (depth > 1 && (sh < height || dh < height))
		return CUDA_ERROR_INVALID_VALUE;
	src = crc_copy2d_side(p->srcMemoryType, p->srcHost, p->srcDevice, p->srcXInBytes,
			      p->srcY + p->srcZ * sh, p->srcPitch);
	dst = crc_copy2d_side(p->dstMemoryType, p->dstHost, p->dstDevice, p->dstXInBytes,
			      p->dstY + p->dstZ * dh, p->dstPitch);
	if (!p->WidthInBytes)
		return CUDA_SUCCESS;
	if ((height == 1 || (p->srcPitch == p->WidthInBytes && p->dstPitch == p->WidthInBytes)) &&
	    (depth == 1 || (sh == height && dh == height)))
		return row(dst, src, p->WidthInBytes * height * depth, true, arg);
	for (size_t z = 0; z < depth && res == CUDA_SUCCESS; z++)
		for (size_t r = 0; r < height && res == CUDA_SUCCESS; r++)
			res = row(dst + (z * dh + r) * p->dstPitch, src + (z * sh + r) * p->srcPitch,
				  p->WidthInBytes, z + 1 == depth && r + 1 == height, arg);
	return res;
}

/* The bytes a side of a 3D copy spans from its box's first byte: depth slices of rows rows of pitch
 * bytes, the last row width bytes. */
static inline size_t crc_copy3d_extent(size_t width, size_t height, size_t depth, size_t pitch, size_t rows)
{
	return (depth - 1) * rows * pitch + (height - 1) * pitch + width;
}

/* A 2D copy as the 3D copy of one slice. */
static inline CUDA_MEMCPY3D crc_copy2d_as_3d(const CUDA_MEMCPY2D *p)
{
	return (CUDA_MEMCPY3D){.srcXInBytes = p->srcXInBytes,
			       .srcY = p->srcY,
			       .srcMemoryType = p->srcMemoryType,
			       .srcHost = p->srcHost,
			       .srcDevice = p->srcDevice,
			       .srcArray = p->srcArray,
			       .srcPitch = p->srcPitch,
			       .dstXInBytes = p->dstXInBytes,
			       .dstY = p->dstY,
			       .dstMemoryType = p->dstMemoryType,
			       .dstHost = p->dstHost,
			       .dstDevice = p->dstDevice,
			       .dstArray = p->dstArray,
			       .dstPitch = p->dstPitch,
			       .WidthInBytes = p->WidthInBytes,
			       .Height = p->Height,
			       .Depth = 1};
}

/* A peer 3D copy as a 3D copy: unified addressing names each side's device (arrays carry theirs). */
static inline CUDA_MEMCPY3D crc_copy3d_of_peer(const CUDA_MEMCPY3D_PEER *p)
{
	return (CUDA_MEMCPY3D){.srcXInBytes = p->srcXInBytes,
			       .srcY = p->srcY,
			       .srcZ = p->srcZ,
			       .srcLOD = p->srcLOD,
			       .srcMemoryType = p->srcMemoryType,
			       .srcHost = p->srcHost,
			       .srcDevice = p->srcDevice,
			       .srcArray = p->srcArray,
			       .srcPitch = p->srcPitch,
			       .srcHeight = p->srcHeight,
			       .dstXInBytes = p->dstXInBytes,
			       .dstY = p->dstY,
			       .dstZ = p->dstZ,
			       .dstLOD = p->dstLOD,
			       .dstMemoryType = p->dstMemoryType,
			       .dstHost = p->dstHost,
			       .dstDevice = p->dstDevice,
			       .dstArray = p->dstArray,
			       .dstPitch = p->dstPitch,
			       .dstHeight = p->dstHeight,
			       .WidthInBytes = p->WidthInBytes,
			       .Height = p->Height,
			       .Depth = p->Depth};
}

/* An array's descriptor (cuArray3DGetDescriptor as the caller reaches it). */
typedef CUresult crc_array_descr_fn(CUDA_ARRAY3D_DESCRIPTOR *d, CUarray array);

/* One side of a cuMemcpy3DBatchAsync operation into a 3D copy's fields; elem: bytes per element. */
static inline CUresult crc_batch_side(const CUmemcpy3DOperand *o, const CUextent3D *e, size_t elem,
				      CUmemorytype *type, CUdeviceptr *dev, CUarray *array, size_t *x,
				      size_t *y, size_t *z, size_t *pitch, size_t *height)
{
	switch (o->type) {
	case CU_MEMCPY_OPERAND_TYPE_POINTER:
		if ((o->op.ptr.rowLength && o->op.ptr.rowLength < e->width) ||
		    (o->op.ptr.layerHeight && o->op.ptr.layerHeight < e->height))
			return CUDA_ERROR_INVALID_VALUE;
		*type = CU_MEMORYTYPE_UNIFIED;
		*dev = o->op.ptr.ptr;
		*pitch = (o->op.ptr.rowLength ? o->op.ptr.rowLength : e->width) * elem;
		*height = o->op.ptr.layerHeight ? o->op.ptr.layerHeight : e->height;
		return CUDA_SUCCESS;
	case CU_MEMCPY_OPERAND_TYPE_ARRAY:
		*type = CU_MEMORYTYPE_ARRAY;
		*array = o->op.array.array;
		*x = o->op.array.offset.x * elem;
		*y = o->op.array.offset.y;
		*z = o->op.array.offset.z;
		return CUDA_SUCCESS;
	default:
		return CUDA_ERROR_INVALID_VALUE;
	}
}

/* One operation of cuMemcpy3DBatchAsync as a 3D copy. Extents count elements: a byte between
 * pointers, the array's element where a side is an array (both arrays' the same). */
static inline CUresult crc_copy3d_of_batch_op(const CUDA_MEMCPY3D_BATCH_OP *op, crc_array_descr_fn *descr,
					      CUDA_MEMCPY3D *out)
{
	const CUmemcpy3DOperand *sides[2] = {&op->src, &op->dst};
	size_t elem = 0;
	CUresult res;

	if (!op->extent.width || !op->extent.height || !op->extent.depth ||
	    op->srcAccessOrder < CU_MEMCPY_SRC_ACCESS_ORDER_STREAM ||
	    op->srcAccessOrder > CU_MEMCPY_SRC_ACCESS_ORDER_ANY)
		return CUDA_ERROR_INVALID_VALUE;
	for (int k = 0; k < 2; k++) {
		CUDA_ARRAY3D_DESCRIPTOR d;
		size_t e;

		if (sides[k]->type != CU_MEMCPY_OPERAND_TYPE_ARRAY)
			continue;
		res = descr(&d, sides[k]->op.array.array);
		if (res != CUDA_SUCCESS)
			return res;
		e = crc_array_elem_bytes(d.Format, d.NumChannels);
		if (!e || (elem && e != elem))
			return CUDA_ERROR_INVALID_VALUE;
		elem = e;
	}
	elem = elem ? elem : 1;
	*out = (CUDA_MEMCPY3D){
	    .WidthInBytes = op->extent.width * elem, .Height = op->extent.height, .Depth = op->extent.depth};
	res =
	    crc_batch_side(&op->src, &op->extent, elem, &out->srcMemoryType, &out->srcDevice, &out->srcArray,
			   &out->srcXInBytes, &out->srcY, &out->srcZ, &out->srcPitch, &out->srcHeight);
	if (res == CUDA_SUCCESS)
		res = crc_batch_side(&op->dst, &op->extent, elem, &out->dstMemoryType, &out->dstDevice,
				     &out->dstArray, &out->dstXInBytes, &out->dstY, &out->dstZ,
				     &out->dstPitch, &out->dstHeight);
	return res;
}

/* cuMemcpy3DBatchAsync: every operation checked, then each as a 3D copy in order (copy3d: the
 * caller's, on the stream). *fail (when not NULL): the failed operation's index, or SIZE_MAX. */
static inline CUresult crc_copy3d_batch(size_t n, const CUDA_MEMCPY3D_BATCH_OP *ops, unsigned long long flags,
					CUstream stream, crc_array_descr_fn *descr,
					CUresult (*copy3d)(const CUDA_MEMCPY3D *p, void *arg), void *arg,
					size_t *fail)
{
	CUDA_MEMCPY3D c;
	CUresult res = CUDA_SUCCESS;

	if (fail)
		*fail = (size_t)-1;
	if (!n || !ops || flags || stream == CU_STREAM_LEGACY)
		return CUDA_ERROR_INVALID_VALUE;
	for (size_t pass = 0; pass < 2; pass++) {
		for (size_t i = 0; i < n && res == CUDA_SUCCESS; i++) {
			res = crc_copy3d_of_batch_op(&ops[i], descr, &c);
			if (res == CUDA_SUCCESS && pass)
				res = copy3d(&c, arg);
			if (res != CUDA_SUCCESS && fail)
				*fail = i;
		}
	}
	return res;
}

static inline bool crc_copy3d_has_array(const CUDA_MEMCPY3D *p)
{
	return p && (p->srcMemoryType == CU_MEMORYTYPE_ARRAY || p->dstMemoryType == CU_MEMORYTYPE_ARRAY);
}

/* One end of a 1D copy with an array (cuMemcpyHtoA, AtoH, AtoD, DtoA, AtoA): its memory, and a byte
 * offset into the array's first row. */
struct crc_copy_end {
	CUmemorytype type;
	void *host;
	CUdeviceptr dev;
	CUarray array;
	size_t offset;
};

static inline CUDA_MEMCPY3D crc_copy3d_1d(struct crc_copy_end dst, struct crc_copy_end src, size_t bytes)
{
	return (CUDA_MEMCPY3D){.srcXInBytes = src.type == CU_MEMORYTYPE_ARRAY ? src.offset : 0,
			       .srcMemoryType = src.type,
			       .srcHost = src.host,
			       .srcDevice = src.dev + (src.type == CU_MEMORYTYPE_DEVICE ? src.offset : 0),
			       .srcArray = src.array,
			       .dstXInBytes = dst.type == CU_MEMORYTYPE_ARRAY ? dst.offset : 0,
			       .dstMemoryType = dst.type,
			       .dstHost = dst.host,
			       .dstDevice = dst.dev + (dst.type == CU_MEMORYTYPE_DEVICE ? dst.offset : 0),
			       .dstArray = dst.array,
			       .WidthInBytes = bytes,
			       .Height = 1,
			       .Depth = 1};
}

#endif
