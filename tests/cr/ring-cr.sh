#!/usr/bin/env bash
# A data-parallel job in miniature checkpointed as one process tree at random instants, through real
# CRIU: tests/programs/peer_ring (a launcher that makes no CUDA call and RANKS processes under the
# layer, each mapping the next rank's VMM memory through a shareable handle passed over a unix socket;
# every step a collective kernel writes into the next rank's memory and waits for the previous
# rank's). `crcudactl checkpoint LAUNCHER` must stop every rank after the same collective launch (a
# rank stopped before launching the kernel its peer waits for would make the peer's drain wait for
# ever), copy each rank's own memory once, and the restore must import and map each rank's peer memory
# again where it was. Each trial: checkpoint at a random instant, kill, restore, finish; the ranks'
# checksums equal an uninterrupted run's (natively and under the layer). One trial with
# --leave-running: the original finishes exact, then the checkpoint restores and finishes exact.
# RING_EVENTS=1: the ranks also share interprocess events, which each checkpoint must list (a restore
# opens them again).
#   ring-cr.sh BUILD [TRIALS] [RANKS]      (CR_BACKEND=cuda: on the GPU, a rank per GPU where there are
#                                           enough)
# Needs root and CRIU (.deps/criu): exit 77 otherwise.
set -u
build=$1 trials=${2:-4} ranks=${3:-2}
ctl=$build/crcudactl/crcudactl
prog=$build/tests/programs/peer_ring
top=$(cd "$(dirname "$0")/../.." && pwd)
cr_name=ring-cr
# shellcheck source=../lib/cr-env.sh
. "$top/tests/lib/cr-env.sh"
# The test's own collective kernel (NCCL's are counted by default); RING_COLLECTIVES="" counts none
# (a negative control: the checkpoint should then fail, a drain waiting for a peer's kernel).
export CRCUDA_COLLECTIVE_KERNELS=${RING_COLLECTIVES-coll_}
backend=${CR_BACKEND:-sim}
# RING_EVENTS=1: the ranks also share interprocess events (peer_ring --events).
args=(--ranks "$ranks" --steps "${RING_STEPS:-2400}" --sync 4 --sleep-us "${RING_SLEEP_US:-4000}")
[ "${RING_EVENTS:-0}" = 1 ] && args+=(--events)
fail() {
	echo "FAIL: $*" >&2
	for f in run.out run.err ckpt.err restore.err; do [ -e "$tmp/$f" ] && { echo "--- $f" >&2; tail -n 20 "$tmp/$f" >&2; }; done
	echo "--- daemon log (last lines)" >&2
	tail -n 30 "$tmp/d/crcudad.log" >&2
	exit 1
}

native_env=()
[ "$backend" = sim ] && native_env=(LD_LIBRARY_PATH="$build/sim/lib")
env "${native_env[@]}" timeout 300 "$prog" "${args[@]}" >"$tmp/native.out" 2>"$tmp/native.err" ||
	fail "natively: exit $?: $(tail -3 "$tmp/native.err")"
[ "$(grep -c '^rank .*checksum' "$tmp/native.out")" = "$ranks" ] || fail "natively: $(cat "$tmp/native.out")"
t0=$(now_ms)
timeout 300 "$ctl" run --backend "$backend" --idle-exit 120 -- "$prog" "${args[@]}" >"$tmp/layer.out" 2>"$tmp/layer.err" ||
	fail "under the layer: exit $?: $(tail -3 "$tmp/layer.err")"
run_ms=$(($(now_ms) - t0))
cmp -s "$tmp/native.out" "$tmp/layer.out" || fail "under the layer: $(diff "$tmp/native.out" "$tmp/layer.out")"
echo "ring-cr: $ranks ranks, ${args[*]}: natively and under the layer the same ($run_ms ms under the layer)"

ranks_up() { [ "$(pgrep -P "$parent" | wc -l)" = "$ranks" ]; }
start() {
	setsid "$ctl" run --backend "$backend" --idle-exit 120 -- "$prog" "${args[@]}" </dev/null \
		>"$tmp/run.out" 2>"$tmp/run.err" &
	parent=$!
	disown "$parent"
	pids+=("$parent")
	# Every rank has a session (its first CUDA call) before the clock starts.
	wait_for 60 ranks_up || fail "the ranks did not start"
	sleep 0.2
}

# A random instant inside the run (after start-up, before its last quarter).
instant() { awk -v r="$RANDOM" -v ms="$run_ms" 'BEGIN { printf "%.3f", (0.1 + 0.55 * r / 32767) * ms / 1000 }'; }

for trial in $(seq "$trials"); do
	start
	at=$(instant)
	sleep "$at"
	err_size=$(stat -c %s "$tmp/run.err")
	out=$(timeout 180 "$ctl" --json checkpoint "$parent" 2>"$tmp/ckpt.err") ||
		fail "trial $trial: checkpoint at ${at}s: $(cat "$tmp/ckpt.err")"
	ids=$(python3 -c 'import json, sys; print(" ".join(map(str, json.load(sys.stdin)["tree_ids"])))' <<<"$out") ||
		fail "trial $trial: no tree_ids in: $out"
	[ "$(wc -w <<<"$ids")" = "$ranks" ] || fail "trial $trial: checkpoints '$ids' for $ranks ranks"
	wait_for 30 gone "$parent" || fail "trial $trial: the launcher still runs after the checkpoint"
	[ -s "$tmp/run.out" ] && fail "trial $trial: the job had finished before its checkpoint (at ${at}s)"
	read -r id _ <<<"$ids"
	if [ "${RING_EVENTS:-0}" = 1 ]; then
		"$ctl" inspect "$id" >"$tmp/inspect.out" 2>&1
		grep -Eq '(= |^ +)E [0-9a-f]+ [0-9a-f]+$' "$tmp/inspect.out" && grep -Eq '(= |^ +)e [0-9a-f]+ [0-9a-f]+$' "$tmp/inspect.out" ||
			fail "trial $trial: checkpoint $id lists no opened and exported interprocess event: $(grep -A3 ipc_ "$tmp/inspect.out")"
	fi
	truncate -s "$err_size" "$tmp/run.err"
	timeout 180 "$ctl" restore "$id" >"$tmp/restore.out" 2>"$tmp/restore.err" ||
		fail "trial $trial: restore of $id: $(cat "$tmp/restore.err")"
	wait_for 300 gone "$parent" || fail "trial $trial: the restored job did not finish"
	cmp -s "$tmp/native.out" "$tmp/run.out" ||
		fail "trial $trial: after the restore: $(diff "$tmp/native.out" "$tmp/run.out")"
	collectives=$(grep -o 'each stops after [0-9]*' "$tmp/ckpt.err" | grep -o '[0-9]*$')
	echo "ring-cr: trial $trial: checkpoint at ${at}s (after collective ${collectives:-?}), killed, restored: every rank's checksum = uninterrupted"
done

# --leave-running: the original runs on to the same result; the checkpoint restores to it too.
start
sleep "$(instant)"
err_size=$(stat -c %s "$tmp/run.err")
out=$(timeout 180 "$ctl" --json checkpoint --leave-running "$parent" 2>"$tmp/ckpt.err") ||
	fail "--leave-running: $(cat "$tmp/ckpt.err")"
read -r id _ <<<"$(python3 -c 'import json, sys; print(" ".join(map(str, json.load(sys.stdin)["tree_ids"])))' <<<"$out")"
wait_for 300 gone "$parent" || fail "--leave-running: the job did not finish"
cmp -s "$tmp/native.out" "$tmp/run.out" || fail "--leave-running: the original: $(diff "$tmp/native.out" "$tmp/run.out")"
: >"$tmp/run.out"
truncate -s "$err_size" "$tmp/run.err"
timeout 180 "$ctl" restore "$id" >"$tmp/restore.out" 2>"$tmp/restore.err" ||
	fail "--leave-running: restore of $id: $(cat "$tmp/restore.err")"
wait_for 300 gone "$parent" || fail "--leave-running: the restored job did not finish"
cmp -s "$tmp/native.out" "$tmp/run.out" || fail "--leave-running: the restored copy: $(diff "$tmp/native.out" "$tmp/run.out")"
echo "ring-cr: --leave-running: the original and the restored copy both finish with the uninterrupted checksums"
"$ctl" store verify >/dev/null || fail "store verify"
ok=1
echo "PASS: ring-cr ($trials random instants, $ranks ranks, and --leave-running)"
