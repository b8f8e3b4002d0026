#!/usr/bin/env bash
# tests/gpu/slurm-cr.sh BUILD: tests/slurm/requeue.sh (examples/slurm/crcuda-job.sh under a real
# single-node Slurm, stopped three times, the result equal to an uninterrupted run's) with the daemon on
# the real driver (CR_BACKEND=cuda). Root, CRIU and Debian's slurmctld, slurmd, slurm-client and munge
# (scripts/setup.sh) needed. Prints one PASS/FAIL/SKIP line, the test's own lines before it.
set -u
build=$(cd "${1:?usage: slurm-cr.sh BUILD}" && pwd)
top=$(cd "$(dirname "$0")/../.." && pwd)
result() { printf '%-4s %-20s %s\n' "$1" "$2" "${3:-}"; }
if ! nvidia-smi -L >/dev/null 2>&1; then
	result SKIP slurm_cr "no GPU (nvidia-smi)"
	exit 0
fi
out=$(CR_BACKEND=cuda CRCUDA_CRIU=${CRCUDA_CRIU:-$top/.deps/criu/bin/criu} timeout 600 \
	"$top/tests/slurm/requeue.sh" "$build" 2>&1)
rc=$?
echo "$out" | grep -e '^slurm: ' -e '^crcuda-job: ' -e '^restored ' -e '^checkpoint ' | sed 's/^/    /'
case $rc in
0) result PASS slurm_cr ;;
77) result SKIP slurm_cr "$(echo "$out" | grep '^SKIP' | tail -1)" ;;
*)
	echo "$out" | tail -40 | sed 's/^/    /'
	result FAIL slurm_cr "$(echo "$out" | grep '^FAIL' | tail -1)"
	exit 1
	;;
esac
