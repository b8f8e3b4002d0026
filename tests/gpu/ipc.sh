#!/usr/bin/env bash
# tests/gpu/ipc.sh BUILD: CUDA IPC between two processes on the real driver, natively and under
# crcuda (one daemon, a worker per process), in the same call. Prints one table:
#   ipc_driver_api   tests/programs/ipc: A exports device memory and an interprocess event, B (a forked
#                    child) opens both, checks A's pattern (copies and a kernel), writes back, records;
#                    A waits on the event and reads B's pattern exactly; error cases. Its output must be
#                    the same natively and under the layer, line for line.
#   ipc_refused_ckpt under the layer, with B holding A's memory: a device checkpoint of B and one of A are
#                    refused saying why, and both run on to PASS.
#   ipc_importer_cr  tests/cr/ipc-cr.sh with the real driver (CRIU): the importer checkpointed and
#                    restored with the exporter's memory open shares it as before, both ways; without
#                    the exporter the restore fails saying why.
#   ipc_torch        tests/torch/ipc_tensor.py: torch.multiprocessing passes CUDA tensors both ways
#                    (and a view at an offset), the consumer writes in place; digests natively and under
#                    the layer must be equal.
# Exit 0 when every row passed or was skipped.
set -u
build=$(cd "${1:?usage: ipc.sh BUILD}" && pwd)
top=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d /tmp/crcuda-gpu-ipc.XXXXXX)
export CRCUDA_SOCKET=$tmp/crcudad.sock
lib=$build/libcrcuda
prog=$build/tests/programs/ipc
ctl=$build/tests/ckpt-daemon/ckpt_ctl
py=${PYTHON:-python3}
daemon_pid=
failed=0
rows=()
cleanup() { [ -n "$daemon_pid" ] && kill "$daemon_pid" 2>/dev/null; wait 2>/dev/null; }
trap cleanup EXIT
row() { # row NAME NATIVE LAYER VERDICT DETAIL
	rows+=("$(printf '%-18s %-8s %-8s %-5s %s' "$1" "$2" "$3" "$4" "$5")")
	[ "$4" = FAIL ] && failed=1
	return 0
}
layer() { env LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" timeout 300 "$@"; }

"$build/crcudad/crcudad" --backend cuda --socket "$CRCUDA_SOCKET" --foreground >"$tmp/daemon.out" 2>"$tmp/daemon.log" &
daemon_pid=$!
for _ in $(seq 300); do grep -q ready "$tmp/daemon.out" 2>/dev/null && break; sleep 0.1; done
grep -q ready "$tmp/daemon.out" || { echo "crcudad did not start: $(tail -3 "$tmp/daemon.log")"; exit 1; }

# ---- the driver-API program ----
timeout 300 "$prog" >"$tmp/native.txt" 2>&1
n_rc=$?
layer "$prog" >"$tmp/layer.txt" 2>&1
l_rc=$?
if [ $n_rc = 77 ]; then
	row ipc_driver_api skip - SKIP "no GPU natively"
elif [ $n_rc = 0 ] && [ $l_rc = 0 ] && cmp -s "$tmp/native.txt" "$tmp/layer.txt"; then
	row ipc_driver_api PASS PASS PASS "$(wc -l <"$tmp/native.txt") lines, the same natively and under the layer"
else
	row ipc_driver_api "rc=$n_rc" "rc=$l_rc" FAIL "outputs differ or a run failed (below)"
	diff "$tmp/native.txt" "$tmp/layer.txt" | head -30 >"$tmp/diff.txt"
fi

# ---- a checkpoint of either side is refused while the memory is shared ----
if [ $n_rc != 77 ]; then
	layer "$prog" --hold "$tmp/hold" >"$tmp/hold.txt" 2>&1 &
	hold_pid=$!
	for _ in $(seq 600); do [ -s "$tmp/hold" ] && break; sleep 0.1; done
	verdict=PASS detail="importer and exporter refused, both ran on"
	if b=$(cat "$tmp/hold" 2>/dev/null) && a=$(awk '/^PPid:/ {print $2}' "/proc/$b/status"); then
		for who in "$b:has another process's interprocess event open" "$a:exported an interprocess event a process not checkpointed with it has open"; do
			pid=${who%%:*}
			"$ctl" "$CRCUDA_SOCKET" quiesce "$pid" >/dev/null 2>&1 || { verdict=FAIL detail="quiesce of $pid failed"; }
			if "$ctl" "$CRCUDA_SOCKET" checkpoint "$pid" "$tmp/store" >"$tmp/ckpt.txt" 2>&1; then
				verdict=FAIL detail="a checkpoint of $pid was taken"
			elif ! grep -q "${who#*:}" "$tmp/ckpt.txt"; then
				verdict=FAIL detail="refusal without the reason: $(tail -1 "$tmp/ckpt.txt")"
			fi
			"$ctl" "$CRCUDA_SOCKET" resume "$pid" >/dev/null 2>&1
		done
	else
		verdict=FAIL detail="B did not open A's memory: $(tail -2 "$tmp/hold.txt" | tr '\n' ' ')"
	fi
	touch "$tmp/hold.go"
	wait "$hold_pid" || { verdict=FAIL detail="the held run failed after the refusals: $(tail -2 "$tmp/hold.txt" | tr '\n' ' ')"; }
	row ipc_refused_ckpt - "$verdict" "$verdict" "$detail"
fi

# ---- the importer checkpointed and restored (CRIU) while the exporter runs on ----
if [ $n_rc != 77 ]; then
	if CR_BACKEND=cuda timeout 400 "$top/tests/cr/ipc-cr.sh" "$build" >"$tmp/cr.txt" 2>&1; then
		row ipc_importer_cr - PASS PASS "restored with the exporter's memory open: shared as before; without the exporter: refused"
	elif grep -q "^SKIP" "$tmp/cr.txt"; then
		row ipc_importer_cr - - SKIP "$(grep "^SKIP" "$tmp/cr.txt")"
	else
		row ipc_importer_cr - FAIL FAIL "below"
		tail -30 "$tmp/cr.txt" >>"$tmp/diff.txt"
	fi
fi

# ---- PyTorch: torch.multiprocessing passes CUDA tensors ----
if "$py" -c 'import torch, sys; sys.exit(not torch.cuda.is_available())' 2>/dev/null; then
	timeout 300 "$py" "$top/tests/torch/ipc_tensor.py" >"$tmp/torch.native" 2>"$tmp/torch.native.err"
	n_rc=$?
	layer "$py" "$top/tests/torch/ipc_tensor.py" >"$tmp/torch.layer" 2>"$tmp/torch.layer.err"
	l_rc=$?
	if [ $n_rc = 0 ] && [ $l_rc = 0 ] && cmp -s "$tmp/torch.native" "$tmp/torch.layer"; then
		row ipc_torch PASS PASS PASS "$(wc -l <"$tmp/torch.native") lines of digests, equal"
	else
		row ipc_torch "rc=$n_rc" "rc=$l_rc" FAIL "digests differ or a run failed (below)"
		{ diff "$tmp/torch.native" "$tmp/torch.layer"; tail -5 "$tmp/torch.native.err" "$tmp/torch.layer.err"; } |
			head -40 >>"$tmp/diff.txt"
	fi
else
	row ipc_torch - - SKIP "no PyTorch with CUDA"
fi

printf '%-18s %-8s %-8s %-5s %s\n' test native layer ok detail
printf '%s\n' "${rows[@]}"
if [ -s "$tmp/diff.txt" ]; then
	echo "--- differences and errors"
	cat "$tmp/diff.txt"
	echo "--- daemon log (warnings)"
	grep -i "warn\|error" "$tmp/daemon.log" | tail -20
fi
[ $failed = 0 ] && rm -rf "$tmp"
exit $failed
