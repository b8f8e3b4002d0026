#!/usr/bin/env bash
# tests/gpu/diagnose.sh BUILD: GPU-machine diagnostics for the open questions of issue 5.
#  1. cuBLASLt's export table 21318c60: where the real driver's slots 4 and 51 live, and their code.
#  2. PyTorch's losses natively with crcuda's NVML (and the real driver): equal to plain native? If not,
#     NVML's answers steer a library's kernel choice.
set -u
build=$(cd "${1:?usage: diagnose.sh BUILD}" && pwd)
top=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d /tmp/crcuda-diag.XXXXXX)

"$build/bench/probe_export" 21318c60971432488ca641ff7324c8f2 4 39 51 | tee "$tmp/probe.txt"
while read -r _ slot _ addr where; do
	[ "$slot" = 39 ] || continue
	lib=${where%+*}
	off=${where##*+}
	echo "--- slot $slot: $lib at $off"
	objdump -d --no-show-raw-insn --start-address="$off" --stop-address=$((off + 0x100)) "$lib" 2>&1 |
		grep -vE '^$|file format|Disassembly' | head -45
done < <(grep '^slot' "$tmp/probe.txt" | sed 's/^slot \([0-9]*\) addr \([^ ]*\) \(.*\)$/x \1 x \2 \3/')

py=${PYTHON:-python3}
mkdir -p "$tmp/nvml"
cp "$build/libcrcuda/libnvidia-ml.so.1" "$tmp/nvml/"
"$py" "$top/tests/torch/train.py" --steps 20 >"$tmp/native.txt" 2>&1
LD_LIBRARY_PATH=$tmp/nvml "$py" "$top/tests/torch/train.py" --steps 20 >"$tmp/nvml.txt" 2>&1
if cmp -s <(grep '^step ' "$tmp/native.txt") <(grep '^step ' "$tmp/nvml.txt"); then
	echo "NVML: native losses unchanged with crcuda's NVML"
else
	echo "NVML: losses change with crcuda's NVML:"
	diff <(grep '^step ' "$tmp/native.txt") <(grep '^step ' "$tmp/nvml.txt") | head -6
fi

# 3. The 1-ulp loss differences under the layer: do they go away without cuDNN?
"$py" "$top/tests/torch/train.py" --steps 20 --no-cudnn >"$tmp/n-nocudnn.txt" 2>&1
"$build/crcudactl/crcudactl" run --backend cuda --socket "$tmp/d.sock" -- "$py" "$top/tests/torch/train.py" \
	--steps 20 --no-cudnn >"$tmp/l-nocudnn.txt" 2>&1
if cmp -s <(grep '^step ' "$tmp/n-nocudnn.txt") <(grep '^step ' "$tmp/l-nocudnn.txt"); then
	echo "no cuDNN: losses under the layer equal native"
else
	echo "no cuDNN: losses under the layer still differ:"
	diff <(grep '^step ' "$tmp/n-nocudnn.txt") <(grep '^step ' "$tmp/l-nocudnn.txt") | head -6
fi
pkill -f "crcudad.*$tmp/d.sock" 2>/dev/null

# 4. Which of libcrcuda's locally cached answers differ from the driver's during the training.
CRCUDA_VERIFY_LOCAL=1 "$build/crcudactl/crcudactl" run --backend cuda --socket "$tmp/d2.sock" -- "$py" \
	"$top/tests/torch/train.py" --steps 20 >/dev/null 2>"$tmp/verify.err"
echo "verify: $(grep -c 'verify:' "$tmp/verify.err") mismatches"
grep 'verify:' "$tmp/verify.err" | sed 's/^([0-9. ]*) [0-9]* //' | sort | uniq -c | sort -rn | head -12
pkill -f "crcudad.*$tmp/d2.sock" 2>/dev/null
