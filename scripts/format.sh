#!/usr/bin/env bash
# clang-format over the project's C sources. --check fails (listing the files) instead of rewriting.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
mapfile -t files < <(git ls-files '*.c' '*.h' | grep -v -e '^include/crcuda/cuda_api.def$' -e '/gen/')
[ ${#files[@]} -gt 0 ] || exit 0
if [ "${1:-}" = "--check" ]; then
	bad=()
	for f in "${files[@]}"; do
		clang-format --style=file "$f" | cmp -s - "$f" || bad+=("$f")
	done
	if [ ${#bad[@]} -gt 0 ]; then
		echo "format: these files differ from clang-format (run scripts/format.sh):" >&2
		printf '  %s\n' "${bad[@]}" >&2
		exit 1
	fi
else
	clang-format --style=file -i "${files[@]}"
fi
