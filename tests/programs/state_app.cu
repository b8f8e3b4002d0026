// Kernels of state_app: a state-carrying program for checkpoint/restore tests and benchmarks. Every
// word of device memory changes at every step, so a restore that lost or reordered anything shows
// in the final checksum.
extern "C" __global__ void state_init(unsigned *x, unsigned long long n, unsigned seed)
{
	for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
	     i += (unsigned long long)gridDim.x * blockDim.x)
		x[i] = (unsigned)(i * 2654435761ull) ^ seed;
}

extern "C" __global__ void state_step(unsigned *x, unsigned long long n, unsigned step)
{
	for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
	     i += (unsigned long long)gridDim.x * blockDim.x)
		x[i] = x[i] * 1664525u + 1013904223u + step;
}

// Order-independent checksum: sum of (x[i] ^ i) over all words, in 64 bits.
extern "C" __global__ void state_checksum(const unsigned *x, unsigned long long n, unsigned long long *sum)
{
	unsigned long long local = 0;
	for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
	     i += (unsigned long long)gridDim.x * blockDim.x)
		local += x[i] ^ (unsigned)i;
	atomicAdd(sum, local);
}

// --graph: the step number lives on the device, so one captured graph serves every step: state_count
// advances it, state_step_dev reads it.
extern "C" __global__ void state_count(unsigned *step)
{
	if (blockIdx.x == 0 && threadIdx.x == 0)
		*step += 1;
}

extern "C" __global__ void state_step_dev(unsigned *x, unsigned long long n, const unsigned *step)
{
	unsigned k = *step;
	for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
	     i += (unsigned long long)gridDim.x * blockDim.x)
		x[i] = x[i] * 1664525u + 1013904223u + k;
}

// --graph-cond: the last kernel of a WHILE node's body, which loops until the step is a multiple of per.
extern "C" __global__ void state_cond(const unsigned *step, unsigned per, cudaGraphConditionalHandle h)
{
	if (blockIdx.x == 0 && threadIdx.x == 0)
		cudaGraphSetConditional(h, *step % per != 0);
}

// textures.c and state_app --texture: reads through texture objects (point-sampled, unnormalized
// coordinates, so each fetch is one element, on the GPU and on the simulated device alike), reads and
// writes through surface objects.
extern "C" __global__ void tex_sample2d(unsigned *out, cudaTextureObject_t tex, int w, int h)
{
	int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y;
	if (x < w && y < h)
		out[y * w + x] = tex2D<unsigned>(tex, x + 0.5f, y + 0.5f);
}

extern "C" __global__ void tex_sample_layered(unsigned *out, cudaTextureObject_t tex, int w, int h)
{
	int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y, layer = blockIdx.z;
	if (x < w && y < h)
		out[(layer * h + y) * w + x] = tex2DLayered<unsigned>(tex, x + 0.5f, y + 0.5f, layer);
}

extern "C" __global__ void tex_fetch1d(unsigned *out, cudaTextureObject_t tex, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		out[i] = tex1Dfetch<unsigned>(tex, i);
}

// One step of a surface's state: every element rewritten from itself.
extern "C" __global__ void surf_step(cudaSurfaceObject_t surf, int w, int h, unsigned step)
{
	int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y;
	if (x < w && y < h) {
		unsigned v = surf2Dread<unsigned>(surf, x * 4, y);
		surf2Dwrite(v * 1664525u + step + (unsigned)x, surf, x * 4, y);
	}
}

// state_app --texture: each word mixed with the texture's element it maps to.
extern "C" __global__ void state_step_tex(unsigned *x, unsigned long long n, unsigned step, cudaTextureObject_t tex,
					  int w, int h)
{
	for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
	     i += (unsigned long long)gridDim.x * blockDim.x) {
		unsigned e = (unsigned)(i % (unsigned long long)(w * h));
		x[i] = x[i] * 1664525u + 1013904223u + step + tex2D<unsigned>(tex, e % w + 0.5f, e / w + 0.5f);
	}
}
