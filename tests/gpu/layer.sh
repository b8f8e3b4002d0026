#!/usr/bin/env bash
# tests/gpu/layer.sh BUILD: on the GPU machine, everything under crcuda on the real driver, against
# native runs in the same call. Prints one "PASS|FAIL|SKIP name detail" line per check:
#   layer_<prog>          the driver-API programs (tests/programs) through libcrcuda + crcudad
#   layer_pointer_attrs   cuPointerGetAttribute(s) answer as natively (tests/programs/pointer_attrs)
#   layer_nvrtc_saxpy     a kernel compiled at run time by NVRTC, loaded as PTX (tests/nvrtc)
#   layer_cudart_<p>_<v>  the cudart programs (static and shared cudart) through the layer
#   torch_native_repeat   two native runs of tests/torch/train.py give the same losses bit for bit
#   torch_layer_losses    the run under the layer gives the native losses bit for bit
#   torch_no_dev_nvidia   the training process under the layer holds no /dev/nvidia* (fd or map)
#   torch_step_time       step time under the layer / native (goal <= 1.03x; reported)
#   torch_graph_<mode>    tests/torch/graph.py (CUDA graphs: whole-step capture + replay, and
#                         torch.compile reduce-overhead): losses under the layer equal native bit for bit
#   layer_graph_basic     tests/programs/graph_basic, graph_pageable and graph_mem print natively and under the layer
#                         (as do ptr_set_attr, coredump, coop_multi, decompress, logs, async_notify: layer_<name>)
#   layer_graph_mem       the same (graph-owned memory), layer_graph_cond (a conditional WHILE node)
set -u
build=$(cd "${1:?usage: layer.sh BUILD}" && pwd)
top=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d /tmp/crcuda-gpu-layer.XXXXXX)
only=${ONLY:-all} # all | programs | attrs | cudart | torch
export CRCUDA_SOCKET=$tmp/crcudad.sock
lib=$build/libcrcuda
daemon_pid=
steps=${TORCH_STEPS:-200}
cleanup() { [ -n "$daemon_pid" ] && kill "$daemon_pid" 2>/dev/null; wait 2>/dev/null; }
trap cleanup EXIT
result() { printf '%-4s %-32s %s\n' "$1" "$2" "${3:-}"; }

"$build/crcudad/crcudad" --backend cuda --socket "$CRCUDA_SOCKET" --foreground >"$tmp/daemon.out" 2>"$tmp/daemon.log" &
daemon_pid=$!
for _ in $(seq 200); do grep -q ready "$tmp/daemon.out" 2>/dev/null && break; sleep 0.05; done
if ! grep -q ready "$tmp/daemon.out"; then
	result FAIL crcudad_start "$(tail -5 "$tmp/daemon.log" | tr '\n' ' ')"
	exit 1
fi
under_layer() { env LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" timeout 300 "$@"; }

if [ "$only" = all ] || [ "$only" = programs ] || [ "$only" = graphs ]; then
	# CUDA graphs: explicit, captured, updated, graph-owned memory; the same output natively and
	# under the layer.
	for p in graph_basic graph_pageable graph_mem graph_cond graph_attr managed_vars managed_atomics ctx_attach green_ctx ptr_set_attr coredump coop_multi decompress logs async_notify; do
		if [ ! -x "$build/tests/programs/$p" ]; then result SKIP "layer_$p" "not built"
		elif ! "$build/tests/programs/$p" >"$tmp/$p.native" 2>&1; then
			result FAIL "layer_$p" "natively: $(tail -2 "$tmp/$p.native" | tr '\n' ' ')"
		elif under_layer "$build/tests/programs/$p" >"$tmp/$p.layer" 2>&1 && cmp -s "$tmp/$p.native" "$tmp/$p.layer"; then
			result PASS "layer_$p" "$(grep checksum "$tmp/$p.native")"
		else
			result FAIL "layer_$p" "$(tail -3 "$tmp/$p.layer" | tr '\n' ' ')"
			diff "$tmp/$p.native" "$tmp/$p.layer" | head -10
		fi
	done
fi
[ "$only" = all ] || [ "$only" = programs ] && for p in vector_add streams_events memset device_globals many_launches pinned_async vmm_fixed library_kernel memcpy2d managed host_register mempool occupancy stream_attrs jit_link stream_memops textures tensormap module_functions; do
	if under_layer "$build/tests/programs/$p" >"$tmp/$p.log" 2>&1; then result PASS "layer_$p"
	else
		result FAIL "layer_$p" "$(tail -3 "$tmp/$p.log" | tr '\n' ' ')"
		# What held the address a hint asked for (the driver moves a hint that overlaps anything).
		[ "$p" = vmm_fixed ] && awk '$1 ~ /^55[0-9a-f]{10}-/' "/proc/$daemon_pid/maps" | head -5
	fi
done
if [ "$only" = all ] || [ "$only" = programs ] || [ "$only" = attrs ]; then
	# Pointer attributes steer libraries (cuBLASLt): the answers must be the native ones.
	"$build/tests/programs/pointer_attrs" >"$tmp/attrs.native" 2>&1
	under_layer "$build/tests/programs/pointer_attrs" >"$tmp/attrs.layer" 2>&1
	if cmp -s "$tmp/attrs.native" "$tmp/attrs.layer"; then
		result PASS layer_pointer_attrs "$(grep -c attr "$tmp/attrs.native") answers as native"
	else
		result FAIL layer_pointer_attrs "$(diff "$tmp/attrs.native" "$tmp/attrs.layer" | grep -c '^>') answers differ:"
		diff "$tmp/attrs.native" "$tmp/attrs.layer" | head -${ATTRS_DIFF_LINES:-24}
	fi
fi
if [ "$only" = all ] || [ "$only" = programs ]; then
	# A kernel compiled at run time by NVRTC (which asks for an export table crcuda refuses).
	if [ ! -x "$build/tests/nvrtc/nvrtc_saxpy" ]; then result SKIP layer_nvrtc_saxpy "not built (no NVRTC)"
	elif under_layer "$build/tests/nvrtc/nvrtc_saxpy" >"$tmp/nvrtc.log" 2>&1; then result PASS layer_nvrtc_saxpy
	else result FAIL layer_nvrtc_saxpy "$(tail -3 "$tmp/nvrtc.log" | tr '\n' ' ')"; fi
	if under_layer "$build/tests/programs/state_app" --mb 64 --verify >"$tmp/state.log" 2>&1; then
		result PASS layer_state_app
	else
		result FAIL layer_state_app "$(tail -3 "$tmp/state.log" | tr '\n' ' ')"
	fi
fi
[ "$only" = all ] || [ "$only" = cudart ] && for p in inc32 sum1000 streams_events globals pinned_async ptds many_launches; do
	for v in static shared; do
		bin=$build/tests/cudart/cudart_${p}_$v
		[ -x "$bin" ] || { result SKIP "layer_cudart_${p}_$v" "not built"; continue; }
		if under_layer "$bin" >"$tmp/c.log" 2>&1; then result PASS "layer_cudart_${p}_$v"
		else result FAIL "layer_cudart_${p}_$v" "$(tail -3 "$tmp/c.log" | tr '\n' ' ')"; fi
	done
done

if [ "$only" = all ] || [ "$only" = cudart ]; then
	if under_layer "$build/tests/cudart/cudart_sgemm" >"$tmp/sgemm.log" 2>&1; then
		result PASS layer_cublas_sgemm "$(tail -1 "$tmp/sgemm.log")"
	else
		result FAIL layer_cublas_sgemm "$(tail -2 "$tmp/sgemm.log" | tr '\n' ' ')"
	fi
	if under_layer "$build/tests/cudart/cudart_sgemm" --pedantic >"$tmp/sgemm.log" 2>&1; then
		result PASS layer_cublas_sgemm_pedantic "$(tail -1 "$tmp/sgemm.log")"
	else
		result FAIL layer_cublas_sgemm_pedantic "$(tail -2 "$tmp/sgemm.log" | tr '\n' ' ')"
	fi
	# __managed__ variables the CPU and kernels update in turns: the native checksum.
	for v in static shared; do
		bin=$build/tests/cudart/cudart_state_rt_$v
		"$bin" --mb 8 --steps 40 --mvar >"$tmp/mv.native" 2>&1
		if under_layer "$bin" --mb 8 --steps 40 --mvar >"$tmp/mv.layer" 2>&1 && cmp -s "$tmp/mv.native" "$tmp/mv.layer"; then
			result PASS "layer_cudart_mvar_$v" "$(cat "$tmp/mv.native")"
		else
			result FAIL "layer_cudart_mvar_$v" "$(tail -2 "$tmp/mv.native" "$tmp/mv.layer" | tr '\n' ' ')"
		fi
	done
fi

# PyTorch: native twice, then under the layer, losses compared bit for bit.
[ "$only" = all ] || [ "$only" = torch ] || [ "$only" = graphs ] || exit 0
py=${PYTHON:-python3}
if ! "$py" -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
	result SKIP torch "no PyTorch with CUDA"
	exit 0
fi
# What the application sees of the device, natively and under the layer: any difference is a lead.
# Attributes 88 and 100 (pageable memory access, through the host's page tables) differ on purpose:
# the GPU is in another process, which cannot reach the application's pageable memory.
"$py" "$top/tests/gpu/attrs.py" --torch 2>&1 | grep -vE '^attr (88|100) ' >"$tmp/attrs-native.txt"
under_layer "$py" "$top/tests/gpu/attrs.py" --torch 2>&1 | grep -vE '^attr (88|100) ' >"$tmp/attrs-layer.txt"
if cmp -s "$tmp/attrs-native.txt" "$tmp/attrs-layer.txt"; then
	result PASS device_view "attributes and torch properties equal to native"
else
	result FAIL device_view "$(diff "$tmp/attrs-native.txt" "$tmp/attrs-layer.txt" | grep -c '^<') lines differ"
	diff "$tmp/attrs-native.txt" "$tmp/attrs-layer.txt" | head -20
fi
# CUDA graphs in PyTorch: captured whole steps, and torch.compile's reduce-overhead mode.
for mode in capture compile; do
	timeout 300 "$py" "$top/tests/torch/graph.py" --mode $mode >"$tmp/g-$mode.native" 2>"$tmp/g-$mode.nerr"
	if [ "$(grep -c '^step ' "$tmp/g-$mode.native")" = 0 ]; then
		result FAIL "torch_graph_$mode" "natively: $(tail -1 "$tmp/g-$mode.nerr")"
		continue
	fi
	under_layer "$py" "$top/tests/torch/graph.py" --mode $mode >"$tmp/g-$mode.layer" 2>"$tmp/g-$mode.lerr"
	if cmp -s <(grep '^step ' "$tmp/g-$mode.native") <(grep '^step ' "$tmp/g-$mode.layer"); then
		result PASS "torch_graph_$mode" "$(grep -c '^step ' "$tmp/g-$mode.native") losses equal to native"
	else
		result FAIL "torch_graph_$mode" "$(grep -c '^step ' "$tmp/g-$mode.layer") steps; $(grep -v '^ ' "$tmp/g-$mode.lerr" | tail -2 | tr '\n' ' ')"
		diff <(grep '^step ' "$tmp/g-$mode.native") <(grep '^step ' "$tmp/g-$mode.layer") | head -6
		grep -E 'libcrcuda|Warn|Error \(' "$tmp/g-$mode.lerr" | sort | uniq -c | sort -rn | head -10
	fi
done
[ "$only" = graphs ] && exit 0
"$py" "$top/tests/torch/train.py" --steps "$steps" >"$tmp/n1.txt" 2>"$tmp/n1.err"
"$py" "$top/tests/torch/train.py" --steps "$steps" >"$tmp/n2.txt" 2>"$tmp/n2.err"
if cmp -s <(grep '^step ' "$tmp/n1.txt") <(grep '^step ' "$tmp/n2.txt") && [ "$(grep -c '^step ' "$tmp/n1.txt")" = "$steps" ]; then
	result PASS torch_native_repeat "$steps steps"
else
	result FAIL torch_native_repeat "$(tail -2 "$tmp/n1.err" | tr '\n' ' ')"
fi
CRCUDA_TRACE_ERRORS=${CRCUDA_TRACE_ERRORS:-0} under_layer "$py" "$top/tests/torch/train.py" --steps "$steps" --ready-at 50 --ready-file "$tmp/ready" \
	--go-file "$tmp/go" >"$tmp/l.txt" 2>"$tmp/l.err" &
tpid=$!
for _ in $(seq 1200); do [ -e "$tmp/ready" ] && break; kill -0 $tpid 2>/dev/null || break; sleep 0.1; done
if [ -e "$tmp/ready" ]; then
	if "$top/tests/nvml/check-no-dev-nvidia.sh" "$tpid" >"$tmp/nodev.txt" 2>&1; then
		result PASS torch_no_dev_nvidia "pid $tpid at step 50"
	else
		result FAIL torch_no_dev_nvidia "$(head -3 "$tmp/nodev.txt" | tr '\n' ' ')"
	fi
fi
touch "$tmp/go"
wait $tpid
if cmp -s <(grep '^step ' "$tmp/n1.txt") <(grep '^step ' "$tmp/l.txt") && [ "$(grep -c '^step ' "$tmp/l.txt")" = "$steps" ]; then
	result PASS torch_layer_losses "$steps losses equal to native"
else
	result FAIL torch_layer_losses "$(grep -c '^step ' "$tmp/l.txt") steps; $(tail -1 "$tmp/l.err")"
	diff <(grep '^step ' "$tmp/n1.txt") <(grep '^step ' "$tmp/l.txt") | head -8
	# The layer's own lines (refused calls, errors), counted.
	grep -E 'libcrcuda|nvml|Warn|Error \(' "$tmp/l.err" | sed 's/^([0-9. ]*) [0-9]* //' | sort | uniq -c | sort -rn | head -40
fi
if [ "${TORCH_LAYER_TWICE:-0}" = 1 ]; then
	under_layer "$py" "$top/tests/torch/train.py" --steps "$steps" >"$tmp/l2.txt" 2>/dev/null
	cmp -s <(grep '^step ' "$tmp/l.txt") <(grep '^step ' "$tmp/l2.txt") &&
		result INFO torch_layer_repeat "two runs under the layer agree" ||
		result INFO torch_layer_repeat "two runs under the layer differ"
fi
nt=$(sed -n 's/^step_time_ms //p' "$tmp/n1.txt")
lt=$(sed -n 's/^step_time_ms //p' "$tmp/l.txt")
[ -n "$nt" ] && [ -n "$lt" ] &&
	result INFO torch_step_time "$(awk -v n="$nt" -v l="$lt" 'BEGIN { printf "native %.3f ms, crcuda %.3f ms, ratio %.3fx (goal <= 1.03x)", n, l, l / n }')"
grep -E "Warn|Error" "$tmp/daemon.log" | sed 's/^([0-9. ]*) [0-9]* //' | sort | uniq -c | sort -rn | head -15
[ -n "${OUT:-}" ] && cp "$tmp/daemon.log" "$tmp/l.err" "$OUT/" 2>/dev/null
exit 0
