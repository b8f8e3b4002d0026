"""Triton as a user runs it (issue 13): a vector add, a row softmax and, where the GPU and Triton have
them, a kernel whose loads go through a TMA tensor descriptor (Hopper). Prints a SHA-256 of every
result. Exits 77 when Triton, PyTorch or a GPU is missing."""
import hashlib
import sys

try:
    import torch
    import triton
    import triton.language as tl
    if not torch.cuda.is_available():
        raise RuntimeError("no GPU")
except Exception as e:
    print(f"triton_add: skipped: {e}", file=sys.stderr)
    sys.exit(77)


def digest(name, t):
    print(f"{name}: {hashlib.sha256(t.cpu().numpy().tobytes()).hexdigest()[:16]}", flush=True)


@triton.jit
def add_kernel(x, y, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=m) + tl.load(y + offs, mask=m), mask=m)


@triton.jit
def softmax_kernel(x, out, cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    m = offs < cols
    v = tl.load(x + row * cols + offs, mask=m, other=-float("inf"))
    e = tl.exp(v - tl.max(v, axis=0))
    tl.store(out + row * cols + offs, e / tl.sum(e, axis=0), mask=m)


g = torch.Generator(device="cuda").manual_seed(7)
n = 1 << 20
x = torch.rand(n, device="cuda", generator=g)
y = torch.rand(n, device="cuda", generator=g)
out = torch.empty_like(x)
add_kernel[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
digest("triton_add", out)
a = torch.randn(256, 1000, device="cuda", generator=g)
sm = torch.empty_like(a)
softmax_kernel[(256,)](a, sm, 1000, BLOCK=1024)
digest("triton_softmax", sm)

if torch.cuda.get_device_capability()[0] >= 9 and hasattr(tl, "make_tensor_descriptor"):
    @triton.jit
    def tma_copy(x, out, M, N, BM: tl.constexpr, BN: tl.constexpr):
        desc = tl.make_tensor_descriptor(x, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
        pm, pn = tl.program_id(0), tl.program_id(1)
        tile = desc.load([pm * BM, pn * BN])
        offs_m = pm * BM + tl.arange(0, BM)[:, None]
        offs_n = pn * BN + tl.arange(0, BN)[None, :]
        tl.store(out + offs_m * N + offs_n, tile * 2)

    triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device="cuda"))
    M, N = 256, 256
    src = torch.randn(M, N, device="cuda", generator=g)
    dst = torch.empty_like(src)
    tma_copy[(M // 64, N // 64)](src, dst, M, N, BM=64, BN=64)
    digest("triton_tma", dst)
else:
    print("triton_tma: not on this GPU or Triton")
print("triton_add: done")
