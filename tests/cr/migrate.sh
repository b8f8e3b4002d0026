#!/usr/bin/env bash
# crcudactl migrate between two "hosts" on the simulated device: two network namespaces joined by a
# veth pair (10.77.0.1 and 10.77.0.2), each with its own crcudad and store; the source runs the
# program and `crcudactl migrate`, the destination `crcudactl receive`. The program (state_app, every
# word of its device memory rewritten each step, --step-ms apart) is migrated while it runs; its
# checksum must equal an uninterrupted run's.
#   migrate.sh BUILD CASE
# CASE: live           migrated mid-run: rounds, downtime and total printed; it finishes on the
#                      destination (in its network namespace) with the uninterrupted checksum; the
#                      destination's store keeps only the last checkpoint (pre-copy ones removed)
#       stage-killed   the destination's staged worker is killed (-9) after the first round: the
#                      restore does it all in a fresh worker and the program finishes right there
#       stop-and-copy  --rounds 0: no pre-copy round, everything goes over in the stop
#       dest-dies      the destination is killed (-9) during the last round, while the program is
#                      stopped: migrate fails saying why, the program runs on at the source and
#                      finishes right
#       corrupt        one bit of the last round's stream flipped on the way: the destination refuses
#                      it ("corrupt"), the program runs on at the source and finishes right
#       truncated      the last round's stream cut short: "truncated", the same
#       restore-fails  the destination cannot restore (its daemon socket cannot exist): the program is
#                      restored at the source from the last checkpoint, migrate says so (exit 1), and it
#                      finishes right
#       files          the destination lacks a library the program maps (a tmpfs over its directory in
#                      the receiver's mount namespace): refused before anything is stopped, naming the
#                      file; no checkpoint taken; the program finishes right
#       send-files     the same with --send-files: the library goes along (created in the receiver's
#                      tmpfs) and the program is migrated and finishes right there
#       insecure       --insecure on both sides (plaintext); a TLS source against it refused
#       token          a wrong token: refused at once, nothing done
#       certs          receive --tls-cert/--tls-key/--tls-ca: a source with the token only, and one
#                      whose certificate another CA signed, refused (the program runs on); one with
#                      the CA's certificate migrated, over TLS
#       streams        --streams 3 with 96 MiB of device memory: every round's chunks (the pre-copy
#                      ones and the last) go over 3 data connections, each imported by a receiver
#                      process of its own (both sides say so; the receiver runs with --once); it
#                      finishes with the uninterrupted checksum, the receiver exits, the destination
#                      keeps only the last checkpoint and verifies
#       stream-corrupt, stream-truncated
#                      the same, with one bit of data stream 2's stream flipped (or that stream cut
#                      short) in the first round: migrate fails naming the stream and the destination's
#                      reason, the program runs on at the source and finishes right, the destination
#                      keeps no checkpoint
# Where network namespaces cannot be made, both sides use loopback ports in this one (said so).
# Needs root and CRIU: exit 77 otherwise.
set -u
build=$1 case=$2
# MIGRATE_CTL: another crcudactl (an ASan+UBSan build's), with this build's daemon, plugin and programs.
ctl=${MIGRATE_CTL:-$build/crcudactl/crcudactl}
[ -n "${MIGRATE_CTL:-}" ] && export CRCUDA_CRIU_PLUGIN_DIR=$build/criu-plugin/plugin CRCUDA_LIBDIR=$build/libcrcuda CRCUDAD=$build/crcudad/crcudad
crcudad=$build/crcudad/crcudad
progs=$build/tests/programs
top=$(cd "$(dirname "$0")/../.." && pwd)

skip() { echo "SKIP: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "needs root (CRIU)"
criu=${CRCUDA_CRIU:-$top/.deps/criu/bin/criu}
[ -x "$criu" ] || skip "no CRIU at $criu"

# Descriptors inherited from ctest would be dumped with the program: only stdin/out/err go on.
for fd in /proc/$$/fd/*; do
	fd=${fd##*/}
	[ "$fd" -gt 2 ] 2>/dev/null && eval "exec $fd>&-"
done

tmp=$(mktemp -d /tmp/crcuda-mig.XXXXXX)
export CRCUDA_SIM_KERNELS=$progs/libcrcuda_test_kernels.so CRCUDA_CRIU=$criu
unset CRCUDA_REMOTE CRCUDA_TOKEN CRCUDA_TOKEN_FILE CRCUDA_DAEMON CRCUDA_STORE CRCUDA_SOCKET
[ -n "${MIGRATE_CTL:-}" ] || unset CRCUDA_LIBDIR CRCUDAD
app_size=(--mb 8 --chunks 4 --steps 250)
# Striped from 64 MiB on; a step of 96 MiB takes the simulated device longer.
# The stream cases stripe from 4 MiB (CRCUDA_TEST_MIGRATE_STRIPE_MIN): a program large enough for the
# default 64 MiB ran so slowly on the simulated device under load that it ended before the stop.
case $case in streams | stream-*) app_size=(--mb 24 --chunks 4 --steps 250) ;; esac
stripe_min=CRCUDA_TEST_MIGRATE_STRIPE_MIN=4194304
app_args=("${app_size[@]}" --step-ms 40 --ready-at 3)
echo "tok-$RANDOM$RANDOM$RANDOM" >"$tmp/token"
chmod 600 "$tmp/token"
pids=()
ok=0
nsA="" nsB=""
fail() {
	echo "FAIL ($case): $*" >&2
	for f in "$tmp"/*.log "$tmp"/migrate.err; do [ -f "$f" ] && { echo "--- $f" >&2; tail -n 15 "$f" >&2; }; done
	exit 1
}
cleanup() {
	for p in "${pids[@]}"; do pkill -9 -P "$p" 2>/dev/null; kill -9 "$p" 2>/dev/null; done
	two_hosts_down
	if [ $ok = 1 ] && [ -z "${MIGRATE_KEEP:-}" ]; then rm -rf "$tmp"; else echo "migrate: logs kept in $tmp" >&2; fi
}
trap cleanup EXIT
# shellcheck source=../lib/proc.sh
. "$top/tests/lib/proc.sh"
netns_of() { readlink "/proc/$1/ns/net"; }

# The two hosts.
. "$top/tests/lib/two-hosts.sh"
two_hosts_up cm || fail "setting up two network namespaces and a veth pair"
[ -n "$nsA" ] || echo "migrate: network namespaces cannot be made here: both hosts use loopback ports of this one"
port=$((20000 + RANDOM % 20000))

# A host: its daemon (unix socket only) and store.
start_daemon() { # start_daemon NAME IN_NS...
	local name=$1
	shift
	mkdir -p "$tmp/$name"
	"$@" "$crcudad" --backend sim --socket "$tmp/$name/crcudad.sock" --foreground -v \
		>"$tmp/$name.out" 2>"$tmp/$name.log" &
	pids+=($!)
	disown $!
	wait_for 30 grep -qs ready "$tmp/$name.out" || fail "no daemon $name: $(cat "$tmp/$name.log")"
}
start_daemon a "${inA[@]}"
start_daemon b "${inB[@]}"

# start_receive [ENV...] [-- RECEIVE OPTIONS...]: the destination's receiver.
start_receive() {
	local envs=() opts=()
	while [ $# -gt 0 ] && [ "$1" != -- ]; do envs+=("$1"); shift; done
	[ $# -gt 0 ] && shift && opts=("$@")
	env "${envs[@]}" "${inB[@]}" "$ctl" receive --listen "$addrB:$port" --token-file "$tmp/token" \
		--store "$tmp/b/store" --daemon "$tmp/b/crcudad.sock" "${opts[@]}" \
		>"$tmp/receive.out" 2>"$tmp/receive.log" &
	recv=$!
	pids+=("$recv")
	disown "$recv"
	wait_for 30 grep -qs listening "$tmp/receive.out" || fail "the receiver did not start: $(cat "$tmp/receive.log")"
}

# The reference: the same program, never interrupted, on the source's daemon.
ref=$(CRCUDA_SOCKET=$tmp/a/crcudad.sock timeout 120 "${inA[@]}" "$ctl" run --backend sim -- "$progs/state_app" \
	"${app_size[@]}" --ready-at 3 | checksum /dev/stdin)
[ -n "$ref" ] || fail "the uninterrupted reference run failed"

# The program on the source, in a session of its own (CRIU needs no --shell-job), running.
start_app() {
	mkdir -p "$tmp/app"
	CRCUDA_SOCKET=$tmp/a/crcudad.sock setsid "${inA[@]}" "$ctl" run --backend sim -- "$progs/state_app" \
		"${app_args[@]}" --ready-file "$tmp/app/ready" </dev/null >"$tmp/app/out" 2>"$tmp/app/err" &
	app=$!
	disown "$app"
	pids+=("$app")
	wait_for 60 test -e "$tmp/app/ready" || fail "the program did not get ready: $(cat "$tmp/app/err")"
}
migrate() { # migrate [ENV...]: exit status in $rc, output in migrate.out/.err; $mig_opts: more options
	env "$@" CRCUDA_SOCKET="$tmp/a/crcudad.sock" timeout 300 "${inA[@]}" "$ctl" migrate --store "$tmp/a/store" \
		--token-file "$tmp/token" --to "$addrB:$port" ${mig_opts:-} "$app" >"$tmp/migrate.out" 2>"$tmp/migrate.err"
	rc=$?
	echo "--- migrate (exit $rc):"
	cat "$tmp/migrate.out" "$tmp/migrate.err"
}
finish() { # finish WHAT: the program ends with the uninterrupted checksum
	wait_for 120 gone "$app" || fail "$1: pid $app did not finish"
	got=$(checksum "$tmp/app/out")
	[ "$got" = "$ref" ] || fail "$1: checksum '$got', uninterrupted run: $ref ($(cat "$tmp/app/err"))"
	echo "migrate: $1: checksum $got = uninterrupted run"
}
# The program still runs at the source (its network namespace), as the failure left it.
runs_here() {
	gone "$app" && { grep -q checksum "$tmp/app/out" || fail "the program is gone after: $1"; }
	[ -z "$nsA" ] || gone "$app" || [ "$(netns_of "$app")" = "$(ip netns exec "$nsA" readlink /proc/self/ns/net)" ] ||
		fail "the program is not in $nsA after: $1"
	[ "$rc" = 1 ] || fail "migrate exited $rc after: $1"
	[ "$(wc -l <"$tmp/migrate.err")" -le 2 ] || fail "more than one line of reasons: $(cat "$tmp/migrate.err")"
}
dest_ckpts() { CRCUDA_STORE=$tmp/b/store "$ctl" store ls 2>/dev/null | tail -n +2 | grep -c . ; }

case $case in
live)
	start_receive
	start_app
	# A downtime no round can meet: rounds go on until they stop shrinking (every word changes each
	# step, so at the second).
	mig_opts="--max-downtime 1" migrate
	[ "$rc" = 0 ] || fail "migrate failed"
	grep -q "^migrate: round 1: sent .* MiB" "$tmp/migrate.out" || fail "no round line"
	grep -q "^migrate: round 2: sent .* MiB .*; dirty rate [0-9.]* MiB/s" "$tmp/migrate.out" || fail "no second round with a dirty rate"
	# Pre-copy rounds checkpoint the device alone (the process is not dumped until the stop).
	grep -q "^migrate: round 1: .*(checkpoint of the device [0-9.]* s" "$tmp/migrate.out" ||
		fail "the first round was a whole checkpoint: $(grep "^migrate: round 1" "$tmp/migrate.out")"
	grep -q "^migrate: pid $app runs on $addrB:$port: downtime [0-9.]* s, total [0-9.]* s" "$tmp/migrate.out" ||
		fail "no downtime line"
	grep -q ": TLS (" "$tmp/receive.log" || fail "the migration did not go over TLS: $(cat "$tmp/receive.log")"
	# The destination staged the pre-copy rounds (replayed and uploaded ahead) and its restore took
	# the staged worker: the downtime held only the last changes.
	grep -q ": checkpoint [0-9]* staged on the daemon in " "$tmp/receive.log" ||
		fail "no pre-copy round was staged: $(cat "$tmp/receive.log")"
	# Module images went over once: the last round named them, the destination had them.
	grep -q ": round [0-9]*: checkpoint [0-9]* (.*; module images kept from earlier rounds: [1-9][0-9]*)$" "$tmp/receive.log" ||
		fail "the last round sent the module images again: $(cat "$tmp/receive.log")"
	grep -q "restored checkpoint [0-9]* (staged ahead)" "$tmp/b.log" ||
		fail "the destination restored afresh: $(grep -i "stag\|restored" "$tmp/b.log" | tail -5)"
	[ -z "$nsB" ] || [ "$(netns_of "$app")" = "$(ip netns exec "$nsB" readlink /proc/self/ns/net)" ] ||
		fail "the migrated program is not in $nsB"
	finish "migrated from ${nsA:-port} to ${nsB:-port} while it ran"
	wait_for 30 test "$(dest_ckpts)" = 1 ||
		fail "the destination keeps $(dest_ckpts) checkpoints: $(CRCUDA_STORE=$tmp/b/store "$ctl" store ls)"
	CRCUDA_STORE=$tmp/b/store "$ctl" store verify >/dev/null || fail "store verify at the destination"
	# The source keeps its last checkpoint only (the pre-copy rounds' are removed).
	[ "$(CRCUDA_STORE=$tmp/a/store "$ctl" store ls 2>/dev/null | tail -n +2 | grep -c .)" = 1 ] ||
		fail "the source keeps: $(CRCUDA_STORE=$tmp/a/store "$ctl" store ls)"
	;;
stage-killed)
	# The destination's staged worker dies (-9) after the first round: staging is an optimisation, so
	# the next stage says it failed, the restore does it all in a fresh worker, and the program
	# finishes right there.
	start_receive CRCUDA_TEST_RECEIVE_STAGED_FILE="$tmp/staged"
	start_app
	(
		wait_for 120 test -e "$tmp/staged" || exit 1
		w=$(sed -n 's/^([0-9.]*) \([0-9]*\) crcudad: session [0-9]*: staged checkpoint .*/\1/p' "$tmp/b.log" | head -n 1)
		[ -n "$w" ] && kill -9 "$w" && echo "$w" >"$tmp/killed"
		touch "$tmp/staged.go"
	) &
	killer=$!
	mig_opts="--max-downtime 1" migrate
	wait "$killer"
	[ -s "$tmp/killed" ] || fail "the staged worker was not found and killed: $(grep -i stag "$tmp/b.log")"
	[ "$rc" = 0 ] || fail "migrate failed after the staged worker died"
	grep -q ": staging checkpoint [0-9]* failed (.*): the restore does it all" "$tmp/receive.log" ||
		fail "the receiver did not say staging failed: $(cat "$tmp/receive.log")"
	# Restored by another worker than the one killed (crcudactl restore stages ahead on its own).
	grep -q "^([0-9.]*) [0-9]* crcudad: session [0-9]*: restored checkpoint" "$tmp/b.log" &&
		! grep -q "^([0-9.]*) $(cat "$tmp/killed") crcudad: session [0-9]*: restored checkpoint" "$tmp/b.log" ||
		fail "no restore by another worker in the destination's log"
	finish "migrated after its staged worker $(cat "$tmp/killed") was killed"
	;;
stop-and-copy)
	start_receive
	start_app
	mig_opts="--rounds 0" migrate
	[ "$rc" = 0 ] || fail "migrate --rounds 0 failed"
	! grep -q "^migrate: round" "$tmp/migrate.out" || fail "a pre-copy round with --rounds 0"
	grep -q "^migrate: stop: sent .* MiB" "$tmp/migrate.out" || fail "no stop line"
	finish "migrated with no pre-copy round (--rounds 0)"
	;;
dest-dies)
	start_receive CRCUDA_TEST_RECEIVE_PAUSE_FILE="$tmp/paused"
	start_app
	(
		wait_for 120 test -e "$tmp/paused" || exit 1
		grep -q '^State:[[:space:]]*T' "/proc/$app/status" && touch "$tmp/was-stopped"
		pkill -9 -P "$recv"
		kill -9 "$recv"
	) &
	killer=$!
	migrate
	wait "$killer" || fail "the destination never reached the last round"
	[ -e "$tmp/was-stopped" ] || fail "the program was not stopped in the last round"
	grep -q "the program runs on here" "$tmp/migrate.err" || fail "no word that the program runs on"
	runs_here "the destination was killed"
	finish "destination killed in the last round, the program ran on at the source"
	;;
corrupt | truncated)
	start_receive
	start_app
	if [ "$case" = corrupt ]; then migrate CRCUDA_TEST_MIGRATE_FLIP=300000; else migrate CRCUDA_TEST_MIGRATE_CUT=300000; fi
	want=$([ "$case" = corrupt ] && echo "the export is corrupt" || echo "the export is truncated")
	grep -q "the last round: the destination says: $want" "$tmp/migrate.err" || fail "no clear reason"
	grep -q "the program runs on here" "$tmp/migrate.err" || fail "no word that the program runs on"
	runs_here "a $case transfer"
	finish "$case transfer refused, the program ran on at the source"
	wait_for 30 test "$(dest_ckpts)" = 0 || fail "the destination keeps checkpoints after a $case transfer"
	;;
restore-fails)
	touch "$tmp/not-a-dir"
	start_receive -- --daemon "$tmp/not-a-dir/crcudad.sock"
	start_app
	migrate
	grep -q "the restore there: the destination says: .*; the program was restored here instead from checkpoint" \
		"$tmp/migrate.err" || fail "no word of the restore here"
	[ "$rc" = 1 ] || fail "migrate exited $rc"
	finish "the destination's restore failed, restored at the source"
	;;
files | send-files)
	# The program's libcrcuda from a directory the destination will not have.
	mkdir -p "$tmp/lib"
	cp -a "$build/libcrcuda/." "$tmp/lib/"
	export CRCUDA_LIBDIR=$tmp/lib
	# The receiver's own mount namespace: an empty directory there.
	env "${inB[@]}" unshare --mount --propagation private sh -c \
		'mount -t tmpfs none "$1" && exec "$2" receive --listen "$3" --token-file "$4" --store "$5" --daemon "$6"' \
		sh "$tmp/lib" "$ctl" "$addrB:$port" "$tmp/token" "$tmp/b/store" "$tmp/b/crcudad.sock" >"$tmp/receive.out" 2>"$tmp/receive.log" &
	recv=$!
	pids+=("$recv")
	disown "$recv"
	wait_for 30 grep -qs listening "$tmp/receive.out" || fail "the receiver did not start: $(cat "$tmp/receive.log")"
	start_app
	grep -q "$tmp/lib/libcuda.so.1" "/proc/$app/maps" || fail "the program does not map $tmp/lib/libcuda.so.1"
	if [ "$case" = send-files ]; then
		mig_opts=--send-files migrate
		[ "$rc" = 0 ] || fail "migrate --send-files failed"
		grep -q "^migrate: sending $tmp/lib/libcuda.so.1" "$tmp/migrate.out" || fail "the library was not sent"
		grep -q "took $tmp/lib/libcuda.so.1" "$tmp/receive.log" || fail "the receiver did not take the library"
		finish "the missing library sent along (--send-files), migrated"
		ok=1
		echo "PASS: $case"
		exit 0
	fi
	migrate
	grep -q "the destination lacks files the process needs.*$tmp/lib/libcuda.so.1: missing here" "$tmp/migrate.err" ||
		fail "the missing library is not named"
	runs_here "a missing file"
	[ -z "$(CRCUDA_STORE=$tmp/a/store "$ctl" store ls 2>/dev/null | tail -n +2)" ] ||
		fail "a checkpoint was taken although the files were missing"
	finish "refused for a missing file before anything was stopped"
	;;
insecure)
	# Plaintext on both sides (--insecure); a TLS source against it, and the reverse, refused at once.
	start_receive -- --insecure
	start_app
	migrate
	grep -q "no TLS with the destination" "$tmp/migrate.err" || fail "a TLS source against --insecure: no clear error"
	runs_here "a TLS source against a plaintext receiver"
	mig_opts="--insecure" migrate
	[ "$rc" = 0 ] || fail "migrate --insecure failed"
	grep -q ": TLS (" "$tmp/receive.log" && fail "an --insecure migration used TLS"
	finish "migrated in plaintext, both sides --insecure"
	;;
certs)
	command -v openssl >/dev/null || skip "no openssl(1) to make certificates"
	for n in ca other-ca dest src intruder; do
		openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=$n" \
			-keyout "$tmp/$n.key" -out "$tmp/$n.csr" 2>/dev/null || fail "openssl req $n"
	done
	for n in ca other-ca; do
		openssl x509 -req -in "$tmp/$n.csr" -signkey "$tmp/$n.key" -days 2 -out "$tmp/$n.pem" \
			-extfile <(printf "basicConstraints=critical,CA:TRUE\nkeyUsage=keyCertSign\n") 2>/dev/null ||
			fail "openssl x509 $n"
	done
	sign() { # sign NAME CA
		openssl x509 -req -in "$tmp/$1.csr" -CA "$tmp/$2.pem" -CAkey "$tmp/$2.key" -CAcreateserial -days 2 \
			-out "$tmp/$1.pem" -extfile <(printf "subjectAltName=IP:%s\n" "$addrB") 2>/dev/null || fail "sign $1"
	}
	sign dest ca
	sign src ca
	sign intruder other-ca
	start_receive -- --tls-cert "$tmp/dest.pem" --tls-key "$tmp/dest.key" --tls-ca "$tmp/ca.pem"
	start_app
	migrate
	grep -qE "no TLS with the destination|refused the token" "$tmp/migrate.err" || fail "a token-only source: no clear error"
	runs_here "a token-only source against a receiver with certificates"
	mig_opts="--tls-cert $tmp/intruder.pem --tls-key $tmp/intruder.key --tls-ca $tmp/ca.pem" migrate
	grep -qE "no TLS with the destination|did its --tls-ca sign our --tls-cert" "$tmp/migrate.err" ||
		fail "a certificate of another CA: no clear error"
	runs_here "a source certificate another CA signed"
	grep -q "not a certificate of --tls-ca" "$tmp/receive.log" || fail "the receiver did not say why it refused"
	mig_opts="--tls-cert $tmp/src.pem --tls-key $tmp/src.key --tls-ca $tmp/ca.pem" migrate
	[ "$rc" = 0 ] || fail "migrate with the CA's certificates failed"
	grep -q ": TLS (" "$tmp/receive.log" || fail "no TLS in the receiver's log"
	finish "migrated over TLS with certificates"
	;;
streams)
	# --once: the receiver takes the data connections that come while it serves the main one.
	start_receive -- --once
	start_app
	mig_opts="--streams 3 --max-downtime 1" migrate "$stripe_min"
	[ "$rc" = 0 ] || fail "migrate --streams 3 failed"
	grep -q "^migrate: pid $app to $addrB:$port (3 streams)" "$tmp/migrate.out" || fail "no word of 3 streams"
	grep -q "^migrate: round 1: sent .* MiB .* over 3 streams in" "$tmp/migrate.out" ||
		fail "the first round did not go over 3 streams"
	grep -q "^migrate: stop: sent .* MiB .* over 3 streams in" "$tmp/migrate.out" ||
		fail "the last round did not go over 3 streams"
	for k in 1 2 3; do
		grep -q ": round 1, stream $k: checkpoint [0-9]* (.* MiB) (pre-copy, a stripe" "$tmp/receive.log" ||
			fail "the receiver did not import stream $k of the first round: $(cat "$tmp/receive.log")"
	done
	[ "$(grep -c ": TLS (" "$tmp/receive.log")" = 4 ] || fail "not 4 TLS connections: $(cat "$tmp/receive.log")"
	finish "migrated over 3 streams while it ran"
	wait_for 30 gone "$recv" || fail "receive --once did not exit after the migration"
	wait_for 30 test "$(dest_ckpts)" = 1 ||
		fail "the destination keeps $(dest_ckpts) checkpoints: $(CRCUDA_STORE=$tmp/b/store "$ctl" store ls)"
	CRCUDA_STORE=$tmp/b/store "$ctl" store verify >/dev/null || fail "store verify at the destination"
	;;
stream-corrupt | stream-truncated)
	start_receive
	start_app
	hook=CRCUDA_TEST_MIGRATE_FLIP=300000 want="the export is corrupt"
	[ "$case" = stream-truncated ] && hook=CRCUDA_TEST_MIGRATE_CUT=300000 want="the export is truncated"
	mig_opts="--streams 3" migrate CRCUDA_TEST_MIGRATE_STREAM=2 "$hook" "$stripe_min"
	grep -q "round 1: stream 2 of 3: the destination says: $want" "$tmp/migrate.err" || fail "no clear reason"
	grep -q "the program runs on here" "$tmp/migrate.err" || fail "no word that the program runs on"
	grep -q ": round 1, stream 2: $want" "$tmp/receive.log" || fail "the receiver did not say why"
	runs_here "a damaged data stream"
	finish "data stream 2 damaged ($case), the program ran on at the source"
	wait_for 30 test "$(dest_ckpts)" = 0 ||
		fail "the destination keeps checkpoints after a damaged data stream: $(CRCUDA_STORE=$tmp/b/store "$ctl" store ls)"
	;;
token)
	start_receive
	start_app
	echo "wrong" >"$tmp/wrong"
	CRCUDA_SOCKET="$tmp/a/crcudad.sock" "${inA[@]}" "$ctl" migrate --token-file "$tmp/wrong" --to "$addrB:$port" \
		--store "$tmp/a/store" "$app" >"$tmp/migrate.out" 2>"$tmp/migrate.err"
	rc=$?
	cat "$tmp/migrate.err"
	grep -q "the destination refused the token" "$tmp/migrate.err" || fail "no word of the token"
	runs_here "a wrong token"
	finish "a wrong token refused"
	;;
*)
	echo "unknown case $case" >&2
	exit 2
	;;
esac
ok=1
echo "PASS: $case"
