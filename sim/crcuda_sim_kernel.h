/* Host implementations of CUDA kernels for crcuda's simulated device.
 *
 * The simulated libcuda.so.1 runs a kernel launch by calling a host function once per thread block.
 * It finds that function in the shared libraries listed in CRCUDA_SIM_KERNELS (colon-separated,
 * dlopened at cuInit) under the name
 *
 *     crcuda_sim_kernel_<mangled kernel name>
 *
 * e.g. `crcuda_sim_kernel__Z10vector_addPKfS0_Pfi` for `__global__ void vector_add(const float *,
 * const float *, float *, int)`, or `crcuda_sim_kernel_scale` for an `extern "C"` kernel `scale`.
 * Bytes of the mangled name outside [A-Za-z0-9_] are written as `_xHH` (two lowercase hex digits).
 * CRCUDA_SIM_KERNEL(mangled) declares such a function.
 *
 * Blocks of one launch run one after another on the stream's worker thread; the function runs every
 * thread of its block itself, usually with CRCUDA_SIM_FOR_EACH_THREAD, and expresses
 * __syncthreads() by ending one loop over the threads and starting the next. Device pointers are
 * plain addresses in the process and may be dereferenced directly; atomics need no care because a
 * launch runs on one thread (but two streams may run at the same time). */
#ifndef CRCUDA_SIM_KERNEL_H
#define CRCUDA_SIM_KERNEL_H

#include <stddef.h>

#define CRCUDA_SIM_KERNEL_ABI_VERSION 1

struct crcuda_sim_dim3 {
	unsigned x, y, z;
};

/* What a texture or surface object reads and writes: element (x, y, z) is at
 * base + z * rows * pitch + y * pitch + x * elem_bytes. Arrays, linear and pitched memory alike. */
struct crcuda_sim_resource {
	unsigned char *base;
	size_t pitch, rows;
	size_t width, height, depth; /* elements, rows, slices (1 when the resource has fewer dimensions) */
	size_t elem_bytes;
	int normalized; /* a texture with normalized coordinates */
};

struct crcuda_sim_block {
	int abi_version;
	const char *kernel_name; /* mangled */
	struct crcuda_sim_dim3 grid_dim;
	struct crcuda_sim_dim3 block_dim;
	struct crcuda_sim_dim3 block_idx;
	/* Dynamic shared memory of this block (the launch's sharedMemBytes), not zeroed. */
	void *dynamic_shared;
	size_t dynamic_shared_bytes;
	/* params[i] points at the bytes of the i-th kernel parameter, param_count of them. */
	void *const *params;
	unsigned param_count;
	/* Address and size of a __device__/__constant__ variable of the kernel's module, NULL if none. */
	void *(*global)(const struct crcuda_sim_block *blk, const char *name, size_t *size);
	const void *sim_private;
	/* A device-side fault (a failed assert: 710, an illegal address: 700, a trap: 719...): as on a GPU,
	 * the error is sticky: every later call of the process fails with it. The block should return. */
	void (*trap)(int error);
	/* The memory a texture or surface object names (0), or -1 for no such object. */
	int (*resource)(unsigned long long object, struct crcuda_sim_resource *out);
	/* cudaGraphSetConditional: sets a conditional handle's value in the graph launch this kernel runs
	 * in (nothing outside one). */
	void (*set_conditional)(const struct crcuda_sim_block *blk, unsigned long long handle,
				unsigned value);
	const void *launch_private;
};

typedef void crcuda_sim_kernel_fn(const struct crcuda_sim_block *blk);

#define CRCUDA_SIM_KERNEL(mangled)                                                                           \
	__attribute__((visibility("default"))) void crcuda_sim_kernel_##mangled(                             \
	    const struct crcuda_sim_block *blk)

/* The i-th kernel parameter as a value of the given type. */
#define CRCUDA_SIM_PARAM(blk, i, type) (*(type *)(blk)->params[(i)])

/* cudaGraphSetConditional(handle, value). */
#define CRCUDA_SIM_SET_CONDITIONAL(blk, handle, value) ((blk)->set_conditional((blk), (handle), (value)))

/* A __device__ variable of the kernel's module as a pointer to type (NULL if absent). */
#define CRCUDA_SIM_GLOBAL(blk, name, type) ((type *)(blk)->global((blk), (name), NULL))

static inline int crcuda_sim__next_thread(struct crcuda_sim_dim3 *t, const struct crcuda_sim_dim3 *dim)
{
	if (++t->x < dim->x)
		return 1;
	t->x = 0;
	if (++t->y < dim->y)
		return 1;
	t->y = 0;
	++t->z;
	return 1;
}

/* for (each threadIdx `t` of the block, x fastest) { body } */
#define CRCUDA_SIM_FOR_EACH_THREAD(blk, t)                                                                   \
	for (struct crcuda_sim_dim3 t = {0, 0, 0}; t.z < (blk)->block_dim.z;                                 \
	     crcuda_sim__next_thread(&t, &(blk)->block_dim))

/* blockIdx.x * blockDim.x + threadIdx.x, and its y/z counterparts. */
#define CRCUDA_SIM_GLOBAL_X(blk, t) ((blk)->block_idx.x * (blk)->block_dim.x + (t).x)
#define CRCUDA_SIM_GLOBAL_Y(blk, t) ((blk)->block_idx.y * (blk)->block_dim.y + (t).y)
#define CRCUDA_SIM_GLOBAL_Z(blk, t) ((blk)->block_idx.z * (blk)->block_dim.z + (t).z)

/* The element at integer coordinates of a resource, clamped to its edges (a point-sampled texture
 * fetch with the clamp address mode, or a surface access), as a pointer to type. */
#define CRCUDA_SIM_ELEM(res, type, x, y, z)                                                                  \
	((type *)((res)->base + crcuda_sim__clamp((z), (res)->depth) * (res)->rows * (res)->pitch +          \
		  crcuda_sim__clamp((y), (res)->height) * (res)->pitch +                                     \
		  crcuda_sim__clamp((x), (res)->width) * (res)->elem_bytes))

static inline size_t crcuda_sim__clamp(long long v, size_t n)
{
	return v < 0 ? 0 : (size_t)v >= n ? n - 1 : (size_t)v;
}

/* Linear thread index within the block. */
#define CRCUDA_SIM_THREAD_RANK(blk, t) (((t).z * (blk)->block_dim.y + (t).y) * (blk)->block_dim.x + (t).x)

#endif
