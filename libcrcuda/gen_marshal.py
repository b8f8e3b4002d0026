#!/usr/bin/env python3
"""Generate include/crcuda/cuda_marshal.def and cuda_api_sig.def from cuda_api.def.

cuda_marshal.def: how the rows of the driver API table travel to crcudad: every FORWARD row, and
every HOOK and LOCAL row that can be carried the same way (their hand-written code calls the
generated forwarder crc_fwd_<sym> where it needs the daemon). Each argument is classified from its
declared type (see enum crc_arg_kind in crcuda/proto.h):
  VAL     by-value scalar, enum or pointer-free struct
  HANDLE  by-value virtual handle (a type of CRC_HANDLE_TYPES in proto.h)
  IN      `const T *` to one pointer-free T
  OUT     `T *` to one pointer-free T (copied in and back)
  HOUT    `H *` for a handle type H: the daemon names the new object
  STR     `const char *`
  ARR_IN  `[const] H *` (H a handle type) or `const CUgraphEdgeData *`, counted by a by-value count
          argument (numDependencies...)
  ARR_OUT `H *` or `CUgraphEdgeData *` counted by a `size_t *` count argument (in: capacity, out:
          how many there are: cuGraphGetNodes, cuGraphGetEdges...)
Anything else (void *, T **, arrays, callbacks, structs holding pointers or handles, opaque handles
the daemon does not translate, by-value pointers) cannot be forwarded by value: the generator fails
naming the row (hook and local rows are then left out), and the row's policy in cuda_driver.api must become hook or unsupported.

Rows whose name says the work is asynchronous (…Async, event records, stream waits/writes) and
that return nothing are posted without waiting for the reply (ASYNC); the rest wait (SYNC).

cuda_api_sig.def: `#define CRC_SIG_<sym> (params)` for every symbol, so hand-written code can define a
function with a row's exact signature by name.

Python 3 standard library only.

usage: gen_marshal.py --def cuda_api.def --proto proto.h --cuda-h cuda.h --marshal OUT --sig OUT
"""

import argparse
import os
import re
import sys

ROW = re.compile(r"^CRC_CU_API\((\w+), (\w+), (\w+), (\d+), (\w+), (\w+), (\w+), (\(.*?\)), (\(.*?\))\)$")
# Posted without a reply: async by contract, and nothing to give back.
ASYNC_NAMES = re.compile(r"(Async|^cuEventRecord|^cuEventRecordWithFlags|^cuStreamWaitEvent|"
                         r"^cuStreamWriteValue|^cuStreamWaitValue|^cuStreamBatchMemOp|^cuGraphLaunch$|^cuGraphUpload$)")
# By-value types that are really pointers or process-local handles.
BAD_VALUE_TYPES = {"CUmemGenericAllocationHandle", "CUtexref", "CUsurfref"}
# Parameters that count the elements of another (non-const or const) pointer parameter: with one of
# these present, a `T *` is an array, not one T.
COUNT_NAMES = re.compile(r"^(count|nbGroups|nbResources|numParams|numPrefetchLocs|numAttrs|numDependencies|numNodes|"
                         r"numRootNodes|numEdges|numDependentNodes)$")
# Pointer-free element types carried as counted arrays beside the handle arrays of graph calls.
ARRAY_TYPES = {"CUgraphEdgeData"}


class GenError(Exception):
    pass


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


def parse_handle_types(proto_h):
    with open(proto_h, encoding="utf-8") as f:
        text = f.read()
    m = re.search(r"#define CRC_HANDLE_TYPES\(X\)(.*?)\n\n", text, re.S)
    if not m:
        raise GenError("%s: no CRC_HANDLE_TYPES" % proto_h)
    return set(re.findall(r"X\(\w+, (\w+)\)", m.group(1)))


def parse_cuda_h(cuda_h):
    """Opaque handle typedefs, function-pointer typedefs, aliases, and the structs holding pointers."""
    with open(cuda_h, encoding="utf-8") as f:
        text = strip_comments(f.read())
    opaque = set(re.findall(r"typedef\s+struct\s+\w+\s*\*\s*(\w+)\s*;", text))
    fnptr = set(re.findall(r"typedef\s+[\w\s\*]+\(\s*(?:CUDA_CB\s+|CUDAAPI\s+)?\*\s*(\w+)\s*\)\s*\(", text))
    aliases = dict((b, a) for a, b in re.findall(r"typedef\s+(?:struct\s+|union\s+|enum\s+)?(\w+)\s+(\w+)\s*;",
                                                   text))
    # typedef struct|union TAG { body } NAME, *PNAME;  (bodies may nest)
    bodies = {}
    for m in re.finditer(r"typedef\s+(struct|union)\s+(\w+)?\s*\{", text):
        depth, i = 1, m.end()
        while depth and i < len(text):
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        body = text[m.end():i - 1]
        tail = re.match(r"\s*([^;]*);", text[i:])
        names = [n.strip() for n in tail.group(1).split(",")] if tail else []
        for n in names + ([m.group(2)] if m.group(2) else []):
            if n and not n.startswith("*"):
                bodies[n] = body
    return opaque, fnptr, aliases, bodies


class Types:
    def __init__(self, handles, opaque, fnptr, aliases, bodies):
        self.handles, self.opaque, self.fnptr, self.aliases, self.bodies = handles, opaque, fnptr, aliases, bodies
        self.memo = {}
        # typedef X_v1 X; for a handle type X: X_v1 names the same handle.
        self.handle_names = dict((aliases[h], h) for h in handles if h in aliases)

    def resolve(self, t):
        seen = set()
        while t in self.aliases and t not in seen and t not in self.bodies:
            seen.add(t)
            t = self.aliases[t]
        return t

    def pointer_free(self, t):
        """True when a T can be copied between processes byte for byte."""
        t = self.resolve(t)
        if t in self.memo:
            return self.memo[t]
        self.memo[t] = False  # recursion guard
        ok = True
        if t in self.opaque or t in self.fnptr or t in BAD_VALUE_TYPES or t == "void":
            ok = False
        elif t in self.bodies:
            body = self.bodies[t]
            if "*" in body:
                ok = False
            else:
                for word in set(re.findall(r"\b[A-Za-z_]\w*\b", body)):
                    if (word in self.opaque or word in self.fnptr or word in BAD_VALUE_TYPES or
                            (word in self.bodies or word in self.aliases) and word != t and
                            not self.pointer_free(word)):
                        ok = False
                        break
        self.memo[t] = ok
        return ok


def split_params(params):
    inner = params[1:-1].strip()
    if inner in ("", "void"):
        return []
    out, depth, cur = [], 0, ""
    for ch in inner:
        depth += {"(": 1, "[": 1, ")": -1, "]": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    out.append(cur.strip())
    return out


def classify(decl, types):
    """(kind, type, name) for one parameter declaration, or raise GenError saying why not."""
    if "(" in decl or "[" in decl:
        raise GenError("`%s`: function pointer or array" % decl)
    m = re.match(r"^(.*?)([A-Za-z_]\w*)$", decl)
    tpart, name = m.group(1), m.group(2)
    depth = tpart.count("*")
    words = re.findall(r"[A-Za-z_]\w*", tpart)
    const = "const" in words
    base = " ".join(w for w in words if w not in ("const", "struct", "enum", "union", "volatile"))
    # A versioned name of a handle type (CUmemGenericAllocationHandle_v1) is that handle type.
    base = types.handle_names.get(base, base)
    if depth == 0:
        if base in types.handles:
            return "HANDLE", base, name
        if types.resolve(base) in types.fnptr or not types.pointer_free(base):
            raise GenError("`%s`: by-value %s holds a pointer or an untranslated handle" % (decl, base))
        return "VAL", base, name
    if depth > 1:
        raise GenError("`%s`: pointer to pointer" % decl)
    if base == "char" and const:
        return "STR", "char", name
    if base in ("void", "char"):
        raise GenError("`%s`: untyped buffer" % decl)
    if base in types.handles:
        return ("HARR" if const else "HOUT"), base, name
    if types.resolve(base) in ARRAY_TYPES:
        return ("PARR_IN" if const else "PARR_OUT"), base, name
    if not types.pointer_free(base):
        raise GenError("`%s`: %s holds a pointer or an untranslated handle" % (decl, base))
    return ("IN" if const else "OUT"), base, name


def generate(def_path, types):
    rows, errors = [], []
    with open(def_path, encoding="utf-8") as f:
        for line in f:
            m = ROW.match(line.strip())
            if m:
                rows.append(m.groups())
    if not rows:
        raise GenError("%s: no rows" % def_path)
    specs = []
    for sym, parent, base, version, policy, pt, ret, params, args in rows:
        if policy == "UNSUPPORTED" or pt != "NONE":
            continue
        if ret != "CUresult":
            errors.append("%s: returns %s" % (sym, ret))
            continue
        try:
            argspec = [list(classify(p, types)) + [None] for p in split_params(params)]
            counts = [(i, k) for i, (k, _, n, _) in enumerate(argspec) if COUNT_NAMES.match(n)]
            for a in argspec:
                kind, typ, name = a[0], a[1], a[2]
                # `H *phX` is the one handle a call makes; another `H *` beside a count is an array.
                arrayish = (kind in ("HARR", "PARR_IN", "PARR_OUT") or
                            kind == "HOUT" and counts and not name.startswith("ph"))
                if arrayish:
                    if len(counts) != 1 or counts[0][1] not in ("VAL", "OUT"):
                        raise GenError("`%s`: an array without one count argument" % name)
                    a[0] = "ARR_IN" if counts[0][1] == "VAL" else "ARR_OUT"
                    if kind == "PARR_IN" and a[0] != "ARR_IN" or kind == "PARR_OUT" and a[0] != "ARR_OUT":
                        raise GenError("`%s`: an array whose constness disagrees with its count" % name)
                    a[3] = counts[0][0]
                elif (kind in ("IN", "OUT") and not name.lower().endswith("params") and
                      any(argspec[c][2] != name for c, _ in counts)):
                    raise GenError("`%s`: an array counted by `%s`" % (name, argspec[counts[0][0]][2]))
            argspec = [tuple(a) for a in argspec]
        except GenError as e:
            # Only FORWARD rows must be carried; a hook or local row without a spec is marshalled by
            # hand where it needs the daemon at all.
            if policy == "FORWARD":
                errors.append("%s: %s" % (sym, e))
            continue
        has_out = any(k in ("OUT", "HOUT", "ARR_OUT") for k, _, _, _ in argspec)
        mode = "ASYNC" if ASYNC_NAMES.search(base) and not has_out else "SYNC"
        specs.append((sym, mode, argspec))
    if errors:
        raise GenError("FORWARD rows the marshaller cannot carry (make them hook or unsupported in "
                       "cuda_driver.api):\n  " + "\n  ".join(errors))
    return rows, specs


def render_marshal(specs):
    out = ["/* include/crcuda/cuda_marshal.def: generated by libcrcuda/gen_marshal.py from cuda_api.def.",
           " * Do not edit: edit the table (common/cuda-api/cuda_driver.api) or the generator.",
           " *",
           " * For every FORWARD row, and every HOOK or LOCAL row whose arguments can be carried, without a",
           " * per-thread variant suffix (variants forward as their parent with CRC_CALL_PTDS), in table order:",
           " *   CRC_FWD_BEGIN(sym, nargs, SYNC | ASYNC)",
           " *   CRC_FWD_ARG(sym, index, VAL | HANDLE | IN | OUT | HOUT | STR, type, name)   one per argument,",
           " *   or for an array CRC_FWD_ARR(sym, index, ARR_IN | ARR_OUT, type, name, count, HANDLE | PLAIN)",
           " *   CRC_FWD_END(sym)",
           " * type is the argument's type for VAL and HANDLE, the pointee's for IN, OUT and HOUT, char for STR,",
           " * the element's for arrays; count is the index of the argument counting an array's elements.",
           " * ASYNC rows are posted without waiting for the reply. */",
           "#if !defined(CRC_FWD_BEGIN) || !defined(CRC_FWD_ARG) || !defined(CRC_FWD_ARR) || !defined(CRC_FWD_END)",
           "#error \"define CRC_FWD_BEGIN, CRC_FWD_ARG, CRC_FWD_ARR and CRC_FWD_END first\"",
           "#endif",
           ""]
    for sym, mode, argspec in specs:
        out.append("CRC_FWD_BEGIN(%s, %d, %s)" % (sym, len(argspec), mode))
        for i, (kind, typ, name, count) in enumerate(argspec):
            if count is None:
                out.append("CRC_FWD_ARG(%s, %d, %s, %s, %s)" % (sym, i, kind, typ, name))
            else:
                elem = "PLAIN" if typ in ARRAY_TYPES else "HANDLE"
                out.append("CRC_FWD_ARR(%s, %d, %s, %s, %s, %d, %s)" % (sym, i, kind, typ, name, count, elem))
        out.append("CRC_FWD_END(%s)" % sym)
    return "\n".join(out) + "\n"


def render_sig(rows):
    out = ["/* include/crcuda/cuda_api_sig.def: generated by libcrcuda/gen_marshal.py from cuda_api.def. Do not edit.",
           " *",
           " * CRC_SIG_<sym>: the parenthesised parameter declarations of every symbol of the driver API",
           " * table, to define a function with a row's signature by name (needs the types cuda_api.def",
           " * needs). */",
           "#ifndef CRCUDA_CUDA_API_SIG_H",
           "#define CRCUDA_CUDA_API_SIG_H",
           ""]
    for sym, parent, base, version, policy, pt, ret, params, args in rows:
        out.append("#define CRC_SIG_%s %s" % (sym, params))
    out += ["", "#endif"]
    return "\n".join(out) + "\n"


def write_if_changed(path, text):
    try:
        with open(path, encoding="utf-8") as f:
            if f.read() == text:
                return
    except FileNotFoundError:
        pass
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--def", dest="def_in", required=True)
    ap.add_argument("--proto", required=True)
    ap.add_argument("--cuda-h", required=True)
    ap.add_argument("--marshal", required=True)
    ap.add_argument("--sig", required=True)
    args = ap.parse_args(argv)
    try:
        types = Types(parse_handle_types(args.proto), *parse_cuda_h(args.cuda_h))
        rows, specs = generate(args.def_in, types)
    except (GenError, OSError) as e:
        print("gen_marshal.py: error: %s" % e, file=sys.stderr)
        return 1
    write_if_changed(args.marshal, render_marshal(specs))
    write_if_changed(args.sig, render_sig(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
