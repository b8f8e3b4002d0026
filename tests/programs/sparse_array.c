/* sparse_array: a sparse 2D CUDA array (CUDA_ARRAY3D_SPARSE) whose tiles are mapped to tile-pool
 * memory (cuMemCreate with CU_MEM_CREATE_USAGE_TILE_POOL) by cuMemMapArrayAsync. Prints the sparse
 * properties and every answer: the whole array written and read back (mapped tiles keep what was
 * written, unmapped ones read zeros), a 2D copy into one mapped tile, one tile unmapped (zeros there,
 * the others unchanged), and the refusals of a tile-unaligned offset, a tile-unaligned extent, an
 * unknown operation, a NULL array and a non-sparse array. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_test.h"

#define TX 4 /* tiles across */
#define TY 2 /* tiles down */

static unsigned tw, th; /* a tile's extent, elements */

static CUarrayMapInfo entry(CUarray a, unsigned x, unsigned y, unsigned w, unsigned h, CUmemOperationType op,
			    CUmemGenericAllocationHandle mem, unsigned long long offset)
{
	CUarrayMapInfo e = {.resourceType = CU_RESOURCE_TYPE_ARRAY,
			    .subresourceType = CU_ARRAY_SPARSE_SUBRESOURCE_TYPE_SPARSE_LEVEL,
			    .memOperationType = op,
			    .memHandleType = CU_MEM_HANDLE_TYPE_GENERIC,
			    .offset = offset,
			    .deviceBitMask = 1};

	e.resource.array = a;
	e.subresource.sparseLevel.offsetX = x;
	e.subresource.sparseLevel.offsetY = y;
	e.subresource.sparseLevel.extentWidth = w;
	e.subresource.sparseLevel.extentHeight = h;
	e.subresource.sparseLevel.extentDepth = 1;
	e.memHandle.memHandle = mem;
	return e;
}

/* The whole array into host memory: one line per tile row, each tile's sum (0: all zeros). */
static void dump(CUarray a, unsigned *host, const char *what, const unsigned char *want_mapped)
{
	size_t W = (size_t)TX * tw, H = (size_t)TY * th;
	CUDA_MEMCPY3D c = {.srcMemoryType = CU_MEMORYTYPE_ARRAY,
			   .srcArray = a,
			   .dstMemoryType = CU_MEMORYTYPE_HOST,
			   .dstHost = host,
			   .dstPitch = W * 4,
			   .dstHeight = H,
			   .WidthInBytes = W * 4,
			   .Height = H,
			   .Depth = 1};

	memset(host, 0xee, W * H * 4);
	CU_CHECK(cuMemcpy3D(&c));
	printf("sparse_array: %s:", what);
	for (unsigned ty = 0; ty < TY; ty++)
		for (unsigned tx = 0; tx < TX; tx++) {
			unsigned long long sum = 0;
			bool zero = true;

			for (size_t y = ty * th; y < (ty + 1) * th; y++)
				for (size_t x = tx * tw; x < (tx + 1) * tw; x++) {
					sum = sum * 31 + host[y * W + x];
					zero = zero && !host[y * W + x];
				}
			printf(" %s%016llx", ty && !tx ? "| " : "", sum);
			if (want_mapped && !want_mapped[ty * TX + tx] && !zero) {
				fprintf(stderr,
					"sparse_array: tile (%u, %u) is not mapped but reads non-zero\n", tx,
					ty);
				exit(1);
			}
		}
	printf("\n");
}

static void probe(const char *what, CUarrayMapInfo e)
{
	CUresult r = cuMemMapArrayAsync(&e, 1, NULL);

	printf("sparse_array: %s: %s\n", what, cu_error_name(r));
	CHECK(r != CUDA_SUCCESS);
}

int main(void)
{
	CUdevice dev;
	CUDA_ARRAY_SPARSE_PROPERTIES sp;
	CUarray a, plain;
	CUmemGenericAllocationHandle pool;
	CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
				    .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE}};
	size_t gran = 0, pool_size = 2u << 20, W, H;
	int supported = 0;
	unsigned *host, *pattern;

	cu_test_init("sparse_array");
	cu_test_primary_context(&dev);
	CU_CHECK(cuDeviceGetAttribute(&supported, CU_DEVICE_ATTRIBUTE_SPARSE_CUDA_ARRAY_SUPPORTED, dev));
	printf("sparse_array: sparse arrays supported %d\n", supported);
	if (!supported) {
		fprintf(stderr, "sparse_array: skipped: the device has no sparse arrays\n");
		return CHECK_SKIP;
	}
	/* A probe for the tile extent, then the array of TX x TY tiles. */
	CUDA_ARRAY3D_DESCRIPTOR d = {.Width = 1024,
				     .Height = 1024,
				     .Format = CU_AD_FORMAT_UNSIGNED_INT32,
				     .NumChannels = 1,
				     .Flags = CUDA_ARRAY3D_SPARSE};
	CU_CHECK(cuArray3DCreate(&a, &d));
	CU_CHECK(cuArrayGetSparseProperties(&sp, a));
	CU_CHECK(cuArrayDestroy(a));
	tw = sp.tileExtent.width;
	th = sp.tileExtent.height;
	CHECK(tw && th && sp.tileExtent.depth == 1);
	d.Width = W = (size_t)TX * tw;
	d.Height = H = (size_t)TY * th;
	CU_CHECK(cuArray3DCreate(&a, &d));
	CU_CHECK(cuArrayGetSparseProperties(&sp, a));
	printf("sparse_array: %zux%zu words, tile %ux%ux%u, miptail first level %u size %llu, flags %#x\n", W,
	       H, sp.tileExtent.width, sp.tileExtent.height, sp.tileExtent.depth, sp.miptailFirstLevel,
	       sp.miptailSize, sp.flags);
	d.Flags = 0;
	CU_CHECK(cuArray3DCreate(&plain, &d));
	printf("sparse_array: sparse properties of a plain array: %s\n",
	       cu_error_name(cuArrayGetSparseProperties(&sp, plain)));

	/* The tile pool. */
	prop.location.id = dev;
	prop.allocFlags.usage = CU_MEM_CREATE_USAGE_TILE_POOL;
	CU_CHECK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
	pool_size = (pool_size + gran - 1) / gran * gran;
	CU_CHECK(cuMemCreate(&pool, pool_size, &prop, 0));
	CU_CHECK(cuMemGetAllocationPropertiesFromHandle(&prop, pool));
	printf("sparse_array: tile pool usage %#x\n", (unsigned)prop.allocFlags.usage);

	/* Tiles (0,0) and (1,0) in one entry, (3,1) in another. */
	size_t tile_bytes = (size_t)tw * th * 4;
	CUarrayMapInfo map[2] = {
	    entry(a, 0, 0, 2 * tw, th, CU_MEM_OPERATION_TYPE_MAP, pool, 0),
	    entry(a, 3 * tw, th, tw, th, CU_MEM_OPERATION_TYPE_MAP, pool, 2 * tile_bytes),
	};
	unsigned char mapped[TX * TY] = {0};
	mapped[0] = mapped[1] = mapped[TX + 3] = 1;
	CU_CHECK(cuMemMapArrayAsync(map, 2, NULL));
	CU_CHECK(cuStreamSynchronize(NULL));

	host = malloc(W * H * 4);
	pattern = malloc(W * H * 4);
	CHECK(host && pattern);
	for (size_t i = 0; i < W * H; i++)
		pattern[i] = (unsigned)(i * 2654435761u) | 1;
	CUDA_MEMCPY3D in = {.srcMemoryType = CU_MEMORYTYPE_HOST,
			    .srcHost = pattern,
			    .srcPitch = W * 4,
			    .srcHeight = H,
			    .dstMemoryType = CU_MEMORYTYPE_ARRAY,
			    .dstArray = a,
			    .WidthInBytes = W * 4,
			    .Height = H,
			    .Depth = 1};
	CU_CHECK(cuMemcpy3D(&in));
	dump(a, host, "written whole", mapped);
	for (unsigned ty = 0; ty < TY; ty++)
		for (unsigned tx = 0; tx < TX; tx++)
			for (size_t y = ty * th; mapped[ty * TX + tx] && y < (ty + 1) * th; y++)
				CHECK(!memcmp(host + y * W + tx * tw, pattern + y * W + tx * tw, tw * 4));

	/* A 2D copy of 8 rows into tile (3,1), read back the same way. */
	unsigned rows[8 * 16], back[8 * 16];
	for (unsigned i = 0; i < 8 * 16; i++)
		rows[i] = 0x5a000000u + i;
	CUDA_MEMCPY2D c2 = {.srcMemoryType = CU_MEMORYTYPE_HOST,
			    .srcHost = rows,
			    .srcPitch = 16 * 4,
			    .dstMemoryType = CU_MEMORYTYPE_ARRAY,
			    .dstArray = a,
			    .dstXInBytes = (3 * tw + 4) * 4,
			    .dstY = th + 2,
			    .WidthInBytes = 16 * 4,
			    .Height = 8};
	CU_CHECK(cuMemcpy2D(&c2));
	CUDA_MEMCPY2D r2 = {.srcMemoryType = CU_MEMORYTYPE_ARRAY,
			    .srcArray = a,
			    .srcXInBytes = (3 * tw + 4) * 4,
			    .srcY = th + 2,
			    .dstMemoryType = CU_MEMORYTYPE_HOST,
			    .dstHost = back,
			    .dstPitch = 16 * 4,
			    .WidthInBytes = 16 * 4,
			    .Height = 8};
	CU_CHECK(cuMemcpy2D(&r2));
	CHECK(!memcmp(rows, back, sizeof(rows)));
	/* The same rows from an unmapped tile (2,1): zeros. */
	r2.srcXInBytes = (2 * tw + 4) * 4;
	CU_CHECK(cuMemcpy2D(&r2));
	for (unsigned i = 0; i < 8 * 16; i++)
		CHECK(back[i] == 0);
	dump(a, host, "after the 2D copy", mapped);

	/* Tile (1,0) unmapped: zeros there, the others as they were. */
	CUarrayMapInfo un = entry(a, tw, 0, tw, th, CU_MEM_OPERATION_TYPE_UNMAP, 0, 0);
	CU_CHECK(cuMemMapArrayAsync(&un, 1, NULL));
	CU_CHECK(cuStreamSynchronize(NULL));
	mapped[1] = 0;
	dump(a, host, "tile (1,0) unmapped", mapped);
	for (size_t y = 0; y < th; y++)
		CHECK(!memcmp(host + y * W, pattern + y * W, tw * 4));

	/* Refusals. */
	probe("unaligned offset", entry(a, tw / 2, 0, tw, th, CU_MEM_OPERATION_TYPE_MAP, pool, 0));
	probe("unaligned extent", entry(a, 0, 0, tw / 2, th, CU_MEM_OPERATION_TYPE_MAP, pool, 0));
	probe("unknown operation", entry(a, 0, 0, tw, th, (CUmemOperationType)3, pool, 0));
	probe("NULL array", entry(NULL, 0, 0, tw, th, CU_MEM_OPERATION_TYPE_UNMAP, 0, 0));
	probe("plain array", entry(plain, 0, 0, tw, th, CU_MEM_OPERATION_TYPE_UNMAP, 0, 0));

	/* Everything unmapped, then gone. */
	CUarrayMapInfo all = entry(a, 0, 0, (unsigned)W, (unsigned)H, CU_MEM_OPERATION_TYPE_UNMAP, 0, 0);
	CU_CHECK(cuMemMapArrayAsync(&all, 1, NULL));
	CU_CHECK(cuStreamSynchronize(NULL));
	memset(mapped, 0, sizeof(mapped));
	dump(a, host, "all unmapped", mapped);
	CU_CHECK(cuArrayDestroy(a));
	CU_CHECK(cuArrayDestroy(plain));
	CU_CHECK(cuMemRelease(pool));
	free(host);
	free(pattern);
	cu_test_pass("sparse_array");
}
