#!/bin/sh
# Runs a driver-API test program on the system's CUDA driver: exits 77 (skip) where there is none, so
# the gpu-labelled tests pass as skipped on machines without a GPU. Usage: run-gpu.sh <program> [args]
if ! ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1 ' &&
	! { [ -n "${LD_LIBRARY_PATH:-}" ] && echo "$LD_LIBRARY_PATH" | tr ':' '\n' | while read -r d; do
		[ -e "$d/libcuda.so.1" ] && echo found; done | grep -q found; }; then
	echo "$(basename "$1"): skipped: no libcuda.so.1 (no CUDA driver installed)" >&2
	exit 77
fi
exec "$@"
