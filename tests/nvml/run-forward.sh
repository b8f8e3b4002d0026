#!/bin/sh
# sim_nvml_forward*: test_nvml_forward under `crcudactl run --backend sim`, the daemon's worker given
# DAEMON_NVML (the simulated device's NVML) or none.
# usage: run-forward.sh BUILD_DIR TEST OUR_NVML DAEMON_NVML|none
set -u
build=${1:?} test=${2:?} ours=${3:?} daemon_nvml=${4:?}
# A socket directory of its own: crcudad refuses one others may write to (/tmp).
sockdir=$(mktemp -d /tmp/crcuda-nvml-fwd.XXXXXX)
sock=$sockdir/crcudad.sock
unset CRCUDA_REMOTE CRCUDA_TOKEN CRCUDA_TOKEN_FILE CRCUDA_SOCKET
if [ "$daemon_nvml" = none ]; then
	CRCUDAD_NVML=none "$build/crcudactl/crcudactl" run --backend sim --socket "$sock" --idle-exit 2 -- \
		"$test" "$ours" --fallback
else
	CRCUDAD_NVML=$daemon_nvml "$build/crcudactl/crcudactl" run --backend sim --socket "$sock" \
		--idle-exit 2 -- "$test" "$ours" "$daemon_nvml"
fi
rc=$?
pkill -f "crcudad.*$sock" 2>/dev/null
rm -rf "$sockdir"
exit $rc
