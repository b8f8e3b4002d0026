/* Hooks: CUDA arrays, mipmapped arrays, texture and surface objects, and copies with arrays.
 *
 * Arrays and mipmapped arrays are virtual handles made in the daemon (forwarded as they are). A copy
 * with an array on either side is one request per tile (struct crc_array_copy_req): device memory and
 * page-locked memory the daemon shares go by address; pageable memory travels packed in the request
 * (to an array) or the reply (from one), a tile of whole rows at a time. Texture and surface objects
 * are the driver's own values, since kernels take them as parameters; the daemon keeps their
 * descriptions so that a restore makes them again with the same values. */
#define LOG_PREFIX "libcrcuda: "
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "crcuda/copy2d.h"
#include "crcuda/log.h"
#include "crcuda/proto.h"
#include "hooks.h"

/* ---- arrays and mipmapped arrays: made and destroyed in the daemon -------------------------------- */
CUresult crc_hook_cuArrayCreate_v2(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR *pAllocateArray)
{
	return crc_fwd_cuArrayCreate_v2(pHandle, pAllocateArray);
}

CUresult crc_hook_cuArrayCreate(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR_v1 *pAllocateArray)
{
	return crc_fwd_cuArrayCreate(pHandle, pAllocateArray);
}

CUresult crc_hook_cuArray3DCreate_v2(CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *pAllocateArray)
{
	return crc_fwd_cuArray3DCreate_v2(pHandle, pAllocateArray);
}

CUresult crc_hook_cuArray3DCreate(CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR_v1 *pAllocateArray)
{
	return crc_fwd_cuArray3DCreate(pHandle, pAllocateArray);
}

CUresult crc_hook_cuArrayDestroy(CUarray hArray)
{
	return crc_fwd_cuArrayDestroy(hArray);
}

CUresult crc_hook_cuMipmappedArrayCreate(CUmipmappedArray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *pDesc,
					 unsigned int numMipmapLevels)
{
	return crc_fwd_cuMipmappedArrayCreate(pHandle, pDesc, numMipmapLevels);
}

CUresult crc_hook_cuMipmappedArrayDestroy(CUmipmappedArray hMipmappedArray)
{
	return crc_fwd_cuMipmappedArrayDestroy(hMipmappedArray);
}

CUresult crc_hook_cuMipmappedArrayGetLevel(CUarray *pLevelArray, CUmipmappedArray hMipmappedArray,
					   unsigned int level)
{
	return crc_fwd_cuMipmappedArrayGetLevel(pLevelArray, hMipmappedArray, level);
}

CUresult crc_hook_cuMipmappedArrayGetMemoryRequirements(CUDA_ARRAY_MEMORY_REQUIREMENTS *req,
							CUmipmappedArray mipmap, CUdevice device)
{
	return crc_fwd_cuMipmappedArrayGetMemoryRequirements(req, mipmap, device);
}

CUresult crc_hook_cuMipmappedArrayGetSparseProperties(CUDA_ARRAY_SPARSE_PROPERTIES *props,
						      CUmipmappedArray mipmap)
{
	return crc_fwd_cuMipmappedArrayGetSparseProperties(props, mipmap);
}

/* ---- sparse arrays: tiles mapped to and unmapped from VMM memory --------------------------------- */
/* The list goes as it is (its handles and device mask are translated in the daemon), in as many
 * requests as the channel needs: the driver applies the entries in order either way. */
CUresult crc_hook_cuMemMapArrayAsync(CUarrayMapInfo *mapInfoList, unsigned int count, CUstream hStream)
{
	size_t max = crc_chan_max_payload(&crc_client.chan) - sizeof(struct crc_call_hdr) -
		     sizeof(struct crc_array_map_req),
	       per = max / sizeof(CUarrayMapInfo);
	CUresult res = CUDA_SUCCESS;
	uint8_t *buf;

	if (!__atomic_load_n(&crc_initialized, __ATOMIC_ACQUIRE))
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!mapInfoList && count)
		return CUDA_ERROR_INVALID_VALUE;
	per = per < count ? per : count;
	buf = malloc(sizeof(struct crc_array_map_req) + (per ? per : 1) * sizeof(CUarrayMapInfo));
	if (!buf)
		return CUDA_ERROR_OUT_OF_MEMORY;
	for (unsigned done = 0; res == CUDA_SUCCESS && (done < count || !count);) {
		struct crc_array_map_req *r = (struct crc_array_map_req *)buf;
		unsigned n = count - done < per ? count - done : (unsigned)per;

		*r = (struct crc_array_map_req){.stream = (uintptr_t)hStream, .count = n};
		if (n)
			memcpy(r + 1, mapInfoList + done, n * sizeof(CUarrayMapInfo));
		res = crc_rpc(CRC_CU_cuMemMapArrayAsync, r, sizeof(*r) + n * sizeof(CUarrayMapInfo), NULL, 0);
		done += n;
		if (!count)
			break;
	}
	free(buf);
	return res;
}

/* ---- copies with arrays ---------------------------------------------------------------------------- */
/* One side of a CUDA_MEMCPY3D as the daemon must see it. Host and unified sides are located (pinned,
 * device or pageable) over the bytes the box touches. */
static CUresult side_of(CUmemorytype type, const void *host, CUdeviceptr dev, CUarray array, size_t x,
			size_t y, size_t z, size_t pitch, size_t rows, const CUDA_MEMCPY3D *p,
			struct crc_array_side *out)
{
	size_t height = p->Height ? p->Height : 1, depth = p->Depth ? p->Depth : 1;

	*out = (struct crc_array_side){0};
	if (type == CU_MEMORYTYPE_ARRAY) {
		if (!array)
			return CUDA_ERROR_INVALID_VALUE;
		*out = (struct crc_array_side){
		    .loc = CRC_LOC_ARRAY, .addr = (uintptr_t)array, .x = x, .y = y, .z = z};
		return CUDA_SUCCESS;
	}
	if (type != CU_MEMORYTYPE_HOST && type != CU_MEMORYTYPE_DEVICE && type != CU_MEMORYTYPE_UNIFIED)
		return CUDA_ERROR_INVALID_VALUE;
	if (!pitch && height == 1 && depth == 1)
		pitch = p->WidthInBytes;
	rows = rows ? rows : height;
	if (!crc_copy2d_side(type, host, dev, 0, 0, 0) || pitch < p->WidthInBytes ||
	    (depth > 1 && rows < height))
		return CUDA_ERROR_INVALID_VALUE;
	out->addr = crc_copy2d_side(type, host, dev, x, y + z * rows, pitch);
	out->pitch = pitch;
	out->rows = rows;
	out->loc =
	    type == CU_MEMORYTYPE_DEVICE
		? CRC_LOC_DEVICE
		: crc_locate(out->addr, crc_copy3d_extent(p->WidthInBytes, height, depth, pitch, rows));
	return CUDA_SUCCESS;
}

/* The side moved to the tile at (x bytes, row y, slice z) of the box. */
static struct crc_array_side side_at(const struct crc_array_side *s, size_t x, size_t y, size_t z)
{
	struct crc_array_side t = *s;

	if (s->loc == CRC_LOC_ARRAY) {
		t.x += x;
		t.y += y;
		t.z += z;
	} else {
		t.addr += x + (y + z * s->rows) * s->pitch;
	}
	return t;
}

/* A copy with an array on one side or both: one request, or tiles of whole rows (of columns when a
 * row alone is too large) when pageable memory travels with it. */
static CUresult array_copy(const CUDA_MEMCPY3D *p, CUstream stream, bool async)
{
	struct crc_array_copy_req r = {.stream = (uintptr_t)stream};
	uint16_t op = async ? CRC_CU_cuMemcpy3DAsync_v2 : CRC_CU_cuMemcpy3D_v2;
	size_t height = p->Height ? p->Height : 1, depth = p->Depth ? p->Depth : 1, max, tw, th;
	bool in, out;
	uint8_t *buf;
	CUresult res;

	res = side_of(p->srcMemoryType, p->srcHost, p->srcDevice, p->srcArray, p->srcXInBytes, p->srcY,
		      p->srcZ, p->srcPitch, p->srcHeight, p, &r.src);
	if (res == CUDA_SUCCESS)
		res = side_of(p->dstMemoryType, p->dstHost, p->dstDevice, p->dstArray, p->dstXInBytes,
			      p->dstY, p->dstZ, p->dstPitch, p->dstHeight, p, &r.dst);
	if (res != CUDA_SUCCESS || !p->WidthInBytes)
		return res;
	in = r.src.loc == CRC_LOC_INLINE;
	out = r.dst.loc == CRC_LOC_INLINE;
	if (!in && !out) {
		r.width = p->WidthInBytes;
		r.height = height;
		r.depth = depth;
		return async ? crc_post(op, &r, sizeof(r)) : crc_rpc(op, &r, sizeof(r), NULL, 0);
	}
	/* Tiles of th rows of tw bytes, packed, in the request or the reply. */
	max = crc_chan_max_payload(&crc_client.chan) - sizeof(struct crc_call_hdr) - sizeof(r) - 64;
	max = max < 4 * CRC_COPY_CHUNK ? max : 4 * CRC_COPY_CHUNK;
	tw = p->WidthInBytes < max ? p->WidthInBytes : max & ~(size_t)15;
	th = max / tw < height ? max / tw : height;
	buf = malloc(sizeof(r) + tw * th);
	if (!buf)
		return CUDA_ERROR_OUT_OF_MEMORY;
	for (size_t z = 0; z < depth && res == CUDA_SUCCESS; z++)
		for (size_t y = 0; y < height && res == CUDA_SUCCESS; y += th)
			for (size_t x = 0; x < p->WidthInBytes && res == CUDA_SUCCESS; x += tw) {
				struct crc_array_copy_req *t = (struct crc_array_copy_req *)buf;
				const struct crc_array_side *host = in ? &r.src : &r.dst;
				uint8_t *packed = buf + sizeof(*t);
				size_t w = p->WidthInBytes - x < tw ? p->WidthInBytes - x : tw;
				size_t h = height - y < th ? height - y : th;

				*t = r;
				t->src = side_at(&r.src, x, y, z);
				t->dst = side_at(&r.dst, x, y, z);
				t->width = w;
				t->height = h;
				t->depth = 1;
				for (size_t k = 0; in && k < h; k++)
					memcpy(packed + k * w,
					       (const uint8_t *)(uintptr_t)t->src.addr + k * host->pitch, w);
				res = in ? crc_rpc(op, t, sizeof(*t) + w * h, NULL, 0)
					 : crc_rpc(op, t, sizeof(*t), packed, w * h);
				for (size_t k = 0; out && res == CUDA_SUCCESS && k < h; k++)
					memcpy((uint8_t *)(uintptr_t)t->dst.addr + k * host->pitch,
					       packed + k * w, w);
			}
	free(buf);
	return res;
}

CUresult crc_array_copy3d(const CUDA_MEMCPY3D *p, CUstream stream, bool async)
{
	if (!__atomic_load_n(&crc_initialized, __ATOMIC_ACQUIRE))
		return CUDA_ERROR_NOT_INITIALIZED;
	return array_copy(p, stream, async);
}

/* The 1D copies between host memory and an array: `offset` bytes into the array's first row. */
static CUresult host_array(CUarray array, size_t offset, void *host, size_t bytes, bool to_array,
			   CUstream stream, bool async)
{
	struct crc_copy_end a = {.type = CU_MEMORYTYPE_ARRAY, .array = array, .offset = offset};
	struct crc_copy_end h = {.type = CU_MEMORYTYPE_HOST, .host = host};
	CUDA_MEMCPY3D p = to_array ? crc_copy3d_1d(a, h, bytes) : crc_copy3d_1d(h, a, bytes);

	if (!host)
		return CUDA_ERROR_INVALID_VALUE;
	return crc_array_copy3d(&p, stream, async);
}

CUresult crc_hook_cuMemcpyHtoA_v2(CUarray dstArray, size_t dstOffset, const void *srcHost, size_t ByteCount)
{
	return host_array(dstArray, dstOffset, (void *)(uintptr_t)srcHost, ByteCount, true, NULL, false);
}

CUresult crc_hook_cuMemcpyHtoA(CUarray dstArray, unsigned int dstOffset, const void *srcHost,
			       unsigned int ByteCount)
{
	return crc_hook_cuMemcpyHtoA_v2(dstArray, dstOffset, srcHost, ByteCount);
}

CUresult crc_hook_cuMemcpyHtoAAsync_v2(CUarray dstArray, size_t dstOffset, const void *srcHost,
				       size_t ByteCount, CUstream hStream)
{
	return host_array(dstArray, dstOffset, (void *)(uintptr_t)srcHost, ByteCount, true, hStream, true);
}

CUresult crc_hook_cuMemcpyHtoAAsync(CUarray dstArray, unsigned int dstOffset, const void *srcHost,
				    unsigned int ByteCount, CUstream hStream)
{
	return crc_hook_cuMemcpyHtoAAsync_v2(dstArray, dstOffset, srcHost, ByteCount, hStream);
}

CUresult crc_hook_cuMemcpyAtoH_v2(void *dstHost, CUarray srcArray, size_t srcOffset, size_t ByteCount)
{
	return host_array(srcArray, srcOffset, dstHost, ByteCount, false, NULL, false);
}

CUresult crc_hook_cuMemcpyAtoH(void *dstHost, CUarray srcArray, unsigned int srcOffset,
			       unsigned int ByteCount)
{
	return crc_hook_cuMemcpyAtoH_v2(dstHost, srcArray, srcOffset, ByteCount);
}

CUresult crc_hook_cuMemcpyAtoHAsync_v2(void *dstHost, CUarray srcArray, size_t srcOffset, size_t ByteCount,
				       CUstream hStream)
{
	return host_array(srcArray, srcOffset, dstHost, ByteCount, false, hStream, true);
}

CUresult crc_hook_cuMemcpyAtoHAsync(void *dstHost, CUarray srcArray, unsigned int srcOffset,
				    unsigned int ByteCount, CUstream hStream)
{
	return crc_hook_cuMemcpyAtoHAsync_v2(dstHost, srcArray, srcOffset, ByteCount, hStream);
}

/* ---- texture and surface objects ------------------------------------------------------------------ */
_Static_assert(sizeof(CUDA_RESOURCE_DESC) <= CRC_TEX_RES_BYTES, "crc_texobj_req holds a resource");
_Static_assert(sizeof(CUDA_TEXTURE_DESC) <= CRC_TEX_DESC_BYTES, "crc_texobj_req holds a texture");
_Static_assert(sizeof(CUDA_RESOURCE_VIEW_DESC) <= CRC_TEX_VIEW_BYTES, "crc_texobj_req holds a view");

static CUresult object_create(uint16_t op, unsigned long long *out, const CUDA_RESOURCE_DESC *res,
			      const CUDA_TEXTURE_DESC *tex, const CUDA_RESOURCE_VIEW_DESC *view)
{
	struct crc_texobj_req *r;
	CUresult rc;

	if (!out || !res || (op == CRC_CU_cuTexObjectCreate && !tex))
		return CUDA_ERROR_INVALID_VALUE;
	r = calloc(1, sizeof(*r));
	if (!r)
		return CUDA_ERROR_OUT_OF_MEMORY;
	memcpy(r->res, res, sizeof(*res));
	if (tex)
		memcpy(r->tex, tex, sizeof(*tex));
	if (view) {
		memcpy(r->view, view, sizeof(*view));
		r->has_view = 1;
	}
	rc = crc_rpc(op, r, sizeof(*r), out, sizeof(*out));
	free(r);
	return rc;
}

static CUresult object_op(uint16_t op, unsigned long long value, void *out, size_t out_len)
{
	struct crc_texobj_req *r = calloc(1, sizeof(*r));
	CUresult rc;

	if (!r)
		return CUDA_ERROR_OUT_OF_MEMORY;
	r->value = value;
	rc = crc_rpc(op, r, sizeof(*r), out, out_len);
	free(r);
	return rc;
}

CUresult crc_hook_cuTexObjectCreate(CUtexObject *pTexObject, const CUDA_RESOURCE_DESC *pResDesc,
				    const CUDA_TEXTURE_DESC *pTexDesc,
				    const CUDA_RESOURCE_VIEW_DESC *pResViewDesc)
{
	return object_create(CRC_CU_cuTexObjectCreate, pTexObject, pResDesc, pTexDesc, pResViewDesc);
}

CUresult crc_hook_cuSurfObjectCreate(CUsurfObject *pSurfObject, const CUDA_RESOURCE_DESC *pResDesc)
{
	return object_create(CRC_CU_cuSurfObjectCreate, pSurfObject, pResDesc, NULL, NULL);
}

CUresult crc_hook_cuTexObjectDestroy(CUtexObject texObject)
{
	return object_op(CRC_CU_cuTexObjectDestroy, texObject, NULL, 0);
}

CUresult crc_hook_cuSurfObjectDestroy(CUsurfObject surfObject)
{
	return object_op(CRC_CU_cuSurfObjectDestroy, surfObject, NULL, 0);
}

CUresult crc_hook_cuTexObjectGetResourceDesc(CUDA_RESOURCE_DESC *pResDesc, CUtexObject texObject)
{
	if (!pResDesc)
		return CUDA_ERROR_INVALID_VALUE;
	return object_op(CRC_CU_cuTexObjectGetResourceDesc, texObject, pResDesc, sizeof(*pResDesc));
}

CUresult crc_hook_cuSurfObjectGetResourceDesc(CUDA_RESOURCE_DESC *pResDesc, CUsurfObject surfObject)
{
	if (!pResDesc)
		return CUDA_ERROR_INVALID_VALUE;
	return object_op(CRC_CU_cuSurfObjectGetResourceDesc, surfObject, pResDesc, sizeof(*pResDesc));
}
