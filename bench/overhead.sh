#!/usr/bin/env bash
# bench/overhead.sh BUILD_DIR: runs bench/overhead natively and under crcuda in the same run and
# prints them side by side with the ratios and the goals of issue 4:
#   round trip: at most 10 us added; launch rate: >= 90% of native; pinned copies: >= 90% of native.
# The layer run uses `crcudactl run --backend cuda --` unless CRCUDA_LAYER_RUN names another prefix.
# Extra arguments go to the benchmark (e.g. --size-mb 256). CRCUDA_BENCH_REPORT_ONLY=1: a missed goal
# does not fail the run (the smoke run on the simulated device, whose numbers mean nothing).
set -euo pipefail
build=${1:?usage: overhead.sh BUILD_DIR [bench args...]}
shift
bench=$build/bench/overhead
layer_run=${CRCUDA_LAYER_RUN:-"$build/crcudactl/crcudactl run --backend cuda --"}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$bench" "$@" >"$tmp/native.txt"
# shellcheck disable=SC2086 # the prefix is a command line
$layer_run "$bench" "$@" >"$tmp/layer.txt" || { echo "overhead: the run under crcuda failed" >&2; exit 1; }

awk -v nf="$tmp/native.txt" -v lf="$tmp/layer.txt" '
	BEGIN {
		while ((getline l < nf) > 0) { split(l, a, " "); native[a[1]] = a[2]; unit[a[1]] = a[3]; order[n++] = a[1] }
		while ((getline l < lf) > 0) { split(l, a, " "); layer[a[1]] = a[2] }
		printf "%-18s %14s %14s %10s  %s\n", "metric", "native", "crcuda", "ratio", "goal"
		fail = 0
		for (i = 0; i < n; i++) {
			k = order[i]; nv = native[k]; lv = layer[k]
			if (k == "roundtrip_us") {
				added = lv - nv; ok = added <= 10
				printf "%-18s %11.2f us %11.2f us %+8.2fus  <= +10 us added %s\n", k, nv, lv, added, ok ? "ok" : "MISSED"
			} else {
				r = nv > 0 ? lv / nv : 0
				goal = (k == "launch_rate" || k ~ /pinned/) ? 0.90 : 0
				ok = goal == 0 || r >= goal
				printf "%-18s %14.2f %14.2f %9.3fx  %s\n", k, nv, lv, r,
					goal ? sprintf(">= %.2fx %s", goal, ok ? "ok" : "MISSED") : "(reported)"
			}
			if (!ok) fail = 1
		}
		exit fail
	}' || [ "${CRCUDA_BENCH_REPORT_ONLY:-0}" = 1 ]
