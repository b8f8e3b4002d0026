#!/usr/bin/env bash
# Builds CRIU 4.1.1 from Debian's source package (suite trixie), with the fixes in scripts/criu-patches,
# into the project-local prefix .deps/criu, idempotently. Called by scripts/setup.sh at the start of every
# test run: where .deps/criu/bin/criu already reports version 4.1.1, built with the same patches, it
# does nothing.
#
# A copy of each build is kept outside the clone, in
# ${XDG_CACHE_HOME:-~/.cache}/crcuda/criu-<version>-<SHA-256 of criu_<version>.orig.tar.xz>-p<patches>: a new clone
# on a machine that built it once copies it from there (no download, no build). A fresh machine builds
# it as before and fills the cache; an existing .deps/criu of the same version and source fills it too.
#
# Result (everything needed to carry CRIU to a machine without a package registry):
#   .deps/criu/bin/criu        wrapper: sets LD_LIBRARY_PATH=.deps/criu/lib, execs sbin/criu
#   .deps/criu/sbin/criu       the stripped CRIU binary
#   .deps/criu/lib/            the shared libraries ldd lists for it that are not glibc's
#   .deps/criu/include/        criu-plugin.h, criu-log.h, log.h (all a CRIU plugin build needs)
#
# The apt state of the machine is left alone: the deb-src entry, the package lists and apt's cache
# live under .deps/criu-build/apt. Logs go to .deps/criu-build/logs.
#
# Environment: CRCUDA_DEPS_DIR (default <repo>/.deps), CRIU_DEBIAN_MIRROR (default: the URI of the
# machine's Debian source list, else http://deb.debian.org/debian), CRIU_BUILD_JOBS (default nproc),
# CRCUDA_CRIU_CACHE (the cache's directory, default ${XDG_CACHE_HOME:-$HOME/.cache}/crcuda; "none": no
# cache).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)

CRIU_VERSION=4.1.1
# SHA-256 of criu_$CRIU_VERSION.orig.tar.xz: the cache key, and checked against the source index's.
CRIU_ORIG_SHA256=f80a66cb3726bb2116266d4759ce3bcbfab7abdb6b6d430bf20dd41911717afe
CRIU_SUITE=trixie
# Fixes applied on top of the upstream source, in name order (scripts/criu-patches/*.patch, -p1):
# their SHA-256 is part of the install's and the cache's identity.
patch_dir=$top/scripts/criu-patches
patch_sha=$(cat "$patch_dir"/*.patch 2>/dev/null | sha256sum | cut -c1-16)
deps=${CRCUDA_DEPS_DIR:-$top/.deps}
prefix=$deps/criu
work=$deps/criu-build
logs=$work/logs
cache_root=${CRCUDA_CRIU_CACHE:-${XDG_CACHE_HOME:-${HOME:-/nonexistent}/.cache}/crcuda}
cache=""
[ "$cache_root" = none ] || cache=$cache_root/criu-$CRIU_VERSION-$CRIU_ORIG_SHA256-p$patch_sha

die() {
	echo "build-criu: error: $1" >&2
	if [ $# -ge 2 ] && [ -f "$2" ]; then
		echo "build-criu: last lines of $2:" >&2
		tail -n 25 "$2" | sed 's/^/  | /' >&2
		echo "build-criu: full log: $2" >&2
	fi
	exit 1
}
note() { echo "build-criu: $*"; }

# A CRIU install of ours at $1 (default $prefix) that runs and reports $CRIU_VERSION.
installed_ok() {
	local p=${1:-$prefix}
	[ -x "$p/bin/criu" ] && [ -x "$p/sbin/criu" ] &&
		[ -f "$p/include/criu-plugin.h" ] &&
		"$p/bin/criu" --version 2>/dev/null | grep -qx "Version: $CRIU_VERSION"
}
# ... built from the source the cache key names (its VERSION line records the tarball's SHA-256 and
# the patches').
from_key_source() { grep -qs "sha256 $CRIU_ORIG_SHA256) patches $patch_sha " "${1:-$prefix}/VERSION"; }

# Copies a good $prefix into the cache (best effort: a cache that cannot be written is no error).
cache_store() {
	[ -n "$cache" ] && [ ! -d "$cache" ] && from_key_source || return 0
	local tmp="$cache.tmp.$$"
	if mkdir -p "$cache_root" 2>/dev/null && cp -a "$prefix" "$tmp" 2>/dev/null && mv -T "$tmp" "$cache" 2>/dev/null; then
		note "cached in $cache"
	else
		rm -rf "$tmp"
	fi
	return 0
}

# Fast path: nothing to do (a build without this set of patches is built again).
if installed_ok && from_key_source; then
	cache_store
	exit 0
fi

mkdir -p "$deps" "$work" "$logs"
# One build at a time (several test runs may start together).
exec 9>"$work/lock"
flock 9
installed_ok && from_key_source && exit 0

# --- 0. The cache: a build of this version and source made on this machine before. -------------
if [ -n "$cache" ] && installed_ok "$cache" && from_key_source "$cache"; then
	rm -rf "$work/stage"
	cp -a "$cache" "$work/stage"
	rm -rf "$prefix"
	mv "$work/stage" "$prefix"
	if installed_ok; then
		note "CRIU $CRIU_VERSION copied from the cache $cache"
		exit 0
	fi
	note "the cached CRIU in $cache does not run here: building it"
fi

start=$(date +%s)
note "building CRIU $CRIU_VERSION into $prefix (logs in $logs)"
for t in apt-get apt-cache make gcc sha256sum tar xz ldd strip dpkg-query patch; do
	command -v "$t" >/dev/null || die "'$t' not found; run scripts/setup.sh (it installs CRIU's build dependencies)"
done

# --- 1. A private deb-src entry for trixie, with the mirror of the machine's own Debian list. ----
mirror=${CRIU_DEBIAN_MIRROR:-}
if [ -z "$mirror" ]; then
	# deb822 lists first (URIs: lines), then one-line lists; the first plain Debian archive wins
	# (not debian-security, not debian-ports).
	mirror=$(cat /etc/apt/sources.list.d/*.sources 2>/dev/null |
		awk 'tolower($1) == "uris:" { for (i = 2; i <= NF; i++) print $i }' |
		grep -E '^https?://[^ ]*/debian/?$' | head -n 1 || true)
fi
if [ -z "$mirror" ]; then
	mirror=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
		awk '$1 == "deb" || $1 == "deb-src" { for (i = 2; i <= NF; i++) if ($i ~ /^https?:/) { print $i; break } }' |
		grep -E '/debian/?$' | head -n 1 || true)
fi
mirror=${mirror:-http://deb.debian.org/debian}
mirror=${mirror%/}

apt_dir=$work/apt
mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" "$work/dl"
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
[ -f "$keyring" ] || die "$keyring not found (Debian package debian-archive-keyring)"
cat >"$apt_dir/criu-src.sources" <<EOF
Types: deb-src
URIs: $mirror
Suites: $CRIU_SUITE
Components: main
Signed-By: $keyring
EOF
apt_opts=(-o "Dir::Etc::SourceList=$apt_dir/criu-src.sources" -o "Dir::Etc::SourceParts=/dev/null"
	-o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache"
	-o "APT::Sandbox::User=$(id -un)")

if ! ls "$apt_dir"/lists/*_dists_${CRIU_SUITE}_*Sources* >/dev/null 2>&1; then
	note "fetching the $CRIU_SUITE source index from $mirror"
	# apt-get update may exit 0 when a fetch fails: the index file is what counts.
	apt-get "${apt_opts[@]}" update >"$logs/apt-update.log" 2>&1 || true
	ls "$apt_dir"/lists/*_dists_${CRIU_SUITE}_*Sources* >/dev/null 2>&1 ||
		die "could not fetch the $CRIU_SUITE source index (deb-src $mirror $CRIU_SUITE main): network? mirror?" \
			"$logs/apt-update.log"
fi

# --- 2. The SHA-256 of criu_<version>.orig.tar.xz as the source index lists it. ----------------
orig=criu_$CRIU_VERSION.orig.tar.xz
apt-cache "${apt_opts[@]}" showsrc criu >"$logs/showsrc.log" 2>&1 ||
	die "apt-cache showsrc criu failed" "$logs/showsrc.log"
want_sha=$(awk -v f="$orig" '/^Checksums-Sha256:/ { s = 1; next } /^[^ ]/ { s = 0 }
	s && $3 == f && length($1) == 64 { print $1; exit }' "$logs/showsrc.log")
deb_version=$(awk -v v="$CRIU_VERSION" '$1 == "Version:" && index($2, v "-") == 1 { print $2; exit }' \
	"$logs/showsrc.log")
if [ -z "$want_sha" ] || [ -z "$deb_version" ]; then
	rm -f "$apt_dir"/lists/*Sources* # maybe stale: fetch the index again next time
	die "the $CRIU_SUITE source index at $mirror does not list $orig (it has criu $(awk '$1 == "Version:" { printf "%s ", $2 }' "$logs/showsrc.log")); update CRIU_VERSION in $0" "$logs/showsrc.log"
fi
[ "$want_sha" = "$CRIU_ORIG_SHA256" ] ||
	die "the $CRIU_SUITE source index lists SHA-256 $want_sha for $orig, $0 expects $CRIU_ORIG_SHA256 (CRIU_ORIG_SHA256)"

# --- 3. The upstream tarball (the .dsc and .debian.tar.xz may 404: they are not needed). -------
tarball=$work/dl/$orig
have_sha=""
[ -f "$tarball" ] && have_sha=$(sha256sum "$tarball" | cut -d' ' -f1)
if [ "$have_sha" != "$want_sha" ]; then
	rm -f "$tarball"
	note "downloading criu $deb_version source ($orig)"
	# apt-get exits non-zero when the .dsc or .debian.tar.xz 404s; only the tarball matters.
	(cd "$work/dl" && apt-get "${apt_opts[@]}" source --download-only "criu=$deb_version") \
		>"$logs/download.log" 2>&1 || true
	[ -f "$tarball" ] || die "downloading $orig from $mirror failed (network?)" "$logs/download.log"
	have_sha=$(sha256sum "$tarball" | cut -d' ' -f1)
	if [ "$have_sha" != "$want_sha" ]; then
		mv -f "$tarball" "$tarball.bad"
		die "SHA-256 mismatch for $orig: got $have_sha, the $CRIU_SUITE source index lists $want_sha (kept as $tarball.bad)"
	fi
fi
note "source $orig: SHA-256 $have_sha (matches the source index)"

# --- 4. Unpack and build. ----------------------------------------------------------------------
src=$work/criu-$CRIU_VERSION
rm -rf "$src"
tar -xJf "$tarball" -C "$work" >"$logs/unpack.log" 2>&1 || die "unpacking $tarball failed" "$logs/unpack.log"
[ -f "$src/Makefile" ] || die "unpacking $tarball did not give $src/Makefile"
for p in "$patch_dir"/*.patch; do
	[ -e "$p" ] || continue
	patch -d "$src" -p1 --no-backup-if-mismatch <"$p" >>"$logs/patch.log" 2>&1 ||
		die "applying $(basename "$p") failed" "$logs/patch.log"
	note "applied $(basename "$p")"
done
jobs=${CRIU_BUILD_JOBS:-$(nproc)}
note "make criu -j$jobs (log: $logs/build.log)"
make -C "$src" -j"$jobs" criu >"$logs/build.log" 2>&1 ||
	die "building CRIU failed (are its build dependencies installed? scripts/setup.sh installs them)" "$logs/build.log"
[ -x "$src/criu/criu" ] || die "the build did not produce $src/criu/criu" "$logs/build.log"

# --- 5. Install into a staging prefix, then move it into place. -------------------------------
stage=$work/stage
rm -rf "$stage"
mkdir -p "$stage/bin" "$stage/sbin" "$stage/lib" "$stage/include"
install -m 0755 "$src/criu/criu" "$stage/sbin/criu"
strip --strip-unneeded "$stage/sbin/criu"
# criu-plugin.h includes only system headers; criu-log.h (print_on_level and the pr_* macros,
# resolved against the criu binary) needs log.h.
for h in criu-plugin.h criu-log.h log.h; do
	install -m 0644 "$src/criu/include/$h" "$stage/include/$h"
done

# Shared libraries that are not glibc's (glibc is the one thing the target machine brings).
ldd "$stage/sbin/criu" >"$logs/ldd.log" 2>&1 || die "ldd on the new criu failed" "$logs/ldd.log"
grep -q "not found" "$logs/ldd.log" && die "the new criu misses shared libraries" "$logs/ldd.log"
is_glibc() {
	local real owner
	real=$(readlink -f "$1")
	owner=$(dpkg-query -S "$real" 2>/dev/null || dpkg-query -S "$1" 2>/dev/null || true)
	case "${owner%%:*}" in
	libc6 | libc6-* ) return 0 ;;
	esac
	case "$(basename "$1")" in
	ld-linux*.so.* | libc.so.* | libm.so.* | libpthread.so.* | libdl.so.* | librt.so.* | \
		libresolv.so.* | libutil.so.* | libanl.so.* | libmvec.so.*) return 0 ;;
	esac
	return 1
}
awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }' "$logs/ldd.log" | while read -r soname path; do
	is_glibc "$path" && continue
	cp -L "$path" "$stage/lib/$soname"
	chmod 0644 "$stage/lib/$soname"
	strip --strip-unneeded "$stage/lib/$soname"
done

cat >"$stage/bin/criu" <<'EOF'
#!/bin/sh
# Runs the project-local CRIU with the shared libraries carried next to it (scripts/build-criu.sh).
here=$(dirname "$(readlink -f "$0")")
LD_LIBRARY_PATH="$here/../lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export LD_LIBRARY_PATH
exec "$here/../sbin/criu" "$@"
EOF
chmod 0755 "$stage/bin/criu"
cat >"$stage/VERSION" <<EOF
criu $deb_version ($orig sha256 $have_sha) patches $patch_sha from $mirror $CRIU_SUITE, built $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(sed -n 's/^PRETTY_NAME=//p' /etc/os-release | tr -d '"')
EOF

"$stage/bin/criu" --version 2>&1 | grep -qx "Version: $CRIU_VERSION" ||
	die "the staged criu does not report version $CRIU_VERSION: $("$stage/bin/criu" --version 2>&1 | head -n 3)"
rm -rf "$prefix"
mv "$stage" "$prefix"
# The build tree stays in $src for reference (CRIU sources, e.g. plugin hooks); it is not carried.

note "installed CRIU $CRIU_VERSION in $prefix ($(du -sh "$prefix" | cut -f1)) in $(($(date +%s) - start)) s"
cache_store
