#!/usr/bin/env bash
# The README's demo (scripts/demo.sh runs it after building): a state-carrying CUDA program
# (tests/programs/state_app: device memory rewritten step by step, a checksum at the end) runs under
# crcuda, is checkpointed halfway with work in flight, killed, restored, and finishes; its checksum must
# equal an uninterrupted run's. The simulated device where no GPU is present, the real one otherwise.
# Needs root (CRIU). Everything lives in a temporary directory, removed at the end.
# Usage: scripts/demo-run.sh BUILD_DIR | PREFIX
# PREFIX: an installed crcuda (cmake --install, docs/install.md): its crcudactl, and the demo program
# installed with it (<libexecdir>/crcuda/demo); nothing of a build tree.
set -euo pipefail
build=$(cd "${1:?usage: demo-run.sh BUILD_DIR|PREFIX}" && pwd)
if [ -x "$build/bin/crcudactl" ]; then
	ctl=$build/bin/crcudactl
	app=$(find "$build" -path '*/crcuda/demo/state_app' | head -n 1)
	kernels=$(dirname "$app")/libcrcuda_test_kernels.so
	mine=$build/ # libcrcuda's libcuda.so.1 is somewhere under the prefix
	echo "demo: the installed crcuda in $build"
else
	ctl=$build/crcudactl/crcudactl
	app=$build/tests/programs/state_app
	kernels=$build/tests/programs/libcrcuda_test_kernels.so
	mine=$build/libcrcuda
fi
[ -x "$ctl" ] && [ -x "$app" ] || { echo "demo: $ctl or the demo program '$app' not there" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "demo: needs root (CRIU dumps and restores the program)" >&2; exit 1; }
TOP=$(cd "$(dirname "$0")/.." && pwd)
. "$TOP/scripts/criu-env.sh"

# Nothing of the caller's (a terminal multiplexer's descriptors, CI pipes) may go into the dump.
for fd in /proc/$$/fd/*; do
	fd=${fd##*/}
	[ "$fd" -gt 2 ] 2>/dev/null && eval "exec $fd>&-"
done
work=$(mktemp -d "${TMPDIR:-/tmp}/crcuda-demo-XXXXXX")
export CRCUDA_STORE=$work/store CRCUDA_SOCKET=$work/d/crcudad.sock
export CRCUDA_SIM_KERNELS=$kernels
pid=""
cleanup() {
	[ -n "$pid" ] && kill -9 "$pid" 2>/dev/null
	# The daemon that `crcudactl run` started for the demo, by the pid it logged.
	for p in $(sed -n 's/^([^)]*) \([0-9]*\) crcudad: serving on.*/\1/p' "$work/d/crcudad.log" 2>/dev/null); do
		kill "$p" 2>/dev/null
	done
	rm -rf "$work"
}
trap cleanup EXIT

backend=sim
if ldconfig -p 2>/dev/null | grep 'libcuda.so.1 ' | grep -v stubs | grep -qv "$mine"; then
	backend=cuda
fi
args=(--mb 64 --chunks 4 --steps 20)
step() { printf '\n\033[1m== %s\033[0m\n' "$1"; [ $# -gt 1 ] && printf '$ %s\n' "${*:2}"; return 0; }
checksum() { sed -n 's/.*checksum=\([0-9a-f]*\).*/\1/p' "$1"; }
gone() { [ ! -e "/proc/$1" ] || grep -q '^State:[[:space:]]*Z' "/proc/$1/status" 2>/dev/null; }
wait_for() { local i; for ((i = 0; i < 1200; i++)); do "$@" && return 0; sleep 0.05; done; return 1; }

step "an uninterrupted run, for reference (backend: $backend)" \
	crcudactl run --backend $backend -- state_app "${args[*]}"
"$ctl" run --backend $backend -- "$app" "${args[@]}" | tee "$work/ref.out"
ref=$(checksum "$work/ref.out")

step "the same program under crcuda, paused halfway (step 10 of 20, steps in flight)" \
	crcudactl run --backend $backend -- state_app "${args[*]}" --ready-file ready --go-file go '&'
# Its own session (CRIU restores it as one); the program keeps crcudactl's pid.
setsid "$ctl" run --backend $backend -- "$app" "${args[@]}" --ready-file "$work/ready" --go-file "$work/go" \
	</dev/null >"$work/out" 2>"$work/err" &
pid=$!
disown "$pid"
wait_for test -e "$work/ready" || { echo "demo: the program did not start: $(cat "$work/err")" >&2; exit 1; }
echo "pid $pid: $(cat "$work/ready")"

step "checkpoint it (device memory into the store, the process into CRIU images)" \
	crcudactl checkpoint --leave-running "$pid"
"$ctl" checkpoint --leave-running "$pid" | tee "$work/ckpt.out"
id=$(sed -n 's/^checkpoint \([0-9]*\):.*/\1/p' "$work/ckpt.out")

step "kill it" kill -9 "$pid"
kill -9 "$pid"
wait_for gone "$pid"
echo "pid $pid is gone"

step "the store" crcudactl ls
"$ctl" ls

step "restore it" crcudactl restore "$id"
"$ctl" restore "$id"
kill -0 "$pid" 2>/dev/null && echo "pid $pid is back, waiting at step 10 where it was checkpointed"

step "let it finish" touch go
touch "$work/go"
wait_for gone "$pid" || { echo "demo: the restored program did not finish" >&2; exit 1; }
pid=""
cat "$work/out"
got=$(checksum "$work/out")

echo
if [ -n "$got" ] && [ "$got" = "$ref" ]; then
	echo "demo: OK: checkpointed halfway, killed, restored: checksum $got equals the uninterrupted run's."
else
	echo "demo: FAILED: restored run's checksum '$got', uninterrupted run's $ref" >&2
	exit 1
fi
