#!/usr/bin/env bash
# Preemption through real CRIU and the crcuda plugin, on the simulated device: checkpoints on a signal,
# periodic ones, retention, restore --wait and cancelled checkpoints. Every program's result (state_app's
# checksum over its device memory) must equal an uninterrupted run's.
#   preempt.sh BUILD CASE
# CASE: final   crcudactl run --checkpoint-on SIGTERM,SIGUSR1 --keep 2: three SIGUSR1 checkpoints
#               (the program runs on; the oldest goes with its CRIU images), then SIGTERM: the final
#               checkpoint stops the program, crcudactl exits 0 and leaves its stderr file as CRIU saw it;
#               ls shows 2. restore --wait of the final one returns the program's status (0) once it
#               has finished; restored again, a SIGTERM to restore --wait reaches the program: 143
#       every   crcudactl run --every 1 --keep 2: at least three periodic checkpoints, the program runs
#               on to its end and crcudactl exits with its status (0); 2 checkpoints and 2 image
#               directories stay; store prune --keep 1 leaves the newest; rm removes it and its images;
#               the store verifies
#       cancel  SIGINT/SIGTERM to crcudactl checkpoint held at the plugin's device and criu steps (with
#               and without --leave-running): exit 1, one line, nothing committed, no image directory
#               left, the program runs on; held at the commit (after CRIU's post-dump script): too late,
#               the checkpoint commits. The program finishes; the checkpoint taken before restores and
#               finishes too
# Needs root and CRIU (.deps/criu): exit 77 otherwise.
set -u
build=$1 case=$2
ctl=$build/crcudactl/crcudactl
progs=$build/tests/programs
app_bin=$progs/state_app
top=$(cd "$(dirname "$0")/../.." && pwd)

skip() { echo "SKIP: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "needs root (CRIU)"
criu=${CRCUDA_CRIU:-$top/.deps/criu/bin/criu}
[ -x "$criu" ] || skip "no CRIU at $criu (scripts/build-criu.sh)"
[ -f "$build/criu-plugin/plugin/crcuda_plugin.so" ] || skip "the CRIU plugin was not built"

# Descriptors inherited from ctest would be dumped with the program: only stdin/out/err go on.
for fd in /proc/$$/fd/*; do
	fd=${fd##*/}
	[ "$fd" -gt 2 ] 2>/dev/null && eval "exec $fd>&-"
done

tmp=$(mktemp -d /tmp/crcuda-preempt.XXXXXX)
sock=$tmp/d/crcudad.sock
log=$tmp/d/crcudad.log
store=$tmp/store
export CRCUDA_SIM_KERNELS=$progs/libcrcuda_test_kernels.so CRCUDA_SOCKET=$sock CRCUDA_STORE=$store
export CRCUDA_CRIU=$criu
unset CRCUDA_REMOTE CRCUDA_TOKEN CRCUDA_TOKEN_FILE CRCUDA_LIBDIR CRCUDAD CRCUDA_DAEMON CRCUDA_LINEAGE
app_args=(--mb 8 --chunks 4 --steps 24)
pids=()
ok=0

cleanup() {
	for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
	[ -f "$log" ] && for p in $(sed -n 's/^([^)]*) \([0-9]*\) crcudad: serving on.*/\1/p' "$log"); do
		grep -qas -- "$tmp/d/" "/proc/$p/cmdline" && kill -9 "$p"
	done
	if [ $ok = 1 ]; then rm -rf "$tmp"; else echo "preempt: logs kept in $tmp" >&2; fi
}
trap cleanup EXIT
fail() {
	echo "FAIL ($case): $*" >&2
	[ -f "$log" ] && { echo "--- daemon log (last lines)" >&2; tail -n 25 "$log" >&2; }
	exit 1
}
wait_for() { # wait_for SECONDS COMMAND...
	local i n=$(($1 * 20))
	shift
	for ((i = 0; i < n; i++)); do "$@" && return 0; sleep 0.05; done
	return 1
}
gone() { [ ! -e "/proc/$1" ] || grep -q '^State:[[:space:]]*Z' "/proc/$1/status" 2>/dev/null; }
checksum() { sed -n 's/.*checksum=\([0-9a-f]*\).*/\1/p' "$1"; }
ids() { "$ctl" --json store ls | python3 -c 'import json,sys; print(" ".join(str(c["id"]) for c in json.load(sys.stdin)["checkpoints"]))'; }
ndirs() { find "$store/criu" -mindepth 1 -maxdepth 1 -type d 2>/dev/null | wc -l; }
lines() { grep -c "$2" "$1" 2>/dev/null; }
has_lines() { [ "$(lines "$1" "$2")" -ge "$3" ]; }
check_sum() { # check_sum WHAT: the program's output in $dir/out has the uninterrupted checksum
	local got
	got=$(checksum "$dir/out")
	[ "$got" = "$ref" ] || fail "$1: checksum '$got', uninterrupted run: $ref ($(tail -3 "$dir/err"))"
	echo "preempt: $1: checksum $got = uninterrupted run"
}

ref=$(timeout 120 "$ctl" run --backend sim --idle-exit 60 -- "$app_bin" "${app_args[@]}" | checksum /dev/stdin)
[ -n "$ref" ] || fail "the uninterrupted reference run failed"

# start NAME CRCUDACTL-RUN-OPTIONS...: state_app under crcudactl run in its own session, paused at its
# ready step until $dir/go exists. Sets $run (crcudactl's pid) and $dir.
start() {
	dir=$tmp/$1
	shift
	mkdir -p "$dir"
	setsid "$ctl" run --backend sim --idle-exit 60 "$@" -- "$app_bin" "${app_args[@]}" \
		--ready-file "$dir/ready" --go-file "$dir/go" </dev/null >"$dir/out" 2>"$dir/err" &
	run=$!
	pids+=("$run")
	wait_for 60 test -e "$dir/ready" || fail "the program did not get ready: $(cat "$dir/err")"
}
# The program crcudactl run (pid $1) runs as its child.
child_of() { cat "/proc/$1/task/$1/children" 2>/dev/null | awk '{print $1}'; }

case $case in
final)
	start final --checkpoint-on SIGTERM,SIGUSR1 --keep 2
	prog=$(child_of "$run")
	[ -n "$prog" ] && [ "$prog" != "$run" ] || fail "crcudactl run has no child program"
	pids+=("$prog")
	for n in 1 2 3; do
		kill -USR1 "$run"
		wait_for 60 has_lines "$dir/err" "^checkpoint [0-9]*: pid $prog.*left running" "$n" ||
			fail "no checkpoint $n on SIGUSR1: $(cat "$dir/err")"
		kill -0 "$prog" 2>/dev/null || fail "the program stopped after a SIGUSR1 checkpoint"
	done
	wait_for 30 grep -q "^removed checkpoint 1 " "$dir/err" || fail "--keep 2 did not remove checkpoint 1"
	[ "$(ids)" = "2 3" ] || fail "after three SIGUSR1 checkpoints with --keep 2: checkpoints $(ids)"
	[ "$(ndirs)" = 2 ] || fail "$(ndirs) CRIU image directories for 2 checkpoints"
	kill -TERM "$run"
	wait "$run"
	rc=$?
	[ $rc = 0 ] || fail "crcudactl run exited $rc after the final checkpoint: $(cat "$dir/err")"
	gone "$prog" || fail "the program still runs after the final checkpoint"
	[ "$(ids)" = "3 4" ] || fail "after the final checkpoint: checkpoints $(ids), expected 3 4"
	[ "$(ndirs)" = 2 ] || fail "$(ndirs) CRIU image directories for 2 checkpoints"
	tail -1 "$dir/err" | grep -q "^crcudactl: SIGTERM: checkpointing pid $prog" ||
		fail "crcudactl wrote to the program's stderr after the final checkpoint: $(tail -2 "$dir/err")"
	echo "preempt: final: 3 checkpoints on SIGUSR1, the final one on SIGTERM (exit 0), --keep 2 left $(ids)"
	cp "$dir/out" "$tmp/out.final"
	cp "$dir/err" "$tmp/err.final"

	timeout 120 "$ctl" restore --wait 4 >"$tmp/r1.out" 2>"$tmp/r1.err" &
	r=$!
	wait_for 60 grep -q "as pid $prog " "$tmp/r1.out" || fail "restore --wait: $(cat "$tmp/r1.out" "$tmp/r1.err")"
	kill -0 "$r" 2>/dev/null || fail "restore --wait did not wait"
	touch "$dir/go"
	wait "$r"
	rc=$?
	[ $rc = 0 ] || fail "restore --wait exited $rc, the program 0: $(cat "$tmp/r1.err")"
	check_sum "restore --wait of the final checkpoint (exit 0)"

	# Again, from the files as they were at the checkpoint; this time SIGTERM to restore --wait.
	cp "$tmp/out.final" "$dir/out"
	cp "$tmp/err.final" "$dir/err"
	rm -f "$dir/go"
	timeout 120 "$ctl" restore --wait 4 >"$tmp/r2.out" 2>"$tmp/r2.err" &
	r=$!
	wait_for 60 grep -q "as pid $prog " "$tmp/r2.out" || fail "restore --wait: $(cat "$tmp/r2.out" "$tmp/r2.err")"
	kill -TERM "$r"
	wait "$r"
	rc=$?
	[ $rc = 143 ] || fail "restore --wait exited $rc after SIGTERM, expected 143 (the program's SIGTERM)"
	gone "$prog" || fail "the restored program still runs after SIGTERM"
	echo "preempt: final: restore --wait passed SIGTERM on and exited 143"
	;;
every)
	start every --every 1 --keep 2
	prog=$(child_of "$run")
	pids+=("$prog")
	wait_for 120 has_lines "$dir/err" "^checkpoint [0-9]*: pid $prog.*left running" 3 ||
		fail "fewer than 3 periodic checkpoints: $(cat "$dir/err")"
	touch "$dir/go"
	wait "$run"
	rc=$?
	[ $rc = 0 ] || fail "crcudactl run exited $rc, the program 0: $(tail -5 "$dir/err")"
	check_sum "--every 1 --keep 2 ($(lines "$dir/err" "^checkpoint [0-9]*:") checkpoints)"
	n=$(lines "$dir/err" "^checkpoint [0-9]*:")
	[ "$(ids)" = "$((n - 1)) $n" ] || fail "--keep 2 after $n checkpoints left $(ids)"
	[ "$(ndirs)" = 2 ] || fail "$(ndirs) CRIU image directories for 2 checkpoints"
	"$ctl" store prune --keep 1 >"$tmp/prune.out" || fail "store prune --keep 1: $(cat "$tmp/prune.out")"
	[ "$(ids)" = "$n" ] || fail "store prune --keep 1 left $(ids)"
	[ "$(ndirs)" = 1 ] || fail "store prune left $(ndirs) CRIU image directories"
	"$ctl" rm "$n" >"$tmp/rm.out" || fail "rm $n: $(cat "$tmp/rm.out")"
	[ -z "$(ids)" ] && [ "$(ndirs)" = 0 ] || fail "rm $n left checkpoints '$(ids)', $(ndirs) image directories"
	"$ctl" store verify >/dev/null || fail "the store does not verify after rm"
	echo "preempt: every: $n periodic checkpoints, --keep 2, prune --keep 1 and rm left the store empty"
	;;
cancel)
	start cancel
	prog=$run # plain run: the program has crcudactl's pid
	out=$("$ctl" --json checkpoint --leave-running "$prog" 2>"$tmp/c0.err") || fail "checkpoint: $(cat "$tmp/c0.err")"
	first=$(echo "$out" | sed -n 's/^  "id": \([0-9]*\),*$/\1/p')
	size_out=$(stat -c %s "$dir/out") size_err=$(stat -c %s "$dir/err")
	# cancel_at PHASE SIGNAL [CHECKPOINT OPTIONS...]: crcudactl checkpoint, held at PHASE, gets SIGNAL.
	cancel_at() {
		local phase=$1 sig=$2 c rc
		shift 2
		rm -f "$tmp/pause"
		CRCUDA_PLUGIN_TEST_PAUSE=$phase CRCUDA_PLUGIN_TEST_PAUSE_FILE=$tmp/pause \
			"$ctl" checkpoint "$@" "$prog" >"$tmp/c.out" 2>"$tmp/c.err" &
		c=$!
		wait_for 60 test -s "$tmp/pause" || fail "the checkpoint did not reach $phase: $(cat "$tmp/c.err")"
		kill "-$sig" "$c"
		sleep 0.2
		rm -f "$tmp/pause"
		wait "$c"
		rc=$?
		echo "$rc"
	}
	for spec in "device INT --leave-running" "criu TERM --leave-running" "device TERM" "criu INT"; do
		read -r -a a <<<"$spec"
		rc=$(cancel_at "${a[@]}")
		[ "$rc" = 1 ] || fail "cancel at ${a[0]} (SIG${a[1]} ${a[*]:2}): exit $rc, expected 1: $(cat "$tmp/c.err")"
		[ "$(wc -l <"$tmp/c.err")" = 1 ] && grep -q "checkpoint of $prog cancelled: nothing was committed.* runs on" \
			"$tmp/c.err" || fail "cancel at ${a[0]}: not the one line expected: $(cat "$tmp/c.err")"
		kill -0 "$prog" 2>/dev/null && ! gone "$prog" || fail "the program is gone after a cancel at ${a[0]}"
		[ "$(ids)" = "$first" ] && [ "$(ndirs)" = 1 ] ||
			fail "cancel at ${a[0]}: checkpoints '$(ids)', $(ndirs) image directories (expected $first, 1)"
		"$ctl" ls | grep -q "^[0-9]* *$prog .*running" || fail "the program's session is not running again"
		echo "preempt: cancel at ${a[0]} (SIG${a[1]} ${a[*]:2}): exit 1, nothing committed, the program runs on"
	done
	rc=$(cancel_at commit TERM --leave-running)
	[ "$rc" = 0 ] && grep -q "too late to cancel" "$tmp/c.err" ||
		fail "a cancel at the commit: exit $rc, expected 0 and 'too late': $(cat "$tmp/c.err")"
	[ "$(ids)" = "$first $((first + 1))" ] || fail "the checkpoint past its commit point is not there: $(ids)"
	echo "preempt: cancel at the commit: too late, checkpoint $((first + 1)) committed"
	touch "$dir/go"
	wait_for 120 gone "$prog" || fail "the program did not finish"
	check_sum "the program after the cancelled checkpoints"
	# The checkpoint taken before the cancels restores.
	truncate -s "$size_out" "$dir/out"
	truncate -s "$size_err" "$dir/err"
	rm -f "$dir/go"
	timeout 120 "$ctl" restore --wait "$first" >"$tmp/r.out" 2>"$tmp/r.err" &
	r=$!
	wait_for 60 grep -q "as pid $prog " "$tmp/r.out" || fail "restore of $first: $(cat "$tmp/r.out" "$tmp/r.err")"
	touch "$dir/go"
	wait "$r" || fail "restore --wait of $first exited $?: $(cat "$tmp/r.err")"
	check_sum "checkpoint $first, taken before the cancels, restored"
	;;
*)
	fail "unknown case $case"
	;;
esac
ok=1
echo "preempt: $case passed"
