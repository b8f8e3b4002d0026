#!/usr/bin/env bash
# The README's main job: sets everything up, builds, and runs the demo. For now (issue 2) it creates
# a store, records a demo checkpoint manifest and lists it; later issues grow it into
# run -> checkpoint -> kill -> restore.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
"$top/scripts/setup.sh"
cmake -S "$top" -B "$top/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$top/build" -j "$(nproc)"
exec "$top/scripts/demo-run.sh" "$top/build"
