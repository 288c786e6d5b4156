#!/usr/bin/env bash
# Preflight before the first step (issue 15, item 3): an output directory that cannot be written,
# or a file system without room for one checkpoint, is one clear error before any training — not a
# bare `filesystem error` at the first save, after all the training when checkpoint.every = 0 —
# on one rank and on two; nothing is trained or left behind.
source "$(dirname "$0")/lib.sh"
use_mpirun
make_tiny_dataset
write_tiny_config
echo "a file" > plain

expect_error "checkpoint.dir = plain/ckpt cannot be created: Not a directory" \
  "$BATON" train tiny.toml --set run.dir=r1 --set checkpoint.dir=plain/ckpt --set checkpoint.every=0
[ ! -e r1/metrics.jsonl ] || fail "trained with an unwritable checkpoint.dir"
expect_error "run.dir = plain/run cannot be created" "$BATON" train tiny.toml --set run.dir=plain/run
rc=0
"${MPIRUN[@]}" 2 "$BATON" train tiny.toml --set run.dir=r2 --set checkpoint.dir=plain/ckpt > two.log 2> two.err || rc=$?
[ "$rc" -ne 0 ] || fail "two ranks trained with an unwritable checkpoint.dir"
[ "$(grep -c '^error: ' two.err)" -eq 1 ] || { cat two.err; fail "two ranks: not one error line"; }
grep -q "^error: checkpoint.dir = plain/ckpt cannot be created" two.err || { cat two.err; fail "two ranks: error line"; }

# A file system with less room than a checkpoint (a 256 KiB tmpfs; the tiny GPT's checkpoint is
# ~0.5 MB): needs root and a private mount namespace, as the bundle test does.
mkdir -p probe
if [ "$(id -u)" -eq 0 ] && unshare -m bash -c "mount -t tmpfs -o size=64k none probe" 2>/dev/null; then
  mkdir -p small
  rc=0
  unshare -m bash -c "mount -t tmpfs -o size=256k none small && \"$BATON\" train tiny.toml --set run.dir=r3 \
    --set checkpoint.dir=small/ckpt" > small.log 2> small.err || rc=$?
  [ "$rc" -ne 0 ] || { cat small.log; fail "trained without room for a checkpoint"; }
  grep -q "^error: checkpoint.dir = small/ckpt has 0.[0-9] MB free, a checkpoint of this run needs about 0.[0-9] MB" small.err ||
    { cat small.err; fail "no free-space error"; }
  [ ! -e r3/metrics.jsonl ] || fail "trained without room for a checkpoint"
else
  echo "skipped the free-space case: needs root and unshare -m to mount a tmpfs"
fi
# Ranks in different working directories with a relative run.dir (issue 22 item 4: the first save
# hung without a message): each would write the checkpoint file in another directory. Refused
# before the first step, naming the rank and where its checkpoint.dir resolves.
mkdir -p wd0 wd1
cp tiny.* wd0/ && cp tiny.* wd1/
rc=0
OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 60 mpirun --oversubscribe -x OMP_NUM_THREADS=1 \
  -np 1 --wdir wd0 "$BATON" train tiny.toml --set run.dir=rel : \
  -np 1 --wdir wd1 "$BATON" train tiny.toml --set run.dir=rel > wd.log 2> wd.err || rc=$?
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || { cat wd.err; fail "ranks in different directories: exit $rc"; }
grep -q "^error: rank 1: does not see the checkpoint directory its file's first rank writes in (checkpoint.dir rel/ckpt is .*wd1/rel/ckpt here)" wd.err ||
  { cat wd.err; fail "no error naming rank 1"; }
grep -q "^hint: every rank writes the same checkpoint file" wd.err || { cat wd.err; fail "hint"; }
[ ! -e wd0/rel/metrics.jsonl ] || fail "a step ran with ranks in different directories"
echo "PASS"
