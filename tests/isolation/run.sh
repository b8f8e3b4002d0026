#!/usr/bin/env bash
# One GPU worker per application: on one crcudad, a long exact program runs while, beside it, one
# program's kernel fails an assert (710, sticky), one writes out of bounds (700), one asks for more
# memory than the device has, and one has its worker killed with kill -9. Each faulting program gets
# the error a native run gets, within a second of the fault; `crcudactl ls` shows each session with
# its own worker while it lives and drops it at once when it ends; the long program finishes with the
# checksum of an uninterrupted native run, bit for bit, and the daemon serves a new program after.
# With cuda and PyTorch, a training run (tests/torch/train.py) goes on beside the faults as well, and
# its losses must equal a native run's bit for bit.
#   run.sh BUILD [sim|cuda]
set -u
build=$(cd "${1:?usage: run.sh BUILD [sim|cuda]}" && pwd)
backend=${2:-sim}
ctl=$build/crcudactl/crcudactl
progs=$build/tests/programs
tmp=$(mktemp -d /tmp/crcuda-iso.XXXXXX)
export CRCUDA_SOCKET=$tmp/d/crcudad.sock
export CRCUDA_SIM_KERNELS=$progs/libcrcuda_test_kernels.so
unset CRCUDA_REMOTE CRCUDA_TOKEN CRCUDA_TOKEN_FILE CRCUDAD
mkdir -p "$tmp/d"
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
	[ -n "${dpid:-}" ] && kill "$dpid" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
	echo "FAIL: $*" >&2
	echo "--- daemon log" >&2
	tail -40 "$tmp/d/crcudad.log" >&2
	exit 1
}
now_ms() { date +%s%3N; }
# ls row of pid: "SESSION PID UID WORKER GPUS STATE ..." (empty when it has none)
ls_row() { "$ctl" ls --daemon "$CRCUDA_SOCKET" 2>/dev/null | awk -v p="$1" '$2 == p && $1 ~ /^[0-9]+$/'; }
wait_for() { # seconds, command...
	local n=$(($1 * 20))
	shift
	for _ in $(seq "$n"); do "$@" && return 0; sleep 0.05; done
	return 1
}
no_row() { [ -z "$(ls_row "$1")" ]; }
has_row() { [ -n "$(ls_row "$1")" ]; }

if [ "$backend" = sim ]; then
	native_env=(env LD_LIBRARY_PATH="$build/sim/lib")
else
	native_env=(env)
fi
long_args=(--mb 8 --chunks 4 --steps 400 --verify)
[ "$backend" = cuda ] && long_args=(--mb 256 --chunks 8 --steps 40000)
"${native_env[@]}" "$progs/state_app" "${long_args[@]}" >"$tmp/native.out" 2>&1 ||
	fail "state_app natively: $(tail -2 "$tmp/native.out")"
for mode in assert oob oom; do
	"${native_env[@]}" "$progs/fault_app" "$mode" >"$tmp/native.$mode" 2>&1
	echo "native:      $(grep fault_app: "$tmp/native.$mode")"
done

torch=0
if [ "$backend" = cuda ] && python3 -c 'import torch, sys; sys.exit(not torch.cuda.is_available())' 2>/dev/null; then
	torch=1
	python3 "$(dirname "$0")/../torch/train.py" --steps 150 >"$tmp/torch.native" 2>&1 ||
		fail "train.py natively: $(tail -2 "$tmp/torch.native")"
fi
"$build/crcudad/crcudad" --backend "$backend" --socket "$CRCUDA_SOCKET" --foreground -v \
	>"$tmp/d/ready" 2>"$tmp/d/crcudad.log" &
dpid=$!
wait_for 30 grep -q ready "$tmp/d/ready" || fail "crcudad did not start"

if [ $torch = 1 ]; then
	"$ctl" run --backend cuda -- python3 "$(dirname "$0")/../torch/train.py" --steps 150 >"$tmp/torch.layer" 2>&1 &
	torch_pid=$!
	pids+=("$torch_pid")
fi
"$ctl" run --backend "$backend" -- "$progs/state_app" "${long_args[@]}" >"$tmp/long.out" 2>&1 &
long=$!
pids+=("$long")
wait_for 30 has_row "$long" || fail "the long program's session is not listed"
long_worker=$(ls_row "$long" | awk '{print $4}')
echo "long program pid $long: $(ls_row "$long")"

for mode in assert oob oom; do
	t0=$(now_ms)
	"$ctl" run --backend "$backend" -- "$progs/fault_app" "$mode" >"$tmp/layer.$mode" 2>&1
	rc=$?
	t1=$(now_ms)
	echo "under layer: $(grep fault_app: "$tmp/layer.$mode") in $((t1 - t0)) ms"
	[ $rc = 0 ] || fail "fault_app $mode under the layer: exit $rc: $(cat "$tmp/layer.$mode")"
	[ "$(grep fault_app: "$tmp/layer.$mode")" = "$(grep fault_app: "$tmp/native.$mode")" ] ||
		fail "fault_app $mode: the layer's error differs from the native one"
	has_row "$long" || fail "the long program's session went away after fault_app $mode"
done

"$ctl" run --backend "$backend" -- "$progs/fault_app" hold >"$tmp/hold.out" 2>&1 &
hold=$!
pids+=("$hold")
wait_for 30 grep -q ready "$tmp/hold.out" || fail "fault_app hold not ready: $(cat "$tmp/hold.out")"
wait_for 10 has_row "$hold" || fail "fault_app hold has no session in ls"
row=$(ls_row "$hold")
echo "hold:        $row"
hold_worker=$(echo "$row" | awk '{print $4}')
[ -n "$hold_worker" ] && [ "$hold_worker" != "$long_worker" ] && [ -e "/proc/$hold_worker" ] ||
	fail "fault_app hold has no worker of its own: $row"
t0=$(now_ms)
kill -9 "$hold_worker"
wait "$hold"
rc=$?
t1=$(now_ms)
echo "hold after kill -9 of worker $hold_worker: $(grep 'fault_app: hold' "$tmp/hold.out") in $((t1 - t0)) ms"
[ $rc = 0 ] && grep -q 'fault_app: hold: CUDA_ERROR' "$tmp/hold.out" ||
	fail "fault_app hold did not get a CUDA error when its worker died (exit $rc): $(cat "$tmp/hold.out")"
[ $((t1 - t0)) -le 1000 ] || fail "fault_app hold took $((t1 - t0)) ms to notice its worker's death"
wait_for 1 no_row "$hold" || fail "ls still shows the session of pid $hold after its worker died"
grep -q "worker $hold_worker of session .* died (killed by signal 9)" "$tmp/d/crcudad.log" ||
	fail "the daemon did not report worker $hold_worker's death"

wait "$long"
rc=$?
[ $rc = 0 ] || fail "the long program failed (exit $rc): $(tail -3 "$tmp/long.out")"
want=$(grep -i checksum "$tmp/native.out")
got=$(grep -i checksum "$tmp/long.out")
[ -n "$want" ] && [ "$want" = "$got" ] || fail "the long program's result differs: native '$want', layer '$got'"
echo "long program: $got (native: the same)"
wait_for 1 no_row "$long" || fail "ls still shows the long program's session after it ended"
if [ $torch = 1 ]; then
	wait "$torch_pid" || fail "PyTorch training under the layer failed: $(tail -3 "$tmp/torch.layer")"
	cmp <(grep '^step [0-9]* loss' "$tmp/torch.native") <(grep '^step [0-9]* loss' "$tmp/torch.layer") >/dev/null ||
		fail "PyTorch losses beside the faults differ from native"
	echo "PyTorch training beside the faults: $(grep -c '^step [0-9]* loss' "$tmp/torch.layer") losses equal native bit for bit"
fi
"$ctl" run --backend "$backend" -- "$progs/fault_app" oom >/dev/null 2>&1 || fail "the daemon no longer serves"
kill -0 "$dpid" 2>/dev/null || fail "the daemon died"
echo "PASS: isolation ($backend)"
