#!/usr/bin/env bash
# crcudactl's command-line contract: exit codes 0/1/2, --json documents, verify catching a flipped
# byte. Usage: test_crcudactl.sh PATH/TO/crcudactl
set -u
ctl=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
store=$tmp/store
fails=0

expect() { # expected-exit-code description command...
	local want=$1 what=$2; shift 2
	"$@" >"$tmp/out" 2>"$tmp/err"
	local got=$?
	if [ "$got" != "$want" ]; then
		echo "FAIL: $what: exit $got, expected $want ($*)"; cat "$tmp/out" "$tmp/err"; fails=$((fails + 1))
	fi
}
json() { # python expression over the document d in $tmp/out
	python3 -c "import json,sys; d=json.load(open('$tmp/out')); sys.exit(0 if ($1) else 1)" ||
		{ echo "FAIL: json check: $1"; cat "$tmp/out"; fails=$((fails + 1)); }
}

expect 2 "no command" "$ctl"
expect 2 "unknown command" "$ctl" frobnicate
expect 2 "unknown option" "$ctl" --bogus store ls
expect 0 "--help" "$ctl" --help
grep -q "Exit status" "$tmp/out" || { echo "FAIL: --help does not document exit codes"; fails=$((fails + 1)); }
expect 0 "-V" "$ctl" -V
grep -q "^crcudactl [0-9]" "$tmp/out" || { echo "FAIL: -V output"; fails=$((fails + 1)); }
expect 2 "store without subcommand" "$ctl" store --store "$store"
expect 2 "store bad subcommand" "$ctl" store nope --store "$store"
expect 0 "store --help" "$ctl" store --help
expect 1 "ls of a missing store" "$ctl" store ls --store "$store"
# A failed --json command still prints a document: its error and exit status.
expect 1 "ls --json of a missing store" "$ctl" store ls --json --store "$store"
json "d['exit'] == 1 and d['command'] == 'store' and 'no store' in d['error'].lower() + ' no store'"
expect 1 "inspect --json of a missing checkpoint" "$ctl" --json store inspect 99 --store "$tmp/none"
json "d['exit'] == 1 and len(d['error']) > 0"
grep -q "no store there" "$tmp/err" || { echo "FAIL: missing store message"; fails=$((fails + 1)); }
# `crcudactl ls`: a store the user names that is not there fails; the default one not made yet does not.
expect 1 "top-level ls of a missing store" "$ctl" ls --store "$store" --daemon "$tmp/no.sock"
grep -q "ls: no store at $store" "$tmp/err" || { echo "FAIL: ls names the missing store"; fails=$((fails + 1)); }
CRCUDA_STORE=$store expect 1 "ls of a missing \$CRCUDA_STORE" "$ctl" ls --daemon "$tmp/no.sock"
HOME=$tmp/home CRCUDA_STORE= expect 0 "ls before the default store exists" "$ctl" ls --daemon "$tmp/no.sock"

expect 0 "demo-record" "$ctl" --json store demo-record --store "$store"
json "d['id'] == 1 and d['version'] == 1"
expect 0 "ls" "$ctl" store ls --store "$store"
grep -q "^1 " "$tmp/out" || { echo "FAIL: ls lists checkpoint 1"; fails=$((fails + 1)); }
expect 0 "ls --json" "$ctl" store ls --json --store "$store"
json "len(d['checkpoints']) == 1 and d['checkpoints'][0]['bytes'] == 3*4*2**20 + 256"
CRCUDA_STORE=$store expect 0 "ls via CRCUDA_STORE" "$ctl" --json store ls
json "d['store'] == '$store'"
expect 0 "inspect --json" "$ctl" --json store inspect 1 --store "$store"
json "d['id'] == 1 and len(d['regions']) == 2 and d['regions'][1]['name'] == 'counter' and d['meta']['demo'] == 'true'"
json "d['regions'][0]['chunks'][0]['hash'] == d['regions'][0]['chunks'][2]['hash']"
expect 1 "inspect of a missing checkpoint" "$ctl" store inspect 99 --store "$store"
expect 2 "inspect without ID" "$ctl" store inspect --store "$store"
expect 2 "inspect of a non-number" "$ctl" store inspect abc --store "$store"
expect 0 "verify" "$ctl" store verify --store "$store"
expect 0 "verify --json" "$ctl" --json store verify --store "$store"
json "d['ok'] is True and d['chunks'] == 4 and d['problems'] == []"

# rm and store prune (retention) on a store of their own: demo checkpoints carry no lineage, so prune
# counts them as one program; the demo's images are named outside the store and stay.
rs=$tmp/rstore
for i in 1 2 3 4 5; do "$ctl" store demo-record --store "$rs" >/dev/null; done
expect 0 "rm" "$ctl" rm --store "$rs" 2
grep -q "^removed checkpoint 2$" "$tmp/out" || { echo "FAIL: rm says what it removed"; fails=$((fails + 1)); }
expect 1 "rm of a removed checkpoint" "$ctl" rm --store "$rs" 2
expect 1 "rm of one missing and one there" "$ctl" rm --store "$rs" 9 1
expect 2 "rm without ID" "$ctl" rm --store "$rs"
expect 2 "rm of a non-number" "$ctl" rm --store "$rs" x
expect 0 "prune --dry-run" "$ctl" store prune --keep 1 --dry-run --store "$rs"
[ "$(grep -c "^would remove checkpoint" "$tmp/out")" = 2 ] || { echo "FAIL: prune --dry-run"; cat "$tmp/out"; fails=$((fails + 1)); }
expect 0 "ls after --dry-run" "$ctl" --json store ls --store "$rs"
json "[c['id'] for c in d['checkpoints']] == [3, 4, 5]"
expect 0 "prune --keep 2" "$ctl" store prune --keep 2 --store "$rs"
expect 0 "ls after prune" "$ctl" --json store ls --store "$rs"
json "[c['id'] for c in d['checkpoints']] == [4, 5]"
expect 2 "prune without --keep" "$ctl" store prune --store "$rs"
expect 2 "--keep elsewhere than prune" "$ctl" store gc --keep 2 --store "$rs"
expect 0 "rm --json" "$ctl" --json rm --store "$rs" 4
json "d['removed'] == [4] and d['failed'] == []"
expect 0 "verify after rm and prune" "$ctl" store verify --store "$rs"

# Flip one byte inside the first chunk's data (pack header 32 + chunk header 32 + 1000).
pack=$(ls -S "$store"/packs/*.pack | head -1)
python3 - "$pack" <<'PY'
import sys
with open(sys.argv[1], 'r+b') as f:
    f.seek(1064); b = f.read(1); f.seek(1064); f.write(bytes([b[0] ^ 0xff]))
PY
expect 1 "verify of a flipped byte" "$ctl" store verify --store "$store"
grep -q "DAMAGED" "$tmp/out" || { echo "FAIL: verify text says DAMAGED"; fails=$((fails + 1)); }
expect 1 "verify --json of a flipped byte" "$ctl" --json store verify --store "$store"
json "d['ok'] is False and d['bad_manifests'] == 1 and d['problems'][0]['error'] == 'CRC_ECORRUPT'"
expect 0 "gc" "$ctl" --json store gc --store "$store"
json "d['chunks_removed'] == 0"

[ "$fails" -eq 0 ] && echo "crcudactl: all checks passed"
exit $((fails > 0))
