#!/usr/bin/env bash
# tests/gpu/torch-migrate.sh BUILD: the PyTorch training of tests/torch/train.py under crcuda on the
# real driver, live-migrated mid-run (`crcudactl migrate` to a `crcudactl receive`) between two
# crcudads of this machine in two network namespaces, each with a store of its own. Its loss
# sequence must equal an uninterrupted run's under the layer, bit for bit; prints the migration's
# rounds and downtime. Needs root, CRIU and a GPU. TORCH_STEPS (default 3000): steps of the training
# (enough to outlast the migration); TORCH_MIGRATE_AT (default 50): the step after which it begins.
set -u
build=$(cd "${1:?usage: torch-migrate.sh BUILD}" && pwd)
top=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d /tmp/crcuda-torch-mig.XXXXXX)
ctl=$build/crcudactl/crcudactl
crcudad=$build/crcudad/crcudad
py=${PYTHON:-python3}
steps=${TORCH_STEPS:-3000}
at=${TORCH_MIGRATE_AT:-50}
export CRCUDA_CRIU=${CRCUDA_CRIU:-$top/.deps/criu/bin/criu}
unset CRCUDA_STORE CRCUDA_SOCKET CRCUDA_REMOTE CRCUDA_TOKEN CRCUDA_TOKEN_FILE
result() { printf '%-4s %-32s %s\n' "$1" "$2" "${3:-}"; }
pids=()
. "$top/tests/lib/two-hosts.sh"
cleanup() {
	for p in "${pids[@]}"; do pkill -9 -P "$p" 2>/dev/null; kill -9 "$p" 2>/dev/null; done
	two_hosts_down
}
trap cleanup EXIT
"$py" -c 'import torch, sys; sys.exit(not torch.cuda.is_available())' 2>/dev/null || { result SKIP torch_migrate "no PyTorch with CUDA"; exit 0; }
[ "$(id -u)" = 0 ] || { result SKIP torch_migrate "needs root"; exit 0; }
two_hosts_up tm || { result FAIL torch_migrate "cannot set up two network namespaces"; exit 1; }
port=$((20000 + RANDOM % 20000))
head -c 24 /dev/urandom | base64 >"$tmp/token"
chmod 600 "$tmp/token"
for h in a b; do
	mkdir -p "$tmp/$h"
	in=("${inA[@]}")
	[ $h = b ] && in=("${inB[@]}")
	"${in[@]}" "$crcudad" --backend cuda --socket "$tmp/$h/crcudad.sock" --foreground >"$tmp/$h.out" 2>"$tmp/$h.log" &
	pids+=($!)
	disown $!
	for _ in $(seq 600); do grep -qs ready "$tmp/$h.out" && break; sleep 0.05; done
done
"${inB[@]}" "$ctl" receive --listen "$addrB:$port" --token-file "$tmp/token" --store "$tmp/b/store" \
	--daemon "$tmp/b/crcudad.sock" >"$tmp/receive.out" 2>"$tmp/receive.log" &
pids+=($!)
disown $!
for _ in $(seq 600); do grep -qs listening "$tmp/receive.out" && break; sleep 0.05; done

CRCUDA_SOCKET=$tmp/a/crcudad.sock "${inA[@]}" "$ctl" run --backend cuda -- "$py" "$top/tests/torch/train.py" \
	--steps "$steps" >"$tmp/ref.txt" 2>"$tmp/ref.err" ||
	{ result FAIL torch_migrate "uninterrupted run under the layer failed: $(tail -1 "$tmp/ref.err")"; exit 1; }
CRCUDA_SOCKET=$tmp/a/crcudad.sock setsid "${inA[@]}" "$ctl" run --backend cuda -- "$py" "$top/tests/torch/train.py" \
	--steps "$steps" --ready-at "$at" --ready-file "$tmp/ready" </dev/null >"$tmp/out.txt" 2>"$tmp/err.txt" &
pid=$!
disown $pid
pids+=("$pid")
for _ in $(seq 1200); do [ -e "$tmp/ready" ] && break; sleep 0.1; done
[ -e "$tmp/ready" ] || { result FAIL torch_migrate "not ready: $(tail -2 "$tmp/err.txt" | tr '\n' ' ')"; exit 1; }
CRCUDA_SOCKET=$tmp/a/crcudad.sock "${inA[@]}" "$ctl" migrate --store "$tmp/a/store" --token-file "$tmp/token" \
	--to "$addrB:$port" "$pid" >"$tmp/migrate.out" 2>"$tmp/migrate.err" ||
	{ result FAIL torch_migrate "$(tail -2 "$tmp/migrate.err" | tr '\n' ' ')"; sed 's/^/    /' "$tmp/migrate.out"; exit 1; }
sed 's/^/    /' "$tmp/migrate.out"
for _ in $(seq 30000); do [ -e "/proc/$pid" ] || break; grep -q '^State:.*Z' "/proc/$pid/status" 2>/dev/null && break; sleep 0.02; done
at_step=$(grep -c '^step ' "$tmp/out.txt")
if cmp -s <(grep '^step ' "$tmp/ref.txt") <(grep '^step ' "$tmp/out.txt") && [ "$at_step" = "$steps" ]; then
	result PASS torch_migrate_losses "migrated while training (after step $at), $steps losses equal to the uninterrupted run ($(sed -n 's/.*\(downtime [0-9.]* s, total [0-9.]* s\).*/\1/p' "$tmp/migrate.out"))"
else
	result FAIL torch_migrate_losses "$at_step steps after the migration"
	diff <(grep '^step ' "$tmp/ref.txt") <(grep '^step ' "$tmp/out.txt") | head -6
	exit 1
fi
rm -rf "$tmp"
