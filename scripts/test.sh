#!/usr/bin/env bash
# The README's test command: sets everything up, builds crcuda twice (plain, and with ASan+UBSan)
# and runs the tests that need no GPU, builds it with clang, then runs the fuzz targets briefly (clang;
# fuzz/README.md).
# gpu-labelled tests run on the GPU machine: tests/gpu/run-on-gpu.sh.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
jobs=$(nproc)

"$top/scripts/setup.sh"

build() { # dir, extra cmake args...
	local dir=$1; shift
	cmake -S "$top" -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
	cmake --build "$dir" -j "$jobs"
}

echo "== build (plain)"
build "$top/build"
TOP=$top . "$top/scripts/criu-env.sh"
echo "== tests (plain): unit, sim, criu"
ctest --test-dir "$top/build" -L 'unit|sim|criu' --output-on-failure -j "$jobs"

echo "== install into a scratch prefix, the demo from it"
prefix=$(mktemp -d "${TMPDIR:-/tmp}/crcuda-prefix.XXXXXX")
cmake --install "$top/build" --prefix "$prefix" >/dev/null
if [ "$(id -u)" = 0 ]; then
	"$top/scripts/demo-run.sh" "$prefix"
else
	echo "(the demo needs root for CRIU: skipped)"
fi
rm -rf "$prefix"

echo "== build (ASan+UBSan)"
build "$top/build-asan" -DCRCUDA_SANITIZE=ON
echo "== tests (ASan+UBSan): unit, sim"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	ctest --test-dir "$top/build-asan" -L 'unit|sim' --output-on-failure -j "$jobs"

# clang warns where gcc does not (-Wsometimes-uninitialized: a value read on a path that never set it),
# and -Werror makes that a failed build.
echo "== build (clang): the whole tree"
CC=clang build "$top/build-clang"

echo "== fuzz (clang, libFuzzer): every committed input of fuzz/corpus, then 3 s of fuzzing per target"
CC=clang cmake -S "$top" -B "$top/build-fuzz" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCRCUDA_FUZZ=ON \
	-DCRCUDA_FUZZ_SECONDS=3 >/dev/null
cmake --build "$top/build-fuzz" --target crc_fuzz -j "$jobs"
ctest --test-dir "$top/build-fuzz" -L fuzz --output-on-failure -j "$jobs"

echo "== clang-format"
"$top/scripts/format.sh" --check
echo "all tests passed"
