#!/usr/bin/env bash
# Collects into .deps/gpu what the GPU machine (Ubuntu 24.04, CUDA 13, no package registry) needs to
# build crcuda there: the headers and shared libraries of the Debian -dev packages the build links.
# CRIU comes separately from .deps/criu. Carry both to the GPU machine (device tool: carry
# [".deps/gpu", ".deps/criu"]) and run tests/gpu/run-on-gpu.sh there.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
out=$top/.deps/gpu
# Keep in step with the find_library calls in cmake/Dependencies.cmake.
dev_packages=(liblmdb-dev liblz4-dev libzstd-dev libxxhash-dev libjansson-dev)
# Headers only: the library is the GPU machine's own, loaded at run time (GnuTLS: common/tls.c).
header_packages=(libgnutls28-dev)
rm -rf "$out"
mkdir -p "$out/include" "$out/lib"
for pkg in "${dev_packages[@]}" "${header_packages[@]}"; do
	dpkg-query -W "$pkg" >/dev/null 2>&1 || continue
	while read -r f; do
		case "$f" in
		/usr/include/*.h)
			rel=${f#/usr/include/}
			mkdir -p "$out/include/$(dirname "$rel")"
			cp "$f" "$out/include/$rel"
			;;
		*.so)
			[[ " ${header_packages[*]} " == *" $pkg "* ]] && continue
			real=$(readlink -f "$f")
			soname=$(objdump -p "$real" | awk '/SONAME/{print $2}')
			cp "$real" "$out/lib/$soname"
			ln -sf "$soname" "$out/lib/$(basename "$f")"
			;;
		esac
	done < <(dpkg -L "$pkg")
done
du -sh "$out"
