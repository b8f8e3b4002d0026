#!/usr/bin/env bash
# bench/upload-probe.sh BUILD_DIR [MiB]: how fast a file in the page cache reaches the device by each
# staging design of bench/upload_probe (whole 4 MiB chunks, small pieces through a ring of pinned
# slots, with and without hashing), beside pinned H2D's ceiling; the L3 cache size, which decides
# whether the device reads small slots from the CPU's cache. GPU machine only.
set -euo pipefail
build=${1:?usage: upload-probe.sh BUILD_DIR [MiB]}
mb=${2:-8192}
probe=$build/bench/upload_probe
f=$(mktemp "${TMPDIR:-/tmp}/crcuda-probe.XXXXXX")
trap 'rm -f "$f"' EXIT
lscpu | grep -E "^(Model name|Socket|L3|NUMA node\(s\))" || true
dd if=/dev/zero of="$f" bs=4M count=$((mb / 4)) status=none
cat "$f" >/dev/null
for mode in pread piece:1024 piece:512 piece:256 hpiece:512 hpiece:256 hpiece:4096; do
	for n in 8 12 16; do
		"$probe" "$f" "$n" "$mode"
	done
done
