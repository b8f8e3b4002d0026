#!/usr/bin/env bash
# PyTorch DDP over NCCL under crcuda, its process tree (the launcher and one process per GPU)
# checkpointed with `crcudactl checkpoint LAUNCHER` at random instants of training (no pause between
# steps: collectives in flight), killed, restored and finished; once restored onto the GPUs swapped
# (--gpu 1,0). Every run's losses and final weights must equal an uninterrupted native run's, bit for
# bit (issue 19, item 3). Prints a table: native and layer step time, and each trial's checkpoint and
# restore seconds.
#   tests/gpu/ddp-cr.sh BUILD_DIR [STEPS] [TRIALS]    (DDP_CR_MIN_S: no checkpoint before that many
#                                                      seconds of training; 62 lets TIME_WAITs pass)
set -uo pipefail
build=$(cd "${1:?usage: ddp-cr.sh BUILD_DIR [STEPS] [TRIALS]}" && pwd)
steps=${2:-1500} trials=${3:-3} min_s=${DDP_CR_MIN_S:-0}
top=$(cd "$(dirname "$0")/../.." && pwd)
app=$top/tests/gpu/apps/ddp_nccl.py
ctl=$build/crcudactl/crcudactl
tmp=$(mktemp -d /tmp/crcuda-ddp-cr.XXXXXX)
export CRCUDA_SOCKET=$tmp/d/crcudad.sock CRCUDA_STORE=$tmp/store DDP_STEP_SLEEP=0 DDP_TIMES=1
export CRCUDA_CRIU=${CRCUDA_CRIU:-$top/.deps/criu/bin/criu}
trap 'pkill -9 -f "$app" 2>/dev/null; pkill -f "crcudad.*$tmp" 2>/dev/null' EXIT
if [ "$(nvidia-smi -L 2>/dev/null | wc -l)" -lt 2 ]; then
	echo "SKIP ddp_cr: 2 GPUs needed"
	exit 0
fi
results() { grep -E '^(step|weights)' "$1"; }
step_ms() { sed -n 's/^ddp_nccl: step time \([0-9.]*\) ms.*/\1/p' "$1" | tail -1; }
python3 "$app" "$steps" >"$tmp/native.out" 2>"$tmp/native.err" || { tail "$tmp/native.err"; echo "FAIL ddp_cr: native run"; exit 1; }
t0=$(date +%s.%N)
"$ctl" run --backend cuda --idle-exit 600 --daemon-log "$tmp/daemon.log" -- python3 "$app" "$steps" \
	</dev/null >"$tmp/layer.out" 2>"$tmp/layer.err" || { tail "$tmp/layer.err"; echo "FAIL ddp_cr: under the layer"; exit 1; }
layer_s=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
cmp -s <(results "$tmp/native.out") <(results "$tmp/layer.out") || { echo "FAIL ddp_cr: the layer's results differ from native"; exit 1; }
rows=()
fails=0
for trial in $(seq "$trials") swap; do
	gpu=()
	[ "$trial" = swap ] && gpu=(--gpu 1,0)
	rm -f "$tmp/run.out" "$tmp/run.err"
	setsid "$ctl" run --backend cuda --idle-exit 600 --daemon-log "$tmp/daemon.log" -- python3 "$app" "$steps" \
		</dev/null >"$tmp/run.out" 2>"$tmp/run.err" &
	parent=$!
	for _ in $(seq 600); do grep -q "^step 20 " "$tmp/run.out" 2>/dev/null && break; sleep 0.1; done
	# A random instant of the training, at least min_s after its start: NCCL's bootstrap closes
	# connections accepted on listening ports it keeps, and the kernel keeps those ports' TIME_WAIT
	# entries 60 s, during which a restore cannot bind the listener again (crcudactl restore waits).
	# The layer run's step time, less a fifth: runs differ by that much, and a later instant may find
	# the training ended.
	sleep "$(awk -v r="$RANDOM" -v s="$(step_ms "$tmp/layer.err")" -v n="$steps" -v m="$min_s" \
		'BEGIN { t = (n - 20) * s * 0.8 / 1000 - m; printf "%.3f", m + r / 32767 * 0.5 * (t > 0 ? t : 0) }')"
	at=$(grep -c '^step' "$tmp/run.out")
	c0=$(date +%s.%N)
	if ! "$ctl" checkpoint --tcp-established "$parent" >"$tmp/ckpt.out" 2>"$tmp/ckpt.err"; then
		cat "$tmp/ckpt.err"
		[ "$at" -ge "$steps" ] && echo "ddp_cr: the training had ended before the instant"
		echo "FAIL ddp_cr: trial $trial: checkpoint at step $at"
		tail -5 "$tmp/daemon.log"
		fails=$((fails + 1))
		pkill -9 -P "$parent"; kill -9 "$parent"
		continue
	fi
	ckpt_s=$(awk -v a="$c0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
	coll=$(grep -o 'each stops after [0-9]*' "$tmp/ckpt.err" | grep -o '[0-9]*$')
	id=$(sed -n 's/^checkpoint \([0-9]*\):.*/\1/p' "$tmp/ckpt.out" | head -1)
	wait "$parent" 2>/dev/null
	for f in run.out run.err; do stat -c %s "$tmp/$f" >"$tmp/$f.size"; done
	sleep 0.5
	for f in run.out run.err; do truncate -s "$(cat "$tmp/$f.size")" "$tmp/$f"; done
	r0=$(date +%s.%N)
	if ! "$ctl" restore "${gpu[@]}" "$id" >"$tmp/restore.out" 2>"$tmp/restore.err"; then
		cat "$tmp/restore.err"
		echo "FAIL ddp_cr: trial $trial: restore of $id"
		fails=$((fails + 1))
		continue
	fi
	restore_s=$(awk -v a="$r0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
	for _ in $(seq 1200); do grep -q "^ddp_nccl: done" "$tmp/run.out" && break; sleep 0.1; done
	if cmp -s <(results "$tmp/native.out") <(results "$tmp/run.out"); then
		verdict=exact
	else
		diff <(results "$tmp/native.out") <(results "$tmp/run.out") | head -5
		verdict=DIFFERENT
		fails=$((fails + 1))
	fi
	rows+=("$(printf '%-7s %10s %12s %10s %10s %-10s %s' "$trial" "$at" "${coll:-?}" "$ckpt_s" "$restore_s" "${gpu[*]:---}" "$verdict")")
done
printf '%-8s %12s %9s\n' run "step (ms)" seconds
printf '%-8s %12s %9s\n' native "$(step_ms "$tmp/native.err")" "-"
printf '%-8s %12s %9s\n' layer "$(step_ms "$tmp/layer.err")" "$layer_s"
printf '%-7s %10s %12s %10s %10s %-10s %s\n' trial "at step" "collective" "ckpt (s)" "restore (s)" gpus result
printf '%s\n' "${rows[@]}"
if [ "$fails" = 0 ]; then
	echo "PASS ddp_cr: $steps steps, $trials random instants and one restore onto the GPUs swapped: losses and weights equal native"
else
	echo "FAIL ddp_cr: $fails of $((trials + 1)) trials"
	exit 1
fi
