#!/usr/bin/env python3
"""Generate nvml/nvml_exports.def from nvml/nvml.api, the table of crcuda's libnvidia-ml.so.1 exports.

Each row names an ABI symbol, its policy and its C signature; the .def gives one
NVML_API(sym, policy, target, ret, params, args) line per row, which nvml.c expands into the generated
entry points (unsupported, empty, alias) and declarations of the hand-written ones (implemented).

Any problem with the table (unsorted or duplicate rows, bad policy, an unnamed parameter, an alias whose
target is missing or has another signature, an `empty` row without device and infoCount) is an error naming the
row; the exit status is then 1 and nothing is written. Python 3 standard library only.

usage: gen_nvml.py --table nvml.api --def OUT.def      write OUT.def (left alone when unchanged)
       gen_nvml.py --table nvml.api --check FILE.def   exit 1 with a diff when FILE.def is stale
"""

import argparse
import difflib
import os
import re
import sys

POLICIES = ("implemented", "unsupported", "empty")
# forward[,OPTION...]: options are a fallback (driver | empty; else NOT_SUPPORTED), `pid`, and
# NAME[COUNT] / NAME[*COUNT] for an array parameter counted by a value / an in-out count.
FALLBACKS = ("driver", "empty")
ARRAY_OPT = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)\[(\*?)([A-Za-z_][A-Za-z0-9_]*)\]$")
IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Words that end a declaration without naming it: `unsigned int`, `const char *`...
TYPE_WORDS = {"void", "char", "short", "int", "long", "float", "double", "signed", "unsigned", "const"}


class TableError(Exception):
    pass


class Row:
    def __init__(self, where, sym, policy, target, ret, params):
        self.where = where
        self.sym = sym
        self.policy = policy  # implemented | unsupported | empty | alias
        self.target = target  # the aliased symbol, else sym
        self.ret = ret
        self.params = params  # list of declarations, [] for (void)
        self.args = [param_name(p, where) for p in params]
        self.fallback = "none"
        self.arrays = {}  # array parameter -> (count parameter, count is a pointer)
        self.pid = False
        self.kinds = []  # forward rows: one (kind, type, ref) per parameter


def param_name(decl, where):
    m = re.search(r"([A-Za-z_][A-Za-z0-9_]*)$", decl)
    if not m or m.group(1) in TYPE_WORDS or m.group(1).endswith("_t") or decl.strip() == m.group(1):
        raise TableError("%s: parameter %r has no name" % (where, decl))
    return m.group(1)


def forward_options(row, options):
    for o in options:
        m = ARRAY_OPT.match(o)
        if o in FALLBACKS:
            if row.fallback != "none":
                raise TableError("%s: two fallbacks" % row.where)
            row.fallback = o
        elif o == "pid":
            row.pid = True
        elif m:
            if m.group(1) not in row.args or m.group(3) not in row.args:
                raise TableError("%s: %s names no parameter" % (row.where, o))
            row.arrays[m.group(1)] = (m.group(3), m.group(2) == "*")
        else:
            raise TableError("%s: unknown forward option %r" % (row.where, o))
    if row.pid and len(row.arrays) != 1:
        raise TableError("%s: `pid` needs exactly one array" % row.where)


def param_type(decl, name):
    return re.sub(r"\s+", " ", decl[: decl.rfind(name)]).strip()


def forward_kinds(row):
    """Each parameter's wire kind, from its declaration; see include/crcuda/nvml_fwd.h."""
    if row.ret != "nvmlReturn_t":
        raise TableError("%s: a forwarded function must return nvmlReturn_t" % row.where)
    if len(row.params) > 8:
        raise TableError("%s: more than 8 parameters" % row.where)
    for i, (decl, name) in enumerate(zip(row.params, row.args)):
        t = param_type(decl, name)
        if t == "nvmlDevice_t":
            row.kinds.append(("DEV", t, None))
        elif not t.endswith("*"):
            row.kinds.append(("VAL", t, None))
        else:
            base = t[:-1].strip()
            if base.startswith("const") or base.endswith("*") or base in ("void", "nvmlDevice_t"):
                raise TableError("%s: parameter %r cannot be forwarded" % (row.where, decl))
            if name in row.arrays:
                count, is_ptr = row.arrays[name]
                ci = row.args.index(count)
                ctype = param_type(row.params[ci], count)
                if is_ptr != ctype.endswith("*") or (is_ptr and ctype != "unsigned int *"):
                    raise TableError("%s: the count of %s must be %s" %
                                     (row.where, name, "unsigned int *" if is_ptr else "a value"))
                row.kinds.append(("ARR_IO" if is_ptr else "ARR", base, ci))
            elif base == "char":
                if i + 1 >= len(row.params) or param_type(row.params[i + 1], row.args[i + 1]) != "unsigned int":
                    raise TableError("%s: %s must be followed by its `unsigned int` length" % (row.where, name))
                row.kinds.append(("STR", base, i + 1))
            else:
                row.kinds.append(("PTR", base, None))


def parse_table(path):
    rows, errors = [], []
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    for lineno, line in enumerate(lines, 1):
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        cols = text.split(None, 2)
        where = "%s:%d: %s" % (path, lineno, cols[0])
        try:
            if len(cols) != 3:
                raise TableError("%s: expected `symbol policy RET (PARAMS)`" % where)
            sym, policy, sig = cols
            if not IDENT.match(sym) or not sym.startswith("nvml"):
                raise TableError("%s: bad symbol" % where)
            target = sym
            options = []
            if policy.startswith("forward"):
                options = policy.split(",")[1:]
                if policy.split(",")[0] != "forward":
                    raise TableError("%s: bad policy %r" % (where, policy))
                policy = "forward"
            if policy.startswith("alias:"):
                target = policy[len("alias:"):]
                policy = "alias"
                if not IDENT.match(target) or target == sym:
                    raise TableError("%s: bad alias target %r" % (where, target))
            elif policy not in POLICIES + ("forward",):
                raise TableError("%s: policy must be one of %s or alias:SYM" % (where, ", ".join(POLICIES)))
            m = re.match(r"^(.+?)\s*\((.*)\)$", sig)
            if not m:
                raise TableError("%s: signature must be `RET (PARAMS)`, got %r" % (where, sig))
            ret = re.sub(r"\s+", " ", m.group(1).strip())
            ptext = m.group(2).strip()
            params = [] if ptext == "void" else [re.sub(r"\s+", " ", p.strip()) for p in ptext.split(",")]
            if any(not p for p in params):
                raise TableError("%s: empty parameter" % where)
            row = Row(where, sym, policy, target, ret, params)
            if policy == "forward":
                forward_options(row, options)
                forward_kinds(row)
            rows.append(row)
        except TableError as e:
            errors.append(str(e))
    return rows, errors


def check_rows(rows):
    errors = []
    by_sym = {}
    prev = None
    for r in rows:
        if prev is not None and r.sym.encode() <= prev.encode():
            errors.append("%s: rows must be sorted by symbol and unique (after %s)" % (r.where, prev))
        prev = r.sym
        by_sym[r.sym] = r
    for r in rows:
        if r.policy == "alias":
            t = by_sym.get(r.target)
            if t is None:
                errors.append("%s: alias target %s is not in the table" % (r.where, r.target))
            elif t.policy == "alias":
                errors.append("%s: alias target %s is itself an alias" % (r.where, r.target))
            elif (t.ret, [p for p in t.params]) != (r.ret, r.params):
                errors.append("%s: signature differs from its alias target %s" % (r.where, r.target))
        if r.policy == "forward" and r.fallback == "empty" and ("nvmlDevice_t device" not in r.params or
                                                               "unsigned int *infoCount" not in r.params):
            errors.append("%s: an `empty` fallback needs `nvmlDevice_t device` and `unsigned int *infoCount`"
                          % r.where)
        if r.policy in ("unsupported", "empty") and r.ret != "nvmlReturn_t":
            errors.append("%s: a generated entry point must return nvmlReturn_t" % r.where)
        if r.policy == "empty" and ("nvmlDevice_t device" not in r.params or
                                    "unsigned int *infoCount" not in r.params):
            errors.append("%s: an `empty` row needs `nvmlDevice_t device` and `unsigned int *infoCount`" % r.where)
    return errors


def render(rows, table):
    out = [
        "/* nvml/nvml_exports.def: generated by nvml/gen_nvml.py from nvml/nvml.api. Do not edit: edit the",
        " * table, rebuild, and run `cmake --build build --target nvml_update`.",
        " *",
        " * One line per function crcuda's libnvidia-ml.so.1 exports, sorted by symbol:",
        " *   NVML_API(sym, policy, target, ret, params, args)",
        " * policy   IMPLEMENTED | UNSUPPORTED | EMPTY | ALIAS | FORWARD",
        " * target   the symbol an ALIAS calls; sym itself otherwise",
        " * ret      the return type; params: the parenthesised declarations; args: the parenthesised names",
        " * then, for each FORWARD row (answered by the real NVML of the daemon's host):",
        " *   NVML_FWD(sym, fallback, flags, ret, params, args, desc, pack, call)",
        " * fallback NONE | DRIVER | EMPTY: the answer where nothing forwards (not under crcuda, or the",
        " *          daemon has no NVML): NOT_SUPPORTED, nvml.c's driver_<sym>, an empty process list",
        " * flags    0 | CRC_NVML_F_PID",
        " * desc     the parameters' CRC_NVML_P_* initialisers (crcuda/nvml_fwd.h)",
        " * pack     the arguments as union crc_nvml_arg initialisers",
        " * call     the arguments of a typed call from `union crc_nvml_arg *a`",
        " * NVML_FWD is optional. The types are declared by nvml/nvml_types.h. */",
        "#ifndef NVML_API",
        "#error \"define NVML_API(sym, policy, target, ret, params, args) first\"",
        "#endif",
        "#ifndef NVML_FWD",
        "#define NVML_FWD(sym, fallback, flags, ret, params, args, desc, pack, call)",
        "#define NVML_FWD_DEFAULTED_",
        "#endif",
        "",
    ]
    for r in rows:
        out.append("NVML_API(%s, %s, %s, %s, %s, %s)" % (r.sym, r.policy.upper(), r.target, r.ret,
                                                         params_of(r), args_of(r)))
    out.append("")
    for r in rows:
        if r.policy != "forward":
            continue
        desc, pack, call = [], [], []
        for i, ((kind, t, ref), name) in enumerate(zip(r.kinds, r.args)):
            if kind == "DEV":
                desc.append("CRC_NVML_P_DEV")
                pack.append("{.p = (void *)%s}" % name)
                call.append("(nvmlDevice_t)a[%d].p" % i)
            elif kind == "VAL":
                desc.append("CRC_NVML_P_VAL")
                pack.append("{.u = (uint64_t)%s}" % name)
                call.append("(%s)a[%d].u" % (t, i))
            else:
                if kind == "PTR":
                    desc.append("CRC_NVML_P_PTR(%s)" % t)
                elif kind == "STR":
                    desc.append("CRC_NVML_P_STR(%d)" % ref)
                else:
                    desc.append("CRC_NVML_P_%s(%s, %d)" % (kind, t, ref))
                pack.append("{.p = (void *)%s}" % name)
                call.append("(%s *)a[%d].p" % (t, i))
        out.append("NVML_FWD(%s, %s, %s, %s, %s, %s, (%s), (%s), (%s))" % (
            r.sym, r.fallback.upper(), "CRC_NVML_F_PID" if r.pid else "0", r.ret, params_of(r), args_of(r),
            ", ".join(desc), ", ".join(pack), ", ".join(call)))
    out += ["", "#ifdef NVML_FWD_DEFAULTED_", "#undef NVML_FWD", "#undef NVML_FWD_DEFAULTED_", "#endif"]
    return "\n".join(out) + "\n"


def params_of(r):
    return "(%s)" % (", ".join(r.params) if r.params else "void")


def args_of(r):
    return "(%s)" % ", ".join(r.args)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--table", required=True)
    group = ap.add_mutually_exclusive_group(required=True)
    group.add_argument("--def", dest="def_out")
    group.add_argument("--check")
    a = ap.parse_args()

    rows, errors = parse_table(a.table)
    if not errors:
        errors = check_rows(rows)
    if errors:
        for e in errors:
            print("gen_nvml.py: " + e, file=sys.stderr)
        return 1
    text = render(rows, a.table)
    if a.check:
        try:
            with open(a.check, encoding="utf-8") as f:
                old = f.read()
        except OSError as e:
            print("gen_nvml.py: %s" % e, file=sys.stderr)
            return 1
        if old != text:
            sys.stdout.writelines(difflib.unified_diff(old.splitlines(True), text.splitlines(True), a.check,
                                                       "regenerated from " + a.table))
            print("gen_nvml.py: %s is out of date with %s: run `cmake --build build --target nvml_update` "
                  "and commit it" % (a.check, a.table), file=sys.stderr)
            return 1
        print("%s matches %s (%d rows)" % (a.check, a.table, len(rows)))
        return 0
    try:
        with open(a.def_out, encoding="utf-8") as f:
            if f.read() == text:
                return 0
    except OSError:
        pass
    os.makedirs(os.path.dirname(os.path.abspath(a.def_out)), exist_ok=True)
    tmp = a.def_out + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, a.def_out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
