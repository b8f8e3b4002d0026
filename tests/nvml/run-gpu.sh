#!/bin/sh
# gpu_nvml: test_nvml under the layer on the GPU machine. libcuda.so.1 and libnvidia-ml.so.1 both come
# from <build>/libcrcuda (libcrcuda answering from a private crcudad that crcudactl run starts), so the checks compare crcuda's NVML with libcrcuda and then verify that the process
# holds no /dev/nvidia*. Skips (77) where there is no GPU or libcrcuda is not built.
# usage: run-gpu.sh BUILD_DIR TEST_NVML CHECK_SCRIPT
set -u
build=${1:?}
test_nvml=${2:?}
script=${3:?}
if [ ! -e /dev/nvidiactl ]; then
	echo "run-gpu.sh: no NVIDIA GPU here: skipped"
	exit 77
fi
if [ ! -e "$build/libcrcuda/libcuda.so.1" ]; then
	echo "run-gpu.sh: $build/libcrcuda/libcuda.so.1 is not built: skipped"
	exit 77
fi
# crcudactl run starts a private daemon on the real driver (it puts libcrcuda first on the path).
# In a directory of its own: crcudad refuses a socket directory others may write to (/tmp).
sockdir=$(mktemp -d /tmp/crcuda-gpu-nvml.XXXXXX)
sock=$sockdir/crcudad.sock
# The worker without NVML (CRCUDAD_NVML=none): this checks the answers from the driver API, which the
# queries forwarded to the daemon's NVML (tests/gpu/nvml.sh) fall back to.
CRCUDAD_NVML=none "$build/crcudactl/crcudactl" run --backend cuda --socket "$sock" --idle-exit 2 -- \
	"$test_nvml" "$build/libcrcuda/libnvidia-ml.so.1" --script "$script"
rc=$?
pkill -f "crcudad.*$sock" 2>/dev/null
rm -rf "$sockdir"
exit $rc
