#!/usr/bin/env bash
# `crcudactl run` on the simulated device, each case with a private socket directory.
#   run.sh BUILD CASE [ARGS...]
# CASE: programs PROG[:ARGS]...  each program passes under `crcudactl run --backend sim --`, the first
#                                run starting the daemon, the others using it; the program keeps the pid
#       idle-exit                the daemon exits by itself after --idle-exit; the next run starts a new
#                                one; a program that is slow to make its first CUDA call keeps it
#       concurrent               runs started together start one daemon
#       no-gpu                   --backend cuda (and the default) without a driver: clear message, exit 1
#       backend-mismatch         a daemon of another backend is refused; usage errors exit 2
#       start-fails              a daemon that dies at start: exit 1 showing its log's last lines
#       exec-fails               a program that is not there exits 127, one not runnable 126 (a shell's
#                                codes); crcudad --version answers
#       netns                    --remote across two network namespaces (root), right and wrong token
#       status                   crcudactl status PID: a running program's session is "running" (text
#                                and --json); a process without a session and a missing pid exit 1;
#                                the program is found as the run's own descendant, not by its name (an
#                                older process named like it runs beside it)
#       supervise                --checkpoint-on without a checkpoint: the program runs as crcudactl's
#                                child in a process group of its own with CRCUDA_LINEAGE (a given one
#                                kept), its exit status and signal death (128+N) are crcudactl's,
#                                other signals reach it (also one the shell made the job ignore, when
#                                named), a missing program is 127; usage errors exit 2
# RUN_PREFIX: crcudactl and crcudad of an installed tree (tests/install) instead of the build tree's (the
# programs are still the build tree's); RUN_LIBDIR: libcrcuda's directory there.
set -u
build=$1 case=$2
shift 2
ctl=$build/crcudactl/crcudactl
crcudad=$build/crcudad/crcudad
libdir=$build/libcrcuda
if [ -n "${RUN_PREFIX:-}" ]; then
	ctl=$RUN_PREFIX/bin/crcudactl crcudad=$RUN_PREFIX/bin/crcudad libdir=${RUN_LIBDIR:?RUN_LIBDIR with RUN_PREFIX}
fi
progs=$build/tests/programs
tmp=$(mktemp -d /tmp/crcuda-run.XXXXXX)
sock=$tmp/d/crcudad.sock
log=$tmp/d/crcudad.log
export CRCUDA_SIM_KERNELS=$progs/libcrcuda_test_kernels.so
# Nothing of the caller's may send the runs elsewhere.
unset CRCUDA_REMOTE CRCUDA_TOKEN CRCUDA_TOKEN_FILE CRCUDA_LIBDIR CRCUDAD
export CRCUDA_SOCKET=$sock
pids_to_kill=()

cleanup() {
	for p in "${pids_to_kill[@]}"; do kill -9 "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
	# A daemon this test started: found by its log, killed by its pid only.
	for p in $(daemon_pids); do kill -9 "$p" 2>/dev/null; done
	[ -n "${ns_gpu:-}" ] && ip netns del "$ns_gpu" 2>/dev/null
	[ -n "${ns_app:-}" ] && ip netns del "$ns_app" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
	echo "FAIL: $*" >&2
	for f in "$log" "$tmp/daemon.log"; do
		[ -f "$f" ] && { echo "--- $f" >&2; cat "$f" >&2; }
	done
	exit 1
}
# Pids of the daemons that logged "serving on" in this test's log, oldest first.
daemon_pids() {
	[ -f "$log" ] && sed -n 's/^([^)]*) \([0-9]*\) crcudad: serving on.*/\1/p' "$log"
}
alive() { [ -n "$1" ] && kill -0 "$1" 2>/dev/null; }
# descendant_running PID PROGRAM: the pid of the first descendant of PID whose executable is PROGRAM.
descendant_running() {
	local kid want
	want=$(readlink -f "$2")
	for kid in $(pgrep -P "$1"); do
		[ "$(readlink "/proc/$kid/exe" 2>/dev/null)" = "$want" ] && { echo "$kid"; return 0; }
		descendant_running "$kid" "$2" && return 0
	done
	return 1
}
run() { timeout 60 "$ctl" run "$@"; }

case $case in
programs)
	for spec in "$@"; do
		prog=${spec%%:*}
		args=()
		[ "$spec" != "$prog" ] && read -ra args <<<"${spec#*:}"
		run --backend sim -- "$progs/$prog" "${args[@]}" >"$tmp/out" 2>&1
		rc=$?
		cat "$tmp/out"
		[ $rc = 0 ] || fail "$prog ${args[*]}: exit $rc"
		# Through the daemon: its session ended with the client's goodbye (libcrcuda's destructor),
		# which the daemon may log a moment after the program is gone.
		for _ in $(seq 50); do
			n=$(grep -c "client said goodbye" "$log")
			[ "$n" -gt "${seen:-0}" ] && break
			sleep 0.1
		done
		[ "$n" -gt "${seen:-0}" ] || fail "$prog did not go through crcudad"
		seen=$n
	done
	[ "$(daemon_pids | wc -l)" = 1 ] || fail "expected one daemon started, log says $(daemon_pids | wc -l)"
	# The environment the program sees, and its pid: crcudactl's (exec, not a child).
	# (no timeout(1) in between: $! is crcudactl itself; the program's shell expands the variables)
	# shellcheck disable=SC2016
	"$ctl" run --backend sim -- sh -c 'echo "$$ $LD_LIBRARY_PATH $CRCUDA_SOCKET"' >"$tmp/env" &
	pid=$!
	wait $pid || fail "sh under crcudactl run failed"
	read -r got_pid ldpath got_sock <"$tmp/env"
	[ "$got_pid" = "$pid" ] || fail "the program's pid is $got_pid, crcudactl's was $pid"
	[ "${ldpath%%:*}" = "$(realpath "$libdir")" ] || fail "LD_LIBRARY_PATH=$ldpath"
	# The daemon's simulated device: the installed one, when testing an installed tree.
	if [ -n "${RUN_PREFIX:-}" ]; then
		grep -q "serving on .* (backend $(realpath "$RUN_PREFIX")/" "$log" ||
			fail "the daemon does not use the installed simulated device: $(grep "serving on" "$log")"
	fi
	[ "$got_sock" = "$sock" ] || fail "CRCUDA_SOCKET=$got_sock"
	# The program's exit status comes back.
	run --backend sim -- sh -c 'exit 7'
	[ $? = 7 ] || fail "the program's exit status was not passed through"
	;;
idle-exit)
	run --backend sim --idle-exit 2 -- "$progs/vector_add" || fail "first run"
	first=$(daemon_pids | head -1)
	alive "$first" || fail "no daemon alive right after the run"
	start=$SECONDS
	while alive "$first" && [ $((SECONDS - start)) -lt 20 ]; do sleep 0.2; done
	alive "$first" && fail "daemon $first still alive $((SECONDS - start)) s after an idle exit of 2 s"
	[ $((SECONDS - start)) -ge 1 ] || fail "daemon exited at once, not after 2 idle seconds"
	[ -e "$sock" ] && fail "the socket outlived the daemon"
	run --backend sim --idle-exit 2 -- "$progs/vector_add" || fail "second run"
	second=$(daemon_pids | tail -1)
	[ "$(daemon_pids | wc -l)" = 2 ] && [ "$second" != "$first" ] || fail "the second run started no daemon"
	# A program whose first CUDA call comes after the idle period keeps the daemon meanwhile.
	run --backend sim --idle-exit 1 -- sh -c "sleep 4; exec $progs/vector_add" || fail "late first call"
	[ "$(daemon_pids | wc -l)" = 2 ] || fail "the daemon left while the program lived"
	;;
concurrent)
	# A daemon slow to start (through CRCUDAD) leaves every run time to find no daemon and start one.
	printf '#!/bin/sh\nsleep 0.5\nexec "%s" "$@"\n' "$crcudad" >"$tmp/slow-crcudad"
	chmod +x "$tmp/slow-crcudad"
	export CRCUDAD=$tmp/slow-crcudad
	pids=()
	for i in 1 2 3 4 5 6; do
		run --backend sim -- "$progs/vector_add" >"$tmp/out$i" 2>&1 &
		pids+=($!)
	done
	for i in "${!pids[@]}"; do
		wait "${pids[$i]}" || { cat "$tmp/out$((i + 1))"; fail "run $((i + 1)) failed"; }
	done
	n=$(daemon_pids | wc -l)
	[ "$n" = 1 ] || fail "$n daemons started by concurrent runs"
	;;
no-gpu)
	ldconfig -p 2>/dev/null | grep "libcuda.so.1 " | grep -qv stubs &&
		{ echo "skipped: a CUDA driver is installed here"; exit 77; }
	for backend in "--backend cuda" ""; do
		# shellcheck disable=SC2086 # one option or none
		run $backend -- "$progs/vector_add" >"$tmp/out" 2>&1
		rc=$?
		cat "$tmp/out"
		[ $rc = 1 ] || fail "exit $rc without a GPU (${backend:-default}), expected 1"
		grep -q "no CUDA driver on this machine; use --backend sim for the simulated device, or --remote HOST:PORT" \
			"$tmp/out" || fail "no clear message"
		grep -q PASS "$tmp/out" && fail "the program ran (fell back to the sim?)"
		[ -e "$sock" ] && fail "a daemon was started"
	done
	;;
backend-mismatch)
	run --backend sim -- "$progs/vector_add" || fail "sim run"
	run --backend cuda -- "$progs/vector_add" >"$tmp/out" 2>&1
	rc=$?
	cat "$tmp/out"
	[ $rc = 1 ] || fail "a sim daemon used for --backend cuda: exit $rc"
	grep -q "serves the simulated device (sim), not --backend cuda" "$tmp/out" || fail "no clear refusal"
	grep -q PASS "$tmp/out" && fail "the program ran"
	for bad in "--backend foo -- true" "--backend sim" "--token-file x -- true" \
		"--remote 127.0.0.1:1 --socket x -- true" "--idle-exit soon -- true" "--nope -- true"; do
		# shellcheck disable=SC2086 # the words are the arguments
		run $bad >/dev/null 2>&1
		rc=$?
		[ $rc = 2 ] || fail "crcudactl run $bad: exit $rc, expected 2 (usage)"
	done
	;;
exec-fails)
	run --backend sim --idle-exit 1 -- "$tmp/no-such-program" >"$tmp/out" 2>&1
	rc=$?
	cat "$tmp/out"
	[ $rc = 127 ] || fail "exit $rc for a program that is not there, expected 127"
	grep -q "cannot run $tmp/no-such-program: No such file" "$tmp/out" || fail "no message naming it"
	printf 'not a program\n' >"$tmp/plain"
	run --backend sim --idle-exit 1 -- "$tmp/plain" >"$tmp/out" 2>&1
	rc=$?
	[ $rc = 126 ] || fail "exit $rc for a file that cannot run, expected 126"
	"$crcudad" --version >"$tmp/out" 2>&1 || fail "crcudad --version: exit $?"
	grep -q "^crcudad [0-9][0-9.]* (protocol [0-9]*)$" "$tmp/out" || fail "crcudad --version: $(cat "$tmp/out")"
	;;
status)
	# Another state_app of the machine (another test's) started first: not the one to ask about.
	(exec -a "$progs/state_app" sleep 120) &
	pids_to_kill+=($!)
	run --backend sim -- "$progs/state_app" --mb 8 --chunks 2 --steps 4 --ready-at 1 \
		--ready-file "$tmp/ready" --go-file "$tmp/go" >"$tmp/out" 2>&1 &
	p=$!
	pids_to_kill+=("$p")
	for _ in $(seq 300); do [ -e "$tmp/ready" ] && break; sleep 0.1; done
	[ -e "$tmp/ready" ] || fail "state_app did not get ready: $(cat "$tmp/out")"
	app=$(descendant_running "$p" "$progs/state_app")
	[ -n "$app" ] || fail "no state_app under the run (pid $p)"
	out=$("$ctl" status "$app") || fail "status of a running program: exit $?: $out"
	echo "$out" | grep -q "^pid $app: running (session" || fail "status says: $out"
	"$ctl" --json status "$app" | grep -q '"state": "running"' || fail "status --json: $("$ctl" --json status "$app")"
	out=$("$ctl" status $$ 2>&1) && fail "status of a process without a session succeeded: $out"
	echo "$out" | grep -q "has no session" || fail "no reason given: $out"
	"$ctl" status 999999 >/dev/null 2>&1 && fail "status of a missing pid succeeded"
	touch "$tmp/go"
	wait "$p" || fail "state_app failed: $(cat "$tmp/out")"
	;;
supervise)
	sup() { run --backend sim --idle-exit 5 "$@"; }
	sup --checkpoint-on SIGUSR1 -- sh -c 'exit 3' >"$tmp/out" 2>&1
	rc=$?
	[ $rc = 3 ] || fail "exit $rc, the program's 3: $(cat "$tmp/out")"
	# Child of crcudactl, its own process group, a lineage.
	sup --checkpoint-on SIGUSR1 -- sh -c 'echo "$$ $PPID $(ps -o pgid= $$) $CRCUDA_LINEAGE"' >"$tmp/out" 2>&1 ||
		fail "exit $?: $(cat "$tmp/out")"
	read -r me parent pgid lineage <"$tmp/out"
	[ "$me" != "$parent" ] && [ "$pgid" = "$me" ] && [ -n "$lineage" ] ||
		fail "pid $me, parent $parent, process group $pgid, lineage '$lineage'"
	CRCUDA_LINEAGE=job-42 sup --every 1h -- sh -c 'echo "$CRCUDA_LINEAGE"' >"$tmp/out" 2>&1
	[ "$(cat "$tmp/out")" = job-42 ] || fail "a given CRCUDA_LINEAGE is not kept: $(cat "$tmp/out")"
	# Signals: HUP is passed on (129), and so is TERM when only USR1 checkpoints (143).
	for s in HUP:129 TERM:143; do
		sup --checkpoint-on SIGUSR1 -- sleep 30 >"$tmp/out" 2>&1 &
		p=$!
		pids_to_kill+=("$p")
		sleep 1
		kill "-${s%%:*}" "$p"
		wait "$p"
		rc=$?
		[ $rc = "${s#*:}" ] || fail "SIG${s%%:*} to crcudactl: exit $rc, expected ${s#*:} ($(cat "$tmp/out"))"
	done
	sup --checkpoint-on SIGUSR1 -- "$tmp/no-such-program" >"$tmp/out" 2>&1
	rc=$?
	[ $rc = 127 ] || fail "exit $rc for a program that is not there, expected 127"
	for bad in "--checkpoint-on SIGKILL" "--checkpoint-on TERM:later" "--every 0" "--every 5x" \
		"--keep 2" "--checkpoint-on TERM --keep 0" "--store $tmp/s"; do
		read -r -a a <<<"$bad"
		sup "${a[@]}" -- true >"$tmp/out" 2>&1
		rc=$?
		[ $rc = 2 ] || fail "run $bad: exit $rc, expected 2 ($(cat "$tmp/out"))"
	done
	;;
start-fails)
	# A daemon that dies at start: exit 1 with its own words, no hang, no program run.
	printf '#!/bin/sh\necho "crcudad: Error: backend exploded ($*)" >&2\nexit 1\n' >"$tmp/bad-crcudad"
	chmod +x "$tmp/bad-crcudad"
	CRCUDAD=$tmp/bad-crcudad run --backend sim -- "$progs/vector_add" >"$tmp/out" 2>&1
	rc=$?
	cat "$tmp/out"
	[ $rc = 1 ] || fail "exit $rc when the daemon cannot start, expected 1"
	grep -q "crcudad --backend sim failed to start" "$tmp/out" || fail "no failure message"
	grep -q "backend exploded (--backend sim --socket $sock --idle-exit 30 " "$tmp/out" ||
		fail "the daemon's log lines (or its arguments) are not shown"
	grep -q PASS "$tmp/out" && fail "the program ran"
	;;
netns)
	[ "$(id -u)" = 0 ] || { echo "skipped: needs root for network namespaces"; exit 77; }
	command -v ip >/dev/null || { echo "skipped: no ip(8)"; exit 77; }
	id=$(printf %04x%04x $((RANDOM)) $$ | tail -c 8)
	ns_gpu=crcrun-gpu-$id ns_app=crcrun-app-$id
	ip netns add "$ns_gpu" || { echo "skipped: cannot create network namespaces"; ns_gpu=; exit 77; }
	ip netns add "$ns_app" || fail "netns add"
	ip link add "cg$id" type veth peer name "ca$id" || fail "veth"
	ip link set "cg$id" netns "$ns_gpu" && ip link set "ca$id" netns "$ns_app" || fail "veth into namespaces"
	ip -n "$ns_gpu" addr add 10.231.0.1/30 dev "cg$id" && ip -n "$ns_app" addr add 10.231.0.2/30 dev "ca$id" ||
		fail "addresses"
	ip -n "$ns_gpu" link set lo up && ip -n "$ns_gpu" link set "cg$id" up || fail "links up in $ns_gpu"
	ip -n "$ns_app" link set lo up && ip -n "$ns_app" link set "ca$id" up || fail "links up in $ns_app"
	port=$((20000 + RANDOM % 20000))
	echo "tok-$RANDOM$RANDOM$RANDOM" >"$tmp/token"
	echo "not-the-token" >"$tmp/wrong"
	chmod 600 "$tmp/token" "$tmp/wrong"
	# The "GPU host": a daemon listening on its namespace's address only.
	ip netns exec "$ns_gpu" "$crcudad" --backend sim --socket "$tmp/gpu/crcudad.sock" \
		--listen "10.231.0.1:$port" --token-file "$tmp/token" --foreground -v \
		>"$tmp/daemon.out" 2>"$tmp/daemon.log" &
	pids_to_kill+=($!)
	for _ in $(seq 100); do grep -q ready "$tmp/daemon.out" 2>/dev/null && break; sleep 0.1; done
	grep -q ready "$tmp/daemon.out" || fail "crcudad not ready in $ns_gpu"
	# The "app host": no daemon, no socket; only the network.
	app() { ip netns exec "$ns_app" env CRCUDA_SOCKET="$tmp/app/none.sock" timeout 60 "$ctl" run "$@"; }
	app --remote "10.231.0.1:$port" --token-file "$tmp/token" -- "$progs/vector_add" >"$tmp/out" 2>&1
	rc=$?
	cat "$tmp/out"
	[ $rc = 0 ] && grep -q PASS "$tmp/out" || fail "vector_add across namespaces: exit $rc"
	grep -q "session .*TCP\|client said goodbye" "$tmp/daemon.log" || fail "no session in the GPU namespace"
	[ -e "$tmp/app" ] && fail "a local daemon was involved in the app namespace"
	start=$SECONDS
	app --remote "10.231.0.1:$port" --token-file "$tmp/wrong" -- "$progs/vector_add" >"$tmp/out" 2>&1
	rc=$?
	cat "$tmp/out"
	[ $rc = 124 ] && fail "a wrong token hung"
	[ $rc != 0 ] || fail "a wrong token was accepted"
	grep -q "wrong or missing token" "$tmp/out" || fail "no message about the token"
	grep -q PASS "$tmp/out" && fail "the program ran with a wrong token"
	[ $((SECONDS - start)) -le 10 ] || fail "refusal took $((SECONDS - start)) s"
	grep -q "refusing TCP client.*wrong token" "$tmp/daemon.log" || fail "no refusal in the daemon log"
	# From the app namespace the daemon's address is all there is: no loopback path to it.
	app --remote "127.0.0.1:$port" --token-file "$tmp/token" -- "$progs/vector_add" >"$tmp/out" 2>&1 &&
		fail "reached the daemon through the app namespace's loopback"
	;;
*)
	echo "unknown case $case" >&2
	exit 2
	;;
esac
echo "PASS: $case"
