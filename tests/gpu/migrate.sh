#!/usr/bin/env bash
# tests/gpu/migrate.sh checkpoint BUILD DIR | restore BUILD DIR: moves a running CUDA program to another
# machine. "checkpoint" (on the first GPU machine) runs state_app under crcuda on the real driver,
# checkpoints it mid-run into the store DIR/store (the process is killed) and exports the checkpoint
# (crcudactl export: device state, journal, module images, CRIU images) to DIR/migrate.crcx; what the
# restored process maps from the build (the program, libcrcuda, the carried libraries), its output
# files and the uninterrupted run's checksum go into DIR/migrate.tar. "restore" (on the second machine,
# same paths, any GPU) unpacks the tar, imports the export into a fresh store DIR/imported (crcudactl
# import: no store is shared), restores the checkpoint with crcudactl restore, lets the program finish
# and compares its checksum. Prints PASS/FAIL lines. Used with the device tool: checkpoint on
# nvidia-h200, restore on nvidia-h100-x1 (another GPU model, another node).
set -u
mode=${1:?usage: migrate.sh checkpoint|restore BUILD DIR}
build=$(cd "${2:?}" && pwd)
dir=$(mkdir -p "${3:?}" && cd "$3" && pwd)
top=$(cd "$(dirname "$0")/../.." && pwd)
ctl=$build/crcudactl/crcudactl
app=$build/tests/programs/state_app
args=(--mb 16 --chunks 4 --steps 16)
export CRCUDA_SOCKET=$dir/d.sock CRCUDA_STORE=$dir/store
result() { printf '%-4s %-32s %s\n' "$1" "$2" "${3:-}"; }
checksum() { sed -n 's/.*checksum=\([0-9a-f]*\).*/\1/p' "$1"; }
gone() { [ ! -e "/proc/$1" ] || grep -q '^State:.*Z' "/proc/$1/status" 2>/dev/null; }
trap 'pkill -f "crcudad.*$CRCUDA_SOCKET" 2>/dev/null' EXIT
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)

case $mode in
checkpoint)
	"$app" "${args[@]}" >"$dir/ref.txt" 2>&1 || { result FAIL migrate_native "$(tail -1 "$dir/ref.txt")"; exit 1; }
	setsid "$ctl" run --backend cuda -- "$app" "${args[@]}" --ready-file "$dir/ready" --go-file "$dir/go" \
		</dev/null >"$dir/out" 2>"$dir/err" &
	pid=$!
	disown $pid
	for _ in $(seq 600); do [ -e "$dir/ready" ] && break; sleep 0.1; done
	[ -e "$dir/ready" ] || { result FAIL migrate_checkpoint "not ready: $(tail -2 "$dir/err" | tr '\n' ' ')"; exit 1; }
	"$ctl" checkpoint --json "$pid" >"$dir/ckpt.json" 2>"$dir/ckpt.err" ||
		{ result FAIL migrate_checkpoint "$(tail -2 "$dir/ckpt.err" | tr '\n' ' ')"; exit 1; }
	for _ in $(seq 500); do gone "$pid" && break; sleep 0.01; done
	sed -n 's/^ *"id": *\([0-9]*\).*/\1/p' "$dir/ckpt.json" >"$dir/id"
	echo "$pid" >"$dir/pid"
	echo "$gpu" >"$dir/from"
	pkill -f "crcudad.*$CRCUDA_SOCKET"
	# The checkpoint as one checksummed stream: all the other machine needs of the store.
	"$ctl" export -o "$dir/migrate.crcx" "$(cat "$dir/id")" >"$dir/export.out" 2>&1 ||
		{ result FAIL migrate_export "$(tail -2 "$dir/export.out" | tr '\n' ' ')"; exit 1; }
	# What the restored process maps from this tree (system libraries are the machines' own), which an
	# export does not carry, and its output files.
	tar -C / -cf "$dir/migrate.tar" "${dir#/}/ref.txt" "${dir#/}/id" "${dir#/}/from" \
		"${dir#/}/out" "${dir#/}/err" "${app#/}" "${build#/}/libcrcuda" "${top#/}/.deps/gpu/lib"
	result PASS migrate_checkpoint "pid $pid on $gpu: checkpoint $(cat "$dir/id"), $(du -sm "$dir/store" | cut -f1) MiB store, $(du -m "$dir/migrate.crcx" | cut -f1) MiB export"
	;;
restore)
	tar -C / -xf "$dir/migrate.tar"
	# A store of this machine's own, with nothing but the imported checkpoint.
	export CRCUDA_STORE=$dir/imported
	rm -rf "$CRCUDA_STORE"
	"$ctl" --json import -i "$dir/migrate.crcx" >"$dir/import.json" 2>"$dir/import.err" ||
		{ result FAIL migrate_import "$(tail -2 "$dir/import.err" | tr '\n' ' ')"; exit 1; }
	id=$(sed -n 's/^  "id": *\([0-9]*\).*/\1/p' "$dir/import.json")
	result PASS migrate_import "exported checkpoint $(cat "$dir/id") is checkpoint $id in $CRCUDA_STORE"
	rm -f "$dir/go"
	# CRIU gives the process its own pid back, which another machine may have in use: the restore
	# runs in a pid namespace of its own, whose init (this shell) lives until the program has ended.
	export ctl dir id
	# shellcheck disable=SC2016
	unshare --pid --fork --mount-proc bash -c '
		"$ctl" restore --backend cuda "$id" >"$dir/restore.out" 2>&1 || exit 1
		pid=$(sed -n "s/.* as pid \([0-9]*\) .*/\1/p" "$dir/restore.out")
		touch "$dir/go"
		for _ in $(seq 3000); do
			[ -e "/proc/$pid" ] && ! grep -q "^State:.*Z" "/proc/$pid/status" || break
			sleep 0.02
		done' </dev/null ||
		{ result FAIL migrate_restore "$(tail -3 "$dir/restore.out" | tr '\n' ' ')"; exit 1; }
	got=$(checksum "$dir/out") ref=$(checksum "$dir/ref.txt")
	if [ -n "$got" ] && [ "$got" = "$ref" ]; then
		result PASS migrate_restore "checkpointed on $(cat "$dir/from"), restored on $gpu: checksum $got = uninterrupted run"
	else
		result FAIL migrate_restore "checksum '$got', uninterrupted run $ref: $(tail -2 "$dir/err" | tr '\n' ' ')"
		exit 1
	fi
	;;
esac
