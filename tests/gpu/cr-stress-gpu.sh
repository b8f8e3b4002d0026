#!/usr/bin/env bash
# tests/gpu/cr-stress-gpu.sh BUILD: the random-instant checkpoint/restart stress (tests/stress/cr-stress.sh)
# on the real driver (issue 14): the PyTorch transformer LM of tests/torch/lm.py, 50 checkpoints at
# random instants, each killing the process and restoring it (chains: a restored process checkpointed
# again), several runs at once on the one GPU (each its own daemon and session); then 20 such
# checkpoints of the cudart stress programs (stress_rt, static and shared cudart). Every run's whole
# output must equal an uninterrupted run's under the layer, bit for bit. Prints both tables.
# Then CUDA graphs (issue 11): GRAPH_COUNT (20) such checkpoints of state_app --graph, graph_attr and
# tests/torch/graph.py (a whole training step captured once and replayed; and torch.compile's
# reduce-overhead mode).
# Environment: PYTHON (python3), LM_COUNT (50), RT_COUNT (20), STRESS_JOBS (4), STRESS_SEED (random),
# LM_ARGS (the LM's options; default --steps 60 --sleep 0.25: about 20 s a run).
# CR_STRESS_LOGS=DIR keeps the failed trials' logs there.
set -u
build=$(cd "${1:?usage: cr-stress-gpu.sh BUILD}" && pwd)
top=$(cd "$(dirname "$0")/../.." && pwd)
py=${PYTHON:-python3}
jobs=${STRESS_JOBS:-4}
seed=${STRESS_SEED:-$(((RANDOM << 15 | RANDOM) % 1000000))}
stress=$top/tests/stress/cr-stress.sh
rc=0
if "$py" -c 'import torch, sys; sys.exit(not torch.cuda.is_available())' 2>/dev/null; then
	# The LM must be deterministic under the layer for a bit-for-bit comparison: --ref-runs 2 checks it.
	echo "== PyTorch LM: ${LM_COUNT:-50} random-instant kill+restore checkpoints (seed $seed)"
	"$stress" "$build" --backend cuda --count "${LM_COUNT:-50}" --kill-percent 100 --jobs "$jobs" \
		--seed "$seed" --ref-runs 2 --prog torch_lm "$py $top/tests/torch/lm.py ${LM_ARGS:---steps 60 --sleep 0.25}" || rc=1
else
	echo "SKIP torch_lm: no PyTorch with CUDA"
fi
echo "== cudart programs: ${RT_COUNT:-20} random-instant kill+restore checkpoints (seed $seed)"
"$stress" "$build" --backend cuda --count "${RT_COUNT:-20}" --kill-percent 100 --jobs "$jobs" --seed "$seed" \
	--programs "stress_rt_static stress_rt_shared" || rc=1
if [ "${GRAPH_COUNT:-20}" -gt 0 ]; then
	echo "== CUDA graphs: ${GRAPH_COUNT:-20} random-instant kill+restore checkpoints (seed $seed)"
	graph_progs=(--prog state_graph "$build/tests/programs/state_app --mb 64 --chunks 4 --steps 20000 --graph"
		--prog graph_attr "$build/tests/programs/graph_attr --steps 400 --sleep-ms 10")
	# torch.compile(mode="reduce-overhead") too, its Inductor compiling in-process: a pool of compile
	# workers would be processes of the checkpointed tree still exiting when the restore forks them again.
	"$py" -c 'import torch, sys; sys.exit(not torch.cuda.is_available())' 2>/dev/null &&
		graph_progs+=(--prog torch_graph "$py $top/tests/torch/graph.py --mode capture --steps 60 --sleep 0.1"
			--prog torch_compile "env TORCHINDUCTOR_COMPILE_THREADS=1 $py $top/tests/torch/graph.py --mode compile --steps 60 --sleep 0.1")
	"$stress" "$build" --backend cuda --count "${GRAPH_COUNT:-20}" --kill-percent 100 --jobs "$jobs" \
		--seed "$seed" "${graph_progs[@]}" || rc=1
fi
exit $rc
