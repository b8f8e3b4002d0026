#!/usr/bin/env bash
# Soak (issue 18): many checkpoint/restore cycles against long-lived daemons, watching for leaks.
# cr-stress.sh --soak runs the cycles (random instants, kill + restore or --leave-running, chains, each
# run compared bit for bit with an uninterrupted one): J jobs, each with ONE daemon and ONE store for all
# of its N cycles and always the same program, `store prune --keep 1` and `store gc` after each trial,
# then a sample of the daemon's RSS and open descriptors (the least of three readings 0.1 s apart), its
# workers (after waiting up to 5 s for the ended session's worker to go) and the store's size (a CSV row).
# This script judges the CSV: the curve at 0, 25, 50, 75 and 100% of each job's cycles, and a verdict.
#
#   soak.sh BUILD [--cycles N] [--jobs J] [--csv FILE] [cr-stress.sh options: --seed, --programs, ...]
#   soak.sh --verdict CSV          judge a CSV already written
#
#   --cycles N  checkpoints per job, so per daemon (default $SOAK_CYCLES, else 1000)
#   --jobs J    jobs at once (default $SOAK_JOBS, else 1); job W runs program W of the list below
#   --csv FILE  the samples (default $SOAK_CSV, else ./soak.csv)
#
# A job FAILS when, from its warm-up (the median of the samples up to 10% of its cycles) to its end (the
# median of the samples from 90% of its cycles on; medians: a sample can catch a session still ending):
#   - the daemon's RSS grew by more than SOAK_RSS_PCT % (default 20) or SOAK_RSS_MIN_KB (default 2048),
#     whichever is larger (the front daemon holds about 2 MiB, and moved by 4 to 90 KiB in 40-cycle
#     runs; 2 MiB over the 900 cycles after a 1,000-cycle run's warm-up is about 2 KiB a cycle, and
#     the least-squares slope after the warm-up is printed for a slower one);
#   - its open descriptors grew by more than SOAK_FD_SLACK (default 2; one leaked per trial shows);
#   - it has more workers (processes) than at the warm-up;
#   - the store grew by more than SOAK_STORE_PCT % (default 25) or SOAK_STORE_MIN_MB (default 16),
#     whichever is larger (one checkpoint is kept: without prune and gc a trial adds its size);
#   - the daemon changed (restarted) or was gone at a sample, or a job has fewer than 4 samples;
# and the soak fails when any trial was not exact (cr-stress.sh's check) or a prune or gc failed.
# On a 16-CPU machine, 1,000 cycles per daemon: tests/stress/soak.sh build --cycles 1000 --jobs 8 (about
# an hour: docs/development.md says how long a cycle takes). Root and CRIU (exit 77 otherwise).
set -u
top=$(cd "$(dirname "$0")/../.." && pwd)

# verdict CSV: prints each job's curve and checks; returns 1 when a check fails.
verdict() {
	awk -F, -v rss_pct="${SOAK_RSS_PCT:-20}" -v rss_min="${SOAK_RSS_MIN_KB:-2048}" \
		-v fd_slack="${SOAK_FD_SLACK:-2}" -v st_pct="${SOAK_STORE_PCT:-25}" \
		-v st_min="$((${SOAK_STORE_MIN_MB:-16} * 1048576))" '
	function median(a, n,   i, j, t, b) { # of a[1..n]
		for (i = 1; i <= n; i++) b[i] = a[i]
		for (i = 2; i <= n; i++)
			for (j = i; j > 1 && b[j - 1] > b[j]; j--) { t = b[j]; b[j] = b[j - 1]; b[j - 1] = t }
		return n % 2 ? b[(n + 1) / 2] : (b[n / 2] + b[n / 2 + 1]) / 2
	}
	function max(x, y) { return x > y ? x : y }
	function mib(b) { return sprintf("%.1f", b / 1048576) }
	NR == 1 { next }
	{
		j = $1; k = ++n[j]
		if (!(j in seen)) { seen[j] = 1; jobs[++nj] = j }
		cyc[j, k] = $2; rss[j, k] = $3; fds[j, k] = $4; st[j, k] = $5; prog[j] = $7
		pid[j, k] = $8; wk[j, k] = $9; wrss[j, k] = $10; wfds[j, k] = $11; sec[j, k] = $12; kills[j] = $13; leaves[j] = $14
	}
	END {
		bad = 0
		if (!nj) { print "soak: no samples"; exit 1 }
		for (x = 1; x <= nj; x++) {
			j = jobs[x]; m = n[j]; last = cyc[j, m]; fail = ""
			printf "\njob %s (%s, daemon pid %s): %d cycles (%d kill + restore, %d --leave-running), %d trials, %d s\n", j,
				prog[j], pid[j, 1], last, kills[j], leaves[j], m, sec[j, m]
			printf "  %5s %7s %8s %5s %8s %12s %11s %10s\n", "at", "cycle", "rss_kb", "fds", "workers",
				"workers_rss", "workers_fds", "store_MiB"
			split("0 25 50 75 100", pct, " ")
			for (p = 1; p <= 5; p++) {
				for (i = 1; i < m && cyc[j, i] < pct[p] / 100 * last; i++) ;
				printf "  %4d%% %7d %8s %5s %8s %12s %11s %10s\n", pct[p], cyc[j, i], rss[j, i], fds[j, i],
					wk[j, i], wrss[j, i], wfds[j, i], mib(st[j, i])
			}
			for (i = 1; i <= m; i++) {
				if (rss[j, i] == "" || fds[j, i] == "") fail = fail sprintf("; no daemon at trial %d", i)
				else if (pid[j, i] != pid[j, 1]) fail = fail sprintf("; the daemon changed at trial %d (pid %s, then %s)", i, pid[j, 1], pid[j, i])
			}
			if (m < 4) fail = fail sprintf("; %d samples, too few to judge", m)
			# Warm-up: samples up to 10% of the cycles (at least the first); end: from 90% (at least the last).
			nw = ne = 0
			for (i = 1; i <= m; i++) {
				if (i == 1 || cyc[j, i] <= 0.1 * last) { nw++; wr[nw] = rss[j, i]; wf[nw] = fds[j, i]; ws[nw] = st[j, i]; ww[nw] = wk[j, i] }
				if (i == m || cyc[j, i] >= 0.9 * last) { ne++; er[ne] = rss[j, i]; ef[ne] = fds[j, i]; es[ne] = st[j, i]; ew[ne] = wk[j, i] }
			}
			br = median(wr, nw); bf = median(wf, nw); bs = median(ws, nw); bw = median(ww, nw)
			r = median(er, ne); f = median(ef, ne); s = median(es, ne); w = median(ew, ne)
			# Least-squares slopes over the samples after the warm-up, per 100 cycles.
			sn = sx = sxx = sr = sxr = sf = sxf = 0
			for (i = nw + 1; i <= m; i++) {
				sn++; sx += cyc[j, i]; sxx += cyc[j, i] * cyc[j, i]
				sr += rss[j, i]; sxr += cyc[j, i] * rss[j, i]; sf += fds[j, i]; sxf += cyc[j, i] * fds[j, i]
			}
			dd = sn * sxx - sx * sx
			lim = max(br * rss_pct / 100, rss_min)
			printf "  warm-up (median of %d samples) -> end (median of the last %d):\n", nw, ne
			printf "    daemon rss %d -> %d kB (%+d, limit +%d)%s\n", br, r, r - br, lim, (r - br > lim ? "  FAIL" : "")
			if (sn >= 2 && dd > 0)
				printf "    after the warm-up, per 100 cycles: rss %+.1f kB, fds %+.2f\n", 100 * (sn * sxr - sx * sr) / dd,
					100 * (sn * sxf - sx * sf) / dd
			if (r - br > lim) fail = fail "; the daemon'"'"'s RSS grew"
			printf "    daemon fds %d -> %d (%+d, limit +%d)%s\n", bf, f, f - bf, fd_slack, (f - bf > fd_slack ? "  FAIL" : "")
			if (f - bf > fd_slack) fail = fail "; the daemon'"'"'s open descriptors grew"
			printf "    workers %d -> %d%s\n", bw, w, (w > bw ? "  FAIL" : "")
			if (w > bw) fail = fail "; more workers"
			lim = max(bs * st_pct / 100, st_min)
			printf "    store %s -> %s MiB (%+.1f, limit +%s)%s\n", mib(bs), mib(s), (s - bs) / 1048576, mib(lim), (s - bs > lim ? "  FAIL" : "")
			if (s - bs > lim) fail = fail "; the store grew"
			if (fail != "") { printf "  job %s FAIL: %s\n", j, substr(fail, 3); bad = 1 }
			else printf "  job %s flat\n", j
		}
		exit bad
	}' "$1"
}

if [ "${1:-}" = --verdict ]; then
	[ -f "${2:-}" ] || { echo "usage: soak.sh --verdict CSV" >&2; exit 2; }
	if verdict "$2"; then echo "SOAK PASS: flat"; else echo "SOAK FAIL: not flat"; exit 1; fi
	exit 0
fi

build=${1:?usage: soak.sh BUILD [--cycles N] [--jobs J] [--csv FILE] [cr-stress.sh options] | --verdict CSV}
shift
cycles=${SOAK_CYCLES:-1000} jobs=${SOAK_JOBS:-1} csv=${SOAK_CSV:-$PWD/soak.csv} pass=()
while [ $# -gt 0 ]; do
	case $1 in
	--cycles) cycles=$2; shift 2 ;;
	--jobs) jobs=$2; shift 2 ;;
	--csv) csv=$2; shift 2 ;;
	*) pass+=("$1"); shift ;;
	esac
done
# One program a job, a different one for each of the first 8 jobs (a later --programs wins).
programs="state_app stress_drv state_graph state_pool state_managed state_texture stress_rt_static state_mvar"
t0=$(date +%s)
"$top/tests/stress/cr-stress.sh" "$build" --soak "$csv" --count "$cycles" --jobs "$jobs" --programs "$programs" "${pass[@]}"
rc=$?
[ $rc = 77 ] && exit 77
echo
echo "soak: $cycles cycles per job, $jobs jobs, $(($(date +%s) - t0)) s; samples in $csv"
verdict "$csv"
vrc=$?
if [ $rc != 0 ] || [ $vrc != 0 ]; then
	echo "SOAK FAIL:$([ $rc != 0 ] && echo " trials not exact or the store's prune/gc failed (cr-stress.sh exit $rc)")$([ $vrc != 0 ] && echo " not flat")"
	exit 1
fi
echo "SOAK PASS: every trial exact, daemon RSS, descriptors, workers and store flat"
