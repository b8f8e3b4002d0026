#!/usr/bin/env bash
# soak-leak-check.sh BUILD LEAKLIB: the soak must fail when something leaks (a soak that cannot fail
# proves nothing). A short soak of one job whose daemon runs with LEAKLIB preloaded (soak_leak.c: a
# descriptor and SOAK_LEAK_KB KiB leaked per accepted connection) and whose store is never pruned
# (--soak-keep 0: every checkpoint stays): every trial must still be exact, and the verdict must name
# all three, the daemon's RSS, its open descriptors and the store. Root and CRIU: exit 77 otherwise.
set -u
build=${1:?usage: soak-leak-check.sh BUILD LEAKLIB}
lib=${2:?usage: soak-leak-check.sh BUILD LEAKLIB}
top=$(cd "$(dirname "$0")/../.." && pwd)
out=$(mktemp /tmp/crcuda-soak-leak.XXXXXX)
trap 'rm -f "$out" "$out.csv"' EXIT
SOAK_LEAK_KB=${SOAK_LEAK_KB:-512} "$top/tests/stress/soak.sh" "$build" --cycles "${SOAK_CYCLES:-12}" --jobs 1 \
	--csv "$out.csv" --programs stress_drv --soak-keep 0 --daemon-preload "$lib" >"$out" 2>&1
rc=$?
cat "$out"
[ $rc = 77 ] && exit 77
fail=0
[ $rc = 1 ] || { echo "soak-leak-check: the soak exited $rc, not 1"; fail=1; }
grep -q "^PASS: all exact" "$out" || { echo "soak-leak-check: trials were not all exact (the leak must not break them)"; fail=1; }
for why in "the daemon's RSS grew" "the daemon's open descriptors grew" "the store grew"; do
	grep -q "FAIL: .*$why" "$out" || { echo "soak-leak-check: the verdict did not see it: $why"; fail=1; }
done
[ $fail = 0 ] && echo "soak-leak-check: PASS: the soak fails on a leaking daemon and an unpruned store"
exit $fail
