#!/usr/bin/env bash
# Packs NVIDIA's cuda-samples (github.com/NVIDIA/cuda-samples) into .deps/cuda-samples.tar.gz for the
# conformance harness (tests/gpu/conformance.sh), which runs where there is no network: only the
# folders it builds (0_Introduction, 2_Concepts_and_Techniques, 3_CUDA_Features, 4_CUDA_Libraries,
# 6_Performance), Common and the top-level CMake files, without the samples' documents.
#   scripts/cuda-samples.sh [SOURCE]
# SOURCE: a git repository of cuda-samples (a clone, or a bare mirror), or a URL to clone;
# default https://github.com/NVIDIA/cuda-samples. scripts/gpu-tree.sh carries the tarball along.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
src=${1:-https://github.com/NVIDIA/cuda-samples}
out=$top/.deps/cuda-samples.tar.gz
folders=(0_Introduction 2_Concepts_and_Techniques 3_CUDA_Features 4_CUDA_Libraries 6_Performance)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ ! -d "$src" ]; then
	git clone --quiet --bare --depth 1 "$src" "$tmp/repo.git"
	src=$tmp/repo.git
fi
commit=$(git -C "$src" rev-parse HEAD)
paths=(CMakeLists.txt Common cmake)
for f in "${folders[@]}"; do paths+=("Samples/$f"); done
# Documents are left out, and so are blobs a partial mirror lacks (its largest files): listed, absent.
git -C "$src" ls-tree -r --format='%(objectname) %(path)' "$commit" -- "${paths[@]}" >"$tmp/files"
cut -d' ' -f1 "$tmp/files" | git -C "$src" cat-file --batch-check='%(objectname) %(objecttype)' |
	awk '$2 == "missing" { print $1 }' >"$tmp/missing"
[ -s "$tmp/missing" ] && echo "cuda-samples: $(wc -l <"$tmp/missing") files absent from $src, left out" >&2
mapfile -t excluded < <({ grep -Ff "$tmp/missing" "$tmp/files" || true; grep -E '\.(docx?|pdf)$' "$tmp/files" || true; } |
	cut -d' ' -f2- | sed 's/^/:(exclude,literal)/')
mkdir -p "$tmp/tree"
git -C "$src" archive "$commit" -- "${paths[@]}" "${excluded[@]}" | tar -x -C "$tmp/tree"
echo "$commit" >"$tmp/tree/COMMIT"
mkdir -p "$top/.deps"
tar -czf "$out" -C "$tmp/tree" .
echo "cuda-samples $commit: $out ($(du -h "$out" | cut -f1))"
