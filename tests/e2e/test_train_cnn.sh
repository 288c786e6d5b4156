#!/usr/bin/env bash
# CNNs through the real binary (issue 12): a small ResNet with batch norm on IDX images
# - trains to the same losses and gradient norms under every layout of the same micro-batch size:
#   dp 2, pp 2 and 4 (1f1b, gpipe, zb-h1, interleaved), uneven stage boundaries, pp 2 × dp 2 (within 1e-4 of the
#   single process over the first epoch, 1e-3 in the second, where this tiny net is chaotic), and so do the validation loss and accuracy, which read batch norm's running
#   statistics (train/loop/buffer_sync.h makes the data-parallel replicas' statistics the single
#   process's);
# - pipedream and 2bw train a CNN; pipedream resumes from its drain point bit for bit;
# - resume is bit-exact (losses, val loss and accuracy, the end state incl. the running statistics
#   and the momentum buffers) with the data order of a shuffled epoch boundary inside the run;
# - bad inputs are one clear error: a truncated image file, labels outside model.classes, an image
#   the network cannot reduce, tensor parallelism.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/lib_checkpoint.sh"
use_mpirun
make_tiny_images 96  # 6 steps of 16 per epoch: steps 7..8 are the second (reshuffled) epoch
write_tiny_cnn_config

"$BATON" train cnn.toml --set run.dir=ref > ref.log
grep -q "top1" ref.log || { cat ref.log; fail "no accuracy in the log"; }
grep -q "model stages" ref.log && fail "a single process printed stages"
run() {  # run NAME NP ARGS...
  local name=$1 np=$2; shift 2
  "${MPIRUN[@]}" "$np" "$BATON" train cnn.toml --set run.dir="$name" "$@" > "$name.log" 2>&1 ||
    { cat "$name.log"; fail "$name did not train"; }
}
run dp2 2 --set 'train.micro_batch=4'
run pp2 2 --set parallel.pp=2
run pp2g 2 --set parallel.pp=2 --set parallel.schedule=gpipe --set 'parallel.stages=[[0, 3], [3, 10]]'
run pp4 4 --set parallel.pp=4
run pp2dp2 4 --set parallel.pp=2 --set 'parallel.stages=[[0, 6], [6, 10]]'
run zb 2 --set parallel.pp=2 --set parallel.schedule=zb-h1
run il 2 --set parallel.pp=2 --set parallel.vp=2 --set parallel.schedule=interleaved
grep -q "model stages (global layers) \[0,3) \[3,10)" pp2g.log || { cat pp2g.log; fail "stages not in the header"; }

python3 - <<'PY'
import json
def rows(path):
    return {r["step"]: r for r in map(json.loads, open(path))}
ref = rows("ref/metrics.jsonl")
def rel(a, b): return abs(a - b) / max(abs(b), 1e-12)
for name in ("dp2", "pp2", "pp2g", "pp4", "pp2dp2", "zb", "il"):
    got = rows(f"{name}/metrics.jsonl")
    worst = max(rel(got[s][k], ref[s][k]) for s in range(1, 7) for k in ("loss", "grad_norm"))
    assert worst <= 1e-4, f"{name}: worst relative difference {worst:.2e}"
    # Steps 7-8 (the reshuffled second epoch) sit where a 1e-7 perturbation flips a ReLU or
    # max-pool decision of this tiny net: one process on 1 and on 2 threads differed there by
    # 5.4e-3 with oneDNN's batch norm; dp 2's summation order (1e-7 apart) gave 3.7e-4 with ours.
    late = max(rel(got[s][k], ref[s][k]) for s in (7, 8) for k in ("loss", "grad_norm"))
    assert late <= 1e-3, f"{name}: steps 7-8 differ by {late:.2e}"
    v = max(rel(got[s][k], ref[s][k]) for s in (4, 8) for k in ("val_loss", "val_top1", "val_top5"))
    assert v <= 1e-4, f"{name}: validation {v:.2e} off"
    print(f"{name}: losses and norms of steps 1..6 within {worst:.1e}, 7..8 within {late:.1e}, validation within {v:.1e}")
assert ref[8]["val_top1"] > 0.2, f"did not learn: top-1 {ref[8]['val_top1']}"
PY

# Batch norm's running statistics reach the checkpoint.
tensor_checksums dp2/ckpt > dp2.sums
grep -q "buffers/bn1.running_var" dp2.sums || fail "no running statistics in the checkpoint"

# Asynchronous schedules: pipedream resumes from its drain point (checkpoint.every = 4) bit for bit.
run pd 2 --set parallel.pp=2 --set parallel.schedule=pipedream
run pd_r 2 --set parallel.pp=2 --set parallel.schedule=pipedream --set 'checkpoint.resume="pd/ckpt/step-0000004.h5"' \
  --set checkpoint.dir=pd_r/ckpt
run bw 2 --set parallel.pp=2 --set parallel.schedule=2bw
python3 - <<'PY'
import json, math
rows = lambda p: {r["step"]: r for r in map(json.loads, open(p))}
pd, pdr, bw = rows("pd/metrics.jsonl"), rows("pd_r/metrics.jsonl"), rows("bw/metrics.jsonl")
for s in range(5, 9):
    assert pdr[s]["loss"] == pd[s]["loss"], f"pipedream resume: step {s}"
for name, r in (("pipedream", pd), ("2bw", bw)):
    assert all(math.isfinite(r[s]["loss"]) for s in r) and r[8]["loss"] < r[1]["loss"], name
    print(f"{name}: loss {r[1]['loss']:.4f} -> {r[8]['loss']:.4f}")
PY

# Exact resume: crash right after checkpoint 4, resume "auto": the same metrics (incl. val loss and
# accuracy at step 8, which read the running statistics) and the same end state.
rc=0
BATON_CKPT_FAIL_AT=before_prune@4 "$BATON" train cnn.toml --set run.dir=crash > crash.log 2>&1 || rc=$?
[ "$rc" -eq 86 ] || { cat crash.log; fail "injected crash: exit $rc, want 86"; }
"$BATON" train cnn.toml --set run.dir=crash > crash-resumed.log
grep -q "^resumed from crash/ckpt/step-0000004.h5 at step 4 " crash-resumed.log || { cat crash-resumed.log; fail "no resume"; }
same_metrics ref crash || fail "resumed CNN run differs"
python3 - <<'PY'
import json
a, b = ([json.loads(l) for l in open(f"{d}/metrics.jsonl")] for d in ("ref", "crash"))
for x, y in zip(a, b):
    assert x.get("val_top1") == y.get("val_top1") and x.get("val_top5") == y.get("val_top5"), (x, y)
PY
tensor_checksums ref/ckpt > ref.sums
tensor_checksums crash/ckpt > crash.sums
grep -q "optim/momentum/" ref.sums || fail "no momentum buffers in the checkpoint"
cmp -s ref.sums crash.sums || { diff ref.sums crash.sums | head; fail "resumed end state differs"; }

# baton eval: a checkpoint's validation loss and accuracy, under any layout. Two batches of step 4
# are the run's own evaluation at step 4 (bit for bit: the same batches through the same model);
# by default the whole validation set (64 images = 4 batches of 16), the same under pp 2.
"$BATON" eval cnn.toml --checkpoint ref/ckpt/step-0000004.h5 --batches 2 --json e4.json > e4.log
"$BATON" eval cnn.toml --checkpoint ref/ckpt --json e8.json > e8.log
grep -q "64 images in 4 batches of 16 | loss" e8.log || { cat e8.log; fail "eval line"; }
"${MPIRUN[@]}" 2 "$BATON" eval cnn.toml --checkpoint ref/ckpt --set parallel.pp=2 --json e8pp.json > e8pp.log
python3 - <<'PY'
import json
ref = {r["step"]: r for r in map(json.loads, open("ref/metrics.jsonl"))}
e4, e8, e8pp = (json.load(open(f)) for f in ("e4.json", "e8.json", "e8pp.json"))
assert e4["step"] == 4 and e4["samples"] == 32, e4
assert (e4["loss"], e4["top1"], e4["top5"]) == (ref[4]["val_loss"], ref[4]["val_top1"], ref[4]["val_top5"]), (e4, ref[4])
assert e8["step"] == 8 and e8["samples"] == 64 and e8["batches"] == 4, e8
assert all(abs(e8pp[k] - e8[k]) <= 1e-6 * abs(e8[k]) for k in ("loss", "top1", "top5")), (e8, e8pp)
print(f"eval: step 4 = the run's own evaluation; step 8 on all 64 images loss {e8['loss']:.4f} top-1 {e8['top1']:.3f}, pp 2 the same")
PY
expect_error "no validation set" "$BATON" eval cnn.toml --checkpoint ref/ckpt --set data.valid='""' --set data.valid_labels='""'
expect_error "fewer than one batch" "$BATON" eval cnn.toml --checkpoint ref/ckpt --set train.global_batch=128 --set train.micro_batch=4
expect_error "checkpoint .nothere. does not exist" "$BATON" eval cnn.toml --checkpoint nothere

# Bad inputs: one clear error each.
head -c 2000 img.train > img.short
expect_error "img.short .*" "$BATON" train cnn.toml --set data.train='"img.short"' --set run.dir=bad
python3 -c "
import struct; open('lbl.bad','wb').write(struct.pack('>II',0x801,96)+bytes([3]*95+[12]))"
expect_error "label 12 but model.classes is 10" "$BATON" train cnn.toml --set data.train_labels='"lbl.bad"' --set run.dir=bad
expect_error "cannot reduce a 12×12 image" "$BATON" train cnn.toml --set model.kind='"vgg"' --set model.n_layer=11 --set run.dir=bad
expect_error "CNNs have no tensor-parallel layers" "${MPIRUN[@]}" 2 "$BATON" train cnn.toml --set parallel.tp=2 --set run.dir=bad
[ ! -e bad/metrics.jsonl ] || fail "a refused run wrote metrics"

# The shipped CNN configs run as they are: the quick start for 2 steps (its evaluation covers the
# whole 10,000-image test set), the ImageNet-shaped ones one bench step of 2 images.
if [ -r /usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz ]; then
  "$BATON" train "$SRC/configs/fashion-resnet.toml" --set train.steps=2 --set run.dir=fq > fq.log
  grep -q "^step      2/2 | loss [0-9.]* | val [0-9.]* top1" fq.log || { cat fq.log; fail "quick start"; }
  "$BATON" eval "$SRC/configs/fashion-resnet.toml" --checkpoint fq/ckpt > fq-eval.log
  grep -q "10000 images in 40 batches of 250 | loss" fq-eval.log || { cat fq-eval.log; fail "quick start eval"; }
else
  echo "skipped configs/fashion-resnet.toml: dataset-fashion-mnist is not installed (launch/install-deps.sh)"
fi
for c in resnet50 vgg16; do
  "$BATON" bench "$SRC/configs/$c.toml" --set train.global_batch=2 --set train.micro_batch=2 --warmup 0 --steps 1 \
    > $c.log || { cat $c.log; fail "configs/$c.toml"; }
done
grep -q "ResNet-50 (18 layers), 224×224×3 images, 1000 classes | 25.56M parameters" resnet50.log || fail "resnet50"
grep -q "VGG-16-BN (16 layers, dropout 0.5), 224×224×3 images, 1000 classes | 138.37M parameters" vgg16.log || fail "vgg16"
echo "PASS"
