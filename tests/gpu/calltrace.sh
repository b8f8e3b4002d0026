#!/usr/bin/env bash
# tests/gpu/calltrace.sh BUILD [WHICH...]: on the GPU machine, runs programs natively and under crcuda
# with the calltrace libcuda.so.1 in front (LD_PRELOAD; it forwards to the real driver or to libcrcuda)
# and prints where their driver calls differ (tests/gpu/calltrace/compare.py). WHICH: sgemm, torch
# or a program's absolute path (default: sgemm torch). Logs, gzipped, go to $OUT/calltrace/ when OUT is set.
set -u
build=$(cd "${1:?usage: calltrace.sh BUILD [sgemm|torch...]}" && pwd)
shift
top=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d /tmp/crcuda-calltrace.XXXXXX)
which=${*:-sgemm torch}
tracer=$build/tests/gpu/calltrace/libcuda.so.1
# CALLTRACE_NATIVE and CRCUDAD_ARGS let the script run on the simulated device too (its own check).
real=${CALLTRACE_NATIVE:-$(ldconfig -p | awk '/libcuda.so.1 /{print $NF; exit}')}
py=${PYTHON:-python3}
sock=$tmp/d.sock
if [ -z "$real" ] || [ ! -f "$tracer" ]; then
	echo "calltrace: no real libcuda.so.1 or no $tracer"
	exit 1
fi

# The daemon runs without the tracer: it loads the real driver itself.
# shellcheck disable=SC2086
"$build/crcudad/crcudad" ${CRCUDAD_ARGS:---backend cuda} --socket "$sock" --foreground >"$tmp/daemon.out" 2>"$tmp/daemon.log" &
dpid=$!
trap 'kill $dpid 2>/dev/null; wait 2>/dev/null' EXIT
for _ in $(seq 200); do grep -q ready "$tmp/daemon.out" 2>/dev/null && break; sleep 0.05; done

# trace NAME SIDE CMD...: one traced run; its main log becomes $tmp/NAME.SIDE (other pids' logs kept).
trace() {
	local name=$1 side=$2 target
	shift 2
	if [ "$side" = native ]; then target=$real; else target=$build/libcrcuda/libcuda.so.1; fi
	rm -f "$tmp/$name.$side".*
	env CALLTRACE_REAL="$target" CALLTRACE_WRAP_EXPORT="${CALLTRACE_WRAP_EXPORT:-21318c60,42d85a81}" CALLTRACE_LOG="$tmp/$name.$side" LD_PRELOAD="$tracer" \
		CRCUDA_SOCKET="$sock" \
		LD_LIBRARY_PATH="$([ "$side" = layer ] && echo "$build/libcrcuda:")${LD_LIBRARY_PATH:-}" \
		timeout "${CALLTRACE_TIMEOUT:-300}" "$@" >"$tmp/$name.$side.out" 2>&1
	echo "$name $side: exit $? ($(tail -1 "$tmp/$name.$side.out"))"
	# The largest log is the program's own (python may fork helpers that touch no driver).
	# shellcheck disable=SC2012
	mv "$(ls -S "$tmp/$name.$side".[0-9]* | head -1)" "$tmp/$name.$side"
}

for w in $which; do
	case $w in
	sgemm) cmd=("$build/tests/cudart/cudart_sgemm") ;;
	torch) cmd=("$py" "$top/tests/torch/train.py" --steps "${TORCH_STEPS:-6}") ;;
	/*) cmd=("$w") ;;
	*) echo "calltrace: unknown program $w"; continue ;;
	esac
	w=$(basename "$w")
	trace "$w" native "${cmd[@]}"
	trace "$w" layer "${cmd[@]}"
	echo "== $w: native vs layer"
	"$py" "$top/tests/gpu/calltrace/compare.py" "$tmp/$w.native" "$tmp/$w.layer" --max "${CALLTRACE_MAX:-40}" --summary
	if [ -n "${OUT:-}" ]; then
		mkdir -p "$OUT/calltrace"
		gzip -c "$tmp/$w.native" >"$OUT/calltrace/$w.native.gz"
		gzip -c "$tmp/$w.layer" >"$OUT/calltrace/$w.layer.gz"
		cp "$tmp/$w.native.out" "$tmp/$w.layer.out" "$OUT/calltrace/"
	fi
done
