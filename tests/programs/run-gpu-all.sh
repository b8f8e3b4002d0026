#!/bin/sh
# Runs every driver-API test program found in DIR (a build's tests/programs) on the system's CUDA driver
# and prints one line per program; exits 1 if any failed. For the GPU machine, where ctest and the
# build tree's absolute paths are not available: carry DIR (binaries embed their kernels) and run
#   tests/programs/run-gpu-all.sh build/tests/programs
dir=${1:?usage: run-gpu-all.sh <directory with the built test programs>}
here=$(cd "$(dirname "$0")" && pwd)
failed=0
for prog in vector_add streams_events memset device_globals many_launches pinned_async vmm_fixed \
	library_kernel; do
	if [ ! -x "$dir/$prog" ]; then
		echo "gpu_$prog: MISSING ($dir/$prog)"
		failed=1
		continue
	fi
	"$here/run-gpu.sh" "$dir/$prog" >"$dir/gpu_$prog.log" 2>&1
	rc=$?
	case $rc in
	0) echo "gpu_$prog: PASS" ;;
	77) echo "gpu_$prog: SKIP ($(tail -n 1 "$dir/gpu_$prog.log"))" ;;
	*)
		echo "gpu_$prog: FAIL (exit $rc)"
		sed 's/^/    /' "$dir/gpu_$prog.log"
		failed=1
		;;
	esac
done
exit $failed
