#!/usr/bin/env bash
# A full disk (issue 15, item 2), on small tmpfs mounts in a private mount namespace:
# - checkpoint.dir fills up (room for two checkpoints of the tiny GPT, a third is due): one rank and
#   two ranks end within seconds with one `error:` naming the file and the free space (they crashed
#   at exit with 139, or hung), no .tmp is left, the older checkpoints are intact;
# - metrics.jsonl cannot be written: the run stops with an error (it went on with a record cut
#   mid-line), and a resume after space is freed drops the torn record, so every line is a record.
# - the disk fills *during* a save (issue 22 item 1: one rank crashed in MPI_Finalize, two hung for
#   the watchdog's 30 min with a .tmp left): the save's space is reserved before any data is written,
#   so it completes; the run ends at its next write with one error, no .tmp, every checkpoint whole;
# - one rank's write fails mid-save (a file-size limit set on rank 1 while it is paused mid-write):
#   every rank ends the save agreed, in seconds, one error naming rank 1 and the tensor.
# The tmpfs parts need root and `unshare -m` (as the bundle and preflight tests do); skipped otherwise.
source "$(dirname "$0")/lib.sh"
use_mpirun
make_tiny_dataset
write_tiny_config

# ---- a write fails on rank 1 alone, mid-save (needs no root: prlimit on our own process) ----
BATON_CKPT_PAUSE_AT=mid_write@6 BATON_CKPT_PAUSE_S=5 timeout 120 "${MPIRUN[@]}" 2 "$BATON" train tiny.toml \
  --set run.dir=lim --set parallel.tp=2 --set checkpoint.every=2 --set train.steps=10 > lim.log 2> lim.err &
p=$!
for _ in $(seq 1 300); do grep -q "paused at mid_write" lim.err 2>/dev/null && break; sleep 0.1; done
# Rank 1: a baton process of this run with OMPI_COMM_WORLD_RANK=1 (no pgrep: procps is not in
# minimal images). `read` of /proc/*/comm is a builtin, so the scan forks only for baton processes
# and stays well inside the pause on a loaded machine.
rank1=""
for d in /proc/[0-9]*; do
  { read -r comm < "$d/comm"; } 2>/dev/null || continue
  [ "$comm" = baton ] || continue
  tr '\0' ' ' < $d/cmdline 2>/dev/null | grep -q "^$BATON train tiny.toml --set run.dir=lim" || continue
  tr '\0' '\n' < $d/environ 2>/dev/null | grep -qx OMPI_COMM_WORLD_RANK=1 && rank1=${d#/proc/}
done
[ -n "$rank1" ] || { cat lim.err; fail "no rank 1 process paused mid-save"; }
start=$(date +%s)
prlimit --pid "$rank1" --fsize=100000
rc=0; wait $p || rc=$?
took=$(( $(date +%s) - start ))
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || { cat lim.err; fail "a failed write on rank 1: exit $rc"; }
[ "$(grep -c '^error: ' lim.err)" -eq 1 ] || { cat lim.err; fail "a failed write on rank 1: not one error line"; }
grep -q "^error: rank 1: checkpoint 'lim/ckpt/step-0000006.h5' not written: writing tensor '.*': File too large" \
  lim.err || { cat lim.err; fail "a failed write on rank 1: error line"; }
ls -a lim/ckpt > lim.ls
! grep -q "\.tmp" lim.ls || { cat lim.ls; fail "a failed write on rank 1 left a .tmp"; }
for k in 2 4; do "$BATON" ckpt verify lim/ckpt/step-000000$k.h5 > /dev/null || fail "step $k after a failed write"; done
[ "$took" -le 30 ] || fail "a failed write on rank 1: ended after $took s"
echo "a write failing on rank 1 mid-save: one agreed error, ended in ${took}s, steps 2 and 4 intact"

mkdir -p probe
if [ "$(id -u)" -ne 0 ] || ! unshare -m bash -c "mount -t tmpfs -o size=64k none probe" 2>/dev/null; then
  echo "SKIP: needs root and unshare -m to mount a small tmpfs"
  exit 0
fi
mkdir -p disk

# ---- checkpoint.dir: 1300 KiB holds two 0.5 MB checkpoints; the third (step 6) does not fit ----
for np in 1 2; do
  rc=0
  start=$(date +%s)
  unshare -m bash -c "mount -t tmpfs -o size=1300k none disk && \
    timeout 60 ${MPIRUN[*]} $np \"$BATON\" train tiny.toml --set run.dir=disk/r --set checkpoint.every=2 \
      --set train.steps=10 > full$np.log 2> full$np.err; echo \$? > rc$np; ls -a disk/r/ckpt > ls$np; \
    for f in disk/r/ckpt/step-*.h5; do \"$BATON\" ckpt verify \$f > /dev/null || echo BAD \$f; done > verify$np"
  took=$(( $(date +%s) - start ))
  rc=$(cat rc$np)
  [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && [ "$rc" -ne 139 ] || { cat full$np.err; fail "np $np: exit $rc"; }
  [ "$(grep -c '^error: ' full$np.err)" -eq 1 ] || { cat full$np.err; fail "np $np: not one error line"; }
  grep -q "^error: no room for checkpoint 'disk/r/ckpt/step-0000006.h5': 0.[0-9] MB free in disk/r/ckpt, it needs 0.[0-9] MB" \
    full$np.err || { cat full$np.err; fail "np $np: error line"; }
  ! grep -q "\.tmp" ls$np || { cat ls$np; fail "np $np: a .tmp was left"; }
  grep -q "step-0000004.h5" ls$np && grep -q "step-0000002.h5" ls$np || { cat ls$np; fail "np $np: older checkpoints"; }
  [ ! -s verify$np ] || { cat verify$np; fail "np $np: an older checkpoint does not verify"; }
  [ "$took" -le 30 ] || fail "np $np took $took s"
  echo "np $np: one error line, ended in ${took}s, step 2 and 4 intact"
done

# ---- the disk fills while a save writes (paused half-way, then 100 MB more than the disk holds) ----
for np in 1 2; do
  start=$(date +%s)
  unshare -m bash -c "mount -t tmpfs -o size=3000k none disk && \
    (BATON_CKPT_PAUSE_AT=mid_write@6 BATON_CKPT_PAUSE_S=5 timeout 120 ${MPIRUN[*]} $np \"$BATON\" train tiny.toml \
      --set run.dir=disk/r --set checkpoint.every=2 --set train.steps=10 > mid$np.log 2> mid$np.err; \
      echo \$? > midrc$np) & \
    for i in \$(seq 1 300); do grep -q 'paused at mid_write' mid$np.err 2>/dev/null && break; sleep 0.1; done; \
    dd if=/dev/zero of=disk/fill bs=1k count=100000 status=none 2>/dev/null; wait; ls -a disk/r/ckpt > midls$np; \
    for f in disk/r/ckpt/step-*.h5; do \"$BATON\" ckpt verify \$f > /dev/null || echo BAD \$f; done > midverify$np"
  took=$(( $(date +%s) - start ))
  rc=$(cat midrc$np)
  [ "$rc" -eq 1 ] || { cat mid$np.err; fail "mid-save fill, np $np: exit $rc (139: the crash at exit, 124: the hang)"; }
  [ "$(grep -c '^error: ' mid$np.err)" -eq 1 ] || { cat mid$np.err; fail "mid-save fill, np $np: not one error line"; }
  grep -q "^error: cannot write 'disk/r/ckpt/latest.tmp': No space left on device" mid$np.err ||
    { cat mid$np.err; fail "mid-save fill, np $np: error line"; }
  grep -q "^hint: .*step-0000006.h5 is complete" mid$np.err || { cat mid$np.err; fail "mid-save fill, np $np: hint"; }
  ! grep -q "\.tmp" midls$np || { cat midls$np; fail "mid-save fill, np $np: a .tmp was left"; }
  for k in 2 4 6; do grep -q "step-000000$k.h5" midls$np || { cat midls$np; fail "mid-save fill, np $np: no step $k"; }; done
  [ ! -s midverify$np ] || { cat midverify$np; fail "mid-save fill, np $np: a checkpoint does not verify"; }
  [ "$took" -le 30 ] || fail "mid-save fill, np $np took $took s"
  echo "disk filled mid-save, np $np: the save completed (reserved), the run ended at its next write in ${took}s"
done

# ---- metrics.jsonl: run.dir on a small tmpfs that fills up while the run logs (the preflight found
# room; checkpoints every 10 steps go elsewhere) ----
unshare -m bash -c "mount -t tmpfs -o size=256k none disk && \
  \"$BATON\" train tiny.toml --set run.dir=disk/r --set checkpoint.dir=ck --set train.steps=20 > m0.log 2>&1; \
  echo \$? > mrc0; \
  \"$BATON\" train tiny.toml --set run.dir=disk/r --set checkpoint.dir=ck --set train.steps=100000 > m.log 2> m.err & p=\$!; \
  for i in \$(seq 1 100); do [ \$(wc -l < disk/r/metrics.jsonl) -gt 30 ] && break; sleep 0.1; done; \
  dd if=/dev/zero of=disk/fill bs=1k count=4096 status=none 2>/dev/null; wait \$p; echo \$? > mrc; rm disk/fill; \
  last=\$(sed 's/step-0*\\([0-9]*\\).h5/\\1/' ck/latest); echo \$((last + 20)) > end; \
  \"$BATON\" train tiny.toml --set run.dir=disk/r --set checkpoint.dir=ck --set train.steps=\$((last + 20)) > m2.log 2> m2.err; \
  echo \$? > mrc2; cp disk/r/metrics.jsonl metrics.jsonl"
[ "$(cat mrc0)" -eq 0 ] || { cat m0.log; fail "the first 20 steps"; }
[ "$(cat mrc)" -eq 1 ] || { cat m.err; fail "metrics write failure: exit $(cat mrc)"; }
grep -q "^error: cannot write disk/r/metrics.jsonl: No space left on device" m.err || { cat m.err; fail "metrics error line"; }
[ "$(cat mrc2)" -eq 0 ] || { cat m2.err; fail "resume after the metrics failure: exit $(cat mrc2)"; }
grep -q "^resumed from ck/step-" m2.log || { cat m2.log; fail "no resume"; }
python3 - <<'PY'
import json
end = int(open("end").read())
steps = [json.loads(l)["step"] for l in open("metrics.jsonl")]  # every line a whole record
assert steps == list(range(1, end + 1)), steps
print(f"metrics.jsonl: {len(steps)} whole records after the resume, steps 1..{end} in order")
PY
# ---- the heartbeat directory fills up: the last good heartbeat stays (an empty file renamed over it
# before, issue 22 item 4 — the watchdog then saw a rank it could not read) ----
mkdir -p hb/.heartbeat
unshare -m bash -c "mount -t tmpfs -o size=16k none hb/.heartbeat || exit 1; \
  \"$BATON\" train tiny.toml --set run.dir=hb --set checkpoint.dir=hbck --set train.steps=100000 \
    --set train.log_every=100000 --set run.stall_timeout_s=600 > hb.log 2>&1 & p=\$!; \
  for i in \$(seq 1 100); do [ -s hb/.heartbeat/rank-0 ] && break; sleep 0.1; done; \
  dd if=/dev/zero of=hb/.heartbeat/fill bs=1k count=64 status=none 2>/dev/null; sleep 2.5; \
  cp hb/.heartbeat/rank-0 hb-kept; kill -TERM \$p; wait \$p; echo \$? > hbrc"
[ -s hb-kept ] || fail "a full heartbeat directory left an empty heartbeat"
read -r t pid < hb-kept && [ -n "$pid" ] || { cat hb-kept; fail "the kept heartbeat is not one"; }
[ "$(cat hbrc)" -eq 130 ] || { cat hb.log; fail "the run with a full heartbeat dir: exit $(cat hbrc)"; }
echo "heartbeats on a full disk: the last good one kept ($(head -c 60 hb-kept | tr '\n' ' '))"
echo "PASS"
