#!/usr/bin/env bash
# Export and import of a checkpoint whose chunks are stored compressed: the stream carries them
# uncompressed (checksummed); the importing store compresses them by its own policy; every chunk of
# every store reads back to its hash (store verify), and the checkpoints name the same chunks.
# Usage: test_export_compress.sh PATH/TO/crcudactl PATH/TO/unit_store
set -u
ctl=$1 unit_store=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
field() { # store id key: a number from `inspect --json`
	"$ctl" --json inspect --store "$1" "$2" | python3 -c "import json,sys; print(json.load(sys.stdin)['$3'])"
}
chunks() { # store id: the chunk hashes the checkpoint names, in order
	"$ctl" --json inspect --chunks --store "$1" "$2" |
		python3 -c "import json,sys; [print(c['hash']) for r in json.load(sys.stdin)['regions'] for c in r['chunks']]"
}

mkdir -p "$tmp/images"
echo "a CRIU image" >"$tmp/images/inventory.img"
unset CRCUDA_STORE_COMPRESS
id=$("$unit_store" write_compressible "$tmp/a" "$tmp/images") || { echo "FAIL: writing the store"; exit 1; }
unique=$(field "$tmp/a" "$id" unique_bytes) stored=$(field "$tmp/a" "$id" stored_bytes)
[ "$stored" -lt $((unique * 7 / 10)) ] || fail "source checkpoint not compressed: $stored of $unique bytes stored"
"$ctl" store verify --store "$tmp/a" >/dev/null || fail "verify of the source store"
"$ctl" export --store "$tmp/a" -o "$tmp/x.crx" "$id" >/dev/null || { echo "FAIL: export"; exit 1; }
# The stream holds the chunks' raw bytes: at least the logical size.
[ "$(stat -c %s "$tmp/x.crx")" -ge "$unique" ] || fail "the stream is smaller than the raw chunks"

for policy in auto off zstd; do
	dst=$tmp/b-$policy
	CRCUDA_STORE_COMPRESS=$policy "$ctl" --json import --store "$dst" -i "$tmp/x.crx" >"$tmp/imp.json" ||
		{ fail "import ($policy)"; continue; }
	id2=$(python3 -c "import json; print(json.load(open('$tmp/imp.json'))['id'])")
	"$ctl" store verify --store "$dst" >/dev/null || fail "verify of the imported store ($policy)"
	cmp -s <(chunks "$tmp/a" "$id") <(chunks "$dst" "$id2") || fail "the imported checkpoint names other chunks ($policy)"
	u2=$(field "$dst" "$id2" unique_bytes) s2=$(field "$dst" "$id2" stored_bytes)
	[ "$u2" = "$unique" ] || fail "imported unique bytes $u2, exported $unique ($policy)"
	case $policy in
	off) [ "$s2" = "$u2" ] || fail "off: $s2 of $u2 bytes stored" ;;
	*) [ "$s2" -lt $((u2 * 7 / 10)) ] || fail "$policy: not compressed, $s2 of $u2 bytes stored" ;;
	esac
	# Importing again into the same store: every chunk is already there.
	CRCUDA_STORE_COMPRESS=$policy "$ctl" import --store "$dst" -i "$tmp/x.crx" >/dev/null || fail "second import ($policy)"
	"$ctl" store verify --store "$dst" >/dev/null || fail "verify after the second import ($policy)"
done
# A damaged compressed chunk in the source (found by walking the pack's chunk headers: magic, encoding,
# stored length, hash): verify and export find it (export reads every chunk checked).
pack=$(ls "$tmp/a"/packs/*.pack | head -1)
python3 - "$pack" <<'PY' || fail "no compressed chunk in $pack"
import struct, sys
f = open(sys.argv[1], "r+b"); data = f.read(); off = 32
while off + 32 <= len(data):
    magic, enc, n = struct.unpack_from("<IIQ", data, off)
    if enc:
        f.seek(off + 32 + n // 2); f.write(bytes([data[off + 32 + n // 2] ^ 0x5a])); sys.exit(0)
    off += 32 + n
sys.exit(1)
PY
"$ctl" store verify --store "$tmp/a" >/dev/null 2>&1 && fail "verify missed a damaged byte"
"$ctl" export --store "$tmp/a" -o "$tmp/y.crx" "$id" >/dev/null 2>"$tmp/err" && fail "export of a damaged checkpoint succeeded"
[ "$fails" = 0 ] && echo "PASS: export/import of compressed chunks"
exit $((fails != 0))
