#!/usr/bin/env bash
# CRIU smoke test: checkpoint a counting process with the project-local CRIU, check that it is gone,
# restore it, and check that it counts on from where it stopped (no restart, no gap).
# Usage: run.sh [COUNTER]: COUNTER is the built counter.c (ctest passes it); without it, run.sh
# compiles counter.c with ${CC:-cc}.
# CRIU_SMOKE_PLUGIN_DIR: dump and restore with crcuda's plugin loaded (--libdir) and no daemon: the
# plugin must leave a process that is no crcuda client alone, without an error in CRIU's log (with a
# plugin.conf that says state = images); a malformed plugin.conf fails a dump with one line naming the
# file and the line, and the process runs on.
# Exit 77 (skip) when not root or when CRIU is missing. CRIU: path of the criu to use (default
# <repo>/.deps/criu/bin/criu, as scripts/build-criu.sh installs it).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
criu=${CRIU:-$top/.deps/criu/bin/criu}
counter_bin=${1:-}

skip() { echo "criu-smoke: SKIP: $*"; exit 77; }
[ "$(id -u)" -eq 0 ] || skip "needs root (CRIU dump/restore)"
[ -x "$criu" ] || skip "$criu not found (scripts/build-criu.sh builds it)"

work=$(mktemp -d "${TMPDIR:-/tmp}/criu-smoke.XXXXXX")
imgs=$work/images
mkdir -p "$imgs"
counter=$work/counter.log
pid=""
ok=0
cleanup() {
	# The counter (original or restored), by its pid.
	if [ -n "$pid" ]; then kill -KILL "$pid" 2>/dev/null || true; fi
	if [ "$ok" = 1 ]; then rm -rf "$work"; else echo "criu-smoke: logs and images kept in $work" >&2; fi
}
trap cleanup EXIT

fail() {
	echo "criu-smoke: FAIL: $1" >&2
	if [ $# -ge 2 ] && [ -f "$2" ]; then
		echo "criu-smoke: last lines of $2:" >&2
		tail -n 30 "$2" | sed 's/^/  | /' >&2
	fi
	exit 1
}
last() { local v; v=$(tail -n 1 "$counter" 2>/dev/null || true); echo "${v:-0}"; }
wait_for() { # wait_for SECONDS COMMAND...: poll every 0.1 s
	local i n=$(($1 * 10)); shift
	for ((i = 0; i < n; i++)); do "$@" && return 0; sleep 0.1; done
	return 1
}
above() { [ "$(last)" -gt "$1" ]; }
gone() { [ ! -e "/proc/$1" ]; }
# The restored counter is reparented to init once CRIU exits; init may reap it only later.
dead() { gone "$1" || grep -q '^State:[[:space:]]*Z' "/proc/$1/status" 2>/dev/null; }

"$criu" --version | head -n 1

# The counter (counter.c): its own session leader (no --shell-job needed), no terminal, stdout
# appended to a file. A direct child of this script, so that it is reaped here once CRIU kills it.
if [ -n "$counter_bin" ]; then
	[ -x "$counter_bin" ] || fail "$counter_bin is not an executable"
else
	counter_bin=$work/counter
	"${CC:-cc}" -O2 -o "$counter_bin" "$here/counter.c" >"$work/cc.log" 2>&1 ||
		fail "compiling $here/counter.c failed" "$work/cc.log"
fi
"$counter_bin" </dev/null >>"$counter" 2>"$work/counter.err" &
pid=$!
disown "$pid" # bash still reaps it (so its pid is free for the restore), without a job report
wait_for 10 above 20 || fail "the counter does not count (last value $(last))"

# Dump (CRIU kills the tree after a successful dump).
plugin=()
[ -n "${CRIU_SMOKE_PLUGIN_DIR:-}" ] && plugin=(--libdir "$CRIU_SMOKE_PLUGIN_DIR")
# A malformed plugin.conf fails the dump with one line naming the file and the line, and the counter
# runs on; a valid one (and no file at all: the default path is not there) leaves it alone.
if [ ${#plugin[@]} -gt 0 ]; then
	mkdir -p "$work/bad-images"
	printf '# crcuda plugin\n\nstate = images\nstor = /var/lib/x\n' >"$work/bad.conf"
	printf 'timeout_ms = soon\n' >"$work/bad2.conf"
	for bad in "bad.conf:4: unknown key 'stor' (known: store, daemon" \
		"bad2.conf:1: timeout_ms = 'soon': expected a positive number of milliseconds"; do
		conf=$work/${bad%%:*}
		if CRCUDA_PLUGIN_CONF=$conf timeout 120 "$criu" dump -t "$pid" -D "$work/bad-images" -o dump.log \
			"${plugin[@]}" 2>"$work/bad.err"; then
			fail "criu dump with a malformed $conf succeeded" "$work/bad-images/dump.log"
		fi
		[ "$(grep -c "$conf" "$work/bad-images/dump.log")" = 1 ] &&
			grep -qF "crcuda_plugin: $work/$bad" "$work/bad-images/dump.log" ||
			fail "no one-line error naming $work/${bad%%: *}" "$work/bad-images/dump.log"
		echo "criu-smoke: $(grep "$conf" "$work/bad-images/dump.log" | sed 's/.*crcuda_plugin: /crcuda_plugin: /')"
	done
	kill -0 "$pid" 2>/dev/null || fail "the counter did not survive the refused dump"
	seen=$(last)
	wait_for 10 above "$seen" || fail "the counter stopped after the refused dump"
	printf 'state = images\nstore = %s/conf-store\n' "$work" >"$work/good.conf"
	export CRCUDA_PLUGIN_CONF=$work/good.conf
fi
CRCUDA_SOCKET=$work/no-daemon.sock timeout 120 "$criu" dump -t "$pid" -D "$imgs" -o dump.log -v4 "${plugin[@]}" \
	2>"$work/dump.err" || fail "criu dump -t $pid failed" "$imgs/dump.log"
if [ ${#plugin[@]} -gt 0 ]; then
	grep -q 'Plugin "crcuda"' "$imgs/dump.log" || fail "the plugin was not loaded" "$imgs/dump.log"
	# Its log lines go to CRIU's stderr, CRIU's own to dump.log.
	! grep -E "(Error|Warn) .*(crcuda|\((ctl|sock|store)\.c)" "$work/dump.err" "$imgs/dump.log" ||
		fail "the plugin logged an error for a process that is no crcuda client" "$work/dump.err"
fi
wait_for 10 gone "$pid" || fail "process $pid still exists after the dump"
dumped=$(last)
sleep 0.5
[ "$(last)" = "$dumped" ] || fail "the counter went on after the dump ($dumped -> $(last))"
echo "criu-smoke: dumped pid $pid at count $dumped; it is gone"

# Restore, detached; CRIU gives it back its pid.
timeout 120 "$criu" restore -D "$imgs" -d --pidfile "$work/restored.pid" -o restore.log -v4 "${plugin[@]}" ||
	fail "criu restore failed" "$imgs/restore.log"
rpid=$(cat "$work/restored.pid")
[ "$rpid" = "$pid" ] || fail "restored pid $rpid differs from the dumped pid $pid"
wait_for 10 above $((dumped + 20)) || fail "the restored counter does not count on (last value $(last), dumped at $dumped)"
kill -0 "$pid" 2>/dev/null || fail "restored process $pid is not running"

# The whole record must be 1, 2, 3, ... with no restart and no gap across dump and restore.
bad=$(awk 'NR != $1 { print "line " NR ": " $0; exit }' "$counter")
[ -z "$bad" ] || fail "the count did not continue from the dumped value ($bad; dumped at $dumped)"
echo "criu-smoke: restored pid $pid counts on: $dumped -> $(last), no restart, no gap"

kill -KILL "$pid"
wait_for 10 dead "$pid" || fail "could not kill the restored process $pid"
pid=""
ok=1
echo "criu-smoke: PASS"
