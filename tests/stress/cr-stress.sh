#!/usr/bin/env bash
# Random-instant checkpoint/restart stress (issue 14). Runs programs under `crcudactl run`, checkpoints
# them at instants drawn uniformly over their run (seeded: the seed is printed, and each trial's own seed
# replays that trial alone), either killing them and restoring (`crcudactl checkpoint PID`, `crcudactl
# restore ID`) or leaving them running (--leave-running), in chains of 1..--chain-max checkpoints of the
# same process (a restored process is checkpointed again), and compares each program's whole output
# (stdout) with an uninterrupted run under the layer, bit for bit. Prints a table: program, instants
# tried, exact, failed; exits 1 if any failed.
#
#   cr-stress.sh BUILD [--backend sim|cuda] [--count N] [--seed S] [--jobs J] [--chain-max K]
#                [--kill-percent P] [--programs "P1 P2..."] [--prog NAME 'COMMAND'] [--trial SEED]
#                [--keep] [--soak CSV [--soak-keep K]] [--daemon-preload LIB]
#   --count N        at least N checkpoints in all (default 200), spread over the programs in turn
#   --jobs J         trials run J at a time, each worker with its own daemon and store (default 2)
#   --chain-max K    checkpoints per trial: 1..K (default 5)
#   --kill-percent P a checkpoint kills and restores with P% chance, else --leave-running (default 70)
#   --programs       built-in programs: stress_drv stress_rt_static stress_rt_shared state_app
#                    state_graph (state_app --graph: each step one launch of a captured CUDA graph)
#                    state_graph_pageable (the same, the step number copied in from pageable memory)
#                    state_graph_mem (the same, the step number passed through the graph's own memory)
#                    state_graph_cond (four steps a launch, looped by a WHILE conditional node)
#                    state_managed (managed memory written by kernels and the CPU in turns, a 32 MiB
#                    chunk prefetched to the GPU every other step)
#                    state_pool (chunks from a memory pool of its own; its books checked at the end)
#                    state_graph_params (a graph's node parameters set every step; updated halfway)
#                    state_texture (a CUDA array read by a texture and rewritten by a surface each step)
#                    state_mvar (cudart's state_rt with __managed__ variables the CPU and a kernel
#                    update in turns each step)
#   --prog NAME CMD  another program (word-split CMD, run from the current directory); repeatable
#   --ref-runs R     R uninterrupted runs of each program, which must agree (a nondeterministic program
#                    cannot be compared bit for bit; default 1)
#   --trial SEED     run one trial with that trial seed (from a failure line), on its program
#                    (--programs names it)
#   --soak CSV       soak mode (issue 18; tests/stress/soak.sh reads the CSV and judges it): --count N
#                    checkpoints for EACH job, job W always running program W of --programs (modulo), all
#                    of a job's trials against its one daemon and one store (CRCUDA_LINEAGE cr-stress-wW);
#                    after each trial `store prune --keep K` (--soak-keep, default 1; 0: no prune) and
#                    `store gc`, then a sample of the daemon (pid, VmRSS, open descriptors), its children
#                    (the workers: count, VmRSS, descriptors) and the store (du -sb), one CSV row each:
#                    job,cycle,rss_kb,fds,store_bytes,trial,program,daemon_pid,workers,workers_rss_kb,
#                    workers_fds,seconds,kills,leaves (cycle: the job's checkpoints so far; kills, leaves:
#                    how many of them killed and restored, or left the program running)
#   --daemon-preload LIB  (tests) the daemons run with LD_PRELOAD=LIB: tests/stress/soak_leak.c leaks in
#                    crcudad to show that the soak's verdict fails on a leak
# Needs root and CRIU (.deps/criu, or CRCUDA_CRIU): exit 77 otherwise.
set -u
build=$(cd "${1:?usage: cr-stress.sh BUILD [options]}" && pwd)
shift
top=$(cd "$(dirname "$0")/../.." && pwd)
ctl=$build/crcudactl/crcudactl
backend=sim count=200 seed=${CR_STRESS_SEED:-$(((RANDOM << 15 | RANDOM) % 1000000))} jobs=2 chain_max=5 kill_pct=70
programs="stress_drv stress_rt_static stress_rt_shared" trial_only="" keep=0 ref_runs=1
soak_csv="" soak_keep=1 daemon_preload=""
declare -A cmd
while [ $# -gt 0 ]; do
	case $1 in
	--backend) backend=$2 ;;
	--count) count=$2 ;;
	--seed) seed=$2 ;;
	--jobs) jobs=$2 ;;
	--chain-max) chain_max=$2 ;;
	--kill-percent) kill_pct=$2 ;;
	--programs) programs=$2 ;;
	--trial) trial_only=$2 ;;
	--ref-runs) ref_runs=$2 ;;
	--soak) soak_csv=$2 ;;
	--soak-keep) soak_keep=$2 ;;
	--daemon-preload) daemon_preload=$2 ;;
	--keep) keep=1; shift; continue ;;
	--prog)
		cmd[$2]=$3
		[ -n "${custom:-}" ] && custom="$custom $2" || custom=$2
		shift
		;;
	*) echo "cr-stress: unknown option $1" >&2; exit 2 ;;
	esac
	shift 2
done
[ -n "${custom:-}" ] && programs=$custom
if [ -n "$soak_csv" ]; then
	case $soak_csv in /*) ;; *) soak_csv=$PWD/$soak_csv ;; esac
	: >"$soak_csv" || exit 2
fi

skip() { echo "SKIP: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "needs root (CRIU)"
criu=${CRCUDA_CRIU:-$top/.deps/criu/bin/criu}
[ -x "$criu" ] || skip "no CRIU at $criu (scripts/build-criu.sh)"
[ -f "$build/criu-plugin/plugin/crcuda_plugin.so" ] || skip "the CRIU plugin was not built"

# Descriptors inherited from ctest would be dumped with the programs and break the restores.
for fd in /proc/$$/fd/*; do
	fd=${fd##*/}
	[ "$fd" -gt 2 ] 2>/dev/null && eval "exec $fd>&-"
done

st=$build/tests/stress
cmd[stress_drv]=${cmd[stress_drv]:-$st/stress_drv --steps 40 --sleep-ms 20}
cmd[stress_rt_static]=${cmd[stress_rt_static]:-$st/stress_rt_static --steps 40 --sleep-ms 20}
cmd[stress_rt_shared]=${cmd[stress_rt_shared]:-$st/stress_rt_shared --steps 40 --sleep-ms 20}
cmd[state_app]=${cmd[state_app]:-$build/tests/programs/state_app --mb 8 --chunks 4 --steps 400}
cmd[state_graph]=${cmd[state_graph]:-$build/tests/programs/state_app --mb 8 --chunks 4 --steps 400 --graph}
cmd[state_graph_pageable]=${cmd[state_graph_pageable]:-$build/tests/programs/state_app --mb 8 --chunks 4 --steps 300 --graph-pageable}
cmd[state_graph_mem]=${cmd[state_graph_mem]:-$build/tests/programs/state_app --mb 8 --chunks 4 --steps 300 --graph-mem}
cmd[state_graph_cond]=${cmd[state_graph_cond]:-$build/tests/programs/state_app --mb 8 --chunks 4 --steps 400 --graph-cond}
cmd[state_managed]=${cmd[state_managed]:-$build/tests/programs/state_app --mb 32 --chunks 1 --steps 40 --managed}
cmd[state_pool]=${cmd[state_pool]:-$build/tests/programs/state_app --mb 8 --chunks 4 --steps 400 --pool}
cmd[state_graph_params]=${cmd[state_graph_params]:-$build/tests/programs/state_app --mb 8 --chunks 4 --steps 400 --graph-params}
cmd[state_texture]=${cmd[state_texture]:-$build/tests/programs/state_app --mb 8 --chunks 4 --steps 400 --texture}
cmd[state_mvar]=${cmd[state_mvar]:-$build/tests/cudart/cudart_state_rt_static --mb 8 --chunks 4 --steps 400 --mvar}
for p in $programs; do
	[ -n "${cmd[$p]:-}" ] || { echo "cr-stress: no program $p" >&2; exit 2; }
done

tmp=$(mktemp -d /tmp/crcuda-stress.XXXXXX)
export CRCUDA_CRIU=$criu CRCUDA_STORE_SYNC=0
if [ "$backend" = sim ]; then
	export CRCUDA_SIM_KERNELS=$st/libcrcuda_stress_kernels.so:$build/tests/programs/libcrcuda_test_kernels.so:$build/tests/cudart/libcrcuda_cudart_kernels.so
fi
unset CRCUDA_REMOTE CRCUDA_TOKEN CRCUDA_TOKEN_FILE CRCUDA_LIBDIR CRCUDAD CRCUDA_DAEMON CRCUDA_SOCKET CRCUDA_STORE
run_opts=(--backend "$backend" --idle-exit 120)
if [ -n "$daemon_preload" ]; then
	[ -f "$daemon_preload" ] || { echo "cr-stress: no library $daemon_preload" >&2; exit 2; }
	daemon_preload=$(realpath "$daemon_preload") # the daemon starts in /
	printf '#!/bin/sh\nLD_PRELOAD=%q exec %q "$@"\n' "$daemon_preload" "$build/crcudad/crcudad" >"$tmp/crcudad"
	chmod +x "$tmp/crcudad"
	export CRCUDAD=$tmp/crcudad
fi

cleanup() {
	local f p
	for f in "$tmp"/w*/pids; do [ -f "$f" ] && while read -r p; do kill -9 "$p" 2>/dev/null; done <"$f"; done
	for f in "$tmp"/w*/d/*.log "$tmp"/ref/d/*.log; do
		[ -f "$f" ] || continue
		p=$(sed -n 's/^([^)]*) \([0-9]*\) crcudad: serving on.*/\1/p' "$f" | head -1)
		[ -n "$p" ] && grep -qas -- "$tmp/" "/proc/$p/cmdline" && kill -9 "$p" 2>/dev/null
	done
	# CR_STRESS_LOGS=DIR: the failed trials' logs (not the device memory nor CRIU's page images) there.
	if [ -n "${CR_STRESS_LOGS:-}" ] && [ -s "$tmp/failed" ]; then
		# One tarball of the text logs: a tree of many small files does not travel back from the GPU machine.
		mkdir -p "$CR_STRESS_LOGS"
		(cd "$tmp" && find . -type f -size -2M ! -name '*.img' ! -path '*/chunks/*' ! -name '*.mdb' -print0 |
			tar czf "$CR_STRESS_LOGS/failed-logs-$$.tgz" --null -T -) 2>/dev/null
	fi
	if [ "$keep" = 0 ] && ! [ -s "$tmp/failed" ]; then rm -rf "$tmp"; else echo "cr-stress: logs kept in $tmp" >&2; fi
}
trap cleanup EXIT
# shellcheck source=../lib/proc.sh
. "$top/tests/lib/proc.sh"
# The newest dump log under the store DIR ends where CRIU waits for a trap that never comes; its criu is
# killed (by pid).
criu_hung() {
	local log p
	log=$(ls -t "$1"/criu/*/dump.log 2>/dev/null | head -1)
	[ -n "$log" ] && tail -n 1 "$log" | grep -q "new_sp=" || return 1
	for p in /proc/[0-9]*; do
		grep -qas -- "${log%/dump.log}" "$p/cmdline" && kill -9 "${p#/proc/}" 2>/dev/null
	done
	return 0
}
# What each thread of a process that stopped making progress waits on: kernel stacks, and the user
# stacks when gdb is there.
hang_report() {
	local t
	for t in /proc/"$1"/task/*; do
		echo "--- thread ${t##*/} $(cat "$t/comm" 2>/dev/null) wchan=$(cat "$t/wchan" 2>/dev/null) syscall=$(cut -d' ' -f1-3 "$t/syscall" 2>/dev/null)"
		cat "$t/stack" 2>/dev/null
	done
	command -v gdb >/dev/null && timeout 60 gdb -q -batch -p "$1" -ex "thread apply all bt 30" 2>&1 | grep -vE "^(\[New LWP|Reading symbols|warning: )"
}
rand() { echo $(((RANDOM << 15 | RANDOM) % $1)); } # 0..N-1 (N <= 2^30)

# The reference: each program once, uninterrupted, under the layer; its run time bounds the instants.
mkdir -p "$tmp/ref"
declare -A ref_ms
for p in $programs; do
	for ((r = 1; r <= ref_runs; r++)); do
		t0=$(now_ms)
		# shellcheck disable=SC2086
		CRCUDA_SOCKET=$tmp/ref/d/crcudad.sock timeout 600 "$ctl" run "${run_opts[@]}" -- ${cmd[$p]} \
			</dev/null >"$tmp/ref/$p.out.$r" 2>"$tmp/ref/$p.err" ||
			{ echo "cr-stress: the uninterrupted run of $p failed: $(tail -n 3 "$tmp/ref/$p.err")" >&2; exit 1; }
		ref_ms[$p]=$(($(now_ms) - t0))
		cmp -s "$tmp/ref/$p.out.1" "$tmp/ref/$p.out.$r" ||
			{ echo "cr-stress: two uninterrupted runs of $p differ: it cannot be compared bit for bit" >&2; exit 1; }
	done
	mv "$tmp/ref/$p.out.1" "$tmp/ref/$p.out"
	echo "cr-stress: $p: uninterrupted run $((ref_ms[$p])) ms, $(wc -l <"$tmp/ref/$p.out") lines: $(tail -n 1 "$tmp/ref/$p.out")"
done

# trial WORKER PROGRAM TRIALSEED: one process, checkpointed K times at random instants of its run;
# appends "PROGRAM TRIED EXACT(0|1) TRIALSEED DETAIL" to $tmp/w$WORKER/results.
trial() {
	local w=$1 p=$2 ts=$3 wd=$tmp/w$1 k i at prev=0 mode pid id out what="" ok=1 tried=0
	local dir=$wd/t$ts ats=()
	RANDOM=$ts
	k=$((1 + $(rand "$chain_max")))
	for ((i = 0; i < k; i++)); do ats+=($(($(rand $((ref_ms[$p] * 9 / 10))) + 1))); done
	mapfile -t ats < <(printf '%s\n' "${ats[@]}" | sort -n)
	# CR_STRESS_AT="MS MS ...": these instants instead (a regression test pins them).
	[ -n "${CR_STRESS_AT:-}" ] && read -ra ats <<<"$CR_STRESS_AT"
	mkdir -p "$dir"
	# A soak's job keeps one store (pruned between trials) and one lineage (what prune counts by).
	export CRCUDA_SOCKET=$wd/d/crcudad.sock CRCUDA_STORE=$dir/store
	[ -n "$soak_csv" ] && export CRCUDA_STORE=$wd/store CRCUDA_LINEAGE=cr-stress-w$w
	# shellcheck disable=SC2086
	setsid "$ctl" run "${run_opts[@]}" -- ${cmd[$p]} </dev/null >"$dir/out" 2>"$dir/err" &
	pid=$!
	disown "$pid"
	echo "$pid" >>"$wd/pids"
	for at in "${ats[@]}"; do
		# Program time: the wall clock less the time it spent checkpointed or restoring.
		sleep "$(awk -v a="$at" -v b="$prev" 'BEGIN { d = (a - b) / 1000; printf "%.3f", (d > 0 ? d : 0) }')"
		prev=$at
		mode=leave
		[ "$(rand 100)" -lt "$kill_pct" ] && mode="kill"
		[ -n "${CR_STRESS_MODE:-}" ] && mode=$CR_STRESS_MODE
		gone "$pid" && break
		# shellcheck disable=SC2046 # no word, or --leave-running
		if ! timeout 120 "$ctl" --json checkpoint $([ $mode = leave ] && echo --leave-running) "$pid" \
			>"$dir/ckpt.json" 2>"$dir/ckpt.err"; then
			# Before its first CUDA call the program has no session yet: not an instant of the run.
			grep -q "has no session" "$dir/ckpt.err" "$dir/ckpt.json" && { gone "$pid" && break; continue; }
			gone "$pid" && break
			what="$what checkpoint ($mode) at ${at} ms failed: $(tail -n 2 "$dir/ckpt.err" "$dir/ckpt.json" | tr '\n' ' ')"
			ok=0
			# This machine's CRIU can hang curing its parasite (the task never traps at its
			# rt_sigreturn): an infrastructure failure, not crcuda's, counted apart.
			criu_hung "$CRCUDA_STORE" && { ok=2; what="$what (CRIU hung curing its parasite)"; }
			kill -9 "$pid" 2>/dev/null
			break
		fi
		out=$(cat "$dir/ckpt.json")
		tried=$((tried + 1))
		id=$(echo "$out" | sed -n 's/^  "id": \([0-9]*\),*$/\1/p')
		what="$what ${mode}@${at}ms"
		if [ $mode = kill ]; then
			stat -c %s "$dir/out" >"$dir/out.size"
			stat -c %s "$dir/err" >"$dir/err.size"
			wait_gone "$pid" 60 || { what="$what: still alive after the checkpoint"; ok=0; break; }
			truncate -s "$(cat "$dir/out.size")" "$dir/out"
			truncate -s "$(cat "$dir/err.size")" "$dir/err"
			if ! timeout 300 "$ctl" restore "$id" >"$dir/restore.out" 2>"$dir/restore.err"; then
				what="$what: restore of checkpoint $id failed: $(tail -n 2 "$dir/restore.err" | tr '\n' ' ')"
				ok=0
				break
			fi
		fi
	done
	if [ $ok = 1 ]; then
		# A restored run takes what was left of it, plus the restores: twice the whole run is ample.
		wait_gone "$pid" $((ref_ms[$p] * 2 / 1000 + 60)) ||
			{ what="$what: did not finish (threads: $dir/hang.txt)"; ok=0; hang_report "$pid" >"$dir/hang.txt" 2>&1; kill -9 "$pid" 2>/dev/null; }
	fi
	if [ $ok = 1 ] && ! cmp -s "$tmp/ref/$p.out" "$dir/out"; then
		ok=0
		what="$what: output differs from the uninterrupted run: $(diff "$tmp/ref/$p.out" "$dir/out" | head -3 | tr '\n' ' ') $(tail -n 1 "$dir/err")"
	fi
	[ $tried = 0 ] && [ $ok = 1 ] && what="(finished before its first instant)"
	echo "$p $tried $ok $ts$what" >>"$wd/results"
	if [ $ok = 1 ]; then rm -rf "$dir"; elif [ $ok = 2 ]; then echo "$p trial $ts:$what" >>"$tmp/infra"; else echo "$p trial $ts:$what (logs: $dir)" >>"$tmp/failed"; fi
}

# soak_step W PROGRAM: after a trial of job W, the store pruned and collected, then one sample (a CSV
# row) of the job's daemon, its workers and its store.
soak_step() {
	local w=$1 wd=$tmp/w$1 s=$tmp/w$1/store pid c i cycles trials rss fds nw=0 wrss=0 wfds=0 bytes=0 kills leaves
	if [ -d "$s" ]; then
		if [ "$soak_keep" -gt 0 ] && ! "$ctl" store prune --keep "$soak_keep" --store "$s" >>"$wd/gc.log" 2>&1; then
			echo "job $w: store prune failed: $(tail -n 1 "$wd/gc.log")" >>"$tmp/failed"
		fi
		"$ctl" store gc --store "$s" >>"$wd/gc.log" 2>&1 ||
			echo "job $w: store gc failed: $(tail -n 1 "$wd/gc.log")" >>"$tmp/failed"
		bytes=$(du -sb "$s" | cut -f1)
	fi
	cycles=$(awk '{ s += $2 } END { print s + 0 }' "$wd/results")
	trials=$(wc -l <"$wd/results")
	# Before the first checkpoint (the trial ended before its first instant) there is no store to weigh.
	[ "$cycles" = 0 ] && return
	pid=$(sed -n 's/^([^)]*) \([0-9]*\) crcudad: serving on.*/\1/p' "$wd/d/crcudad.log" 2>/dev/null | tail -n 1)
	# The ended session's worker may still be on its way out: up to 5 s for the daemon to be back to
	# its one pooled worker (a worker that stays is sampled, and is a leak).
	for ((i = 0; i < 100; i++)); do
		{ [ -z "$pid" ] || [ "$(pgrep -c -P "$pid")" -le 1 ]; } && break
		sleep 0.05
	done
	# No daemon (it died, or never started): empty fields, which the verdict fails.
	rss=$(awk '/^VmRSS:/ { print $2 }' "/proc/${pid:-0}/status" 2>/dev/null)
	# Descriptors: the least of three readings 0.1 s apart (a reading can catch a connection closing).
	fds=$(ls "/proc/${pid:-0}/fd" 2>/dev/null | wc -l)
	for i in 1 2; do
		sleep 0.1
		c=$(ls "/proc/${pid:-0}/fd" 2>/dev/null | wc -l)
		[ "$c" -lt "$fds" ] && fds=$c
	done
	[ -n "$rss" ] || fds=""
	for c in $([ -n "$rss" ] && pgrep -P "$pid"); do
		nw=$((nw + 1))
		wrss=$((wrss + $(awk '/^VmRSS:/ { print $2 }' "/proc/$c/status" 2>/dev/null || echo 0)))
		wfds=$((wfds + $(ls "/proc/$c/fd" 2>/dev/null | wc -l)))
	done
	kills=$(grep -o ' kill@' "$wd/results" | wc -l)
	leaves=$(grep -o ' leave@' "$wd/results" | wc -l)
	echo "$w,$cycles,$rss,$fds,$bytes,$trials,$2,$pid,$nw,$wrss,$wfds,$((($(now_ms) - t0) / 1000)),$kills,$leaves" >>"$wd/soak.csv"
}

# worker W: trials W, W+J, ... until the total of tried instants (over all workers) reaches --count;
# in a soak, trials of program W (modulo) until this job's own instants reach --count.
worker() {
	local w=$1 n=$1 np p have
	read -ra plist <<<"$programs"
	np=${#plist[@]}
	mkdir -p "$tmp/w$w/d"
	: >"$tmp/w$w/results"
	while :; do
		if [ -n "$soak_csv" ]; then
			have=$(awk '{ s += $2 } END { print s + 0 }' "$tmp/w$w/results")
			p=${plist[$((w % np))]}
			# A soak that keeps failing has said what it had to: no endless loop of failed trials.
			[ "$(cat "$tmp/failed" 2>/dev/null | wc -l)" -ge 10 ] && break
		else
			have=$(cat "$tmp"/w*/results 2>/dev/null | awk '{ s += $2 } END { print s + 0 }')
			p=${plist[$((n % np))]}
		fi
		[ "$have" -ge "$count" ] && break
		trial "$w" "$p" $((seed * 1000 + n))
		[ -n "$soak_csv" ] && soak_step "$w" "$p"
		n=$((n + jobs))
	done
}

if [ -n "$soak_csv" ]; then
	echo "cr-stress: soak, backend $backend, seed $seed, $count instants per job, chains of 1..$chain_max, kill+restore $kill_pct%, $jobs jobs (one daemon and one store each), store prune --keep $soak_keep and gc after each trial"
else
	echo "cr-stress: backend $backend, seed $seed, $count instants, chains of 1..$chain_max, kill+restore $kill_pct%, $jobs at a time"
fi
t0=$(now_ms)
if [ -n "$trial_only" ]; then
	mkdir -p "$tmp/w0/d"
	trial 0 "${programs%% *}" "$trial_only"
else
	for ((w = 0; w < jobs; w++)); do worker "$w" & done
	wait
fi
secs=$((($(now_ms) - t0) / 1000))
if [ -n "$soak_csv" ]; then
	{
		echo "job,cycle,rss_kb,fds,store_bytes,trial,program,daemon_pid,workers,workers_rss_kb,workers_fds,seconds,kills,leaves"
		cat "$tmp"/w*/soak.csv 2>/dev/null | sort -t, -k1,1n -k6,6n
	} >"$soak_csv"
fi

echo
printf '%-20s %8s %8s %8s %8s %10s\n' program trials instants exact failed criu-hang
cat "$tmp"/w*/results | awk -v progs="$programs" '
	$3 == 2 { hg[$1]++; next } # not verified: the process could not finish
	{ tr[$1]++; n[$1] += $2; if ($3 == 1) ex[$1] += $2; else fl[$1] += ($2 ? $2 : 1) }
	END {
		k = split(progs, p, " ")
		for (i = 1; i <= k; i++) {
			q = p[i]; T += tr[q]; N += n[q]; E += ex[q]; F += fl[q]; H += hg[q]
			printf "%-20s %8d %8d %8d %8d %10d\n", q, tr[q], n[q], ex[q], fl[q], hg[q]
		}
		printf "%-20s %8d %8d %8d %8d %10d\n", "total", T, N, E, F, H
	}'
echo "seed $seed (cr-stress.sh BUILD --seed $seed ... replays it; a failure line's trial seed with --trial SEED --programs PROGRAM replays one trial), backend $backend, ${secs} s"
if [ -s "$tmp/failed" ]; then
	echo "FAILED trials:"
	cat "$tmp/failed"
	exit 1
fi
[ -s "$tmp/infra" ] && { echo "CRIU hangs (this machine's ptrace; those trials are left out of the counts):"; cat "$tmp/infra"; }
echo "PASS: all exact"
