#!/usr/bin/env bash
# The README's main job: sets everything up, builds, and runs the demo (scripts/demo-run.sh): a CUDA
# program run under crcuda, checkpointed halfway, killed, restored, its result equal to an
# uninterrupted run's. Needs root (CRIU).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
"$top/scripts/setup.sh"
cmake -S "$top" -B "$top/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$top/build" -j "$(nproc)"
exec "$top/scripts/demo-run.sh" "$top/build"
