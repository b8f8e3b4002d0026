#!/usr/bin/env bash
# tests/gpu/nvjpeg-trace.sh BUILD [SAMPLE...]: why NVIDIA's nvJPEG samples hang under an interposed
# libcuda.so.1 (issue 13). Builds the samples (conformance.sh's build part), runs each natively and
# under the layer with tests/gpu/dltrace (dlopen/dlmopen/dlvsym, opened paths, who sleeps) preloaded,
# and, for a run still going after HANG_S seconds, its threads' kernel stacks; then the two traces side
# by side. Output under $OUT/nvjpeg-trace (or BUILD/nvjpeg-trace).
set -u
build=$(cd "${1:?usage: nvjpeg-trace.sh BUILD [SAMPLE...]}" && pwd)
shift
samples=("$@")
[ ${#samples[@]} -gt 0 ] || samples=(nvJPEG)
top=$(cd "$(dirname "$0")/../.." && pwd)
out=${OUT:-$build}/nvjpeg-trace
hang_s=${HANG_S:-20}
mkdir -p "$out"
gcc -std=c11 -O2 -shared -fPIC "$top/tests/gpu/dltrace/dltrace.c" -o "$out/dltrace.so" -ldl || exit 1
only=$(IFS='|'; echo "^(${samples[*]})$")
CONF_PARTS=build CONF_ONLY="$only" "$top/tests/gpu/conformance.sh" "$build" >"$out/build.txt" 2>&1
ctl=$build/crcudactl/crcudactl
export CRCUDA_SOCKET=$out/crcudad.sock CRCUDA_STORE=$out/store
for s in "${samples[@]}"; do
	exe=$(find "$build/samples/build/Samples" -type f -name "$s" -perm -u+x | head -1)
	[ -n "$exe" ] || { echo "$s: not built (see $out/build.txt)"; continue; }
	for mode in native layer; do
		log=$out/$s.$mode.trace
		rm -f "$log"
		if [ $mode = native ]; then
			(cd "$(dirname "$exe")" && DLTRACE_FILE=$log LD_PRELOAD=$out/dltrace.so "$exe" \
				</dev/null >"$out/$s.$mode.out" 2>&1) &
		else
			(cd "$(dirname "$exe")" && "$ctl" run --backend cuda -- env DLTRACE_FILE="$log" \
				LD_PRELOAD="$out/dltrace.so" "$exe" </dev/null >"$out/$s.$mode.out" 2>&1) &
		fi
		runner=$!
		for ((i = 0; i < hang_s * 10; i++)); do
			kill -0 $runner 2>/dev/null || break
			sleep 0.1
		done
		if kill -0 $runner 2>/dev/null; then
			pid=$(pgrep -n -f "$exe" || true)
			echo "$s $mode: still running after ${hang_s} s (pid ${pid:-?}); its threads:"
			if [ -n "$pid" ]; then
				for t in /proc/"$pid"/task/*; do
					echo "-- thread ${t##*/} $(cat "$t/comm") wchan=$(cat "$t/wchan" 2>/dev/null)"
					head -12 "$t/stack" 2>/dev/null
				done >"$out/$s.$mode.threads"
				grep -- '^--' "$out/$s.$mode.threads"
				grep -E 'nvidia|cuda|nvcuvid|nvjpeg|crcuda' "/proc/$pid/maps" | awk '{print $6}' | sort -u \
					>"$out/$s.$mode.maps"
				kill -9 "$pid"
			fi
		fi
		wait $runner 2>/dev/null
		echo "$s $mode: exit $?  $(tail -1 "$out/$s.$mode.out")"
	done
	echo "== $s: the traces (native | layer), sleeps folded"
	for mode in native layer; do
		# What the program's NVIDIA libraries (not the driver: the layer replaces it) asked for.
		grep -v 'sleep #' "$out/$s.$mode.trace" | grep -v '\[from libcuda' |
			sed -E 's/0x[0-9a-f]+/P/g; s/= [0-9]+ /= N /; s/\(nil\)/P/' >"$out/$s.$mode.short"
	done
	diff "$out/$s.native.short" "$out/$s.layer.short" | head -120
	echo "-- native, from libnvcuvid:"
	grep "from libnvcuvid" "$out/$s.native.short" | grep -v "pthread_" | head -60
	echo "-- under the layer, from libnvcuvid, and the last 15 lines:"
	grep "from libnvcuvid" "$out/$s.layer.trace" | grep -v "pthread_\|sleep #" | head -30
	grep -v "sleep #" "$out/$s.layer.trace" | tail -15
	echo "-- native: what libnvcuvid did between its dlopen of libcuda.so.1 and its first dlsym:"
	grep -v "sleep #" "$out/$s.native.trace" | sed -n '/dlopen(libcuda.so.1.*from libnvcuvid/,/dlsym.*cuInit/p' | head -30
	echo "-- sleeps under the layer:"
	grep 'sleep #' "$out/$s.layer.trace" | head -8
	echo "-- maps under the layer (hung):"
	cat "$out/$s.layer.maps" 2>/dev/null
done
