#!/usr/bin/env python3
"""Writes the seed inputs of fuzz/corpus/<target>/ (committed; each under 4 KiB): a few small valid
inputs per decoder, laid out as the C structures are (x86-64, little-endian). The module-image seeds
come from nvcc (fuzz/seed_kernels.cu) when --nvcc is given; they are committed, so this is needed only
to make them again. Inputs that once crashed a target (crash-*) are kept in the corpus as regression
tests and are not written here."""
import argparse
import os
import shutil
import struct
import subprocess
import tempfile

top = os.path.dirname(os.path.abspath(__file__))


def put(target, name, data):
    assert len(data) < 4096, (target, name, len(data))
    d = os.path.join(top, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def a8(b):
    return b + b"\0" * (-len(b) % 8)


# ---- journal records: type byte, then struct crc_jrec_call and its parts -------------------------
def jrec(op, handles=(), refs=(), name=None, args=b"", ctx=0, obj=0, addr=0, size=0, image=b"", flags=0):
    nb = name.encode() + b"\0" if name is not None else b""
    h = struct.pack("<IHHHHIQIIQQQ16sQII", 1, op, len(handles), len(refs), len(nb), len(args), ctx, 7, 0,
                    obj, addr, size, image.ljust(16, b"\0"), len(image) and 4096, flags, 0)
    assert len(h) == 88
    return h + b"".join(struct.pack("<Q", v) for v in handles) + \
        b"".join(struct.pack("<Q", v) for v in refs) + a8(nb) + a8(args)


def vh(tag, idx):
    return (0x100 + tag) << 32 | idx


def journal():
    put("jrec", "mem_alloc", bytes([7]) + jrec(5, refs=[vh(1, 1)], ctx=vh(1, 1), addr=0x680000000000,
                                               size=2 << 20, args=struct.pack("<Q", 2 << 20)))
    put("jrec", "function_get", bytes([5]) + jrec(9, handles=[vh(3, 1)], refs=[vh(1, 1), vh(2, 1)],
                                                  name="_Z6kernelPfi", ctx=vh(1, 1)))
    put("jrec", "module_load", bytes([3]) + jrec(8, handles=[vh(2, 1)], image=bytes(range(1, 17)),
                                                 args=struct.pack("<QQQ", 4096, 0, 4096), flags=1))
    put("jrec", "stream_destroy", bytes([10]) + jrec(20, refs=[vh(6, 3)], obj=vh(6, 3)))


# ---- manifests (store/manifest.c) ---------------------------------------------------------------
def mstr(s):
    if s is None:
        return struct.pack("<I", 0xFFFFFFFF)
    b = s.encode()
    return struct.pack("<I", len(b)) + b


def manifest(regions, meta, ckpt=3, session=1):
    out = struct.pack("<IIQQqII", 0x4D435243, 1, ckpt, session, 1700000000000000000, len(regions), len(meta))
    for kind, addr, size, module, name, chunks in regions:
        out += struct.pack("<IIQQ", kind, len(chunks), addr, size) + module.ljust(16, b"\0") + mstr(name)
        for h, n in chunks:
            out += h.ljust(16, b"\0") + struct.pack("<Q", n)
    for k, v in meta:
        out += mstr(k) + mstr(v)
    return out


def manifests():
    put("manifest", "empty", manifest([], []))
    put("manifest", "alloc", manifest([(1, 0x680000000000, 8 << 20, b"", None,
                                        [(b"\x11" * 16, 4 << 20), (b"\x22" * 16, 4 << 20)])],
                                      [("crcuda.session", "1"), ("criu.images_dir", "criu/3")]))
    put("manifest", "global", manifest([(2, 0, 4, b"\x33" * 16, "g_counter@0x10200000001", [(b"\x44" * 16, 4)]),
                                        (3, 0, 0, b"", "", [])],
                                       [("crcuda.devices", "0,1"), ("", "")]))


# ---- stored chunks (store/codec.c): mode byte, u32 length, bytes ---------------------------------
def chunks():
    def c(mode, length, payload):
        return bytes([mode]) + struct.pack("<I", length) + payload
    # An LZ4 block by hand: 4 literals, a match of 35 bytes at offset 4, then 5 literals (44 bytes).
    lz4 = bytes([0x4F]) + b"abcd" + struct.pack("<H", 4) + bytes([16, 0x50]) + b"wxyz!"
    put("chunk", "lz4-block", c(0, 44, lz4))
    put("chunk", "lz4-short-dst", c(0, 20, lz4))
    text = b"checkpoint restore " * 60
    zst = subprocess.run(["zstd", "-1", "-c", "-q"], input=text, capture_output=True, check=True).stdout
    put("chunk", "zstd-frame", c(1, len(text), zst))
    put("chunk", "zstd-wrong-size", c(1, len(text) - 1, zst))
    for mode, name in ((2, "lz4"), (3, "zstd"), (4, "auto-durable"), (5, "auto-nosync")):
        put("chunk", "encode-" + name, c(mode, 0, text))
    put("chunk", "encode-zeros", c(4, 0, bytes(3000)))
    put("chunk", "loc-raw", c(6, 0, struct.pack("<QQQ", 7, 64, 4096)))
    put("chunk", "loc-lz4", c(6, 0, struct.pack("<QQQII", 7, 64, 4096, 100, 1)))


# ---- framed records ----------------------------------------------------------------------------
def rec(op, payload, seq, flags=0):
    return struct.pack("<IHHQ", 16 + len(payload), op, flags, seq) + payload


def call(args):
    return struct.pack("<QII", vh(1, 1), 1, 0) + args


def rings():
    # round trip: record lengths in 8-byte units (pairs of bytes)
    put("ring", "round_trip", bytes([1]) + struct.pack("<8H", 0, 1, 2, 30, 200, 255, 3, 254))
    put("ring", "round_trip_wrap", bytes([1]) + struct.pack("<12H", *([100] * 12)))
    # raw: head, tail, then the data area
    data = rec(5, call(struct.pack("<Q", 4096)), 1) + rec(0x8003, b"", 2) + rec(60, call(b"\0" * 24), 3, 1)
    put("ring", "raw", bytes([0]) + struct.pack("<QQ", len(data), 0) + data)


def frames():
    recs = rec(5, call(struct.pack("<Q", 4096)), 1) + rec(9, call(b"x" * 40), 2, 1) + rec(0x8000, b"", 3)
    put("frames", "tcp", bytes([0]) + recs)
    req = struct.pack("<iiQ", 1234, 5000, 0)
    put("frames", "ctl_requests", bytes([1]) + rec(0x8100, b"", 1) + rec(0x8101, req, 2) +
        rec(0x8102, req + b"/tmp/store\0", 3))
    reply = struct.pack("<iI", 0, 0) + b"\0" * 512
    put("frames", "ctl_replies", bytes([2]) + rec(0x8100, reply + b"\0" * 64, 1) +
        rec(0x8103, struct.pack("<iI", -5, 0) + b"no such session".ljust(512, b"\0"), 2))


def ctl_client():
    def reply(op, seq, data=b"", status=0, msg=b""):
        return rec(op, struct.pack("<iI", status, 0) + msg.ljust(512, b"\0") + data, seq)

    sess = struct.pack("<QiIQQQIIQiI", 1, 1234, 1000, 0x680000000000, 256 << 30, 8 << 20, 1, 1, 12, 1300, 1)
    # calls: bits 0-2 the first, bits 3-5 the second (0 sessions, 1 checkpoint, 2 commit, 3 commit wait,
    # 4 quiesce with a park socket, 5 resume, 6-7 restore)
    put("ctl_client", "sessions", bytes([0 | 5 << 3]) + reply(0x8100, 1, sess * 2) + reply(0x8105, 2))
    ckpt = struct.pack("<5Q2dQdQ", 2, 1, 1, 8 << 20, 8 << 20, 0.5, 0.25, 4 << 20, 0.01, 0)
    put("ctl_client", "checkpoint", bytes([1 | 2 << 3]) + reply(0x8102, 1, ckpt) +
        reply(0x8103, 2, struct.pack("<Q", 42)))
    put("ctl_client", "checkpoint_v1", bytes([1]) + reply(0x8102, 1, ckpt[:56]))
    put("ctl_client", "commit_wait", bytes([3 | 6 << 3]) + reply(0x8107, 1, struct.pack("<Q", 7)) +
        reply(0x8106, 2))
    put("ctl_client", "refused", bytes([4]) + reply(0x8101, 1, status=-3, msg=b"no session of pid 1"))


def nvml_req():
    # include/crcuda/nvml_fwd.h: name[64], u32 nparams, then per parameter DEV uuid[96] | VAL u64 |
    # u32 len + bytes (0xffffffff: NULL)
    def req(name, *params):
        return name.encode().ljust(64, b"\0") + struct.pack("<I", len(params)) + b"".join(params)
    dev = b"GPU-4bbc86ca-7e99-c1b0-b8f4-4917eb903156".ljust(96, b"\0")
    val = lambda v: struct.pack("<Q", v)
    buf = lambda b: struct.pack("<I", len(b)) + b
    null = struct.pack("<I", 0xffffffff)
    put("nvml_req", "clock_info", req("nvmlDeviceGetClockInfo", dev, val(1), buf(b"\0" * 4)))
    put("nvml_req", "processes", req("nvmlDeviceGetComputeRunningProcesses_v3", dev,
                                     buf(struct.pack("<I", 4)), buf(b"\0" * 96)))
    put("nvml_req", "processes_count", req("nvmlDeviceGetComputeRunningProcesses_v3", dev,
                                           buf(struct.pack("<I", 0)), null))
    put("nvml_req", "process_utilization", req("nvmlDeviceGetProcessUtilization", dev, buf(b"\0" * 64),
                                               buf(struct.pack("<I", 2)), val(0)))
    put("nvml_req", "field_values", req("nvmlDeviceGetFieldValues", dev, val(2), buf(b"\1" * 80)))
    put("nvml_req", "serial", req("nvmlDeviceGetSerial", dev, buf(b"\0" * 30), val(30)))
    put("nvml_req", "topology", req("nvmlDeviceGetTopologyCommonAncestor", dev, dev, buf(b"\0" * 4)))


def criu_image():
    put("criu_image", "dump", b"version 1\ndaemon /tmp/crcuda-0/crcudad.sock\nstore /var/lib/crcuda/store\n"
        b"ckpt 12\ntask 4242 3 123456\n")
    put("criu_image", "no_ckpt", b"version 1\ndaemon 10.0.0.2:7777\nstore /s\n")
    put("criu_image", "two_tasks", b"version 1\nstore /s\nckpt 1\ntask 1 1 1\ntask 2 2 2\n")


def images(nvcc):
    cu = os.path.join(top, "seed_kernels.cu")
    with tempfile.TemporaryDirectory() as tmp:
        def build(out, *args):
            path = os.path.join(tmp, out)
            subprocess.run([nvcc, *args, "-o", path, cu], check=True)
            with open(path, "rb") as f:
                return f.read()
        sm = ["-gencode", "arch=compute_80,code=sm_80"]
        ptx = build("k.ptx", "-ptx", "-arch=sm_80")
        cubin = build("k.cubin", "-cubin", "-arch=sm_80")
        put("ptx", "kernels.ptx", ptx)
        put("cubin", "kernels.cubin", cubin)
        put("modimage", "ptx", bytes([80]) + ptx + b"\0")
        put("modimage", "cubin", bytes([80]) + cubin)
        put("modimage", "plain.fatbin", bytes([80]) + build("p.fatbin", "-fatbin", *sm, "--compress-mode=none"))
        put("modimage", "zstd.fatbin", bytes([86]) + build("z.fatbin", "-fatbin", *sm,
                                                           "-gencode", "arch=compute_80,code=compute_80",
                                                           "-Xfatbin", "-compress-all"))
        put("modimage", "lz4.fatbin", bytes([86]) + build("l.fatbin", "-fatbin", "-gencode",
                                                          "arch=compute_80,code=sm_80",
                                                          "--compress-mode=speed", "-Xfatbin", "-compress-all"))


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--nvcc", help="nvcc, to make the module-image seeds again")
    a = ap.parse_args()
    journal()
    manifests()
    chunks()
    rings()
    frames()
    ctl_client()
    nvml_req()
    criu_image()
    if a.nvcc:
        images(a.nvcc)


if __name__ == "__main__":
    main()
