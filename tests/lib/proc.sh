# Shell helpers for the test scripts that follow processes they checkpoint and restore (sourced).
now_ms() { date +%s%3N; }
# PID has exited (gone, or a zombie not yet reaped).
gone() { [ ! -e "/proc/$1" ] || grep -q '^State:[[:space:]]*Z' "/proc/$1/status" 2>/dev/null; }
wait_gone() { # PID SECONDS
	local i
	for ((i = 0; i < $2 * 20; i++)); do gone "$1" && return 0; sleep 0.05; done
	return 1
}
