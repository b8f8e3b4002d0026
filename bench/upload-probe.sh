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
lscpu | grep -E "^(Model name|Socket|L3|NUMA node)" || true
uname -r
cat /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null || true
# The GPU's PCI function (nvidia-smi's 8-digit domain as sysfs's 4), its NUMA node and the CPUs near it.
bdf=$(nvidia-smi --query-gpu=pci.bus_id --format=csv,noheader | head -1 | tr 'A-F' 'a-f' |
	sed 's/^0000\([0-9a-f]\{4\}:\)/\1/')
near=$(cat "/sys/bus/pci/devices/$bdf/local_cpulist" 2>/dev/null || echo "")
echo "GPU $bdf: numa node $(cat "/sys/bus/pci/devices/$bdf/numa_node" 2>/dev/null), near CPUs $near; this process may use $(taskset -pc $$ | sed 's/.*: //')"
dd if=/dev/zero of="$f" bs=4M count=$((mb / 4)) status=none
cat "$f" >/dev/null
for mode in ${PROBE_MODES:-pread mmap mmapnt thp piece:1024 hpiece:512}; do
	for n in ${PROBE_THREADS:-8 12 16}; do
		"$probe" "$f" "$n" "$mode"
	done
done
if [ -n "$near" ]; then
	for n in ${PROBE_THREADS:-8 12 16}; do
		echo -n "near CPUs only: "
		taskset -c "$near" "$probe" "$f" "$n" pread
	done
fi
