#!/usr/bin/env bash
# tests/gpu/faults-cr.sh BUILD: the fault cases of tests/cr/cr.sh (issue 18: a full store, EIO and
# fsync failures during a checkpoint, a restore failing half-way beside another program) with the
# daemon on the real driver (CR_BACKEND=cuda): the device copies go through pinned staging and the
# GPU's digests, the restore through real contexts. Root and CRIU needed. Prints PASS/FAIL/SKIP lines
# and the one-line reasons the refused checkpoints gave. FAULTS_BACKEND=sim runs the same without a GPU.
set -u
build=$(cd "${1:?usage: faults-cr.sh BUILD}" && pwd)
top=$(cd "$(dirname "$0")/../.." && pwd)
backend=${FAULTS_BACKEND:-cuda}
result() { printf '%-4s %-20s %s\n' "$1" "$2" "${3:-}"; }
if [ "$backend" = cuda ] && ! nvidia-smi -L >/dev/null 2>&1; then
	result SKIP faults_cr "no GPU (nvidia-smi)"
	exit 0
fi
fails=0
for case in enospc eio fsync restore-fails; do
	out=$(CR_BACKEND=$backend CRCUDA_CRIU=${CRCUDA_CRIU:-$top/.deps/criu/bin/criu} timeout 600 \
		"$top/tests/cr/cr.sh" "$build" "$case" 2>&1)
	rc=$?
	echo "$out" | grep '^cr: ' | sed 's/^/    /'
	case $rc in
	0) result PASS "faults_cr_$case" ;;
	77) result SKIP "faults_cr_$case" "$(echo "$out" | grep '^SKIP' | tail -1)" ;;
	*)
		result FAIL "faults_cr_$case" "$(echo "$out" | grep '^FAIL' | tail -1)"
		fails=$((fails + 1))
		;;
	esac
done
exit $((fails > 0))
