#!/usr/bin/env bash
# CUDA IPC across a checkpoint, through real CRIU on the simulated device: an exporter and an importer
# (tests/programs/ipc --cr-export / --cr-import, separate programs under crcudactl run, one daemon).
# The importer, with the exporter's memory open, is checkpointed (killed) and restored while the
# exporter runs on: the restored importer reads its own earlier write in the exporter's memory and then
# the exporter's new write (the same memory, not a copy), and the exporter reads the importer's last
# write. The exporter's checkpoint is refused while the importer has its memory open; once it closed,
# an open during the exporter's checkpoint waits for its end; the exporter is checkpointed and restored, and a new importer opens the restored memory through the
# handle given out before. Once the exporter has freed the memory and ended, a restore of the
# importer's checkpoint fails saying why, and leaves the checkpoint as it was.
#   ipc-cr.sh BUILD          (CR_BACKEND=cuda: on the GPU, tests/gpu/ipc.sh)
# Needs root and CRIU (.deps/criu): exit 77 otherwise.
set -u
build=$1
ctl=$build/crcudactl/crcudactl
prog=$build/tests/programs/ipc
top=$(cd "$(dirname "$0")/../.." && pwd)
cr_name=ipc-cr
# shellcheck source=../lib/cr-env.sh
. "$top/tests/lib/cr-env.sh"
backend=${CR_BACKEND:-sim}
x=$tmp/x
mkdir -p "$x"
fail() {
	echo "FAIL: $*" >&2
	for f in exp.out exp.err imp.out imp.err; do echo "--- $f" >&2; cat "$tmp/$f" >&2; done
	echo "--- daemon log (last lines)" >&2
	tail -n 25 "$tmp/d/crcudad.log" >&2
	exit 1
}

setsid "$ctl" run --backend "$backend" --idle-exit 60 -- "$prog" --cr-export "$x" </dev/null >"$tmp/exp.out" 2>"$tmp/exp.err" &
exp=$!
disown $exp
pids+=("$exp")
wait_for 60 test -e "$x/handle" || fail "the exporter did not export"
setsid "$ctl" run --backend "$backend" --idle-exit 60 -- "$prog" --cr-import "$x" </dev/null >"$tmp/imp.out" 2>"$tmp/imp.err" &
imp=$!
disown $imp
pids+=("$imp")
wait_for 60 test -e "$x/ready" || fail "the importer did not get ready"
# The exporter, its memory open in the importer: refused, saying why; it runs on.
if timeout 120 "$ctl" checkpoint "$exp" >"$tmp/ckpt-exp.out" 2>&1; then
	fail "the exporter was checkpointed while the importer has its memory open"
fi
grep -q "exported IPC memory another process has open" "$tmp/ckpt-exp.out" ||
	fail "the exporter's refusal does not say why: $(cat "$tmp/ckpt-exp.out")"
kill -0 "$exp" 2>/dev/null || fail "the exporter did not run on after its refused checkpoint"
out_size=$(stat -c %s "$tmp/imp.out") err_size=$(stat -c %s "$tmp/imp.err")
out=$(timeout 120 "$ctl" --json checkpoint "$imp" 2>"$tmp/ckpt.err") || fail "checkpoint of the importer: $(cat "$tmp/ckpt.err")"
id=$(echo "$out" | sed -n 's/^  "id": \([0-9]*\),*$/\1/p')
[ -n "$id" ] || fail "no checkpoint id in: $out"
wait_for 30 gone "$imp" || fail "the checkpointed importer did not end"
truncate -s "$out_size" "$tmp/imp.out"
truncate -s "$err_size" "$tmp/imp.err"
timeout 120 "$ctl" restore "$id" >"$tmp/restore.out" 2>&1 || fail "restore of the importer: $(cat "$tmp/restore.out")"
touch "$x/go"
wait_for 120 gone "$imp" || fail "the restored importer did not finish"
# Nobody has the exporter's memory open now: it is checkpointed (killed) and restored, and a new
# importer opens its memory through the handle it gave out before.
wait_for 60 test -e "$x/exporter-ready" || fail "the exporter did not get to its checkpoint"
# While its checkpoint is under way (the device part, through the control interface), another
# process's open of its memory waits: it may not open memory a restore would replace. It goes on once
# the exporter resumes.
cctl=$build/tests/ckpt-daemon/ckpt_ctl
"$cctl" "$CRCUDA_SOCKET" quiesce "$exp" || fail "quiesce of the exporter"
"$cctl" "$CRCUDA_SOCKET" checkpoint "$exp" "$tmp/store-probe" >/dev/null || fail "the exporter's device checkpoint"
timeout 120 "$ctl" run --backend "$backend" --idle-exit 60 -- "$prog" --cr-peek "$x" </dev/null >"$tmp/peek.out" 2>&1 &
peek=$!
sleep 1
kill -0 "$peek" 2>/dev/null || fail "an open during the exporter's checkpoint did not wait: $(cat "$tmp/peek.out")"
"$cctl" "$CRCUDA_SOCKET" abort "$exp" || fail "abort"
"$cctl" "$CRCUDA_SOCKET" resume "$exp" || fail "resume of the exporter"
wait "$peek" || fail "the open after the exporter resumed: $(cat "$tmp/peek.out")"
grep -qx "peek: the exporter's memory: exact" "$tmp/peek.out" || fail "the waiting open read: $(cat "$tmp/peek.out")"
exp_out=$(stat -c %s "$tmp/exp.out") exp_err=$(stat -c %s "$tmp/exp.err")
out=$(timeout 120 "$ctl" --json checkpoint "$exp" 2>"$tmp/ckpt.err") || fail "checkpoint of the exporter: $(cat "$tmp/ckpt.err")"
exp_id=$(echo "$out" | sed -n 's/^  "id": \([0-9]*\),*$/\1/p')
wait_for 30 gone "$exp" || fail "the checkpointed exporter did not end"
truncate -s "$exp_out" "$tmp/exp.out"
truncate -s "$exp_err" "$tmp/exp.err"
timeout 120 "$ctl" restore "$exp_id" >"$tmp/restore-exp.out" 2>&1 || fail "restore of the exporter: $(cat "$tmp/restore-exp.out")"
touch "$x/exporter-go"
timeout 120 "$ctl" run --backend "$backend" --idle-exit 60 -- "$prog" --cr-reopen "$x" </dev/null >"$tmp/reopen.out" 2>&1 ||
	fail "the new importer: $(cat "$tmp/reopen.out")"
grep -qx "reopener: the restored exporter's memory through its old handle: exact" "$tmp/reopen.out" ||
	fail "the new importer did not read the restored exporter's memory"
wait_for 120 gone "$exp" || fail "the exporter did not finish"
for line in "importer: read the exporter's pattern: exact" \
	"importer: after its restore, its own write in the exporter's memory: exact" \
	"importer: after its restore, the exporter's new write: exact" "importer: PASS"; do
	grep -qx "$line" "$tmp/imp.out" || fail "the importer did not say '$line'"
done
for line in "exporter: the restored importer's write: exact" \
	"exporter: after its restore, the new importer's write through the old handle: exact" "exporter: PASS"; do
	grep -qx "$line" "$tmp/exp.out" || fail "the exporter did not say '$line'"
done
echo "ipc-cr: the importer, restored with the exporter's memory open, shares it as before (both ways);" \
	"the exporter, refused while it was open, checkpointed once closed: restored, its old handle opens it"

# The exporter has freed the memory and ended: the importer's checkpoint cannot be restored, and says
# why.
truncate -s "$out_size" "$tmp/imp.out"
truncate -s "$err_size" "$tmp/imp.err"
if timeout 120 "$ctl" restore "$id" >"$tmp/restore2.out" 2>&1; then
	fail "a restore without the exporter succeeded"
fi
grep -q "no longer exports" "$tmp/restore2.out" || fail "the failed restore does not say why: $(cat "$tmp/restore2.out")"
echo "ipc-cr: without the exporter the restore fails: $(grep -o "the session had another.*" "$tmp/restore2.out" | head -1)"
ok=1
