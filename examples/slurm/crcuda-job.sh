#!/bin/bash
# A preemptible Slurm batch job: runs PROG under crcuda, checkpoints it when Slurm signals, and on the
# requeued run restores the newest checkpoint of the job instead of starting over. README.md explains.
#   sbatch [SBATCH OPTIONS] crcuda-job.sh PROG [ARGS...]
#SBATCH --job-name=crcuda-job
#SBATCH --signal=B:TERM@120
#SBATCH --requeue
#SBATCH --open-mode=append
##SBATCH --gres=gpu:1
#
# Settings (environment, exported by sbatch; all but CRCUDA_STORE have defaults):
#   CRCUDA_STORE     the checkpoint store, on a file system every node sees (required)
#   CRCUDACTL        crcudactl to use (default: crcudactl on PATH)
#   CRCUDA_BACKEND   cuda (a GPU) or sim (the simulated device) for a daemon crcudactl starts (cuda)
#   JOB_OUT          the program's stdout and stderr, a file of its own: CRIU restores the program's
#                    open files and checks their sizes, so it must not be Slurm's job log, which the
#                    requeued job writes to (default: $SLURM_SUBMIT_DIR/crcuda-$SLURM_JOB_ID.out)
#   CKPT_EVERY       also checkpoint periodically, e.g. 30m (default: only on the signal)
#   CKPT_KEEP        checkpoints of this job kept (default 2)
#   CRCUDA_LINEAGE   names the job's checkpoints in the store (default slurm-$SLURM_JOB_ID, which a
#                    requeued job keeps)
set -u

ctl=${CRCUDACTL:-crcudactl}
backend=${CRCUDA_BACKEND:-cuda}
keep=${CKPT_KEEP:-2}
out=${JOB_OUT:-${SLURM_SUBMIT_DIR:-$PWD}/crcuda-${SLURM_JOB_ID:-0}.out}
export CRCUDA_LINEAGE=${CRCUDA_LINEAGE:-slurm-${SLURM_JOB_ID:?not a Slurm job}}

log() { echo "crcuda-job: $(date +%T) $*"; }
die() {
	log "$*"
	exit 1
}
[ $# -gt 0 ] || die "usage: sbatch crcuda-job.sh PROG [ARGS...]"
[ -n "${CRCUDA_STORE:-}" ] || die "set CRCUDA_STORE to a store every node sees"
export CRCUDA_STORE
command -v "$ctl" >/dev/null || die "no crcudactl at '$ctl' (set CRCUDACTL)"
command -v python3 >/dev/null || die "python3 is needed to read crcudactl's --json output"

# This job's checkpoints (its lineage), oldest first: "ID PID" a line; none while there is no store.
lineage_ckpts() {
	python3 -c '
import json, os, subprocess, sys
ctl, lineage = sys.argv[1:]
def store(*args):
    r = subprocess.run([ctl, "--json", "store", *args], capture_output=True, text=True)
    if r.returncode:
        sys.exit(0 if not os.path.isdir(os.environ["CRCUDA_STORE"]) else "crcuda-job: " + r.stderr.strip())
    return json.loads(r.stdout)
for c in store("ls")["checkpoints"]:
    meta = store("inspect", str(c["id"]))["meta"]
    if meta.get("crcuda.lineage") == lineage:
        print(c["id"], meta.get("crcuda.pid", ""))
' "$ctl" "$CRCUDA_LINEAGE"
}
newest() { lineage_ckpts | tail -n 1; }
# rm_lineage N: removes all but the newest N checkpoints of this job.
rm_lineage() {
	local ids
	mapfile -t ids < <(lineage_ckpts | head -n "-$1" | cut -d' ' -f1)
	[ ${#ids[@]} = 0 ] || "$ctl" rm "${ids[@]}" >/dev/null
}

# Slurm signals the batch shell alone (--signal=B:TERM@120, before the time limit), or every process of
# the job (scontrol requeue, preemption, scancel). The program and crcudactl start with TERM ignored:
# crcudactl takes it back (run --checkpoint-on SIGTERM) and the program keeps ignoring it (CRIU restores
# that too), so that a TERM to every process reaches the program only as a checkpoint.
preempted=0
child=""
# shellcheck disable=SC2317 # a trap
on_term() {
	preempted=1
	[ -n "$child" ] || return 0 # not started yet: done once it is
	if [ "$mode" = run ]; then
		kill -TERM "$child" 2>/dev/null # crcudactl run: the final checkpoint, then the program stops
		return 0
	fi
	log "SIGTERM: checkpointing pid $pid"
	# A restore still under way refuses a checkpoint: try again while it lasts.
	for _ in {1..10}; do
		"$ctl" checkpoint "$pid" && return 0
		kill -0 "$child" 2>/dev/null || break
		sleep 1
	done
	log "the checkpoint of pid $pid failed"
}

trap on_term TERM
read -r id pid <<<"$(newest)"
if [ -n "$id" ]; then
	mode=restore
	log "restart ${SLURM_RESTART_COUNT:-0} of job $SLURM_JOB_ID on $(hostname -s): restoring checkpoint $id (pid $pid)"
	(
		trap '' TERM
		exec "$ctl" restore --wait "$id"
	) </dev/null &
else
	mode=run
	[ "${SLURM_RESTART_COUNT:-0}" = 0 ] ||
		log "restart $SLURM_RESTART_COUNT of job $SLURM_JOB_ID, but no checkpoint of $CRCUDA_LINEAGE: starting over"
	log "running $* on $(hostname -s) (backend $backend, lineage $CRCUDA_LINEAGE, output in $out)"
	(
		trap '' TERM
		exec "$ctl" run --backend "$backend" --checkpoint-on SIGTERM ${CKPT_EVERY:+--every "$CKPT_EVERY"} \
			--keep "$keep" -- "$@"
	) </dev/null >>"$out" 2>&1 &
fi
child=$!
[ $preempted = 0 ] || on_term

# A trap runs once wait returns: wait again until the child is gone.
while :; do
	wait "$child"
	rc=$?
	kill -0 "$child" 2>/dev/null || break
done

if [ $preempted = 1 ]; then
	read -r now _ <<<"$(newest)"
	if [ -z "$now" ] || [ "$now" = "$id" ]; then
		log "SIGTERM, and no checkpoint was taken: status $rc"
		exit "$rc"
	fi
	rm_lineage "$keep"
	log "checkpoint $now taken; the requeued job resumes from it"
	# The time-limit warning reaches a running job: requeue it. scontrol requeue, preemption and scancel
	# have changed its state already.
	state=$(scontrol show job -o "$SLURM_JOB_ID" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p')
	if [ "$state" = RUNNING ]; then
		log "requeueing job $SLURM_JOB_ID"
		scontrol requeue "$SLURM_JOB_ID"
	fi
	exit 0
fi
log "the program exited with status $rc"
# Finished: a later requeue must not resume it.
[ "$rc" = 0 ] && rm_lineage 0
exit "$rc"
