#!/usr/bin/env bash
# tests/gpu/striped.sh BUILD: on the GPU machine, striped copies of a remote (TCP) session against the
# real driver: tests/programs/big_copies (large copies both ways, pageable and page-locked, sync and
# async on a stream, odd sizes; --mb MB, default 256) natively and through a crcudad --listen on
# loopback over TLS and over plaintext, each with its copies striped over CRCUDA_TLS_STREAMS (default 4)
# bulk connections and on one connection: every run exact, the same checksum as the native run, and
# the striped runs striped (the daemon's log). Prints each run's time. BACKEND=sim: the same on the
# simulated device (its own check, with CRCUDA_SIM_KERNELS set).
set -u
build=$(cd "${1:?usage: striped.sh BUILD}" && pwd)
mb=${MB:-256}
streams=${CRCUDA_TLS_STREAMS:-4}
prog=$build/tests/programs/big_copies
tmp=$(mktemp -d /tmp/crcuda-striped.XXXXXX)
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; rm -rf "$tmp"' EXIT
fail() {
	echo "FAIL: $*" >&2
	tail -20 "$tmp"/*.log >&2
	exit 1
}
backend=${BACKEND:-cuda}
native_lib=
if [ "$backend" = sim ]; then
	native_lib=$build/sim/lib
else
	nvidia-smi -L >/dev/null 2>&1 || { echo "SKIP: no GPU"; exit 77; }
fi
head -c 32 /dev/urandom | base64 >"$tmp/token"
chmod 600 "$tmp/token"

start_daemon() { # start_daemon NAME [crcudad options]: its port in $port
	local name=$1
	shift
	port=$((20000 + RANDOM % 20000))
	"$build/crcudad/crcudad" --backend "$backend" --socket "$tmp/$name.sock" --listen "127.0.0.1:$port" \
		--token-file "$tmp/token" --foreground -v "$@" >"$tmp/$name.out" 2>"$tmp/$name.log" &
	pids+=($!)
	for _ in $(seq 200); do grep -q ready "$tmp/$name.out" 2>/dev/null && return 0; sleep 0.1; done
	fail "crcudad ($name) did not start"
}
start_daemon tls
tls_port=$port
start_daemon plain --insecure
plain_port=$port

t0=$(date +%s%N)
LD_LIBRARY_PATH=$native_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} timeout 600 "$prog" --mb "$mb" >"$tmp/native.txt" 2>&1 || fail "natively: $(cat "$tmp/native.txt")"
echo "native: $((($(date +%s%N) - t0) / 1000000)) ms: $(cat "$tmp/native.txt")"
want=$(grep -o "checksum=.*" "$tmp/native.txt")

for mode in tls tls-1 plain plain-1; do
	envs=(LD_LIBRARY_PATH="$build/libcrcuda" CRCUDA_TOKEN_FILE="$tmp/token")
	case $mode in
	tls*) envs+=(CRCUDA_REMOTE=127.0.0.1:$tls_port) log=$tmp/tls.log ;;
	plain*) envs+=(CRCUDA_REMOTE=127.0.0.1:$plain_port CRCUDA_INSECURE=1) log=$tmp/plain.log ;;
	esac
	case $mode in
	*-1) envs+=(CRCUDA_TLS_STREAMS=0) ;;
	*) envs+=(CRCUDA_TLS_STREAMS="$streams") ;;
	esac
	before=$(grep -c "striped copies" "$log")
	t0=$(date +%s%N)
	env "${envs[@]}" timeout 600 "$prog" --mb "$mb" >"$tmp/$mode.txt" 2>&1 || fail "$mode: $(cat "$tmp/$mode.txt")"
	ms=$((($(date +%s%N) - t0) / 1000000))
	[ "$(grep -o "checksum=.*" "$tmp/$mode.txt")" = "$want" ] || fail "$mode: checksum differs: $(cat "$tmp/$mode.txt")"
	sleep 0.5
	after=$(grep -c "striped copies" "$log")
	case $mode in
	*-1) [ "$after" = "$before" ] || fail "$mode striped" ;;
	*) [ "$after" -gt "$before" ] || fail "$mode did not stripe" ;;
	esac
	echo "$mode: exact in $ms ms$([ "$after" = "$before" ] || grep "striped copies" "$log" | tail -1 | sed 's/.*session [0-9]*:/, /')"
done
echo "striped: PASS"
