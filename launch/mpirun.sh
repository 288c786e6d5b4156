#!/usr/bin/env bash
# Train on N ranks of this machine (or of a hostfile) with Open MPI's mpirun:
#   launch/mpirun.sh N CONFIG [--set section.key=value]...
# Environment:
#   BATON            the binary (default: build/baton next to this script)
#   OMP_NUM_THREADS  OpenMP threads per rank (default: cores / N, at least 1)
#   OVERSUBSCRIBE=1  allow more ranks than cores (tests, small machines)
#   MPIRUN_ARGS      extra mpirun flags, e.g. "--hostfile hosts" or "--mca btl tcp,self"
# SIGTERM/SIGINT to this script stop the job cleanly with exit code 130 (see the end).
# Each rank gets OMP_NUM_THREADS cores of its own (--map-by slot:PE=T --bind-to core), so ranks
# do not fight over cores; oversubscribed runs are not bound.
set -euo pipefail
if [ $# -lt 2 ]; then
  echo "usage: $0 N CONFIG [--set section.key=value]..." >&2
  exit 2
fi
n=$1
config=$2
shift 2
BATON=${BATON:-$(dirname "$0")/../build/baton}
cores=$(nproc)
threads=${OMP_NUM_THREADS:-$(( cores / n > 0 ? cores / n : 1 ))}

flags=(-n "$n" -x OMP_NUM_THREADS="$threads")
if [ "$n" -gt "$cores" ] && [ "${OVERSUBSCRIBE:-0}" != 1 ]; then
  echo "note: $n ranks on $cores cores; mpirun will refuse unless OVERSUBSCRIBE=1" >&2
fi
if [ "${OVERSUBSCRIBE:-0}" = 1 ]; then
  flags+=(--oversubscribe --bind-to none)
else
  flags+=(--map-by "slot:PE=$threads" --bind-to core)
fi
if [ "$(id -u)" -eq 0 ]; then flags+=(--allow-run-as-root); fi  # containers often run as root
# shellcheck disable=SC2206  # MPIRUN_ARGS is a list of words on purpose
flags+=(${MPIRUN_ARGS:-})

echo "+ mpirun ${flags[*]} $BATON train $config $*" >&2
# SIGTERM / SIGINT go to the ranks on this node, not to mpirun: they stop after the current step
# (the others follow: ranks agree on stopping), checkpoint and exit 130, which mpirun then returns.
# Signalled itself, mpirun would forward the signal and exit 1 (Open MPI's rule). A second signal
# goes to mpirun: the hard stop.
mpirun "${flags[@]}" "$BATON" train "$config" "$@" &
pid=$!
signalled=0
forward() {
  if [ "$signalled" -eq 0 ] && pkill -"$1" -P "$pid" 2>/dev/null; then
    signalled=1
  else
    kill -"$1" "$pid" 2>/dev/null || true
  fi
}
trap 'forward TERM' TERM
trap 'forward INT' INT
while :; do
  rc=0
  wait "$pid" || rc=$?
  kill -0 "$pid" 2>/dev/null || exit "$rc"  # else a trapped signal interrupted the wait
done
