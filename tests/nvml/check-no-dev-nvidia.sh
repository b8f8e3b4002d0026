#!/bin/sh
# check-no-dev-nvidia.sh PID: fails, naming each one, when process PID holds a /dev/nvidia* descriptor
# (/proc/PID/fd) or mapping (/proc/PID/maps). Under crcuda an application (a PyTorch training process
# included) must hold neither, or CRIU cannot dump it. Reading another user's process needs root.
# CRCUDA_CHECK_DEV_PREFIX overrides the prefix looked for (tests use /dev/null to see it fail).
set -u
pid=${1:?usage: check-no-dev-nvidia.sh PID}
prefix=${CRCUDA_CHECK_DEV_PREFIX:-/dev/nvidia}
if [ ! -r "/proc/$pid/maps" ] || ! ls "/proc/$pid/fd" >/dev/null 2>&1; then
	echo "check-no-dev-nvidia: cannot read /proc/$pid (no such process, or not permitted)" >&2
	exit 2
fi
bad=0
for fd in /proc/"$pid"/fd/*; do
	target=$(readlink "$fd" 2>/dev/null) || continue
	case "$target" in
	"$prefix"*)
		echo "check-no-dev-nvidia: pid $pid: fd ${fd##*/} -> $target" >&2
		bad=1
		;;
	esac
done
# Field 6 of a maps line is the path; deleted mappings add " (deleted)".
maps=$(awk -v p="$prefix" 'index($6, p) == 1 { print $6 }' "/proc/$pid/maps" | sort -u)
if [ -n "$maps" ]; then
	for m in $maps; do
		echo "check-no-dev-nvidia: pid $pid: mapped $m" >&2
	done
	bad=1
fi
if [ "$bad" -ne 0 ]; then
	exit 1
fi
echo "check-no-dev-nvidia: pid $pid holds no $prefix* descriptor or mapping"
