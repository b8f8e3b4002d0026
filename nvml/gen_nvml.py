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


def param_name(decl, where):
    m = re.search(r"([A-Za-z_][A-Za-z0-9_]*)$", decl)
    if not m or m.group(1) in TYPE_WORDS or m.group(1).endswith("_t") or decl.strip() == m.group(1):
        raise TableError("%s: parameter %r has no name" % (where, decl))
    return m.group(1)


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
            if policy.startswith("alias:"):
                target = policy[len("alias:"):]
                policy = "alias"
                if not IDENT.match(target) or target == sym:
                    raise TableError("%s: bad alias target %r" % (where, target))
            elif policy not in POLICIES:
                raise TableError("%s: policy must be one of %s or alias:SYM" % (where, ", ".join(POLICIES)))
            m = re.match(r"^(.+?)\s*\((.*)\)$", sig)
            if not m:
                raise TableError("%s: signature must be `RET (PARAMS)`, got %r" % (where, sig))
            ret = re.sub(r"\s+", " ", m.group(1).strip())
            ptext = m.group(2).strip()
            params = [] if ptext == "void" else [re.sub(r"\s+", " ", p.strip()) for p in ptext.split(",")]
            if any(not p for p in params):
                raise TableError("%s: empty parameter" % where)
            rows.append(Row(where, sym, policy, target, ret, params))
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
        " * policy   IMPLEMENTED | UNSUPPORTED | EMPTY | ALIAS",
        " * target   the symbol an ALIAS calls; sym itself otherwise",
        " * ret      the return type; params: the parenthesised declarations; args: the parenthesised names",
        " * The types are declared by nvml/nvml_types.h. */",
        "#ifndef NVML_API",
        "#error \"define NVML_API(sym, policy, target, ret, params, args) first\"",
        "#endif",
        "",
    ]
    for r in rows:
        params = "(%s)" % (", ".join(r.params) if r.params else "void")
        args = "(%s)" % ", ".join(r.args)
        out.append("NVML_API(%s, %s, %s, %s, %s, %s)" % (r.sym, r.policy.upper(), r.target, r.ret, params, args))
    return "\n".join(out) + "\n"


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
