#!/usr/bin/env bash
# Forwarding tests on the simulated device: start a private crcudad, run clients through libcrcuda.
#   run.sh BUILD CASE [ARGS...]
# CASE: programs unix|tcp|tcp-insecure PROG...
#                                    the driver-API programs, unchanged, through the layer (tcp: over
#                                    TLS; tcp-insecure: plaintext, crcudad --insecure and CRCUDA_INSECURE)
#       same-output PROG             PROG prints the same natively (on the sim) and through the layer
#       striped tls|insecure|bad-key|break
#                                    large copies of a TCP session striped over bulk connections (see
#                                    the case)
#       bad-token                    TCP with a wrong (and with no) token: refused after a delay, no hang
#       greeting-flood               another host (127.0.0.2) holds 70 silent TCP connections: a client
#                                    of 127.0.0.1 still gets in (greetings are capped per address)
#       certs                        TLS with certificates (crcudad --tls-cert/--tls-key/--tls-ca, the
#                                    client's CRCUDA_TLS_*): a program exact, large copies striped over
#                                    bulk connections exact; a client certificate of
#                                    another CA, a daemon certificate of another name, a client with the
#                                    token only: refused with a reason, no hang
#       tls-mismatch                 a plaintext client of a TLS daemon, a TLS client of an --insecure
#                                    daemon: each refused with a one-line reason, no hang
#       other-uid                    a client of another uid is refused, and told why (root only; else
#                                    skipped)
#       socket-dir                   crcudad refuses a socket directory that is a symlink, another
#                                    user's, or writable by others
#       other-daemon                 a client does not use a socket served by another user's process
#                                    (root only; else skipped)
#       fork-connecting              a fork while another thread's first CUDA call connects (the connect
#                                    lock held): the child's CUDA calls fail at once, no hang
#       daemon-killed                SIGKILL the daemon mid-run: the client gets errors and exits
#       killed-in-sync front|worker  SIGKILL the daemon (its front), or the client's worker, while the
#                                    client waits in cuCtxSynchronize for a 30 s kernel: it gets a CUDA
#                                    error within 1 s
#       client-killed                SIGKILL a client: the daemon frees its memory, serves others
#       ipc                          CUDA IPC between two programs (tests/programs/ipc): memory and an
#                                    event; a checkpoint of either side is refused, saying why, and both
#                                    run on
#       ipc-unexportable             a driver that refuses exportable memory (fault injection): memory is
#                                    made without a shareable type, programs run, IPC of it is refused
set -u
build=$1 case=$2
shift 2
tmp=$(mktemp -d /tmp/crcuda-fwd.XXXXXX)
chmod 755 "$tmp"
export CRCUDA_SOCKET=$tmp/crcudad.sock
export CRCUDA_SIM_KERNELS=$build/tests/programs/libcrcuda_test_kernels.so
lib=$build/libcrcuda
loop=$build/tests/forward/fwd_loop
daemon_pid=
port=$((20000 + RANDOM % 20000))

cleanup() {
	[ -n "$daemon_pid" ] && kill -9 "$daemon_pid" 2>/dev/null
	[ "${keep:-0}" = 1 ] || rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
	echo "FAIL: $*" >&2
	echo "--- daemon log" >&2
	cat "$tmp/daemon.log" >&2
	keep=0
	exit 1
}

start_daemon() {
	local attempt
	echo "s3cret-$RANDOM$RANDOM" >"$tmp/token"
	chmod 600 "$tmp/token"
	# A random port may be taken (another test of this folder picked it too): a few ports are tried.
	for attempt in 1 2 3 4 5; do
		"$build/crcudad/crcudad" --backend sim --socket "$CRCUDA_SOCKET" --listen "127.0.0.1:$port" \
			--token-file "$tmp/token" --foreground -v "$@" >"$tmp/daemon.out" 2>"$tmp/daemon.log" &
		daemon_pid=$!
		for _ in $(seq 100); do
			grep -q ready "$tmp/daemon.out" 2>/dev/null && return 0
			kill -0 "$daemon_pid" 2>/dev/null || break
			sleep 0.1
		done
		kill -0 "$daemon_pid" 2>/dev/null && fail "crcudad not ready"
		port=$((20000 + RANDOM % 20000))
	done
	fail "crcudad did not start"
}

client() { # client [ENV=VAL...] -- CMD...: runs CMD through libcrcuda, 60 s at most
	local envs=()
	while [ "$1" != -- ]; do envs+=("$1"); shift; done
	shift
	env LD_LIBRARY_PATH="$lib" "${envs[@]}" timeout 60 "$@"
}

case $case in
programs)
	mode=$1
	shift
	tcp_env=()
	if [ "$mode" = tcp-insecure ]; then
		start_daemon --insecure
		grep -q "insecure: TCP sessions on .* travel in plaintext" "$tmp/daemon.log" ||
			fail "no warning about --insecure"
		tcp_env=(CRCUDA_REMOTE=127.0.0.1:$port CRCUDA_TOKEN_FILE=$tmp/token CRCUDA_INSECURE=1)
	else
		start_daemon
		[ "$mode" = tcp ] && tcp_env=(CRCUDA_REMOTE=127.0.0.1:$port CRCUDA_TOKEN_FILE=$tmp/token)
	fi
	for prog in "$@"; do
		client "${tcp_env[@]}" -- "$build/tests/programs/$prog" >"$tmp/out" 2>&1
		rc=$?
		cat "$tmp/out"
		[ $rc = 0 ] || fail "$prog over $mode: exit $rc"
		grep -q "session .*ended" "$tmp/daemon.log" || fail "$prog did not go through crcudad"
	done
	n=$(grep -c "session [0-9]*: pid [0-9]* uid [0-9]* -> worker [0-9]* (TLS)" "$tmp/daemon.log")
	case $mode in
	tcp) [ "$n" = $# ] || fail "$n of $# sessions over TLS" ;;
	*) [ "$n" = 0 ] || fail "$n sessions over TLS in mode $mode" ;;
	esac
	;;
layer-only)
	# One program with its arguments, through the layer only (what it checks is the layer's own).
	start_daemon
	prog=$1
	shift
	client -- "$build/tests/programs/$prog" "$@" >"$tmp/out" 2>&1
	rc=$?
	cat "$tmp/out"
	[ $rc = 0 ] || fail "$prog $*: exit $rc"
	;;
ipc)
	start_daemon
	prog=$build/tests/programs/ipc
	ctl=$build/tests/ckpt-daemon/ckpt_ctl
	client -- "$prog" >"$tmp/out" 2>&1
	rc=$?
	cat "$tmp/out"
	[ $rc = 0 ] || fail "ipc through the layer: exit $rc"
	for line in "B: read A's pattern: exact" "B: a kernel counted .* as expected" \
		"A: read B's pattern after waiting on the event: exact" \
		"B: read A's memset after waiting on the event: exact" "B: opened again: the same pointer" \
		"A: opening its own memory handle: CUDA_ERROR_INVALID_CONTEXT" \
		"B: opening a zeroed memory handle: CUDA_ERROR_INVALID_VALUE" \
		"B: closing it once more: CUDA_ERROR_INVALID_VALUE" \
		"B: opening the handle of freed memory: CUDA_ERROR_NOT_PERMITTED" \
		"A: handle of an ordinary event: CUDA_ERROR_INVALID_VALUE" \
		"B: read A's pattern in the imported VMM memory: exact" \
		"A: read B's pattern in the shared VMM memory: exact" \
		"A: exporting a handle made without the descriptor type: CUDA_ERROR_NOT_PERMITTED" \
		"B: importing a pipe as a shareable handle: refused" \
		"B: importing another pool's pointer into the pool: refused" \
		"B: read A's pattern in the imported pool's memory: exact" \
		"A: read B's pattern in the shared pool's memory: exact" \
		"B: the opened memory is device memory, its range starts at the pointer: yes, enough bytes" \
		"ipc: PASS"; do
		grep -q "^$line\$" "$tmp/out" || fail "no line '$line'"
	done
	[ "$(grep -c "session [0-9]*: pid .* -> worker" "$tmp/daemon.log")" -ge 2 ] || fail "ipc did not run two sessions"
	# B holds A's memory and event open: neither session can be checkpointed alone (A's restore would
	# give it an event B no longer shares; B's would open A's event again, which A's checkpoint does not
	# follow); both are told why and run on to the end. (Memory alone is carried, and refused only while
	# another process has it open: tests/cr/ipc-cr.sh; both checkpointed as one tree: ring-cr.sh.)
	client -- "$prog" --hold "$tmp/hold" >"$tmp/out" 2>&1 &
	prog_pid=$!
	for _ in $(seq 300); do [ -s "$tmp/hold" ] && break; sleep 0.1; done
	b=$(cat "$tmp/hold") || fail "B did not open the memory"
	a=$(awk '/^PPid:/ {print $2}' "/proc/$b/status")
	for who in "$b:has another process's interprocess event open" "$a:exported an interprocess event a process not checkpointed with it has open"; do
		pid=${who%%:*}
		"$ctl" "$CRCUDA_SOCKET" quiesce "$pid" || fail "quiesce of $pid"
		"$ctl" "$CRCUDA_SOCKET" checkpoint "$pid" "$tmp/store" >"$tmp/ckpt" 2>&1 &&
			fail "a checkpoint of $pid was taken"
		cat "$tmp/ckpt"
		grep -q "${who#*:}" "$tmp/ckpt" || fail "the refusal does not say why: $(cat "$tmp/ckpt")"
		"$ctl" "$CRCUDA_SOCKET" resume "$pid" || fail "resume of $pid"
	done
	touch "$tmp/hold.go"
	wait "$prog_pid" || fail "ipc after the refused checkpoints: exit $?: $(tail -5 "$tmp/out")"
	grep -q "^ipc: PASS$" "$tmp/out" || fail "no PASS after the refused checkpoints"
	# Once B has let go of all it opened and imported (and A of what it exported), B checkpoints.
	rm -f "$tmp/hold" "$tmp/hold.go"
	client -- "$prog" --hold-end "$tmp/hold" >"$tmp/out" 2>&1 &
	prog_pid=$!
	for _ in $(seq 300); do [ -s "$tmp/hold" ] && break; sleep 0.1; done
	b=$(cat "$tmp/hold") || fail "B did not get to its end"
	"$ctl" "$CRCUDA_SOCKET" quiesce "$b" || fail "quiesce of B at its end"
	"$ctl" "$CRCUDA_SOCKET" checkpoint "$b" "$tmp/store" >"$tmp/ckpt" 2>&1 ||
		fail "B's checkpoint after it closed everything: $(cat "$tmp/ckpt")"
	"$ctl" "$CRCUDA_SOCKET" abort "$b" || fail "abort"
	"$ctl" "$CRCUDA_SOCKET" resume "$b" || fail "resume of B"
	touch "$tmp/hold.go"
	wait "$prog_pid" || fail "ipc after B's checkpoint: exit $?: $(tail -5 "$tmp/out")"
	echo "ipc: exact both ways (memory, event, VMM shareable handle, pool); checkpoints of the importer and of" \
		"the exporter refused while shared, both ran on; the importer checkpoints once it let go"
	;;
ipc-unexportable)
	CRCUDA_SIM_FAIL=cuMemCreate:1:801 start_daemon
	client -- "$build/tests/programs/vector_add" >"$tmp/out" 2>&1 || fail "vector_add: $(tail -3 "$tmp/out")"
	client -- "$build/tests/programs/ipc" >"$tmp/out" 2>&1 && fail "ipc of unexportable memory passed"
	cat "$tmp/out"
	grep -q "cuIpcGetMemHandle(&m.mem, d) failed: CUDA_ERROR_NOT_SUPPORTED" "$tmp/out" ||
		fail "cuIpcGetMemHandle did not answer CUDA_ERROR_NOT_SUPPORTED"
	grep -q "cuMemCreate of exportable memory failed" "$tmp/daemon.log" || fail "no warning in the daemon log"
	echo "ipc-unexportable: programs run; IPC refused with CUDA_ERROR_NOT_SUPPORTED"
	;;
same-output) # same-output PROGRAM [ARGS...]
	start_daemon
	name=$1 prog=$build/tests/programs/$1
	shift
	LD_LIBRARY_PATH=$build/sim/lib timeout 60 "$prog" "$@" >"$tmp/native" 2>&1 || fail "$name natively: exit $?"
	client -- "$prog" "$@" >"$tmp/layer" 2>&1 || fail "$name through the layer: exit $?: $(tail -2 "$tmp/layer")"
	cmp -s "$tmp/native" "$tmp/layer" || fail "$name answers differently through the layer:
$(diff "$tmp/native" "$tmp/layer" | head -60)"
	echo "$name: $(wc -l <"$tmp/native") lines, the same natively and through the layer"
	;;
striped)
	# Large copies of a TCP session striped over 4 bulk connections (tests/programs/big_copies: both
	# ways, pageable and page-locked, sync and async on a stream, odd sizes; 64 KiB pieces from 1 MiB):
	#   tls       over TLS: exact, the same checksum as natively, 4 bulk connections taken
	#   insecure  the same in plaintext (crcudad --insecure, CRCUDA_INSECURE)
	#   bad-key   a bulk connection presents a wrong key: refused and logged by the worker; the copies
	#             go over the main connection, exact
	#   break     the worker breaks a bulk connection mid-copy (CRCUDA_TEST_BULK_BREAK): that copy is
	#             made again over the main connection, exact, no hang; later copies stripe again
	#   break-d2h the same in a copy from the device
	#   worker-killed  the session's worker killed (-9) while copies stream: the program gets a CUDA
	#             error within 2 s, no hang
	mode=$1
	prog=$build/tests/programs/big_copies
	LD_LIBRARY_PATH=$build/sim/lib timeout 60 "$prog" >"$tmp/native" 2>&1 || fail "big_copies natively: $(cat "$tmp/native")"
	envs=(CRCUDA_REMOTE=127.0.0.1:$port CRCUDA_TOKEN_FILE=$tmp/token CRCUDA_TLS_STREAMS=4
		CRCUDA_TLS_STRIPE_MIN=1048576 CRCUDA_TLS_STRIPE_PIECE=65536)
	case $mode in
	tls) start_daemon ;;
	insecure) start_daemon --insecure && envs+=(CRCUDA_INSECURE=1) ;;
	bad-key) start_daemon && envs+=(CRCUDA_TEST_BULK_BAD_KEY=1) ;;
	break) CRCUDA_TEST_BULK_BREAK=3 start_daemon ;;
	break-d2h) CRCUDA_TEST_BULK_BREAK=3:d2h start_daemon ;;
	worker-killed) start_daemon ;;
	*) fail "unknown striped mode $mode" ;;
	esac
	envs[0]=CRCUDA_REMOTE=127.0.0.1:$port
	if [ "$mode" = worker-killed ]; then
		env LD_LIBRARY_PATH="$lib" "${envs[@]}" timeout 120 "$prog" --mb 32 --rounds 1000 >"$tmp/out" 2>&1 &
		prog_pid=$!
		for _ in $(seq 300); do grep -q "bulk connections in" "$tmp/daemon.log" && break; sleep 0.05; done
		worker=$(sed -n 's/.*session [0-9]*: pid [0-9]* uid [0-9]* -> worker \([0-9]*\).*/\1/p' "$tmp/daemon.log" | head -1)
		[ -n "$worker" ] || fail "no worker: $(cat "$tmp/out")"
		sleep 0.5
		t0=$(date +%s%N)
		kill -9 "$worker"
		wait "$prog_pid"
		rc=$?
		ms=$((($(date +%s%N) - t0) / 1000000))
		cat "$tmp/out"
		[ $rc != 0 ] && [ $rc != 124 ] || fail "big_copies with its worker killed: exit $rc"
		[ "$ms" -lt 2000 ] || fail "the program took $ms ms to fail"
		grep -q "failed: CUDA_ERROR" "$tmp/out" || fail "no CUDA error"
		echo "striped (worker-killed): a CUDA error after $ms ms"
		exit 0
	fi
	t0=$(date +%s%N)
	client "${envs[@]}" -- "$prog" >"$tmp/out" 2>&1
	rc=$?
	ms=$((($(date +%s%N) - t0) / 1000000))
	cat "$tmp/out"
	[ $rc = 0 ] || fail "big_copies striped ($mode): exit $rc"
	[ "$(grep -o "checksum=.*" "$tmp/out")" = "$(grep -o "checksum=.*" "$tmp/native")" ] ||
		fail "checksum differs from the native run: $(cat "$tmp/native")"
	tls=$(grep -c "session [0-9]*: pid [0-9]* uid [0-9]* -> worker [0-9]* (TLS)" "$tmp/daemon.log")
	[ "$mode" = insecure ] && { [ "$tls" = 0 ] || fail "TLS on the --insecure daemon"; }
	[ "$mode" = insecure ] || [ "$tls" = 1 ] || fail "the session was not over TLS"
	case $mode in
	tls | insecure)
		grep -q "session [0-9]*: 4 bulk connections in" "$tmp/daemon.log" || fail "no bulk connections taken"
		# 2 rounds of 3 sizes, 6 copies each: every one striped.
		grep -q "session [0-9]*: 36 striped copies" "$tmp/daemon.log" ||
			fail "not every copy striped: $(grep "striped copies" "$tmp/daemon.log")"
		grep -q "refusing\|failed mid-copy" "$tmp/daemon.log" && fail "a refusal or failure in the daemon log"
		grep -q "bulk" "$tmp/out" && fail "the client complains about its bulk connections"
		;;
	bad-key)
		grep -q "refusing a bulk connection for session [0-9]* from pid [0-9]*: wrong key" "$tmp/daemon.log" ||
			fail "no refusal of the wrong key in the daemon log"
		grep -q "cannot open a bulk connection to crcudad" "$tmp/out" || fail "the client did not say it"
		grep -q "bulk connections in" "$tmp/daemon.log" && fail "a bulk connection with a wrong key was taken"
		grep -q "striped copies" "$tmp/daemon.log" && fail "copies striped without bulk connections"
		;;
	break | break-d2h)
		grep -q "breaking bulk connection 0 mid-copy" "$tmp/daemon.log" || fail "the connection was not broken"
		grep -q "a striped copy failed on its bulk connections" "$tmp/out" || fail "the client did not fall back"
		# Opened again for the later copies.
		[ "$(grep -c "session [0-9]*: 4 bulk connections in" "$tmp/daemon.log")" -ge 2 ] ||
			fail "the bulk connections were not opened again"
		grep -q "session [0-9]*: 35 striped copies" "$tmp/daemon.log" ||
			fail "not every other copy striped: $(grep "striped copies" "$tmp/daemon.log")"
		;;
	esac
	[ "$ms" -lt 30000 ] || fail "big_copies took $ms ms"
	echo "striped ($mode): exact in $ms ms"
	;;
bad-token)
	start_daemon
	echo wrong >"$tmp/wrong"
	for env in CRCUDA_TOKEN_FILE=$tmp/wrong CRCUDA_TOKEN=; do
		t0=$(date +%s%N)
		client CRCUDA_REMOTE=127.0.0.1:$port "$env" -- "$loop" smoke >"$tmp/out" 2>&1
		rc=$?
		ms=$((($(date +%s%N) - t0) / 1000000))
		cat "$tmp/out"
		[ $rc = 3 ] || fail "client with $env: exit $rc, expected 3 (CUDA error)"
		grep -q "refused the session: wrong or missing token" "$tmp/out" || fail "no refusal line on the client side"
		[ "$(grep -c "libcrcuda: " "$tmp/out")" = 1 ] || fail "not one line of error from libcrcuda"
		# A wrong token costs a delay (CRC_TLS_AUTH_DELAY_MS); a missing one is refused before
		# anything is sent.
		if [ "$env" = CRCUDA_TOKEN= ]; then
			grep -q "no token" "$tmp/out" || fail "no word of the missing token"
		else
			[ "$ms" -ge 1900 ] || fail "a wrong token was refused in $ms ms, without the delay"
			[ "$ms" -lt 20000 ] || fail "a wrong token took $ms ms to refuse"
		fi
	done
	grep -q "refusing TCP client .*: wrong token" "$tmp/daemon.log" || fail "no refusal line in the daemon log"
	[ "$(grep -c "refusing TCP client" "$tmp/daemon.log")" = 1 ] ||
		fail "the client without a token reached the daemon"
	client CRCUDA_REMOTE=127.0.0.1:$port CRCUDA_TOKEN_FILE=$tmp/token -- "$loop" smoke || fail "right token refused"
	# With --insecure too: the token is compared in the hello, a wrong one costs the same delay.
	kill -9 "$daemon_pid"
	wait "$daemon_pid" 2>/dev/null
	start_daemon --insecure
	t0=$(date +%s%N)
	client CRCUDA_REMOTE=127.0.0.1:$port CRCUDA_TOKEN_FILE=$tmp/wrong CRCUDA_INSECURE=1 -- "$loop" smoke \
		>"$tmp/out" 2>&1
	rc=$?
	ms=$((($(date +%s%N) - t0) / 1000000))
	cat "$tmp/out"
	[ $rc = 3 ] || fail "insecure client with a wrong token: exit $rc, expected 3"
	grep -q "refused the session: .*authentication failed" "$tmp/out" || fail "no refusal line (--insecure)"
	[ "$ms" -ge 1900 ] || fail "a wrong token (--insecure) was refused in $ms ms, without the delay"
	grep -q "refusing TCP client pid [0-9]* from .*: wrong token" "$tmp/daemon.log" ||
		fail "no refusal line in the daemon log (--insecure)"
	client CRCUDA_REMOTE=127.0.0.1:$port CRCUDA_TOKEN_FILE=$tmp/token CRCUDA_INSECURE=1 -- "$loop" smoke ||
		fail "right token refused (--insecure)"
	;;
greeting-flood)
	start_daemon
	# More silent connections from one address than the daemon greets at once in all (64): each would
	# hold a greeting for the 5 s the daemon waits for a first byte.
	python3 - "$port" >"$tmp/flood.out" 2>&1 <<'PY' &
import socket, sys, time
held = []
for _ in range(70):
    s = socket.socket()
    s.bind(("127.0.0.2", 0))
    try:
        s.connect(("127.0.0.1", int(sys.argv[1])))
        held.append(s)
    except OSError:
        pass
print(len(held), "connected", flush=True)
time.sleep(10)
PY
	flood=$!
	for _ in $(seq 50); do grep -q connected "$tmp/flood.out" && break; sleep 0.1; done
	cat "$tmp/flood.out"
	client CRCUDA_REMOTE=127.0.0.1:$port CRCUDA_TOKEN_FILE=$tmp/token -- "$loop" smoke ||
		fail "a client was kept out by another address's silent connections"
	kill "$flood" 2>/dev/null
	wait "$flood" 2>/dev/null
	grep -q "refusing TCP connections from 127.0.0.2: it has 8 others" "$tmp/daemon.log" ||
		fail "no refusal line for the flooding address"
	;;
certs)
	command -v openssl >/dev/null || { echo "skipped: no openssl(1) to make certificates"; exit 77; }
	# cert NAME CA SAN: a P-256 key and a certificate for it, signed by CA (NAME itself when CA is "").
	cert() {
		openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=$1" \
			-keyout "$tmp/$1.key" -out "$tmp/$1.csr" 2>/dev/null || fail "openssl req $1"
		if [ -z "$2" ]; then
			openssl x509 -req -in "$tmp/$1.csr" -signkey "$tmp/$1.key" -days 2 -out "$tmp/$1.pem" \
				-extfile <(printf "basicConstraints=critical,CA:TRUE\nkeyUsage=keyCertSign\n") \
				2>/dev/null || fail "openssl x509 $1"
		else
			openssl x509 -req -in "$tmp/$1.csr" -CA "$tmp/$2.pem" -CAkey "$tmp/$2.key" \
				-CAcreateserial -days 2 -out "$tmp/$1.pem" \
				-extfile <(printf "subjectAltName=%s\n" "$3") 2>/dev/null || fail "openssl x509 $1"
		fi
	}
	cert ca "" ""
	cert other-ca "" ""
	cert daemon ca "IP:127.0.0.1"
	cert elsewhere ca "DNS:elsewhere.example"
	cert app ca "DNS:app.example"
	cert stranger other-ca "DNS:app.example"
	start_daemon --tls-cert "$tmp/daemon.pem" --tls-key "$tmp/daemon.key" --tls-ca "$tmp/ca.pem"
	certs=(CRCUDA_TLS_CERT="$tmp/app.pem" CRCUDA_TLS_KEY="$tmp/app.key" CRCUDA_TLS_CA="$tmp/ca.pem")
	client CRCUDA_REMOTE=127.0.0.1:$port CRCUDA_TOKEN_FILE=$tmp/token "${certs[@]}" -- \
		"$build/tests/programs/vector_add" >"$tmp/out" 2>&1 || fail "vector_add with certificates: $(cat "$tmp/out")"
	cat "$tmp/out"
	grep -q "session [0-9]*: pid [0-9]* .* (TLS)" "$tmp/daemon.log" || fail "no TLS session"
	# Large copies striped over bulk connections, each made with the certificates as the first one.
	client CRCUDA_REMOTE=127.0.0.1:$port CRCUDA_TOKEN_FILE=$tmp/token "${certs[@]}" CRCUDA_TLS_STREAMS=4 \
		CRCUDA_TLS_STRIPE_MIN=1048576 CRCUDA_TLS_STRIPE_PIECE=65536 -- "$build/tests/programs/big_copies" \
		>"$tmp/out" 2>&1 || fail "big_copies with certificates: $(cat "$tmp/out")"
	cat "$tmp/out"
	grep -q "session [0-9]*: 4 bulk connections in" "$tmp/daemon.log" || fail "no bulk connections with certificates"
	grep -q "bulk" "$tmp/out" && fail "the client complains about its bulk connections"
	# A client certificate that the daemon's CA did not sign.
	t0=$(date +%s)
	client CRCUDA_REMOTE=127.0.0.1:$port CRCUDA_TOKEN_FILE=$tmp/token CRCUDA_TLS_CERT="$tmp/stranger.pem" \
		CRCUDA_TLS_KEY="$tmp/stranger.key" CRCUDA_TLS_CA="$tmp/ca.pem" -- "$loop" smoke >"$tmp/out" 2>&1
	rc=$?
	cat "$tmp/out"
	[ $rc = 3 ] || fail "a client certificate of another CA: exit $rc, expected 3"
	[ $(($(date +%s) - t0)) -lt 10 ] || fail "a client certificate of another CA waited"
	grep -q "refused the session" "$tmp/out" || fail "no reason on the client's side (other CA)"
	grep -q "refusing TCP client .*: not a certificate of --tls-ca" "$tmp/daemon.log" ||
		fail "no reason in the daemon's log (other CA)"
	# A client that trusts another CA than the daemon's.
	client CRCUDA_REMOTE=127.0.0.1:$port CRCUDA_TOKEN_FILE=$tmp/token CRCUDA_TLS_CERT="$tmp/app.pem" \
		CRCUDA_TLS_KEY="$tmp/app.key" CRCUDA_TLS_CA="$tmp/other-ca.pem" -- "$loop" smoke >"$tmp/out" 2>&1
	rc=$?
	cat "$tmp/out"
	[ $rc = 3 ] || fail "a daemon certificate the client does not trust: exit $rc, expected 3"
	grep -q "certificate" "$tmp/out" || fail "no word of the certificate on the client's side"
	# The token alone is not enough for a daemon of certificates.
	client CRCUDA_REMOTE=127.0.0.1:$port CRCUDA_TOKEN_FILE=$tmp/token -- "$loop" smoke >"$tmp/out" 2>&1
	rc=$?
	cat "$tmp/out"
	[ $rc = 3 ] || fail "a client with the token only: exit $rc, expected 3"
	[ "$(grep -c "libcrcuda: " "$tmp/out")" = 1 ] || fail "not one line of error from libcrcuda"
	# The daemon's certificate must name the host the client connected to.
	kill -9 "$daemon_pid"
	wait "$daemon_pid" 2>/dev/null
	start_daemon --tls-cert "$tmp/elsewhere.pem" --tls-key "$tmp/elsewhere.key" --tls-ca "$tmp/ca.pem"
	client CRCUDA_REMOTE=127.0.0.1:$port CRCUDA_TOKEN_FILE=$tmp/token "${certs[@]}" -- "$loop" smoke \
		>"$tmp/out" 2>&1
	rc=$?
	cat "$tmp/out"
	[ $rc = 3 ] || fail "a daemon certificate of another name: exit $rc, expected 3"
	grep -q "another name" "$tmp/out" || fail "no word of the name on the client's side"
	# Half a set of options is refused at start.
	"$build/crcudad/crcudad" --backend sim --socket "$tmp/x.sock" --listen 127.0.0.1:1 --token-file "$tmp/token" \
		--tls-cert "$tmp/daemon.pem" --foreground >"$tmp/x.out" 2>&1 && fail "--tls-cert alone was accepted"
	grep -q "go together" "$tmp/x.out" || fail "no reason for --tls-cert alone: $(cat "$tmp/x.out")"
	;;
tls-mismatch)
	# Each side says why in one line, at once (no hang, no timeout).
	start_daemon
	t0=$(date +%s)
	client CRCUDA_REMOTE=127.0.0.1:$port CRCUDA_TOKEN_FILE=$tmp/token CRCUDA_INSECURE=1 -- "$loop" smoke \
		>"$tmp/out" 2>&1
	rc=$?
	cat "$tmp/out"
	[ $rc = 3 ] || fail "a plaintext client of a TLS daemon: exit $rc, expected 3"
	[ $(($(date +%s) - t0)) -lt 5 ] || fail "a plaintext client of a TLS daemon waited"
	grep -q "refused the session: .*TLS on one side only" "$tmp/out" || fail "no reason on the client side"
	grep -q "refusing TCP client .*: it speaks plaintext and this daemon requires TLS" "$tmp/daemon.log" ||
		fail "no reason in the TLS daemon's log"
	kill -9 "$daemon_pid"
	wait "$daemon_pid" 2>/dev/null
	start_daemon --insecure
	t0=$(date +%s)
	client CRCUDA_REMOTE=127.0.0.1:$port CRCUDA_TOKEN_FILE=$tmp/token -- "$loop" smoke >"$tmp/out" 2>&1
	rc=$?
	cat "$tmp/out"
	[ $rc = 3 ] || fail "a TLS client of an --insecure daemon: exit $rc, expected 3"
	[ $(($(date +%s) - t0)) -lt 5 ] || fail "a TLS client of an --insecure daemon waited"
	grep -q "TLS on one side only.*plaintext" "$tmp/out" || fail "no reason on the TLS client's side"
	grep -q "refusing TCP client .*: it speaks TLS and this daemon was started with --insecure" \
		"$tmp/daemon.log" || fail "no reason in the --insecure daemon's log"
	# A crcudactl run --remote says it as clearly.
	out=$(env CRCUDA_TOKEN_FILE="$tmp/token" timeout 30 "$build/crcudactl/crcudactl" run \
		--remote "127.0.0.1:$port" -- true 2>&1) && fail "crcudactl run (TLS) against --insecure succeeded"
	echo "$out"
	echo "$out" | grep -q "TLS on one side only" || fail "crcudactl run gave no reason: $out"
	out=$(env CRCUDA_TOKEN_FILE="$tmp/token" timeout 30 "$build/crcudactl/crcudactl" run --insecure \
		--remote "127.0.0.1:$port" -- "$loop" smoke 2>&1) || fail "crcudactl run --insecure failed: $out"
	;;
other-uid)
	[ "$(id -u)" = 0 ] || { echo "skipped: needs root to run a client as another user"; exit 77; }
	command -v setpriv >/dev/null || exit 77
	start_daemon
	chmod 777 "$CRCUDA_SOCKET"
	env LD_LIBRARY_PATH="$lib" CRCUDA_SOCKET="$CRCUDA_SOCKET" timeout 60 \
		setpriv --reuid=65534 --regid=65534 --clear-groups "$loop" smoke >"$tmp/out" 2>&1
	rc=$?
	cat "$tmp/out"
	[ $rc = 3 ] || fail "client as nobody: exit $rc, expected 3"
	grep -q "refusing client pid .*uid 65534" "$tmp/daemon.log" || fail "no refusal line in the daemon log"
	grep -q "crcudad at $CRCUDA_SOCKET (uid 0) refused the session: it serves only its own user and root, and this process runs as uid 65534" \
		"$tmp/out" || fail "no clear refusal on the client side"
	client -- "$loop" smoke || fail "own uid refused"
	;;
socket-dir)
	# The daemon's socket directory must be its own: a symlink planted in its place, a directory of
	# another user, or one others may write to, is refused at start with the reason.
	refused() { # refused DIR WHY-PATTERN
		"$build/crcudad/crcudad" --backend sim --socket "$1/crcudad.sock" --foreground \
			>"$tmp/daemon.out" 2>"$tmp/daemon.log" &
		daemon_pid=$!
		for _ in $(seq 100); do kill -0 "$daemon_pid" 2>/dev/null || break; sleep 0.1; done
		kill -0 "$daemon_pid" 2>/dev/null && fail "crcudad started on $1"
		wait "$daemon_pid"
		rc=$?
		daemon_pid=
		[ $rc = 1 ] || fail "crcudad on $1: exit $rc, expected 1"
		grep -q "$2" "$tmp/daemon.log" || fail "no clear reason for $1"
		[ -e "$1/crcudad.sock" ] && fail "a socket was made in $1"
		echo "refused $1: $(grep -o 'the socket directory.*' "$tmp/daemon.log")"
	}
	mkdir -m 700 "$tmp/real"
	ln -s "$tmp/real" "$tmp/link"
	refused "$tmp/link" "the socket directory $tmp/link is a symbolic link: refusing it"
	mkdir -m 777 "$tmp/open"
	refused "$tmp/open" "the socket directory $tmp/open is writable by others (mode 0777): refusing it"
	mkdir -m 730 "$tmp/group"
	refused "$tmp/group" "the socket directory $tmp/group is writable by others (mode 0730): refusing it"
	if [ "$(id -u)" = 0 ]; then
		mkdir -m 700 "$tmp/theirs"
		chown 65534:65534 "$tmp/theirs"
		refused "$tmp/theirs" "the socket directory $tmp/theirs belongs to uid 65534, not to crcudad's uid 0"
	fi
	# A private directory of its own is fine (missing: made 0700).
	CRCUDA_SOCKET=$tmp/new/crcudad.sock
	start_daemon
	[ "$(stat -c %a "$tmp/new")" = 700 ] || fail "socket directory made with mode $(stat -c %a "$tmp/new")"
	client -- "$loop" smoke || fail "a daemon on a private directory does not serve"
	;;
other-daemon)
	# A socket at the client's path served by a process of another user (say, one that made the
	# directory first): the client does not hand its memory to it, and says why.
	[ "$(id -u)" = 0 ] || { echo "skipped: needs root to run a daemon as another user"; exit 77; }
	command -v setpriv >/dev/null || exit 77
	mkdir -m 700 "$tmp/theirs"
	chown 65534:65534 "$tmp/theirs"
	setpriv --reuid=65534 --regid=65534 --clear-groups "$build/crcudad/crcudad" --backend sim \
		--socket "$tmp/theirs/crcudad.sock" --foreground >"$tmp/daemon.out" 2>"$tmp/daemon.log" &
	daemon_pid=$!
	for _ in $(seq 100); do grep -q ready "$tmp/daemon.out" 2>/dev/null && break; sleep 0.1; done
	grep -q ready "$tmp/daemon.out" || fail "crcudad as uid 65534 not ready"
	client CRCUDA_SOCKET="$tmp/theirs/crcudad.sock" -- "$loop" smoke >"$tmp/out" 2>&1
	rc=$?
	cat "$tmp/out"
	[ $rc = 3 ] || fail "client of a daemon of uid 65534: exit $rc, expected 3"
	grep -q "the process serving $tmp/theirs/crcudad.sock (pid [0-9]*) runs as uid 65534, neither this process's uid 0 nor root: not using it" \
		"$tmp/out" || fail "no clear refusal on the client side"
	grep -q "session .* uid 0 -> worker" "$tmp/daemon.log" && fail "the client started a session there"
	;;
fork-connecting)
	# A fork while another thread's first CUDA call is connecting (it holds libcrcuda's connect lock;
	# the "daemon" is fork_locked itself, silent): the child's calls fail at once (fork_locked).
	env LD_LIBRARY_PATH="$lib" CRCUDA_SOCKET="$tmp/silent.sock" timeout 90 \
		"$build/tests/forward/fork_locked" >"$tmp/out" 2>&1
	rc=$?
	cat "$tmp/out"
	[ $rc = 0 ] || fail "fork_locked: exit $rc"
	;;
daemon-killed)
	start_daemon
	env LD_LIBRARY_PATH="$lib" timeout 60 "$loop" hold 64 >"$tmp/out" 2>"$tmp/err" &
	cpid=$!
	for _ in $(seq 100); do grep -q ready "$tmp/out" && break; sleep 0.1; done
	grep -q ready "$tmp/out" || fail "client not ready"
	sleep 0.3
	kill -9 "$daemon_pid"
	daemon_pid=
	start=$SECONDS
	wait "$cpid"
	rc=$?
	cat "$tmp/err"
	[ $rc = 3 ] || fail "client exit $rc after the daemon died, expected 3 (a CUDA error)"
	[ $((SECONDS - start)) -le 10 ] || fail "client took $((SECONDS - start)) s to notice"
	;;
killed-in-sync)
	who=${1:?killed-in-sync front|worker}
	start_daemon
	env LD_LIBRARY_PATH="$lib" timeout 60 "$loop" wait 30000 >"$tmp/out" 2>"$tmp/err" &
	cpid=$!
	for _ in $(seq 100); do grep -q waiting "$tmp/out" && break; sleep 0.1; done
	grep -q waiting "$tmp/out" || fail "client not waiting: $(cat "$tmp/err")"
	# The only session's (the client runs under timeout(1): its pid is timeout's child).
	wpid=$(sed -n "s/.* -> worker \([0-9]*\).*/\1/p" "$tmp/daemon.log" | tail -1)
	[ -n "$wpid" ] && [ -e "/proc/$wpid" ] || fail "no live worker for the client"
	# In the synchronise: its thread sleeps in the kernel's wait, the worker runs the kernel.
	sleep 0.5
	kill -0 "$cpid" 2>/dev/null || fail "the client ended before the kill: $(cat "$tmp/err")"
	if [ "$who" = front ]; then
		kill -9 "$daemon_pid"
		daemon_pid=
	else
		kill -9 "$wpid"
	fi
	t0=$(date +%s%3N)
	wait "$cpid"
	rc=$?
	t1=$(date +%s%3N)
	cat "$tmp/err"
	echo "killed-in-sync $who: the client's cuCtxSynchronize returned after $((t1 - t0)) ms"
	[ $rc = 3 ] && grep -q "cuCtxSynchronize: CUDA_ERROR" "$tmp/err" ||
		fail "client exit $rc after its $who died in cuCtxSynchronize, expected 3 (a CUDA error)"
	[ $((t1 - t0)) -le 1000 ] || fail "the client took $((t1 - t0)) ms to notice its $who died (limit 1000)"
	[ "$who" = front ] && kill -9 "$wpid" 2>/dev/null
	;;
client-killed)
	# The victim's session runs in a worker process of its own; killing the client ends that worker
	# (and so frees its device memory with its context), and the daemon serves on.
	start_daemon
	env LD_LIBRARY_PATH="$lib" "$loop" hold 256 >"$tmp/out" 2>"$tmp/err" &
	cpid=$!
	for _ in $(seq 100); do grep -q ready "$tmp/out" && break; sleep 0.1; done
	grep -q ready "$tmp/out" || fail "client not ready"
	wpid=$(sed -n "s/.*pid $cpid uid [0-9]* -> worker \([0-9]*\).*/\1/p" "$tmp/daemon.log" | tail -1)
	[ -n "$wpid" ] && [ -e "/proc/$wpid" ] || fail "no live worker for pid $cpid"
	kill -9 "$cpid"
	wait "$cpid" 2>/dev/null
	for _ in $(seq 50); do [ -e "/proc/$wpid" ] || break; sleep 0.1; done
	[ -e "/proc/$wpid" ] && fail "worker $wpid of the dead client still runs after 5 s"
	# The daemon logs the end when it reaps the worker, a moment after the process is gone.
	for _ in $(seq 50); do grep -q "worker $wpid of session .* ended" "$tmp/daemon.log" && break; sleep 0.1; done
	grep -q "worker $wpid of session .* ended" "$tmp/daemon.log" || fail "the daemon did not see worker $wpid end"
	client -- "$build/tests/programs/vector_add" || fail "daemon no longer serves programs"
	;;
*)
	echo "unknown case $case" >&2
	exit 2
	;;
esac
echo "PASS: $case $*"
