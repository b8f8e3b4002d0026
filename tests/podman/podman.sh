#!/usr/bin/env bash
# A program under crcuda in a Podman container (rootful, runc, the simulated device), checkpointed and
# restored by Podman itself, which runs CRIU through the OCI runtime with crcuda's plugin:
#   podman.sh BUILD CASE
# CASE: checkpoint  podman container checkpoint (the program is stopped), podman container restore;
#                   a second checkpoint of the restored container is refused in one line (the daemon
#                   knows the restored process by its pid inside the container's pid namespace) and
#                   the container runs on; the program finishes with the checksum of an uninterrupted
#                   run
#       pid-host    the same with --pid=host: checkpointed and restored twice, exact
#       export      plugin.conf's state = images: podman container checkpoint --export FILE carries the
#                   device state in its tarball (checkpoint/crcuda-PID.crcx); the container removed,
#                   the store wiped and the daemon restarted ("another node"); podman container restore
#                   --import FILE imports the device state into plugin.conf's store; exact again
# The container: a tiny image (empty directories and the usr-merge links) with the host's /usr, the
# build tree and the test's directory (the daemon's socket, the ready/go files) bind-mounted at their
# own paths, so that the socket's path is the same inside and out. --network=none: the unix socket is
# all it needs.
# How the plugin is configured: Podman runs the runtime with an environment of its own, so CRIU sees
# none of ours. A real installation puts the plugin into CRIU's plugin directory (/usr/lib/criu) and
# its settings into /etc/crcuda/plugin.conf; this test may not write either, so it runs runc through
# a wrapper ($tmp/bin/runc) that sets CRIU_LIBS_DIR (the build's plugin), CRCUDA_PLUGIN_CONF (the
# test's plugin.conf) and PATH (the project's CRIU first). The settings themselves come from the file.
# Needs root, podman, runc and CRIU (.deps/criu): exit 77 otherwise, saying which is missing.
set -u
build=$1 case=$2
ctl=$build/crcudactl/crcudactl
crcudad=$build/crcudad/crcudad
plugin_dir=$build/criu-plugin/plugin
progs=$build/tests/programs
top=$(cd "$(dirname "$0")/../.." && pwd)
criu=${CRCUDA_CRIU:-$top/.deps/criu/bin/criu}

skip() { echo "SKIP: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "needs root (rootful podman, CRIU)"
command -v podman >/dev/null || skip "podman is not installed (apt-get install podman runc)"
runc=$(command -v runc) || skip "runc is not installed: Debian's crun is built without CRIU, podman checkpoints through runc here (apt-get install runc)"
[ -x "$criu" ] || skip "no CRIU at $criu (scripts/build-criu.sh)"
[ -f "$plugin_dir/crcuda_plugin.so" ] || skip "the CRIU plugin was not built"

# Descriptors inherited from ctest (its log pipes) stay out of the containers.
for fd in /proc/$$/fd/*; do
	fd=${fd##*/}
	[ "$fd" -gt 2 ] 2>/dev/null && eval "exec $fd>&-"
done

tmp=$(mktemp -d /tmp/crcuda-podman.XXXXXX)
sock=$tmp/d/crcudad.sock
store=$tmp/store
name=crcuda-test-$$-$case
image=localhost/crcuda-test-root:$$
daemon=""
ok=0
. "$top/tests/lib/proc.sh"

stop_daemon() {
	[ -n "$daemon" ] || return 0
	kill "$daemon" 2>/dev/null
	wait_for 10 gone "$daemon" || kill -9 "$daemon" 2>/dev/null
	daemon=""
}
cleanup() {
	podman rm -f -t 0 "$name" >/dev/null 2>&1
	podman rmi -f "$image" >/dev/null 2>&1
	stop_daemon
	if [ $ok = 1 ]; then rm -rf "$tmp"; else echo "podman: logs kept in $tmp" >&2; fi
}
trap cleanup EXIT
fail() {
	echo "FAIL ($case): $*" >&2
	[ -f "$tmp/daemon.log" ] && { echo "--- daemon log (last lines)" >&2; tail -n 15 "$tmp/daemon.log" >&2; }
	exit 1
}

export CRCUDA_SIM_KERNELS=$progs/libcrcuda_test_kernels.so
unset CRCUDA_STORE CRCUDA_DAEMON CRCUDA_REMOTE CRCUDA_PLUGIN_CONF CRCUDA_STATE
start_daemon() {
	mkdir -p "$tmp/d"
	"$crcudad" --backend sim --socket "$sock" --foreground -v >"$tmp/daemon.out" 2>>"$tmp/daemon.log" &
	daemon=$!
	disown "$daemon"
	wait_for 30 grep -qs ready "$tmp/daemon.out" || fail "the daemon did not start: $(tail -5 "$tmp/daemon.log")"
}

# The reference: the same run, never interrupted, outside any container.
app_args=(--mb 8 --chunks 4 --steps 24)
ref=$(CRCUDA_SOCKET=$tmp/ref.sock timeout 120 "$ctl" run --backend sim --idle-exit 5 -- "$progs/state_app" \
	"${app_args[@]}" | checksum /dev/stdin)
[ -n "$ref" ] || fail "the uninterrupted reference run failed"

# The runtime: runc with CRIU, the plugin and the plugin's settings (see above).
mkdir -p "$tmp/bin" "$tmp/root/usr" "$tmp/root/proc" "$tmp/root/sys" "$tmp/root/dev" "$tmp/root/etc" \
	"$tmp/root/tmp"
cat >"$tmp/bin/runc" <<EOF
#!/bin/sh
export PATH="$(dirname "$criu"):\$PATH" CRIU_LIBS_DIR="$plugin_dir" CRCUDA_PLUGIN_CONF="$tmp/plugin.conf"
exec "$runc" "\$@"
EOF
chmod +x "$tmp/bin/runc"
# podman asks CRIU its version itself (by PATH) before it has runc checkpoint: the project's CRIU.
pod() { PATH="$(dirname "$criu"):$PATH" timeout 120 podman --runtime "$tmp/bin/runc" "$@"; }
for l in bin lib lib64 sbin; do ln -s "usr/$l" "$tmp/root/$l"; done
tar -C "$tmp/root" -cf "$tmp/root.tar" . || fail "tar of the image's root"
podman import "$tmp/root.tar" "$image" >"$tmp/import.out" 2>&1 || fail "podman import: $(tail -3 "$tmp/import.out")"
# Limits no higher than ours: without CAP_SYS_RESOURCE runc may not raise them (podman's default
# would be its own maximum).
nofile=$(ulimit -Hn) nproc=$(ulimit -Hu)
[ "$nofile" = unlimited ] || [ "$nofile" -gt 4096 ] && nofile=4096
[ "$nproc" = unlimited ] || [ "$nproc" -gt 4096 ] && nproc=4096
pidns=()
[ "$case" = pid-host ] && pidns=(--pid=host)
run_opts=("${pidns[@]}" --network=none --ulimit "nofile=$nofile:$nofile" --ulimit "nproc=$nproc:$nproc"
	-v /usr:/usr:ro -v "$build:$build:ro" -v "$tmp:$tmp" -e "CRCUDA_SOCKET=$sock")
out=$(pod run --rm "${run_opts[@]}" "$image" /bin/true 2>&1) ||
	skip "podman cannot run a container here: $(echo "$out" | tail -n 1)"

start_daemon
printf '# crcuda CRIU plugin (podman test)\ndaemon = %s\nstore = %s\nreport = %s\n' "$sock" "$store" \
	"$tmp/report" >"$tmp/plugin.conf"
[ "$case" = export ] && echo "state = images" >>"$tmp/plugin.conf"

# The program under crcudactl run in the container, held at its ready step until $tmp/go exists.
pod run -d --name "$name" "${run_opts[@]}" "$image" "$ctl" run --backend sim -- "$progs/state_app" \
	"${app_args[@]}" --ready-file "$tmp/ready" --go-file "$tmp/go" >"$tmp/run.out" 2>&1 ||
	fail "podman run: $(cat "$tmp/run.out")"
wait_for 60 test -e "$tmp/ready" || fail "the program did not get ready: $(podman logs "$name" 2>&1 | tail -5)"
pid=$(podman inspect -f '{{.State.Pid}}' "$name") # in the host's pid namespace

finish() { # finish WHAT: lets the restored program go on; its exit status and checksum
	local got status
	touch "$tmp/go"
	status=$(timeout 120 podman wait "$name") || fail "$1: podman wait"
	[ "$status" = 0 ] || fail "$1: the container exited with $status: $(podman logs "$name" 2>&1 | tail -5)"
	got=$(podman logs "$name" 2>/dev/null | checksum /dev/stdin)
	[ "$got" = "$ref" ] || fail "$1: checksum '$got', uninterrupted run: $ref"
	echo "podman: $1: checksum $got = uninterrupted run"
}

# cycle N: podman container checkpoint and restore, timed.
cycle() {
	local t0 t1 t2
	pid=$(podman inspect -f '{{.State.Pid}}' "$name")
	t0=$(date +%s.%N)
	pod container checkpoint "$name" >"$tmp/ckpt.out" 2>&1 || fail "podman container checkpoint ($1): $(cat "$tmp/ckpt.out")"
	t1=$(date +%s.%N)
	[ "$(podman inspect -f '{{.State.Status}}' "$name")" = exited ] || fail "the container still runs after the checkpoint"
	grep -q "^ckpt $pid " "$tmp/report" || fail "the plugin committed no checkpoint of pid $pid: $(cat "$tmp/report")"
	pod container restore "$name" >"$tmp/restore.out" 2>&1 || fail "podman container restore ($1): $(cat "$tmp/restore.out")"
	t2=$(date +%s.%N)
	[ "$(grep -c "^restored " "$tmp/report")" = "$1" ] || fail "the plugin restored no session: $(cat "$tmp/report")"
	awk -v n="$1" -v a="$t0" -v b="$t1" -v c="$t2" \
		'BEGIN { printf "podman: checkpoint %d: %.2f s, restore %.2f s\n", n, b - a, c - b }'
}

case $case in
checkpoint)
	cycle 1
	# Restored in the container's own pid namespace: the daemon knows it by its pid there (1).
	pid=$(podman inspect -f '{{.State.Pid}}' "$name")
	if pod container checkpoint "$name" >"$tmp/ckpt2.out" 2>&1; then
		fail "a checkpoint of the restored container succeeded (the test expects the refusal)"
	fi
	grep -q "^error task $pid is connected to the daemon at $sock, which knows its session by its pid in its own pid namespace (1: it was restored there)" \
		"$tmp/report" || fail "no clear reason for the refused checkpoint: $(grep error "$tmp/report")"
	echo "podman: second checkpoint refused: $(grep "^error task $pid" "$tmp/report" | sed 's/^error //')"
	[ "$(podman inspect -f '{{.State.Status}}' "$name")" = running ] || fail "the container does not run on after the refusal"
	finish "podman container checkpoint, restore"
	;;
pid-host)
	cycle 1
	cycle 2
	finish "--pid=host: podman container checkpoint, restore, twice"
	;;
export)
	pod container checkpoint --export "$tmp/ckpt.tar" "$name" >"$tmp/ckpt.out" 2>&1 ||
		fail "podman container checkpoint --export: $(cat "$tmp/ckpt.out")"
	tar -tf "$tmp/ckpt.tar" | grep -qx "checkpoint/crcuda-$pid.crcx" ||
		fail "the exported tarball has no device state: $(tar -tf "$tmp/ckpt.tar" | grep crcuda)"
	echo "podman: exported $(stat -c %s "$tmp/ckpt.tar") bytes with checkpoint/crcuda-$pid.crcx"
	# The container, the store and the daemon go ("another node").
	podman rm -f "$name" >/dev/null || fail "podman rm"
	stop_daemon
	rm -rf "$store"
	start_daemon
	pod container restore --import "$tmp/ckpt.tar" >"$tmp/restore.out" 2>&1 ||
		fail "podman container restore --import: $(cat "$tmp/restore.out")"
	grep -q "^imported $pid " "$tmp/report" || fail "the plugin imported nothing: $(cat "$tmp/report")"
	grep -q "^restored " "$tmp/report" || fail "the plugin restored no session: $(cat "$tmp/report")"
	[ "$(CRCUDA_STORE=$store "$ctl" store ls | tail -n +2 | wc -l)" = 1 ] ||
		fail "plugin.conf's store does not hold the imported checkpoint"
	finish "podman container checkpoint --export, store wiped, restore --import"
	;;
*)
	echo "unknown case $case" >&2
	exit 2
	;;
esac
ok=1
echo "PASS: $case"
