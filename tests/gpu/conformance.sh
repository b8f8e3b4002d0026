#!/usr/bin/env bash
# tests/gpu/conformance.sh BUILD [SAMPLES]: programs nobody here wrote, run three ways on the GPU
# machine (issue 13): NVIDIA's cuda-samples (folders 0_Introduction, 2_Concepts_and_Techniques,
# 3_CUDA_Features, 4_CUDA_Libraries, 6_Performance), built for the GPU at hand, and the Python apps of
# tests/gpu/apps (CuPy, JAX, Triton: each prints digests of its results, and must print native's under
# the layer and restored, when two native runs agree; missing modules skip), each run
#   native  without crcuda;
#   layer   under `crcudactl run`, every program against one long-lived crcudad;
#   cr      for each that runs at least CONF_CR_MIN_MS under the layer: started again, checkpointed at
#           an instant drawn (seeded, printed) from 20..80% of its layer run time with `crcudactl
#           checkpoint` (the process is killed), restored with `crcudactl restore`, and run to its end.
# Verdicts: native and layer pass on exit status 0 (the samples check their own results). A restored
# process is no child of this script, so its exit status is unseen: cr passes when it finished, its
# output holds the native run's last verdict line (one saying pass/success/correct/done) and no line
# saying fail/error/mismatch/wrong/abort that the native output lacks. A sample whose native run exits 2
# (EXIT_WAIVED: several GPUs, a missing feature) is skipped with the reason it printed; one that cmake
# did not build is skipped with the packages its CMakeLists asks for (OpenGL, EGL, MPI, NvSci, ...).
# Prints one table (program, native, layer, cr, seconds) and the counts.
#
# SAMPLES: a tarball made by scripts/cuda-samples.sh (default .deps/cuda-samples.tar.gz, which
# scripts/gpu-tree.sh carries). The build and the results stay in CONF_DIR (default BUILD/samples) so
# that the device tool's 10-minute calls can share the work out: CONF_PARTS (build,native,layer,cr,
# table; default all) picks the parts of this call, CONF_ONLY (an extended regex) the samples.
# Environment: CONF_SEED (random), CONF_CR_MIN_MS (1000), CONF_TIMEOUT (120 s a run), CRCUDA_CRIU.
set -u
build=$(cd "${1:?usage: conformance.sh BUILD [SAMPLES_TARBALL]}" && pwd)
top=$(cd "$(dirname "$0")/../.." && pwd)
tarball=${2:-$top/.deps/cuda-samples.tar.gz}
work=${CONF_DIR:-$build/samples}
parts=${CONF_PARTS:-build,native,layer,cr,table}
only=${CONF_ONLY:-.}
seed=${CONF_SEED:-$(((RANDOM << 15 | RANDOM) % 1000000))}
cr_min_ms=${CONF_CR_MIN_MS:-1000}
limit=${CONF_TIMEOUT:-120}
ctl=$build/crcudactl/crcudactl
folders=(0_Introduction 2_Concepts_and_Techniques 3_CUDA_Features 4_CUDA_Libraries 6_Performance)
res=$work/results
mkdir -p "$res"
# shellcheck source=../lib/proc.sh
. "$top/tests/lib/proc.sh"
has_part() { [[ ",$parts," == *",$1,"* ]]; }

# The samples: one per folder of the sources, with its executable where cmake built one.
samples() {
	local f d
	for f in "${folders[@]}"; do
		for d in "$work/src/Samples/$f"/*/; do
			d=${d%/}
			[ -f "$d/CMakeLists.txt" ] || continue
			[[ ${d##*/} =~ $only ]] && echo "$f/${d##*/}"
		done
	done
	for d in "$top"/tests/gpu/apps/*.py; do
		d=${d##*/}
		[[ ${d%.py} =~ $only ]] && echo "apps/${d%.py}"
	done
}
is_app() { [[ $1 == apps/* ]]; }
exe_of() { if is_app "$1"; then echo "$top/tests/gpu/apps/${1#apps/}.py"; else echo "$work/build/Samples/$1/${1##*/}"; fi; }
runnable() { if is_app "$1"; then [ -f "$(exe_of "$1")" ]; else [ -x "$(exe_of "$1")" ]; fi; }
# The command of a sample (an app runs under Python) and the folder it runs in (its data files).
cmd_of() { if is_app "$1"; then echo "${PYTHON:-python3} $(exe_of "$1")"; else exe_of "$1"; fi; }
dir_of() { if is_app "$1"; then echo "$work"; else dirname "$(exe_of "$1")"; fi; }
# What a sample's CMakeLists asks for beyond CUDA: the reason it was not built.
needs_of() {
	grep -ohE 'find_package\(([A-Za-z0-9_]+)' "$work/src/Samples/$1/CMakeLists.txt" 2>/dev/null |
		sed 's/find_package(//' | grep -v CUDAToolkit | sort -u | tr '\n' ' '
}

if has_part build; then
	[ -f "$tarball" ] || { echo "conformance: no cuda-samples at $tarball (scripts/cuda-samples.sh)"; exit 77; }
	stamp=$(sha256sum "$tarball" | cut -c1-16)
	t0=$(now_ms)
	if [ "$(cat "$work/source" 2>/dev/null)" != "$stamp" ]; then
		echo "== configuring cuda-samples $(tar -xzOf "$tarball" ./COMMIT 2>/dev/null | cut -c1-12) for this GPU"
		rm -rf "$work/src" "$work/build" "$work/built"
		mkdir -p "$work/src"
		tar -xzf "$tarball" -C "$work/src"
		arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d '.')
		# Each sample names nine architectures; one, the GPU's own, builds in a fraction of the time.
		find "$work/src" -name CMakeLists.txt -exec \
			sed -i "s/set(CMAKE_CUDA_ARCHITECTURES [^)]*)/set(CMAKE_CUDA_ARCHITECTURES ${arch:-native})/" {} +
		printf 'add_subdirectory(%s)\n' "${folders[@]}" >"$work/src/Samples/CMakeLists.txt"
		cmake -S "$work/src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release \
			-DCMAKE_CUDA_COMPILER="${CUDA_HOME:-/usr/local/cuda}/bin/nvcc" >"$work/cmake.log" 2>&1 ||
			{ tail -20 "$work/cmake.log"; echo "conformance: cmake failed"; exit 1; }
		echo "$stamp" >"$work/source"
	fi
	if [ "$(cat "$work/built" 2>/dev/null)" != "$stamp" ]; then
		# CONF_ONLY: only its samples' targets (each sample's target is named after its folder).
		targets=()
		[ "$only" != . ] && mapfile -t targets < <(samples | sed 's|.*/||')
		cmake --build "$work/build" -j "$(nproc)" ${targets[@]:+--target "${targets[@]}"} -- -k \
			>"$work/make.log" 2>&1 || echo "conformance: some samples did not build (make.log)"
		echo "built ${targets[*]:-every sample} in $((($(now_ms) - t0) / 1000)) s"
		[ ${#targets[@]} = 0 ] && echo "$stamp" >"$work/built"
	fi
fi

blank_numbers() { sed -E 's/[0-9]+(\.[0-9]+)?/N/g'; }
verdict_ok() { grep -iE 'pass|success|correct|complete|done' "$1" | tail -n 1 | blank_numbers; }
# Lines that say something went wrong, numbers blanked (timings differ from run to run).
bad_lines() {
	grep -iE 'fail|error|mismatch|wrong|abort|segmentation fault' "$1" | grep -viE 'error[^a-z]*(=|:)? *[0-9.e+-]+$' |
		blank_numbers | sort -u
}

# run MODE SAMPLE: one run, natively or under the layer; writes $res/SAMPLE.MODE.{out,rc,ms}. An app's
# stdout (its digests) and stderr go apart; natively it runs twice, and $res/SAMPLE.nondet says the two
# outputs differ (then only its exit status is compared).
run_one() {
	local mode=$1 s=$2 dir key t0 rc err cmd
	read -ra cmd <<<"$(cmd_of "$s")"
	dir=$(dir_of "$s") key=$res/${s//\//__}
	err=$key.$mode.out
	is_app "$s" && err=$key.$mode.err
	# A new run makes the later parts' results stale.
	[ "$mode" = native ] && rm -f "$key.layer".* "$key.nondet"
	rm -f "$key.cr" "$key.cr".*
	t0=$(now_ms)
	if [ "$mode" = native ]; then
		(cd "$dir" && timeout "$limit" "${cmd[@]}" </dev/null >"$key.$mode.out" 2>>"$err")
	else
		(cd "$dir" && timeout "$limit" "$ctl" run --backend cuda --idle-exit 900 -- "${cmd[@]}" </dev/null \
			>"$key.$mode.out" 2>>"$err")
	fi
	rc=$?
	echo $rc >"$key.$mode.rc"
	echo $(($(now_ms) - t0)) >"$key.$mode.ms"
	if [ "$mode" = native ] && is_app "$s" && [ $rc = 0 ]; then
		(cd "$dir" && timeout "$limit" "${cmd[@]}" </dev/null >"$key.native2.out" 2>/dev/null)
		cmp -s "$key.native.out" "$key.native2.out" || touch "$key.nondet"
	fi
}
# An app's run under the layer or restored gave native's output (when native's is repeatable).
same_as_native() { ! is_app "$1" || [ -e "$res/${1//\//__}.nondet" ] || cmp -s "$res/${1//\//__}.native.out" "$2"; }

export CRCUDA_SOCKET=$work/crcudad.sock CRCUDA_STORE=$work/store CRCUDA_STORE_SYNC=0
export CRCUDA_CRIU=${CRCUDA_CRIU:-$top/.deps/criu/bin/criu}
unset CRCUDA_REMOTE CRCUDA_TOKEN CRCUDA_TOKEN_FILE

for mode in native layer; do
	has_part "$mode" || continue
	echo "== $mode runs"
	while read -r s; do
		runnable "$s" || continue
		key=$res/${s//\//__}
		if [ "$mode" = layer ] && [ "$(cat "$key.native.rc" 2>/dev/null)" != 0 ]; then continue; fi
		run_one "$mode" "$s"
		printf '%-52s rc %-3s %6s ms\n' "$s" "$(cat "$key.$mode.rc")" "$(cat "$key.$mode.ms")"
	done < <(samples)
done

# cr SAMPLE: checkpoint (kill) at a seeded instant, restore, run to the end; $res/SAMPLE.cr = verdict.
cr_one() {
	local s=$1 key=$res/${1//\//__} cmd dir ms at pid id why="" bad ok=0 try err
	read -ra cmd <<<"$(cmd_of "$s")"
	dir=$(dir_of "$s") ms=$(cat "$key.layer.ms") err=$key.cr.out
	is_app "$s" && err=$key.cr.err
	RANDOM=$((seed + $(cksum <<<"$s" | cut -d' ' -f1) % 100000))
	at=$((ms / 5 + (RANDOM * 32768 + RANDOM) % (ms * 3 / 5)))
	rm -f "$key.cr" "$key.cr".*
	(cd "$dir" && exec setsid "$ctl" run --backend cuda --idle-exit 900 -- "${cmd[@]}" </dev/null >"$key.cr.out" 2>"$err") &
	pid=$!
	disown "$pid" 2>/dev/null
	sleep "$(awk -v a="$at" 'BEGIN { printf "%.3f", a / 1000 }')"
	# Before its first CUDA call a program has no session: not yet an instant of its CUDA run.
	for ((try = 0; try < 50; try++)); do
		gone "$pid" && break
		timeout 180 "$ctl" --json checkpoint "$pid" >"$key.cr.ckpt" 2>"$key.cr.ckpt.err" && { ok=1; break; }
		ok=0
		grep -q "has no session" "$key.cr.ckpt.err" "$key.cr.ckpt" || break
		sleep 0.1
		at=$((at + 100))
	done
	if gone "$pid" && [ "$ok" != 1 ]; then
		why="finished before the instant ${at} ms"
	elif [ "$ok" != 1 ]; then
		why="checkpoint at ${at} ms failed: $(grep -hv '^ *$' "$key.cr.ckpt.err" "$key.cr.ckpt" | tail -n 2 | tr '\n' ' ')"
		kill -9 "$pid" 2>/dev/null
	elif ! wait_gone "$pid" 60; then
		why="alive after its checkpoint"
		kill -9 "$pid" 2>/dev/null
	else
		id=$(sed -n 's/^ *"id": *\([0-9]*\).*/\1/p' "$key.cr.ckpt" | head -1)
		if ! timeout 300 "$ctl" restore "$id" >"$key.cr.restore" 2>&1; then
			why="restore of checkpoint $id failed: $(tail -n 2 "$key.cr.restore" | tr '\n' ' ')"
		elif ! wait_gone "$pid" $((ms * 3 / 1000 + 60)); then
			why="restored at ${at} ms, did not finish"
			kill -9 "$pid" 2>/dev/null
		else
			bad=$(comm -13 <(bad_lines "$key.native.out") <(bad_lines "$key.cr.out") | head -n 2 | tr '\n' ' ')
			local want
			want=$(verdict_ok "$key.native.out")
			if ! same_as_native "$s" "$key.cr.out"; then
				why="restored at ${at} ms: output differs from native: $(diff "$key.native.out" "$key.cr.out" | grep '^>' | head -n 1)"
			elif [ -n "$bad" ]; then why="restored at ${at} ms: $bad"
			elif [ -n "$want" ] && ! blank_numbers <"$key.cr.out" | grep -qxF -- "$want"; then
				why="restored at ${at} ms: no '$want' ($(tail -n 1 "$key.cr.out"))"
			elif [ -z "$want" ]; then echo "PASS? restored at ${at} ms (no verdict line to compare)" >"$key.cr"; return
			fi
		fi
	fi
	case $why in
	"") echo "PASS restored at ${at} ms" >"$key.cr" ;;
	finished*) echo "SKIP $why" >"$key.cr" ;;
	*) echo "FAIL $why" >"$key.cr" ;;
	esac
}

if has_part cr; then
	echo "== checkpoint/restore mid-run (seed $seed; samples that run >= $cr_min_ms ms under the layer)"
	if [ "$(id -u)" != 0 ] || [ ! -x "$CRCUDA_CRIU" ]; then
		echo "SKIP cr: needs root and CRIU ($CRCUDA_CRIU)"
	else
		# Descriptors inherited from the caller would be dumped with the programs.
		for fd in /proc/$$/fd/*; do
			fd=${fd##*/}
			[ "$fd" -gt 2 ] 2>/dev/null && eval "exec $fd>&-"
		done
		while read -r s; do
			key=$res/${s//\//__}
			[ "$(cat "$key.layer.rc" 2>/dev/null)" = 0 ] || continue
			[ "$(cat "$key.layer.ms")" -ge "$cr_min_ms" ] || continue
			cr_one "$s"
			printf '%-52s %s\n' "$s" "$(cat "$key.cr")"
		done < <(samples)
	fi
fi

if has_part table; then
	echo
	echo "== conformance: cuda-samples $(cat "$work/src/COMMIT" 2>/dev/null | cut -c1-12), $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
	printf '%-44s %-6s %-6s %-6s %8s  %s\n' program native layer cr seconds note
	n_total=0 n_native=0 n_layer=0 n_cr=0 n_cr_pass=0 n_skip=0
	while read -r s; do
		key=$res/${s//\//__}
		n_total=$((n_total + 1))
		nat=- lay=- cr=- secs=- note=""
		if ! runnable "$s"; then
			nat=skip note="not built: needs $(needs_of "$s")"
			n_skip=$((n_skip + 1))
		elif [ -f "$key.native.rc" ]; then
			case $(cat "$key.native.rc") in
			0) nat=pass n_native=$((n_native + 1)) ;;
			2) nat=skip note="waived: $(grep -v '^ *$' "$key.native.out" | tail -n 1 | cut -c1-70)"; n_skip=$((n_skip + 1)) ;;
			77) nat=skip note="$(tail -n 1 "$key.native.err" 2>/dev/null | cut -c1-70)"; n_skip=$((n_skip + 1)) ;;
			124) nat=FAIL note="native run timed out (${limit} s)" ;;
			*) nat=FAIL note="native: $(grep -v '^ *$' "$key.native.out" | tail -n 1 | cut -c1-70)" ;;
			esac
			secs=$(awk -v m="$(cat "$key.native.ms")" 'BEGIN { printf "%.1f", m / 1000 }')
		fi
		if [ "$nat" = pass ] && [ -f "$key.layer.rc" ]; then
			if [ "$(cat "$key.layer.rc")" = 0 ] && ! same_as_native "$s" "$key.layer.out"; then
				lay=FAIL note="layer: output differs from native: $(diff "$key.native.out" "$key.layer.out" | grep '^>' | head -n 1 | cut -c1-70)"
			elif [ "$(cat "$key.layer.rc")" = 0 ]; then lay=pass n_layer=$((n_layer + 1))
			else lay=FAIL note="layer rc $(cat "$key.layer.rc"): $(grep -v '^ *$' "$key.layer.out" | tail -n 1 | cut -c1-80)"; fi
			secs="$secs/$(awk -v m="$(cat "$key.layer.ms")" 'BEGIN { printf "%.1f", m / 1000 }')"
		fi
		if [ -f "$key.cr" ] && [ "$lay" = pass ]; then
			read -r cr crnote <"$key.cr"
			case $cr in PASS?) n_cr=$((n_cr + 1)) n_cr_pass=$((n_cr_pass + 1)) cr="pass?" note="cr: the output has no verdict line; finished after the restore" ;;
			PASS) n_cr=$((n_cr + 1)) n_cr_pass=$((n_cr_pass + 1)) cr=pass ;; FAIL) n_cr=$((n_cr + 1)) note="cr: $crnote" ;; SKIP) cr=- ;; esac
		fi
		printf '%-44s %-6s %-6s %-6s %8s  %s\n' "${s#*/}" "$nat" "$lay" "$cr" "$secs" "$note"
	done < <(samples)
	echo
	echo "samples $n_total: skipped $n_skip (not built or waived); natively pass $n_native; under the layer pass $n_layer of $n_native; checkpointed mid-run and restored pass $n_cr_pass of $n_cr (pass?: finished, no verdict line to compare)"
fi
