#!/usr/bin/env bash
# Runs on the GPU machine, from the repository root: builds crcuda with the local CUDA toolkit and
# the libraries carried in .deps/gpu (scripts/gpu-carry.sh), runs the gpu-labelled tests, then the
# benchmarks, and prints a short table last. Output files go to $OUT when set (the device tool).
# PARTS=tests (ctest, tests/gpu/layer.sh, the call trace), PARTS=apps (PyTorch, IPC, DataLoader),
# PARTS=multi (DDP, rings, stripes, NVML, two devices, isolation, the criu label), PARTS=stress or
# PARTS=bench runs one part (each should fit the device tool's 10 minutes a call: tests and apps together
# did not, nor apps and multi, on an H200 host).
# PARTS=conformance runs tests/gpu/conformance.sh (NVIDIA's cuda-samples natively, under the layer and
# checkpointed mid-run; CONF_PARTS splits it over several calls), never by default. PARTS=migrate runs
# tests/gpu/torch-migrate.sh and bench/migrate.sh (MIGRATE_MB, default 8192), never by default.
set -uo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
cd "$top"
deps=$top/.deps/gpu
out=${OUT:-$top/build-gpu/out}
mkdir -p "$out"
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export LD_LIBRARY_PATH=$deps/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
jobs=$(nproc)

{
	nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
	uname -r
} >"$out/machine.txt" 2>&1
gpu=$(head -1 "$out/machine.txt")

echo "== build"
if ! cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCRCUDA_WERROR=OFF \
	-DCMAKE_INCLUDE_PATH="$deps/include" -DCMAKE_LIBRARY_PATH="$deps/lib" \
	-DCMAKE_BUILD_RPATH="$deps/lib" >"$out/build.log" 2>&1 ||
	! cmake --build build-gpu -j "$jobs" >>"$out/build.log" 2>&1; then
	tail -40 "$out/build.log"
	echo "BUILD FAILED"
	exit 1
fi

parts=${PARTS:-tests,apps,multi,stress,bench}
if [[ $parts == *tests* ]]; then
echo "== gpu tests"
ctest --test-dir build-gpu -L gpu --output-on-failure -j 1 --timeout 300 >"$out/ctest-gpu.log" 2>&1
ctest_rc=$?
grep -E "Test +#|tests passed|FAILED|Failed" "$out/ctest-gpu.log" | tail -60

echo "== under the layer on the real driver"
tests/gpu/layer.sh build-gpu 2>&1 | tee "$out/layer.txt"
echo "== driver calls natively and under the layer (calltrace: cuBLAS SGEMM, 6 PyTorch steps)"
CALLTRACE_MAX=0 timeout 300 tests/gpu/calltrace.sh build-gpu sgemm torch >"$out/calltrace.txt" 2>&1
grep -E "^(==|sgemm|torch|summary|  +[0-9]+ )" "$out/calltrace.txt" | head -60
fi
if [[ $parts == *apps* ]]; then
echo "== checkpoint/restore of PyTorch training under crcuda"
tests/gpu/torch-cr.sh build-gpu 2>&1 | tee -a "$out/layer.txt"
echo "== CUDA IPC between two processes (driver API, PyTorch), natively and under the layer"
tests/gpu/ipc.sh build-gpu 2>&1 | tee -a "$out/layer.txt"
echo "== a DataLoader whose workers pass CUDA tensors, its process tree checkpointed at random instants"
tests/gpu/dataloader-cr.sh build-gpu 2>&1 | grep -v "^ *|" | tail -6 | tee -a "$out/layer.txt"
echo "== the same with CPU batches passed through shared memory (DataLoader's common case)"
DL_BATCH_DEVICE=cpu tests/gpu/dataloader-cr.sh build-gpu 2>&1 | grep -v "^ *|" | tail -6 | tee -a "$out/layer.txt"
echo "== the same with the workers forked from the trainer (DataLoader's default on Linux)"
DL_BATCH_DEVICE=cpu DL_CONTEXT=fork tests/gpu/dataloader-cr.sh build-gpu 2>&1 | grep -v "^ *|" | tail -6 | tee -a "$out/layer.txt"
fi
if [[ $parts == *multi* ]]; then
echo "== PyTorch DDP over NCCL on every GPU, natively and under the layer (skipped with one GPU)"
tests/gpu/ddp.sh build-gpu 2>&1 | tee "$out/ddp.txt"
grep -E "^(PASS|FAIL|SKIP) ddp" "$out/ddp.txt" >>"$out/layer.txt"
echo "== the DDP job checkpointed at a random instant past its first minute, restored onto the GPUs swapped"
DDP_CR_MIN_S=62 tests/gpu/ddp-cr.sh build-gpu 90000 0 2>&1 | grep -v "^ *|" | tail -8 | tee -a "$out/ddp.txt"
grep -E "^(PASS|FAIL|SKIP) ddp_cr" "$out/ddp.txt" >>"$out/layer.txt"
echo "== ranks sharing VMM memory and events with a collective kernel, checkpointed as one tree"
if CR_BACKEND=cuda RING_EVENTS=1 tests/cr/ring-cr.sh build-gpu 3 >"$out/ring.txt" 2>&1; then r=PASS; else r=FAIL; fi
tail -6 "$out/ring.txt"
echo "$r ring_cr" >>"$out/layer.txt"
echo "== large copies through a remote crcudad, striped over several TLS connections and on one"
tests/gpu/striped.sh build-gpu 2>&1 | tee "$out/striped.txt" | tail -8
grep -E "^(striped: PASS|FAIL)" "$out/striped.txt" >>"$out/layer.txt"
echo "== NVML natively and under the layer (forwarded to the worker's NVML)"
tests/gpu/nvml.sh build-gpu 2>&1 | tee "$out/nvml.txt"
grep -E "^(PASS|FAIL) nvml" "$out/nvml.txt" >>"$out/layer.txt"
echo "== checkpoint/restore of a two-device program (skipped with one GPU)"
tests/gpu/devices-cr.sh build-gpu 2>&1 | tee -a "$out/layer.txt"
echo "== one GPU worker per application: faults beside PyTorch training and a long program"
if tests/isolation/run.sh build-gpu cuda >"$out/isolation.txt" 2>&1; then r=PASS; else r=FAIL; fi
cat "$out/isolation.txt"
echo "$r isolation_cuda $(tail -1 "$out/isolation.txt")" >>"$out/layer.txt"
echo "== criu-labelled tests (simulated device, real CRIU)"
ctest --test-dir build-gpu -L criu --timeout 300 -j 4 >"$out/ctest-criu.log" 2>&1
grep -E "Test +#|tests passed" "$out/ctest-criu.log" | tail -30

fi
ctest_rc=${ctest_rc:-0}
if [[ $parts == *stress* ]]; then
echo "== random-instant checkpoint/restart stress: PyTorch LM and cudart programs (issue 14)"
CR_STRESS_LOGS=$out/stress-logs timeout 560 tests/gpu/cr-stress-gpu.sh build-gpu 2>&1 | tee "$out/cr-stress.txt" | grep -vE "^cr-stress: .*uninterrupted run"
fi
if [[ $parts == *conformance* ]]; then
	echo "== conformance: programs nobody here wrote"
	tests/gpu/conformance.sh build-gpu 2>&1 | tee "$out/conformance.txt" | grep -vE " rc 0 +[0-9]+ ms$"
fi
if [[ $parts == *migrate* ]]; then
	echo "== live migration between two daemons in two network namespaces (crcudactl migrate, issue 16)"
	timeout 280 tests/gpu/torch-migrate.sh build-gpu 2>&1 | tee "$out/migrate.txt"
	timeout 300 bench/migrate.sh build-gpu "${MIGRATE_MB:-8192}" 2>&1 | tee -a "$out/migrate.txt"
fi
if [[ $parts == *bench* ]]; then
echo "== benchmarks"
: >"$out/bench.txt"
# Each benchmark script runs its native reference and crcuda in the same call. The crcuda side uses
# its own daemon on the real driver here.
bsock=$(mktemp -d /tmp/crcuda-bench.XXXXXX)/crcudad.sock # a directory of its own: crcudad refuses /tmp
build-gpu/crcudad/crcudad --backend cuda --socket "$bsock" --foreground >"$out/bench-daemon.log" 2>&1 &
bench_daemon=$!
for _ in $(seq 200); do grep -q ready "$out/bench-daemon.log" && break; sleep 0.05; done
export CRCUDA_LAYER_RUN="env CRCUDA_SOCKET=$bsock LD_LIBRARY_PATH=$top/build-gpu/libcrcuda"
for b in ${BENCHES:-bench/overhead.sh bench/checkpoint.sh}; do
	echo "--- $b" | tee -a "$out/bench.txt"
	timeout 300 "$b" build-gpu 2>&1 | tee -a "$out/bench.txt"
done
kill "$bench_daemon" 2>/dev/null
echo "--- bench/startup.sh (exec to first finished kernel)" | tee -a "$out/bench.txt"
timeout 300 bench/startup.sh build-gpu 2>&1 | tee -a "$out/bench.txt"
# BASELINE=DIR: the same overhead benchmark of another source tree (e.g. the commit before a change),
# built and run here with its own daemon, for before/after tables in one call.
if [ -n "${BASELINE:-}" ] && [ -d "$BASELINE" ]; then
	echo "--- bench/overhead.sh of $BASELINE (baseline)" | tee -a "$out/bench.txt"
	(cd "$BASELINE" && cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCRCUDA_WERROR=OFF \
		-DCMAKE_INCLUDE_PATH="$deps/include" -DCMAKE_LIBRARY_PATH="$deps/lib" \
		-DCMAKE_BUILD_RPATH="$deps/lib" >/dev/null 2>&1 && cmake --build build-gpu -j "$jobs" >/dev/null 2>&1) ||
		echo "baseline build failed" | tee -a "$out/bench.txt"
	bsock=$(mktemp -d /tmp/crcuda-base.XXXXXX)/crcudad.sock
	"$BASELINE"/build-gpu/crcudad/crcudad --backend cuda --socket "$bsock" --foreground >"$out/base-daemon.log" 2>&1 &
	base_daemon=$!
	for _ in $(seq 200); do grep -q ready "$out/base-daemon.log" && break; sleep 0.05; done
	(cd "$BASELINE" && CRCUDA_LAYER_RUN="env CRCUDA_SOCKET=$bsock LD_LIBRARY_PATH=$BASELINE/build-gpu/libcrcuda" \
		timeout 300 bench/overhead.sh build-gpu) 2>&1 | tee -a "$out/bench.txt"
	kill "$base_daemon" 2>/dev/null
fi
fi

echo
echo "== summary ($gpu)"
printf '%-40s %-8s %s\n' test result seconds
[ -f "$out/ctest-gpu.log" ] && awk '/Test +#/ {
	name = $4; res = ($0 ~ /Passed/) ? "pass" : ($0 ~ /Skipped|Not Run/) ? "skip" : "FAIL";
	t = $(NF-1); printf "%-40s %-8s %s\n", name, res, t }' "$out/ctest-gpu.log"
echo
cat "$out/layer.txt" "$out/bench.txt" 2>/dev/null
exit $ctest_rc
