#!/usr/bin/env bash
# soak-verdict-check.sh: soak.sh's verdict on made-up samples (no daemon, no root): a flat run with the
# noise real runs show (a sample that catches a session ending: +2 descriptors, a second worker) passes;
# a slow leak of memory, of descriptors or of workers, a store that grows, a daemon that restarted or
# vanished each fail, with their reason.
set -u
soak=$(cd "$(dirname "$0")" && pwd)/soak.sh
tmp=$(mktemp -d /tmp/crcuda-soak-verdict.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail=0

# make NAME AWK-BODY: 300 samples of 1000 cycles (a trial every 3 or 4), i the sample, c the cycle;
# the body may change rss, fds, st (store bytes), wk (workers), pid.
make() {
	awk -v OFS=, 'BEGIN {
		print "job,cycle,rss_kb,fds,store_bytes,trial,program,daemon_pid,workers,workers_rss_kb,workers_fds,seconds,kills,leaves"
		srand(7)
		for (i = 1; i <= 300; i++) {
			c = int(i * 1000 / 300); rss = 2064 + int(rand() * 24); fds = 6; wk = 1; pid = 4242
			st = 9086681 + int(rand() * 3000000)
			if (i % 17 == 0) { fds = 8; wk = 2 }
			'"$2"'
			print 0, c, rss, fds, st, i, "state_app", pid, wk, wk * 3000, wk * 5, i * 3, int(c * 0.7), c - int(c * 0.7)
		}
	}' >"$tmp/$1.csv"
}
# expect NAME pass|"REASON"
expect() {
	local out rc
	out=$("$soak" --verdict "$tmp/$1.csv" 2>&1)
	rc=$?
	if [ "$2" = pass ]; then
		if [ $rc = 0 ]; then echo "ok: $1 passes"; else echo "FAIL: $1 should pass:"; echo "$out"; fail=1; fi
	elif [ $rc = 1 ] && grep -q "FAIL: .*$2" <<<"$out"; then
		echo "ok: $1 fails: $2"
	else
		echo "FAIL: $1 should fail with '$2' (exit $rc):"
		echo "$out"
		fail=1
	fi
}

make flat ''
expect flat pass
make rss_settling 'rss += (c < 100 ? c * 8 : 800) + int(c / 10)' # 800 KiB while warming, then 1 KiB a 10 cycles
expect rss_settling pass
make rss_leak 'rss += int(c * 3)' # 3 KiB a cycle: +2.7 MiB after the warm-up
expect rss_leak "the daemon's RSS grew"
make fd_leak 'fds += int(c / 250)' # one descriptor every 250 cycles
expect fd_leak "the daemon's open descriptors grew"
make worker_leak 'wk += int(c / 500)'
expect worker_leak "more workers"
make store_growth 'st += c * 40000' # 40 kB a cycle: +36 MB
expect store_growth "the store grew"
make restart 'if (i > 200) pid = 4343'
expect restart "the daemon changed at trial 201"
make gone 'if (i == 150) rss = fds = ""'
expect gone "no daemon at trial 150"
awk 'NR <= 3' "$tmp/flat.csv" >"$tmp/short.csv"
expect short "2 samples, too few to judge"
exit $fail
