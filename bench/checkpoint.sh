#!/usr/bin/env bash
# bench/checkpoint.sh BUILD_DIR [SIZE_MB...]: checkpoint and restore of the same state-carrying
# program (tests/programs/state_app) with NVIDIA's driver checkpoint (cuCheckpointProcess* + CRIU)
# and with crcuda, side by side in one run; each restored run's checksum must equal an
# uninterrupted run's. Prints seconds per phase, device-copy GB/s and image size. Needs root, the GPU
# and CRIU (.deps/criu, or $CRIU). Default sizes: 1024 8192 MiB.
set -uo pipefail
build=${1:?usage: checkpoint.sh BUILD_DIR [SIZE_MB...]}
shift
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(1024 8192)
top=$(cd "$(dirname "$0")/.." && pwd)
criu=${CRIU:-$top/.deps/criu/bin/criu}
app=$build/tests/programs/state_app
nv=$build/bench/nv_ckpt
crcudactl=$build/crcudactl/crcudactl
work=$(mktemp -d /tmp/crcuda-bench-ckpt.XXXXXX)
ok=0
trap '[ $ok = 1 ] && [ -z "${CRCUDA_BENCH_KEEP:-}" ] && rm -rf "$work" || echo "checkpoint: logs kept in $work" >&2' EXIT
steps=8
# The uninterrupted reference run: native by default (CRCUDA_BENCH_NVIDIA=0 CRCUDA_BENCH_BACKEND=sim
# runs the crcuda side alone on the simulated device, as a smoke test).
ref_run=${CRCUDA_BENCH_REF_RUN:-}

now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }
wait_for_file() { local i; for ((i = 0; i < 6000; i++)); do [ -e "$1" ] && return 0; sleep 0.01; done; return 1; }
wait_gone() { local i; for ((i = 0; i < 60000; i++)); do [ -e "/proc/$1" ] || return 0; grep -q '^State:.*Z' "/proc/$1/status" 2>/dev/null && return 0; sleep 0.01; done; return 1; }
checksum() { sed -n 's/.*checksum=\([0-9a-f]*\).*/\1/p' "$1"; }
# The host's transparent huge page counters: pinned staging falls back to 4 KiB pages (a quarter of the
# upload's speed) where the kernel has no free huge page.
thp_counts() { awk '/^thp_fault_alloc / {a = $2} /^thp_fault_fallback / {f = $2} /^thp_collapse_alloc / {c = $2} END {print a + 0, f + 0, c + 0}' /proc/vmstat; }

# start_app DIR MB [PREFIX...]: the app in its own session, stdout to DIR/out, waiting at DIR/go.
start_app() {
	local dir=$1 mb=$2
	shift 2
	mkdir -p "$dir"
	setsid "$@" "$app" --mb "$mb" --chunks 8 --steps $steps --ready-file "$dir/ready" --go-file "$dir/go" \
		--first-kernel-file "$dir/first-kernel" \
		</dev/null >"$dir/out" 2>"$dir/err" &
	app_pid=$!
	disown "$app_pid" # CRIU kills it at dump: no job report
	wait_for_file "$dir/ready" || { echo "app did not get ready: $(cat "$dir/err")" >&2; return 1; }
	# A script's background job is no group leader, so setsid execs in place: $! is the app
	# (crcudactl run execs the program too).
}

results=()
# The pinned bandwidths of this machine, natively: what the device copies are held to.
"$build/bench/overhead" --size-mb 1024 --launches 1000 --syncs 100 >"$work/overhead.txt" 2>/dev/null
pcie=$(awk '/^d2h_pinned_gbs/ {print $2}' "$work/overhead.txt")
h2d=$(awk '/^h2d_pinned_gbs/ {print $2}' "$work/overhead.txt")
results+=("pinned D2H natively: ${pcie:--} GB/s (the device copy's goal: >= 70% of it); pinned H2D ${h2d:--} GB/s")
# The disk under the store: fsync'd write and cold read bandwidth (2 GiB), the durable checkpoint's
# and the cold restore's yardsticks.
dd if=/dev/zero of="$work/disk.test" bs=64M count=32 conv=fsync status=none
t0=$(date +%s.%N)
dd if=/dev/urandom of="$work/disk.rand" bs=64M count=32 status=none
sync
t0=$(date +%s.%N)
dd if="$work/disk.rand" of="$work/disk.test" bs=64M conv=fsync,notrunc status=none
t1=$(date +%s.%N)
disk_w=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", 2.147483648 / (b - a) }')
sync
echo 3 >/proc/sys/vm/drop_caches 2>/dev/null
t0=$(date +%s.%N)
dd if="$work/disk.test" of=/dev/null bs=64M status=none
t1=$(date +%s.%N)
disk_r=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", 2.147483648 / (b - a) }')
rm -f "$work/disk.test" "$work/disk.rand"
results+=("disk under the store: ${disk_w} GB/s written with fsync, ${disk_r} GB/s read cold")
for mb in "${sizes[@]}"; do
	# shellcheck disable=SC2086
	ref=$($ref_run "$app" --mb "$mb" --chunks 8 --steps $steps | sed -n 's/.*checksum=\([0-9a-f]*\).*/\1/p')

	if [ "${CRCUDA_BENCH_NVIDIA:-1}" = 1 ]; then
		# NVIDIA: lock + checkpoint (device memory into the process), criu dump, criu restore,
		# driver restore + unlock.
		d=$work/nv-$mb
		start_app "$d" "$mb" || exit 1
		mkdir -p "$d/img"
		t0=$(now)
		"$nv" "$app_pid" lock >/dev/null && "$nv" "$app_pid" checkpoint >/dev/null || exit 1
		t1=$(now)
		"$criu" dump -t "$app_pid" -D "$d/img" -o dump.log >/dev/null 2>&1 || { echo "criu dump failed"; tail -20 "$d/img/dump.log"; exit 1; }
		t2=$(now)
		wait_gone "$app_pid"
		"$criu" restore -D "$d/img" -d -o restore.log >/dev/null 2>&1 || { echo "criu restore failed"; tail -20 "$d/img/restore.log"; exit 1; }
		t3=$(now)
		"$nv" "$app_pid" restore >/dev/null && "$nv" "$app_pid" unlock >/dev/null || exit 1
		t4=$(now)
		touch "$d/go"
		wait_gone "$app_pid"
		nv_ok=$([ -n "$ref" ] && [ "$(checksum "$d/out")" = "$ref" ] && echo ok || echo WRONG)
		nv_img=$(du -sm "$d/img" | cut -f1)
		nv_ck=$(elapsed "$t0" "$t2")
		nv_rs=$(elapsed "$t2" "$t4")
		results+=("$(printf '%-8s %6s MiB  ckpt %6ss (driver %5ss, criu %5ss)  restore %6ss (criu %5ss, driver %5ss)  image %6s MiB  result %s' \
			nvidia "$mb" "$nv_ck" "$(elapsed "$t0" "$t1")" "$(elapsed "$t1" "$t2")" "$nv_rs" \
			"$(elapsed "$t2" "$t3")" "$(elapsed "$t3" "$t4")" "$nv_img" "$nv_ok")")
		rm -rf "$d/img"

	else
		nv_ck=0 nv_rs=0
	fi

	# Durable (the store fsyncs its packs before the commit: the default) and, like CRIU's own images,
	# without fsync (CRCUDA_STORE_SYNC=0: safe against a killed process, not against power loss).
	# lazy: not durable, restored with CRCUDA_RESTORE_LAZY=1 (device memory uploads while CRIU
	# restores the process); cold: durable, restored with the page cache dropped.
	for sync in ${CRCUDA_BENCH_SYNC_MODES:-1 0 lazy cold}; do
	export CRCUDA_STORE_SYNC=$sync CRCUDA_RESTORE_LAZY=0
	label=$([ "$sync" = 1 ] && echo crcuda || echo crcuda-nosync)
	case $sync in
	lazy) export CRCUDA_STORE_SYNC=0 CRCUDA_RESTORE_LAZY=1 label=crcuda-lazy ;;
	cold) export CRCUDA_STORE_SYNC=1 label=crcuda-cold ;;
	esac
		# crcuda: the app under the layer (its own daemon on the real driver), crcudactl checkpoint
		# (quiesce, device copy into the store, CRIU dump of a process without GPU state, commit) and
		# crcudactl restore (replay + upload, CRIU restore).
		# Named per run: a mode may come again (CRCUDA_BENCH_SYNC_MODES="1 0 1 0"), and the run before
		# it left its daemon's socket behind.
		run=$((${run:-0} + 1))
		d=$work/crc-$mb-$sync-$run
		export CRCUDA_SOCKET=$work/crcudad-$mb-$sync-$run.sock CRCUDA_STORE=$work/store-$mb-$sync-$run
		start_app "$d" "$mb" "$crcudactl" run --backend "${CRCUDA_BENCH_BACKEND:-cuda}" -- || exit 1
		thp0=$(thp_counts)
		t0=$(now)
		"$crcudactl" checkpoint --json "$app_pid" >"$d/ckpt.json" || { cat "$d/ckpt.json"; exit 1; }
		t1=$(now)
		wait_gone "$app_pid"
		id=$(sed -n 's/^ *"id": *\([0-9]*\).*/\1/p' "$d/ckpt.json")
		[ "$sync" = cold ] && { sync; echo 3 >/proc/sys/vm/drop_caches; }
		t2=$(now)
		"$crcudactl" restore --json "$id" >"$d/restore.json" || { cat "$d/restore.json"; exit 1; }
		t3=$(now)
		thp1=$(thp_counts)
		touch "$d/go"
		wait_gone "$app_pid"
		t4=$(now)
		crc_ok=$([ -n "$ref" ] && [ "$(checksum "$d/out")" = "$ref" ] && echo ok || echo WRONG)
		crc_img=$(du -sm "$CRCUDA_STORE" | cut -f1)
		crc_ck=$(elapsed "$t0" "$t1")
		crc_rs=$(elapsed "$t2" "$t3")
		copy=$(awk -F'[:,]' '/"device_bytes"/ {b = $2} /"device_seconds"/ {s = $2} END { if (s > 0) printf "%.1f", b / s / 1e9; else print "-" }' "$d/ckpt.json")
		# The device copy alone: the copy engine's busy time, timed with events by the daemon.
		dcopy=$(awk -F'[:,]' -v pcie="${pcie:-0}" '/"device_bytes"/ {b = $2} /"device_copy_seconds"/ {s = $2}
			END { if (s > 0) { g = b / s / 1e9; printf "%.1f GB/s", g; if (pcie > 0) printf " = %.0f%% of pinned D2H", 100 * g / pcie } else print "-" }' "$d/ckpt.json")
		results+=("$(printf '%-13s %6s MiB  ckpt %6ss (copy+hash+write %s GB/s; device copy %s)  restore %6ss, to the end %ss  store %6s MiB  result %s' \
			"$label" "$mb" "$crc_ck" "$copy" "$dcopy" "$crc_rs" "$(elapsed "$t2" "$t4")" "$crc_img" "$crc_ok")")
		# Time to first kernel: from the restore's start to the end of the program's first kernels
		# after it (state_app --first-kernel-file; the go file is touched when the restore returns).
		[ -s "$d/first-kernel" ] && results+=("$(awk -v a="$t2" -v b="$(cat "$d/first-kernel")" -v mb="$mb" -v label="$label" 'BEGIN {
			printf "first    %6s MiB  %s: first kernel %.3f s after the restore began (goal <= 0.3 s)", mb, label, b - a }')")
		# The worker's own measure of the upload (read + check + copy, from the store to the device).
		up=$(grep -h "uploaded [0-9]* MiB in" "$work"/*.log 2>/dev/null | tail -1 | sed 's/.*: uploaded/uploaded/')
		[ -n "$up" ] && results+=("$(awk -v h="${h2d:-0}" -v up="$up" -v label="$label" -v t0="$thp0" -v t1="$thp1" 'BEGIN {
			g = up; sub(/.*\(/, "", g); sub(/ GB\/s.*/, "", g)
			split(t0, a); split(t1, b)
			printf "upload   %-13s %s = %.0f%% of pinned H2D (goal >= 70%%); the host'"'"'s huge pages from the checkpoint to the restore'"'"'s end: %d faulted, %d fell back to 4 KiB, %d collapsed",
				label, up, (h > 0 ? 100 * g / h : 0), b[1] - a[1], b[2] - a[2], b[3] - a[3] }')")
		# Durable: against the disk's fsync'd write bandwidth; restores: against pinned H2D (issue 15's
		# goal is the upload's rate, above; the whole restore's is shown beside it) and the cold read
		# bandwidth.
		results+=("$(awk -v mb="$mb" -v c="$crc_ck" -v w="$disk_w" -v r="$([ "$sync" = lazy ] && elapsed "$t2" "$t4" || echo "$crc_rs")" -v h="${h2d:-0}" -v dr="$disk_r" -v label="$label" 'BEGIN {
			gb = mb * 1048576 / 1e9
			if (label == "crcuda") printf "durable  %6s MiB  ckpt %.2fx of bytes / fsync bandwidth (goal <= 1.2)", mb, c / (gb / w)
			else if (label == "crcuda-cold") printf "cold     %6s MiB  restore at %.2f GB/s = %.0f%% of the disk read bandwidth (goal >= 80%%)", mb, gb / r, 100 * gb / r / dr
			else printf "restore  %6s MiB  %s: %.2f GB/s (the whole restore%s, CRIU and the upload) = %.0f%% of pinned H2D", mb, label, gb / r, label == "crcuda-lazy" ? " to the program'"'"'s end" : "", (h > 0 ? 100 * gb / r / h : 0) }')")
		results+=("$(awk -v c="$crc_ck" -v n="$nv_ck" -v r="$crc_rs" -v nr="$nv_rs" -v mb="$mb" -v label="$label" 'BEGIN {
			if (n > 0) printf "ratio    %6s MiB  %s  ckpt %.3fx of nvidia (goal <= 0.2 at 8 GiB)  restore %.3fx of nvidia, %.2f s (goal <= 1.5 s)", mb, label, c / n, r / nr, r }')")
		pkill -f "crcudad.*$CRCUDA_SOCKET" 2>/dev/null
		rm -rf "$CRCUDA_STORE"
	done
done
printf '%s\n' "${results[@]}"
ok=1
