# shellcheck shell=bash
# Sourced by scripts/test.sh and scripts/demo-run.sh (TOP set): where CRIU's dumps hang because the
# machine never delivers CRIU's hardware breakpoint when it removes its code from a dumped process
# (seen in a VM, kernel 6.18.44-fc), export CRIU_FAULT=130, CRIU's switch that turns breakpoints off.
# A 20 s probe dump of a sleeping process tells; nothing happens where CRIU_FAULT is set already, where
# we are not root, or where the project's CRIU is missing.
crc_criu_probe() {
	local dir pid ok=1
	dir=$(mktemp -d)
	setsid sleep 60 </dev/null >/dev/null 2>&1 &
	pid=$!
	timeout 20 "$TOP/.deps/criu/sbin/criu" dump -t "$pid" -D "$dir" --shell-job >/dev/null 2>&1 || ok=0
	kill -9 "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
	rm -rf "$dir"
	return $((!ok))
}
if [ "$(id -u)" = 0 ] && [ -x "$TOP/.deps/criu/sbin/criu" ] && [ -z "${CRIU_FAULT:-}" ] && ! crc_criu_probe; then
	echo "== CRIU's dump hangs on this machine with hardware breakpoints: CRIU_FAULT=130 (none) from here on"
	export CRIU_FAULT=130
fi
