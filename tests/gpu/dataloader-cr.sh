#!/usr/bin/env bash
# A PyTorch DataLoader whose workers pass CUDA tensors to the training process (CUDA IPC memory and
# events between three processes under crcuda, tests/torch/dataloader_cuda.py), natively, under the
# layer, and checkpointed as one process tree (`crcudactl checkpoint TRAINER`) at random instants,
# killed, restored and finished: every step's loss and the final weights equal the native run's
# (issue 19: "a DataLoader passing CUDA tensors ... after C/R"). One GPU. DL_BATCH_DEVICE=cpu: batches
# made on the CPU, passed through shared memory (the common case), moved to the GPU by the trainer.
#   tests/gpu/dataloader-cr.sh BUILD_DIR [STEPS] [TRIALS]
set -uo pipefail
build=$(cd "${1:?usage: dataloader-cr.sh BUILD_DIR [STEPS] [TRIALS]}" && pwd)
steps=${2:-3000} trials=${3:-2}
top=$(cd "$(dirname "$0")/../.." && pwd)
app=$top/tests/torch/dataloader_cuda.py
ctl=$build/crcudactl/crcudactl
tmp=$(mktemp -d /tmp/crcuda-dl-cr.XXXXXX)
export CRCUDA_SOCKET=$tmp/d/crcudad.sock CRCUDA_STORE=$tmp/store
export CRCUDA_CRIU=${CRCUDA_CRIU:-$top/.deps/criu/bin/criu}
trap 'pkill -9 -f "$app" 2>/dev/null; pkill -f "crcudad.*$tmp" 2>/dev/null' EXIT
results() { grep -E '^(step|weights)' "$1"; }
python3 "$app" "$steps" >"$tmp/native.out" 2>"$tmp/native.err" || { tail "$tmp/native.err"; echo "FAIL dataloader_cr: native run"; exit 1; }
t0=$(date +%s.%N)
"$ctl" run --backend cuda --idle-exit 600 --daemon-log "$tmp/daemon.log" -- python3 "$app" "$steps" \
	</dev/null >"$tmp/layer.out" 2>"$tmp/layer.err" || { tail "$tmp/layer.err"; echo "FAIL dataloader_cr: under the layer"; exit 1; }
layer_s=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
cmp -s <(results "$tmp/native.out") <(results "$tmp/layer.out") || { echo "FAIL dataloader_cr: the layer's results differ from native"; exit 1; }
rows=()
fails=0
for trial in $(seq "$trials"); do
	rm -f "$tmp/run.out" "$tmp/run.err"
	setsid "$ctl" run --backend cuda --idle-exit 600 --daemon-log "$tmp/daemon.log" -- python3 "$app" "$steps" \
		</dev/null >"$tmp/run.out" 2>"$tmp/run.err" &
	parent=$!
	for _ in $(seq 600); do grep -q "^step 20 " "$tmp/run.out" 2>/dev/null && break; sleep 0.1; done
	sleep "$(awk -v r="$RANDOM" -v s="$layer_s" 'BEGIN { printf "%.3f", r / 32767 * 0.4 * s }')"
	at=$(grep -c '^step' "$tmp/run.out")
	c0=$(date +%s.%N)
	if ! "$ctl" checkpoint "$parent" >"$tmp/ckpt.out" 2>"$tmp/ckpt.err"; then
		grep -v "^ *| .*rlimit" "$tmp/ckpt.err"
		echo "FAIL dataloader_cr: trial $trial: checkpoint at step $at"
		fails=$((fails + 1))
		pkill -9 -P "$parent"; kill -9 "$parent"
		continue
	fi
	ckpt_s=$(awk -v a="$c0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
	id=$(sed -n 's/^checkpoint \([0-9]*\):.*/\1/p' "$tmp/ckpt.out" | head -1)
	wait "$parent" 2>/dev/null
	for f in run.out run.err; do stat -c %s "$tmp/$f" >"$tmp/$f.size"; done
	sleep 0.5
	for f in run.out run.err; do truncate -s "$(cat "$tmp/$f.size")" "$tmp/$f"; done
	r0=$(date +%s.%N)
	if ! "$ctl" restore "$id" >"$tmp/restore.out" 2>"$tmp/restore.err"; then
		cat "$tmp/restore.err"
		# What held a pid the restore needed, and what the checkpoint says of its tree.
		"$ctl" inspect "$id" 2>/dev/null | grep -E "crcuda\.(tree|pid|comm)"
		ps -eo pid,ppid,stat,etimes,comm | awk -v p="$(sed -n 's/.*Can.t fork for \([0-9]*\).*/\1/p' "$tmp/restore.err" | head -1)" \
			'NR == 1 || $1 == p || $2 == p'
		grep -E "Forking task|Can't fork" "$(sed -n "s/.*CRIU's log: \([^;]*\);.*/\1/p" "$tmp/restore.err")" 2>/dev/null | head -12
		echo "FAIL dataloader_cr: trial $trial: restore of $id"
		fails=$((fails + 1))
		continue
	fi
	restore_s=$(awk -v a="$r0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
	for _ in $(seq 1200); do grep -q "^dataloader: done" "$tmp/run.out" && break; sleep 0.1; done
	if cmp -s <(results "$tmp/native.out") <(results "$tmp/run.out"); then
		verdict=exact
	else
		diff <(results "$tmp/native.out") <(results "$tmp/run.out") | head -5
		verdict=DIFFERENT
		fails=$((fails + 1))
	fi
	rows+=("$(printf '%-7s %10s %10s %12s %s' "$trial" "$at" "$ckpt_s" "$restore_s" "$verdict")")
done
printf '%-7s %10s %10s %12s %s\n' trial "at step" "ckpt (s)" "restore (s)" result
printf '%s\n' "${rows[@]}"
if [ "$fails" = 0 ]; then
	echo "PASS dataloader_cr: $steps steps, $trials random instants: losses and weights equal native (layer run ${layer_s} s)"
else
	echo "FAIL dataloader_cr: $fails of $trials trials"
	exit 1
fi
