#!/usr/bin/env bash
# crcudactl suspend/resume on the simulated device (no CRIU, no root). Each case has a daemon of its own.
#   suspend.sh BUILD CASE
# CASE: resume       stress_drv suspended mid-run (twice, 1 s apart): status says suspended, its GPU worker
#                    is gone and ls lists it as suspended, with no worker; resumed, it finishes with an uninterrupted
#                    run's output, bit for bit; the suspend's checkpoint is gone from the store; state_app
#                    (--verify) the same
#       programs     suspended at state_app's ready step (idle: its watcher thread parks) with CUDA graphs,
#                    updated executable graphs, managed memory, a memory pool; and cudart's stress_rt
#                    (static cudart) mid-run: each finishes with its uninterrupted run's output
#       lazy         resume with the daemon's CRCUDA_RESTORE_LAZY=1 (memory uploaded while the program goes
#                    on; its first call waits): stress_drv exact, the checkpoint removed after the upload
#       errors       suspend of a suspended pid, checkpoint of one, resume of a running one, of a pid
#                    that is no crcuda program, of no process: exit 1, one line each, and nothing
#                    changed; resumed without CRCUDA_SOCKET (on the daemon it was suspended from), the
#                    program finishes exactly
#       daemon-gone  the daemon killed while the program is suspended: the program's CUDA call fails
#                    within 2 s (no hang) with libcrcuda's line saying why
#       idle         a daemon with --idle-exit 2 and a program it does not know of (its crcudactl run
#                    registration removed): suspended for 5 s, the daemon stays (the suspended program's
#                    control connection keeps it), the resume works and the program finishes exactly
#       progress     suspend/resume --progress of 64 MiB: the last progress line of each is parsed
#                    ("suspend: 64.0 MiB of 64.0 MiB (100%), 0.4 GB/s"): all of the program's device
#                    memory (as status counts it), done, a rate above 0; without --progress (stderr not a
#                    terminal) no progress line; the program finishes exactly
#       progress-criu  the same for crcudactl checkpoint --progress and restore --progress (root, CRIU;
#                    exit 77 without)
set -u
build=$1 case=$2
ctl=$build/crcudactl/crcudactl
st=$build/tests/stress
progs=$build/tests/programs
[ -x "$st/stress_drv" ] && [ -x "$progs/state_app" ] || { echo "SKIP: test programs not built"; exit 77; }
tmp=$(mktemp -d /tmp/crcuda-suspend.XXXXXX)
export CRCUDA_SOCKET=$tmp/d/crcudad.sock CRCUDA_STORE=$tmp/store
export CRCUDA_SIM_KERNELS=$st/libcrcuda_stress_kernels.so:$progs/libcrcuda_test_kernels.so
unset CRCUDA_REMOTE CRCUDA_TOKEN CRCUDA_TOKEN_FILE CRCUDA_LIBDIR CRCUDAD CRCUDA_DAEMON
pids=()
run_preload= # LD_PRELOAD for the programs suspend_run runs (and only them)
ok=0
cleanup() {
	for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
	for p in $(pgrep -f -- "--socket $tmp/"); do kill -9 "$p" 2>/dev/null; done
	if [ $ok = 1 ]; then rm -rf "$tmp"; else echo "suspend: logs kept in $tmp" >&2; fi
}
trap cleanup EXIT
fail() {
	echo "FAIL ($case): $*" >&2
	[ -f "$tmp/d/crcudad.log" ] && { echo "--- daemon log (last lines)" >&2; tail -n 20 "$tmp/d/crcudad.log" >&2; }
	exit 1
}
wait_for() { # wait_for SECONDS COMMAND...
	local i n=$(($1 * 20))
	shift
	for ((i = 0; i < n; i++)); do "$@" && return 0; sleep 0.05; done
	return 1
}
json() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }
has_session() { "$ctl" status "$1" >/dev/null 2>&1; }
# last_progress FILE WHAT: "DONE TOTAL PERCENT RATE" of WHAT's last progress line in FILE (MiB, GB/s).
last_progress() {
	sed -n "s/^crcudactl: $2: \([0-9.]*\) MiB of \([0-9.]*\) MiB (\([0-9]*\)%), \([0-9.]*\) GB\/s\$/\1 \2 \3 \4/p" "$1" | tail -1
}
# check_progress FILE WHAT MIB: the last line says all MIB (within 2 MiB: globals), done, at some rate.
check_progress() {
	local moved total pct rate
	read -r moved total pct rate <<<"$(last_progress "$1" "$2")"
	[ -n "${rate:-}" ] || fail "$2: no progress line in: $(cat "$1")"
	python3 -c "import sys; d,t,m,r=map(float,sys.argv[1:]); sys.exit(not (d==t and m<=t<=m+2 and r>0))" \
		"$moved" "$total" "$3" "$rate" || fail "$2: progress line '$moved of $total MiB ($pct%), $rate GB/s' for $3 MiB"
	[ "$pct" = 100 ] || fail "$2: the last progress line says $pct%"
	echo "suspend: $2: last progress line: $(grep "^crcudactl: $2: " "$1" | tail -1)"
}
one_line() { # one_line FILE PATTERN: exactly one line on stderr, matching
	[ "$(wc -l <"$1")" = 1 ] || fail "expected one line of error, got: $(cat "$1")"
	grep -q "$2" "$1" || fail "expected '$2', got: $(cat "$1")"
}

# Long enough for two suspends (each holds it 1 s) on a loaded machine.
stress=("$st/stress_drv" --steps 200 --sleep-ms 20)
state=("$progs/state_app" --mb 8 --chunks 4 --steps 48 --step-ms 40 --verify)

# Runs PROG uninterrupted into $tmp/NAME.ref, then again suspended and resumed N times into $tmp/NAME.out.
suspend_run() { # suspend_run NAME TIMES PROG ARGS...
	local name=$1 times=$2 p w i
	shift 2
	env ${run_preload:+LD_PRELOAD=$run_preload} "$ctl" run --backend sim -- "$@" >"$tmp/$name.ref" 2>"$tmp/$name.referr" ||
		fail "$name: uninterrupted run failed"
	env ${run_preload:+LD_PRELOAD=$run_preload} "$ctl" run --backend sim -- "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" &
	p=$!
	pids+=("$p")
	wait_for 10 has_session "$p" || fail "$name: no session for pid $p"
	for ((i = 1; i <= times; i++)); do
		sleep 0.2
		w=$("$ctl" --json status "$p" | json 'd["worker_pid"]') || fail "$name: status before suspend"
		[ -d "/proc/$w" ] || fail "$name: worker $w not alive before the suspend"
		"$ctl" suspend "$p" >"$tmp/s.out" 2>"$tmp/s.err" || fail "$name: suspend $i: $(cat "$tmp/s.err")"
		grep -q "^pid $p suspended" "$tmp/s.out" || fail "$name: suspend said: $(cat "$tmp/s.out")"
		[ "$("$ctl" --json status "$p" | json 'd["state"]')" = suspended ] || fail "$name: status is not suspended"
		"$ctl" status "$p" | grep -q ": suspended (" || fail "$name: status text: $("$ctl" status "$p")"
		wait_for 5 test ! -d "/proc/$w" || fail "$name: worker $w still alive while suspended"
		[ "$("$ctl" --json ls | json '[(s["state"], s["worker_pid"]) for s in d["sessions"] if s["pid"]=='"$p"']')" = "[('suspended', 0)]" ] ||
			fail "$name: ls does not list the suspended pid as suspended, without a worker: $("$ctl" ls)"
		"$ctl" ls | grep -A2 "^Suspended programs of crcudad at $CRCUDA_SOCKET:" | grep -q "^[0-9]* *$p " ||
			fail "$name: ls (text) does not list the suspended pid: $("$ctl" ls)"
		[ "$("$ctl" --json store ls | json 'len(d["checkpoints"])')" = 1 ] || fail "$name: no suspend checkpoint in the store"
		kill -0 "$p" || fail "$name: the program died while suspended"
		sleep 1
		"$ctl" resume "$p" >"$tmp/r.out" 2>"$tmp/r.err" || fail "$name: resume $i: $(cat "$tmp/r.err")"
		grep -q "^pid $p resumed" "$tmp/r.out" || fail "$name: resume said: $(cat "$tmp/r.out")"
		[ "$("$ctl" --json status "$p" | json 'd["state"]')" = running ] || fail "$name: not running after resume"
		[ "$("$ctl" --json store ls | json 'len(d["checkpoints"])')" = 0 ] || fail "$name: the suspend checkpoint stayed"
		echo "suspend: $name: suspend/resume $i: $(head -c 120 "$tmp/s.out" | head -1)"
	done
	wait "$p" || fail "$name: the program failed after resume: $(tail -3 "$tmp/$name.err")"
	cmp -s "$tmp/$name.ref" "$tmp/$name.out" || fail "$name: output differs from the uninterrupted run: $(diff "$tmp/$name.ref" "$tmp/$name.out" | head -5)"
	echo "suspend: $name: output equals the uninterrupted run's ($(tail -1 "$tmp/$name.out"))"
}

case $case in
resume)
	suspend_run stress 2 "${stress[@]}"
	suspend_run state 1 "${state[@]}"
	;;
programs)
	export CRCUDA_SIM_KERNELS=$CRCUDA_SIM_KERNELS:$build/tests/cudart/libcrcuda_cudart_kernels.so
	for v in --graph --graph-params --managed --pool; do
		a=("$progs/state_app" --mb 8 --chunks 4 --steps 24 "$v")
		"$ctl" run --backend sim -- "${a[@]}" >"$tmp/ref" 2>&1 || fail "$v: uninterrupted run failed"
		rm -f "$tmp/ready" "$tmp/go"
		"$ctl" run --backend sim -- "${a[@]}" --ready-file "$tmp/ready" --go-file "$tmp/go" >"$tmp/out" 2>&1 &
		p=$!
		pids+=("$p")
		wait_for 60 test -e "$tmp/ready" || fail "$v: not ready: $(cat "$tmp/out")"
		"$ctl" suspend "$p" >/dev/null 2>"$tmp/e" || fail "$v: suspend: $(cat "$tmp/e")"
		"$ctl" resume "$p" >/dev/null 2>"$tmp/e" || fail "$v: resume: $(cat "$tmp/e")"
		touch "$tmp/go"
		wait "$p" || fail "$v: the program failed: $(tail -3 "$tmp/out")"
		cmp -s "$tmp/ref" "$tmp/out" || fail "$v: output differs from the uninterrupted run"
		echo "suspend: programs: state_app $v: exact ($(tail -1 "$tmp/out"))"
	done
	# An ASan build's libcrcuda inside an nvcc-built program: the sanitizer runtimes go first.
	preload=$(ldd "$build/libcrcuda/libcuda.so.1" 2>/dev/null | awk '/lib(asan|ubsan)\.so/ {print $3}' | paste -sd: -)
	run_preload=$preload
	suspend_run stress_rt 1 "$st/stress_rt_static" --steps 200 --sleep-ms 20
	;;
lazy)
	export CRCUDA_RESTORE_LAZY=1 # the daemon crcudactl run starts has it
	suspend_run stress 1 "${stress[@]}"
	grep -qa CRCUDA_RESTORE_LAZY=1 "/proc/$(pgrep -f -- "crcudad .*--socket $tmp/d/crcudad.sock" | head -1)/environ" ||
		fail "the daemon was not started with CRCUDA_RESTORE_LAZY=1"
	;;
errors)
	"$ctl" run --backend sim -- "${stress[@]}" >"$tmp/stress.ref" 2>/dev/null || fail "uninterrupted run failed"
	"$ctl" run --backend sim -- "${stress[@]}" >"$tmp/out" 2>"$tmp/err" &
	p=$!
	pids+=("$p")
	wait_for 10 has_session "$p" || fail "no session for pid $p"
	"$ctl" resume "$p" >/dev/null 2>"$tmp/e" && fail "resume of a running program succeeded"
	one_line "$tmp/e" "pid $p is not suspended (its session [0-9]* is running)"
	"$ctl" suspend "$p" >/dev/null 2>"$tmp/e" || fail "suspend failed: $(cat "$tmp/e")"
	"$ctl" suspend "$p" >/dev/null 2>"$tmp/e" && fail "a second suspend succeeded"
	one_line "$tmp/e" "pid $p is suspended already (checkpoint [0-9]*): crcudactl resume $p brings it back"
	[ "$("$ctl" --json status "$p" | json 'd["state"]')" = suspended ] || fail "not suspended after the refused suspend"
	"$ctl" checkpoint "$p" >/dev/null 2>"$tmp/e" && fail "a checkpoint of a suspended program succeeded"
	one_line "$tmp/e" "checkpoint: pid $p is suspended (its device memory is checkpoint [0-9]* of .*): crcudactl resume $p first"
	sleep 300 2>/dev/null &
	q=$!
	disown "$q"
	pids+=("$q")
	"$ctl" suspend "$q" >/dev/null 2>"$tmp/e" && fail "suspend of a non-crcuda process succeeded"
	one_line "$tmp/e" "suspend: pid $q has no session on crcudad"
	"$ctl" resume "$q" >/dev/null 2>"$tmp/e" && fail "resume of a non-crcuda process succeeded"
	one_line "$tmp/e" "resume: pid $q is not suspended"
	"$ctl" status "$q" >/dev/null 2>"$tmp/e" && fail "status of a non-crcuda process succeeded"
	one_line "$tmp/e" "status: pid $q has no session"
	"$ctl" resume 2147483646 >/dev/null 2>"$tmp/e" && fail "resume of no process succeeded"
	one_line "$tmp/e" "resume: no process 2147483646"
	# Without CRCUDA_SOCKET here: the daemon the program was suspended from.
	env -u CRCUDA_SOCKET "$ctl" resume "$p" >/dev/null 2>"$tmp/e" || fail "resume failed: $(cat "$tmp/e")"
	wait "$p" || fail "the program failed: $(tail -3 "$tmp/err")"
	cmp -s "$tmp/stress.ref" "$tmp/out" || fail "output differs from the uninterrupted run"
	echo "suspend: errors refused with one line each; resumed on its own daemon; the program finished exactly"
	;;
daemon-gone)
	"$ctl" run --backend sim -- "${stress[@]}" >"$tmp/out" 2>"$tmp/err" &
	p=$!
	pids+=("$p")
	wait_for 10 has_session "$p" || fail "no session for pid $p"
	sleep 0.2
	"$ctl" suspend "$p" >/dev/null 2>"$tmp/e" || fail "suspend failed: $(cat "$tmp/e")"
	d=$(pgrep -f -- "crcudad .*--socket $tmp/d/crcudad.sock" | head -1)
	[ -n "$d" ] || fail "no daemon found"
	kill -9 "$d"
	SECONDS=0
	wait_for 2 test ! -d "/proc/$p" || { sleep 0.1; ! kill -0 "$p" 2>/dev/null; } || fail "the program hangs after its daemon died while suspended"
	wait "$p" && fail "the program exited 0 without its daemon"
	grep -q "crcudad went away while this process was suspended" "$tmp/err" || fail "no line saying why: $(tail -3 "$tmp/err")"
	echo "suspend: daemon killed while suspended: the program's next CUDA call failed ($(tail -1 "$tmp/err"))"
	;;
idle)
	# The reference on a daemon of its own: this case's must be started with --idle-exit 2.
	CRCUDA_SOCKET=$tmp/ref/crcudad.sock "$ctl" run --backend sim -- "${stress[@]}" >"$tmp/stress.ref" 2>/dev/null ||
		fail "uninterrupted run failed"
	"$ctl" run --backend sim --idle-exit 2 -- "${stress[@]}" >"$tmp/out" 2>"$tmp/err" &
	p=$!
	pids+=("$p")
	wait_for 10 has_session "$p" || fail "no session for pid $p"
	rm -f "$CRCUDA_SOCKET.run/$p"
	d=$(pgrep -f -- "crcudad .*--socket $tmp/d/crcudad.sock.*--idle-exit 2 " | head -1)
	[ -n "$d" ] || fail "no daemon with --idle-exit 2: $(pgrep -af crcudad | grep "$tmp")"
	"$ctl" suspend "$p" >/dev/null 2>"$tmp/e" || fail "suspend failed: $(cat "$tmp/e")"
	sleep 5
	kill -0 "$d" 2>/dev/null || fail "the daemon (--idle-exit 2) exited while a program was suspended"
	"$ctl" resume "$p" >/dev/null 2>"$tmp/e" || fail "resume failed: $(cat "$tmp/e")"
	wait "$p" || fail "the program failed: $(tail -3 "$tmp/err")"
	cmp -s "$tmp/stress.ref" "$tmp/out" || fail "output differs from the uninterrupted run"
	echo "suspend: idle: the daemon stayed for the suspended program; it finished exactly"
	;;
progress)
	# Held at its ready step (an idle program: its watcher thread parks) until go.
	args=("$progs/state_app" --mb 64 --chunks 4 --steps 24)
	"$ctl" run --backend sim -- "${args[@]}" >"$tmp/ref" 2>/dev/null || fail "uninterrupted run failed"
	"$ctl" run --backend sim -- "${args[@]}" --ready-file "$tmp/ready" --go-file "$tmp/go" >"$tmp/out" 2>"$tmp/err" &
	p=$!
	pids+=("$p")
	wait_for 60 test -e "$tmp/ready" || fail "the program did not get ready: $(cat "$tmp/err")"
	mib=$("$ctl" --json status "$p" | json 'd["device_bytes"] // 1048576')
	"$ctl" suspend --progress "$p" >/dev/null 2>"$tmp/s.err" || fail "suspend: $(cat "$tmp/s.err")"
	check_progress "$tmp/s.err" suspend "$mib"
	"$ctl" resume --progress "$p" >/dev/null 2>"$tmp/r.err" || fail "resume: $(cat "$tmp/r.err")"
	check_progress "$tmp/r.err" resume "$mib"
	"$ctl" suspend "$p" >/dev/null 2>"$tmp/s2.err" || fail "suspend: $(cat "$tmp/s2.err")"
	"$ctl" resume "$p" >/dev/null 2>>"$tmp/s2.err" || fail "resume: $(cat "$tmp/s2.err")"
	[ ! -s "$tmp/s2.err" ] || fail "progress lines without --progress on a file: $(cat "$tmp/s2.err")"
	touch "$tmp/go"
	wait "$p" || fail "the program failed: $(tail -3 "$tmp/err")"
	cmp -s "$tmp/ref" "$tmp/out" || fail "output differs from the uninterrupted run"
	echo "suspend: progress: the program finished exactly"
	;;
progress-criu)
	top=$(cd "$(dirname "$0")/../.." && pwd)
	[ "$(id -u)" = 0 ] || { echo "SKIP: needs root (CRIU)"; exit 77; }
	export CRCUDA_CRIU=${CRCUDA_CRIU:-$top/.deps/criu/bin/criu}
	[ -x "$CRCUDA_CRIU" ] || { echo "SKIP: no CRIU at $CRCUDA_CRIU"; exit 77; }
	[ -f "$build/criu-plugin/plugin/crcuda_plugin.so" ] || { echo "SKIP: the CRIU plugin was not built"; exit 77; }
	# Descriptors inherited from ctest would be dumped with the program.
	for fd in /proc/$$/fd/*; do
		fd=${fd##*/}
		[ "$fd" -gt 2 ] 2>/dev/null && eval "exec $fd>&-"
	done
	args=("$progs/state_app" --mb 64 --chunks 4 --steps 24)
	"$ctl" run --backend sim --idle-exit 60 -- "${args[@]}" >"$tmp/ref" 2>/dev/null || fail "uninterrupted run failed"
	setsid "$ctl" run --backend sim --idle-exit 60 -- "${args[@]}" --ready-file "$tmp/ready" \
		--go-file "$tmp/go" </dev/null >"$tmp/out" 2>"$tmp/err" &
	p=$!
	disown "$p" # CRIU's checkpoint kills it: no job notice
	pids+=("$p")
	wait_for 60 test -e "$tmp/ready" || fail "the program did not get ready: $(cat "$tmp/err")"
	mib=$("$ctl" --json status "$p" | json 'd["device_bytes"] // 1048576')
	"$ctl" --json checkpoint --progress "$p" >"$tmp/c.json" 2>"$tmp/c.err" || fail "checkpoint: $(cat "$tmp/c.err")"
	check_progress "$tmp/c.err" checkpoint "$mib"
	id=$(json 'd["id"]' <"$tmp/c.json")
	wait_for 10 test ! -d "/proc/$p" || fail "the checkpointed program still runs"
	"$ctl" restore --progress "$id" >"$tmp/r.out" 2>"$tmp/r.err" || fail "restore: $(cat "$tmp/r.err")"
	check_progress "$tmp/r.err" restore "$mib"
	pids+=("$p")
	touch "$tmp/go"
	wait_for 60 test ! -d "/proc/$p" || fail "the restored program did not finish"
	[ "$(sed -n 's/.*checksum=\([0-9a-f]*\).*/\1/p' "$tmp/out")" = "$(sed -n 's/.*checksum=\([0-9a-f]*\).*/\1/p' "$tmp/ref")" ] ||
		fail "checksum differs from the uninterrupted run: $(tail -2 "$tmp/out")"
	echo "suspend: progress-criu: the restored program finished exactly"
	;;
*)
	echo "unknown case $case" >&2
	exit 2
	;;
esac
ok=1
