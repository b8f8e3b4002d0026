#!/usr/bin/env python3
"""compare.py NATIVE.LOG LAYER.LOG [--max N] [--summary]: where a program's driver calls under crcuda
differ from its native run (logs written by the calltrace libcuda.so.1). --summary adds a count of
the differences by call and kind.

Threads are paired by order of first appearance. Within each pair the call sequences are aligned by
name; the report lists calls present on one side only, then aligned calls whose result or answers
differ. Values that look like addresses or handles (8-byte values of at least 0x10000 on both sides) differ between runs
by nature and are ignored; so are the bytes behind pointer arguments that hold such values."""
import difflib
import re
import sys
from collections import OrderedDict

LINE = re.compile(r"^(\d+) (\d+) (\w+)\((.*?)\) = (-?\d+)(?: -> (.*))?(.*)$")
OUT = re.compile(r" \[(\d+)\]=(\"[^\"]*\"|[0-9a-f]*)")
BIG = 0x10000


def parse(path):
    threads = OrderedDict()
    for line in open(path, errors="replace"):
        m = LINE.match(line.rstrip("\n"))
        if not m:
            continue
        tid, _, name, args, res, resolved, rest = m.groups()
        outs = dict((int(i), v) for i, v in OUT.findall(rest))
        threads.setdefault(tid, []).append((name, args, int(res), resolved, outs, line.strip()))
    return list(threads.values())


def small(v):
    try:
        return int(v, 0) < BIG
    except ValueError:
        return True


def words(hexbytes):
    """The little-endian 8-byte words of a byte dump (shorter dumps: one word)."""
    b = bytes.fromhex(hexbytes) if len(hexbytes) % 2 == 0 else b""
    return [int.from_bytes(b[i:i + 8], "little") for i in range(0, len(b), 8)] or [0]


def differs(a, b):
    name, args_a, res_a, resolved_a, outs_a, _ = a
    _, args_b, res_b, resolved_b, outs_b, _ = b
    if res_a != res_b or resolved_a != resolved_b:
        return "result"
    for x, y in zip(args_a.split(","), args_b.split(",")):
        if x != y and (small(x) or small(y)):
            return "argument"
    for i in set(outs_a) | set(outs_b):
        x, y = outs_a.get(i), outs_b.get(i)
        if x == y:
            continue
        if x is None or y is None or x.startswith('"') or y.startswith('"') or len(x) < 16:
            return f"answer [{i}]"
        for wx, wy in zip(words(x), words(y)):
            if wx != wy and (wx < BIG or wy < BIG):
                return f"answer [{i}]"
    return None


def main():
    native, layer = parse(sys.argv[1]), parse(sys.argv[2])
    limit = int(sys.argv[sys.argv.index("--max") + 1]) if "--max" in sys.argv else 40
    shown = 0
    kinds = {}
    print(f"threads: native {len(native)}, layer {len(layer)}")
    for t, (na, la) in enumerate(zip(native, layer)):
        print(f"== thread {t}: native {len(na)} calls, layer {len(la)} calls")
        sm = difflib.SequenceMatcher(None, [c[0] for c in na], [c[0] for c in la], autojunk=False)
        for op, i1, i2, j1, j2 in sm.get_opcodes():
            if op == "equal":
                for a, b in zip(na[i1:i2], la[j1:j2]):
                    why = differs(a, b)
                    if why:
                        kinds[(a[0], why)] = kinds.get((a[0], why), 0) + 1
                    if why and shown < limit:
                        shown += 1
                        print(f"  differ ({why}) at native #{i1}:\n    native: {a[5]}\n    layer:  {b[5]}")
                    i1 += 1
                continue
            for c in na[i1:i2]:
                kinds[(c[0], "native only")] = kinds.get((c[0], "native only"), 0) + 1
            for c in la[j1:j2]:
                kinds[(c[0], "layer only")] = kinds.get((c[0], "layer only"), 0) + 1
            if shown >= limit:
                continue
            shown += 1
            print(f"  {op}: native #{i1}-{i2} vs layer #{j1}-{j2}")
            for c in na[i1:min(i2, i1 + 6)]:
                print(f"    native: {c[5]}")
            for c in la[j1:min(j2, j1 + 6)]:
                print(f"    layer:  {c[5]}")
    print(f"{shown} difference(s) shown (limit {limit})")
    if "--summary" in sys.argv:
        print(f"summary: {sum(kinds.values())} difference(s) in {len(kinds)} kind(s)")
        for (name, why), n in sorted(kinds.items(), key=lambda kv: -kv[1]):
            print(f"  {n:6d}  {name}: {why}")


if __name__ == "__main__":
    main()
