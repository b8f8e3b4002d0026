#!/bin/sh
# unit_nvml_check_script: check-no-dev-nvidia.sh passes on a process without the device files and fails,
# naming them, on one that holds them (a descriptor and a shared mapping of /dev/zero stand in for
# /dev/nvidia*, through CRCUDA_CHECK_DEV_PREFIX).
set -u
script=${1:?usage: test_check_script.sh check-no-dev-nvidia.sh}
fail() {
	echo "test_check_script: $*" >&2
	exit 1
}
sh "$script" $$ >/dev/null || fail "a clean shell was reported"
python3 -c '
import mmap, os, time
fd = os.open("/dev/zero", os.O_RDWR)
m = mmap.mmap(fd, 4096, mmap.MAP_SHARED)
time.sleep(60)
' &
child=$!
for _ in $(seq 100); do
	grep -q /dev/zero "/proc/$child/maps" 2>/dev/null && break
	sleep 0.1
done
out=$(CRCUDA_CHECK_DEV_PREFIX=/dev/zero sh "$script" "$child" 2>&1)
rc=$?
kill "$child" 2>/dev/null
[ "$rc" -eq 1 ] || fail "expected exit 1 for a process holding /dev/zero, got $rc: $out"
echo "$out" | grep -q "fd .* -> /dev/zero" || fail "the descriptor was not named: $out"
echo "$out" | grep -q "mapped /dev/zero" || fail "the mapping was not named: $out"
sh "$script" 999999999 2>/dev/null
[ $? -eq 2 ] || fail "a missing process must exit 2"
echo "test_check_script: ok"
