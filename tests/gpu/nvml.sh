#!/usr/bin/env bash
# NVML as applications see it, natively and under crcuda, on the GPU machine: tests/nvml/nvml_query
# (device 0: identity, XLA's PCIe query, link, memory, BAR1, clocks, utilisation, temperature, power,
# serial, its own entry in the process list) with NVIDIA's libnvidia-ml.so.1, then under
# `crcudactl run` with crcuda's, which forwards to the worker's NVML. Identity, limits and maxima must
# be equal; readings that move (utilisation, temperature, power, current clocks and link) must be
# answered wherever NVIDIA answers them. Prints one table and PASS/FAIL.
#   tests/gpu/nvml.sh BUILD_DIR
set -uo pipefail
build=${1:?usage: nvml.sh BUILD_DIR}
q=$build/tests/nvml/nvml_query
tmp=$(mktemp -d /tmp/crcuda-gpu-nvml.XXXXXX)
trap 'pkill -f "crcudad.*$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT
if [ ! -e /dev/nvidiactl ]; then
	echo "nvml.sh: no NVIDIA GPU here: skipped"
	exit 0
fi
"$q" >"$tmp/native.txt" 2>"$tmp/native.err" || { cat "$tmp/native.err"; echo "FAIL nvml natively"; exit 1; }
"$build/crcudactl/crcudactl" run --backend cuda --socket "$tmp/crcudad.sock" --idle-exit 2 -- "$q" \
	>"$tmp/layer.txt" 2>"$tmp/layer.err" || { cat "$tmp/layer.err"; echo "FAIL nvml under crcuda"; exit 1; }
stable="name uuid pci.busId xla.handle_by_bus_id_same pcie.link.gen.max pcie.link.width.max
	pcie.link.gen.gpumax pcie.speed.max memory.total bar1.total clocks.max.sm clocks.max.mem
	temperature.threshold.slowdown power.limit_mw power.default_limit_mw energy.total_mj.nonzero
	persistence_mode cores memory.bus_width architecture serial vbios processes.self_listed
	processes.self_uses_64MiB"
fails=0
# verdict NATIVE LAYER [EXACT]: a reading must be answered where NVIDIA answers it; EXACT ones equal.
verdict() {
	if [ -n "${3:-}" ]; then
		if [ "$1" = "$2" ]; then v=equal; else v=DIFFERS; fails=$((fails + 1)); fi
	elif [[ $1 == error* ]]; then
		v="(not answered natively)"
	elif [[ $2 == error* || -z $2 ]]; then
		v=UNANSWERED
		fails=$((fails + 1))
	else
		v=answered
	fi
}
printf '%-32s %-44s %-44s %s\n' query native "under crcuda" verdict
while read -r key native; do
	layer=$(awk -v k="$key" '$1 == k { $1 = ""; sub(/^ /, ""); print; exit }' "$tmp/layer.txt")
	exact=""
	[[ " $(echo $stable) " == *" $key "* ]] && exact=1
	verdict "$native" "$layer" "$exact"
	printf '%-32s %-44s %-44s %s\n' "$key" "${native:0:44}" "${layer:0:44}" "$v"
done <"$tmp/native.txt"
# PyTorch's NVML-backed utilities (through pynvml, where it is installed): answered under crcuda too,
# and torch.cuda.list_gpu_processes() names the training process itself.
if python3 -c 'import torch, pynvml' 2>/dev/null; then
	cat >"$tmp/torch_nvml.py" <<'PY'
import os, torch
x = torch.ones(1 << 20, device="cuda")
out = {}
for name in ("utilization", "memory_usage", "temperature", "power_draw", "clock_rate", "device_memory_used"):
    try:
        out[name] = getattr(torch.cuda, name)()
    except Exception as e:
        out[name] = "error " + type(e).__name__
out["self_listed"] = int(str(os.getpid()) in torch.cuda.list_gpu_processes())
for k, v in out.items():
    print(k, v)
PY
	python3 "$tmp/torch_nvml.py" >"$tmp/torch-native.txt" 2>&1
	"$build/crcudactl/crcudactl" run --backend cuda --socket "$tmp/crcudad.sock" --idle-exit 2 -- \
		python3 "$tmp/torch_nvml.py" >"$tmp/torch-layer.txt" 2>&1
	while read -r key native; do
		layer=$(awk -v k="$key" '$1 == k { $1 = ""; sub(/^ /, ""); print; exit }' "$tmp/torch-layer.txt")
		verdict "$native" "$layer" "$([ "$key" = self_listed ] && echo 1)"
		printf '%-32s %-44s %-44s %s\n' "torch.cuda.$key" "${native:0:44}" "${layer:0:44}" "$v"
	done <"$tmp/torch-native.txt"
fi
if [ "$fails" -eq 0 ]; then
	echo "PASS nvml: $(wc -l <"$tmp/native.txt") queries, natively and under crcuda alike"
else
	echo "FAIL nvml: $fails of $(wc -l <"$tmp/native.txt") queries differ or go unanswered under crcuda"
	exit 1
fi
