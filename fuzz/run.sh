#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/*.c) with clang in their own build directory and runs each from
# its committed seeds (fuzz/corpus/<target>; new inputs go to the build directory), then reports the
# executions per target. A crash, leak or sanitizer report stops that target with its input saved
# (crash-*, leak-*, timeout-* in the build directory's fuzz/artifacts) and makes the script fail.
#
#   fuzz/run.sh [-t SECONDS | -n RUNS] [-b BUILD_DIR] [TARGET...]
#     -t SECONDS   fuzzing time per target (default 10)
#     -n RUNS      executions per target instead of a time
#     -b DIR       build directory (default build-fuzz)
#     TARGET       jrec manifest modimage cubin ptx ring frames ctl_client criu_image (default: all)
# Extra libFuzzer flags: FUZZ_FLAGS. Parallel build jobs: JOBS (default nproc).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
secs=10 runs= build=$top/build-fuzz
while getopts "t:n:b:h" o; do
	case $o in
	t) secs=$OPTARG ;;
	n) runs=$OPTARG ;;
	b) build=$OPTARG ;;
	*) sed -n '2,13p' "$0"; exit 2 ;;
	esac
done
shift $((OPTIND - 1))
command -v clang >/dev/null || { echo "fuzz/run.sh: clang is missing (Debian package clang; scripts/setup.sh installs it)" >&2; exit 1; }

CC=clang cmake -S "$top" -B "$build" -DCRCUDA_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" --target crc_fuzz -j "${JOBS:-$(nproc)}" >/dev/null

targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
	for f in "$build"/fuzz/fuzz_*; do
		[ -x "$f" ] && targets+=("${f##*/fuzz_}")
	done
fi
limit=(-max_total_time="$secs")
[ -n "$runs" ] && limit=(-runs="$runs")
art=$build/fuzz/artifacts
mkdir -p "$art"
status=0
printf '%-12s %12s %10s %8s  %s\n' target executions exec/s seconds result
for t in "${targets[@]}"; do
	bin=$build/fuzz/fuzz_$t
	[ -x "$bin" ] || { echo "fuzz/run.sh: no target $t" >&2; exit 2; }
	scratch=$build/fuzz/corpus/$t
	log=$build/fuzz/$t.log
	mkdir -p "$scratch"
	start=$(date +%s.%N)
	rc=0
	# shellcheck disable=SC2086
	"$bin" "${limit[@]}" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
		-artifact_prefix="$art/$t-" ${FUZZ_FLAGS:-} "$scratch" "$top/fuzz/corpus/$t" >"$log" 2>&1 || rc=$?
	end=$(date +%s.%N)
	execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
	rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
	result=ok
	if [ "$rc" -ne 0 ]; then
		result="FAILED (rc $rc, $log): $(grep -m1 -E 'ERROR|runtime error|check failed' "$log" || true)"
		status=1
	fi
	printf '%-12s %12s %10s %8.0f  %s\n' "$t" "${execs:-?}" "${rate:-?}" "$(echo "$end - $start" | bc)" "$result"
done
exit $status
