# The start the CRIU test scripts on the simulated device share (sourced, with build, top and
# cr_name set): exit 77 without root or CRIU; ctest's descriptors closed (they would be dumped with
# the program and break the restore); a scratch directory $tmp; the daemon's socket, the store, CRIU
# and the simulated kernels exported, a remote daemon's settings unset; on exit the processes in
# ${pids[@]} (and their children) and the daemon `crcudactl run` started in $tmp/d are killed, and
# $tmp removed once the script set ok=1 (else kept, and said). proc.sh's helpers come with it.
criu=${CRCUDA_CRIU:-$top/.deps/criu/bin/criu}
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root (CRIU)"; exit 77; }
[ -x "$criu" ] || { echo "SKIP: no CRIU at $criu"; exit 77; }
for fd in /proc/$$/fd/*; do
	fd=${fd##*/}
	[ "$fd" -gt 2 ] 2>/dev/null && eval "exec $fd>&-"
done
tmp=$(mktemp -d "/tmp/crcuda-$cr_name.XXXXXX")
export CRCUDA_SOCKET=$tmp/d/crcudad.sock CRCUDA_STORE=$tmp/store CRCUDA_CRIU=$criu
export CRCUDA_SIM_KERNELS=$build/tests/programs/libcrcuda_test_kernels.so
unset CRCUDA_REMOTE CRCUDA_TOKEN CRCUDA_TOKEN_FILE CRCUDA_LIBDIR CRCUDAD CRCUDA_DAEMON
pids=()
ok=0
cr_cleanup() {
	for p in "${pids[@]}"; do pkill -9 -P "$p" 2>/dev/null; kill -9 "$p" 2>/dev/null; done
	for p in $(sed -n 's/^([^)]*) \([0-9]*\) crcudad: serving on.*/\1/p' "$tmp/d/crcudad.log" 2>/dev/null); do
		grep -qas -- "$tmp/d/" "/proc/$p/cmdline" && kill -9 "$p"
	done
	if [ $ok = 1 ]; then rm -rf "$tmp"; else echo "$cr_name: logs kept in $tmp" >&2; fi
}
trap cr_cleanup EXIT
# shellcheck source=proc.sh
. "$top/tests/lib/proc.sh"
