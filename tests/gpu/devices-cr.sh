#!/usr/bin/env bash
# tests/gpu/devices-cr.sh BUILD: on a machine with two GPUs or more (the device tool's nvidia-h200-x2),
# state_app with its chunks on two devices (device 0's primary context, a created context on device 1)
# under crcuda on the real driver: checkpointed mid-run (killed), restored as it was and restored with
# the devices swapped (--gpu 1,0); each finishes with the uninterrupted native run's checksum. Prints
# PASS/FAIL/SKIP lines.
set -u
build=$(cd "${1:?usage: devices-cr.sh BUILD}" && pwd)
tmp=$(mktemp -d /tmp/crcuda-devices-cr.XXXXXX)
export CRCUDA_SOCKET=$tmp/d.sock CRCUDA_STORE=$tmp/store
ctl=$build/crcudactl/crcudactl
app=$build/tests/programs/state_app
args=(--mb 2048 --chunks 8 --steps 16 --devices 2)
result() { printf '%-4s %-32s %s\n' "$1" "$2" "${3:-}"; }
checksum() { sed -n 's/.*checksum=\([0-9a-f]*\).*/\1/p' "$1"; }
gone() { [ ! -e "/proc/$1" ] || grep -q '^State:.*Z' "/proc/$1/status" 2>/dev/null; }
trap 'pkill -f "crcudad.*$CRCUDA_SOCKET" 2>/dev/null' EXIT

ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
[ "$ngpu" -ge 2 ] || { result SKIP devices_cr "$ngpu GPU(s): needs two"; exit 0; }
"$app" "${args[@]}" >"$tmp/ref.txt" 2>&1 || { result FAIL devices_native "$(tail -2 "$tmp/ref.txt")"; exit 1; }
ref=$(checksum "$tmp/ref.txt")

# case NAME [RESTORE OPTIONS...]: run under the layer, checkpoint at the ready step, restore, finish.
case_run() {
	local name=$1 d=$tmp/$1 pid id
	shift
	mkdir -p "$d"
	setsid "$ctl" run --backend cuda -- "$app" "${args[@]}" --ready-file "$d/ready" --go-file "$d/go" \
		</dev/null >"$d/out" 2>"$d/err" &
	pid=$!
	disown $pid
	for _ in $(seq 600); do [ -e "$d/ready" ] && break; sleep 0.1; done
	[ -e "$d/ready" ] || { result FAIL "$name" "not ready: $(tail -2 "$d/err" | tr '\n' ' ')"; return; }
	"$ctl" checkpoint --json "$pid" >"$d/ckpt.json" 2>"$d/ckpt.err" ||
		{ result FAIL "$name" "checkpoint: $(tail -2 "$d/ckpt.err" | tr '\n' ' ')"; return; }
	for _ in $(seq 500); do gone "$pid" && break; sleep 0.01; done
	id=$(sed -n 's/^ *"id": *\([0-9]*\).*/\1/p' "$d/ckpt.json")
	"$ctl" inspect "$id" 2>/dev/null | grep -E 'crcuda\.devices|crcuda\.device\.[0-9]' >"$d/devices.txt"
	"$ctl" restore "$@" "$id" >"$d/restore.out" 2>"$d/restore.err" ||
		{ result FAIL "$name" "restore $*: $(tail -2 "$d/restore.err" | tr '\n' ' ')"; return; }
	touch "$d/go"
	for _ in $(seq 3000); do gone "$pid" && break; sleep 0.02; done
	if [ "$(checksum "$d/out")" = "$ref" ]; then
		result PASS "$name" "checksum $ref = native; $(tr '\n' ' ' <"$d/devices.txt")"
	else
		result FAIL "$name" "checksum '$(checksum "$d/out")', native $ref: $(tail -2 "$d/err" | tr '\n' ' ')"
	fi
}
case_run devices_cr_same
case_run devices_cr_swapped --gpu 1,0
