#!/usr/bin/env bash
# launch/hetpipe-figures.sh: issue 13's "Measure and report" on this machine — WSP training of
# virtual workers (VWs) on CPU ranks standing for mixed devices (docs/hetpipe.md, "Measured on this
# machine"). Every figure is a `baton train` under `mpirun --oversubscribe` (one OpenMP thread per
# rank); the script prints markdown tables, each with the commands behind it:
#   1. allocation: 4 ranks standing for 2 fast + 2 slow devices (hetero.slowdown 1 and 2), 2 VWs of
#      2 stages, WSP with D = 0 — NP (a fast VW and a slow VW) against ED (each VW a fast and a slow
#      stage), both partitioned by `baton plan --algorithm hetpipe` on a 2 + 2 GPU cluster file;
#      minibatches/s of the job (the sum over the VWs) and of each VW;
#   2. staleness absorbs jitter: 8 VWs of one rank standing for 8 equal devices 6× slower than a
#      core (hetero.slowdown 6: with the jitter each rank computes about a ninth of its time, so the
#      8 ranks fit the 2 cores), every rank's compute stretched by a seeded factor in [1, 2] per minibatch
#      (hetero.jitter = 1); WSP D = 4, D = 0 and the allreduce baseline: minibatches/s, time waiting
#      for the parameter server and time idle; the same without jitter as the control;
#   3. convergence: the loss after a fixed number of minibatches for D = 0, 4, 32 (2 VWs of one
#      rank, lr / 2: WSP adds both VWs' updates) against synchronous data parallelism (dp = 2 at
#      lr) on configs/quickstart.toml, shortened, and on configs/fashion-resnet.toml, shortened.
# Throughput runs are repeated (REPS, JITTER_REPS), alternating the configurations, and the tables
# give medians; the convergence runs run once each. About 25 minutes on the quiet 2-core development
# VM, more with other work on it (the Brown datasets must exist:
# launch/quickstart.sh or data/README.md; Fashion-MNIST from Debian's dataset-fashion-mnist).
# Usage: launch/hetpipe-figures.sh [--no-cnn] [--report]   (--report: only print the tables again
# from the runs kept in $OUT; SECTIONS="jitter" (any of alloc, jitter, conv) re-runs only those
# sections, keeping the others' runs in $OUT)
# Environment: BATON (default build/baton), REPS (repetitions of the allocation runs, default 2),
# JITTER_REPS (of the jitter runs, default REPS), OUT (default runs/hetpipe-figures: every
# run's log, metrics and command are kept there).
set -euo pipefail
cd "$(dirname "$0")/.."
BATON=${BATON:-build/baton}
REPS=${REPS:-2}
JITTER_REPS=${JITTER_REPS:-$REPS}
OUT=${OUT:-runs/hetpipe-figures}
CNN=1
REPORT_ONLY=0
SECTIONS=${SECTIONS:-alloc jitter conv}
for arg in "$@"; do
  case $arg in
    --no-cnn) CNN=0 ;;
    --report) REPORT_ONLY=1 ;;
    *) echo "usage: $0 [--no-cnn] [--report]" >&2; exit 2 ;;
  esac
done
source launch/lib-hetpipe-runs.sh
hp_require
if [ "$REPORT_ONLY" = 0 ]; then
# SECTIONS="jitter" (or "alloc", "conv", any subset) re-runs those sections only, keeping the other
# sections' runs in $OUT for the tables.
if [ "$SECTIONS" = "alloc jitter conv" ]; then rm -rf "$OUT"; fi
mkdir -p "$OUT"
ROOT=()
if [ "$(id -u)" -eq 0 ]; then ROOT=(--allow-run-as-root); fi

job() { hp_job "$@"; }

# Runs measure the training loop only: no evaluation but one batch at the end, no checkpoints.
QUIET=(--set train.eval_every=0 --set train.eval_steps=1 --set train.log_every=1 --set checkpoint.every=0)

if section alloc; then
# 1. Allocation. The cluster: one node of 2 TITAN RTX, one of 2 RTX 2060 (the table's nearest
# pair; 2.5x apart in fp32 peak). The planner partitions the quickstart GPT (6 layers: embedding,
# 4 blocks, head) for them; the runs replace the devices by slowdown 1 (fast) and 2 (slow).
hp_cluster_2fast_2slow "$OUT/cluster-2fast-2slow.toml"
ALLOC_MB=8    # rows per VW minibatch (global batch 16 over 2 VWs)
ALLOC_NM=2    # the planner's best predicted Nm (its default, the smallest Max_m, is 4)
ALLOC_STEPS=16
for policy in np ed; do
  "$BATON" plan configs/quickstart.toml --set model.vocab_size=8192 --set train.micro_batch=$ALLOC_MB \
    --set train.global_batch=$ALLOC_MB --cluster "$OUT/cluster-2fast-2slow.toml" --algorithm hetpipe \
    --policy $policy --nm $ALLOC_NM --format json > "$OUT/plan-$policy.json"
  hp_plan_sets "$OUT/plan-$policy.json" 1 2 > "$OUT/plan-$policy.sets"
done
# The layers' measured times on one thread (forward + backward) give what the partitions would
# reach without contention or pipeline bubbles: a VW runs at 1 / its slowest stage (slowdown ×
# the stage's layers), WSP with D = 0 holds every VW to the slowest VW's pace.
OMP_NUM_THREADS=1 "$BATON" profile configs/quickstart.toml --set train.micro_batch=$ALLOC_MB --out "$OUT/profile.json" \
  > "$OUT/profile.log" 2>&1
for rep in $(seq 1 "$REPS"); do
  for policy in np ed; do
    { read -r vws; read -r slowdown; } < "$OUT/plan-$policy.sets"
    job alloc-$policy-$rep 4 configs/quickstart.toml "${QUIET[@]}" --set hetero.sync='"wsp"' --set hetero.staleness=0 \
      --set hetero.nm=$ALLOC_NM --set train.micro_batch=$ALLOC_MB --set train.global_batch=$((2 * ALLOC_MB)) \
      --set train.steps=$ALLOC_STEPS --set "hetero.virtual_workers=$vws" --set "hetero.slowdown=$slowdown"
  done
done

fi  # alloc

if section jitter; then
# 2. Staleness absorbs jitter: 8 VWs of one rank, each standing for a device 6× slower than a core
# (an emulated device takes 6 × the rank's CPU seconds, train/hetero/compute_stretch.h, so sharing the 2
# cores does not slow it down), jitter 1 on every rank (the same factors in every run: they are a
# function of train.seed, rank and minibatch). Nm = 1: every minibatch is a wave, the pull blocks
# at once (idle = waiting); Nm = 4: a pull requested at the end of wave c gates only the last
# minibatch of wave c + 1, so the first 3 run while it waits. The control: the same without
# jitter (what D = 4 gains from running ahead alone).
JIT_VWS=8
JIT=(--set "hetero.virtual_workers=[$(seq -s, -f '"%g"' 0 $((JIT_VWS - 1)))]"
     --set "hetero.slowdown=[$(printf '6,%.0s' $(seq 2 $JIT_VWS))6]" --set train.micro_batch=4
     --set train.global_batch=$((4 * JIT_VWS)) --set train.steps=20)
for rep in $(seq 1 "$JITTER_REPS"); do
  for nm in 1 4; do
    job jitter-nm$nm-d4-$rep $JIT_VWS configs/quickstart.toml "${QUIET[@]}" "${JIT[@]}" --set hetero.jitter=1 \
      --set hetero.nm=$nm --set hetero.sync='"wsp"' --set hetero.staleness=4
    job jitter-nm$nm-d0-$rep $JIT_VWS configs/quickstart.toml "${QUIET[@]}" "${JIT[@]}" --set hetero.jitter=1 \
      --set hetero.nm=$nm --set hetero.sync='"wsp"' --set hetero.staleness=0
  done
  job jitter-nm1-ar-$rep $JIT_VWS configs/quickstart.toml "${QUIET[@]}" "${JIT[@]}" --set hetero.jitter=1 --set hetero.nm=1 \
    --set hetero.sync='"allreduce"'
  for d in 4 0; do
    job steady-nm1-d$d-$rep $JIT_VWS configs/quickstart.toml "${QUIET[@]}" "${JIT[@]}" --set hetero.nm=1 --set hetero.sync='"wsp"' \
      --set hetero.staleness=$d
  done
done

fi  # jitter

if section conv; then
# 3. Convergence: the same minibatches for every run (global batch p − 1 split over the 2 VWs /
# the 2 data-parallel ranks); WSP at lr / 2 (and min_lr / 2), data parallelism at lr.
CONV_GPT=(--set train.steps=80 --set train.micro_batch=4 --set train.global_batch=8 --set optim.warmup_steps=8 --set train.log_every=1 --set train.eval_every=0
          --set train.eval_steps=8 --set checkpoint.every=0)
job conv-gpt-dp 2 configs/quickstart.toml "${CONV_GPT[@]}"
for d in 0 4 32; do
  job conv-gpt-d$d 2 configs/quickstart.toml "${CONV_GPT[@]}" --set hetero.sync='"wsp"' --set hetero.staleness=$d \
    --set 'hetero.virtual_workers=["0", "1"]' --set optim.lr=1e-3 --set optim.min_lr=1e-4
done
if [ "$CNN" = 1 ]; then
  CONV_CNN=(--set train.steps=80 --set optim.warmup_steps=8 --set train.log_every=1 --set train.eval_every=0
            --set train.eval_steps=8 --set checkpoint.every=0)
  job conv-cnn-dp 2 configs/fashion-resnet.toml "${CONV_CNN[@]}" --set train.micro_batch=125
  for d in 0 4 32; do
    job conv-cnn-d$d 2 configs/fashion-resnet.toml "${CONV_CNN[@]}" --set train.micro_batch=125 --set hetero.sync='"wsp"' \
      --set hetero.staleness=$d --set 'hetero.virtual_workers=["0", "1"]' --set optim.lr=0.1
  done
fi

fi  # conv

fi  # REPORT_ONLY
[ -f "$OUT/cluster-2fast-2slow.toml" ] || { echo "error: no runs in $OUT" >&2; exit 1; }
[ -f "$OUT/conv-cnn-d32.time" ] || CNN=0

python3 - "$OUT" "$REPS" "$CNN" "$JITTER_REPS" <<'PY'
import glob, json, os, re, statistics, sys
out, reps, cnn, jreps = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1", int(sys.argv[4])
med = statistics.median

def vws(name):
    """The last metrics record of each VW of run `name` (VW 0's metrics.jsonl, then metrics-vw<k>)."""
    d = f"{out}/{name}"
    files = [f"{d}/metrics.jsonl"] + sorted(glob.glob(f"{d}/metrics-vw*.jsonl"))
    return [[json.loads(l) for l in open(f)] for f in files]

def cmd(name):
    c = open(f"{out}/{name}.cmd").read().strip()
    return re.sub(r"--set run.dir=\S+ ?", "", c)

def cores(name):
    """CPU seconds of the ranks (user + system) / wall seconds of the run, startup included."""
    wall, user, system = map(float, open(f"{out}/{name}.time").read().split())
    return (user + system) / wall

def rates(name):
    return [v[-1]["minibatches_per_s"] for v in vws(name)]

print("### 1. Allocation: NP against ED (2 VWs × 2 stages, WSP D = 0)\n")
print("| policy | virtual workers (ranks:layers) | slowdown per rank | job minibatches/s | VW 0 | VW 1 | "
      "VW 0 waiting for the server (% of its time) | cores busy | runs |")
print("|---|---|---|---|---|---|---|---|---|")
job = {}
for p in ["np", "ed"]:
    vw, slow = open(f"{out}/plan-{p}.sets").read().split("\n")[:2]
    runs = [f"alloc-{p}-{r}" for r in range(1, reps + 1)]
    rs = [rates(r) for r in runs]
    job[p] = med([sum(r) for r in rs])
    waits = [vws(r)[0][-1]["wait_total_s"] * vws(r)[0][-1]["minibatches_per_s"] / vws(r)[0][-1]["step"] for r in runs]
    print(f"| {p.upper()} | {', '.join(f'`{v}`' for v in json.loads(vw))} | {slow} | **{job[p]:.3f}** | {med([r[0] for r in rs]):.3f} | "
          f"{med([r[1] for r in rs]):.3f} | {100 * med(waits):.0f}% | {med([cores(r) for r in runs]):.2f} | "
          f"{', '.join(f'{sum(r):.3f}' for r in rs)} |")
layer_s = [(l["forward_ms"] + l["backward_ms"]) / 1e3 for l in json.load(open(f"{out}/profile.json"))["layers"]]
ideal = {}
for p in ["np", "ed"]:
    vw, slow = open(f"{out}/plan-{p}.sets").read().split("\n")[:2]
    slow = json.loads(slow)
    pace = []
    for v in json.loads(vw):
        stages = [re.match(r"\s*(\d+):(\d+)-(\d+)", st).groups() for st in v.split(",")]
        pace.append(1 / max(slow[int(r)] * sum(layer_s[int(a):int(b)]) for r, a, b in stages))
    ideal[p] = len(pace) * min(pace)
print(f"\nFrom the layers' times measured on one thread (`baton profile`, forward + backward "
      f"{1e3 * sum(layer_s):.0f} ms a minibatch, the head {100 * layer_s[-1] / sum(layer_s):.0f}% of it): "
      f"NP {ideal['np']:.3f}, ED {ideal['ed']:.3f} minibatches/s, ED / NP = {ideal['ed'] / ideal['np']:.2f} "
      f"without contention, pipeline bubbles or waiting.")
paired = [sum(rates(f"alloc-ed-{r}")) / sum(rates(f"alloc-np-{r}")) for r in range(1, reps + 1)]
print(f"\nED / NP = **{job['ed'] / job['np']:.2f}** (ratio of the medians; per repetition "
      f"{', '.join(f'{x:.2f}' for x in paired)}; goal ≥ 1.3)\n")
print("```\n" + cmd("alloc-np-1") + "\n" + cmd("alloc-ed-1") + "\n```\n")

jn = len(vws("jitter-nm1-d4-1"))
print(f"### 2. Staleness absorbs jitter ({jn} VWs of one rank, each a device 6× slower than a core, compute × a "
      "seeded factor in [1, 2] per minibatch)\n")
print("| sync | Nm | job minibatches/s | VW 0 | VW 1 | ÷ D = 0 (same Nm, same repetition) | "
      "waiting for the server, s (mean per VW) | idle, s (mean per VW) | idle / waiting | idle, % of the run | cores busy | runs |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
res = {}
for prefix, key, nm, label in [("jitter", "d4", 1, "WSP D = 4"), ("jitter", "d0", 1, "WSP D = 0"),
                               ("jitter", "ar", 1, "allreduce"), ("jitter", "d4", 4, "WSP D = 4"),
                               ("jitter", "d0", 4, "WSP D = 0"), ("steady", "d4", 1, "no jitter: WSP D = 4"),
                               ("steady", "d0", 1, "no jitter: WSP D = 0")]:
    runs = [f"{prefix}-nm{nm}-{key}-{r}" for r in range(1, jreps + 1)]
    rs = [rates(r) for r in runs]
    paired = [sum(rates(r)) / sum(rates(r.replace(f"-{key}-", "-d0-"))) for r in runs]
    wait = med([statistics.mean(v[-1]["wait_total_s"] for v in vws(r)) for r in runs])
    idle = med([statistics.mean(v[-1]["idle_total_s"] for v in vws(r)) for r in runs])
    # the share of each VW's loop spent blocked: less sensitive to how fast the shared cores ran
    share = med([statistics.mean(v[-1]["idle_total_s"] * v[-1]["minibatches_per_s"] / v[-1]["step"] for v in vws(r))
                 for r in runs])
    row = (med([sum(r) for r in rs]), wait, idle, med(paired), share)
    if prefix == "jitter":
        res[key, nm] = row
    else:
        res["steady", key] = row
    print(f"| {label} | {nm} | **{row[0]:.3f}** | {med([r[0] for r in rs]):.3f} | {med([r[1] for r in rs]):.3f} | "
          f"{med(paired):.2f} | {wait:.2f} | {idle:.2f} | {100 * idle / max(wait, 1e-9):.0f}% | {100 * share:.1f}% | "
          f"{med([cores(r) for r in runs]):.2f} | {', '.join(f'{sum(r):.3f}' for r in rs)} |")
for nm in (1, 4):
    print(f"\nNm = {nm}: D = 4 / D = 0 = **{res['d4', nm][3]:.2f}** (median of the per-repetition ratios; goal ≥ 1.15); "
          f"D = 4 waits {100 * res['d4', nm][1] / max(res['d0', nm][1], 1e-9):.0f}% as long as D = 0 (paper: 62%); "
          f"idle / waiting {100 * res['d4', nm][2] / max(res['d4', nm][1], 1e-9):.0f}% (D = 4), "
          f"{100 * res['d0', nm][2] / max(res['d0', nm][1], 1e-9):.0f}% (D = 0) (paper: 18%); blocked "
          f"{100 * res['d0', nm][4]:.1f}% of the run at D = 0, {100 * res['d4', nm][4]:.1f}% at D = 4", end="")
print(f"; allreduce / D = 0 (Nm = 1) = {res['ar', 1][3]:.2f}")
print(f"\nWithout jitter D = 4 / D = 0 = {res['steady', 'd4'][3]:.2f} (Nm = 1): running ahead alone; the jitter's own part "
      f"of the gain is {res['d4', 1][3]:.2f} / {res['steady', 'd4'][3]:.2f} = {res['d4', 1][3] / res['steady', 'd4'][3]:.2f} "
      f"(in expectation E[max of {jn} factors] / E[factor] = {1 + jn / (jn + 1):.3f} / 1.5 = "
      f"{(1 + jn / (jn + 1)) / 1.5:.2f} for a lockstep D = 0)\n")
print("```\n" + "\n".join(cmd(f"{p}-nm{nm}-{k}-1") for p, nm, k in [("jitter", 1, "d4"), ("jitter", 1, "d0"),
      ("jitter", 1, "ar"), ("jitter", 4, "d4"), ("jitter", 4, "d0"), ("steady", 1, "d4"), ("steady", 1, "d0")])
      + "\n```\n")

def conv_table(prefix, title, unit):
    print(f"### 3. Convergence: {title}\n")
    print(f"| run | lr | training loss, mean of the last 10 minibatches | validation loss at the end | "
          f"largest observed staleness | minibatches/s (job) |")
    print("|---|---|---|---|---|---|")
    for key, label in [("dp", "data parallelism (dp = 2)"), ("d0", "WSP D = 0"), ("d4", "WSP D = 4"), ("d32", "WSP D = 32")]:
        name = f"{prefix}-{key}"
        vs = vws(name)
        if key == "dp":
            vs = vs[:1]
        last10 = statistics.mean(statistics.mean(r["loss"] for r in v[-10:]) for v in vs)
        val = statistics.mean(v[-1]["val_loss"] for v in vs)
        stale = max(r.get("staleness") or 0 for v in vs for r in v)
        c = open(f"{out}/{name}.cmd").read()
        m = re.search(r"optim.lr=(\S+)", c)
        rate = sum(v[-1].get("minibatches_per_s") or 0 for v in vs) if key != "dp" else None
        print(f"| {label} | {m.group(1) if m else 'config'} | {last10:.4f} | {val:.4f} | "
              f"{stale if key != 'dp' else '–'} | {f'{rate:.2f}' if rate else '–'} |")
    print("\n```\n" + cmd(f"{prefix}-dp") + "\n" + cmd(f"{prefix}-d4") + "\n```\n")

if os.path.exists(f"{out}/conv-gpt-dp.cmd"):  # a SECTIONS run without conv leaves none
    conv_table("conv-gpt", "the quickstart GPT, 80 minibatches of 8 sequences (each VW 4)", "")
if cnn:
    conv_table("conv-cnn", "the Fashion-MNIST ResNet-18, 80 minibatches of 250 images (each VW 125)", "")
PY
