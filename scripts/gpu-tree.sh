#!/usr/bin/env bash
# Makes .gpu-tree: a clean copy of HEAD (no uncommitted work) plus the carried libraries (.deps/gpu,
# and .deps/criu when built, .deps/cuda-samples.tar.gz when packed), to send to the GPU machine with the device tool's carry [".gpu-tree"]
# and run there as: cd .gpu-tree && tests/gpu/run-on-gpu.sh
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
"$top/scripts/gpu-carry.sh" >/dev/null
rm -rf .gpu-tree
mkdir -p .gpu-tree/.deps
git archive HEAD | tar -x -C .gpu-tree
cp -a .deps/gpu .gpu-tree/.deps/gpu
if [ -d .deps/criu/bin ]; then cp -a .deps/criu .gpu-tree/.deps/criu; fi
# NVIDIA's cuda-samples for tests/gpu/conformance.sh, when scripts/cuda-samples.sh has packed them.
if [ -f .deps/cuda-samples.tar.gz ]; then cp -a .deps/cuda-samples.tar.gz .gpu-tree/.deps/; fi
du -sh .gpu-tree
