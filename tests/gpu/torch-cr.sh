#!/usr/bin/env bash
# tests/gpu/torch-cr.sh BUILD: the PyTorch training of tests/torch/train.py under crcuda on the real
# driver, checkpointed at step 100 with `crcudactl checkpoint` (the process is killed), restored with
# `crcudactl restore`, and run to step 200. Its loss sequence must equal an uninterrupted run's under
# the layer, bit for bit. Prints PASS/FAIL lines and the checkpoint/restore seconds.
set -u
build=$(cd "${1:?usage: torch-cr.sh BUILD}" && pwd)
top=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d /tmp/crcuda-torch-cr.XXXXXX)
export CRCUDA_SOCKET=$tmp/d.sock CRCUDA_STORE=$tmp/store
ctl=$build/crcudactl/crcudactl
py=${PYTHON:-python3}
steps=${TORCH_STEPS:-200}
at=$((steps / 2))
result() { printf '%-4s %-32s %s\n' "$1" "$2" "${3:-}"; }
now() { date +%s.%N; }
cleanup() { pkill -f "crcudad.*$CRCUDA_SOCKET" 2>/dev/null; }
trap cleanup EXIT
"$py" -c 'import torch, sys; sys.exit(not torch.cuda.is_available())' 2>/dev/null || { result SKIP torch_cr "no PyTorch with CUDA"; exit 0; }

"$ctl" run --backend cuda -- "$py" "$top/tests/torch/train.py" --steps "$steps" >"$tmp/ref.txt" 2>"$tmp/ref.err" ||
	{ result FAIL torch_cr "uninterrupted run under the layer failed: $(tail -1 "$tmp/ref.err")"; exit 1; }
setsid "$ctl" run --backend cuda -- "$py" "$top/tests/torch/train.py" --steps "$steps" --ready-at "$at" \
	--ready-file "$tmp/ready" --go-file "$tmp/go" </dev/null >"$tmp/out.txt" 2>"$tmp/err.txt" &
pid=$!
disown $pid
for _ in $(seq 1200); do [ -e "$tmp/ready" ] && break; sleep 0.1; done
[ -e "$tmp/ready" ] || { result FAIL torch_cr "not ready: $(tail -2 "$tmp/err.txt" | tr '\n' ' ')"; exit 1; }
t0=$(now)
"$ctl" checkpoint --json "$pid" >"$tmp/ckpt.json" 2>"$tmp/ckpt.err" ||
	{ result FAIL torch_cr_checkpoint "$(tail -3 "$tmp/ckpt.err" | tr '\n' ' ')"; exit 1; }
t1=$(now)
for _ in $(seq 500); do [ -e "/proc/$pid" ] || break; sleep 0.01; done
id=$(sed -n 's/^ *"id": *\([0-9]*\).*/\1/p' "$tmp/ckpt.json")
t2=$(now)
"$ctl" restore --json "$id" >"$tmp/restore.json" 2>"$tmp/restore.err" ||
	{ result FAIL torch_cr_restore "$(tail -3 "$tmp/restore.err" | tr '\n' ' ')"; exit 1; }
t3=$(now)
touch "$tmp/go"
for _ in $(seq 3000); do [ -e "/proc/$pid" ] || break; grep -q '^State:.*Z' "/proc/$pid/status" 2>/dev/null && break; sleep 0.02; done
if cmp -s <(grep '^step ' "$tmp/ref.txt") <(grep '^step ' "$tmp/out.txt") && [ "$(grep -c '^step ' "$tmp/out.txt")" = "$steps" ]; then
	result PASS torch_cr_losses "checkpoint at step $at, restored, $steps losses equal to the uninterrupted run"
else
	result FAIL torch_cr_losses "$(grep -c '^step ' "$tmp/out.txt") steps after restore"
	diff <(grep '^step ' "$tmp/ref.txt") <(grep '^step ' "$tmp/out.txt") | head -6
fi
awk -v a="$t0" -v b="$t1" -v c="$t2" -v d="$t3" 'BEGIN { printf "INFO torch_cr_times                   checkpoint %.2f s, restore %.2f s\n", b - a, d - c }'
grep -E '"device_bytes"|"seconds"' "$tmp/ckpt.json" | tr -d ' \n'
echo
