#!/bin/sh
# Runs a program under crcuda on the simulated device: starts crcudad on a private socket, runs the
# program with libcrcuda's libcuda.so.1 first on LD_LIBRARY_PATH, stops the daemon and exits with the
# program's status. CRCUDA_SIM_KERNELS (the host-kernel libraries) must be in the environment: the
# daemon's simulated device reads it.
#
# usage: run-under-layer.sh DAEMON LIBDIR PROGRAM [ARGS...]
#   DAEMON  the crcudad executable
#   LIBDIR  the directory of libcrcuda's libcuda.so.1
# Environment: CRCUDAD_ARGS overrides the daemon's backend arguments (default: --backend sim);
# CRCUDA_LAYER_WAIT the seconds to wait for its socket (default 20).
set -u
[ $# -ge 3 ] || {
	echo "usage: $0 DAEMON LIBDIR PROGRAM [ARGS...]" >&2
	exit 2
}
daemon=$1
libdir=$2
shift 2

tmp=$(mktemp -d "${TMPDIR:-/tmp}/crcuda-layer.XXXXXX") || exit 1
CRCUDA_SOCKET=$tmp/d.sock
export CRCUDA_SOCKET

# The daemon's command line, all in one place.
# shellcheck disable=SC2086
"$daemon" ${CRCUDAD_ARGS:---backend sim} --socket "$CRCUDA_SOCKET" --foreground >"$tmp/daemon.log" 2>&1 &
dpid=$!

stop_daemon() {
	kill "$dpid" 2>/dev/null
	wait "$dpid" 2>/dev/null
}

tries=$((${CRCUDA_LAYER_WAIT:-20} * 10))
while [ ! -S "$CRCUDA_SOCKET" ]; do
	if ! kill -0 "$dpid" 2>/dev/null || [ "$tries" -le 0 ]; then
		echo "$(basename "$1"): crcudad did not come up; its log:" >&2
		cat "$tmp/daemon.log" >&2
		stop_daemon
		rm -rf "$tmp"
		exit 1
	fi
	tries=$((tries - 1))
	sleep 0.1
done

# An ASan build of libcrcuda inside an nvcc-built program: the sanitizer runtimes must be loaded
# first, as the program itself does not link them.
preload=$(ldd "$libdir/libcuda.so.1" 2>/dev/null | awk '/lib(asan|ubsan)\.so/ {print $3}' | paste -sd: -)
LD_PRELOAD=${preload}${LD_PRELOAD:+:$LD_PRELOAD} LD_LIBRARY_PATH=$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} "$@"
rc=$?
stop_daemon
if [ "$rc" -ne 0 ]; then
	echo "$(basename "$1"): exit $rc; crcudad's log:" >&2
	cat "$tmp/daemon.log" >&2
fi
rm -rf "$tmp"
exit "$rc"
