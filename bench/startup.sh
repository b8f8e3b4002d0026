#!/usr/bin/env bash
# bench/startup.sh BUILD [REPS]: time from exec to a program's first finished kernel, natively and
# under crcuda, in the same run: with a warm worker pool (crcudad --pool 1: a worker that has done
# cuInit and made its context before the program arrives) and without one (--pool 0: the worker is
# started for the program). Programs: a cudart one (bench/first_kernel.cu, nvcc) and PyTorch
# (`import torch; torch.ones(1, device="cuda")`). Prints medians in ms and the ratios to native.
# Needs a GPU (the real driver); exits 77 without one.
set -u
build=$(cd "${1:?usage: startup.sh BUILD [REPS]}" && pwd)
reps=${2:-9}
top=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d /tmp/crcuda-startup.XXXXXX)
py=${PYTHON:-python3}
trap 'pkill -f "crcudad.*$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT
nvidia-smi >/dev/null 2>&1 || { echo "startup: no GPU: skipped"; exit 77; }
nvcc -O2 -o "$tmp/first_kernel" "$top/bench/first_kernel.cu" || exit 1
cat >"$tmp/torch_first.py" <<'PY'
import time, torch
torch.ones(1, device="cuda")
torch.cuda.synchronize()
print(time.time_ns())
PY
have_torch=0
"$py" -c 'import torch, sys; sys.exit(not torch.cuda.is_available())' 2>/dev/null && have_torch=1

# one_run PREFIX... -- PROGRAM...: ms from exec to the program's printed time.
one_run() {
	local t0 t1
	t0=$(date +%s%N)
	t1=$("$@" 2>/dev/null | tail -1)
	[ -n "$t1" ] || { echo "nan"; return; }
	echo $(((t1 - t0) / 1000))
}
median() { sort -n | awk '{a[NR]=$1} END {if (NR) printf "%.1f", a[int((NR+1)/2)]/1000; else print "nan"}'; }
start_daemon() { # name pool
	"$build/crcudad/crcudad" --backend cuda --socket "$tmp/$1.sock" --pool "$2" --foreground \
		>"$tmp/$1.out" 2>"$tmp/$1.log" &
	for _ in $(seq 300); do grep -q ready "$tmp/$1.out" && return 0; sleep 0.05; done
	echo "startup: crcudad ($1) did not start" >&2
	exit 1
}
start_daemon warm 1
start_daemon cold 0
layer() { env CRCUDA_SOCKET="$tmp/$1.sock" LD_LIBRARY_PATH="$build/libcrcuda" "${@:2}"; }

printf '%-10s %12s %12s %12s %10s %10s\n' program native_ms pool_ms nopool_ms pool/nat nopool/nat
for prog in cudart torch; do
	[ $prog = torch ] && [ $have_torch = 0 ] && { echo "torch: skipped (no PyTorch with CUDA)"; continue; }
	if [ $prog = cudart ]; then cmd=("$tmp/first_kernel"); else cmd=("$py" "$tmp/torch_first.py"); fi
	: >"$tmp/n" ; : >"$tmp/w" ; : >"$tmp/c"
	for _ in $(seq "$reps"); do
		# Apart: the warm daemon refills its pool after each run, and a worker's start (cuInit, a
		# context) beside a measured run would slow it.
		one_run "${cmd[@]}" >>"$tmp/n"
		sleep 1
		one_run layer warm "${cmd[@]}" >>"$tmp/w"
		sleep 1.5
		one_run layer cold "${cmd[@]}" >>"$tmp/c"
		sleep 1
	done
	n=$(median <"$tmp/n") w=$(median <"$tmp/w") c=$(median <"$tmp/c")
	printf '%-10s %12s %12s %12s %10s %10s\n' $prog "$n" "$w" "$c" \
		"$(awk -v a="$w" -v b="$n" 'BEGIN{printf "%.2fx", a/b}')" \
		"$(awk -v a="$c" -v b="$n" 'BEGIN{printf "%.2fx", a/b}')"
done
