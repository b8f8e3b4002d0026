#!/usr/bin/env bash
# bench/pread-scaling.sh [MiB] [THREADS...]: how fast this machine reads a file that is in the page
# cache with N parallel readers (dd, 4 MiB blocks, disjoint ranges): the ceiling of a restore's reads
# (bench/checkpoint.sh's "upload" line) on this host.
set -euo pipefail
mb=${1:-8192}
shift || true
threads=("$@")
[ ${#threads[@]} -gt 0 ] || threads=(1 4 8 16)
f=$(mktemp "${TMPDIR:-/tmp}/crcuda-pread.XXXXXX")
trap 'rm -f "$f"' EXIT
dd if=/dev/urandom of="$f" bs=4M count=$((mb / 4)) status=none
cat "$f" >/dev/null
for n in "${threads[@]}"; do
	per=$((mb / 4 / n))
	t0=$(date +%s.%N)
	for ((i = 0; i < n; i++)); do
		dd if="$f" of=/dev/null bs=4M skip=$((i * per)) count=$per status=none &
	done
	wait
	t1=$(date +%s.%N)
	awk -v a="$t0" -v b="$t1" -v n="$n" -v mb="$((per * n * 4))" 'BEGIN {
		printf "pread %2d readers: %.1f GB/s from the page cache\n", n, mb * 1048576 / 1e9 / (b - a) }'
done
