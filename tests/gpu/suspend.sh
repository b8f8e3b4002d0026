#!/usr/bin/env bash
# tests/gpu/suspend.sh BUILD [MB]: crcudactl suspend/resume on the real driver. state_app with MB MiB of
# device memory (default 4096) under crcuda stops at its ready step; it is suspended (its GPU worker
# ends, so its memory goes back to the GPU), resumed on GPU 0 named by UUID (--gpu GPU-...), and must
# finish with the uninterrupted native run's checksum. Prints the GPU's memory in use (nvidia-smi)
# before, during and after the suspend, the suspend's and resume's times and their last progress lines
# (GB/s), and PASS/FAIL/SKIP lines.
# The daemon keeps one idle worker (--pool 1, its context) throughout: that part does not go.
set -u
build=$(cd "${1:?usage: suspend.sh BUILD [MB]}" && pwd)
mb=${2:-4096}
tmp=$(mktemp -d /tmp/crcuda-suspend-gpu.XXXXXX)
export CRCUDA_SOCKET=$tmp/d.sock CRCUDA_STORE=$tmp/store
ctl=$build/crcudactl/crcudactl
app=$build/tests/programs/state_app
args=(--mb "$mb" --chunks 8 --steps 16)
result() { printf '%-4s %-24s %s\n' "$1" "$2" "${3:-}"; }
checksum() { sed -n 's/.*checksum=\([0-9a-f]*\).*/\1/p' "$1"; }
used() { nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0 | tr -d ' '; }
trap 'pkill -f "crcudad.*$CRCUDA_SOCKET" 2>/dev/null; rm -rf "$tmp"' EXIT

command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1 || { result SKIP suspend "no GPU"; exit 0; }
uuid=$(nvidia-smi --query-gpu=uuid --format=csv,noheader -i 0 | tr -d ' ')
"$app" "${args[@]}" >"$tmp/ref.txt" 2>&1 || { result FAIL suspend_native "$(tail -2 "$tmp/ref.txt")"; exit 1; }
ref=$(checksum "$tmp/ref.txt")
"$ctl" run --backend cuda -- "$app" "${args[@]}" --ready-file "$tmp/ready" --go-file "$tmp/go" \
	</dev/null >"$tmp/out" 2>"$tmp/err" &
pid=$!
for _ in $(seq 600); do [ -e "$tmp/ready" ] && break; sleep 0.1; done
[ -e "$tmp/ready" ] || { result FAIL suspend "not ready: $(tail -2 "$tmp/err" | tr '\n' ' ')"; exit 1; }
before=$(used)
t0=$(date +%s.%N)
"$ctl" suspend --progress "$pid" >"$tmp/s.out" 2>"$tmp/s.err" || { result FAIL suspend "$(cat "$tmp/s.err")"; exit 1; }
t1=$(date +%s.%N)
sleep 1
during=$(used)
state=$("$ctl" status "$pid" 2>&1)
t2=$(date +%s.%N)
"$ctl" resume --progress --gpu "$uuid" "$pid" >"$tmp/r.out" 2>"$tmp/r.err" || { result FAIL resume "$(cat "$tmp/r.err")"; exit 1; }
t3=$(date +%s.%N)
after=$(used)
touch "$tmp/go"
wait "$pid"
rc=$?
got=$(checksum "$tmp/out")

printf '\n%-8s %14s\n' phase "GPU MiB used"
printf '%-8s %14s\n' before "$before" during "$during" after "$after"
awk -v a="$t0" -v b="$t1" -v c="$t2" -v d="$t3" -v mb="$mb" \
	'BEGIN { printf "suspend %.2f s, resume %.2f s (%s MiB of device memory)\n", b - a, d - c, mb }'
echo "status while suspended: $state"
cat "$tmp/s.out" "$tmp/r.out"
grep -h "^crcudactl: \(suspend\|resume\): .*GB/s" "$tmp/s.err" "$tmp/r.err" | tail -2
[ $rc = 0 ] && [ -n "$got" ] && [ "$got" = "$ref" ] || { result FAIL suspend_exact "checksum '$got' vs native '$ref' (exit $rc): $(tail -2 "$tmp/err" | tr '\n' ' ')"; exit 1; }
result PASS suspend_exact "checksum $got = native"
case $state in *": suspended ("*) result PASS suspend_status "suspended" ;; *) result FAIL suspend_status "$state"; exit 1 ;; esac
# The session's memory must have gone back to the GPU while suspended (most of MB).
if [ $((before - during)) -ge $((mb * 3 / 4)) ]; then
	result PASS suspend_frees "$((before - during)) MiB freed while suspended"
else
	result FAIL suspend_frees "only $((before - during)) MiB freed of $mb"
	exit 1
fi
