"""CuPy as a user runs it (issue 13): a RawKernel, cuBLAS (matmul), cuFFT (1D, 2D, batched), cuRAND,
the default memory pool and the stream-ordered one (MemoryAsyncPool), and a RawKernel that reads a
texture object over a CUDA array. Prints a SHA-256 of every result, so two runs (natively, under
crcuda) can be compared byte for byte. Exits 77 when CuPy or a GPU is missing."""
import hashlib
import sys

try:
    import cupy as cp
    cp.cuda.runtime.getDeviceCount()
except Exception as e:  # no CuPy, or no device
    print(f"cupy_ops: skipped: {e}", file=sys.stderr)
    sys.exit(77)


def digest(name, a):
    print(f"{name}: {hashlib.sha256(cp.asnumpy(a).tobytes()).hexdigest()[:16]}", flush=True)


saxpy = cp.RawKernel(r'''
extern "C" __global__ void saxpy(float a, const float *x, const float *y, float *out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a * x[i] + y[i];
}''', "saxpy")

n = 1 << 20
x = cp.arange(n, dtype=cp.float32) / n
y = cp.ones(n, dtype=cp.float32)
out = cp.empty_like(x)
saxpy(((n + 255) // 256,), (256,), (cp.float32(2.5), x, y, out, cp.int32(n)))
digest("rawkernel_saxpy", out)

rs = cp.random.RandomState(seed=1234)
a = rs.standard_normal((512, 384), dtype=cp.float32)
b = rs.standard_normal((384, 256), dtype=cp.float32)
digest("curand_normal", a)
digest("cublas_matmul", a @ b)

sig = cp.sin(cp.arange(4096, dtype=cp.float64) * 0.01)
digest("cufft_1d", cp.fft.fft(sig))
digest("cufft_2d", cp.fft.fft2(a.astype(cp.complex64)))
digest("cufft_batched_r2c", cp.fft.rfft(a, axis=1))

pool = cp.get_default_memory_pool()
keep = [cp.full((1 << k,), k, dtype=cp.int32) for k in range(10, 20)]
digest("memory_pool", cp.concatenate([k[:16] for k in keep]))
print(f"memory_pool_used_nonzero: {pool.used_bytes() > 0}")
del keep

cp.cuda.set_allocator(cp.cuda.MemoryAsyncPool().malloc)
s = cp.cuda.Stream(non_blocking=True)
with s:
    z = cp.arange(1 << 16, dtype=cp.float32)
    z = cp.cumsum(z * z)
s.synchronize()
digest("memory_async_pool", z)
cp.cuda.set_allocator(cp.get_default_memory_pool().malloc)

# A texture object over a 2D CUDA array, read by a RawKernel.
w, h = 64, 32
img = (cp.arange(w * h, dtype=cp.float32).reshape(h, w) % 97) / 97
ch = cp.cuda.texture.ChannelFormatDescriptor(32, 0, 0, 0, cp.cuda.runtime.cudaChannelFormatKindFloat)
arr = cp.cuda.texture.CUDAarray(ch, w, h)
arr.copy_from(img)
res = cp.cuda.texture.ResourceDescriptor(cp.cuda.runtime.cudaResourceTypeArray, cuArr=arr)
tex = cp.cuda.texture.TextureDescriptor((cp.cuda.runtime.cudaAddressModeClamp,) * 2,
                                        cp.cuda.runtime.cudaFilterModePoint,
                                        cp.cuda.runtime.cudaReadModeElementType)
tobj = cp.cuda.texture.TextureObject(res, tex)
fetch = cp.RawKernel(r'''
extern "C" __global__ void fetch(cudaTextureObject_t t, float *out, int w, int h) {
    int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y;
    if (x < w && y < h) out[y * w + x] = 2.0f * tex2D<float>(t, x, y);
}''', "fetch")
tout = cp.empty((h, w), dtype=cp.float32)
fetch(((w + 63) // 64, h), (64,), (tobj, tout, cp.int32(w), cp.int32(h)))
digest("texture_object", tout)
print("cupy_ops: done")
