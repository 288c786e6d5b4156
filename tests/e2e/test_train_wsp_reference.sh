#!/usr/bin/env bash
# HetPipe's own regime against a single-process reference of WSP's rule (issue 23 items 1–2;
# docs/hetpipe.md "Deterministic mode"). Deterministic `baton train` runs (hetero.deterministic: the
# server hooks of the VWs' first stages in a seeded order) with run.trace on; tests/reference/
# wsp_reference.cpp — written from the paper, sharing no code with src/wsp or src/train/hetero —
# replays the run's order of hooks (from its trace) and computes what the rule says: every
# minibatch's loss, grad norm and validation loss, and per minibatch the clocks, the c_global, the
# version vector of the weights it reads and its staleness. Checked:
# - every minibatch's version read, c_global, staleness and version vector equal the runtime's trace on
#   every stage of every VW (the runtime's vectors are tags carried with the weights), and c_local
#   the first stage's (a later stage's clock runs ahead: it finishes each wave first);
# - the losses, grad norms and validation losses agree within 1e-6 relative (not bit for bit: the
#   reference sums w_global + own updates in double where the runtime rebases fp32 tensors, and
#   computes a pipelined VW's step on the whole model where the runtime splits it over stages);
# - cases: GPT, 3 VWs of 1, 2 and 3 stages, Nm = 3, D = 1, a checkpoint cut at step 6; GPT, 2 VWs
#   of 2 and 1 stages, Nm = 2, D = 2; GPT, 2 VWs of 3 and 2 stages, Nm = 2, D = 0; a ResNet
#   (batch norm) on images, 2 VWs of 2 stages and 1, Nm = 3, D = 1, evaluated at the end only (mid-run,
#   a pipelined VW's stages have run different numbers of forwards, so their batch-norm running
#   statistics hold different minibatches — 8e-3 from the whole-model reference's at step 6);
# - two wrong rules in the reference must each differ from the first run by > 1e-4: a merge that
#   forgets the VW's own pushed waves, minibatch k reading one version older than the rule's (the
#   third, a merge that drops the partial wave, never bites here — these VWs merge right after
#   their push; test_train_wsp_deterministic.sh has it);
# - the same config twice gives the same metrics and traces bit for bit.
source "$(dirname "$0")/lib.sh"
: "${WSP_REFERENCE:?}"
use_mpirun
make_tiny_dataset
write_tiny_config
make_tiny_images 96
write_tiny_cnn_config
DET=(--set hetero.sync='"wsp"' --set hetero.deterministic=true --set run.trace=true --set optim.weight_decay=0
     --set train.steps=12 --set data.valid='"tiny"' --set train.eval_steps=2)

run_case() {  # name ranks config args...
  local name=$1 ranks=$2 config=$3
  shift 3
  timeout 300 "${MPIRUN[@]}" "$ranks" "$BATON" train "$config" "$@" --set run.dir="$name" > "$name.log" 2>&1 \
    || { tail -30 "$name.log"; fail "$name: the deterministic run failed"; }
  OMP_NUM_THREADS=1 "$WSP_REFERENCE" --run "$name" --out "ref_$name" "$config" "$@" > "ref_$name.log" 2>&1 \
    || { cat "ref_$name.log"; fail "$name: the reference failed"; }
}
A=(--set hetero.virtual_workers='["0", "1,2", "3:0-1, 4:1-3, 5:3-4"]' --set train.global_batch=12
   --set train.micro_batch=4 --set hetero.nm=3 --set hetero.staleness=1 --set checkpoint.every=6 --set train.eval_every=6)
run_case gpt123 6 tiny.toml "${DET[@]}" "${A[@]}"
run_case gpt123_again 6 tiny.toml "${DET[@]}" "${A[@]}"
for m in forget-own one-older; do
  OMP_NUM_THREADS=1 "$WSP_REFERENCE" --run gpt123 --out "ref_gpt123_$m" --mutate "$m" tiny.toml "${DET[@]}" "${A[@]}" \
    > "ref_$m.log" 2>&1 || { cat "ref_$m.log"; fail "reference with --mutate $m"; }
done
run_case gpt21 3 tiny.toml "${DET[@]}" --set hetero.virtual_workers='["0,1", "2"]' --set train.global_batch=8 \
  --set train.micro_batch=4 --set hetero.nm=2 --set hetero.staleness=2 --set checkpoint.every=0 --set train.eval_every=4
run_case gpt32 5 tiny.toml "${DET[@]}" --set hetero.virtual_workers='["0:0-1, 1:1-3, 2:3-4", "3,4"]' \
  --set train.global_batch=8 --set train.micro_batch=4 --set hetero.nm=2 --set hetero.staleness=0 \
  --set checkpoint.every=0 --set train.eval_every=4
run_case cnn21 3 cnn.toml "${DET[@]}" --set data.valid='"img.valid"' --set hetero.virtual_workers='["0,1", "2"]' \
  --set train.global_batch=16 --set train.micro_batch=8 --set hetero.nm=3 --set hetero.staleness=1 \
  --set checkpoint.every=0 --set train.eval_every=0 --set optim.lr=0.02

python3 - <<'PY'
import glob, json, os, re
def metrics(d, n):
    return [[json.loads(l) for l in open(f"{d}/" + ("metrics.jsonl" if k == 0 else f"metrics-vw{k}.jsonl"))]
            for k in range(n)]
def starts(d):
    out = {}
    for f in sorted(glob.glob(f"{d}/wsp-trace-vw*-stage*.jsonl")):
        vw, stage = map(int, re.search(r"vw(\d+)-stage(\d+)", f).groups())
        for line in open(f):
            e = json.loads(line)
            if e["e"] == "start":
                out[(vw, stage, e["mb"])] = e
    return out
def compare(run, ref, strict=True):
    ref_starts = {(s["vw"], s["mb"]): s for s in map(json.loads, open(f"{ref}/starts.jsonl"))}
    n = 1 + max(v for v, _ in ref_starts)
    checked = 0
    for (vw, stage, mb), e in starts(run).items():
        r = ref_starts[(vw, mb)]
        # c_local is each stage's own clock (a later stage finishes a wave first); the reference's
        # is the first stage's.
        for f in ("reads", "c_global", "staleness", "w") + (("c_local",) if stage == 0 else ()):
            if strict:
                assert e[f] == r[f], f"{run} VW {vw} stage {stage} minibatch {mb}: {f} {e[f]} vs the reference's {r[f]}"
        checked += 1
    assert checked >= len(ref_starts), (run, checked, len(ref_starts))
    worst, values = 0.0, 0
    for k, (a, b) in enumerate(zip(metrics(run, n), metrics(ref, n))):
        assert [r["step"] for r in a] == [r["step"] for r in b] == list(range(1, 13)), (run, k)
        for x, y in zip(a, b):
            for f in ("loss", "grad_norm", "val_loss"):
                if f in y or f in x:
                    assert f in x and f in y, f"{run} VW {k} step {x['step']}: {f} in one of them only"
                    worst = max(worst, abs(x[f] - y[f]) / abs(y[f]))
                    values += 1
    return worst, values, checked, max(s["staleness"] for s in ref_starts.values())

for run in ("gpt123", "gpt21", "gpt32", "cnn21"):
    worst, values, checked, stale = compare(run, f"ref_{run}")
    print(f"{run}: {checked} minibatch starts (every stage) equal the reference's clocks, c_global, staleness "
          f"(max {stale}) and version vectors; {values} losses / grad norms / val losses within {worst:.1e} relative")
    assert worst <= 1e-6, f"{run}: the run differs from the reference by {worst:.2e}"
    assert stale > 0, f"{run}: no minibatch missed an update; the case does not exercise staleness"
for m in ("forget-own", "one-older"):
    worst, *_ = compare("gpt123", f"ref_gpt123_{m}", strict=False)
    print(f"gpt123 vs a reference with a wrong rule ({m}): {worst:.1e} relative")
    assert worst > 1e-4, f"the comparison cannot tell the wrong rule {m}: {worst:.2e}"
# Twice the same config: the same metrics (every value but the timings) and traces, bit for bit.
KEYS = ("step", "loss", "grad_norm", "val_loss", "lr", "clock", "c_global", "staleness")
for f in sorted(os.listdir("gpt123")):
    if f.startswith("metrics"):
        a, b = ([tuple(r.get(k) for k in KEYS) for r in map(json.loads, open(f"{d}/{f}"))] for d in ("gpt123", "gpt123_again"))
        assert a == b, f"{f}: two deterministic runs differ"
    if f.startswith("wsp-trace"):
        assert open(f"gpt123/{f}").read() == open(f"gpt123_again/{f}").read(), f"{f}: two deterministic runs differ"
print("gpt123 twice: metrics (loss, grad norm, val loss, lr, clocks, staleness) and WSP traces identical")
PY
echo "PASS"
