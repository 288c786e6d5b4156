#!/usr/bin/env bash
# A real SLURM on this machine (issue 15, item 1): a private munged and a one-node slurmctld +
# slurmd (generated slurm.conf: no cgroups, no accounting, linuxproc tracking, MPI through PMIx)
# run baton the way clusters do:
# - `srun -n 4 --mpi=pmix baton train` (tp 2 × dp 2) logs the same losses as `mpirun -np 4`;
# - `sbatch launch/baton.sbatch CONFIG` (its #SBATCH sizes overridden for one CPU node) runs to
#   completion with the same losses as `mpirun -np 2`;
# - preemption: the template's job gets SIGTERM (as from --signal before the time limit), its ranks
#   checkpoint and it requeues itself; and `scontrol requeue` (SLURM's own SIGTERM to the steps);
#   each requeued job resumes with checkpoint.resume = "auto" and ends in the same state, bit for
#   bit (tensor checksums), as an uninterrupted run.
# Needs root and Debian's slurmd, slurmctld, slurm-client and munge (launch/install-deps.sh);
# skipped with the reason otherwise.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/lib_checkpoint.sh"
use_mpirun
for tool in slurmctld slurmd srun sbatch scontrol squeue munged mungekey; do
  command -v "$tool" > /dev/null || { echo "SKIP: $tool not installed (launch/install-deps.sh installs SLURM)"; exit 0; }
done
[ "$(id -u)" -eq 0 ] || { echo "SKIP: a private slurmd needs root"; exit 0; }

S="$WORK/slurm"
mkdir -p "$S"/{munge,ctld,d,log,run}
on_failure() { echo "--- slurmctld / slurmd logs (last lines) ---"; tail -n 15 "$S"/log/slurmctld.log "$S"/log/slurmd.log 2>/dev/null; }
cleanup() {
  [ "$?" -eq 0 ] || on_failure
  [ -n "${SLURM_CONF:-}" ] && scontrol shutdown > /dev/null 2>&1 || true
  for p in "$S"/run/*.pid; do [ -e "$p" ] && kill "$(cat "$p")" 2>/dev/null || true; done
}
trap cleanup EXIT
mungekey -c -k "$S/munge/key" 2> /dev/null || dd if=/dev/urandom of="$S/munge/key" bs=1024 count=1 status=none
chmod 400 "$S/munge/key"
munged -f --socket="$S/munge/sock" --key-file="$S/munge/key" --pid-file="$S/run/munged.pid" \
  --log-file="$S/log/munged.log" --seed-file="$S/munge/seed" || { echo "SKIP: munged does not start here"; exit 0; }
port=$(( 20000 + $$ % 20000 ))
host=$(hostname)
export SLURM_CONF="$S/slurm.conf"
cat > "$SLURM_CONF" <<CONF
ClusterName=baton-e2e
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$S/munge/sock
CredType=cred/munge
StateSaveLocation=$S/ctld
SlurmdSpoolDir=$S/d
SlurmctldPidFile=$S/run/slurmctld.pid
SlurmdPidFile=$S/run/slurmd.pid
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmctldLogFile=$S/log/slurmctld.log
SlurmdLogFile=$S/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/builtin
KillWait=30
NodeName=$host CPUs=$(getconf _NPROCESSORS_ONLN) State=UNKNOWN
PartitionName=e2e Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:16
CONF
slurmctld -f "$SLURM_CONF" && slurmd -f "$SLURM_CONF" || { echo "SKIP: slurmctld/slurmd do not start here"; exit 0; }
for _ in $(seq 1 40); do sinfo -h -o %t 2>/dev/null | grep -q idle && break; sleep 0.5; done
if ! sinfo -h -o %t | grep -q idle; then
  echo "SKIP: the one-node SLURM started but its node did not come up here; the logs end with:"
  tail -5 "$S"/log/*.log
  exit 0
fi

make_tiny_dataset
write_tiny_config
mkdir -p build && ln -sf "$BATON" build/baton  # the template runs build/baton from the submit directory

# ---- srun, tp 2 x dp 2, against mpirun ----
timeout 120 srun -n 4 --overcommit --mpi=pmix "$BATON" train tiny.toml --set parallel.tp=2 --set run.dir=srun > srun.log 2>&1 ||
  { cat srun.log; fail "srun -n 4 --mpi=pmix"; }
grep -q "4 ranks: tp 2 x dp 2 x pp 1" srun.log || { head -3 srun.log; fail "srun: not 4 ranks"; }
"${MPIRUN[@]}" 4 "$BATON" train tiny.toml --set parallel.tp=2 --set run.dir=mpi4 > mpi4.log
same_metrics mpi4 srun || fail "srun and mpirun differ"

# ---- sbatch with the template ----
# wait_job JOBID: until the job is in a final state (120 s at most). Asked of scontrol, and only a
# state it reports counts: under load squeue can time out and print nothing, which is not "done";
# a requeued job passes through REQUEUED/PENDING/RUNNING before it completes.
wait_job() {
  for _ in $(seq 1 240); do
    scontrol show job -o "$1" 2> /dev/null | grep -Eq "JobState=(COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY) " &&
      return 0
    sleep 0.5
  done
  scontrol show job -o "$1"; fail "job $1 did not finish"
}
submit() {  # submit RUN_DIR ARGS...: the template on one node, 2 ranks, 1 core each
  local dir=$1; shift
  sbatch --parsable --overcommit --nodes=1 --ntasks-per-node=2 --cpus-per-task=1 --gpus-per-node=0 --time=00:10:00 \
    --output="$dir.out" "$SRC/launch/baton.sbatch" tiny.toml --set run.dir="$dir" "$@"
}
jid=$(submit sb)
wait_job "$jid"
grep -q "^saved step-0000020.h5" sb.out || { cat sb.out; fail "sbatch job"; }
"${MPIRUN[@]}" 2 "$BATON" train tiny.toml --set run.dir=mpi2 > mpi2.log
same_metrics mpi2 sb || fail "sbatch and mpirun differ"

# ---- preemption: a signal to the batch script, then SLURM's own requeue ----
long=(--set train.steps=4000 --set train.log_every=1000 --set checkpoint.every=0)
"${MPIRUN[@]}" 2 "$BATON" train tiny.toml "${long[@]}" --set run.dir=ref > ref.log
tensor_checksums ref/ckpt > ref.sums
for how in signal requeue; do
  jid=$(submit "$how" "${long[@]}")
  for _ in $(seq 1 120); do [ -s "$how/metrics.jsonl" ] && break; sleep 0.25; done
  sleep 1
  if [ "$how" = signal ]; then scancel --signal=TERM --batch "$jid"; else scontrol requeue "$jid"; fi
  # Requeued: pending with a begin time; let it start in 2 s. Not "now": slurmd refuses a job
  # whose new credential is from the same second as the old one's revocation ("Job credential
  # revoked", the job then fails), which a start within the requeue's second can hit under load.
  for _ in $(seq 1 120); do scontrol show job -o "$jid" 2>/dev/null | grep -q "JobState=PENDING " && break; sleep 0.5; done
  scontrol show job -o "$jid" | grep -q "JobState=PENDING " || { cat "$how.out"; fail "$how: the job was not requeued"; }
  scontrol update JobId="$jid" StartTime=now+2
  wait_job "$jid"
  grep -q "stop requested (signal 15): stopping after step" "$how.out" || { cat "$how.out"; fail "$how: no clean stop"; }
  grep -q "^resumed from $how/ckpt/step-" "$how.out" || { cat "$how.out"; fail "$how: no resume"; }
  grep -q "^saved step-0004000.h5" "$how.out" || { cat "$how.out"; fail "$how: did not finish"; }
  tensor_checksums "$how/ckpt" > "$how.sums"
  cmp -s ref.sums "$how.sums" || { diff ref.sums "$how.sums" | head; fail "$how: the requeued job ends in another state"; }
  echo "$how: stopped at step $(grep -o 'stopping after step [0-9]*' "$how.out" | grep -o '[0-9]*$'), requeued, resumed, same end state"
done
echo "PASS"
