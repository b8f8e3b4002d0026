#!/usr/bin/env bash
# PyTorch DDP over NCCL on every GPU of the machine (issue 19, item 3), natively and under crcuda (one
# daemon, one worker per rank): the losses of every step and the final weights must be equal bit for
# bit, and NCCL's transport between the ranks is shown (P2P/CUMEM on NVLink: the fast path). Skips (0,
# with a line) with fewer than 2 GPUs. Not yet: a checkpoint of the job (item 2, the process tree).
#   tests/gpu/ddp.sh BUILD_DIR [STEPS]
set -uo pipefail
build=$(cd "${1:?usage: ddp.sh BUILD_DIR [STEPS]}" && pwd)
steps=${2:-300}
app=$(cd "$(dirname "$0")/apps" && pwd)/ddp_nccl.py
tmp=$(mktemp -d /tmp/crcuda-ddp.XXXXXX)
trap 'pkill -f "crcudad.*$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT
ngpu=$(nvidia-smi -L 2>/dev/null | wc -l)
if [ "$ngpu" -lt 2 ]; then
	echo "SKIP ddp_nccl: $ngpu GPU(s) here, 2 needed"
	exit 0
fi
run() { # run NAME CMD...: output in $tmp/NAME.out, NCCL's log in $tmp/NAME.err, seconds in $tmp/NAME.s
	local name=$1 t0
	shift
	t0=$(date +%s.%N)
	NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT timeout 300 "$@" >"$tmp/$name.out" 2>"$tmp/$name.err"
	local rc=$?
	awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { print b - a }' >"$tmp/$name.s"
	return $rc
}
run native python3 "$app" "$steps" || { tail -20 "$tmp/native.err"; echo "FAIL ddp_nccl natively"; exit 1; }
run layer "$build/crcudactl/crcudactl" run --backend cuda --socket "$tmp/crcudad.sock" --idle-exit 5 -- \
	python3 "$app" "$steps" || { tail -20 "$tmp/layer.err"; echo "FAIL ddp_nccl under crcuda"; exit 1; }
transport() { grep -ho "via [A-Za-z0-9/_]*" "$1" | sort | uniq -c | sed 's/^ *//' | paste -sd, -; }
printf '%-8s %8s  %-40s %s\n' run seconds "NCCL transports (channels)" "last loss"
for r in native layer; do
	printf '%-8s %8.1f  %-40s %s\n' "$r" "$(cat "$tmp/$r.s")" "$(transport "$tmp/$r.out" "$tmp/$r.err")" \
		"$(grep '^step' "$tmp/$r.out" | tail -1)"
done
if cmp -s <(grep -E '^(step|weights)' "$tmp/native.out") <(grep -E '^(step|weights)' "$tmp/layer.out"); then
	echo "PASS ddp_nccl: $ngpu ranks, $steps steps, losses and weights equal natively and under crcuda"
else
	diff <(grep -E '^(step|weights)' "$tmp/native.out") <(grep -E '^(step|weights)' "$tmp/layer.out") | head
	echo "FAIL ddp_nccl: results differ under crcuda"
	exit 1
fi
