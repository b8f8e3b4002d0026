#!/usr/bin/env bash
# examples/slurm/crcuda-job.sh under a real single-node Slurm (Debian's slurm-wlm and munge, started here
# without systemd), on the simulated device: sbatch the job, let state_app run some steps, scontrol
# requeue it (Slurm sends SIGTERM to every process of the job), and the requeued run must restore the
# job's final checkpoint; then stop the restored program twice more (the time-limit warning to the batch
# shell, after which the job requeues itself; scontrol requeue). The program must finish with the
# checksum of an uninterrupted run and leave no checkpoint behind.
#   requeue.sh BUILD
# CR_BACKEND=cuda: the same with the daemon on the real driver (tests/gpu/slurm-cr.sh).
# Needs root, CRIU (.deps/criu), slurmctld, slurmd and munged: exit 77 otherwise.
set -u
build=$(cd "$1" && pwd) || exit 1
top=$(cd "$(dirname "$0")/../.." && pwd)
ctl=$build/crcudactl/crcudactl
crcudad=$build/crcudad/crcudad
progs=$build/tests/programs
job=$top/examples/slurm/crcuda-job.sh
backend=${CR_BACKEND:-sim}

skip() { echo "SKIP: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "needs root (CRIU, and slurmd running jobs as root)"
criu=${CRCUDA_CRIU:-$top/.deps/criu/bin/criu}
[ -x "$criu" ] || skip "no CRIU at $criu (scripts/build-criu.sh)"
[ -f "$build/criu-plugin/plugin/crcuda_plugin.so" ] || skip "the CRIU plugin was not built"
for t in slurmctld slurmd munged sbatch scontrol squeue; do
	command -v $t >/dev/null || skip "no $t: Debian packages slurmctld slurmd slurm-client munge (scripts/setup.sh)"
done
command -v python3 >/dev/null || skip "no python3"

# Descriptors inherited from ctest would reach the job's program and be dumped with it.
for fd in /proc/$$/fd/*; do
	fd=${fd##*/}
	[ "$fd" -gt 2 ] 2>/dev/null && eval "exec $fd>&-"
done

tmp=$(mktemp -d /tmp/crcuda-slurm.XXXXXX)
chmod 755 "$tmp"
host=$(hostname -s)
export CRCUDA_SIM_KERNELS=$progs/libcrcuda_test_kernels.so CRCUDA_SOCKET=$tmp/d/crcudad.sock
export CRCUDA_STORE=$tmp/store CRCUDA_CRIU=$criu SLURM_CONF=$tmp/slurm.conf
unset CRCUDA_REMOTE CRCUDA_TOKEN CRCUDA_TOKEN_FILE CRCUDA_LIBDIR CRCUDAD CRCUDA_DAEMON CRCUDA_LINEAGE
unset SLURM_JOB_ID SLURM_RESTART_COUNT
app_args=(--mb 8 --chunks 4 --steps 80 --step-ms 200 --ready-at 8)
pids=()
jobid=""
ok=0

cleanup() {
	[ -n "$jobid" ] && scancel "$jobid" 2>/dev/null && sleep 1
	for ((i = ${#pids[@]} - 1; i >= 0; i--)); do kill "${pids[i]}" 2>/dev/null; done
	sleep 0.5
	for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
	if [ $ok = 1 ]; then rm -rf "$tmp"; else echo "slurm: logs kept in $tmp" >&2; fi
}
trap cleanup EXIT
fail() {
	echo "FAIL: $*" >&2
	for f in job.log app.out slurmctld.log slurmd.log d/crcudad.log; do
		[ -f "$tmp/$f" ] && { echo "--- $f (last lines)" >&2; tail -n 15 "$tmp/$f" >&2; }
	done
	exit 1
}
# shellcheck source=../lib/proc.sh
. "$top/tests/lib/proc.sh"
job_field() { scontrol show job -o "$jobid" 2>/dev/null | tr ' ' '\n' | sed -n "s/^$1=//p"; }
job_is() { [ "$(job_field JobState)" = "$1" ] && [ "$(job_field Restarts)" = "$2" ]; }

# The GPU's daemon is a node's service, outside the job (it must outlive the job's processes).
mkdir -p "$tmp/d"
"$crcudad" --backend "$backend" --socket "$CRCUDA_SOCKET" --idle-exit 300 --foreground -v >/dev/null 2>"$tmp/d/crcudad.log" &
pids+=($!)
wait_for 30 test -S "$CRCUDA_SOCKET" || fail "crcudad did not start"
ref=$(timeout 120 "$ctl" run --backend "$backend" -- "$progs/state_app" --mb 8 --chunks 4 --steps 80 | checksum /dev/stdin)
[ -n "$ref" ] || fail "the uninterrupted reference run failed"

# munge, with a key and socket of its own.
mkdir -p "$tmp/munge" && chmod 700 "$tmp/munge"
head -c 1024 /dev/urandom >"$tmp/munge/munge.key" && chmod 400 "$tmp/munge/munge.key"
munged --foreground --force --socket="$tmp/munge/munge.sock" --key-file="$tmp/munge/munge.key" \
	--pid-file="$tmp/munge/munged.pid" --log-file="$tmp/munge/munged.log" \
	--seed-file="$tmp/munge/munged.seed" 2>>"$tmp/munge/munged.err" &
pids+=($!)
wait_for 10 test -S "$tmp/munge/munge.sock" || fail "munged did not start: $(cat "$tmp/munge/munged.err" "$tmp/munge/munged.log" 2>/dev/null)"

# A minimal single-node cluster: no cgroups, no accounting (nothing here needs systemd).
port=$((20000 + RANDOM % 20000))
mkdir -p "$tmp/ctld" "$tmp/spool"
cat >"$SLURM_CONF" <<EOF
ClusterName=crcuda
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$port
SlurmdPort=$((port + 1))
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$tmp/munge/munge.sock,cred_expire=5
StateSaveLocation=$tmp/ctld
SlurmdSpoolDir=$tmp/spool
SlurmctldPidFile=$tmp/slurmctld.pid
SlurmdPidFile=$tmp/slurmd.pid
SlurmctldLogFile=$tmp/slurmctld.log
SlurmdLogFile=$tmp/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/builtin
SchedulerParameters=sched_interval=1
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
KillWait=30
MinJobAge=600
NodeName=$host NodeAddr=127.0.0.1 CPUs=$(nproc) State=UNKNOWN
PartitionName=test Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
slurmctld -D -i -f "$SLURM_CONF" >"$tmp/slurmctld.out" 2>&1 &
pids+=($!)
slurmd -D -f "$SLURM_CONF" >"$tmp/slurmd.out" 2>&1 &
pids+=($!)
node_idle() { [ "$(sinfo -h -n "$host" -o %t 2>/dev/null)" = idle ]; }
wait_for 30 node_idle || fail "the node did not come up: $(sinfo 2>&1; cat "$tmp/slurmctld.out" "$tmp/slurmd.out")"
echo "slurm: $(sinfo -V), node $host up"

# The job: state_app under crcuda, its output in app.out; ready (step 8 of 80) tells some steps ran.
start=$(date +%s.%N)
jobid=$(CRCUDACTL=$ctl CRCUDA_BACKEND=$backend JOB_OUT=$tmp/app.out sbatch --parsable -o "$tmp/job.log" \
	-D "$tmp" "$job" "$progs/state_app" "${app_args[@]}" --ready-file "$tmp/ready") || fail "sbatch failed"
ready_or_ended() { [ -e "$tmp/ready" ] || [[ ! "$(job_field JobState)" =~ ^(PENDING|CONFIGURING|RUNNING)$ ]]; }
wait_for 60 ready_or_ended && [ -e "$tmp/ready" ] || fail "the job's program did not reach step 8"
echo "slurm: job $jobid: the program is at step $(sed -n 's/ready //p' "$tmp/ready")"
# requeue N HOW: stops the job (SIGTERM), which must be requeued and run again, restoring its checkpoint.
# HOW: scontrol (scontrol requeue: SIGTERM to every process of the job), or warning (the time-limit
# warning of --signal=B:TERM, SIGTERM to the batch shell alone: the job script requeues the job itself).
requeue() {
	if [ "$2" = scontrol ]; then
		scontrol requeue "$jobid" || fail "scontrol requeue $jobid failed"
	else
		scancel --batch --signal=TERM "$jobid" || fail "scancel --batch --signal=TERM $jobid failed"
	fi
	echo "slurm: job $jobid stopped ($2)"
	# Slurm holds a requeued job back until its credential has expired (Reason=BeginTime; cred_expire,
	# 120 s by default, 5 s here). Starting it earlier (scontrol update StartTime=now) fails its launch.
	wait_for 60 job_is PENDING "$1" || fail "job $jobid is $(job_field JobState) after requeue $1 ($2), not pending"
	echo "slurm: job $jobid pending (Reason=$(job_field Reason), EligibleTime=$(job_field EligibleTime))"
	restored() { [ "$(grep -c "^restored checkpoint [0-9]* as pid" "$tmp/job.log")" = "$1" ]; }
	wait_for 30 restored "$1" || fail "requeue $1 ($2): no checkpoint restored"
	grep -q "crcuda-job: .*restart $1 of job $jobid on $host: restoring checkpoint" "$tmp/job.log" ||
		fail "requeue $1 ($2): the job did not restore its checkpoint"
	grep -q "starting over" "$tmp/job.log" && fail "requeue $1 ($2): the job started over"
	echo "slurm: job $jobid, restart $1: $(grep "^restored checkpoint" "$tmp/job.log" | tail -1)"
}
# While crcudactl run supervises the program (run --checkpoint-on SIGTERM), then twice while a restored
# program runs (restore --wait; the job script checkpoints it), the second time at the time-limit warning.
sleep 0.5
requeue 1 scontrol
sleep 1
requeue 2 warning
grep -q "crcuda-job: .* requeueing job $jobid" "$tmp/job.log" || fail "the job did not requeue itself at the warning"
sleep 1
requeue 3 scontrol
wait_for 60 job_is COMPLETED 3 || fail "job $jobid: $(job_field JobState), $(job_field Restarts) restarts after 60 s"
secs=$(echo "$(date +%s.%N) - $start" | bc 2>/dev/null || echo "?")

[ "$(grep -c "crcuda-job: .* checkpoint [0-9]* taken; the requeued job resumes" "$tmp/job.log")" = 3 ] ||
	fail "not three final checkpoints, one at each requeue"
grep -q "crcuda-job: .* the program exited with status 0" "$tmp/job.log" || fail "the program did not exit 0"
[ "$(job_field ExitCode)" = 0:0 ] || fail "job exit code $(job_field ExitCode)"
[ "$(grep -c checksum= "$tmp/app.out")" = 1 ] || fail "the program did not print one result"
got=$(checksum "$tmp/app.out")
[ "$got" = "$ref" ] || fail "checksum '$got' after the requeue, uninterrupted run: $ref"
left=$("$ctl" --json store ls | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["checkpoints"]))')
[ "$left" = 0 ] || fail "$left checkpoints left in the store after the job finished"
echo "--- job log"
cat "$tmp/job.log"
echo "slurm: requeued job $jobid finished in ${secs%.*} s: checksum $got = uninterrupted run"
ok=1
