#!/usr/bin/env bash
# The current demo (scripts/demo.sh runs it after building): a fresh store in a temporary directory,
# a demo checkpoint, ls / inspect / verify, then one flipped byte that verify must catch.
# Usage: scripts/demo-run.sh BUILD_DIR
set -euo pipefail
build=${1:?usage: demo-run.sh BUILD_DIR}
ctl=$build/crcudactl/crcudactl
[ -x "$ctl" ] || { echo "demo: $ctl not built" >&2; exit 1; }
store=$(mktemp -d "${TMPDIR:-/tmp}/crcuda-demo-XXXXXX")/store
trap 'rm -rf "$(dirname "$store")"' EXIT

step() { printf '\n\033[1m== %s\033[0m\n$ %s\n' "$1" "${*:2}"; }
export CRCUDA_STORE=$store

step "record a demo checkpoint" crcudactl store demo-record
"$ctl" store demo-record
step "list checkpoints" crcudactl store ls
"$ctl" store ls
step "inspect it" crcudactl store inspect 1
"$ctl" store inspect 1
step "verify every chunk" crcudactl store verify
"$ctl" store verify

pack=$(ls -S "$store"/packs/*.pack | head -1)
step "flip one byte inside a chunk" "(byte 1064 of packs/$(basename "$pack"))"
python3 -c "import sys; f=open(sys.argv[1],'r+b'); f.seek(1064); b=f.read(1); f.seek(1064); f.write(bytes([b[0]^1]))" "$pack"
step "verify again: it must fail (exit 1)" crcudactl --json store verify
set +e
"$ctl" --json store verify
rc=$?
set -e

echo
if [ "$rc" -eq 1 ]; then
	echo "demo: OK: a checkpoint was recorded, listed, inspected and verified; after one flipped byte"
	echo "      verify named the damaged chunk and exited 1."
else
	echo "demo: FAILED: verify exited $rc after a flipped byte (expected 1)" >&2
	exit 1
fi
