/* CUDA arrays, mipmapped arrays, texture and surface objects on the simulated device.
 *
 * An array is device memory laid out in rows of Width elements, Height rows a slice (layers and cubemap
 * faces are slices), no padding: a copy with an array is the same copy with that memory on its side,
 * and a kernel reaches an object's elements through crcuda_sim_block.resource. Texture and surface
 * objects are small integers (1 up, the lowest free first), as a GPU's are.
 *
 * A sparse array (CUDA_ARRAY3D_SPARSE: 2D, layered 2D or 3D, not mipmapped) has the same storage and a
 * mapped flag per 64 KiB tile (cuArrayGetSparseProperties gives the tile's extent, the standard shapes
 * of 64 KiB tiles by element size). Unmapped tiles hold zeros: cuMemMapArrayAsync's unmap zeroes the
 * tile and a copy into the array drops what falls in unmapped tiles, so reads there give zeros. The
 * VMM memory a tile is mapped to is not used: two arrays mapped to the same memory do not alias. */
#define LOG_PREFIX "sim: "
#include <stdlib.h>
#include <string.h>

#include "crcuda/array_fmt.h"
#include "crcuda/copy2d.h"
#include "crcuda/log.h"
#include "sim.h"

#define LEVELS_MAX 16

struct CUarray_st {
	CUDA_ARRAY3D_DESCRIPTOR desc;
	struct crc_array_box box;
	CUdeviceptr base;
	struct CUmipmappedArray_st *owner; /* a level of it (destroyed with it) */
	/* Sparse: tile extent in elements, tiles along each axis (z: of a 3D array), layers (1 unless
	 * layered), and one flag per tile, [layer][z][y][x]. */
	unsigned tile[3], ntiles[3], layers, elem;
	unsigned char *mapped;
	struct CUarray_st *next;
};

#define SPARSE_TILE_BYTES (64u << 10)

/* The standard 64 KiB tile shapes (width, height, depth in elements) by element size, 2D and 3D. */
static int sparse_tile(unsigned elem, bool three_d, unsigned t[3])
{
	static const unsigned shape2[5][2] = {{256, 256}, {256, 128}, {128, 128}, {128, 64}, {64, 64}};
	static const unsigned shape3[5][3] = {
	    {64, 32, 32}, {32, 32, 32}, {32, 32, 16}, {32, 16, 16}, {16, 16, 16}};
	int k = elem == 1 ? 0 : elem == 2 ? 1 : elem == 4 ? 2 : elem == 8 ? 3 : elem == 16 ? 4 : -1;

	if (k < 0)
		return -1;
	t[0] = three_d ? shape3[k][0] : shape2[k][0];
	t[1] = three_d ? shape3[k][1] : shape2[k][1];
	t[2] = three_d ? shape3[k][2] : 1;
	return 0;
}

static int sparse_init(struct CUarray_st *a)
{
	const CUDA_ARRAY3D_DESCRIPTOR *d = &a->desc;
	bool layered = d->Flags & CUDA_ARRAY3D_LAYERED, three_d = d->Depth && !layered;
	size_t dims[3] = {d->Width, d->Height, three_d ? d->Depth : 1}, n = 1;

	a->elem = (unsigned)crc_array_elem_bytes(d->Format, d->NumChannels);
	if (!d->Height || (d->Flags & CUDA_ARRAY3D_CUBEMAP) || sparse_tile(a->elem, three_d, a->tile))
		return -1;
	a->layers = layered ? (unsigned)d->Depth : 1;
	for (int i = 0; i < 3; i++) {
		a->ntiles[i] = (unsigned)((dims[i] + a->tile[i] - 1) / a->tile[i]);
		n *= a->ntiles[i];
	}
	a->mapped = calloc(n * a->layers, 1);
	return a->mapped ? 0 : -1;
}

struct CUmipmappedArray_st {
	unsigned levels;
	struct CUarray_st *level[LEVELS_MAX];
	struct CUmipmappedArray_st *next;
};

static pthread_mutex_t array_lock = PTHREAD_MUTEX_INITIALIZER;
static struct CUarray_st *arrays;
static struct CUmipmappedArray_st *mipmaps;

static bool array_live(CUarray a)
{
	bool live = false;

	pthread_mutex_lock(&array_lock);
	for (struct CUarray_st *p = arrays; p && !live; p = p->next)
		live = p == a;
	pthread_mutex_unlock(&array_lock);
	return live;
}

static CUresult array_make(const CUDA_ARRAY3D_DESCRIPTOR *d, struct CUmipmappedArray_st *owner,
			   struct CUarray_st **out)
{
	struct CUarray_st *a;
	struct CUctx_st *ctx;
	CUresult res;

	if (!out || !d)
		return CUDA_ERROR_INVALID_VALUE;
	res = sim_ctx_require(&ctx);
	if (res != CUDA_SUCCESS)
		return res;
	a = calloc(1, sizeof(*a));
	if (!a)
		return CUDA_ERROR_OUT_OF_MEMORY;
	a->desc = *d;
	a->owner = owner;
	if (crc_array_box_of(d, &a->box) || (d->Depth && !d->Height) ||
	    (d->Flags & CUDA_ARRAY3D_DEFERRED_MAPPING) ||
	    ((d->Flags & CUDA_ARRAY3D_SPARSE) && (owner || sparse_init(a)))) {
		free(a->mapped);
		free(a);
		return CUDA_ERROR_INVALID_VALUE;
	}
	/* Storage is device memory no pointer names, like a module's globals. */
	res = sim_mem_alloc_device(ctx, a->box.row_bytes * a->box.rows * a->box.slices, SIM_RANGE_GLOBAL,
				   &a->base);
	if (res != CUDA_SUCCESS) {
		free(a->mapped);
		free(a);
		return res;
	}
	/* No tile mapped: zeros throughout. */
	if (a->mapped)
		memset((void *)(uintptr_t)a->base, 0, a->box.row_bytes * a->box.rows * a->box.slices);
	pthread_mutex_lock(&array_lock);
	a->next = arrays;
	arrays = a;
	pthread_mutex_unlock(&array_lock);
	*out = a;
	return CUDA_SUCCESS;
}

static void array_unmake(struct CUarray_st *a)
{
	pthread_mutex_lock(&array_lock);
	for (struct CUarray_st **p = &arrays; *p; p = &(*p)->next)
		if (*p == a) {
			*p = a->next;
			break;
		}
	pthread_mutex_unlock(&array_lock);
	sim_mem_free_device(a->base, SIM_RANGE_GLOBAL);
	free(a->mapped);
	free(a);
}

CUresult cuArray3DCreate_v2(CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *pAllocateArray)
{
	SIM_ENTER(cuArray3DCreate_v2);
	return array_make(pAllocateArray, NULL, pHandle);
}

CUresult cuArrayCreate_v2(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR *p)
{
	CUDA_ARRAY3D_DESCRIPTOR d;

	SIM_ENTER(cuArrayCreate_v2);
	if (!p)
		return CUDA_ERROR_INVALID_VALUE;
	d = (CUDA_ARRAY3D_DESCRIPTOR){
	    .Width = p->Width, .Height = p->Height, .Format = p->Format, .NumChannels = p->NumChannels};
	return array_make(&d, NULL, pHandle);
}

CUresult cuArrayDestroy(CUarray hArray)
{
	SIM_ENTER(cuArrayDestroy);
	if (!array_live(hArray) || hArray->owner)
		return CUDA_ERROR_INVALID_HANDLE;
	array_unmake(hArray);
	return CUDA_SUCCESS;
}

CUresult cuArray3DGetDescriptor_v2(CUDA_ARRAY3D_DESCRIPTOR *pArrayDescriptor, CUarray hArray)
{
	SIM_ENTER(cuArray3DGetDescriptor_v2);
	if (!pArrayDescriptor)
		return CUDA_ERROR_INVALID_VALUE;
	if (!array_live(hArray))
		return CUDA_ERROR_INVALID_HANDLE;
	*pArrayDescriptor = hArray->desc;
	return CUDA_SUCCESS;
}

CUresult cuArrayGetDescriptor_v2(CUDA_ARRAY_DESCRIPTOR *pArrayDescriptor, CUarray hArray)
{
	SIM_ENTER(cuArrayGetDescriptor_v2);
	if (!pArrayDescriptor)
		return CUDA_ERROR_INVALID_VALUE;
	if (!array_live(hArray))
		return CUDA_ERROR_INVALID_HANDLE;
	*pArrayDescriptor = (CUDA_ARRAY_DESCRIPTOR){.Width = hArray->desc.Width,
						    .Height = hArray->desc.Height,
						    .Format = hArray->desc.Format,
						    .NumChannels = hArray->desc.NumChannels};
	return CUDA_SUCCESS;
}

CUresult cuMipmappedArrayCreate(CUmipmappedArray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *pDesc,
				unsigned int numMipmapLevels)
{
	struct CUmipmappedArray_st *m;
	CUresult res = CUDA_SUCCESS;

	SIM_ENTER(cuMipmappedArrayCreate);
	if (!pHandle || !pDesc || !numMipmapLevels || numMipmapLevels > LEVELS_MAX)
		return CUDA_ERROR_INVALID_VALUE;
	m = calloc(1, sizeof(*m));
	if (!m)
		return CUDA_ERROR_OUT_OF_MEMORY;
	for (unsigned l = 0; l < numMipmapLevels && res == CUDA_SUCCESS; l++) {
		CUDA_ARRAY3D_DESCRIPTOR d = *pDesc;

		d.Width = pDesc->Width >> l ? pDesc->Width >> l : 1;
		d.Height = pDesc->Height ? (pDesc->Height >> l ? pDesc->Height >> l : 1) : 0;
		if (!(pDesc->Flags & (CUDA_ARRAY3D_LAYERED | CUDA_ARRAY3D_CUBEMAP)))
			d.Depth = pDesc->Depth ? (pDesc->Depth >> l ? pDesc->Depth >> l : 1) : 0;
		res = array_make(&d, m, &m->level[l]);
		if (res == CUDA_SUCCESS)
			m->levels++;
	}
	if (res != CUDA_SUCCESS) {
		for (unsigned l = 0; l < m->levels; l++)
			array_unmake(m->level[l]);
		free(m);
		return res;
	}
	pthread_mutex_lock(&array_lock);
	m->next = mipmaps;
	mipmaps = m;
	pthread_mutex_unlock(&array_lock);
	*pHandle = m;
	return CUDA_SUCCESS;
}

static struct CUmipmappedArray_st **mipmap_find(CUmipmappedArray m)
{
	for (struct CUmipmappedArray_st **p = &mipmaps; *p; p = &(*p)->next)
		if (*p == m)
			return p;
	return NULL;
}

CUresult cuMipmappedArrayGetLevel(CUarray *pLevelArray, CUmipmappedArray hMipmappedArray, unsigned int level)
{
	CUresult res = CUDA_SUCCESS;

	SIM_ENTER(cuMipmappedArrayGetLevel);
	if (!pLevelArray)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&array_lock);
	if (!mipmap_find(hMipmappedArray))
		res = CUDA_ERROR_INVALID_HANDLE;
	else if (level >= hMipmappedArray->levels)
		res = CUDA_ERROR_INVALID_VALUE;
	else
		*pLevelArray = hMipmappedArray->level[level];
	pthread_mutex_unlock(&array_lock);
	return res;
}

CUresult cuMipmappedArrayDestroy(CUmipmappedArray hMipmappedArray)
{
	struct CUmipmappedArray_st **p;

	SIM_ENTER(cuMipmappedArrayDestroy);
	pthread_mutex_lock(&array_lock);
	p = mipmap_find(hMipmappedArray);
	if (p)
		*p = hMipmappedArray->next;
	pthread_mutex_unlock(&array_lock);
	if (!p)
		return CUDA_ERROR_INVALID_HANDLE;
	for (unsigned l = 0; l < hMipmappedArray->levels; l++)
		array_unmake(hMipmappedArray->level[l]);
	free(hMipmappedArray);
	return CUDA_SUCCESS;
}

/* ---- sparse arrays ------------------------------------------------------------------------------------ */
CUresult cuArrayGetSparseProperties(CUDA_ARRAY_SPARSE_PROPERTIES *props, CUarray array)
{
	SIM_ENTER(cuArrayGetSparseProperties);
	if (!props)
		return CUDA_ERROR_INVALID_VALUE;
	if (!array_live(array))
		return CUDA_ERROR_INVALID_HANDLE;
	if (!array->mapped)
		return CUDA_ERROR_INVALID_VALUE;
	/* One level: the mip tail starts at level 0 and is empty (measured, H100, driver 580). */
	*props =
	    (CUDA_ARRAY_SPARSE_PROPERTIES){.tileExtent = {array->tile[0], array->tile[1], array->tile[2]}};
	return CUDA_SUCCESS;
}

CUresult cuMipmappedArrayGetSparseProperties(CUDA_ARRAY_SPARSE_PROPERTIES *props, CUmipmappedArray mipmap)
{
	bool live;

	SIM_ENTER(cuMipmappedArrayGetSparseProperties);
	if (!props)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&array_lock);
	live = mipmap_find(mipmap) != NULL;
	pthread_mutex_unlock(&array_lock);
	/* Mipmapped arrays here are never sparse. */
	return live ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_INVALID_HANDLE;
}

bool sim_array_sparse(CUarray a)
{
	return array_live(a) && a->mapped;
}

/* The tile holding byte (x, row y, slice z) of a sparse array: its flag's index. */
static size_t tile_index(const struct CUarray_st *a, size_t x, size_t y, size_t z)
{
	size_t layer = a->layers > 1 ? z : 0, tz = a->layers > 1 ? 0 : z / a->tile[2];

	return ((layer * a->ntiles[2] + tz) * a->ntiles[1] + y / a->tile[1]) * a->ntiles[0] +
	       x / a->elem / a->tile[0];
}

void sim_array_sparse_run(CUarray a, CUdeviceptr dst, size_t bytes, size_t *run, bool *mapped)
{
	size_t off = dst - a->base, rb = a->box.row_bytes;
	size_t x = off % rb, y = off / rb % a->box.rows, z = off / rb / a->box.rows;
	size_t tile_end = (x / a->elem / a->tile[0] + 1) * a->tile[0] * a->elem;

	if (tile_end > rb)
		tile_end = rb;
	*run = tile_end - x < bytes ? tile_end - x : bytes;
	pthread_mutex_lock(&array_lock);
	*mapped = a->mapped[tile_index(a, x, y, z)];
	pthread_mutex_unlock(&array_lock);
}

/* An entry's region in tiles: [t0, t1) along each axis, and its layer; CUDA_SUCCESS or why not. */
static CUresult map_region(const CUarrayMapInfo *e, struct CUarray_st *a, unsigned t0[3], unsigned t1[3],
			   unsigned *layer)
{
	const CUDA_ARRAY3D_DESCRIPTOR *d = &a->desc;
	bool three_d = a->layers == 1 && d->Depth;
	size_t dims[3] = {d->Width, d->Height, three_d ? d->Depth : 1};
	unsigned off[3] = {e->subresource.sparseLevel.offsetX, e->subresource.sparseLevel.offsetY,
			   e->subresource.sparseLevel.offsetZ};
	unsigned ext[3] = {e->subresource.sparseLevel.extentWidth, e->subresource.sparseLevel.extentHeight,
			   e->subresource.sparseLevel.extentDepth};

	if (e->subresourceType != CU_ARRAY_SPARSE_SUBRESOURCE_TYPE_SPARSE_LEVEL ||
	    e->subresource.sparseLevel.level || e->subresource.sparseLevel.layer >= a->layers ||
	    (!three_d && (off[2] || ext[2] != 1)))
		return CUDA_ERROR_INVALID_VALUE;
	for (int i = 0; i < 3; i++) {
		/* Tile-aligned, an extent ending on a tile or at the array's edge. */
		if (!ext[i] || off[i] % a->tile[i] || off[i] >= dims[i] || ext[i] > dims[i] - off[i] ||
		    (ext[i] % a->tile[i] && off[i] + ext[i] != dims[i]))
			return CUDA_ERROR_INVALID_VALUE;
		t0[i] = off[i] / a->tile[i];
		t1[i] = (unsigned)((off[i] + ext[i] + a->tile[i] - 1) / a->tile[i]);
	}
	*layer = e->subresource.sparseLevel.layer;
	return CUDA_SUCCESS;
}

static CUresult map_check(const CUarrayMapInfo *e)
{
	struct CUarray_st *a = e->resource.array;
	unsigned t0[3], t1[3], layer;
	size_t pool = 0, tiles = 1;
	CUresult res;
	int rc;

	if (e->resourceType == CU_RESOURCE_TYPE_MIPMAPPED_ARRAY) {
		bool live;

		pthread_mutex_lock(&array_lock);
		live = mipmap_find(e->resource.mipmap) != NULL;
		pthread_mutex_unlock(&array_lock);
		return live ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_INVALID_HANDLE;
	}
	if (e->resourceType != CU_RESOURCE_TYPE_ARRAY || !a)
		return CUDA_ERROR_INVALID_VALUE; /* a NULL array too (measured, H100, driver 580) */
	if (!array_live(a))
		return CUDA_ERROR_INVALID_HANDLE;
	if (!a->mapped || e->flags || e->reserved[0] || e->reserved[1] ||
	    __builtin_popcount(e->deviceBitMask) != 1 || e->deviceBitMask >> sim_device_count)
		return CUDA_ERROR_INVALID_VALUE;
	res = map_region(e, a, t0, t1, &layer);
	if (res != CUDA_SUCCESS)
		return res;
	for (int i = 0; i < 3; i++)
		tiles *= t1[i] - t0[i];
	switch (e->memOperationType) {
	case CU_MEM_OPERATION_TYPE_MAP:
		if (e->memHandleType != CU_MEM_HANDLE_TYPE_GENERIC)
			return CUDA_ERROR_INVALID_VALUE;
		rc = sim_vmm_tile_pool(e->memHandle.memHandle, &pool);
		if (rc == -1)
			return CUDA_ERROR_INVALID_HANDLE;
		if (rc || e->offset % SPARSE_TILE_BYTES || e->offset > pool ||
		    tiles > (pool - e->offset) / SPARSE_TILE_BYTES)
			return CUDA_ERROR_INVALID_VALUE;
		return CUDA_SUCCESS;
	case CU_MEM_OPERATION_TYPE_UNMAP:
		return e->memHandle.memHandle ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
	}
	return CUDA_ERROR_INVALID_VALUE;
}

/* Maps or unmaps an entry's tiles (checked); an unmapped tile's bytes become zeros. */
static void map_apply(const CUarrayMapInfo *e)
{
	struct CUarray_st *a = e->resource.array;
	bool map = e->memOperationType == CU_MEM_OPERATION_TYPE_MAP;
	unsigned t0[3], t1[3], layer;

	map_region(e, a, t0, t1, &layer);
	pthread_mutex_lock(&array_lock);
	for (unsigned tz = t0[2]; tz < t1[2]; tz++)
		for (unsigned ty = t0[1]; ty < t1[1]; ty++)
			for (unsigned tx = t0[0]; tx < t1[0]; tx++) {
				size_t z0 = a->layers > 1 ? layer : (size_t)tz * a->tile[2];
				size_t z1 = a->layers > 1 ? z0 + 1 : z0 + a->tile[2];
				size_t y0 = (size_t)ty * a->tile[1], y1 = y0 + a->tile[1];
				size_t x0 = (size_t)tx * a->tile[0] * a->elem, x1 = x0 + a->tile[0] * a->elem;

				a->mapped[tile_index(a, x0, y0, z0)] = map;
				if (map)
					continue;
				x1 = x1 < a->box.row_bytes ? x1 : a->box.row_bytes;
				for (size_t z = z0; z < z1 && z < a->box.slices; z++)
					for (size_t y = y0; y < y1 && y < a->box.rows; y++)
						memset((void *)(uintptr_t)(a->base +
									   (z * a->box.rows + y) *
									       a->box.row_bytes +
									   x0),
						       0, x1 - x0);
			}
	pthread_mutex_unlock(&array_lock);
}

/* Checked whole first; applied after the stream's earlier work (then in order with its later work). */
static CUresult map_array(bool pt, CUarrayMapInfo *list, unsigned count, CUstream h)
{
	struct CUstream_st *s;
	CUresult res;

	if (!list && count)
		return CUDA_ERROR_INVALID_VALUE;
	res = sim_stream_resolve(h, pt, &s);
	for (unsigned i = 0; i < count && res == CUDA_SUCCESS; i++)
		res = map_check(&list[i]);
	if (res != CUDA_SUCCESS)
		return res;
	sim_stream_wait_idle(s);
	for (unsigned i = 0; i < count; i++)
		map_apply(&list[i]);
	return CUDA_SUCCESS;
}

SIM_STREAM_API_PAIR(cuMemMapArrayAsync, cuMemMapArrayAsync_ptsz, map_array,
		    (CUarrayMapInfo * list, unsigned count, CUstream h), list, count, h)

/* ---- copies: each array side becomes its memory ------------------------------------------------------ */
static CUresult array_side(CUmemorytype *type, CUarray array, CUdeviceptr *dev, size_t *pitch, size_t *height)
{
	if (*type != CU_MEMORYTYPE_ARRAY)
		return CUDA_SUCCESS;
	if (!array_live(array))
		return CUDA_ERROR_INVALID_HANDLE;
	*type = CU_MEMORYTYPE_DEVICE;
	*dev = array->base;
	*pitch = array->box.row_bytes;
	*height = array->box.rows;
	return CUDA_SUCCESS;
}

CUresult sim_array_resolve(const CUDA_MEMCPY3D *in, CUDA_MEMCPY3D *out)
{
	CUresult res;

	*out = *in;
	res = array_side(&out->srcMemoryType, in->srcArray, &out->srcDevice, &out->srcPitch, &out->srcHeight);
	if (res == CUDA_SUCCESS)
		res = array_side(&out->dstMemoryType, in->dstArray, &out->dstDevice, &out->dstPitch,
				 &out->dstHeight);
	/* A box beyond an array's edge. */
	if (res == CUDA_SUCCESS && in->srcMemoryType == CU_MEMORYTYPE_ARRAY &&
	    (in->srcXInBytes + in->WidthInBytes > in->srcArray->box.row_bytes ||
	     in->srcY + (in->Height ? in->Height : 1) > in->srcArray->box.rows ||
	     in->srcZ + (in->Depth ? in->Depth : 1) > in->srcArray->box.slices))
		res = CUDA_ERROR_INVALID_VALUE;
	if (res == CUDA_SUCCESS && in->dstMemoryType == CU_MEMORYTYPE_ARRAY &&
	    (in->dstXInBytes + in->WidthInBytes > in->dstArray->box.row_bytes ||
	     in->dstY + (in->Height ? in->Height : 1) > in->dstArray->box.rows ||
	     in->dstZ + (in->Depth ? in->Depth : 1) > in->dstArray->box.slices))
		res = CUDA_ERROR_INVALID_VALUE;
	return res;
}

/* cuMemcpyHtoA and its kin: 3D copies of one row. */
static CUresult copy_1d(bool pt, struct crc_copy_end dst, struct crc_copy_end src, size_t bytes, CUstream h,
			bool async)
{
	CUDA_MEMCPY3D p = crc_copy3d_1d(dst, src, bytes);

	return sim_copy3d(pt, &p, h, async);
}

#define END_ARRAY(a, off) ((struct crc_copy_end){.type = CU_MEMORYTYPE_ARRAY, .array = (a), .offset = (off)})
#define END_HOST(p)	  ((struct crc_copy_end){.type = CU_MEMORYTYPE_HOST, .host = (void *)(uintptr_t)(p)})
#define END_DEVICE(d)	  ((struct crc_copy_end){.type = CU_MEMORYTYPE_DEVICE, .dev = (d)})

static CUresult htoa(bool pt, CUarray a, size_t off, const void *src, size_t n, CUstream h, bool async)
{
	return copy_1d(pt, END_ARRAY(a, off), END_HOST(src), n, h, async);
}
static CUresult atoh(bool pt, void *dst, CUarray a, size_t off, size_t n, CUstream h, bool async)
{
	return copy_1d(pt, END_HOST(dst), END_ARRAY(a, off), n, h, async);
}
static CUresult htoa_sync(bool pt, CUarray a, size_t off, const void *src, size_t n)
{
	return htoa(pt, a, off, src, n, NULL, false);
}
static CUresult htoa_async(bool pt, CUarray a, size_t off, const void *src, size_t n, CUstream h)
{
	return htoa(pt, a, off, src, n, h, true);
}
static CUresult atoh_sync(bool pt, void *dst, CUarray a, size_t off, size_t n)
{
	return atoh(pt, dst, a, off, n, NULL, false);
}
static CUresult atoh_async(bool pt, void *dst, CUarray a, size_t off, size_t n, CUstream h)
{
	return atoh(pt, dst, a, off, n, h, true);
}
static CUresult atod(bool pt, CUdeviceptr dst, CUarray a, size_t off, size_t n)
{
	return copy_1d(pt, END_DEVICE(dst), END_ARRAY(a, off), n, NULL, false);
}
static CUresult dtoa(bool pt, CUarray a, size_t off, CUdeviceptr src, size_t n)
{
	return copy_1d(pt, END_ARRAY(a, off), END_DEVICE(src), n, NULL, false);
}
static CUresult atoa(bool pt, CUarray dst, size_t doff, CUarray src, size_t soff, size_t n)
{
	return copy_1d(pt, END_ARRAY(dst, doff), END_ARRAY(src, soff), n, NULL, false);
}

SIM_STREAM_API_PAIR(cuMemcpyHtoA_v2, cuMemcpyHtoA_v2_ptds, htoa_sync,
		    (CUarray a, size_t off, const void *src, size_t n), a, off, src, n)
SIM_STREAM_API_PAIR(cuMemcpyHtoAAsync_v2, cuMemcpyHtoAAsync_v2_ptsz, htoa_async,
		    (CUarray a, size_t off, const void *src, size_t n, CUstream h), a, off, src, n, h)
SIM_STREAM_API_PAIR(cuMemcpyAtoH_v2, cuMemcpyAtoH_v2_ptds, atoh_sync,
		    (void *dst, CUarray a, size_t off, size_t n), dst, a, off, n)
SIM_STREAM_API_PAIR(cuMemcpyAtoHAsync_v2, cuMemcpyAtoHAsync_v2_ptsz, atoh_async,
		    (void *dst, CUarray a, size_t off, size_t n, CUstream h), dst, a, off, n, h)
SIM_STREAM_API_PAIR(cuMemcpyAtoD_v2, cuMemcpyAtoD_v2_ptds, atod,
		    (CUdeviceptr dst, CUarray a, size_t off, size_t n), dst, a, off, n)
SIM_STREAM_API_PAIR(cuMemcpyDtoA_v2, cuMemcpyDtoA_v2_ptds, dtoa,
		    (CUarray a, size_t off, CUdeviceptr src, size_t n), a, off, src, n)
SIM_STREAM_API_PAIR(cuMemcpyAtoA_v2, cuMemcpyAtoA_v2_ptds, atoa,
		    (CUarray dst, size_t doff, CUarray src, size_t soff, size_t n), dst, doff, src, soff, n)

/* ---- texture and surface objects ------------------------------------------------------------------- */
struct sim_texobj {
	bool live, surface, has_view;
	CUDA_RESOURCE_DESC res;
	CUDA_TEXTURE_DESC tex;
	CUDA_RESOURCE_VIEW_DESC view;
};

#define TEXOBJS_MAX 4096
static struct sim_texobj texobjs[TEXOBJS_MAX]; /* value v is texobjs[v - 1], under array_lock */

static CUresult resource_check(const CUDA_RESOURCE_DESC *r, bool surface)
{
	switch (r->resType) {
	case CU_RESOURCE_TYPE_ARRAY:
		return array_live(r->res.array.hArray) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
	case CU_RESOURCE_TYPE_MIPMAPPED_ARRAY: {
		bool ok;

		pthread_mutex_lock(&array_lock);
		ok = mipmap_find(r->res.mipmap.hMipmappedArray) != NULL;
		pthread_mutex_unlock(&array_lock);
		return surface ? CUDA_ERROR_INVALID_VALUE : ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
	}
	case CU_RESOURCE_TYPE_LINEAR:
	case CU_RESOURCE_TYPE_PITCH2D:
		return surface ? CUDA_ERROR_INVALID_VALUE
		       : crc_array_elem_bytes(r->res.linear.format, r->res.linear.numChannels)
			   ? CUDA_SUCCESS
			   : CUDA_ERROR_INVALID_VALUE;
	}
	return CUDA_ERROR_INVALID_VALUE;
}

static CUresult object_create(unsigned long long *out, const CUDA_RESOURCE_DESC *res,
			      const CUDA_TEXTURE_DESC *tex, const CUDA_RESOURCE_VIEW_DESC *view, bool surface)
{
	CUresult rc;

	if (!out || !res || (!surface && !tex))
		return CUDA_ERROR_INVALID_VALUE;
	rc = resource_check(res, surface);
	if (rc != CUDA_SUCCESS)
		return rc;
	pthread_mutex_lock(&array_lock);
	rc = CUDA_ERROR_OUT_OF_MEMORY;
	for (unsigned i = 0; i < TEXOBJS_MAX; i++) {
		struct sim_texobj *o = &texobjs[i];

		if (o->live)
			continue;
		*o = (struct sim_texobj){
		    .live = true, .surface = surface, .has_view = view != NULL, .res = *res};
		if (tex)
			o->tex = *tex;
		if (view)
			o->view = *view;
		*out = i + 1;
		rc = CUDA_SUCCESS;
		break;
	}
	pthread_mutex_unlock(&array_lock);
	return rc;
}

static struct sim_texobj *object_get(unsigned long long v, bool surface)
{
	struct sim_texobj *o = v && v <= TEXOBJS_MAX ? &texobjs[v - 1] : NULL;

	return o && o->live && o->surface == surface ? o : NULL;
}

static CUresult object_destroy(unsigned long long v, bool surface)
{
	struct sim_texobj *o;

	pthread_mutex_lock(&array_lock);
	o = object_get(v, surface);
	if (o)
		o->live = false;
	pthread_mutex_unlock(&array_lock);
	return o ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

static CUresult object_desc(unsigned long long v, bool surface, CUDA_RESOURCE_DESC *res,
			    CUDA_TEXTURE_DESC *tex, CUDA_RESOURCE_VIEW_DESC *view)
{
	struct sim_texobj *o;
	CUresult rc = CUDA_SUCCESS;

	pthread_mutex_lock(&array_lock);
	o = object_get(v, surface);
	if (!o || (view && !o->has_view))
		rc = CUDA_ERROR_INVALID_VALUE;
	else if (res)
		*res = o->res;
	else if (tex)
		*tex = o->tex;
	else if (view)
		*view = o->view;
	pthread_mutex_unlock(&array_lock);
	return rc;
}

CUresult cuTexObjectCreate(CUtexObject *pTexObject, const CUDA_RESOURCE_DESC *pResDesc,
			   const CUDA_TEXTURE_DESC *pTexDesc, const CUDA_RESOURCE_VIEW_DESC *pResViewDesc)
{
	SIM_ENTER(cuTexObjectCreate);
	return object_create(pTexObject, pResDesc, pTexDesc, pResViewDesc, false);
}

CUresult cuSurfObjectCreate(CUsurfObject *pSurfObject, const CUDA_RESOURCE_DESC *pResDesc)
{
	SIM_ENTER(cuSurfObjectCreate);
	return object_create(pSurfObject, pResDesc, NULL, NULL, true);
}

CUresult cuTexObjectDestroy(CUtexObject texObject)
{
	SIM_ENTER(cuTexObjectDestroy);
	return object_destroy(texObject, false);
}

CUresult cuSurfObjectDestroy(CUsurfObject surfObject)
{
	SIM_ENTER(cuSurfObjectDestroy);
	return object_destroy(surfObject, true);
}

CUresult cuTexObjectGetResourceDesc(CUDA_RESOURCE_DESC *pResDesc, CUtexObject texObject)
{
	SIM_ENTER(cuTexObjectGetResourceDesc);
	return pResDesc ? object_desc(texObject, false, pResDesc, NULL, NULL) : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuSurfObjectGetResourceDesc(CUDA_RESOURCE_DESC *pResDesc, CUsurfObject surfObject)
{
	SIM_ENTER(cuSurfObjectGetResourceDesc);
	return pResDesc ? object_desc(surfObject, true, pResDesc, NULL, NULL) : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuTexObjectGetTextureDesc(CUDA_TEXTURE_DESC *pTexDesc, CUtexObject texObject)
{
	SIM_ENTER(cuTexObjectGetTextureDesc);
	return pTexDesc ? object_desc(texObject, false, NULL, pTexDesc, NULL) : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuTexObjectGetResourceViewDesc(CUDA_RESOURCE_VIEW_DESC *pResViewDesc, CUtexObject texObject)
{
	SIM_ENTER(cuTexObjectGetResourceViewDesc);
	return pResViewDesc ? object_desc(texObject, false, NULL, NULL, pResViewDesc)
			    : CUDA_ERROR_INVALID_VALUE;
}

/* crcuda_sim_block.resource: level 0 of a mipmapped array. */
int sim_resource(unsigned long long object, struct crcuda_sim_resource *out)
{
	struct sim_texobj *o;
	int rc = -1;

	pthread_mutex_lock(&array_lock);
	o = object && object <= TEXOBJS_MAX && texobjs[object - 1].live ? &texobjs[object - 1] : NULL;
	if (o) {
		const CUDA_RESOURCE_DESC *r = &o->res;
		const struct CUarray_st *a = r->resType == CU_RESOURCE_TYPE_ARRAY ? r->res.array.hArray
					     : r->resType == CU_RESOURCE_TYPE_MIPMAPPED_ARRAY
						 ? r->res.mipmap.hMipmappedArray->level[0]
						 : NULL;

		*out = (struct crcuda_sim_resource){
		    .normalized = !o->surface && (o->tex.flags & CU_TRSF_NORMALIZED_COORDINATES)};
		if (a) {
			out->base = (unsigned char *)(uintptr_t)a->base;
			out->elem_bytes = crc_array_elem_bytes(a->desc.Format, a->desc.NumChannels);
			out->width = a->desc.Width;
			out->height = a->box.rows;
			out->depth = a->box.slices;
			out->pitch = a->box.row_bytes;
			out->rows = a->box.rows;
		} else if (r->resType == CU_RESOURCE_TYPE_LINEAR) {
			out->base = (unsigned char *)(uintptr_t)r->res.linear.devPtr;
			out->elem_bytes =
			    crc_array_elem_bytes(r->res.linear.format, r->res.linear.numChannels);
			out->width = r->res.linear.sizeInBytes / out->elem_bytes;
			out->height = out->depth = out->rows = 1;
			out->pitch = r->res.linear.sizeInBytes;
		} else {
			out->base = (unsigned char *)(uintptr_t)r->res.pitch2D.devPtr;
			out->elem_bytes =
			    crc_array_elem_bytes(r->res.pitch2D.format, r->res.pitch2D.numChannels);
			out->width = r->res.pitch2D.width;
			out->height = out->rows = r->res.pitch2D.height;
			out->depth = 1;
			out->pitch = r->res.pitch2D.pitchInBytes;
		}
		rc = 0;
	}
	pthread_mutex_unlock(&array_lock);
	return rc;
}

/* ---- tensor maps ------------------------------------------------------------------------------------ */
/* The simulated device's encoding: the arguments, checked as the driver checks them, packed in order
 * into the map's 16 words (no kernel of the simulated device reads one). */
static CUresult tmap_check(cuuint32_t rank, void *address, const cuuint64_t *dims, const cuuint64_t *strides,
			   const cuuint32_t *element_strides)
{
	if (rank < 1 || rank > 5 || ((uintptr_t)address & 15) || !dims || !element_strides ||
	    (rank > 1 && !strides))
		return CUDA_ERROR_INVALID_VALUE;
	for (cuuint32_t i = 0; i < rank; i++)
		if (!dims[i] || dims[i] > (1ull << 32) || !element_strides[i] || element_strides[i] > 8 ||
		    (i + 1 < rank && (strides[i] & 15 || strides[i] >= (1ull << 40))))
			return CUDA_ERROR_INVALID_VALUE;
	return CUDA_SUCCESS;
}

static unsigned tmap_elem_bytes(CUtensorMapDataType t)
{
	switch (t) {
	case CU_TENSOR_MAP_DATA_TYPE_UINT8:
		return 1;
	case CU_TENSOR_MAP_DATA_TYPE_UINT16:
	case CU_TENSOR_MAP_DATA_TYPE_FLOAT16:
	case CU_TENSOR_MAP_DATA_TYPE_BFLOAT16:
		return 2;
	case CU_TENSOR_MAP_DATA_TYPE_UINT32:
	case CU_TENSOR_MAP_DATA_TYPE_INT32:
	case CU_TENSOR_MAP_DATA_TYPE_FLOAT32:
	case CU_TENSOR_MAP_DATA_TYPE_FLOAT32_FTZ:
	case CU_TENSOR_MAP_DATA_TYPE_TFLOAT32:
	case CU_TENSOR_MAP_DATA_TYPE_TFLOAT32_FTZ:
		return 4;
	case CU_TENSOR_MAP_DATA_TYPE_INT64:
	case CU_TENSOR_MAP_DATA_TYPE_UINT64:
	case CU_TENSOR_MAP_DATA_TYPE_FLOAT64:
		return 8;
	default:
		return 0; /* packed sub-byte types: not checked */
	}
}

static void tmap_pack(CUtensorMap *m, unsigned kind, CUtensorMapDataType type, cuuint32_t rank, void *address,
		      const cuuint64_t *dims, const cuuint64_t *strides, const cuuint32_t *box,
		      const cuuint32_t *element_strides, uint64_t flags)
{
	memset(m, 0, sizeof(*m));
	m->opaque[0] = (uintptr_t)address;
	m->opaque[1] = (uint64_t)kind << 56 | (uint64_t)type << 32 | rank;
	for (cuuint32_t i = 0; i < rank; i++) {
		m->opaque[2 + i] = dims[i];
		m->opaque[7 + i] = (uint64_t)(box ? box[i] : 0) << 32 | element_strides[i];
		if (i + 1 < rank)
			m->opaque[12 + i] = strides[i] >> 4;
	}
	m->opaque[15] ^= flags;
}

CUresult cuTensorMapEncodeTiled(CUtensorMap *tensorMap, CUtensorMapDataType tensorDataType,
				cuuint32_t tensorRank, void *globalAddress, const cuuint64_t *globalDim,
				const cuuint64_t *globalStrides, const cuuint32_t *boxDim,
				const cuuint32_t *elementStrides, CUtensorMapInterleave interleave,
				CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2Promotion,
				CUtensorMapFloatOOBfill oobFill)
{
	CUresult res;

	SIM_ENTER_NOINIT(cuTensorMapEncodeTiled);
	if (!tensorMap || !boxDim)
		return CUDA_ERROR_INVALID_VALUE;
	res = tmap_check(tensorRank, globalAddress, globalDim, globalStrides, elementStrides);
	for (cuuint32_t i = 0; res == CUDA_SUCCESS && i < tensorRank; i++)
		if (!boxDim[i] || boxDim[i] > 256)
			res = CUDA_ERROR_INVALID_VALUE;
	/* The inner box is whole 16-byte units, within the swizzle's span (as the driver checks). */
	if (res == CUDA_SUCCESS && interleave == CU_TENSOR_MAP_INTERLEAVE_NONE &&
	    tmap_elem_bytes(tensorDataType) &&
	    (boxDim[0] * tmap_elem_bytes(tensorDataType) % 16 ||
	     (swizzle != CU_TENSOR_MAP_SWIZZLE_NONE &&
	      boxDim[0] * tmap_elem_bytes(tensorDataType) > (swizzle <= 3 ? 16u << swizzle : 128u))))
		res = CUDA_ERROR_INVALID_VALUE;
	if (res == CUDA_SUCCESS)
		tmap_pack(tensorMap, 1, tensorDataType, tensorRank, globalAddress, globalDim, globalStrides,
			  boxDim, elementStrides,
			  (uint64_t)interleave << 24 | (uint64_t)swizzle << 16 | (uint64_t)l2Promotion << 8 |
			      (uint64_t)oobFill);
	return res;
}

CUresult cuTensorMapEncodeIm2col(CUtensorMap *tensorMap, CUtensorMapDataType tensorDataType,
				 cuuint32_t tensorRank, void *globalAddress, const cuuint64_t *globalDim,
				 const cuuint64_t *globalStrides, const int *pixelBoxLowerCorner,
				 const int *pixelBoxUpperCorner, cuuint32_t channelsPerPixel,
				 cuuint32_t pixelsPerColumn, const cuuint32_t *elementStrides,
				 CUtensorMapInterleave interleave, CUtensorMapSwizzle swizzle,
				 CUtensorMapL2promotion l2Promotion, CUtensorMapFloatOOBfill oobFill)
{
	CUresult res;
	uint64_t corners = 0;

	SIM_ENTER_NOINIT(cuTensorMapEncodeIm2col);
	if (!tensorMap || tensorRank < 3 || !pixelBoxLowerCorner || !pixelBoxUpperCorner)
		return CUDA_ERROR_INVALID_VALUE;
	res = tmap_check(tensorRank, globalAddress, globalDim, globalStrides, elementStrides);
	for (cuuint32_t i = 0; i + 2 < tensorRank; i++)
		corners = corners * 131 + (uint64_t)(pixelBoxLowerCorner[i] + 256) * 521 +
			  (uint64_t)(pixelBoxUpperCorner[i] + 256);
	if (res == CUDA_SUCCESS)
		tmap_pack(tensorMap, 2, tensorDataType, tensorRank, globalAddress, globalDim, globalStrides,
			  NULL, elementStrides,
			  corners << 40 ^ (uint64_t)channelsPerPixel << 28 ^ (uint64_t)pixelsPerColumn << 16 ^
			      (uint64_t)interleave << 12 ^ (uint64_t)swizzle << 8 ^
			      (uint64_t)l2Promotion << 4 ^ (uint64_t)oobFill);
	return res;
}

CUresult cuTensorMapReplaceAddress(CUtensorMap *tensorMap, void *globalAddress)
{
	SIM_ENTER_NOINIT(cuTensorMapReplaceAddress);
	if (!tensorMap || ((uintptr_t)globalAddress & 15))
		return CUDA_ERROR_INVALID_VALUE;
	tensorMap->opaque[0] = (uintptr_t)globalAddress;
	return CUDA_SUCCESS;
}
