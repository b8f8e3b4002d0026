#!/usr/bin/env bash
# Checkpoint/restore through real CRIU and the crcuda plugin, on the simulated device, zdtm-style: set
# up, signal ready, checkpoint/restore, verify. Every case checks the program's own result (state_app's
# checksum over its device memory) bit for bit against an uninterrupted run under the layer.
#   cr.sh BUILD CASE
# CASE: basic          checkpoint mid-run (async steps in flight), kill, restore, finish
#       tree           a parent (a shell, no CUDA of its own) with two programs under the layer: the
#                      parent checkpointed (both sessions quiesced, copied and committed in one dump),
#                      killed, restored from either client's checkpoint as one tree with the same pids;
#                      both finish exact, twice
#       twice          two --leave-running checkpoints while it runs (device memory snapshotted and
#                      copied to the store while it rewrites it); the original finishes; then the
#                      earlier and the later one are each restored and finish
#       restore-twice  one checkpoint restored twice (one after the other)
#       lazy           a daemon that restores lazily (CRCUDA_RESTORE_LAZY=1): crcudactl restore stages
#                      the checkpoint, the worker answers the stage once the journal is replayed and
#                      uploads while CRIU restores the process; the plugin's restore takes that worker
#                      and the program finishes exactly
#       named-sem      a program holding a POSIX named semaphore under its name (state_app --named-sem,
#                      as Python's spawned multiprocessing workers do): its mapping is glibc's unlinked
#                      temporary file, which CRIU dumps only as a link remap; a --leave-running
#                      checkpoint (its remap stays), then checkpoint, kill, restore, finish exact with
#                      the semaphore's count carried (once: CRIU removes its link at the restore, so a
#                      second restore fails and says why); then the first restores and finishes too
#       named-sem-rm   the link remaps of named-sem's checkpoints go with them: a --leave-running
#                      checkpoint and a checkpoint of the program, the first removed (`crcudactl rm`,
#                      never restored): its remap goes, the second's and the semaphore stay, and the
#                      second restores and finishes exact; its remap used up, a --leave-running
#                      checkpoint of the restored program, and a link of the semaphore under the freed
#                      remap's name (as a later dump may make), then rm of the restored checkpoint:
#                      both stay; a checkpoint of another program
#                      whose crcudactl and criu are killed before the commit leaves an image directory
#                      no checkpoint names, with a remap: `store gc` removes both, and no other remap
#       pid-taken      the checkpointed pid and its last thread's id each taken by another program (a
#                      sleep started under it) when the restore begins: the restore names both, waits
#                      for their end and restores exact (CRIU gives every thread its id back)
#       child          a program with a child process without CUDA (state_app --child, as a
#                      DataLoader's CPU workers): the checkpoint names every pid of the dumped tree
#                      (crcuda.tree.pids), which the restore waits to be free; the child is restored
#                      with its pid and the program finishes exact (it kills and reaps the child)
#       deleted-shm    a program mapping 8 MiB of /dev/shm it unlinked at once (state_app --deleted-shm,
#                      as Python's multiprocessing heap and PyTorch's shared CPU tensors are): CRIU
#                      dumps it as a ghost file, above its default 1 MiB limit only with crcudactl's
#                      --ghost-limit; checkpoint, kill, restore, finish exact with the file's words
#       netns          restore in another network namespace ("another node"): a daemon there, by its
#                      unix socket and then over TCP (--remote with a token)
#       clone          one checkpoint restored twice, both copies alive at once on one daemon, each in
#                      a worker of its own with the same device VA range (the second copy's pid is
#                      taken: it is restored in a pid namespace of its own); both finish; the second
#                      copy, checkpointed (idle, right after its restore, and again while it runs),
#                      restores and finishes
#       window         restore after the daemon was restarted with another --va-base: the checkpoint's
#                      worker takes the checkpoint's own range
#       remote-twice   restore --remote twice, the first copy alive: the second restores beside it (a
#                      worker of its own); the first finishes; later the checkpoint restores there again
#       devices        a program on two devices (a context, module, stream and memory on each; two
#                      simulated devices): checkpointed, restored as it was and with its devices
#                      swapped (--gpu 1,0); --gpu 5, --gpu 1 (device 1 would need a GPU 2) and
#                      --gpu 7,0 fail before anything is restored, saying why, and leave the
#                      checkpoint usable; the same by the GPUs' UUIDs (swapped, an unknown one, a
#                      mix with an ordinal, one named twice)
#       tcp-striped    a TCP session whose large copies are striped over bulk connections (big_copies):
#                      --leave-running, and kill + restore --remote: exact, bulk connections open again
#       tcp-certs      the same over TLS with certificates (crcudad --tls-*, crcudactl --tls-*):
#                      --leave-running, kill + restore --remote
#       tcp            a program whose session is TCP to a crcudad --listen (its GPU is remote): a
#                      checkpoint at an address where no daemon answers fails and the program runs on;
#                      --leave-running, it finishes; checkpoint, kill, restore --remote onto that daemon,
#                      and onto a local one over unix; kill -9 of criu while its session is parked
#                      without a connection (detached), at the device and criu steps: it takes its
#                      session back and finishes
#       capture        a checkpoint while the program has a stream capture open (state_app --graph
#                      --ready-in-capture) that does not end: refused after 2 s, saying why, and the
#                      program runs on to the uninterrupted checksum (a synchronise in the quiesce would
#                      invalidate the capture)
#       capture-wait   the same, but the capture ends 0.5 s after the checkpoint began: the checkpoint
#                      waits for its end, kills the program, and the restored program finishes
#       pin-race       a checkpoint inside cuMemAllocHost, between the region's registration with the
#                      daemon and its listing in the client (CRCUDA_TEST_PIN_PAUSE): the restored
#                      session gets the region (the program's copy into it and cuMemFreeHost work)
#       kill9-ctl|kill9-criu|kill9-daemon
#                      kill -9 of crcudactl, criu or the daemon at each step of a checkpoint and of a
#                      restore: the previous checkpoint still restores and verifies
#       enospc         the store on a small tmpfs (a mount namespace of the test's own), filled after a
#                      first checkpoint: checkpoints of the idle program (CRIU's images need the room)
#                      and of the running one (its pack files), with and without --leave-running, fail
#                      with one line naming "No space left on device"; the program runs on and finishes
#                      exactly, the store keeps its checkpoints and verifies, no image directory stays;
#                      with room again a checkpoint succeeds; the first checkpoint restores exactly
#       eio            the same with EIO from the worker's pack writes (mid-pack) and from CRIU's image
#                      writes (tests/faults/iofault.c, an LD_PRELOAD shim, armed by a file)
#       fsync          every write and sync under the store traced: the commit (LMDB's last write)
#                      comes after the fsync of every pack file, the packs directory, every CRIU image
#                      and the image directory; an fsync failing on a pack file, the plugin's image or
#                      CRIU's images refuses the checkpoint, the program running on; one failing in
#                      LMDB's commit too (CRIU leaves the program stopped; crcudactl kills it only once
#                      the commit is done); the previous checkpoint stays the latest and restores
#                      exactly
#       restore-fails  a restore failing half-way (EIO reading the pack files after the journal's replay;
#                      the restoring worker killed while its read hangs), beside another program: a
#                      clear error, nothing of the half-restored program stays, the other program runs
#                      on and finishes exactly, the checkpoint is unchanged and then restores exactly
#       export         a checkpoint exported (to a file and to a pipe: the same bytes; into a pipe
#                      closed early: a clear error), the source node's daemon and store then gone; a
#                      truncated export, one with a byte flipped in its middle (a chunk) and one with a
#                      byte flipped in its info record (which only the trailer's checksum covers) each
#                      fail import with a one-line reason and leave the target store without a
#                      checkpoint or CRIU images; the export imported from a pipe into an empty store
#                      and restored from there by a daemon of its own (in another network namespace,
#                      where one can be made)
#       images         plain criu dump/restore with the plugin and plugin.conf's state = images: the
#                      device state in CRIU's image directory (crcuda-PID.crcx; none for crcudactl
#                      checkpoint's images in the store; a failed export said in one line, the
#                      checkpoint committed all the same); the store wiped and
#                      the daemon restarted; a truncated device state file refused in one line; the
#                      restore imports it into plugin.conf's store (CRCUDA_STORE, which the dump
#                      used, unset) and the program finishes exact
#       images-tree    the tree case's shell and two programs dumped by plain criu with state = images
#                      (no device state for the shell, no error for it), store wiped, daemon
#                      restarted, one restore imports both and both finish exact
# Needs root and CRIU (.deps/criu): exit 77 otherwise.
# CR_PREFIX: crcudactl and crcudad of an installed tree (tests/install), which find their plugin
# themselves; the programs are still the build tree's. CR_CRIU_FROM_PATH=1: crcudactl is not told
# which criu (CRCUDA_CRIU unset): it must find one on $PATH.
set -u
build=$1 case=$2
ctl=$build/crcudactl/crcudactl
crcudad=$build/crcudad/crcudad
plugin=$build/criu-plugin/plugin/crcuda_plugin.so
if [ -n "${CR_PREFIX:-}" ]; then
	ctl=$CR_PREFIX/bin/crcudactl crcudad=$CR_PREFIX/bin/crcudad plugin=""
fi
progs=$build/tests/programs
# CR_APP: another program with state_app's options and checksum line (tests/cudart/state_rt, built
# with static or shared cudart), with CR_SIM_KERNELS naming its host kernels. CR_APP_EXTRA: more
# options for every run of it (state_app --graph: each step one launch of a captured CUDA graph).
app_bin=${CR_APP:-$progs/state_app}
top=$(cd "$(dirname "$0")/../.." && pwd)

skip() { echo "SKIP: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "needs root (CRIU)"
# enospc: the store on a tmpfs of the test's own, mounted in a mount namespace of its own (nothing
# leaks out, nothing stays mounted after it): the whole test runs there.
if [ "$case" = enospc ] && [ -z "${CR_IN_MNTNS:-}" ]; then
	unshare -m --propagation private true 2>/dev/null || skip "no mount namespace (unshare -m)"
	CR_IN_MNTNS=1 exec unshare -m --propagation private "$0" "$@"
fi
criu=${CRCUDA_CRIU:-$top/.deps/criu/bin/criu}
[ -x "$criu" ] || skip "no CRIU at $criu (scripts/build-criu.sh)"
[ -z "$plugin" ] || [ -f "$plugin" ] || skip "the CRIU plugin was not built"

# Descriptors inherited from ctest (its log pipes) would be dumped with the program and break the
# restore: only stdin/out/err go on.
for fd in /proc/$$/fd/*; do
	fd=${fd##*/}
	[ "$fd" -gt 2 ] 2>/dev/null && eval "exec $fd>&-"
done

tmp=$(mktemp -d /tmp/crcuda-cr.XXXXXX)
sock=$tmp/d/crcudad.sock
log=$tmp/d/crcudad.log
store=$tmp/store
export CRCUDA_SIM_KERNELS=${CR_SIM_KERNELS:-$progs/libcrcuda_test_kernels.so} CRCUDA_SOCKET=$sock CRCUDA_STORE=$store
export CRCUDA_CRIU=$criu
[ "${CR_CRIU_FROM_PATH:-}" = 1 ] && unset CRCUDA_CRIU
unset CRCUDA_REMOTE CRCUDA_TOKEN CRCUDA_TOKEN_FILE CRCUDA_LIBDIR CRCUDAD CRCUDA_DAEMON
read -r -a app_extra <<<"${CR_APP_EXTRA:-}"
app_args=(--mb 8 --chunks 4 --steps 24 "${app_extra[@]}")
# tcp-striped: big_copies (its checksum line is state_app's), large copies striped over 4 bulk connections
# (1 MiB and larger, 64 KiB pieces) wherever its session is TCP.
if [ "$case" = tcp-striped ]; then
	app_bin=$progs/big_copies app_args=(--mb 6 --rounds 3)
	export CRCUDA_TLS_STREAMS=4 CRCUDA_TLS_STRIPE_MIN=1048576 CRCUDA_TLS_STRIPE_PIECE=65536
fi
backend=${CR_BACKEND:-sim} # CR_BACKEND=cuda: the basic, twice, capture and fault cases on a GPU
run_opts=(--backend "$backend" --idle-exit 60) # start_app's daemon
pids=() # the programs (original and restored share a pid)
extra_daemons=()
shm_inodes=() # files of /dev/shm (a semaphore and CRIU's link remaps of it) that go at the end
ns=""
ok=0

# The daemons of this test, the first one and those restores started beside it (their own logs), as
# their logs name them: only pids that are still such a daemon here (one started in a pid namespace
# logs its pid there).
daemon_pids() {
	local f p
	for f in "$log" "$sock".*.log; do
		[ -f "$f" ] && sed -n 's/^([^)]*) \([0-9]*\) crcudad: serving on.*/\1/p' "$f"
	done | while read -r p; do grep -qas -- "$tmp/d/" "/proc/$p/cmdline" && echo "$p"; done
}
cleanup() {
	for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
	for p in $(daemon_pids) "${extra_daemons[@]}"; do kill -9 "$p" 2>/dev/null; done
	[ -n "$ns" ] && ip netns del "$ns" 2>/dev/null
	mountpoint -q "$tmp/fs" 2>/dev/null && umount -l "$tmp/fs"
	for i in "${shm_inodes[@]}"; do find /dev/shm -maxdepth 1 -inum "$i" -delete; done
	if [ $ok = 1 ]; then rm -rf "$tmp"; else echo "cr: logs kept in $tmp" >&2; fi
}
trap cleanup EXIT
fail() {
	echo "FAIL ($case): $*" >&2
	[ -f "$log" ] && { echo "--- daemon log (last lines)" >&2; tail -n 25 "$log" >&2; }
	exit 1
}
wait_for() { # wait_for SECONDS COMMAND...
	local i n=$(($1 * 20))
	shift
	for ((i = 0; i < n; i++)); do "$@" && return 0; sleep 0.05; done
	return 1
}
# Gone, or a zombie that PID 1 has not reaped yet.
gone() { [ ! -e "/proc/$1" ] || grep -q '^State:[[:space:]]*Z' "/proc/$1/status" 2>/dev/null; }
checksum() { sed -n 's/.*checksum=\([0-9a-f]*\).*/\1/p' "$1"; }

# The reference: the same run, never interrupted.
ref=$(timeout 120 "$ctl" run --backend "$backend" --idle-exit 60 -- "$app_bin" "${app_args[@]}" | checksum /dev/stdin)
[ -n "$ref" ] || fail "the uninterrupted reference run failed"

# start_app NAME [ARGS...]: state_app under the layer in its own session (CRIU needs no --shell-job),
# stdout/stderr to files, paused at its ready step until NAME/go exists. Sets $app (its pid) and $dir.
start_app() {
	dir=$tmp/$1
	shift
	mkdir -p "$dir"
	setsid "$ctl" run "${run_opts[@]}" -- "$app_bin" "${app_args[@]}" --ready-file "$dir/ready" \
		--go-file "$dir/go" "$@" </dev/null >"$dir/out" 2>"$dir/err" &
	app=$!
	disown "$app"
	pids+=("$app")
	wait_for 60 test -e "$dir/ready" || fail "the program did not get ready: $(cat "$dir/err")"
}

# checkpoint PID [OPTIONS...]: prints the checkpoint id; remembers the sizes of the program's files
# (CRIU checks them at restore: they must be as they were at the checkpoint).
checkpoint() {
	local pid=$1 out id
	shift
	out=$(timeout 120 "$ctl" --json checkpoint "$@" "$pid" 2>"$tmp/ckpt.err") ||
		fail "checkpoint of $pid failed: $(cat "$tmp/ckpt.err")"
	id=$(echo "$out" | sed -n 's/^  "id": \([0-9]*\),*$/\1/p')
	[ -n "$id" ] || fail "no checkpoint id in: $out"
	echo "$out" >"$tmp/ckpt$id.json"
	stat -c %s "$dir/out" >"$tmp/ckpt$id.out.size"
	stat -c %s "$dir/err" >"$tmp/ckpt$id.err.size"
	echo "$id"
}

# restore ID [OPTIONS...]: the program's files back to their size at the checkpoint, then restore.
restore() {
	local id=$1 out
	shift
	truncate -s "$(cat "$tmp/ckpt$id.out.size")" "$dir/out"
	truncate -s "$(cat "$tmp/ckpt$id.err.size")" "$dir/err"
	out=$(timeout 120 "$ctl" restore "$@" "$id" 2>"$tmp/restore.err") ||
		fail "restore of checkpoint $id failed: $(cat "$tmp/restore.err")"
	echo "$out" | sed -n 's/.* as pid \([0-9]*\) .*/\1/p'
}

# finish PID: lets the (restored) program go on, waits for its end, compares its checksum.
finish() {
	local pid=$1 what=$2 got
	touch "$dir/go"
	wait_for 120 gone "$pid" || fail "$what: pid $pid did not finish"
	got=$(checksum "$dir/out")
	[ "$got" = "$ref" ] || fail "$what: checksum '$got', uninterrupted run: $ref ($(cat "$dir/err"))"
	echo "cr: $what: checksum $got = uninterrupted run"
	rm -f "$dir/go"
}

# The first daemon (not those beside it) has no session of pid $1.
sessions_of() { "$ctl" ls | grep -c "^[0-9]* *$1 "; }
one_session_of() { [ "$(sessions_of "$1")" = 1 ]; }

# Kills (-9) and waits for a program that a failed step left frozen or parked.
reap() { kill -9 "$1" 2>/dev/null; wait_for 30 gone "$1" || fail "pid $1 does not die"; }

# The control interface is another component's; until it is there, say so and skip.
probe_ctl() {
	start_app probe
	if ! out=$(timeout 60 "$ctl" checkpoint "$app" 2>&1); then
		if echo "$out" | grep -q "not built yet"; then
			reap "$app"
			skip "the daemon's control interface (common/ctl.c) is not built yet"
		fi
		fail "checkpoint failed: $out"
	fi
	wait_for 30 gone "$app" || fail "the program still runs after a checkpoint without --leave-running"
	rm -rf "$store"
}
probe_ctl

# A daemon listening on 127.0.0.1:$port with a token ($tmp/token), log $tmp/r.log: "another host".
# Extra arguments go to crcudad.
start_tcp_daemon() {
	port=$((20000 + RANDOM % 20000))
	echo "tok-$RANDOM$RANDOM" >"$tmp/token"
	chmod 600 "$tmp/token"
	"$crcudad" --backend sim --socket "$tmp/r/crcudad.sock" --listen "127.0.0.1:$port" \
		--token-file "$tmp/token" --foreground -v "$@" >"$tmp/r.out" 2>"$tmp/r.log" &
	extra_daemons+=($!)
	disown $!
	wait_for 30 grep -q ready "$tmp/r.out" || fail "no TCP daemon: $(cat "$tmp/r.log")"
}

# The store's checkpoint ids, one line.
store_ids() { "$ctl" store ls 2>/dev/null | awk 'NR > 1 { printf "%s ", $1 }'; }
# fault_ckpt PID WHAT PATTERN [OPTIONS...]: a checkpoint under a fault must fail, its first line of
# error saying why (PATTERN, an extended regex); the program runs on; the store is as it was: the
# same checkpoints, every chunk and checkpoint whole (store verify), no pack file or image directory
# left behind, the latest checkpoint inspects.
fault_ckpt() {
	local pid=$1 what=$2 pat=$3 ids dirs first
	shift 3
	ids=$(store_ids)
	dirs=$(ls "$store/criu" | sort | tr '\n' ' ')
	mkdir -p "$tmp/ckpt-tmp"
	if TMPDIR=$tmp/ckpt-tmp timeout 120 "$ctl" checkpoint "$@" "$pid" >"$tmp/fault.out" 2>"$tmp/fault.err"; then
		fail "$what: the checkpoint succeeded: $(cat "$tmp/fault.out")"
	fi
	# crcudactl's own files (CRIU's log, the plugin's report) went, with the image directory.
	[ -z "$(ls -A "$tmp/ckpt-tmp")" ] || fail "$what: crcudactl left $(ls "$tmp/ckpt-tmp") in TMPDIR"
	first=$(head -n 1 "$tmp/fault.err")
	echo "$first" | grep -Eq "$pat" || fail "$what: the first line does not say why ($pat): $(cat "$tmp/fault.err")"
	echo "cr: $what: $first"
	gone "$pid" && fail "$what: the program did not run on: $(cat "$tmp/fault.err")"
	grep -q "^State:[[:space:]]*[RSD]" "/proc/$pid/status" ||
		fail "$what: the program is not running: $(grep State "/proc/$pid/status")"
	[ "$(store_ids)" = "$ids" ] || fail "$what: the store's checkpoints changed: '$ids' -> '$(store_ids)'"
	[ "$(ls "$store/criu" | sort | tr '\n' ' ')" = "$dirs" ] ||
		fail "$what: image directories left behind: $(ls "$store/criu")"
	"$ctl" store verify >"$tmp/verify" 2>&1 || fail "$what: store verify: $(cat "$tmp/verify")"
	grep -q " 0 problems, 0 orphan packs" "$tmp/verify" || fail "$what: pack files left behind: $(cat "$tmp/verify")"
	last=${ids% }
	"$ctl" inspect "${last##* }" >/dev/null 2>"$tmp/inspect.err" || fail "$what: inspect ${last##* }: $(cat "$tmp/inspect.err")"
}
# restart_daemon [ENV...]: the test's daemon killed and started again with that environment (the
# programs' sessions end with it).
restart_daemon() {
	local p
	for p in $(daemon_pids); do
		kill -9 "$p"
		wait_for 30 gone "$p" || fail "daemon $p does not die"
	done
	env "$@" "$crcudad" --backend "$backend" --socket "$sock" --idle-exit 60 --foreground -v >"$tmp/daemon.out" 2>>"$log" &
	disown $!
	wait_for 30 grep -qs ready "$tmp/daemon.out" || fail "the daemon did not start again: $(tail -5 "$log")"
	rm -f "$tmp/daemon.out"
}
shim=$build/tests/faults/libcrcuda_iofault.so
nospc="[Nn]o space left on device"
eio="[Ii]nput/output error"

case $case in
basic)
	start_app basic
	id=$(checkpoint "$app")
	wait_for 30 gone "$app" || fail "the program still runs after the checkpoint"
	"$ctl" ls >"$tmp/ls" || fail "crcudactl ls"
	grep -q "^$id " "$tmp/ls" || fail "checkpoint $id not listed: $(cat "$tmp/ls")"
	"$ctl" --json inspect "$id" >"$tmp/inspect" || fail "crcudactl inspect $id"
	# Managed memory is the process's own (shared with the daemon): CRIU carries it, not the store.
	[[ " ${app_extra[*]} " == *" --managed "* ]] || grep -q '"device-alloc"' "$tmp/inspect" ||
		fail "no device allocation in the manifest"
	"$ctl" inspect "$id" >"$tmp/inspect.txt" || fail "crcudactl inspect $id (text)"
	grep -q "MODULE_LOAD" "$tmp/inspect.txt" || fail "no module load in the journal: $(cat "$tmp/inspect.txt")"
	grep -q "crcuda.version" "$tmp/inspect.txt" || fail "the checkpoint does not record the version that wrote it"
	# Private: the store's directories 0700 (CRIU's images too), its files 0600; the checkpoint names
	# its owner (the process's uid).
	for f in "$store" "$store/packs" "$store/criu" "$store"/criu/*/; do
		[ "$(stat -c %a "$f")" = 700 ] || fail "$f has mode $(stat -c %a "$f"), expected 700"
	done
	for f in "$store"/*.mdb "$store"/packs/*; do
		[ "$(stat -c %a "$f")" = 600 ] || fail "$f has mode $(stat -c %a "$f"), expected 600"
	done
	grep -q "crcuda.uid = $(id -u)\$" "$tmp/inspect.txt" || fail "the checkpoint does not name its owner"
	# gc: CRIU images no checkpoint names go (a killed checkpoint's), those of a checkpoint in
	# progress (locked) and the checkpoint's own stay.
	mkdir -p "$store/criu/orphan" "$store/criu/busy"
	echo x >"$store/criu/orphan/core-1.img"
	touch -d '-2 hours' "$store/criu/orphan" "$store/criu/busy"
	flock "$store/criu/busy" sleep 30 &
	lock_pid=$!
	pids+=("$lock_pid")
	sleep 0.2
	"$ctl" store gc >"$tmp/gc" || fail "store gc: $(cat "$tmp/gc")"
	kill "$lock_pid"
	[ -e "$store/criu/orphan" ] && fail "gc left CRIU images that no checkpoint names"
	[ -e "$store/criu/busy" ] || fail "gc removed the images of a checkpoint in progress (locked)"
	grep -q "removed 1 CRIU image directories" "$tmp/gc" || fail "gc did not report it: $(cat "$tmp/gc")"
	rmdir "$store/criu/busy"
	(cd "$store" && find criu -type f -exec md5sum {} + | sort) >"$tmp/sum.before"
	pid=$(restore "$id")
	[ "$pid" = "$app" ] || fail "restored pid '$pid', checkpointed $app"
	(cd "$store" && find criu -type f -exec md5sum {} + | sort) >"$tmp/sum.after"
	cmp -s "$tmp/sum.before" "$tmp/sum.after" || fail "the restore changed the checkpoint's images"
	# crcudactl restore staged the checkpoint on the daemon while CRIU restored the process, and the
	# plugin's restore took that worker.
	grep -q "session .* restored checkpoint $id (staged ahead) " "$log" ||
		fail "the restore did not take the worker staged ahead: $(grep "checkpoint $id" "$log" | tail -3)"
	finish "$pid" "restored"
	"$ctl" store verify >/dev/null || fail "store verify"
	;;
tree)
	dir=$tmp/tree
	mkdir -p "$dir"
	# shellcheck disable=SC2016
	D=$dir setsid "$ctl" run "${run_opts[@]}" -- sh -c '
		"$0" "$@" --ready-file "$D/ready1" --go-file "$D/go" >"$D/out1" 2>"$D/err1" &
		"$0" "$@" --ready-file "$D/ready2" --go-file "$D/go" >"$D/out2" 2>"$D/err2" &
		wait' "$app_bin" "${app_args[@]}" </dev/null >"$dir/out" 2>"$dir/err" &
	parent=$!
	disown "$parent"
	pids+=("$parent")
	wait_for 60 test -e "$dir/ready1" -a -e "$dir/ready2" || fail "the programs did not get ready"
	kids=$(pgrep -P "$parent" | sort | xargs)
	[ "$(wc -w <<<"$kids")" = 2 ] || fail "the parent has children '$kids', expected 2"
	pids+=($kids)
	out=$(timeout 120 "$ctl" --json checkpoint "$parent" 2>"$tmp/ckpt.err") ||
		fail "checkpoint of the tree failed: $(cat "$tmp/ckpt.err")"
	ids=$(python3 -c 'import json, sys; print(" ".join(map(str, json.load(sys.stdin)["tree_ids"])))' <<<"$out") ||
		fail "no tree_ids in: $out"
	[ "$(wc -w <<<"$ids")" = 2 ] || fail "checkpoints '$ids' for two clients"
	for p in $parent $kids; do wait_for 30 gone "$p" || fail "pid $p still runs after the checkpoint"; done
	for id in $ids; do
		"$ctl" inspect "$id" | grep -q "crcuda.tree = $parent\$" || fail "checkpoint $id does not name its tree"
	done
	for f in out1 out2 err1 err2 out err; do stat -c %s "$dir/$f" >"$dir/$f.size"; done
	for id in $ids; do # either client's checkpoint restores the whole tree
		for f in out1 out2 err1 err2 out err; do truncate -s "$(cat "$dir/$f.size")" "$dir/$f"; done
		rm -f "$dir/go"
		got=$(timeout 120 "$ctl" restore "$id" 2>"$tmp/restore.err") ||
			fail "restore of checkpoint $id failed: $(cat "$tmp/restore.err")"
		echo "$got"
		grep -q "as pid $parent .*the process tree, with its 2 crcuda clients" <<<"$got" ||
			fail "restore of $id: $got"
		[ "$(pgrep -P "$parent" | sort | xargs)" = "$kids" ] || fail "restored children differ from $kids"
		touch "$dir/go"
		wait_for 120 gone "$parent" || fail "the restored tree did not finish"
		for n in 1 2; do
			got=$(checksum "$dir/out$n")
			[ "$got" = "$ref" ] || fail "child $n after restoring $id: checksum '$got', uninterrupted: $ref"
		done
		echo "cr: tree restored from checkpoint $id: both children's checksums = uninterrupted run"
	done
	# The clients share the tree's CRIU images: removing one checkpoint keeps them for the other.
	read -r id1 id2 <<<"$ids"
	images=$store/$("$ctl" inspect "$id2" | sed -n 's/.*criu.images_dir = //p')
	[ -e "$images/inventory.img" ] || fail "no CRIU images at $images"
	"$ctl" rm "$id1" >/dev/null || fail "rm $id1"
	[ -e "$images/inventory.img" ] || fail "rm $id1 removed the images checkpoint $id2 still needs"
	"$ctl" rm "$id2" >/dev/null || fail "rm $id2"
	[ -e "$images" ] && fail "rm of the tree's last checkpoint left its images"
	;;
twice)
	# Ready at once, no waiting: it runs on while it is checkpointed twice (--leave-running).
	app_args=(--mb 8 --chunks 4 --steps 1200 "${app_extra[@]}")
	ref=$(timeout 300 "$ctl" run --backend "$backend" -- "$app_bin" "${app_args[@]}" | checksum /dev/stdin)
	start_app twice --ready-at 1
	rm -f "$dir/go"
	first=$(checkpoint "$app" --leave-running)
	sleep 0.3
	second=$(checkpoint "$app" --leave-running)
	[ "$second" -gt "$first" ] || fail "second checkpoint $second not after $first"
	grep -q '"snapshot_bytes": [1-9]' "$tmp/ckpt$first.json" ||
		fail "the first checkpoint was not copied in the background: $(cat "$tmp/ckpt$first.json")"
	gone "$app" && fail "the program did not run on after --leave-running"
	finish "$app" "original (after two --leave-running checkpoints)"
	for id in "$first" "$second"; do
		pid=$(restore "$id")
		finish "$pid" "checkpoint $id restored"
	done
	;;
capture)
	start_app capture --graph --ready-in-capture
	out=$(timeout 120 "$ctl" checkpoint "$app" 2>&1) && fail "a checkpoint during a stream capture succeeded"
	echo "$out" | grep -q "capturing a stream into a CUDA graph" || fail "the refusal does not say why: $out"
	gone "$app" && fail "the program did not run on after the refused checkpoint"
	finish "$app" "after a checkpoint refused during a capture"
	;;
capture-wait)
	start_app capture_wait --graph --ready-in-capture
	(sleep 0.5 && touch "$dir/go") &
	id=$(checkpoint "$app")
	wait_for 30 gone "$app" || fail "the program still runs after the checkpoint"
	rm -f "$dir/go"
	app=$(restore "$id")
	[ -n "$app" ] || fail "no pid from the restore"
	pids+=("$app")
	finish "$app" "restored from a checkpoint that waited for a capture's end"
	;;
pin-race)
	# The checkpoint falls inside cuMemAllocHost, between the region's registration with the daemon
	# and its listing in the client: the restored session must still get it (the copy into it and
	# cuMemFreeHost then work).
	mkdir -p "$tmp/pin-race"
	CRCUDA_TEST_PIN_PAUSE=$tmp/pin-race start_app pin-race --pinned-ready
	id=$(checkpoint "$app")
	wait_for 30 gone "$app" || fail "the program still runs after the checkpoint"
	pid=$(restore "$id")
	finish "$pid" "checkpoint inside cuMemAllocHost, restored"
	;;
restore-twice)
	start_app again
	id=$(checkpoint "$app")
	wait_for 30 gone "$app" || fail "the program still runs after the checkpoint"
	for n in 1 2; do
		pid=$(restore "$id")
		finish "$pid" "restore $n of checkpoint $id"
	done
	;;
lazy)
	restart_daemon CRCUDA_RESTORE_LAZY=1
	start_app lazy
	id=$(checkpoint "$app")
	wait_for 30 gone "$app" || fail "the program still runs after the checkpoint"
	pid=$(restore "$id")
	grep -q "session .* staged checkpoint $id .*, its device memory still uploading" "$log" ||
		fail "the stage waited for its upload: $(grep "checkpoint $id" "$log" | tail -3)"
	grep -q "session .* restored checkpoint $id (staged ahead) " "$log" ||
		fail "the restore did not take the worker staged ahead: $(grep "checkpoint $id" "$log" | tail -3)"
	finish "$pid" "restored lazily, staged ahead"
	grep -q "session .* restored device memory resident .* after the replay" "$log" ||
		fail "the program's first call did not wait for the upload: $(grep "session" "$log" | tail -3)"
	;;
pid-taken)
	start_app pid_taken
	# The program's threads get their ids back too (its last thread's id is taken below).
	last_tid=$(ls "/proc/$app/task" | sort -n | tail -1)
	[ "$last_tid" != "$app" ] || fail "the program under the layer has no thread besides its main one"
	id=$(checkpoint "$app")
	wait_for 30 gone "$app" || fail "the program still runs after the checkpoint"
	# Other programs take the freed pid and a thread's id (as ids wrapping at kernel.pid_max make
	# happen): the restore waits for them to end, saying so, and restores.
	take_id() { # take_id ID SECONDS: a sleep of SECONDS started under ID
		local p
		for _ in $(seq 50); do
			echo $(($1 - 1)) 2>/dev/null >/proc/sys/kernel/ns_last_pid || skip "cannot write kernel.ns_last_pid"
			sleep "$2" &
			p=$!
			[ "$p" = "$1" ] && return 0
			kill "$p" 2>/dev/null
			wait "$p" 2>/dev/null
		done
		return 1
	}
	# The thread id first, for longer: the pid's holder, taken last, has almost all its 3 s left when the
	# restore begins (it says so after 2 s), and the thread id's has about 6 s left once the pid is free.
	take_id "$last_tid" 9 || fail "could not start a program under the freed thread id $last_tid"
	take_id "$app" 3 || fail "could not start a program under the freed pid $app"
	# The restore's own processes after them.
	echo "$last_tid" >/proc/sys/kernel/ns_last_pid
	t0=$(date +%s)
	pid=$(restore "$id")
	[ "$pid" = "$app" ] || fail "restored pid '$pid', checkpointed $app"
	grep -q "pid $app is held by another program (sleep), not the checkpointed .*: waiting" "$tmp/restore.err" ||
		fail "the restore did not say whose the pid was: $(cat "$tmp/restore.err")"
	grep -q "thread id $last_tid of the checkpointed process $app is held by another program (sleep; .*: waiting" "$tmp/restore.err" ||
		fail "the restore did not say whose the thread id was: $(cat "$tmp/restore.err")"
	[ $(($(date +%s) - t0)) -ge 5 ] || fail "the restore did not wait for the decoys"
	finish "$pid" "restored once the other holders of its pid and a thread id ended"
	;;
child)
	start_app child --child
	kid=$(pgrep -P "$app" | head -1)
	[ -n "$kid" ] || fail "state_app --child has no child"
	id=$(checkpoint "$app")
	"$ctl" inspect "$id" >"$tmp/inspect.txt" 2>&1 || fail "inspect $id"
	grep -Eq "crcuda.tree.pids = $app,([0-9]+,)*$kid(,|\$)" "$tmp/inspect.txt" ||
		fail "the checkpoint does not name the child $kid: $(grep tree "$tmp/inspect.txt")"
	wait_for 30 gone "$app" || fail "the program still runs after the checkpoint"
	pid=$(restore "$id")
	[ "$(ps -o ppid= -p "$kid" 2>/dev/null | tr -d ' ')" = "$pid" ] || fail "the child $kid was not restored under $pid"
	finish "$pid" "checkpoint $id of a program with a child without CUDA"
	;;
deleted-shm)
	start_app deleted_shm --deleted-shm
	grep -q "/dev/shm/crcuda-state-app-.* (deleted)" "/proc/$app/maps" ||
		fail "no deleted shared file mapped: $(grep /dev/shm "/proc/$app/maps")"
	# Below the file's size the checkpoint is refused, says why, and the program runs on.
	CRCUDA_GHOST_LIMIT=1M timeout 120 "$ctl" checkpoint "$app" >/dev/null 2>"$tmp/ghost.err" &&
		fail "a checkpoint with CRCUDA_GHOST_LIMIT=1M succeeded"
	grep -q "larger than CRCUDA_GHOST_LIMIT" "$tmp/ghost.err" || fail "no word of the limit: $(cat "$tmp/ghost.err")"
	gone "$app" && fail "the program did not run on after the refused checkpoint"
	id=$(checkpoint "$app")
	wait_for 30 gone "$app" || fail "the program still runs after the checkpoint"
	pid=$(restore "$id")
	finish "$pid" "checkpoint $id of a program mapping an 8 MiB deleted file"
	;;
named-sem)
	start_app named_sem --named-sem
	grep -q "/dev/shm/sem\..* (deleted)" "/proc/$app/maps" ||
		fail "the semaphore's mapping is not an unlinked file: $(grep /dev/shm "/proc/$app/maps")"
	# A --leave-running checkpoint's link remap stays until it is restored: the next checkpoint's
	# must take another name (CRIU's ids restart at each dump; scripts/criu-patches/0002).
	id1=$(checkpoint "$app" --leave-running)
	id=$(checkpoint "$app")
	wait_for 30 gone "$app" || fail "the program still runs after the checkpoint"
	pid=$(restore "$id")
	finish "$pid" "checkpoint $id of a program with a named semaphore"
	# Once restored, CRIU's link remap is gone: a second restore fails and says why.
	truncate -s "$(cat "$tmp/ckpt$id.out.size")" "$dir/out"
	timeout 120 "$ctl" restore "$id" >/dev/null 2>"$tmp/restore2.err" &&
		fail "a second restore of a link-remapped checkpoint succeeded"
	grep -q "used up" "$tmp/restore2.err" || fail "the second restore does not say why: $(cat "$tmp/restore2.err")"
	pid=$(restore "$id1")
	finish "$pid" "the --leave-running checkpoint $id1 taken before it"
	;;
named-sem-rm)
	# The remaps of one program's semaphore (other tests' programs may have some in /dev/shm too).
	sem_remaps() { find /dev/shm -maxdepth 1 -name 'link_remap.*' -inum "$1" -printf '%f\n' | sort | tr '\n' ' '; }
	rm_ckpt() { "$ctl" rm "$1" >"$tmp/rm.out" 2>&1 || fail "rm $1: $(cat "$tmp/rm.out")"; }
	start_app named_sem_rm --named-sem
	sem=/dev/shm/sem.crcuda-state-app-$app
	ino=$(stat -c %i "$sem") || fail "no semaphore $sem"
	shm_inodes+=("$ino")
	id1=$(checkpoint "$app" --leave-running)
	r1=$(sem_remaps "$ino")
	[ "$(echo $r1 | wc -w)" = 1 ] || fail "checkpoint $id1 made not one link remap of $sem: '$r1'"
	id2=$(checkpoint "$app")
	wait_for 30 gone "$app" || fail "the program still runs after the checkpoint"
	r2=$(sem_remaps "$ino")
	[ "$(echo $r2 | wc -w)" = 2 ] || fail "checkpoints $id1 and $id2 left not two link remaps: '$r2'"
	rm_ckpt "$id1"
	r=$(sem_remaps "$ino")
	[ "$r" = "${r2/$r1/}" ] || fail "rm $id1 (never restored) left link remaps '$r' of '$r2' ($id1's: $r1)"
	[ -e "$sem" ] || fail "rm $id1 removed the program's semaphore $sem"
	pid=$(restore "$id2")
	[ -z "$(sem_remaps "$ino")" ] || fail "the restore of $id2 left link remaps: $(sem_remaps "$ino")"
	# The restored program's next dump may name its remap as $id2's was (CRIU's ids restart at each
	# dump; whether they meet depends on the names taken in /dev/shm): such a remap, made here as a
	# link of the same file under $id2's remap's name, is not $id2's.
	id3=$(checkpoint "$pid" --leave-running)
	r3=$(sem_remaps "$ino")
	[ "$(echo $r3 | wc -w)" = 1 ] || fail "checkpoint $id3 made not one link remap: '$r3'"
	reused=/dev/shm/$(echo ${r2/$r1/}) made=""
	if [ ! -e "$reused" ]; then ln "$sem" "$reused" && made=$reused || fail "ln $sem $reused"; fi
	r=$(sem_remaps "$ino")
	rm_ckpt "$id2"
	[ "$(sem_remaps "$ino")" = "$r" ] || fail "rm $id2 (restored) took some of '$r': '$(sem_remaps "$ino")' left"
	[ -z "$made" ] || rm "$made"
	finish "$pid" "checkpoint $id2 restored after rm $id1"
	# Another program's checkpoint killed (crcudactl and criu) at its commit: its images stay,
	# named by no checkpoint, and its remap with them, until store gc.
	start_app named_sem_gc --named-sem
	ino2=$(stat -c %i "/dev/shm/sem.crcuda-state-app-$app") || fail "no semaphore of $app"
	shm_inodes+=("$ino2")
	ids=$(store_ids)
	dirs=$(ls "$store/criu" | sort)
	export CRCUDA_PLUGIN_TEST_PAUSE_FILE=$tmp/paused
	CRCUDA_PLUGIN_TEST_PAUSE=commit timeout 120 "$ctl" checkpoint --leave-running "$app" >"$tmp/k.out" 2>&1 &
	tpid=$!
	wait_for 60 test -s "$CRCUDA_PLUGIN_TEST_PAUSE_FILE" || fail "the commit never reached: $(cat "$tmp/k.out")"
	read -r criu_pid _ <"$CRCUDA_PLUGIN_TEST_PAUSE_FILE"
	kill -9 "$(pgrep -P "$tpid" | head -1)" "$criu_pid"
	wait "$tpid" 2>/dev/null
	rm -f "$CRCUDA_PLUGIN_TEST_PAUSE_FILE"
	unset CRCUDA_PLUGIN_TEST_PAUSE_FILE
	wait_for 30 gone "$criu_pid" || fail "criu $criu_pid does not die"
	gone "$app" || reap "$app"
	[ "$(store_ids)" = "$ids" ] || fail "the killed checkpoint was committed: '$ids' -> '$(store_ids)'"
	orphan=$(comm -13 <(echo "$dirs") <(ls "$store/criu" | sort))
	[ -n "$orphan" ] || fail "the killed checkpoint left no image directory"
	[ -n "$(sem_remaps "$ino2")" ] || fail "the killed checkpoint left no link remap"
	touch -d '-5 minutes' "$store/criu/$orphan" # gc leaves directories younger than a minute
	"$ctl" store gc >"$tmp/gc.out" 2>&1 || fail "store gc: $(cat "$tmp/gc.out")"
	[ ! -e "$store/criu/$orphan" ] || fail "store gc left $orphan: $(cat "$tmp/gc.out")"
	[ -z "$(sem_remaps "$ino2")" ] || fail "store gc left the link remaps $(sem_remaps "$ino2") of $orphan"
	[ "$(sem_remaps "$ino")" = "$r3" ] || fail "store gc took $id3's link remap: '$r3' -> '$(sem_remaps "$ino")'"
	rm_ckpt "$id3"
	[ -z "$(sem_remaps "$ino")" ] || fail "rm $id3 (never restored) left link remaps $(sem_remaps "$ino")"
	;;
netns)
	command -v ip >/dev/null || skip "no ip(8)"
	ns=crcr-$(printf %04x%04x $((RANDOM)) $$ | tail -c 8)
	ip netns add "$ns" || { ns=""; skip "cannot create a network namespace"; }
	ip -n "$ns" link set lo up || fail "lo up in $ns"
	port=$((20000 + RANDOM % 20000))
	echo "tok-$RANDOM$RANDOM" >"$tmp/token"
	chmod 600 "$tmp/token"
	# "The other node": its own daemon, in its own network namespace, seeing the same store.
	ip netns exec "$ns" "$crcudad" --backend sim --socket "$tmp/ns/crcudad.sock" \
		--listen "127.0.0.1:$port" --token-file "$tmp/token" --foreground -v \
		>"$tmp/ns.out" 2>"$tmp/ns.log" &
	extra_daemons+=($!)
	disown $!
	wait_for 30 grep -q ready "$tmp/ns.out" || fail "no daemon in $ns: $(cat "$tmp/ns.log")"
	start_app netns
	id=$(checkpoint "$app")
	wait_for 30 gone "$app" || fail "the program still runs after the checkpoint"
	# The first node's daemon is gone: nothing of it can be used.
	for p in $(daemon_pids); do kill -9 "$p"; done
	truncate -s "$(cat "$tmp/ckpt$id.out.size")" "$dir/out"
	truncate -s "$(cat "$tmp/ckpt$id.err.size")" "$dir/err"
	out=$(ip netns exec "$ns" timeout 120 "$ctl" restore --daemon "$tmp/ns/crcudad.sock" "$id" 2>&1) ||
		fail "restore in $ns by the unix socket: $out"
	pid=$(echo "$out" | sed -n 's/.* as pid \([0-9]*\) .*/\1/p')
	[ "$(readlink "/proc/$pid/ns/net")" = "$(ip netns exec "$ns" readlink /proc/self/ns/net)" ] ||
		fail "the restored process is not in $ns"
	finish "$pid" "restored in $ns (unix socket)"
	truncate -s "$(cat "$tmp/ckpt$id.out.size")" "$dir/out"
	truncate -s "$(cat "$tmp/ckpt$id.err.size")" "$dir/err"
	out=$(ip netns exec "$ns" timeout 120 "$ctl" restore --remote "127.0.0.1:$port" --token-file "$tmp/token" \
		"$id" 2>&1) || fail "restore in $ns over TCP: $out"
	pid=$(echo "$out" | sed -n 's/.* as pid \([0-9]*\) .*/\1/p')
	finish "$pid" "restored in $ns (TCP, --remote)"
	grep -q "session" "$tmp/ns.log" || fail "no session on the daemon in $ns"
	;;
clone)
	command -v unshare >/dev/null && command -v nsenter >/dev/null || skip "no unshare/nsenter"
	# Long enough after its go file for the second copy to be checkpointed while it runs.
	app_args=(--mb 8 --chunks 4 --steps 6000)
	ref=$(timeout 300 "$ctl" run --backend sim -- "$app_bin" "${app_args[@]}" | checksum /dev/stdin)
	start_app clone
	id=$(checkpoint "$app")
	wait_for 30 gone "$app" || fail "the program still runs after the checkpoint"
	first=$(restore "$id")
	[ "$first" = "$app" ] || fail "restored pid '$first', checkpointed $app"
	# The second copy, while the first one runs (parked at its go file): its pid is taken here, so it
	# is restored in a pid namespace of its own (CRIU restores pids), with its own copy of the
	# program's files mounted over $dir. Its session takes the same device VA range as the first copy's,
	# in a worker of its own.
	copy=$tmp/clone-copy
	mkdir -p "$copy"
	cp -a "$dir/." "$copy/"
	export ctl copy dir id
	setsid unshare --pid --fork --mount-proc bash -c '
		mount --bind "$copy" "$dir" || exit 1
		timeout 120 "$ctl" restore "$id" >"$copy.restore" 2>&1 || exit 1
		pid=$(sed -n "s/.* as pid \([0-9]*\) .*/\1/p" "$copy.restore")
		# The namespace lives as long as its init, this shell: until the copy has ended and the
		# test is done in it.
		while [ -e "/proc/$pid" ] && ! grep -q "^State:[[:space:]]*Z" "/proc/$pid/status"; do sleep 0.1; done
		while [ ! -e "$copy.end" ]; do sleep 0.1; done
	' </dev/null >/dev/null 2>&1 &
	ns_unshare=$!
	disown "$ns_unshare"
	wait_for 120 grep -qs " as pid " "$copy.restore" || fail "second restore of $id: $(cat "$copy.restore")"
	nsinit=$(pgrep -P "$ns_unshare")
	pids+=("$nsinit")
	gone "$first" && fail "the first copy died when the second was restored"
	"$ctl" ls >"$tmp/ls" || fail "crcudactl ls"
	[ "$(grep "^[0-9]* *$app " "$tmp/ls" | awk '{print $4}' | sort -u | wc -l)" = 2 ] ||
		fail "ls does not list both copies, each with a worker of its own: $(cat "$tmp/ls")"
	finish "$first" "first of two live copies of checkpoint $id"
	# The first copy's session is gone before the second copy is looked for (both have the same pid,
	# each in its namespace).
	wait_for 10 one_session_of "$app" || fail "the first copy's session outlives it"
	# The second copy, checkpointed where it runs (its pid namespace, its daemon): idle, before any
	# CUDA call since the restore (libcrcuda's watcher thread took the restored session), then while
	# it runs on; it finishes, and the later checkpoint restores here, into the first daemon.
	in_ns=(nsenter -t "$nsinit" -p -m -- timeout 120 "$ctl")
	out=$("${in_ns[@]}" checkpoint --leave-running "$app" 2>&1) ||
		fail "checkpoint of the restored copy before its first CUDA call: $out"
	gone "$nsinit" && fail "the second copy died in a --leave-running checkpoint"
	touch "$copy/go"
	sleep 0.5
	# The sizes before: the copy writes its result only at its end, which comes right after the
	# checkpoint (that waits for the steps it has posted).
	out_size=$(stat -c %s "$copy/out") err_size=$(stat -c %s "$copy/err")
	out=$("${in_ns[@]}" --json checkpoint --leave-running "$app" 2>&1) || fail "checkpoint of the second copy: $out"
	id2=$(echo "$out" | sed -n 's/^  "id": \([0-9]*\),*$/\1/p')
	[ -n "$id2" ] || fail "no checkpoint id in: $out"
	echo "$out_size" >"$tmp/ckpt$id2.out.size"
	echo "$err_size" >"$tmp/ckpt$id2.err.size"
	touch "$copy.end"
	wait_for 120 gone "$nsinit" || fail "the second copy did not finish"
	got=$(checksum "$copy/out")
	[ "$got" = "$ref" ] || fail "second copy: checksum '$got', uninterrupted run: $ref ($(cat "$copy/err"))"
	echo "cr: second of two live copies of checkpoint $id (its own worker): checksum $got = uninterrupted run"
	cp "$copy/out" "$copy/err" "$dir/"
	pid=$(restore "$id2")
	finish "$pid" "checkpoint $id2 of the second copy restored"
	;;
window)
	start_app window
	id=$(checkpoint "$app")
	wait_for 30 gone "$app" || fail "the program still runs after the checkpoint"
	# The daemon is restarted with another window.
	for p in $(daemon_pids); do
		kill -9 "$p"
		wait_for 30 gone "$p" || fail "daemon $p does not die"
	done
	"$crcudad" --backend sim --socket "$sock" --va-base 0x700000000000 --idle-exit 60 --foreground -v \
		>"$tmp/w.out" 2>>"$log" &
	disown $!
	wait_for 30 grep -q ready "$tmp/w.out" || fail "no daemon with another window"
	pid=$(restore "$id")
	grep -q "session [0-9]*: pid $pid uid [0-9]*, VA 0x680000000000+" "$log" ||
		fail "the restored session has not the checkpoint's range: $(grep "pid $pid" "$log")"
	finish "$pid" "restored by a daemon with another --va-base, at the checkpoint's range"
	;;
remote-twice)
	start_tcp_daemon
	start_app remote
	id=$(checkpoint "$app")
	wait_for 30 gone "$app" || fail "the program still runs after the checkpoint"
	remote=(--remote "127.0.0.1:$port" --token-file "$tmp/token")
	first=$(restore "$id" "${remote[@]}")
	# A second restore there, in a pid namespace (the pid is taken), beside the first: a worker of its
	# own takes the same range. The copy ends with the namespace, right after.
	out=$(unshare --pid --fork --mount-proc timeout 60 "$ctl" restore "${remote[@]}" "$id" 2>&1) ||
		fail "a second restore on the remote daemon, beside a live copy, failed: $out"
	echo "$out" | grep -q " as pid " || fail "no restored pid in: $out"
	gone "$first" && fail "the first copy died when the second was restored"
	finish "$first" "restored on the remote daemon, beside a second copy"
	pid=$(restore "$id" "${remote[@]}")
	finish "$pid" "restored on the remote daemon again"
	;;
tcp)
	start_tcp_daemon
	remote=(--remote "127.0.0.1:$port" --token-file "$tmp/token")
	run_opts=("${remote[@]}")
	# No daemon there: a clear error, nothing committed, the program runs on.
	start_app tcp-lr
	if out=$(timeout 60 "$ctl" checkpoint --remote 127.0.0.1:1 --token-file "$tmp/token" "$app" 2>&1); then
		fail "a checkpoint through an unreachable daemon succeeded: $out"
	fi
	echo "$out" | grep -q "cannot reach crcudad at 127.0.0.1:1" || fail "no clear reason: $out"
	gone "$app" && fail "the program died in a failed checkpoint"
	# Found through the program's own CRCUDA_REMOTE and token.
	id=$(checkpoint "$app" --leave-running)
	[ "$("$ctl" --json ls | grep -c '"id"')" = 1 ] || fail "not exactly one checkpoint: $("$ctl" ls)"
	grep -q "session .*detached" "$tmp/r.log" || fail "the session was not detached for the dump"
	# The client takes it back on its own once resumed, maybe after the checkpoint command returned.
	wait_for 30 grep -q "taken back by its client" "$tmp/r.log" || fail "the client did not take its session back"
	finish "$app" "original over TCP (after a --leave-running checkpoint)"
	start_app tcp-kill
	id=$(checkpoint "$app")
	wait_for 30 gone "$app" || fail "the program still runs after the checkpoint"
	pid=$(restore "$id" "${remote[@]}")
	[ "$pid" = "$app" ] || fail "restored pid '$pid', checkpointed $app"
	finish "$pid" "restored over TCP (--remote, same daemon)"
	# Every session, and the restored one, over TLS (its own handshake after the restore).
	grep -q "session [0-9]*: TLS with the restored client" "$tmp/r.log" ||
		fail "the restored client made no TLS session: $(grep -i tls "$tmp/r.log")"
	grep "session [0-9]*: pid [0-9]* uid [0-9]* -> worker" "$tmp/r.log" | grep -qv "(TLS)" &&
		fail "a session without TLS: $(grep -- "-> worker" "$tmp/r.log")"
	# The same checkpoint onto a local daemon, over unix (the remote daemon's backend is not known
	# here: say it).
	pid=$(restore "$id" --backend sim)
	finish "$pid" "restored onto a local daemon (unix)"
	# Checkpointed again there, once it has made a CUDA call (finish made it go): not needed; the
	# kill -9 of criu while the session is detached: the program takes it back and finishes.
	export CRCUDA_PLUGIN_TEST_PAUSE_FILE=$tmp/paused
	for step in device criu; do
		rm -f "$CRCUDA_PLUGIN_TEST_PAUSE_FILE"
		start_app "tcp-k-$step"
		CRCUDA_PLUGIN_TEST_PAUSE=$step timeout 120 "$ctl" checkpoint "$app" >"$tmp/k.out" 2>&1 &
		tpid=$!
		wait_for 60 test -s "$CRCUDA_PLUGIN_TEST_PAUSE_FILE" || fail "step $step never reached: $(cat "$tmp/k.out")"
		read -r ppid pparent <"$CRCUDA_PLUGIN_TEST_PAUSE_FILE"
		kill -9 "$ppid"
		rm -f "$CRCUDA_PLUGIN_TEST_PAUSE_FILE"
		wait "$tpid" 2>/dev/null
		wait_for 30 gone "$ppid" || fail "criu ($ppid) still there after step $step"
		gone "$app" && fail "kill -9 of criu at $step: the program died"
		finish "$app" "kill -9 of criu at $step (session detached): program took its session back"
	done
	"$ctl" store verify >/dev/null || fail "store verify"
	;;
tcp-striped)
	# A TCP session whose large copies are striped over bulk connections (big_copies: both ways, pageable
	# and page-locked, sync and async, exact): checkpointed --leave-running at its pause (its bulk
	# connections closed before the dump, opened again after); checkpointed, killed and restored
	# --remote: the restored process opens new ones; both finish exact.
	start_tcp_daemon
	remote=(--remote "127.0.0.1:$port" --token-file "$tmp/token")
	run_opts=("${remote[@]}")
	start_app striped-lr
	grep -q "session [0-9]*: 4 bulk connections in" "$tmp/r.log" || fail "no bulk connections before the checkpoint"
	id=$(checkpoint "$app" --leave-running)
	# The client takes it back on its own once resumed, maybe after the checkpoint command returned.
	wait_for 30 grep -q "taken back by its client" "$tmp/r.log" || fail "the client did not take its session back"
	finish "$app" "striped over TCP (after a --leave-running checkpoint)"
	[ "$(grep -c "4 bulk connections in" "$tmp/r.log")" -ge 2 ] ||
		fail "no bulk connections opened again after the checkpoint"
	start_app striped-kill
	id=$(checkpoint "$app")
	wait_for 30 gone "$app" || fail "the program still runs after the checkpoint"
	before=$(grep -c "4 bulk connections in" "$tmp/r.log")
	pid=$(restore "$id" "${remote[@]}")
	[ "$pid" = "$app" ] || fail "restored pid '$pid', checkpointed $app"
	finish "$pid" "restored striped session over TCP (--remote)"
	[ "$(grep -c "4 bulk connections in" "$tmp/r.log")" -gt "$before" ] ||
		fail "the restored process opened no bulk connections"
	# The sessions that ended (the first program's, the restored one's) striped their copies.
	wait_for 10 test "$(grep -c "session [0-9]*: [0-9]* striped copies" "$tmp/r.log")" -ge 2 ||
		fail "no striped copies: $(grep "striped copies" "$tmp/r.log")"
	grep -q "refusing\|failed mid-copy" "$tmp/r.log" && fail "a refusal or failure: $(grep "refusing\|failed mid" "$tmp/r.log")"
	;;
tcp-certs)
	# The same over TLS with certificates: checkpoint (the program's own CRCUDA_TLS_*), --leave-running
	# and kill + restore --remote --tls-*.
	command -v openssl >/dev/null || skip "no openssl(1)"
	for n in ca daemon app; do
		openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=$n" \
			-keyout "$tmp/$n.key" -out "$tmp/$n.csr" 2>/dev/null || fail "openssl req $n"
	done
	openssl x509 -req -in "$tmp/ca.csr" -signkey "$tmp/ca.key" -days 2 -out "$tmp/ca.pem" \
		-extfile <(printf "basicConstraints=critical,CA:TRUE\nkeyUsage=keyCertSign\n") 2>/dev/null || fail "ca"
	for n in daemon app; do
		openssl x509 -req -in "$tmp/$n.csr" -CA "$tmp/ca.pem" -CAkey "$tmp/ca.key" -CAcreateserial -days 2 \
			-out "$tmp/$n.pem" -extfile <(printf "subjectAltName=IP:127.0.0.1\n") 2>/dev/null || fail "$n"
	done
	start_tcp_daemon --tls-cert "$tmp/daemon.pem" --tls-key "$tmp/daemon.key" --tls-ca "$tmp/ca.pem"
	certs=(--tls-cert "$tmp/app.pem" --tls-key "$tmp/app.key" --tls-ca "$tmp/ca.pem")
	remote=(--remote "127.0.0.1:$port" --token-file "$tmp/token" "${certs[@]}")
	run_opts=("${remote[@]}")
	start_app certs-lr
	id=$(checkpoint "$app" --leave-running)
	# The client takes it back on its own once resumed, maybe after the checkpoint command returned.
	wait_for 30 grep -q "taken back by its client" "$tmp/r.log" || fail "the client did not take its session back"
	finish "$app" "original over TLS with certificates (after a --leave-running checkpoint)"
	start_app certs-kill
	id=$(checkpoint "$app")
	wait_for 30 gone "$app" || fail "the program still runs after the checkpoint"
	pid=$(restore "$id" "${remote[@]}")
	finish "$pid" "restored over TLS with certificates (--remote --tls-*)"
	grep -q "session [0-9]*: TLS with the restored client" "$tmp/r.log" || fail "no TLS with the restored client"
	grep -q "refusing" "$tmp/r.log" && fail "a refusal in the daemon's log: $(grep refusing "$tmp/r.log")"
	;;
kill9-ctl | kill9-criu | kill9-daemon)
	target=${case#kill9-}
	export CRCUDA_PLUGIN_TEST_PAUSE_FILE=$tmp/paused
	for step in quiesce device criu commit replay; do
		rm -f "$CRCUDA_PLUGIN_TEST_PAUSE_FILE"
		start_app "k-$step"
		if [ $step = replay ]; then
			prev=$(checkpoint "$app")
			wait_for 30 gone "$app" || fail "the program still runs after the checkpoint"
			truncate -s "$(cat "$tmp/ckpt$prev.out.size")" "$dir/out"
			truncate -s "$(cat "$tmp/ckpt$prev.err.size")" "$dir/err"
			CRCUDA_PLUGIN_TEST_PAUSE=$step timeout 120 "$ctl" restore "$prev" >"$tmp/k.out" 2>&1 &
		else
			prev=$(checkpoint "$app" --leave-running)
			CRCUDA_PLUGIN_TEST_PAUSE=$step timeout 120 "$ctl" checkpoint "$app" >"$tmp/k.out" 2>&1 &
		fi
		# timeout(1) runs crcudactl as its child
		tpid=$!
		wait_for 60 test -s "$CRCUDA_PLUGIN_TEST_PAUSE_FILE" || fail "step $step never reached: $(cat "$tmp/k.out")"
		read -r ppid pparent <"$CRCUDA_PLUGIN_TEST_PAUSE_FILE"
		ctl_pid=$(pgrep -P "$tpid" | head -1)
		case $target in
		ctl) victim=$ctl_pid ;;
		criu) victim=$([ $step = replay ] && echo "$pparent" || echo "$ppid") ;;
		daemon) victim=$(daemon_pids | tail -1) ;;
		esac
		[ -n "$victim" ] || fail "no $target process found at step $step"
		kill -9 "$victim"
		rm -f "$CRCUDA_PLUGIN_TEST_PAUSE_FILE"
		wait "$tpid" 2>/dev/null
		# A criu that outlived crcudactl finishes on its own: it must be done before the pid is
		# reused by the restore below.
		criu_pid=$([ $step = replay ] && echo "$pparent" || echo "$ppid")
		wait_for 60 gone "$criu_pid" || fail "criu ($criu_pid) still runs after step $step"
		# Killed with the checkpoint committed (crcudactl kills after the commit: the plugin does
		# when crcudactl is gone), or running on: never left stopped.
		if [ $step != replay ] && ! gone "$app" && grep -q "^State:[[:space:]]*T" "/proc/$app/status"; then
			fail "kill -9 $target at $step left pid $app stopped"
		fi
		# Whatever the failed step left (a frozen, parked or half-restored program) goes.
		gone "$app" || reap "$app"
		wait_for 60 gone "$app" || fail "pid $app still there after step $step"
		pid=$(restore "$prev")
		finish "$pid" "kill -9 $target at $step: previous checkpoint $prev restored"
		"$ctl" store verify >/dev/null || fail "store verify after kill -9 $target at $step"
	done
	;;
enospc)
	# A checkpoint taken while there is room, then the store's tmpfs filled but for 64 KiB: checkpoints of
	# the idle program (CRIU's images are what needs room: device memory is unchanged) and of the
	# running one (its device memory changed: the pack files), with and without --leave-running, fail
	# saying so; the program runs on and finishes exactly; room made again, a checkpoint succeeds; the
	# first checkpoint restores exactly.
	mkdir -p "$tmp/fs"
	mount -t tmpfs -o size=256m,mode=0700 crcuda-enospc "$tmp/fs" || skip "cannot mount a tmpfs"
	store=$tmp/fs/store
	export CRCUDA_STORE=$store
	start_app enospc --step-ms 250
	prev=$(checkpoint "$app" --leave-running)
	free=$(df --output=avail -B1 "$tmp/fs" | tail -n 1)
	fallocate -l $((free - (64 << 10))) "$tmp/fs/filler" || fail "cannot fill the tmpfs"
	fault_ckpt "$app" "disk full, idle program" "$nospc"
	fault_ckpt "$app" "disk full, idle program, --leave-running" "$nospc" --leave-running
	touch "$dir/go"
	sleep 0.3
	fault_ckpt "$app" "disk full, running program" "$nospc"
	fault_ckpt "$app" "disk full, running program, --leave-running" "$nospc" --leave-running
	rm "$tmp/fs/filler"
	next=$(checkpoint "$app" --leave-running)
	[ "$next" -gt "$prev" ] || fail "no checkpoint after room was made"
	finish "$app" "after four checkpoints failed for a full disk"
	pid=$(restore "$prev")
	finish "$pid" "checkpoint $prev (taken before the disk filled) restored"
	"$ctl" store verify >/dev/null || fail "store verify"
	;;
eio)
	# EIO from the worker's writes of pack files after 1 MiB (mid-checkpoint: a pack half written): the
	# daemon runs through the iofault shim (armed by a file); the program runs on between the
	# checkpoints, so that its device memory changed. Then EIO from CRIU's own image writes (crcudactl
	# and CRIU run through the shim). Each fails saying so, the program runs on, the store is as it was;
	# unarmed, a checkpoint succeeds; the program finishes exactly and the checkpoint taken before the
	# faults restores exactly.
	[ -f "$shim" ] || skip "no iofault shim at $shim"
	restart_daemon LD_PRELOAD="$shim" IOFAULT_PATH="$store/packs/" IOFAULT_ARM_FILE="$tmp/arm" \
		IOFAULT_AFTER_BYTES=$((1 << 20)) IOFAULT_LOG="$tmp/iofault.log"
	start_app eio --step-ms 400
	prev=$(checkpoint "$app" --leave-running)
	# CRIU's log, written outside the store while CRIU ran, is in the image directory after it.
	images=$store/$(sed -n 's/^  "criu_images": "\(.*\)",*$/\1/p' "$tmp/ckpt$prev.json")
	[ -f "$images/dump.log" ] && [ ! -L "$images/dump.log" ] && grep -q "Dumping finished successfully" "$images/dump.log" ||
		fail "no copy of CRIU's log in $images"
	touch "$tmp/arm" "$dir/go"
	sleep 0.5
	fault_ckpt "$app" "EIO writing pack files" "$eio"
	grep -q "iofault: pid [0-9]* write $store/packs/.*: EIO" "$tmp/iofault.log" ||
		fail "no EIO was injected into the pack writes: $(cat "$tmp/iofault.log")"
	fault_ckpt "$app" "EIO writing pack files, --leave-running" "$eio" --leave-running
	rm "$tmp/arm"
	LD_PRELOAD=$shim IOFAULT_PATH=$store/criu/ IOFAULT_AFTER_BYTES=$((64 << 10)) IOFAULT_LOG=$tmp/criu-fault.log \
		fault_ckpt "$app" "EIO writing CRIU's images" "$eio"
	grep -q "iofault: pid [0-9]* [a-z]* $store/criu/.*: EIO" "$tmp/criu-fault.log" ||
		fail "no EIO was injected into CRIU's image writes: $(cat "$tmp/criu-fault.log")"
	next=$(checkpoint "$app" --leave-running)
	[ "$next" -gt "$prev" ] || fail "no checkpoint after the faults"
	finish "$app" "after three checkpoints failed for EIO"
	pid=$(restore "$prev")
	finish "$pid" "checkpoint $prev (taken before the faults) restored"
	;;
fsync)
	# Power-cut durability. First the order: every write and sync under the store traced (the iofault
	# shim in the daemon and in crcudactl, CRIU and its plugin, one log): a checkpoint's commit, the
	# last write to LMDB's data.mdb, comes after the fsync of every pack file it wrote, of the packs
	# directory, of every CRIU image file and of the image directory. Then an fsync failing (EIO) in
	# each place: the pack files and CRIU's images (without --leave-running: where a failure after
	# the dump would leave the program killed), and LMDB's own commit (with --leave-running and
	# without); each checkpoint is refused saying so, the program runs on (not stopped), the earlier
	# checkpoint stays the latest and restores exactly.
	[ -f "$shim" ] || skip "no iofault shim at $shim"
	restart_daemon LD_PRELOAD="$shim" IOFAULT_PATH="$store/" IOFAULT_OPS=write,fsync IOFAULT_TRACE=1 IOFAULT_LOG="$tmp/trace.log"
	start_app fsync
	rm -f "$tmp/trace.log"
	prev=$(LD_PRELOAD=$shim IOFAULT_PATH=$store/ IOFAULT_OPS=write,fsync IOFAULT_TRACE=1 IOFAULT_LOG=$tmp/trace.log \
		checkpoint "$app" --leave-running)
	images=$store/$(sed -n 's/^  "criu_images": "\(.*\)",*$/\1/p' "$tmp/ckpt$prev.json")
	commit=$(grep -n " $store/data.mdb\$" "$tmp/trace.log" | grep -v sync | tail -n 1 | cut -d: -f1)
	[ -n "$commit" ] || fail "no write to data.mdb traced: $(tail "$tmp/trace.log")"
	npacks=0
	for f in $(grep -o " $store/packs/[0-9a-f]*\.pack\$" "$tmp/trace.log" | sort -u) $store/packs; do
		s=$(grep -n "fsync $f\$" "$tmp/trace.log" | tail -n 1 | cut -d: -f1)
		[ -n "$s" ] && [ "$s" -lt "$commit" ] || fail "$f not fsynced before the commit (line ${s:-none}, commit $commit)"
		npacks=$((npacks + 1))
	done
	nimg=0
	for f in "$images"/*.img "$images"; do
		s=$(grep -n "fsync $f\$" "$tmp/trace.log" | head -n 1 | cut -d: -f1)
		[ -n "$s" ] && [ "$s" -lt "$commit" ] || fail "$f not fsynced before the commit (line ${s:-none}, commit $commit)"
		nimg=$((nimg + 1))
	done
	[ "$npacks" -ge 2 ] && [ "$nimg" -ge 10 ] || fail "too few files traced: $npacks packs, $nimg images"
	echo "cr: commit (trace line $commit) after the fsyncs of $((npacks - 1)) pack files, the packs directory, $((nimg - 1)) image files and their directory"
	reap "$app"
	# The pack files' fsync, then CRIU's images': the program runs on between the checkpoints.
	restart_daemon LD_PRELOAD="$shim" IOFAULT_PATH="$store/packs/" IOFAULT_OPS=fsync IOFAULT_ARM_FILE="$tmp/arm" \
		IOFAULT_LOG="$tmp/iofault.log"
	start_app fsync2 --step-ms 400
	prev=$(checkpoint "$app" --leave-running)
	touch "$tmp/arm" "$dir/go"
	sleep 0.5
	fault_ckpt "$app" "fsync of a pack file fails" "$eio"
	grep -q "iofault: pid [0-9]* fsync $store/packs/.*: EIO" "$tmp/iofault.log" ||
		fail "no fsync of a pack file failed: $(cat "$tmp/iofault.log")"
	rm "$tmp/arm"
	# The plugin's own image (written and synced during the dump), then CRIU's (synced after it).
	for img in crcuda.img.tmp core-*.img; do
		LD_PRELOAD=$shim IOFAULT_PATH="$store/criu/*/$img" IOFAULT_OPS=fsync IOFAULT_LOG=$tmp/criu-fault.log \
			fault_ckpt "$app" "fsync of CRIU's images ($img) fails" "$eio"
		grep -q "iofault: pid [0-9]* fsync $store/criu/.*/${img%%[*]*}.*: EIO" "$tmp/criu-fault.log" ||
			fail "no fsync of $img failed: $(cat "$tmp/criu-fault.log")"
		rm "$tmp/criu-fault.log"
	done
	finish "$app" "after the checkpoints refused for failed fsyncs"
	pid=$(restore "$prev")
	finish "$pid" "checkpoint $prev (the latest before the faults) restored"
	# LMDB's commit: its fdatasync of data.mdb fails.
	restart_daemon LD_PRELOAD="$shim" IOFAULT_PATH="$store/data.mdb" IOFAULT_OPS=fsync IOFAULT_ARM_FILE="$tmp/arm" \
		IOFAULT_LOG="$tmp/mdb-fault.log"
	start_app fsync3
	prev=$(checkpoint "$app" --leave-running)
	touch "$tmp/arm"
	fault_ckpt "$app" "fsync of LMDB's commit fails (--leave-running)" "$eio|[Ii]/[Oo] error" --leave-running
	grep -q "iofault: pid [0-9]* f[a-z]*sync $store/data.mdb: EIO" "$tmp/mdb-fault.log" ||
		fail "no sync of data.mdb failed: $(cat "$tmp/mdb-fault.log")"
	rm "$tmp/arm"
	next=$(checkpoint "$app" --leave-running)
	[ "$next" -gt "$prev" ] || fail "no checkpoint after the faults"
	# Without --leave-running too: CRIU leaves the program stopped and crcudactl kills it only once
	# the commit is done, so a commit that fails lets it run on.
	touch "$tmp/arm"
	fault_ckpt "$app" "fsync of LMDB's commit fails" "committing the checkpoint failed: .*($eio)"
	rm "$tmp/arm"
	finish "$app" "after checkpoints refused for LMDB's failed fsync"
	pid=$(restore "$next")
	finish "$pid" "checkpoint $next (the latest before the failed commits) restored"
	;;
restore-fails)
	# A restore that fails half-way, beside another program on the same daemon: the restored session's
	# worker has replayed the journal, made the allocations and uploaded a chunk when its third read of
	# a pack file fails (EIO, the iofault shim in the daemon), and, in a second round, when that worker
	# is killed (-9) while that read hangs (the shim stalls it). Each restore fails saying why; nothing of the
	# half-restored program stays; the other program's session stays and it finishes exactly; the
	# checkpoint's images are unchanged, the store verifies, and the checkpoint then restores exactly.
	[ -f "$shim" ] || skip "no iofault shim at $shim"
	start_app victim
	id=$(checkpoint "$app")
	victim=$app victim_dir=$dir
	wait_for 30 gone "$victim" || fail "the program still runs after the checkpoint"
	(cd "$store" && find criu -type f -exec md5sum {} + | sort) >"$tmp/sum.before"
	for round in eio killed; do
		if [ $round = eio ]; then
			restart_daemon LD_PRELOAD="$shim" IOFAULT_PATH="$store/packs/*" IOFAULT_OPS=read IOFAULT_CALL=3 \
				IOFAULT_ARM_FILE="$tmp/arm" IOFAULT_LOG="$tmp/read-fault.log"
		else
			restart_daemon LD_PRELOAD="$shim" IOFAULT_PATH="$store/packs/*" IOFAULT_OPS=read IOFAULT_CALL=3 \
				IOFAULT_ARM_FILE="$tmp/arm" IOFAULT_LOG="$tmp/read-fault.log" IOFAULT_STALL_MS=60000
		fi
		rm -f "$tmp/read-fault.log"
		start_app "other-$round"
		other=$app other_dir=$dir
		grep -q "^[0-9]* *$other " <("$ctl" ls) || fail "no session of the other program"
		dir=$victim_dir
		truncate -s "$(cat "$tmp/ckpt$id.out.size")" "$dir/out"
		truncate -s "$(cat "$tmp/ckpt$id.err.size")" "$dir/err"
		touch "$tmp/arm"
		# One worker restores (not staged ahead by crcudactl restore): the fault is its.
		CRCUDA_RESTORE_STAGE=0 timeout 120 "$ctl" restore "$id" >"$tmp/rf.out" 2>"$tmp/rf.err" &
		rpid=$!
		if [ $round = killed ]; then
			wait_for 60 grep -qs "^stall: pid [0-9]* pread $store/packs/" "$tmp/read-fault.log" ||
				fail "the restore never read a pack file: $(cat "$tmp/rf.err")"
			wpid=$(sed -n 's/^stall: pid \([0-9]*\) .*/\1/p' "$tmp/read-fault.log" | head -n 1)
			# A worker of the daemon, not the other program's.
			grep -qa crcudad-worker "/proc/$wpid/cmdline" && ! grep -q "pid $other uid [0-9]* -> worker $wpid\$" "$log" ||
				fail "the stalled reader $wpid is not the restoring worker"
			kill -9 "$wpid"
		fi
		wait "$rpid" && fail "restore ($round) succeeded: $(cat "$tmp/rf.out")"
		first=$(head -n 1 "$tmp/rf.err")
		case $round in
		eio) echo "$first" | grep -Eq "$eio" ;;
		killed) echo "$first" | grep -Eq "worker restoring the checkpoint .*went away" ;;
		esac || fail "restore ($round): the first line does not say why: $(cat "$tmp/rf.err")"
		echo "cr: restore failing half-way ($round): $first"
		grep -q "^\(iofault\|stall\): pid [0-9]* pread $store/packs/" "$tmp/read-fault.log" ||
			fail "no fault was injected into the restore's reads"
		rm "$tmp/arm"
		wait_for 30 gone "$victim" || fail "a half-restored pid $victim stays after the failed restore ($round)"
		gone "$other" && fail "the other program died with the failed restore ($round)"
		grep -q "^[0-9]* *$other " <("$ctl" ls) || fail "the other program's session went away ($round)"
		(cd "$store" && find criu -type f -exec md5sum {} + | sort) >"$tmp/sum.after"
		cmp -s "$tmp/sum.before" "$tmp/sum.after" || fail "the failed restore ($round) changed the checkpoint's images"
		"$ctl" store verify >"$tmp/verify" 2>&1 || fail "store verify after the failed restore ($round): $(cat "$tmp/verify")"
		pid=$(restore "$id")
		finish "$pid" "checkpoint $id restored after a restore failed half-way ($round)"
		dir=$other_dir
		finish "$other" "the other program beside a restore failing half-way ($round)"
	done
	;;
devices)
	app_args=(--mb 8 --chunks 4 --steps 24 --devices 2)
	ref=$(timeout 120 "$ctl" run --backend sim -- "$app_bin" "${app_args[@]}" | checksum /dev/stdin)
	[ -n "$ref" ] || fail "the uninterrupted two-device run failed"
	start_app devices
	id=$(checkpoint "$app")
	wait_for 30 gone "$app" || fail "the program still runs after the checkpoint"
	"$ctl" inspect "$id" >"$tmp/inspect.txt" || fail "crcudactl inspect $id"
	grep -q "crcuda.devices = 0,1$" "$tmp/inspect.txt" &&
		grep -q "crcuda.device.1 = 1 [0-9a-f]* crcuda simulated GPU 1" "$tmp/inspect.txt" ||
		fail "inspect does not show both devices: $(grep crcuda.device "$tmp/inspect.txt")"
	pid=$(restore "$id")
	finish "$pid" "two devices restored as they were"
	# Refused before anything is restored, each saying why; the checkpoint stays usable.
	for bad in 5 1 7,0; do
		truncate -s "$(cat "$tmp/ckpt$id.out.size")" "$dir/out"
		truncate -s "$(cat "$tmp/ckpt$id.err.size")" "$dir/err"
		if timeout 120 "$ctl" restore --gpu "$bad" "$id" >"$tmp/bad.out" 2>&1; then
			fail "restore --gpu $bad of a two-device checkpoint on two GPUs succeeded"
		fi
		case $bad in
		5) grep -q "GPU 5 (for the application's device 0) does not exist" "$tmp/bad.out" ;;
		1) grep -q "used 2 devices, which would go on GPUs 1..2.*give a list" "$tmp/bad.out" ;;
		7,0) grep -q "GPU 7 (for the application's device 0) does not exist" "$tmp/bad.out" ;;
		esac || fail "no clear reason for --gpu $bad: $(cat "$tmp/bad.out")"
		echo "cr: --gpu $bad refused: $(grep -o 'gpu [^:]*: .*' "$tmp/bad.out" | tail -1)"
		gone "$app" || fail "a refused restore (--gpu $bad) left pid $app behind"
	done
	pid=$(restore "$id" --gpu 1,0)
	grep -q "session .* restored checkpoint $id" "$log" || fail "no restore in the daemon log"
	finish "$pid" "two devices restored swapped (--gpu 1,0)"
	# The same by the GPUs' UUIDs (as nvidia-smi -L prints them), from the checkpoint's own record.
	gpu_uuid() { sed -n "s/^ *crcuda.device.$1 = [0-9]* \([0-9a-f]\{32\}\) .*/\1/p" "$tmp/inspect.txt" |
		sed 's/^\(.\{8\}\)\(.\{4\}\)\(.\{4\}\)\(.\{4\}\)/GPU-\1-\2-\3-\4-/'; }
	u0=$(gpu_uuid 0) u1=$(gpu_uuid 1)
	[[ $u0 == GPU-*-*-*-*-* && $u1 == GPU-*-*-*-*-* ]] || fail "no device UUIDs in: $(grep crcuda.device "$tmp/inspect.txt")"
	for bad in "GPU-00000000-0000-0000-0000-000000000000,$u0" "0,$u1" "$u0,$u0"; do
		truncate -s "$(cat "$tmp/ckpt$id.out.size")" "$dir/out"
		truncate -s "$(cat "$tmp/ckpt$id.err.size")" "$dir/err"
		timeout 120 "$ctl" restore --gpu "$bad" "$id" >"$tmp/bad.out" 2>&1 && fail "restore --gpu $bad succeeded"
		grep -qE "is not one of this daemon.s 2 GPU|GPU UUIDs .*not both|twice" "$tmp/bad.out" ||
			fail "no clear reason for --gpu $bad: $(cat "$tmp/bad.out")"
		gone "$app" || fail "a refused restore (--gpu $bad) left pid $app behind"
	done
	pid=$(restore "$id" --gpu "${u1^^},$u0")
	finish "$pid" "two devices restored swapped by UUID (--gpu $u1,$u0)"
	;;
export)
	start_app export
	id=$(checkpoint "$app")
	wait_for 30 gone "$app" || fail "the program still runs after the checkpoint"
	"$ctl" export -o "$tmp/ckpt.crcx" "$id" >"$tmp/export.out" 2>&1 || fail "export -o: $(cat "$tmp/export.out")"
	echo "cr: $(cat "$tmp/export.out")"
	"$ctl" export "$id" 2>"$tmp/export.err" | cat >"$tmp/pipe.crcx"
	[ "${PIPESTATUS[0]}" = 0 ] || fail "export to a pipe: $(cat "$tmp/export.err")"
	cmp -s "$tmp/ckpt.crcx" "$tmp/pipe.crcx" || fail "export to a pipe and to a file differ"
	"$ctl" export "$id" 2>"$tmp/export.err" | head -c 100 >/dev/null
	rc=${PIPESTATUS[0]}
	[ "$rc" = 1 ] && grep -q "the reader went away" "$tmp/export.err" ||
		fail "export into a pipe closed early: exit $rc, $(cat "$tmp/export.err")"
	other=$tmp/other
	size=$(stat -c %s "$tmp/ckpt.crcx")
	flip() { # flip FILE OFFSET: one bit of the byte at OFFSET
		local b
		b=$(od -An -tu1 -j "$2" -N1 "$1" | tr -d ' ')
		# shellcheck disable=SC2059
		printf "$(printf '\\%03o' $((b ^ 1)))" | dd of="$1" bs=1 seek="$2" conv=notrunc status=none
	}
	head -c $((size * 2 / 3)) "$tmp/ckpt.crcx" >"$tmp/truncated.crcx"
	cp "$tmp/ckpt.crcx" "$tmp/chunk-flip.crcx"
	flip "$tmp/chunk-flip.crcx" $((size / 2))
	# In the info record's "host:store" (after the 48-byte header, a record header and 88 bytes):
	# only the trailer's checksum sees it, after every chunk and CRIU file was written.
	cp "$tmp/ckpt.crcx" "$tmp/info-flip.crcx"
	flip "$tmp/info-flip.crcx" 154
	cmp -s "$tmp/ckpt.crcx" "$tmp/info-flip.crcx" && fail "flip changed nothing"
	echo "not an export" >"$tmp/text.crcx"
	for bad in truncated chunk-flip info-flip text; do
		if CRCUDA_STORE=$other "$ctl" import -i "$tmp/$bad.crcx" >"$tmp/import.out" 2>"$tmp/import.err"; then
			fail "a $bad export was imported: $(cat "$tmp/import.out")"
		fi
		case $bad in
		truncated) grep -q "the export is truncated: it ends at byte $((size * 2 / 3))" "$tmp/import.err" ;;
		chunk-flip)
			# Where no region has chunks (managed memory: CRIU carries it), the flip is in a CRIU
			# image, which only the checksum covers.
			if grep -q " 0 chunks" "$tmp/export.out"; then
				grep -q "the export is corrupt: its checksum .* does not match" "$tmp/import.err"
			else
				grep -q "the export is corrupt: chunk [0-9a-f]* does not match its hash" "$tmp/import.err"
			fi
			;;
		info-flip) grep -q "the export is corrupt: its checksum .* does not match" "$tmp/import.err" ;;
		text) grep -q "not a crcuda export" "$tmp/import.err" ;;
		esac || fail "no clear reason for a $bad export: $(cat "$tmp/import.err")"
		[ "$(wc -l <"$tmp/import.err")" = 1 ] || fail "more than one line for a $bad export: $(cat "$tmp/import.err")"
		echo "cr: $bad export refused: $(cat "$tmp/import.err")"
		[ -z "$(CRCUDA_STORE=$other "$ctl" store ls | tail -n +2)" ] ||
			fail "a $bad export left a checkpoint: $(CRCUDA_STORE=$other "$ctl" store ls)"
		[ -z "$(ls -A "$other/criu" 2>/dev/null)" ] || fail "a $bad export left CRIU images: $(ls "$other/criu")"
	done
	# The source node goes away: its daemon and its store.
	for p in $(daemon_pids); do kill -9 "$p"; done
	mv "$store" "$tmp/store.gone"
	# A socket of its own (in $tmp/d/, where daemon_pids looks; its log is crcudad.log there too).
	store=$other sock=$tmp/d/other.sock
	export CRCUDA_STORE=$store CRCUDA_SOCKET=$sock
	in_ns=()
	if command -v ip >/dev/null; then
		ns=crcr-$(printf %04x%04x $((RANDOM)) $$ | tail -c 8)
		if ip netns add "$ns" 2>/dev/null; then
			ip -n "$ns" link set lo up || fail "lo up in $ns"
			in_ns=(ip netns exec "$ns")
		else
			ns=""
		fi
	fi
	out=$("${in_ns[@]}" "$ctl" --json import <"$tmp/pipe.crcx" 2>&1) || fail "import: $out"
	id2=$(echo "$out" | sed -n 's/^  "id": \([0-9]*\),*$/\1/p')
	[ -n "$id2" ] || fail "no checkpoint id in: $out"
	"$ctl" ls >"$tmp/ls" 2>&1
	grep -q "^$id2 " "$tmp/ls" || fail "checkpoint $id2 not listed in the target store: $(cat "$tmp/ls")"
	"$ctl" inspect "$id2" >"$tmp/inspect.txt" || fail "inspect $id2"
	grep -q "crcuda.imported_from = .* checkpoint $id$" "$tmp/inspect.txt" ||
		fail "no crcuda.imported_from: $(grep meta "$tmp/inspect.txt")"
	"$ctl" store verify >/dev/null || fail "store verify of the target store"
	truncate -s "$(cat "$tmp/ckpt$id.out.size")" "$dir/out"
	truncate -s "$(cat "$tmp/ckpt$id.err.size")" "$dir/err"
	out=$("${in_ns[@]}" timeout 120 "$ctl" restore "$id2" 2>&1) || fail "restore of the imported checkpoint: $out"
	pid=$(echo "$out" | sed -n 's/.* as pid \([0-9]*\) .*/\1/p')
	[ "$pid" = "$app" ] || fail "restored pid '$pid', checkpointed $app"
	[ -z "$ns" ] || [ "$(readlink "/proc/$pid/ns/net")" = "$(ip netns exec "$ns" readlink /proc/self/ns/net)" ] ||
		fail "the restored process is not in $ns"
	finish "$pid" "exported, imported into another store${ns:+ in $ns}, restored"
	;;
images)
	# Plain CRIU with the plugin and plugin.conf's state = images: the device state goes into CRIU's
	# image directory, the store is wiped (and the daemon restarted: "another node"), the restore
	# imports it from the images into plugin.conf's store and the program finishes exact.
	[ -n "$plugin" ] || skip "images: needs the build's plugin (plain criu --libdir)"
	start_app images
	imgs=$tmp/images
	mkdir -p "$imgs"
	cat >"$tmp/plugin.conf" <<-EOF
		# crcuda's CRIU plugin
		state = images
		  store = $tmp/conf-store
		daemon=$sock
	EOF
	# crcudactl checkpoint's image directory is in the store, which holds the device state already:
	# nothing exported there under state = images.
	CRCUDA_PLUGIN_CONF=$tmp/plugin.conf checkpoint "$app" --leave-running >/dev/null
	[ -z "$(find "$store/criu" -name 'crcuda-*.crcx')" ] || fail "a device state exported into the store's images"
	# An export that fails (a directory where its file goes) is said in one line; the checkpoint stays
	# committed in the store and crcuda.img names no export (a restore then uses the store); the
	# program runs on (--leave-running).
	mkdir -p "$tmp/images-lr/crcuda-$app.crcx.tmp"
	CRCUDA_PLUGIN_CONF=$tmp/plugin.conf CRCUDA_PLUGIN_REPORT=$tmp/lr.report timeout 120 "$criu" dump -t "$app" \
		-D "$tmp/images-lr" -o dump.log --leave-running --libdir "$(dirname "$plugin")" 2>/dev/null ||
		fail "criu dump --leave-running: $(tail -5 "$tmp/images-lr/dump.log")"
	grep -q "^error task $app: cannot write its device state into the image directory (crcuda-$app.crcx.tmp): Is a directory\$" \
		"$tmp/lr.report" || fail "no clear error for a failed export: $(cat "$tmp/lr.report")"
	grep -q "^export " "$tmp/images-lr/crcuda.img" && fail "crcuda.img names an export that failed"
	grep -q "^ckpt [0-9]" "$tmp/images-lr/crcuda.img" || fail "the checkpoint was not committed: $(cat "$tmp/images-lr/crcuda.img")"
	gone "$app" && fail "the program did not run on after a --leave-running dump"
	echo "cr: a failed export: $(sed -n 's/^error //p' "$tmp/lr.report"); committed in the store all the same"
	# The environment wins over the file: the dump's store is CRCUDA_STORE's.
	CRCUDA_PLUGIN_CONF=$tmp/plugin.conf CRCUDA_PLUGIN_REPORT=$tmp/dump.report timeout 120 "$criu" dump -t "$app" \
		-D "$imgs" -o dump.log -v4 --libdir "$(dirname "$plugin")" 2>"$tmp/dump.err" ||
		fail "criu dump: $(tail -5 "$imgs/dump.log")"
	wait_for 30 gone "$app" || fail "the program still runs after the dump"
	stat -c %s "$dir/out" >"$tmp/out.size"
	stat -c %s "$dir/err" >"$tmp/err.size"
	[ -s "$imgs/crcuda-$app.crcx" ] || fail "no device state in the image directory: $(ls "$imgs")"
	grep -q "^export $app crcuda-$app.crcx\$" "$imgs/crcuda.img" || fail "crcuda.img: $(cat "$imgs/crcuda.img")"
	grep -q "^exported $app " "$tmp/dump.report" || fail "the report: $(cat "$tmp/dump.report")"
	[ "$(wc -w <<<"$(store_ids)")" = 3 ] || fail "the dump did not use CRCUDA_STORE ($store): $(store_ids)"
	[ -e "$tmp/conf-store" ] && fail "the dump used plugin.conf's store although CRCUDA_STORE is set"
	grep -E "Error .*crcuda" "$imgs/dump.log" && fail "the plugin logged an error"
	echo "cr: dumped by plain criu: $(sed -n "s/^exported $app /checkpoint /p" "$tmp/dump.report"), in $imgs/crcuda-$app.crcx"
	# The node's store and daemon go.
	rm -rf "$store"
	restart_daemon
	# A device state file that is damaged fails the restore before any task exists, in one line.
	cp "$imgs/crcuda-$app.crcx" "$tmp/good.crcx"
	truncate -s $(($(stat -c %s "$tmp/good.crcx") / 2)) "$imgs/crcuda-$app.crcx"
	truncate -s "$(cat "$tmp/out.size")" "$dir/out"
	truncate -s "$(cat "$tmp/err.size")" "$dir/err"
	if env -u CRCUDA_STORE CRCUDA_PLUGIN_CONF="$tmp/plugin.conf" timeout 120 "$criu" restore -D "$imgs" -d \
		-o bad-restore.log -v4 --libdir "$(dirname "$plugin")" 2>/dev/null; then
		fail "a restore from a truncated device state succeeded"
	fi
	grep -q "importing task $app's device state (crcuda-$app.crcx in the image directory) into the store $tmp/conf-store: the export is truncated" \
		"$imgs/bad-restore.log" || fail "no clear error for a truncated device state: $(grep Error "$imgs/bad-restore.log")"
	gone "$app" || fail "a failed restore left pid $app"
	cp "$tmp/good.crcx" "$imgs/crcuda-$app.crcx"
	env -u CRCUDA_STORE CRCUDA_PLUGIN_CONF="$tmp/plugin.conf" CRCUDA_PLUGIN_REPORT=$tmp/restore.report timeout 120 \
		"$criu" restore -D "$imgs" -d --pidfile "$tmp/restored.pid" -o restore.log -v4 \
		--libdir "$(dirname "$plugin")" 2>"$tmp/restore.err" || fail "criu restore: $(tail -5 "$imgs/restore.log")"
	pid=$(cat "$tmp/restored.pid")
	[ "$pid" = "$app" ] || fail "restored pid '$pid', dumped $app"
	id2=$(sed -n "s/^imported $app \([0-9]*\) .*/\1/p" "$tmp/restore.report")
	[ -n "$id2" ] || fail "nothing imported: $(cat "$tmp/restore.report")"
	CRCUDA_STORE=$tmp/conf-store "$ctl" inspect "$id2" | grep -q "crcuda.imported_from = " ||
		fail "checkpoint $id2 of plugin.conf's store is not the imported one"
	echo "cr: restored by plain criu from the images alone (imported into plugin.conf's store as checkpoint $id2)"
	finish "$pid" "device state in CRIU's images, store wiped, restored"
	;;
images-tree)
	# The tree case's shell and its two programs, dumped by plain criu with state = images (both
	# clients' device states in the image directory), the store wiped and the daemon restarted; one
	# criu restore imports both and restores the tree; both programs finish exact.
	[ -n "$plugin" ] || skip "images-tree: needs the build's plugin (plain criu --libdir)"
	dir=$tmp/tree
	mkdir -p "$dir"
	# shellcheck disable=SC2016
	D=$dir setsid "$ctl" run "${run_opts[@]}" -- sh -c '
		"$0" "$@" --ready-file "$D/ready1" --go-file "$D/go" >"$D/out1" 2>"$D/err1" &
		"$0" "$@" --ready-file "$D/ready2" --go-file "$D/go" >"$D/out2" 2>"$D/err2" &
		wait' "$app_bin" "${app_args[@]}" </dev/null >"$dir/out" 2>"$dir/err" &
	parent=$!
	disown "$parent"
	pids+=("$parent")
	wait_for 60 test -e "$dir/ready1" -a -e "$dir/ready2" || fail "the programs did not get ready"
	kids=$(pgrep -P "$parent" | sort | xargs)
	[ "$(wc -w <<<"$kids")" = 2 ] || fail "the parent has children '$kids', expected 2"
	pids+=($kids)
	imgs=$tmp/images
	mkdir -p "$imgs"
	printf 'state = images\nstore = %s\n' "$store" >"$tmp/plugin.conf"
	CRCUDA_PLUGIN_CONF=$tmp/plugin.conf CRCUDA_PLUGIN_REPORT=$tmp/dump.report timeout 120 "$criu" dump -t "$parent" \
		-D "$imgs" -o dump.log -v4 --libdir "$(dirname "$plugin")" 2>"$tmp/dump.err" ||
		fail "criu dump of the tree: $(tail -5 "$imgs/dump.log")"
	for p in $parent $kids; do wait_for 30 gone "$p" || fail "pid $p still runs after the dump"; done
	for k in $kids; do
		[ -s "$imgs/crcuda-$k.crcx" ] || fail "no device state of $k in the image directory: $(ls "$imgs")"
	done
	[ -e "$imgs/crcuda-$parent.crcx" ] && fail "a device state for the shell, which is no crcuda client"
	grep -E "Error .*crcuda" "$imgs/dump.log" && fail "the plugin logged an error (the shell is no client)"
	for f in out1 out2 err1 err2 out err; do stat -c %s "$dir/$f" >"$dir/$f.size"; done
	# Their pids (and the shell's, the programs' session and group) are free for the restore once
	# every one is reaped: the shell by this script, the programs by PID 1.
	for p in $parent $kids; do wait_for 60 test ! -e "/proc/$p" || fail "pid $p is not reaped"; done
	rm -rf "$store"
	restart_daemon
	env -u CRCUDA_STORE CRCUDA_PLUGIN_CONF="$tmp/plugin.conf" CRCUDA_PLUGIN_REPORT=$tmp/restore.report timeout 120 \
		"$criu" restore -D "$imgs" -d --pidfile "$tmp/restored.pid" -o restore.log -v4 \
		--libdir "$(dirname "$plugin")" 2>"$tmp/restore.err" || fail "criu restore of the tree: $(tail -5 "$imgs/restore.log")"
	[ "$(cat "$tmp/restored.pid")" = "$parent" ] || fail "restored pid $(cat "$tmp/restored.pid"), dumped $parent"
	[ "$(grep -c "^imported " "$tmp/restore.report")" = 2 ] || fail "imported: $(cat "$tmp/restore.report")"
	[ "$(pgrep -P "$parent" | sort | xargs)" = "$kids" ] || fail "restored children differ from $kids"
	echo "cr: the tree restored by plain criu from the images alone ($(grep -c "^imported " "$tmp/restore.report") device states imported)"
	touch "$dir/go"
	wait_for 120 gone "$parent" || fail "the restored tree did not finish"
	for n in 1 2; do
		got=$(checksum "$dir/out$n")
		[ "$got" = "$ref" ] || fail "child $n: checksum '$got', uninterrupted: $ref"
	done
	echo "cr: both children's checksums = uninterrupted run"
	;;
*)
	echo "unknown case $case" >&2
	exit 2
	;;
esac
ok=1
echo "PASS: $case"
