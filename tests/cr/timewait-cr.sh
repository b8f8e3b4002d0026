#!/usr/bin/env bash
# A restore whose listening port is held by TIME_WAIT, through real CRIU on the simulated device: the
# tree's root (a Python launcher that makes no CUDA call, as torchrun or NCCL's bootstrap) keeps a
# listening socket whose accepted connection it closed first, just before the checkpoint, so the port
# has a TIME_WAIT entry for 60 s that keeps CRIU from binding the listener again; its child runs
# state_app under the layer. `crcudactl restore` must say so and try again until the TIME_WAIT is
# over, and the restored child finish with the uninterrupted checksum. Without the retries the restore
# fails. About 70 s.
#   timewait-cr.sh BUILD
# Needs root and CRIU (.deps/criu): exit 77 otherwise.
set -u
build=$1
ctl=$build/crcudactl/crcudactl
app=$build/tests/programs/state_app
top=$(cd "$(dirname "$0")/../.." && pwd)
cr_name=timewait-cr
# shellcheck source=../lib/cr-env.sh
. "$top/tests/lib/cr-env.sh"
fail() {
	echo "FAIL: $*" >&2
	for f in out err restore.out restore.err; do [ -e "$tmp/$f" ] && { echo "--- $f" >&2; tail -n 15 "$tmp/$f" >&2; }; done
	exit 1
}
args=(--mb 8 --chunks 4 --steps 24)
ref=$(timeout 300 "$ctl" run --backend sim --idle-exit 60 -- "$app" "${args[@]}" | checksum /dev/stdin)
[ -n "$ref" ] || fail "no uninterrupted checksum"
# The launcher: its accepted connection closed by its own side first (TIME_WAIT on the listening
# port), then the child under the layer; the listener stays open.
setsid "$ctl" run --backend sim --idle-exit 120 -- python3 -c '
import socket, subprocess, sys, time
srv = socket.socket()
srv.bind(("127.0.0.1", 0))
srv.listen(4)
cli = socket.create_connection(srv.getsockname())
acc, _ = srv.accept()
acc.close()
time.sleep(0.2)
cli.close()
sys.exit(subprocess.call(sys.argv[1:]))
' "$app" "${args[@]}" --ready-file "$tmp/ready" --go-file "$tmp/go" </dev/null >"$tmp/out" 2>"$tmp/err" &
parent=$!
disown "$parent"
pids+=("$parent")
wait_for 60 test -e "$tmp/ready" || fail "the program did not get ready"
child=$(pgrep -P "$parent")
pids+=("$child")
t0=$(now_ms)
out=$(timeout 120 "$ctl" --json checkpoint "$parent" 2>"$tmp/ckpt.err") || fail "checkpoint: $(cat "$tmp/ckpt.err")"
id=$(python3 -c 'import json, sys; print(json.load(sys.stdin)["tree_ids"][0])' <<<"$out") || fail "no tree_ids in: $out"
wait_for 30 gone "$parent" || fail "the launcher still runs after the checkpoint"
for f in out err; do stat -c %s "$tmp/$f" >"$tmp/$f.size"; done
for f in out err; do truncate -s "$(cat "$tmp/$f.size")" "$tmp/$f"; done
timeout 180 "$ctl" restore "$id" >"$tmp/restore.out" 2>"$tmp/restore.err" || fail "restore: $(cat "$tmp/restore.err")"
waited=$((($(now_ms) - t0) / 1000))
grep -q "a port the program had bound is still held" "$tmp/restore.err" ||
	fail "the first restore did not meet the TIME_WAIT (nothing to show): $(cat "$tmp/restore.err")"
touch "$tmp/go"
wait_for 120 gone "$parent" || fail "the restored tree did not finish"
got=$(checksum "$tmp/out")
[ "$got" = "$ref" ] || fail "checksum after the restore '$got', uninterrupted $ref"
echo "timewait-cr: restored ${waited} s after the checkpoint, once the port's TIME_WAIT was over ($(grep -c 'trying again' "$tmp/restore.err") retries); checksum = uninterrupted"
ok=1
echo "PASS: timewait-cr"
