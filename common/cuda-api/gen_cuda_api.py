#!/usr/bin/env python3
"""Generate include/crcuda/cuda_api.def and cuda_api_undef.h from common/cuda-api/cuda_driver.api.

The table gives every exported symbol of libcuda.so.1 with its base name, typedef version, per-thread
variant and policy; the signatures come from NVIDIA's cudaTypedefs.h (PFN_<base>_v<version>[_ptds|_ptsz]),
parsed as text so the typedefs inside `#if defined(__CUDA_API_VERSION_INTERNAL)` count too. The list of
names to #undef comes from the `#define cuXxx ...` lines of cuda.h.

Any problem with the table (unsorted or duplicate rows, bad policy, a typedef that cannot be found, an
override that is not needed) is an error naming the row; the exit status is then 1 and nothing is written.
Python 3 standard library only.

usage: gen_cuda_api.py --table cuda_driver.api --typedefs cudaTypedefs.h --cuda-h cuda.h \
                       --def OUT.def --undef OUT_undef.h
"""

import argparse
import os
import re
import sys

POLICIES = ("forward", "hook", "local", "unsupported")
PT_KINDS = ("ptds", "ptsz")
IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Words that end a parameter declaration without naming it: `unsigned int`, `const char *`...
TYPE_WORDS = {
    "void", "char", "short", "int", "long", "float", "double", "signed", "unsigned", "const",
    "volatile", "restrict", "struct", "union", "enum", "_Bool",
}


class TableError(Exception):
    pass


class Row:
    def __init__(self, lineno, sym, base, version, pt, pt_version, policy, override, why=None):
        self.lineno = lineno
        self.why = why  # an unsupported row's reason (its comment), for the error libcrcuda logs
        self.sym = sym
        self.base = base
        self.version = version
        self.pt = pt  # None, "ptds" or "ptsz"
        self.pt_version = pt_version
        self.policy = policy
        self.override = override  # (ret, params text) or None

    def where(self, table):
        return "%s:%d: %s" % (table, self.lineno, self.sym)


def parse_table(path):
    rows = []
    errors = []
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    for lineno, line in enumerate(lines, 1):
        text, _, comment = line.partition("#")
        text, comment = text.strip(), comment.strip()
        if not text:
            continue
        override = None
        if "=" in text:
            text, sig = text.split("=", 1)
            text = text.strip()
            sig = sig.strip()
            m = re.match(r"^([A-Za-z_]\w*)\s*\((.*)\)$", sig)
            if not m:
                errors.append("%s:%d: signature override must be `= RET (PARAMS)`, got %r" % (path, lineno, sig))
                continue
            override = (m.group(1), m.group(2))
        cols = text.split()
        where = "%s:%d: %s" % (path, lineno, cols[0] if cols else "")
        if len(cols) != 5:
            errors.append("%s: expected 5 columns (symbol base version pt policy), got %d" % (where, len(cols)))
            continue
        sym, base, version, pt, policy = cols
        if not IDENT.match(sym) or not sym.startswith("cu"):
            errors.append("%s: bad symbol" % where)
            continue
        if re.search(r"_pt(ds|sz)$", sym):
            errors.append("%s: per-thread variants are not rows; put `%s:N` in the pt column of %s"
                          % (where, sym[-4:], sym[:-5]))
            continue
        if not IDENT.match(base) or not (sym == base or re.match(r"^" + re.escape(base) + r"_v[0-9]+$", sym)):
            errors.append("%s: symbol must be the base name `%s` or `%s_vN`" % (where, base, base))
            continue
        if not re.match(r"^[1-9][0-9]*$", version):
            errors.append("%s: bad version %r" % (where, version))
            continue
        pt_kind, pt_version = None, None
        if pt != "-":
            m = re.match(r"^(ptds|ptsz):([1-9][0-9]*)$", pt)
            if not m:
                errors.append("%s: pt must be `-`, `ptds:N` or `ptsz:N`, got %r" % (where, pt))
                continue
            pt_kind, pt_version = m.group(1), int(m.group(2))
        if policy not in POLICIES:
            errors.append("%s: bad policy %r (one of %s)" % (where, policy, ", ".join(POLICIES)))
            continue
        if policy == "unsupported" and not comment:
            errors.append("%s: an unsupported row says why in a comment after it" % where)
            continue
        if policy == "unsupported" and ('"' in comment or "\\" in comment):
            errors.append("%s: a reason has no quotes or backslashes" % where)
            continue
        rows.append(Row(lineno, sym, base, int(version), pt_kind, pt_version, policy, override,
                        comment if policy == "unsupported" else None))
    if errors:
        raise TableError("\n".join(errors))
    for prev, row in zip(rows, rows[1:]):
        a, b = prev.sym.encode(), row.sym.encode()
        if a == b:
            errors.append("%s: duplicate row (also line %d)" % (row.where(path), prev.lineno))
        elif a > b:
            errors.append("%s: rows not sorted: comes after %s (line %d); keep them in LC_ALL=C sort order"
                          % (row.where(path), prev.sym, prev.lineno))
    seen = {}
    for row in rows:
        key = (row.base, row.version)
        if key in seen:
            errors.append("%s: base %s version %d also given to %s" % (row.where(path), row.base, row.version,
                                                                        seen[key].sym))
        seen[key] = row
    if errors:
        raise TableError("\n".join(errors))
    return rows


def parse_typedefs(path):
    """Every `typedef RET (CUDAAPI *PFN_name)(PARAMS);` in the file, whatever #if surrounds it."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    found = {}
    pattern = re.compile(r"typedef\s+([A-Za-z_]\w*)\s*\(\s*CUDAAPI\s*\*\s*(PFN_\w+)\s*\)\s*\((.*?)\)\s*;", re.S)
    for m in pattern.finditer(text):
        found[m.group(2)] = (m.group(1), m.group(3))
    if not found:
        raise TableError("%s: no PFN_ typedefs found" % path)
    return found


def split_params(params):
    out, depth, cur = [], 0, ""
    for ch in params:
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    out.append(cur)
    return [" ".join(p.split()) for p in out]


def param_name(p):
    """The name a parameter declaration declares, or None when it is unnamed."""
    m = re.search(r"\(\s*\*\s*([A-Za-z_]\w*)\s*\)\s*\(", p)  # function pointer: void (*fn)(void *)
    if m:
        return m.group(1)
    q = re.sub(r"(\s*\[[^\]]*\])+$", "", p)  # drop array suffixes
    words = re.findall(r"[A-Za-z_]\w*|\*", q)
    if len(words) < 2 or words[-1] == "*" or words[-1] in TYPE_WORDS or words[-2] in ("struct", "union", "enum"):
        return None
    return words[-1]


def signature(params, where):
    """(params, args) as the .def writes them, naming unnamed parameters a0, a1..."""
    parts = split_params(params.strip())
    if len(parts) == 1 and parts[0] in ("", "void"):
        return "(void)", "()"
    decls, names = [], []
    for i, p in enumerate(parts):
        if not p:
            raise TableError("%s: empty parameter in (%s)" % (where, params))
        name = param_name(p)
        if name is None:
            name = "a%d" % i
            if re.search(r"\(\s*\*\s*\)", p):
                p = re.sub(r"\(\s*\*\s*\)", "(*%s)" % name, p, count=1)
            else:
                m = re.match(r"^(.*?)((\s*\[[^\]]*\])*)$", p)
                sep = "" if m.group(1).endswith("*") else " "
                p = m.group(1) + sep + name + m.group(2)
        decls.append(p)
        names.append(name)
    if len(set(names)) != len(names):
        raise TableError("%s: duplicate parameter names in (%s)" % (where, params))
    return "(" + ", ".join(decls) + ")", "(" + ", ".join(names) + ")"


def build_entries(rows, typedefs, table):
    entries = []
    errors = []
    used = set()
    for row in rows:
        where = row.where(table)
        name = "PFN_%s_v%d" % (row.base, row.version)
        try:
            if row.override:
                if name in typedefs:
                    raise TableError("%s: has a signature override but cudaTypedefs.h has %s; drop the override"
                                     % (where, name))
                ret, params = row.override
            elif name not in typedefs:
                raise TableError("%s: no typedef %s in cudaTypedefs.h (fix version, or give `= RET (PARAMS)`)"
                                 % (where, name))
            else:
                ret, params = typedefs[name]
                used.add(name)
            p, a = signature(params, where)
            entries.append((row.sym, row.sym, row, row.version, "NONE", ret, p, a))
            if row.pt and row.override:
                # The override's signature serves the variant too (its typedef is elsewhere).
                entries.append(("%s_%s" % (row.sym, row.pt), row.sym, row, row.pt_version, row.pt.upper(), ret, p, a))
            elif row.pt:
                ptname = "PFN_%s_v%d_%s" % (row.base, row.pt_version, row.pt)
                if ptname not in typedefs:
                    raise TableError("%s: pt %s:%d but no typedef %s in cudaTypedefs.h"
                                     % (where, row.pt, row.pt_version, ptname))
                used.add(ptname)
                ret, params = typedefs[ptname]
                p, a = signature(params, where + "_" + row.pt)
                entries.append(("%s_%s" % (row.sym, row.pt), row.sym, row, row.pt_version, row.pt.upper(), ret, p, a))
        except TableError as e:
            errors.append(str(e))
    if errors:
        raise TableError("\n".join(errors))
    entries.sort(key=lambda e: e[0].encode())
    for prev, e in zip(entries, entries[1:]):
        if prev[0] == e[0]:
            raise TableError("%s: symbol %s is generated twice" % (table, e[0]))
    unused = sorted(set(typedefs) - used)
    return entries, unused


def parse_cuda_h_defines(path):
    """Names cuda.h #defines to something else (cuMemAlloc -> cuMemAlloc_v2, cuMemcpy -> _ptds...)."""
    names = set()
    with open(path, encoding="utf-8") as f:
        for line in f:
            m = re.match(r"^\s*#\s*define\s+(cu[A-Z]\w*)\s+(\S.*)$", line)
            if m and m.group(2).strip() != m.group(1):
                names.add(m.group(1))
    if not names:
        raise TableError("%s: no `#define cuXxx ...` lines found" % path)
    return sorted(names, key=lambda s: s.encode())


def render_def(entries, table, typedefs_path):
    out = []
    out.append("/* include/crcuda/cuda_api.def: generated by common/cuda-api/gen_cuda_api.py from")
    out.append(" * common/cuda-api/%s and %s. Do not edit: edit the table." % (os.path.basename(table),
                                                                            os.path.basename(typedefs_path)))
    out.append(" *")
    out.append(" * One line per function libcuda.so.1 exports, per-thread variants included, sorted by symbol:")
    out.append(" *   CRC_CU_API(sym, parent, base, version, policy, pt, ret, params, args)")
    out.append(" * sym      the ABI symbol (cuMemcpyHtoD_v2_ptds)")
    out.append(" * parent   the row it belongs to: sym itself, or the symbol without _ptds/_ptsz")
    out.append(" * base     the name cuGetProcAddress is asked for (cuMemcpyHtoD)")
    out.append(" * version  of its typedef: PFN_<base>_v<version>[_ptds|_ptsz] (7000)")
    out.append(" * policy   FORWARD | HOOK | LOCAL | UNSUPPORTED (a variant has its parent's)")
    out.append(" * pt       NONE | PTDS | PTSZ")
    out.append(" * ret      the return type; params: parenthesised declarations, as in the typedef (unnamed ones")
    out.append(" *          become a0, a1...); args: the parenthesised names, () for (void)")
    out.append(" *")
    out.append(" * The parameter types need <cuda.h> included with __CUDA_API_VERSION_INTERNAL defined (the old")
    out.append(" * ABI variants use CUdeviceptr_v1, CUDA_MEMCPY2D_v1...) and <cudaProfiler.h> (CUoutput_mode);")
    out.append(" * define functions under these names after \"crcuda/cuda_api_undef.h\". */")
    out.append("#ifndef CRC_CU_API")
    out.append("#error \"define CRC_CU_API(sym, parent, base, version, policy, pt, ret, params, args) first\"")
    out.append("#endif")
    out.append("")
    for sym, parent, row, version, pt, ret, params, args in entries:
        out.append("CRC_CU_API(%s, %s, %s, %d, %s, %s, %s, %s, %s)" % (sym, parent, row.base, version,
                                                                     row.policy.upper(), pt, ret, params, args))
    return "\n".join(out) + "\n"


def render_why(rows, table):
    out = []
    out.append("/* include/crcuda/cuda_api_why.def: generated by common/cuda-api/gen_cuda_api.py from")
    out.append(" * common/cuda-api/%s. Do not edit: edit the table." % os.path.basename(table))
    out.append(" *")
    out.append(" * Why each unsupported row is unsupported (its comment in the table), for the error libcrcuda")
    out.append(" * logs: CRC_CU_WHY(sym, \"reason\"). */")
    out.append("#ifndef CRC_CU_WHY")
    out.append("#error \"define CRC_CU_WHY(sym, why) first\"")
    out.append("#endif")
    out.append("")
    for row in rows:
        if row.why:
            out.append("CRC_CU_WHY(%s, \"%s\")" % (row.sym, row.why))
    return "\n".join(out) + "\n"


def render_undef(names, cuda_h):
    out = []
    out.append("/* include/crcuda/cuda_api_undef.h: generated by common/cuda-api/gen_cuda_api.py from the")
    out.append(" * `#define cuXxx ...` lines of %s. Do not edit." % os.path.basename(cuda_h))
    out.append(" *")
    out.append(" * cuda.h maps API names onto ABI symbols (cuMemAlloc -> cuMemAlloc_v2; with per-thread default")
    out.append(" * streams cuMemcpy -> cuMemcpy_ptds). After this header those names are plain identifiers again,")
    out.append(" * so a translation unit can define every function under its real ABI name (cuMemAlloc is then")
    out.append(" * the CUDA 2.0 ABI variant). Include it only there, after <cuda.h>: calls made below it bind to")
    out.append(" * the oldest ABI variants. */")
    out.append("#ifndef CRCUDA_CUDA_API_UNDEF_H")
    out.append("#define CRCUDA_CUDA_API_UNDEF_H")
    out.append("")
    out.append("#ifndef __cuda_cuda_h__")
    out.append("#error \"include <cuda.h> before crcuda/cuda_api_undef.h\"")
    out.append("#endif")
    out.append("")
    for n in names:
        out.append("#undef %s" % n)
    out.append("")
    out.append("#endif")
    return "\n".join(out) + "\n"


def write_if_changed(path, text):
    try:
        with open(path, encoding="utf-8") as f:
            if f.read() == text:
                return
    except FileNotFoundError:
        pass
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--table", required=True)
    ap.add_argument("--typedefs", required=True, help="cudaTypedefs.h")
    ap.add_argument("--cuda-h", required=True, help="cuda.h")
    ap.add_argument("--def", dest="def_out", required=True, help="output: cuda_api.def")
    ap.add_argument("--undef", dest="undef_out", required=True, help="output: cuda_api_undef.h")
    ap.add_argument("--why", dest="why_out", required=True, help="output: cuda_api_why.def")
    ap.add_argument("--stats", action="store_true", help="print row and policy counts")
    args = ap.parse_args(argv)
    try:
        rows = parse_table(args.table)
        typedefs = parse_typedefs(args.typedefs)
        entries, unused = build_entries(rows, typedefs, args.table)
        names = parse_cuda_h_defines(args.cuda_h)
    except (TableError, OSError) as e:
        print("gen_cuda_api.py: error:\n%s" % e, file=sys.stderr)
        return 1
    for name in unused:
        print("gen_cuda_api.py: warning: %s: no row uses %s" % (args.typedefs, name), file=sys.stderr)
    write_if_changed(args.def_out, render_def(entries, args.table, args.typedefs))
    write_if_changed(args.undef_out, render_undef(names, args.cuda_h))
    write_if_changed(args.why_out, render_why(rows, args.table))
    if args.stats:
        counts = {p: sum(1 for r in rows if r.policy == p) for p in POLICIES}
        print("%d rows, %d symbols (%d per-thread); %s" % (
            len(rows), len(entries), len(entries) - len(rows),
            ", ".join("%s %d" % (p, counts[p]) for p in POLICIES)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
