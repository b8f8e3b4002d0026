/* textures: CUDA arrays, texture and surface objects, checked against a CPU model.
 *   - a 2D array filled by a 2D copy from pageable memory (a box at an offset, the source pitched),
 *     read back whole into page-locked and pageable memory;
 *   - a 1D array: cuMemcpyHtoA/AtoH at offsets, DtoA, AtoD, AtoA;
 *   - a layered array filled and read back by 3D copies;
 *   - a mipmapped array: a level taken, filled and read back;
 *   - texture objects on the 2D array, the layered array, linear memory (read by kernels) and a
 *     surface object on the 2D array (rewritten by a kernel three times, then read back);
 *   - cuTexObjectGetResourceDesc/cuSurfObjectGetResourceDesc give the handles back.
 * Prints a checksum of everything it read and PASS. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_test.h"

extern const unsigned char state_app_fatbin[];

#define W      61
#define H      23
#define LAYERS 3
#define N1D    1000
#define HPITCH (W * 4 + 36) /* the pageable source's pitch, in bytes */

static unsigned long long checksum = 0xcbf29ce484222325ull;

static void expect(const char *what, const unsigned *got, const unsigned *want, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (got[i] != want[i]) {
			fprintf(stderr, "textures: %s: word %zu is %#x, want %#x\n", what, i, got[i],
				want[i]);
			exit(1);
		}
		checksum = (checksum ^ got[i]) * 0x100000001b3ull;
	}
}

static CUarray array_2d(unsigned w, unsigned h, unsigned depth, unsigned flags)
{
	CUDA_ARRAY3D_DESCRIPTOR d = {.Width = w,
				     .Height = h,
				     .Depth = depth,
				     .Format = CU_AD_FORMAT_UNSIGNED_INT32,
				     .NumChannels = 1,
				     .Flags = flags};
	CUarray a;

	CU_CHECK(cuArray3DCreate(&a, &d));
	return a;
}

static CUtexObject texture_of(const CUDA_RESOURCE_DESC *res)
{
	CUDA_TEXTURE_DESC td = {.addressMode = {CU_TR_ADDRESS_MODE_CLAMP, CU_TR_ADDRESS_MODE_CLAMP},
				.filterMode = CU_TR_FILTER_MODE_POINT,
				.flags = CU_TRSF_READ_AS_INTEGER};
	CUtexObject t;

	CU_CHECK(cuTexObjectCreate(&t, res, &td, NULL));
	return t;
}

static void launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, void **params)
{
	CU_CHECK(cuLaunchKernel(f, gx, gy, gz, 64, 1, 1, 0, NULL, params, NULL));
}

int main(void)
{
	unsigned *model = malloc(W * H * 4), *got = malloc(LAYERS * W * H * 4), *pinned;
	unsigned char *pageable = calloc(H + 2, HPITCH);
	CUfunction f_sample, f_layered, f_fetch, f_surf;
	CUdeviceptr dout, dlin;
	CUcontext ctx;
	CUdevice dev;
	CUmodule mod;

	cu_test_init("textures");
	CU_CHECK(cuDeviceGet(&dev, 0));
	CU_CHECK(cuCtxCreate(&ctx, NULL, 0, dev));
	CU_CHECK(cuModuleLoadData(&mod, state_app_fatbin));
	CU_CHECK(cuModuleGetFunction(&f_sample, mod, "tex_sample2d"));
	CU_CHECK(cuModuleGetFunction(&f_layered, mod, "tex_sample_layered"));
	CU_CHECK(cuModuleGetFunction(&f_fetch, mod, "tex_fetch1d"));
	CU_CHECK(cuModuleGetFunction(&f_surf, mod, "surf_step"));
	CU_CHECK(cuMemAlloc(&dout, LAYERS * W * H * 4));
	CU_CHECK(cuMemAllocHost((void **)&pinned, W * H * 4));

	/* A 2D array from pageable memory: the box starts one row and 3 words into the source. */
	for (unsigned y = 0; y < H; y++)
		for (unsigned x = 0; x < W; x++) {
			model[y * W + x] = y * 7919u + x * 104729u + 17u;
			memcpy(pageable + (y + 1) * HPITCH + 12 + x * 4, &model[y * W + x], 4);
		}
	CUarray a2 = array_2d(W, H, 0, CUDA_ARRAY3D_SURFACE_LDST);
	CUDA_MEMCPY2D in = {.srcXInBytes = 12,
			    .srcY = 1,
			    .srcMemoryType = CU_MEMORYTYPE_HOST,
			    .srcHost = pageable,
			    .srcPitch = HPITCH,
			    .dstMemoryType = CU_MEMORYTYPE_ARRAY,
			    .dstArray = a2,
			    .WidthInBytes = W * 4,
			    .Height = H};
	CU_CHECK(cuMemcpy2D(&in));
	CUDA_MEMCPY2D out = {.srcMemoryType = CU_MEMORYTYPE_ARRAY,
			     .srcArray = a2,
			     .dstMemoryType = CU_MEMORYTYPE_HOST,
			     .dstHost = pinned,
			     .dstPitch = W * 4,
			     .WidthInBytes = W * 4,
			     .Height = H};
	CU_CHECK(cuMemcpy2D(&out));
	expect("2D array read into page-locked memory", pinned, model, W * H);
	out.dstHost = got;
	CU_CHECK(cuMemcpy2DAsync(&out, NULL));
	CU_CHECK(cuCtxSynchronize());
	expect("2D array read into pageable memory", got, model, W * H);

	/* A texture on it, read by a kernel. */
	CUDA_RESOURCE_DESC r2 = {.resType = CU_RESOURCE_TYPE_ARRAY};
	CUDA_RESOURCE_DESC back;
	r2.res.array.hArray = a2;
	CUtexObject t2 = texture_of(&r2);
	int w = W, h = H;
	void *ps[] = {&dout, &t2, &w, &h};
	launch(f_sample, (W + 63) / 64, H, 1, ps);
	CU_CHECK(cuMemcpyDtoH(got, dout, W * H * 4));
	expect("texture on the 2D array", got, model, W * H);
	CU_CHECK(cuTexObjectGetResourceDesc(&back, t2));
	CHECK(back.resType == CU_RESOURCE_TYPE_ARRAY && back.res.array.hArray == a2);

	/* A surface on it, stepped three times by a kernel. */
	CUsurfObject s2;
	CU_CHECK(cuSurfObjectCreate(&s2, &r2));
	CU_CHECK(cuSurfObjectGetResourceDesc(&back, s2));
	CHECK(back.res.array.hArray == a2);
	for (unsigned step = 1; step <= 3; step++) {
		void *pp[] = {&s2, &w, &h, &step};
		launch(f_surf, (W + 63) / 64, H, 1, pp);
		for (unsigned i = 0; i < W * H; i++)
			model[i] = model[i] * 1664525u + step + i % W;
	}
	out.dstHost = got;
	CU_CHECK(cuMemcpy2D(&out));
	expect("2D array after the surface steps", got, model, W * H);
	/* The texture sees what the surface wrote. */
	launch(f_sample, (W + 63) / 64, H, 1, ps);
	CU_CHECK(cuMemcpyDtoH(got, dout, W * H * 4));
	expect("texture after the surface steps", got, model, W * H);

	/* A 1D array: host copies at offsets, then device, device-to-array and array-to-array copies. */
	unsigned lin[N1D], lin2[N1D];
	CUDA_ARRAY_DESCRIPTOR d1 = {
	    .Width = N1D, .Height = 0, .Format = CU_AD_FORMAT_UNSIGNED_INT32, .NumChannels = 1};
	CUarray a1, b1;
	for (unsigned i = 0; i < N1D; i++)
		lin[i] = i * 2654435761u;
	CU_CHECK(cuArrayCreate(&a1, &d1));
	CU_CHECK(cuArrayCreate(&b1, &d1));
	CU_CHECK(cuMemcpyHtoA(a1, 0, lin, 400 * 4));
	CU_CHECK(cuMemcpyHtoAAsync(a1, 400 * 4, lin + 400, (N1D - 400) * 4, NULL));
	CU_CHECK(cuCtxSynchronize());
	memset(lin2, 0, sizeof(lin2));
	CU_CHECK(cuMemcpyAtoH(lin2, a1, 0, N1D * 4));
	expect("1D array", lin2, lin, N1D);
	CU_CHECK(cuMemAlloc(&dlin, N1D * 4));
	CU_CHECK(cuMemcpyAtoD(dlin, a1, 100 * 4, 900 * 4));
	CU_CHECK(cuMemcpyDtoA(b1, 0, dlin, 900 * 4));
	CU_CHECK(cuMemcpyAtoA(b1, 900 * 4, a1, 0, 100 * 4));
	memset(lin2, 0, sizeof(lin2));
	CU_CHECK(cuMemcpyAtoHAsync(lin2, b1, 0, N1D * 4, NULL));
	CU_CHECK(cuCtxSynchronize());
	unsigned rot[N1D];
	for (unsigned i = 0; i < N1D; i++)
		rot[i] = lin[(i + 100) % N1D];
	expect("1D array through AtoD, DtoA and AtoA", lin2, rot, N1D);

	/* A texture on linear memory (the device copy of the 1D array's tail). */
	CUDA_RESOURCE_DESC rl = {.resType = CU_RESOURCE_TYPE_LINEAR};
	rl.res.linear.devPtr = dlin;
	rl.res.linear.format = CU_AD_FORMAT_UNSIGNED_INT32;
	rl.res.linear.numChannels = 1;
	rl.res.linear.sizeInBytes = 900 * 4;
	CUtexObject tl = texture_of(&rl);
	int n = 900;
	void *pf[] = {&dout, &tl, &n};
	launch(f_fetch, (900 + 63) / 64, 1, 1, pf);
	CU_CHECK(cuMemcpyDtoH(lin2, dout, 900 * 4));
	expect("texture on linear memory", lin2, lin + 100, 900);

	/* A layered array by 3D copies (whole, then one layer back into a box of pageable memory). */
	unsigned *layers = malloc(LAYERS * W * H * 4);
	for (unsigned i = 0; i < LAYERS * W * H; i++)
		layers[i] = i * 40503u + 5u;
	CUarray al = array_2d(W, H, LAYERS, CUDA_ARRAY3D_LAYERED);
	CUDA_MEMCPY3D l3 = {.srcMemoryType = CU_MEMORYTYPE_HOST,
			    .srcHost = layers,
			    .srcPitch = W * 4,
			    .srcHeight = H,
			    .dstMemoryType = CU_MEMORYTYPE_ARRAY,
			    .dstArray = al,
			    .WidthInBytes = W * 4,
			    .Height = H,
			    .Depth = LAYERS};
	CU_CHECK(cuMemcpy3D(&l3));
	CUDA_MEMCPY3D b3 = {.srcZ = 2,
			    .srcMemoryType = CU_MEMORYTYPE_ARRAY,
			    .srcArray = al,
			    .dstMemoryType = CU_MEMORYTYPE_HOST,
			    .dstHost = got,
			    .dstPitch = W * 4,
			    .dstHeight = H,
			    .WidthInBytes = W * 4,
			    .Height = H,
			    .Depth = 1};
	CU_CHECK(cuMemcpy3DAsync(&b3, NULL));
	CU_CHECK(cuCtxSynchronize());
	expect("layer 2 of the layered array", got, layers + 2 * W * H, W * H);
	CUDA_RESOURCE_DESC rla = {.resType = CU_RESOURCE_TYPE_ARRAY};
	rla.res.array.hArray = al;
	CUtexObject tla = texture_of(&rla);
	void *pl[] = {&dout, &tla, &w, &h};
	launch(f_layered, (W + 63) / 64, H, LAYERS, pl);
	CU_CHECK(cuMemcpyDtoH(got, dout, LAYERS * W * H * 4));
	expect("texture on the layered array", got, layers, LAYERS * W * H);

	/* A mipmapped array: level 1 is (W/2) x (H/2). */
	CUDA_ARRAY3D_DESCRIPTOR dm = {
	    .Width = W, .Height = H, .Format = CU_AD_FORMAT_UNSIGNED_INT32, .NumChannels = 1};
	CUmipmappedArray mm;
	CUarray lvl;
	CUDA_ARRAY3D_DESCRIPTOR dl;
	CU_CHECK(cuMipmappedArrayCreate(&mm, &dm, 3));
	CU_CHECK(cuMipmappedArrayGetLevel(&lvl, mm, 1));
	CU_CHECK(cuArray3DGetDescriptor(&dl, lvl));
	CHECK(dl.Width == W / 2 && dl.Height == H / 2);
	CUDA_MEMCPY2D ml = {.srcMemoryType = CU_MEMORYTYPE_HOST,
			    .srcHost = layers,
			    .srcPitch = (W / 2) * 4,
			    .dstMemoryType = CU_MEMORYTYPE_ARRAY,
			    .dstArray = lvl,
			    .WidthInBytes = (W / 2) * 4,
			    .Height = H / 2};
	CU_CHECK(cuMemcpy2D(&ml));
	CUDA_MEMCPY2D mb = {.srcMemoryType = CU_MEMORYTYPE_ARRAY,
			    .srcArray = lvl,
			    .dstMemoryType = CU_MEMORYTYPE_HOST,
			    .dstHost = got,
			    .dstPitch = (W / 2) * 4,
			    .WidthInBytes = (W / 2) * 4,
			    .Height = H / 2};
	CU_CHECK(cuMemcpy2D(&mb));
	expect("mipmap level 1", got, layers, (W / 2) * (H / 2));

	CU_CHECK(cuTexObjectDestroy(t2));
	CU_CHECK(cuTexObjectDestroy(tl));
	CU_CHECK(cuTexObjectDestroy(tla));
	CU_CHECK(cuSurfObjectDestroy(s2));
	CU_CHECK(cuMipmappedArrayDestroy(mm));
	CU_CHECK(cuArrayDestroy(a2));
	CU_CHECK(cuArrayDestroy(a1));
	CU_CHECK(cuArrayDestroy(b1));
	CU_CHECK(cuArrayDestroy(al));
	CU_CHECK(cuMemFreeHost(pinned));
	CU_CHECK(cuMemFree(dout));
	CU_CHECK(cuMemFree(dlin));
	CU_CHECK(cuCtxDestroy(ctx));
	printf("textures: checksum=%016llx\nPASS\n", checksum);
	free(model);
	free(got);
	free(layers);
	free(pageable);
	return 0;
}
