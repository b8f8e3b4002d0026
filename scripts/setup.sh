#!/usr/bin/env bash
# Installs everything crcuda needs on a fresh Debian 12 machine, idempotently: Debian packages by
# name, and CRIU built from Debian's source package into .deps/criu (scripts/build-criu.sh).
# Does nothing where all is already there. Needs root (or sudo) only when something is missing.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)

die() { echo "setup: error: $*" >&2; exit 1; }

CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
for f in "$CUDA_HOME/bin/nvcc" "$CUDA_HOME/include/cuda.h" "$CUDA_HOME/include/cudaTypedefs.h" \
	"$CUDA_HOME/lib64/stubs/libcuda.so"; do
	[ -e "$f" ] || die "the CUDA 13 toolkit is missing ($f not found). Install it (nvcc, cuda.h,
  cudaTypedefs.h, lib64/stubs/libcuda.so) or point CUDA_HOME at it; crcuda builds against its headers
  and builds its test programs with nvcc even where there is no GPU."
done

# Debian packages: build tools, LMDB, xxHash (store chunk hashes), Jansson (crcudactl --json),
# and CRIU's build dependencies.
packages=(build-essential patch cmake pkg-config python3 clang-format liblmdb-dev lmdb-utils
	iproute2 libzstd-dev libssl-dev libxxhash-dev libjansson-dev
	libprotobuf-dev libprotobuf-c-dev protobuf-c-compiler protobuf-compiler python3-protobuf
	libnl-3-dev libnl-route-3-dev libnet1-dev libcap-dev libbsd-dev uuid-dev
	libgnutls28-dev libnftables-dev xz-utils)
packages+=(liblz4-dev libzstd-dev) # fatbin decompression (common/modimage.c)
packages+=(clang libclang-rt-dev)  # the libFuzzer targets (fuzz/): clang and its sanitizer runtimes
packages+=(libgnutls30 openssl)    # TLS of remote sessions (loaded at run time); test certificates
packages+=(slurmctld slurmd slurm-client munge) # a single-node Slurm for tests/slurm (slurm-wlm's parts)
packages+=(podman runc) # tests/podman: podman checkpoints through runc (Debian's crun is built without CRIU)
missing=()
for p in "${packages[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
	sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
	echo "setup: installing Debian packages: ${missing[*]}"
	$sudo apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

"$top/scripts/build-criu.sh"
