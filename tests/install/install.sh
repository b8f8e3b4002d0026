#!/usr/bin/env bash
# crcuda installed: `cmake --install BUILD --prefix <scratch>` (no DESTDIR), then the prefix's programs
# only (nothing of the build tree's crcuda: the test programs and their host kernels are still the
# build tree's).
#   install.sh CMAKE BUILD CASE
# CASE: run  the layout is there (programs, private libraries, simulated device, CRIU plugin, man
#            pages, completion), no libcuda.so.1 on the loader's path; the prefix moved elsewhere as a whole, tests/run/run.sh's programs case passes with its
#            crcudactl (libcrcuda, the daemon, its worker and the simulated device all the prefix's)
#       cr   tests/cr/cr.sh's basic case with the prefix's crcudactl and crcudad, CRCUDA_CRIU unset:
#            crcudactl finds criu on $PATH (a wrapper that logs its calls, to the real one) and its
#            plugin in the prefix. Needs root and CRIU: exit 77 otherwise.
set -u
cmake=$1 build=$2 case=$3
here=$(cd "$(dirname "$0")" && pwd)
tests=$(dirname "$here")
top=$(dirname "$tests")

skip() { echo "SKIP: $*"; exit 77; }
if [ "$case" = cr ]; then
	[ "$(id -u)" = 0 ] || skip "needs root (CRIU)"
	criu=${CRCUDA_CRIU:-$top/.deps/criu/bin/criu}
	[ -x "$criu" ] || skip "no CRIU at $criu (scripts/build-criu.sh)"
	[ -f "$build/criu-plugin/plugin/crcuda_plugin.so" ] || skip "the CRIU plugin was not built"
fi

tmp=$(mktemp -d /tmp/crcuda-install.XXXXXX)
ok=0
cleanup() { if [ $ok = 1 ]; then rm -rf "$tmp"; else echo "install: kept $tmp" >&2; fi; }
trap cleanup EXIT
fail() { echo "FAIL ($case): $*" >&2; exit 1; }

prefix=$tmp/prefix
"$cmake" --install "$build" --prefix "$prefix" >"$tmp/install.log" 2>&1 ||
	fail "cmake --install failed: $(tail -n 20 "$tmp/install.log")"
# Where GNUInstallDirs put them (lib, or lib/<multiarch> for /usr; libexec).
libdir=$(dirname "$(find "$prefix" -path '*/crcuda/libcuda.so.1' -not -path '*/sim/*' | head -n 1)")
worker=$(find "$prefix" -path '*/crcuda/crcudad-worker' | head -n 1)
[ -d "$libdir" ] && [ "$libdir" != . ] || fail "no libcrcuda (crcuda/libcuda.so.1) installed: $(cat "$tmp/install.log")"

case $case in
run)
	for f in bin/crcudactl bin/crcudad "${libdir#"$prefix"/}/libcuda.so.1" "${libdir#"$prefix"/}/libnvidia-ml.so.1" \
		"${libdir#"$prefix"/}/sim/libcuda.so.1" "${worker#"$prefix"/}" share/man/man1/crcudactl.1 \
		share/man/man8/crcudad.8 share/bash-completion/completions/crcudactl; do
		[ -n "$f" ] && [ -e "$prefix/$f" ] || fail "not installed: $f ($(cat "$tmp/install.log"))"
	done
	if [ -f "$build/criu-plugin/plugin/crcuda_plugin.so" ]; then
		[ -f "$libdir/criu/crcuda_plugin.so" ] || fail "the CRIU plugin is not in $libdir/criu"
	fi
	# No library directory on the loader's path: libcrcuda's libcuda.so.1 must not shadow the driver.
	[ -e "$prefix/lib/libcuda.so.1" ] && fail "a libcuda.so.1 in $prefix/lib"
	"$prefix/bin/crcudactl" --version >/dev/null || fail "crcudactl --version"
	"$prefix/bin/crcudad" --version >/dev/null || fail "crcudad --version"
	# The programs find each other relative to themselves: the tree works moved as a whole.
	mv "$prefix" "$tmp/moved"
	prefix=$tmp/moved libdir=$tmp/moved/${libdir#"$tmp/prefix"/}
	RUN_PREFIX=$prefix RUN_LIBDIR=$libdir "$tests/run/run.sh" "$build" programs vector_add device_globals \
		"state_app:--mb 8 --chunks 4 --steps 12 --verify" || fail "run.sh programs with the installed crcudactl"
	;;
cr)
	# A criu on $PATH that logs its calls: crcudactl must find it (CRCUDA_CRIU unset).
	mkdir -p "$tmp/path"
	printf '#!/bin/sh\necho "$*" >>"%s"\nexec "%s" "$@"\n' "$tmp/criu-calls" "$criu" >"$tmp/path/criu"
	chmod +x "$tmp/path/criu"
	PATH=$tmp/path:$PATH CR_PREFIX=$prefix CR_CRIU_FROM_PATH=1 CRCUDA_CRIU=$criu "$tests/cr/cr.sh" "$build" basic ||
		fail "cr.sh basic with the installed crcudactl"
	grep -q "^dump " "$tmp/criu-calls" && grep -q "^restore " "$tmp/criu-calls" ||
		fail "crcudactl did not use the criu on \$PATH: $(cat "$tmp/criu-calls" 2>/dev/null)"
	grep -q -- "--libdir $libdir/criu" "$tmp/criu-calls" ||
		fail "criu was not given the installed plugin ($libdir/criu): $(cat "$tmp/criu-calls")"
	;;
*) fail "unknown case $case" ;;
esac
ok=1
echo "install ($case): passed"
