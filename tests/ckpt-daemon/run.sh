#!/usr/bin/env bash
# Daemon-side checkpoint/restore on the simulated device, driven through crcuda/ctl.h (ckpt_ctl).
#   run.sh BUILD CASE
# CASE: restore   quiesce, checkpoint, commit, verify the manifest; kill the daemon, start another on the
#                 same store, restore: the client (socket swapped as CRIU would) finds its buffers at the
#                 same addresses with the same bytes, and its module, stream and event work
#       resume    checkpoint with the client left running (resume): it continues correctly
#       busy      quiesce while another client thread is in long synchronous calls
#       backlog   quiesce an idle client whose posted launches still wait in the ring (backlog_client):
#                 checkpoint, resume; every launch runs exactly once
#       deferred  a posted launch the device refused, its error not yet reported: checkpoint, kill the daemon,
#                 restore elsewhere; the restored client's next synchronisation reports that error
#       abort     checkpoint, abort: no manifest; the client resumes
#       killed    a daemon killed mid-checkpoint leaves the previous checkpoint intact
#       churn     a client that created and destroyed 1500 events, streams and allocations: the
#                 daemon's journal dropped the dead pairs (fewer records than calls), restore works
#       incremental  checkpoint, flip one byte of a 4 MiB chunk, checkpoint, checkpoint again: the
#                 second copies that chunk (and the globals) only, the third the globals only; the
#                 third restored elsewhere has the flipped byte and all the rest
#       collected checkpoint, delete it and collect its chunks, checkpoint: everything is copied again
#                 (the chunks the digests name are gone), and that checkpoint restores exactly
#       background   checkpoint drained in the background (its drain held back 1.5 s): the commit
#                 answers at once (id 0), the client resumes and changes its memory meanwhile; the
#                 committed checkpoint holds the memory as it was at the checkpoint; a second one,
#                 whose client ends before the drain, is committed all the same
#       lazy      restore with CRCUDA_RESTORE_LAZY=1: the restore answers after the replay, device memory
#                 goes up meanwhile, the client's first call waits for it and finds its bytes
#       lazy-corrupt  the same from a store whose chunks were damaged after the checkpoint: the
#                 restored client's calls fail (a CUDA error, never the wrong bytes), the log says why
#       corrupt   a restore (not lazy) from such a store fails, saying the bytes differ from those
#                 checkpointed: the chunks carry device digests (the manifest's), so they were read
#                 unhashed and checked on the device after the upload; with CRCUDA_RESTORE_VERIFY=host
#                 the store's hash check finds the same while reading (the chunks stored raw)
#       background-killed  a background checkpoint whose worker is killed (kill -9) while it drains,
#                 after the commit was asked for: nothing new is committed, the one before is whole
#       tcp       the client's session is TCP (a remote GPU): quiesce (asked on its socket: the idle
#                 client parks through its watcher thread), checkpoint, commit, verify, resume, twice;
#                 the client continues correctly
#       staged    two checkpoints, one 4 MiB chunk changed between them; a new daemon stages the first
#                 (replay and upload ahead, as a migration's destination does during pre-copy) and
#                 restores the second under the same key: the staged worker uploads that chunk alone,
#                 and the client finds its memory as at the second checkpoint
#       staged-lazy  staged as above by a daemon with CRCUDA_RESTORE_LAZY=1: the stage answers once the
#                 journal is replayed, its upload going on; the restore of the second checkpoint waits
#                 for that upload, then uploads the changed chunk alone, and the client finds its
#                 memory as at the second checkpoint
#       pool-held  no worker is started while another moves device memory: a second client takes the
#                 pool's worker while the first one's background checkpoint drains (held 5 s), and the
#                 pool gets its next worker only once the drain is done
#       pool-restore  nor while a restore replays (held 2 s) and uploads: the restore takes the new
#                 daemon's pool worker, and the pool gets its next one only once the restore is done
#       staged-race  staged as crcudactl restore stages (its restore sent 50 ms after the stage, not
#                 waiting for it) while the worker's stage is held back 1 s before it starts
#                 (CRCUDA_TEST_STAGE_DELAY_MS): the restore waits for the stage and takes it, rather
#                 than restoring afresh beside it (the stage then failed: 'this worker serves session
#                 N already'; a CRIU restore failed so on the GPU)
#       staged-other  the staged checkpoint is another session's (more journal records): the restore
#                 says it does not continue it and restores afresh, exactly
# CKPT_BACKEND=cuda runs a case on the GPU machine's driver instead of the simulated device.
set -u
build=$1 case=$2
backend=${CKPT_BACKEND:-sim}
tmp=$(mktemp -d /tmp/crcuda-ckptd.XXXXXX)
chmod 755 "$tmp"
export CRCUDA_SOCKET=$tmp/crcudad.sock
export CRCUDA_SIM_KERNELS=$build/tests/programs/libcrcuda_test_kernels.so
ctl=$build/tests/ckpt-daemon/ckpt_ctl
client=$build/tests/ckpt-daemon/ckpt_client
store=$tmp/store
daemon_pid= client_pid= pid=

cleanup() {
	[ -n "$client_pid" ] && kill -9 "$client_pid" 2>/dev/null
	[ -n "$daemon_pid" ] && kill -9 "$daemon_pid" 2>/dev/null
	[ "${keep:-0}" = 1 ] || rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
	echo "FAIL: $*" >&2
	for f in "$tmp"/daemon*.log "$tmp/client.log"; do
		[ -f "$f" ] && { echo "--- $f" >&2; tail -40 "$f" >&2; }
	done
	exit 1
}

start_daemon() { # start_daemon LOGNAME [DAEMON ARGS...]
	local name=$1
	shift
	"$build/crcudad/crcudad" --backend "$backend" --socket "$CRCUDA_SOCKET" --foreground -v "$@" \
		>"$tmp/$name.out" 2>"$tmp/$name.log" &
	daemon_pid=$!
	for _ in $(seq 100); do
		grep -q ready "$tmp/$name.out" 2>/dev/null && return 0
		kill -0 "$daemon_pid" 2>/dev/null || fail "crcudad did not start"
		sleep 0.1
	done
	fail "crcudad not ready"
}

spawn_client() { # spawn_client READY GO LOG [ARGS...]: a client in the background, its pid in $spawned
	# An ASan build of libcrcuda needs the sanitizer runtimes first in the uninstrumented client.
	local preload ready=$1 go=$2 out=$3
	shift 3
	preload=$(ldd "$build/libcrcuda/libcuda.so.1" 2>/dev/null | awk '/lib(asan|ubsan)\.so/ {print $3}' | paste -sd: -)
	env LD_PRELOAD="$preload" ASAN_OPTIONS=detect_leaks=0 LD_LIBRARY_PATH="$build/libcrcuda" CKPT_SWAP_SOCK="$tmp/swap.sock" CRCUDA_REBIND_WAIT_MS=20000 \
		timeout 120 "$client" "$ready" "$go" "$@" >"$out" 2>&1 &
	spawned=$!
}

start_client() { # start_client [ARGS...]
	spawn_client "$tmp/ready" "$tmp/go" "$tmp/client.log" "$@"
	client_pid=$spawned
	for _ in $(seq 300); do
		if [ -f "$tmp/ready" ]; then
			# The program's own pid (the one above is timeout's): the daemon knows that one.
			pid=$(awk '/^pid/ {print $2}' "$tmp/ready")
			return 0
		fi
		kill -0 "$client_pid" 2>/dev/null || fail "the client exited early"
		sleep 0.1
	done
	fail "the client did not get ready"
}

finish_client() {
	touch "$tmp/go"
	wait "$client_pid"
	rc=$?
	client_pid=
	cat "$tmp/client.log"
	[ $rc = 0 ] || fail "the client failed (exit $rc)"
	grep -q "_client: OK" "$tmp/client.log" || fail "no OK from the client"
}

checkpoint() { # checkpoint: quiesce, checkpoint, commit; prints the id
	"$ctl" "$CRCUDA_SOCKET" quiesce "$pid" || fail "quiesce"
	"$ctl" "$CRCUDA_SOCKET" checkpoint "$pid" "$store" >&2 || fail "checkpoint"
	"$ctl" "$CRCUDA_SOCKET" commit "$pid" || fail "commit"
}

# restore_elsewhere ID [SID [race]]: the client makes a call (it parks, quiesced), its daemon dies, a new
# daemon (log daemon2) restores checkpoint ID (having staged checkpoint SID first, under the key the
# restore then gives; race: the restore sent while the stage is held back) and the client finishes
# there.
restore_elsewhere() {
	touch "$tmp/go"
	sleep 0.3
	kill -9 "$daemon_pid"
	wait "$daemon_pid" 2>/dev/null
	if [ "${3:-}" = race ]; then
		# The stage held 1 s at the worker; the restore sent 50 ms after it, not waiting (as crcudactl).
		CRCUDA_TEST_STAGE_DELAY_MS=1000 start_daemon daemon2
		"$ctl" "$CRCUDA_SOCKET" stage-race "$store" "$2" "$1" "$pid" "$tmp/swap.sock" || fail "stage-race"
	elif [ -n "${2:-}" ]; then
		start_daemon daemon2
		"$ctl" "$CRCUDA_SOCKET" stage-restore "$store" "$2" "$1" "$pid" "$tmp/swap.sock" || fail "stage-restore"
	else
		start_daemon daemon2
		"$ctl" "$CRCUDA_SOCKET" restore "$store" "$1" "$pid" "$tmp/swap.sock" || fail "restore"
	fi
	finish_client
}

# mutate_client STEP WHY: a --mutate client flips its byte; waited for 100 x STEP seconds, else fail WHY.
mutate_client() {
	touch "$tmp/mutate"
	for _ in $(seq 100); do [ -f "$tmp/mutate.done" ] && break; sleep "$1"; done
	[ -f "$tmp/mutate.done" ] || fail "$2"
}

# copied: the bytes the last checkpoint copied off the device (its stats in $tmp/stats)
ckpt_copied() {
	"$ctl" "$CRCUDA_SOCKET" quiesce "$pid" || fail "quiesce"
	"$ctl" "$CRCUDA_SOCKET" checkpoint "$pid" "$store" >"$tmp/stats" || fail "checkpoint"
	cat "$tmp/stats" >&2
	"$ctl" "$CRCUDA_SOCKET" commit "$pid" >"$tmp/id" || fail "commit"
	sed -n 's/.* \([0-9]*\) copied .*/\1/p' "$tmp/stats"
}

# damage_packs: one byte in the middle of every pack of device memory (not the module image's, a few
# KiB, which the replay reads: it would fail the restore itself, cleanly): chunks that no longer match
# their hashes. The 14 MiB of device memory compress to some 50 KiB. The byte is flipped, not set
# (compressed streams hold runs of 0xff).
damage_packs() {
	local f size byte
	for f in "$store"/packs/*.pack; do
		size=$(stat -c %s "$f")
		[ "$size" -gt 16384 ] || continue
		byte=$(od -An -tu1 -j $((size / 2)) -N1 "$f")
		printf "\\$(printf %03o $((byte ^ 0x5a)))" | dd of="$f" bs=1 seek=$((size / 2)) conv=notrunc status=none
	done
}

case $case in
corrupt)
	# Raw chunks: a byte flipped in a compressed one would not decode, which the store itself finds.
	CRCUDA_STORE_COMPRESS=off start_daemon daemon1
	start_client
	id=$(checkpoint) || exit 1
	"$ctl" "$CRCUDA_SOCKET" resume "$pid" || fail "resume"
	damage_packs
	start_daemon2() { # a second daemon beside the first (its own socket), with that environment
		env "$@" "$build/crcudad/crcudad" --backend "$backend" --socket "$tmp/d2.sock" --foreground -v \
			>"$tmp/daemon2.out" 2>"$tmp/daemon2.log" &
		daemon2_pid=$!
		for _ in $(seq 100); do grep -q ready "$tmp/daemon2.out" 2>/dev/null && return 0; sleep 0.1; done
		fail "the second crcudad not ready"
	}
	start_daemon2
	"$ctl" "$tmp/d2.sock" restore "$store" "$id" 999999 "$tmp/swap2.sock" 2>"$tmp/restore.err" &&
		fail "a restore from a damaged store succeeded"
	grep -q "differ from those checkpointed" "$tmp/daemon2.log" "$tmp/restore.err" ||
		fail "the device check did not find the damage: $(cat "$tmp/restore.err"; tail -5 "$tmp/daemon2.log")"
	grep -q "of [0-9]* chunks checked on the device" "$tmp/daemon2.log" &&
		fail "a damaged upload was reported done"
	kill "$daemon2_pid"
	wait "$daemon2_pid" 2>/dev/null
	start_daemon2 CRCUDA_RESTORE_VERIFY=host
	"$ctl" "$tmp/d2.sock" restore "$store" "$id" 999999 "$tmp/swap2.sock" 2>"$tmp/restore.err" &&
		fail "a restore from a damaged store succeeded (CRCUDA_RESTORE_VERIFY=host)"
	grep -q "differ from those checkpointed" "$tmp/daemon2.log" "$tmp/restore.err" &&
		fail "CRCUDA_RESTORE_VERIFY=host checked on the device"
	grep -qi "corrupt\|hash to" "$tmp/daemon2.log" "$tmp/restore.err" ||
		fail "the host check did not find the damage: $(cat "$tmp/restore.err"; tail -5 "$tmp/daemon2.log")"
	kill "$daemon2_pid"
	wait "$daemon2_pid" 2>/dev/null
	finish_client
	;;
lazy | lazy-corrupt)
	# Raw chunks: a byte flipped in a compressed one would not decode, which the store itself finds.
	CRCUDA_STORE_COMPRESS=off start_daemon daemon1
	start_client
	id=$(checkpoint) || exit 1
	[ "$case" = lazy-corrupt ] && damage_packs
	export CRCUDA_RESTORE_LAZY=1
	if [ "$case" = lazy ]; then
		restore_elsewhere "$id"
		grep -q "restored device memory resident" "$tmp/daemon2.log" || fail "the upload was not lazy"
	else
		touch "$tmp/go"
		sleep 0.3
		kill -9 "$daemon_pid"
		wait "$daemon_pid" 2>/dev/null
		start_daemon daemon2
		"$ctl" "$CRCUDA_SOCKET" restore "$store" "$id" "$pid" "$tmp/swap.sock" || fail "restore"
		wait "$client_pid" && fail "the client finished with a damaged store: $(cat "$tmp/client.log")"
		client_pid=
		grep -q "the session is lost" "$tmp/daemon2.log" || fail "no word of the failed upload in the log"
		grep -q "error" "$tmp/client.log" || fail "the client saw no error: $(cat "$tmp/client.log")"
	fi
	;;
background)
	export CRCUDA_TEST_DRAIN_DELAY_MS=1500
	start_daemon daemon1
	start_client --mutate "$tmp/mutate"
	"$ctl" "$CRCUDA_SOCKET" quiesce "$pid" || fail "quiesce"
	"$ctl" "$CRCUDA_SOCKET" checkpoint-bg "$pid" "$store" | tee "$tmp/stats" || fail "checkpoint"
	grep -q " snapshot " "$tmp/stats" && ! grep -q " 0 snapshot " "$tmp/stats" || fail "nothing was snapshotted"
	[ "$("$ctl" "$CRCUDA_SOCKET" commit "$pid")" = 0 ] || fail "the commit did not wait for the drain (id not 0)"
	"$ctl" "$CRCUDA_SOCKET" resume "$pid" || fail "resume"
	mutate_client 0.05 "the client did not run on while the checkpoint drained"
	[ "$("$ctl" - count "$store")" = 0 ] || fail "committed before the drain"
	id=$("$ctl" "$CRCUDA_SOCKET" commit-wait "$pid") || fail "commit-wait"
	[ "$id" -gt 0 ] || fail "commit-wait gave id $id"
	# The pattern as written before the checkpoint: the flipped byte came after it.
	"$ctl" - verify "$store" "$id" "$tmp/ready" || fail "the checkpoint holds memory written after it"
	# A second one whose client ends while it drains: committed all the same.
	"$ctl" "$CRCUDA_SOCKET" quiesce "$pid" || fail "quiesce 2"
	"$ctl" "$CRCUDA_SOCKET" checkpoint-bg "$pid" "$store" >/dev/null || fail "checkpoint 2"
	"$ctl" "$CRCUDA_SOCKET" commit "$pid" >/dev/null || fail "commit 2"
	"$ctl" "$CRCUDA_SOCKET" resume "$pid" || fail "resume 2"
	finish_client
	for _ in $(seq 100); do [ "$("$ctl" - count "$store")" = 2 ] && break; sleep 0.1; done
	[ "$("$ctl" - count "$store")" = 2 ] || fail "the second checkpoint was lost when its client ended"
	;;
pool-held)
	export CRCUDA_TEST_DRAIN_DELAY_MS=5000
	start_daemon daemon1
	start_client
	ready_workers() { grep -c "worker: ready in" "$tmp/daemon1.log"; }
	# The client's worker, and the pool's beside it.
	for _ in $(seq 100); do [ "$(ready_workers)" -ge 2 ] && break; sleep 0.05; done
	[ "$(ready_workers)" = 2 ] || fail "$(ready_workers) workers ready, expected the client's and the pool's"
	"$ctl" "$CRCUDA_SOCKET" quiesce "$pid" || fail "quiesce"
	"$ctl" "$CRCUDA_SOCKET" checkpoint-bg "$pid" "$store" >/dev/null || fail "checkpoint"
	"$ctl" "$CRCUDA_SOCKET" commit "$pid" >/dev/null || fail "commit"
	"$ctl" "$CRCUDA_SOCKET" resume "$pid" || fail "resume"
	spawn_client "$tmp/ready2" "$tmp/go2" "$tmp/client2.log"
	second=$spawned
	for _ in $(seq 100); do [ -f "$tmp/ready2" ] && break; sleep 0.05; done
	[ -f "$tmp/ready2" ] || fail "the second client did not start: $(cat "$tmp/client2.log")"
	sleep 1 # two turns of the front's tending (every 0.5 s)
	[ "$(ready_workers)" = 2 ] || fail "a worker was started while the checkpoint drained"
	"$ctl" "$CRCUDA_SOCKET" commit-wait "$pid" >/dev/null || fail "commit-wait"
	for _ in $(seq 60); do [ "$(ready_workers)" = 3 ] && break; sleep 0.05; done
	[ "$(ready_workers)" = 3 ] || fail "the pool was not topped up after the drain ($(ready_workers) workers ready)"
	touch "$tmp/go2"
	wait "$second" || fail "the second client failed: $(cat "$tmp/client2.log")"
	finish_client
	;;
pool-restore)
	start_daemon daemon1
	start_client
	id=$(checkpoint) || exit 1
	touch "$tmp/go"
	sleep 0.3
	kill -9 "$daemon_pid"
	wait "$daemon_pid" 2>/dev/null
	CRCUDA_TEST_REPLAY_DELAY_MS=2000 start_daemon daemon2
	ready_workers() { grep -c "worker: ready in" "$tmp/daemon2.log"; }
	for _ in $(seq 100); do [ "$(ready_workers)" -ge 1 ] && break; sleep 0.05; done
	[ "$(ready_workers)" = 1 ] || fail "$(ready_workers) workers ready, expected the pool's"
	"$ctl" "$CRCUDA_SOCKET" restore "$store" "$id" "$pid" "$tmp/swap.sock" &
	restorer=$!
	sleep 1.2 # two turns of the front's tending (every 0.5 s), the replay still held
	[ "$(ready_workers)" = 1 ] || fail "a worker was started while a restore replayed"
	wait "$restorer" || fail "restore"
	for _ in $(seq 60); do [ "$(ready_workers)" = 2 ] && break; sleep 0.05; done
	[ "$(ready_workers)" = 2 ] || fail "the pool was not topped up after the restore ($(ready_workers) workers ready)"
	finish_client
	;;
incremental)
	start_daemon daemon1
	start_client --mutate "$tmp/mutate"
	c1=$(ckpt_copied) || exit 1
	"$ctl" "$CRCUDA_SOCKET" resume "$pid" || fail "resume"
	mutate_client 0.1 "the client did not change its memory"
	c2=$(ckpt_copied) || exit 1
	"$ctl" "$CRCUDA_SOCKET" resume "$pid" || fail "resume"
	c3=$(ckpt_copied) || exit 1
	id=$(cat "$tmp/id")
	echo "copied: first $c1, after one changed chunk $c2, unchanged $c3"
	[ "$c3" -lt 4096 ] || fail "nothing changed, yet $c3 bytes were copied (only globals should be)"
	[ $((c2 - c3)) = 4194304 ] || fail "one 4 MiB chunk changed, yet $((c2 - c3)) bytes more were copied"
	[ "$c1" -gt $((12 << 20)) ] || fail "the first checkpoint copied only $c1 bytes"
	grep -q "digests" "$tmp/daemon1.log" || fail "no digest line in the daemon log"
	restore_elsewhere "$id"
	;;
staged | staged-lazy | staged-race)
	start_daemon daemon1
	start_client --mutate "$tmp/mutate"
	id1=$(checkpoint) || exit 1
	"$ctl" "$CRCUDA_SOCKET" resume "$pid" || fail "resume"
	mutate_client 0.1 "the client did not change its memory"
	id2=$(checkpoint) || exit 1
	[ "$case" = staged-lazy ] && export CRCUDA_RESTORE_LAZY=1 # the second daemon's
	restore_elsewhere "$id2" "$id1" "${case#staged-}"
	grep -q "staged checkpoint $id1 " "$tmp/daemon2.log" || fail "checkpoint $id1 was not staged"
	grep -q "restored checkpoint $id2 (staged ahead) " "$tmp/daemon2.log" ||
		fail "the restore did not take the staged worker: $(grep "session" "$tmp/daemon2.log" | tail -3)"
	# The staged upload had all of device memory; the restore's, the one changed chunk.
	grep "uploaded" "$tmp/daemon2.log" | sed 's/^/the uploads: /'
	[ "$(grep -c "uploaded" "$tmp/daemon2.log")" = 2 ] || fail "not two uploads (the staged one's and the restore's)"
	last=$(grep "uploaded" "$tmp/daemon2.log" | tail -1)
	case $last in *" of 1 chunks "*) ;; *) fail "the restore uploaded more than the changed chunk: $last" ;; esac
	if [ "$case" = staged-lazy ]; then
		# The stage answered with its upload going on.
		grep -q "staged checkpoint $id1 .*, its device memory still uploading" "$tmp/daemon2.log" ||
			fail "the stage waited for its upload: $(grep "staged checkpoint" "$tmp/daemon2.log")"
	fi
	;;
staged-other)
	start_daemon daemon1
	start_client --churn 3
	id1=$(checkpoint) || exit 1
	"$ctl" "$CRCUDA_SOCKET" resume "$pid" || fail "resume"
	finish_client
	rm -f "$tmp/go" "$tmp/ready"
	start_client
	id2=$(checkpoint) || exit 1
	restore_elsewhere "$id2" "$id1"
	grep -q "staged checkpoint $id1 " "$tmp/daemon2.log" || fail "checkpoint $id1 was not staged"
	grep -q "checkpoint $id2 does not continue the staged one (.*journal records.*): restored afresh" "$tmp/daemon2.log" ||
		fail "the restore did not say it restored afresh: $(grep "session" "$tmp/daemon2.log" | tail -3)"
	grep -q "restored checkpoint $id2 " "$tmp/daemon2.log" || fail "no restore line in the daemon log"
	;;
collected)
	start_daemon daemon1
	start_client
	c1=$(ckpt_copied) || exit 1
	id1=$(cat "$tmp/id")
	"$ctl" "$CRCUDA_SOCKET" resume "$pid" || fail "resume"
	"$ctl" - drop "$store" "$id1" || fail "drop"
	c2=$(ckpt_copied) || exit 1
	echo "copied: first $c1, after it was collected $c2"
	[ "$c2" = "$c1" ] || fail "the first checkpoint's chunks are gone, yet only $c2 of $c1 bytes were copied"
	restore_elsewhere "$(cat "$tmp/id")"
	;;
restore)
	start_daemon daemon1
	start_client
	id=$(checkpoint) || exit 1
	"$ctl" - verify "$store" "$id" "$tmp/ready" || fail "the manifest does not match the device contents"
	restore_elsewhere "$id"
	grep -q "restored checkpoint $id" "$tmp/daemon2.log" || fail "no restore line in the daemon log"
	# A freed allocation and a destroyed stream (two records each) are not replayed.
	grep -q "(10 of 14 journal records replayed" "$tmp/daemon2.log" || fail "objects destroyed before the checkpoint were replayed"
	# The allocations' chunks carry device digests: read unhashed, checked on the device.
	grep -Eq " [1-9][0-9]* of [0-9]+ chunks checked on the device" "$tmp/daemon2.log" ||
		fail "no chunk was checked on the device: $(grep uploaded "$tmp/daemon2.log")"
	;;
resume)
	start_daemon daemon1
	start_client
	id=$(checkpoint) || exit 1
	"$ctl" - verify "$store" "$id" "$tmp/ready" || fail "the manifest does not match"
	"$ctl" "$CRCUDA_SOCKET" resume "$pid" || fail "resume"
	# A second checkpoint of the same session (journal appended, chunks shared).
	id2=$(checkpoint) || exit 1
	[ "$id2" -gt "$id" ] || fail "second checkpoint id $id2"
	"$ctl" "$CRCUDA_SOCKET" resume "$pid" || fail "resume"
	finish_client
	;;
busy)
	start_daemon daemon1
	start_client --busy
	sleep 0.5
	id=$(checkpoint) || exit 1
	"$ctl" - verify "$store" "$id" "$tmp/ready" || fail "the manifest does not match"
	"$ctl" "$CRCUDA_SOCKET" resume "$pid" || fail "resume"
	finish_client
	grep -q "busy rounds [1-9]" "$tmp/client.log" || fail "the busy thread made no calls"
	;;
backlog)
	start_daemon daemon1
	client=$build/tests/ckpt-daemon/backlog_client start_client
	checkpoint >/dev/null || exit 1
	"$ctl" "$CRCUDA_SOCKET" resume "$pid" || fail "resume"
	finish_client
	grep -q "backlog_client: OK" "$tmp/client.log" || fail "launches were lost or run twice"
	;;
deferred)
	start_daemon daemon1
	start_client --deferred
	id=$(checkpoint) || exit 1
	restore_elsewhere "$id"
	grep -q "error came at the synchronisation" "$tmp/client.log" || fail "the launch was not posted: nothing tested"
	;;
abort)
	start_daemon daemon1
	start_client
	"$ctl" "$CRCUDA_SOCKET" quiesce "$pid" || fail "quiesce"
	"$ctl" "$CRCUDA_SOCKET" checkpoint "$pid" "$store" || fail "checkpoint"
	"$ctl" "$CRCUDA_SOCKET" abort "$pid" || fail "abort"
	[ "$("$ctl" - count "$store")" = 0 ] || fail "a manifest after abort"
	"$ctl" "$CRCUDA_SOCKET" commit "$pid" 2>/dev/null && fail "commit after abort succeeded"
	"$ctl" "$CRCUDA_SOCKET" resume "$pid" || fail "resume"
	finish_client
	;;
churn)
	start_daemon daemon1
	start_client --churn 1500
	id=$(checkpoint) || exit 1
	restore_elsewhere "$id"
	# 1500 x 7 calls made 1500 x 6 records (the event record is not one); the journal kept far fewer.
	records=$(sed -n 's/.*(10 of \([0-9]*\) journal records replayed.*/\1/p' "$tmp/daemon2.log")
	[ -n "$records" ] || fail "no restore line with 10 records replayed in the daemon log"
	[ "$records" -lt 6000 ] || fail "the journal kept $records records: dead pairs were not dropped"
	echo "journal: $records records kept of $((1500 * 6 + 14))"
	;;
tcp)
	port=$((20000 + RANDOM % 20000))
	echo "tok-$RANDOM$RANDOM" >"$tmp/token"
	chmod 600 "$tmp/token"
	start_daemon daemon1 --listen "127.0.0.1:$port" --token-file "$tmp/token"
	export CRCUDA_REMOTE=127.0.0.1:$port CRCUDA_TOKEN_FILE=$tmp/token
	start_client
	unset CRCUDA_REMOTE CRCUDA_TOKEN_FILE
	grep -q "pid $pid .*TCP" "$tmp/daemon1.log" || fail "the client's session is not over TCP"
	for round in 1 2; do
		id=$(checkpoint) || exit 1
		"$ctl" - verify "$store" "$id" "$tmp/ready" || fail "round $round: the manifest does not match"
		"$ctl" "$CRCUDA_SOCKET" resume "$pid" || fail "round $round: resume"
	done
	finish_client
	;;
background-killed)
	export CRCUDA_TEST_DRAIN_DELAY_MS=3000
	start_daemon daemon1
	start_client
	id=$(checkpoint) || exit 1
	"$ctl" "$CRCUDA_SOCKET" resume "$pid" || fail "resume"
	"$ctl" "$CRCUDA_SOCKET" quiesce "$pid" || fail "quiesce"
	"$ctl" "$CRCUDA_SOCKET" checkpoint-bg "$pid" "$store" >/dev/null || fail "checkpoint"
	[ "$("$ctl" "$CRCUDA_SOCKET" commit "$pid")" = 0 ] || fail "the commit did not wait for the drain"
	"$ctl" "$CRCUDA_SOCKET" resume "$pid" || fail "resume"
	worker=$(sed -n 's/.*session 1: pid .* -> worker \([0-9]*\).*/\1/p' "$tmp/daemon1.log" | head -1)
	[ -n "$worker" ] || fail "no worker pid in the log"
	kill -9 "$worker" "$daemon_pid"
	wait "$daemon_pid" 2>/dev/null
	daemon_pid=
	sleep 3.5 # past the drain's delay: a worker that survived would commit by now
	[ "$("$ctl" - count "$store")" = 1 ] || fail "expected exactly one checkpoint"
	"$ctl" - verify "$store" "$id" "$tmp/ready" || fail "the first checkpoint is damaged"
	kill -9 "$client_pid" 2>/dev/null
	;;
killed)
	start_daemon daemon1
	start_client
	id=$(checkpoint) || exit 1
	"$ctl" "$CRCUDA_SOCKET" resume "$pid" || fail "resume"
	"$ctl" "$CRCUDA_SOCKET" quiesce "$pid" || fail "quiesce"
	"$ctl" "$CRCUDA_SOCKET" checkpoint "$pid" "$store" || fail "checkpoint"
	# Killed between the copy and the commit: nothing new is visible, the first checkpoint is whole.
	kill -9 "$daemon_pid"
	wait "$daemon_pid" 2>/dev/null
	daemon_pid=
	[ "$("$ctl" - count "$store")" = 1 ] || fail "expected exactly one checkpoint"
	"$ctl" - verify "$store" "$id" "$tmp/ready" || fail "the first checkpoint is damaged"
	kill -9 "$client_pid" 2>/dev/null
	;;
*)
	fail "unknown case $case"
	;;
esac
echo "PASS: $case"
