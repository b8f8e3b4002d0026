#!/usr/bin/env bash
# bench/incremental.sh BUILD_DIR [MB]: the pause a --leave-running checkpoint costs the program and
# what checkpoints after 0%, 5%, 50% and 100% of device memory changed cost, with NVIDIA's driver
# checkpoint's pause beside them in the same run (bench/dirty_app, MB of device memory, default 8192).
# The last checkpoint is restored and its checksum must equal a native run's. Needs root, the GPU and
# CRIU (.deps/criu or $CRIU); CRCUDA_BENCH_BACKEND=sim CRCUDA_BENCH_NVIDIA=0 is a smoke run.
set -uo pipefail
build=${1:?usage: incremental.sh BUILD_DIR [MB]}
mb=${2:-8192}
top=$(cd "$(dirname "$0")/.." && pwd)
criu=${CRIU:-$top/.deps/criu/bin/criu}
app=$build/bench/dirty_app
nv=$build/bench/nv_ckpt
ctl=$build/crcudactl/crcudactl
backend=${CRCUDA_BENCH_BACKEND:-cuda}
work=$(mktemp -d /tmp/crcuda-bench-inc.XXXXXX)
ok=0
trap '[ $ok = 1 ] && rm -rf "$work" || echo "incremental: logs kept in $work" >&2; pkill -f "crcudad.*$work" 2>/dev/null' EXIT
export CRCUDA_SOCKET=$work/crcudad.sock CRCUDA_STORE=$work/store

now() { date +%s.%N; }
wait_for_file() { local i; for ((i = 0; i < 60000; i++)); do [ -e "$1" ] && return 0; sleep 0.005; done; return 1; }
wait_gone() { local i; for ((i = 0; i < 60000; i++)); do [ -e "/proc/$1" ] || return 0; grep -q '^State:.*Z' "/proc/$1/status" 2>/dev/null && return 0; sleep 0.01; done; return 1; }
jnum() { sed -n "s/^ *\"$2\": *\([0-9.e+-]*\).*/\1/p" "$1"; }
die() { echo "incremental: $*" >&2; exit 1; }

# send DIR CMD: the program's answer to one command (numbered in DIR/k).
send() {
	local d=$1 k
	k=$(cat "$d/k")
	echo "$2" >"$d/cmd.tmp"
	mv "$d/cmd.tmp" "$d/cmd.$k" # whole when the program opens it
	for ((i = 0; i < 12000; i++)); do
		[ -e "$d/reply.$k" ] && break
		kill -0 "$pid" 2>/dev/null || die "the program ended before it answered '$2'"
		sleep 0.005
	done
	[ -e "$d/reply.$k" ] || die "no answer to '$2' in 60 s"
	echo $((k + 1)) >"$d/k"
	cat "$d/reply.$k"
}
start() { # start DIR [PREFIX...] (APP_ARGS: more arguments for the program)
	local d=$1
	shift
	mkdir -p "$d"
	echo 0 >"$d/k"
	# shellcheck disable=SC2086
	setsid "$@" "$app" --mb "$mb" --dir "$d" ${APP_ARGS:-} </dev/null >"$d/out" 2>"$d/err" &
	pid=$!
	disown "$pid"
	for ((i = 0; i < 12000; i++)); do
		[ -e "$d/ready" ] && return 0
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.01
	done
	die "the program did not start: $(cat "$d/err")"
}
gap() { send "$1" gap | sed -n 's/gap_ms //p'; }

rows=()
changes=(0 5 50 100)

# Native: the reference checksum and the longest pause the program sees with nobody checkpointing.
start "$work/native"
for p in 100 "${changes[@]}" 100; do send "$work/native" "dirty $p" >/dev/null; done
native_gap=$(gap "$work/native")
ref=$(send "$work/native" sum)
send "$work/native" exit >/dev/null
rows+=("$(printf 'native    %6s MiB  longest wait between synchronisations: %s ms' "$mb" "$native_gap")")

if [ "${CRCUDA_BENCH_NVIDIA:-1}" = 1 ]; then
	# NVIDIA: lock, device memory into the process, criu dump --leave-running, back and unlock.
	d=$work/nv
	APP_ARGS="--ticker 0" start "$d"
	send "$d" "dirty 100" >/dev/null
	gap "$d" >/dev/null
	mkdir -p "$d/img"
	t0=$(now)
	# Its failure is reported, not fatal: crcuda's part still runs.
	if "$nv" "$pid" lock >"$d/nv.log" 2>&1 && "$nv" "$pid" checkpoint >>"$d/nv.log" 2>&1 &&
		"$criu" dump -t "$pid" -D "$d/img" -o dump.log --leave-running >>"$d/nv.log" 2>&1 &&
		"$nv" "$pid" restore >>"$d/nv.log" 2>&1 && "$nv" "$pid" unlock >>"$d/nv.log" 2>&1; then
		t1=$(now)
		rows+=("$(printf 'nvidia    %6s MiB  pause %.0f ms (lock .. checkpoint, CRIU dump, restore .. unlock: the program is stopped throughout)' "$mb" \
			"$(awk -v a="$t0" -v b="$t1" 'BEGIN { print (b - a) * 1000 }')")")
	else
		rows+=("$(printf 'nvidia    %6s MiB  failed: %s' "$mb" "$(tr '\n' ' ' <"$d/nv.log")")")
		"$nv" "$pid" unlock >/dev/null 2>&1
	fi
	send "$d" exit >/dev/null || kill -9 "$pid"
	rm -rf "$d/img"
fi

# crcuda: the same program under the layer, checkpointed with --leave-running after each change.
d=$work/crc
start "$d" "$ctl" run --backend "$backend" --
crc_pid=$pid
ckpt() { # ckpt NAME [OPTIONS...]: one checkpoint; its JSON in $d/NAME.json, its seconds printed
	local name=$1 t0 t1
	shift
	t0=$(now)
	"$ctl" checkpoint --json "$@" "$crc_pid" >"$d/$name.json" 2>"$d/$name.err" || die "checkpoint $name: $(cat "$d/$name.err")"
	t1=$(now)
	awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }'
}
send "$d" "dirty 100" >/dev/null
gap "$d" >/dev/null
full=$(ckpt full -R)
rows+=("$(printf 'crcuda    %6s MiB  first (full) checkpoint %6s s, %s MiB copied' "$mb" "$full" \
	"$(($(jnum "$d/full.json" copied_bytes) >> 20))")")
for p in "${changes[@]}"; do
	send "$d" "dirty $p" >/dev/null
	gap "$d" >/dev/null
	before=$(du -sm "$CRCUDA_STORE" | cut -f1)
	secs=$(ckpt "c$p" -R)
	seen=$(gap "$d")
	after=$(du -sm "$CRCUDA_STORE" | cut -f1)
	j=$d/c$p.json
	rows+=("$(awk -v p="$p" -v s="$secs" -v f="$full" -v c="$(jnum "$j" copied_bytes)" -v n="$(jnum "$j" new_bytes)" \
		-v w="$((after - before))" -v q="$(jnum "$j" pause_quiesce_seconds)" -v dv="$(jnum "$j" pause_device_seconds)" \
		-v cr="$(jnum "$j" pause_criu_seconds)" -v g="$seen" -v bw="$(jnum "$j" background_wait_seconds)" -v mb="$mb" 'BEGIN {
		printf "crcuda    %6s MiB  %3d%% changed: ckpt %6.3f s = %.2fx of full, copied %6.0f MiB, new in store %6.0f MiB (du +%d), pause %7.1f ms observed (quiesce %.1f, device %.1f, CRIU %.1f), drained %.3f s after", mb, p, s, s / f, c / 1048576, n / 1048576, w, g, q * 1000, dv * 1000, cr * 1000, bw }')")
done
# The same 100% change copied before the program runs on (the pause a snapshot saves).
send "$d" "dirty 100" >/dev/null
gap "$d" >/dev/null
secs=$(ckpt stop -R --no-background)
seen=$(gap "$d")
rows+=("$(printf 'crcuda    %6s MiB  100%% changed, --no-background: ckpt %s s, pause %s ms observed (device %.1f ms)' "$mb" "$secs" "$seen" \
	"$(awk -v x="$(jnum "$d/stop.json" pause_device_seconds)" 'BEGIN { print x * 1000 }')")")
# The last one restored: the program finishes with the native checksum.
last=$(sed -n 's/^ *"id": *\([0-9]*\).*/\1/p' "$d/stop.json")
kill -9 "$crc_pid"
wait_gone "$crc_pid"
"$ctl" restore --json "$last" >"$d/restore.json" 2>"$d/restore.err" || die "restore: $(cat "$d/restore.err")"
got=$(send "$d" sum)
send "$d" exit >/dev/null
rows+=("result: restored checksum $([ "$got" = "$ref" ] && echo "equals the native run's (ok)" || echo "WRONG: $got, native $ref")")
printf '%s\n' "${rows[@]}"
[ "$got" = "$ref" ] && ok=1
