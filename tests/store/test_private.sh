#!/usr/bin/env bash
# A store is private: made with mode 0700 (its directories) and 0600 (its files) whatever the umask;
# another user may not open it (root may); a checkpoint of another user is restored by root only.
# Usage: test_private.sh PATH/TO/crcudactl. The other-user checks need root (setpriv): skipped without.
set -u
ctl=$1
tmp=$(mktemp -d /tmp/crcuda-private.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
chmod 755 "$tmp"
store=$tmp/store
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

umask 000
"$ctl" store demo-record --store "$store" >"$tmp/out" 2>&1 || fail "demo-record: $(cat "$tmp/out")"
umask 022
for f in "$store" "$store/packs"; do
	[ "$(stat -c %a "$f")" = 700 ] || fail "$f has mode $(stat -c %a "$f"), expected 700"
done
for f in "$store"/data.mdb "$store"/lock.mdb "$store"/packs/*.pack; do
	[ "$(stat -c %a "$f")" = 600 ] || fail "$f has mode $(stat -c %a "$f"), expected 600"
done
"$ctl" --json store inspect 1 --store "$store" >"$tmp/out" || fail "inspect"
grep -q "\"crcuda.uid\": \"$(id -u)\"" "$tmp/out" || fail "the checkpoint does not name its owner: $(cat "$tmp/out")"

if [ "$(id -u)" != 0 ] || ! command -v setpriv >/dev/null; then
	[ $fails = 0 ] || exit 1
	echo "skipped: the other-user checks need root and setpriv"
	exit 77
fi
as_nobody() { setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; }
# A crcudactl restore looks for CRIU first: any executable will do, it is refused before it runs.
export CRCUDA_CRIU=/bin/true

# Another user: refused, naming both uids, for every command (the modes would refuse too, but the
# owner is checked first, and a store made by hand with looser modes is refused all the same).
chmod 755 "$store"
for cmd in "store ls" "store verify" "store inspect 1" "restore 1" "rm 1"; do
	# shellcheck disable=SC2086
	as_nobody "$ctl" $cmd --store "$store" >"$tmp/out" 2>&1 && fail "$cmd by uid 65534 succeeded"
	grep -q "the store belongs to uid 0, and uid 65534 may not use it" "$tmp/out" ||
		fail "$cmd by uid 65534: no clear reason: $(cat "$tmp/out")"
done
"$ctl" store ls --store "$store" | grep -q "^1 " || fail "the store's owner cannot list it any more"

# Root's checkpoint in a store given to uid 65534: the store opens, the restore is refused.
chown -R 65534:65534 "$store"
as_nobody "$ctl" store ls --store "$store" | grep -q "^1 " || fail "uid 65534 cannot list its own store"
as_nobody "$ctl" restore 1 --store "$store" >"$tmp/out" 2>&1 && fail "restore of root's checkpoint by uid 65534 succeeded"
grep -q "restore: checkpoint 1 belongs to uid 0, and uid 65534 may not restore it" "$tmp/out" ||
	fail "restore by uid 65534: no clear reason: $(cat "$tmp/out")"
# Root may restore another user's checkpoint (this one then fails later, for its demo images).
"$ctl" restore 1 --store "$store" >"$tmp/out" 2>&1
grep -q "may not" "$tmp/out" && fail "root was refused: $(cat "$tmp/out")"
grep -q "its CRIU images .* are missing" "$tmp/out" || fail "root's restore: $(cat "$tmp/out")"

[ $fails = 0 ] || exit 1
echo "PASS"
