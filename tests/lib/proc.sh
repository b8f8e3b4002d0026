# Shell helpers for the test scripts that follow processes they checkpoint and restore (sourced).
now_ms() { date +%s%3N; }
# PID has exited (gone, or a zombie not yet reaped).
gone() { [ ! -e "/proc/$1" ] || grep -q '^State:[[:space:]]*Z' "/proc/$1/status" 2>/dev/null; }
# wait_for SECONDS COMMAND...: COMMAND succeeds within SECONDS (tried every 50 ms).
wait_for() {
	local i n=$(($1 * 20))
	shift
	for ((i = 0; i < n; i++)); do "$@" && return 0; sleep 0.05; done
	return 1
}
# The checksum a test program printed (state_app's "checksum=HEX") in FILE.
checksum() { sed -n 's/.*checksum=\([0-9a-f]*\).*/\1/p' "$1"; }
wait_gone() { # PID SECONDS
	local i
	for ((i = 0; i < $2 * 20; i++)); do gone "$1" && return 0; sleep 0.05; done
	return 1
}
