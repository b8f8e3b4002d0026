#!/usr/bin/env bash
# DDP over NCCL under crcuda, its process tree (the launcher and one process per GPU) checkpointed
# mid-training with `crcudactl checkpoint PARENT`, killed, restored, and finished: the losses must equal
# an uninterrupted native run (issue 19, item 3). Prints what happened at each step.
#   tests/gpu/ddp-cr.sh BUILD_DIR [STEPS] [CHECKPOINT_AT_STEP]
set -uo pipefail
build=$(cd "${1:?usage: ddp-cr.sh BUILD_DIR [STEPS] [AT]}" && pwd)
steps=${2:-40} at=${3:-15}
top=$(cd "$(dirname "$0")/../.." && pwd)
app=$top/tests/gpu/apps/ddp_nccl.py
ctl=$build/crcudactl/crcudactl
tmp=$(mktemp -d /tmp/crcuda-ddp-cr.XXXXXX)
export CRCUDA_SOCKET=$tmp/d/crcudad.sock CRCUDA_STORE=$tmp/store DDP_STEP_SLEEP=0.2
export CRCUDA_CRIU=${CRCUDA_CRIU:-$top/.deps/criu/bin/criu}
trap 'pkill -9 -f "$app" 2>/dev/null; pkill -f "crcudad.*$tmp" 2>/dev/null' EXIT
if [ "$(nvidia-smi -L 2>/dev/null | wc -l)" -lt 2 ]; then
	echo "SKIP ddp_cr: 2 GPUs needed"
	exit 0
fi
python3 "$app" "$steps" >"$tmp/native.out" 2>"$tmp/native.err" || { tail "$tmp/native.err"; echo "FAIL ddp_cr: native run"; exit 1; }
cd "$tmp"
setsid "$ctl" run --backend cuda --idle-exit 30 --daemon-log "$tmp/daemon.log" -- python3 "$app" "$steps" \
	</dev/null >"$tmp/layer.out" 2>"$tmp/layer.err" &
parent=$!
for _ in $(seq 600); do grep -q "^step $at " "$tmp/layer.out" && break; sleep 0.1; done
grep -q "^step $at " "$tmp/layer.out" || { tail "$tmp/layer.err"; echo "FAIL ddp_cr: step $at never came"; exit 1; }
echo "ddp-cr: tree of $parent: $(pgrep -P "$parent" | xargs)"
t0=$(date +%s.%N)
if ! "$ctl" checkpoint --tcp-established "$parent" >"$tmp/ckpt.out" 2>"$tmp/ckpt.err"; then
	cat "$tmp/ckpt.err"
	echo "FAIL ddp_cr: checkpoint of the DDP tree"
	tail -5 "$tmp/daemon.log"
	exit 1
fi
cat "$tmp/ckpt.out"
id=$(sed -n 's/^checkpoint \([0-9]*\):.*/\1/p' "$tmp/ckpt.out")
for f in layer.out layer.err; do stat -c %s "$tmp/$f" >"$tmp/$f.size"; done
sleep 1
for f in layer.out layer.err; do truncate -s "$(cat "$tmp/$f.size")" "$tmp/$f"; done
if ! "$ctl" restore "$id" >"$tmp/restore.out" 2>"$tmp/restore.err"; then
	cat "$tmp/restore.err"
	echo "FAIL ddp_cr: restore"
	exit 1
fi
cat "$tmp/restore.out"
for _ in $(seq 1200); do grep -q "^ddp_nccl: done" "$tmp/layer.out" && break; sleep 0.1; done
if cmp -s <(grep -E '^(step|weights)' "$tmp/native.out") <(grep -E '^(step|weights)' "$tmp/layer.out"); then
	echo "PASS ddp_cr: checkpointed at step $at, killed, restored: $steps steps' losses and weights equal native"
else
	diff <(grep -E '^(step|weights)' "$tmp/native.out") <(grep -E '^(step|weights)' "$tmp/layer.out") | head
	tail -5 "$tmp/layer.err"
	echo "FAIL ddp_cr: results differ after the restore"
	exit 1
fi
