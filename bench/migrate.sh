#!/usr/bin/env bash
# bench/migrate.sh BUILD_DIR [MB]: live migration (crcudactl migrate) of bench/dirty_app holding MB MiB
# of device memory (default 8192), of which 5% changes per second (its churn thread), between two
# crcudads of this machine in two network namespaces joined by a veth pair (each with a store of its
# own; the destination runs crcudactl receive). Prints each round (bytes sent, dirty rate, seconds),
# the downtime (stopped at the source to running at the destination), the total time, the longest
# pause the program saw, and the time to send MB MiB over the same link (python3, in the same run),
# against the goals (downtime <= 0.5 s, total <= 1.5x that time); the migrated program's memory must
# equal a run that made the same writes uninterrupted.
# Needs root and CRIU (.deps/criu or $CRIU). CRCUDA_BENCH_BACKEND=sim runs it on the simulated device
# (give a small MB, e.g. 64). CRCUDA_BENCH_CHURN: % per second (default 5); CRCUDA_BENCH_WARM: seconds
# it churns before the migration (default 2); CRCUDA_BENCH_STREAMS: migrate --streams (TLS connections a
# round's chunks go over; default: migrate's own, a quarter of the CPUs up to 4); CRCUDA_BENCH_SYNC=1: stores fsynced (default off: a
# migration's stores need not survive a power cut, and this machine's disk would be what is measured).
set -uo pipefail
build=$(cd "${1:?usage: migrate.sh BUILD_DIR [MB]}" && pwd)
mb=${2:-8192}
top=$(cd "$(dirname "$0")/.." && pwd)
export CRCUDA_CRIU=${CRIU:-${CRCUDA_CRIU:-$top/.deps/criu/bin/criu}}
app=$build/bench/dirty_app
ctl=$build/crcudactl/crcudactl
crcudad=$build/crcudad/crcudad
backend=${CRCUDA_BENCH_BACKEND:-cuda}
churn=${CRCUDA_BENCH_CHURN:-5}
warm=${CRCUDA_BENCH_WARM:-2}
streams_opt=()
[ -n "${CRCUDA_BENCH_STREAMS:-}" ] && streams_opt=(--streams "$CRCUDA_BENCH_STREAMS")
[ "${CRCUDA_BENCH_SYNC:-0}" = 1 ] || export CRCUDA_STORE_SYNC=0
unset CRCUDA_REMOTE CRCUDA_TOKEN CRCUDA_TOKEN_FILE CRCUDA_STORE CRCUDA_SOCKET
work=$(mktemp -d /tmp/crcuda-bench-mig.XXXXXX)
ok=0 nsA="" nsB="" pids=()
cleanup() {
	for p in "${pids[@]}"; do pkill -9 -P "$p" 2>/dev/null; kill -9 "$p" 2>/dev/null; done
	two_hosts_down
	if [ $ok = 1 ]; then rm -rf "$work"; else echo "migrate bench: logs kept in $work" >&2; fi
}
trap cleanup EXIT
die() { echo "migrate bench: $*" >&2; exit 1; }
now() { date +%s.%N; }
[ "$(id -u)" = 0 ] || die "needs root (CRIU, network namespaces)"
[ -x "$app" ] || die "no $app (build the bench targets)"
for fd in /proc/$$/fd/*; do # only stdin/out/err go with the dumped program
	fd=${fd##*/}
	[ "$fd" -gt 2 ] 2>/dev/null && eval "exec $fd>&-"
done

# The two hosts.
. "$top/tests/lib/two-hosts.sh"
two_hosts_up bm || die "setting up two network namespaces and a veth pair"
link="veth pair between two network namespaces"
[ -n "$nsA" ] || link="loopback (no network namespaces here)"
port=$((20000 + RANDOM % 20000))
head -c 24 /dev/urandom | base64 >"$work/token"
chmod 600 "$work/token"
for h in a b; do
	mkdir -p "$work/$h"
	in=("${inA[@]}")
	[ $h = b ] && in=("${inB[@]}")
	"${in[@]}" "$crcudad" --backend "$backend" --socket "$work/$h/crcudad.sock" --foreground \
		>"$work/$h.out" 2>"$work/$h.log" &
	pids+=($!)
	disown $!
	for ((i = 0; i < 600; i++)); do grep -qs ready "$work/$h.out" && break; sleep 0.05; done
	grep -qs ready "$work/$h.out" || die "daemon $h did not start: $(tail -3 "$work/$h.log")"
done
"${inB[@]}" "$ctl" receive --listen "$addrB:$port" --token-file "$work/token" --store "$work/b/store" \
	--daemon "$work/b/crcudad.sock" >"$work/receive.out" 2>"$work/receive.log" &
pids+=($!)
disown $!
for ((i = 0; i < 600; i++)); do grep -qs listening "$work/receive.out" && break; sleep 0.05; done
grep -qs listening "$work/receive.out" || die "the receiver did not start: $(cat "$work/receive.log")"

# The link: MB MiB sent from A to B over TCP, as fast as python3 can.
link_s=""
if command -v python3 >/dev/null; then
	lport=$((port + 1))
	"${inB[@]}" python3 -c '
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(1); print("up", flush=True)
c, _ = s.accept(); n = 0
while True:
    d = c.recv(1 << 22)
    if not d: break
    n += len(d)
c.sendall(b"ok"); c.close()' "$addrB" "$lport" >"$work/sink.out" 2>&1 &
	pids+=($!)
	for ((i = 0; i < 200; i++)); do grep -qs up "$work/sink.out" && break; sleep 0.05; done
	link_s=$("${inA[@]}" python3 -c '
import socket, sys, time
n = int(sys.argv[3]) << 20; buf = bytes(4 << 20)
t = time.monotonic(); s = socket.create_connection((sys.argv[1], int(sys.argv[2])))
while n > 0:
    s.sendall(buf[:min(n, len(buf))]); n -= len(buf)
s.shutdown(socket.SHUT_WR); s.recv(2)
print("%.3f" % (time.monotonic() - t))' "$addrB" "$lport" "$mb")
fi

# send DIR CMD: the program's answer to one command (numbered in DIR/k).
send() {
	local d=$1 k i
	k=$(cat "$d/k")
	echo "$2" >"$d/cmd.tmp"
	mv "$d/cmd.tmp" "$d/cmd.$k"
	for ((i = 0; i < 60000; i++)); do [ -e "$d/reply.$k" ] && break; sleep 0.005; done
	[ -e "$d/reply.$k" ] || die "no answer to '$2': $(tail -3 "$d/err")"
	echo $((k + 1)) >"$d/k"
	cat "$d/reply.$k"
}
start() { # start DIR: dirty_app under crcuda on host A's daemon; $pid
	local d=$1 i
	mkdir -p "$d"
	echo 0 >"$d/k"
	CRCUDA_SOCKET=$work/a/crcudad.sock setsid "${inA[@]}" "$ctl" run --backend "$backend" -- "$app" --mb "$mb" \
		--dir "$d" </dev/null >"$d/out" 2>"$d/err" &
	pid=$!
	disown "$pid"
	pids+=("$pid")
	for ((i = 0; i < 12000; i++)); do [ -e "$d/ready" ] && return 0; sleep 0.01; done
	die "the program did not start: $(cat "$d/err")"
}

# The migration, while the program churns.
d=$work/mig
start "$d"
send "$d" "churn $churn" >/dev/null
sleep "$warm"
send "$d" gap >/dev/null
t0=$(now)
CRCUDA_SOCKET=$work/a/crcudad.sock "${inA[@]}" "$ctl" migrate --store "$work/a/store" --token-file "$work/token" \
	--to "$addrB:$port" "${streams_opt[@]}" "$pid" >"$work/migrate.out" 2>"$work/migrate.err"
rc=$?
t1=$(now)
cat "$work/migrate.out"
[ $rc = 0 ] || die "migrate failed: $(cat "$work/migrate.err")"
seen=$(send "$d" gap | sed -n 's/gap_ms //p')
n=$(send "$d" halt | sed -n 's/churned //p')
got=$(send "$d" sum)
send "$d" exit >/dev/null

# The same writes, never interrupted.
r=$work/ref
start "$r"
send "$r" "churn-steps $n" >/dev/null
ref=$(send "$r" sum)
send "$r" exit >/dev/null

down=$(sed -n 's/.*downtime \([0-9.]*\) s.*/\1/p' "$work/migrate.out")
total=$(sed -n 's/.*, total \([0-9.]*\) s.*/\1/p' "$work/migrate.out")
rounds=$(grep -c '^migrate: round ' "$work/migrate.out")
streams=$(sed -n 's/^migrate: pid [0-9]* to .* (\([0-9]*\) streams\{0,1\})$/\1/p' "$work/migrate.out")
echo
echo "migrate bench: $backend, $mb MiB of device memory, ${churn}%/s changing, over a $link; stores $([ "${CRCUDA_STORE_SYNC:-1}" = 0 ] && echo "not fsynced" || echo "fsynced")"
printf '  streams %s (CRCUDA_BENCH_STREAMS=%s)\n' "${streams:-?}" "${CRCUDA_BENCH_STREAMS:-default}"
printf '  rounds %s, downtime %s s (goal <= 0.5), total %s s, longest pause the program saw %s ms\n' "$rounds" "$down" "$total" "$seen"
if [ -n "$link_s" ]; then
	printf '  sending %s MiB over the link: %s s; total / that = %s (goal <= 1.5)\n' "$mb" "$link_s" \
		"$(awk -v t="$total" -v l="$link_s" 'BEGIN { printf "%.2f", t / l }')"
else
	echo "  the link was not measured (no python3)"
fi
echo "  $n chunk writes while it ran; result: $([ "$got" = "$ref" ] && echo "memory equals an uninterrupted run's (ok)" || echo "WRONG: $got, uninterrupted $ref")"
[ "$got" = "$ref" ] && ok=1
[ $ok = 1 ]
