#!/usr/bin/env bash
# launch/hetpipe-regime.sh: issue 23 item 6 — measurements in HetPipe's own regime, virtual workers
# (VWs) that are pipelines with Nm >= 2 minibatches in flight, on CPU ranks standing for devices
# (docs/hetpipe.md "Measured in HetPipe's regime"). Every figure is a `baton train` of the
# quickstart GPT (6 layers: embedding, 4 blocks, head) under `mpirun --oversubscribe`, one OpenMP
# thread per rank, each rank an emulated device hetero.slowdown times slower than a core (its
# compute is stretched by sleeping, so ranks sharing the 2 cores barely slow each other). Each
# throughput configuration runs REPS times (default 3), the configurations alternating within a
# repetition; tables give the median and the spread (min–max). Sections (SECTIONS, default all):
#   fig3   Figure 3's shape: one VW of 4 stages, minibatches/s for Nm = 1 … 6 (WSP, one VW, D = 0);
#   alloc  NP vs ED vs HD: 4 ranks standing for 2 fast + 2 slow GPUs, 2 VWs of 2 stages partitioned
#          by `baton plan --algorithm hetpipe --policy P` on a 2 + 2 cluster file, Nm = 2, D = 0;
#   waits  the alloc section's NP and ED with waiting ranks polling (BATON_WAIT_POLICY=spin) against
#          sleeping (sleep, what emulated devices get by default), alternating (needs alloc's plans);
#   jitter D = 4 vs D = 0 with 4 VWs of 2 stages (8 ranks), Nm = 4, JITTER_STEPS minibatches each,
#          every rank's compute × a seeded factor (JITTERS: its range, how many minibatches it lasts,
#          whether each rank or each VW draws it, the share of episodes that straggle):
#          minibatches/s, waiting for the server, idle, and what WSP's rule alone allows for the same
#          draws (launch/wsp-timing-model.py on a profile of the model);
#   place  ED-local vs default placement of the server's shards (2 VWs of 2 stages, stage s of each
#          VW on "node" s): the bytes each wave moves within and across nodes (from the runs' WSP
#          traces) and their time on the paper's network (56 Gb/s InfiniBand between nodes, PCIe 3
#          x16 inside one), beside the measured minibatches/s (shared memory: no network here);
#   conv   convergence: 40 minibatches of 8 sequences, 2 VWs of 2 stages at lr / 2 with D = 0, 4, 32
#          against data parallelism dp = 2 × pp = 2 (pipedream, vertical sync) at lr; seeds 1, 2, 3.
# Usage: launch/hetpipe-regime.sh [--report]   (--report: print the tables from the runs in $OUT)
# Environment: BATON (default build/baton), REPS (default 3), OUT (default runs/hetpipe-regime),
# SECTIONS (default "fig3 alloc waits jitter place conv"), JITTERS (default "1:1 1:8 2:8": the
# jitter section's AMPLITUDE:SPAN[:vw][:pQ] variants, :vw = hetero.jitter_scope "vw", :pQ =
# hetero.jitter_probability Q), JITTER_STEPS
# (default 48). About 35 minutes on the 2-core development VM.
set -euo pipefail
cd "$(dirname "$0")/.."
BATON=${BATON:-build/baton}
REPS=${REPS:-3}
OUT=${OUT:-runs/hetpipe-regime}
SECTIONS=${SECTIONS:-fig3 alloc waits jitter place conv}
JITTERS=${JITTERS:-1:1 1:8 2:8}
JITTER_STEPS=${JITTER_STEPS:-48}
REPORT_ONLY=0
for arg in "$@"; do
  case $arg in
    --report) REPORT_ONLY=1 ;;
    *) echo "usage: $0 [--report]" >&2; exit 2 ;;
  esac
done
source launch/lib-hetpipe-runs.sh
hp_require

if [ "$REPORT_ONLY" = 0 ]; then
mkdir -p "$OUT"
ROOT=()
if [ "$(id -u)" -eq 0 ]; then ROOT=(--allow-run-as-root); fi
# job NAME RANKS [--set ...]: one `baton train configs/quickstart.toml` (lib-hetpipe-runs.sh hp_job).
job() {
  local name=$1 n=$2
  shift 2
  hp_job "$name" "$n" configs/quickstart.toml "$@"
}
# Throughput runs measure the training loop only: one evaluation batch at the end, no checkpoints.
QUIET=(--set train.eval_every=0 --set train.eval_steps=1 --set train.log_every=1 --set checkpoint.every=0
       --set hetero.sync='"wsp"')

if section fig3; then
  rm -rf "$OUT"/fig3-*
  # One VW of 4 stages (balanced by the layers' measured times: the head is the heaviest layer).
  FIG3=(--set 'hetero.virtual_workers=["0:0-2, 1:2-4, 2:4-5, 3:5-6"]' --set 'hetero.slowdown=[3,3,3,3]'
        --set train.micro_batch=4 --set train.global_batch=4 --set hetero.staleness=0)
  for rep in $(seq 1 "$REPS"); do
    # train.steps a whole number of waves: the multiple of Nm from 18 up.
    for nm in 1 2 3 4 5 6; do
      job fig3-nm$nm-$rep 4 "${QUIET[@]}" "${FIG3[@]}" --set hetero.nm=$nm --set train.steps=$(((18 + nm - 1) / nm * nm))
    done
  done
fi

if section alloc; then
  rm -rf "$OUT"/alloc-* "$OUT"/plan-*
  hp_cluster_2fast_2slow "$OUT/cluster-2fast-2slow.toml"
  # The planner's VWs; on the CPU the devices become slowdowns 2 (fast) and 4 (slow), the table's
  # fp32 ratio rounded (2.5) and every rank slowed so that the 4 ranks fit the 2 cores.
  for policy in np ed hd; do
    "$BATON" plan configs/quickstart.toml --set model.vocab_size=8192 --set train.micro_batch=4 \
      --set train.global_batch=4 --cluster "$OUT/cluster-2fast-2slow.toml" --algorithm hetpipe \
      --policy $policy --nm 2 --format json > "$OUT/plan-$policy.json"
    hp_plan_sets "$OUT/plan-$policy.json" 2 4 > "$OUT/plan-$policy.sets"
  done
  for rep in $(seq 1 "$REPS"); do
    for policy in np ed hd; do
      { read -r vws; read -r slowdown; } < "$OUT/plan-$policy.sets"
      job alloc-$policy-$rep 4 "${QUIET[@]}" --set hetero.staleness=0 --set hetero.nm=2 --set train.micro_batch=4 \
        --set train.global_batch=8 --set train.steps=16 --set "hetero.virtual_workers=$vws" --set "hetero.slowdown=$slowdown"
    done
  done
fi

if section waits; then
  rm -rf "$OUT"/waits-*
  # The allocation section's NP and ED runs with the wait policy forced (dist/comm.h): polling
  # MPI waits against sleeping ones, alternating.
  for rep in $(seq 1 "$REPS"); do
    for pol in spin sleep; do
      for policy in np ed; do
        { read -r vws; read -r slowdown; } < "$OUT/plan-$policy.sets"
        BATON_WAIT_POLICY=$pol job waits-$pol-$policy-$rep 4 "${QUIET[@]}" --set hetero.staleness=0 --set hetero.nm=2 \
          --set train.micro_batch=4 --set train.global_batch=8 --set train.steps=16 --set "hetero.virtual_workers=$vws" \
          --set "hetero.slowdown=$slowdown"
      done
    done
  done
fi

if section jitter; then
  rm -rf "$OUT"/jitter-*
  JIT=(--set 'hetero.virtual_workers=["0,1", "2,3", "4,5", "6,7"]' --set "hetero.slowdown=[6,6,6,6,6,6,6,6]"
       --set train.micro_batch=2 --set train.global_batch=8 --set train.steps=$JITTER_STEPS --set hetero.nm=4
       --set optim.lr=1e-3)  # the quickstart's lr diverges under D = 4's staleness within 48 minibatches
  # JITTERS: "AMPLITUDE:SPAN[:vw][:pQ]" variants — each rank's compute × a seeded factor in
  # [1, 1 + AMPLITUDE] that holds SPAN minibatches: 1 = a new draw every minibatch (a wave's 4
  # draws average out), 8 = straggler episodes of two waves; :vw = one draw for all of a VW's
  # stages (hetero.jitter_scope = "vw": the VW straggles as a whole); :pQ = only a share Q of the
  # episodes straggle, the others run at full speed (hetero.jitter_probability = Q).
  for rep in $(seq 1 "$REPS"); do
    for v in $JITTERS; do
      IFS=: read -r amp span rest <<<"$v"
      scope="" prob=""
      for t in ${rest//:/ }; do
        case $t in
          vw) scope=vw ;;
          p*) prob=${t#p} ;;
          *) echo "JITTERS: '$v' is not AMPLITUDE:SPAN[:vw][:pQ]" >&2; exit 2 ;;
        esac
      done
      for d in 4 0; do
        job jitter-a$amp-s$span${scope:+-$scope}${prob:+-p$prob}-d$d-$rep 8 "${QUIET[@]}" "${JIT[@]}" \
          --set hetero.staleness=$d --set hetero.jitter=$amp --set hetero.jitter_span=$span \
          ${scope:+--set hetero.jitter_scope=\"$scope\"} ${prob:+--set hetero.jitter_probability=$prob}
      done
    done
  done
  # What WSP's rule alone allows for the same draws (launch/wsp-timing-model.py) takes the stages'
  # compute from a profile of the model at the runs' micro-batch on one thread.
  OMP_NUM_THREADS=1 "$BATON" profile configs/quickstart.toml --set train.micro_batch=2 \
    --out "$OUT/jitter-profile.json" > "$OUT/jitter-profile.log"
fi

if section place; then
  rm -rf "$OUT"/place-*
  # ED with stage s of every VW on node s (nodes: ranks 0, 1 and ranks 2, 3): VW 0 = ranks 0 and 2,
  # VW 1 = ranks 1 and 3, both cut after the 4th layer.
  PLACE=(--set 'hetero.virtual_workers=["0:0-4, 2:4-6", "1:0-4, 3:4-6"]' --set 'hetero.slowdown=[3,3,3,3]'
         --set train.micro_batch=4 --set train.global_batch=8 --set train.steps=16 --set hetero.nm=2
         --set hetero.staleness=0 --set run.trace=true)
  for rep in $(seq 1 "$REPS"); do
    for placement in default local; do
      job place-$placement-$rep 4 "${QUIET[@]}" "${PLACE[@]}" --set hetero.placement="\"$placement\""
    done
  done
fi

if section conv; then
  rm -rf "$OUT"/conv-*
  CONV=(--set train.steps=40 --set train.micro_batch=4 --set train.global_batch=8 --set optim.warmup_steps=8
        --set train.log_every=1 --set train.eval_every=0 --set train.eval_steps=8 --set checkpoint.every=0)
  for seed in 1 2 3; do
    job conv-dp-s$seed 4 "${CONV[@]}" --set train.seed=$seed --set parallel.pp=2 --set parallel.schedule='"pipedream"' \
      --set parallel.vertical_sync=true --set train.micro_batch=4
    for d in 0 4 32; do
      job conv-d$d-s$seed 4 "${CONV[@]}" --set train.seed=$seed --set hetero.sync='"wsp"' --set hetero.staleness=$d \
        --set hetero.nm=2 --set 'hetero.virtual_workers=["0,1", "2,3"]' --set optim.lr=1e-3 --set optim.min_lr=1e-4
    done
  done
fi
fi  # REPORT_ONLY

python3 - "$OUT" "$SECTIONS" <<'PY'
import glob, json, os, re, statistics, subprocess, sys, tomllib
out, sections = sys.argv[1], sys.argv[2].split()
med = statistics.median

def vws(name):
    d = f"{out}/{name}"
    files = [f"{d}/metrics.jsonl"] + sorted(glob.glob(f"{d}/metrics-vw*.jsonl"), key=lambda f: int(re.search(r"vw(\d+)", f).group(1)))
    return [[json.loads(l) for l in open(f)] for f in files]

def job_rate(name):
    return sum(v[-1]["minibatches_per_s"] for v in vws(name))

def runs(prefix):
    return sorted(glob.glob(f"{out}/{prefix}-[0-9]*.cmd"))

def spread(xs, fmt="{:.3f}"):
    return f"{fmt.format(med(xs))} ({fmt.format(min(xs))}–{fmt.format(max(xs))}, n = {len(xs)})"

def cmd(name):
    return re.sub(r"--set run.dir=\S+ ?", "", open(f"{out}/{name}.cmd").read().strip())

def have(prefix):
    return bool(glob.glob(f"{out}/{prefix}*.cmd"))

if "fig3" in sections and have("fig3-"):
    print("### Figure 3's shape: one VW of 4 stages, minibatches/s against Nm\n")
    print("| Nm | minibatches/s, median (min–max, n) | ÷ Nm = 1 |")
    print("|---|---|---|")
    base = None
    for nm in range(1, 7):
        xs = [job_rate(os.path.basename(f)[:-4]) for f in runs(f"fig3-nm{nm}")]
        if not xs:
            continue
        base = base or med(xs)
        print(f"| {nm} | {spread(xs)} | {med(xs) / base:.2f} |")
    print("\n```\n" + cmd("fig3-nm4-1") + "\n```\n")

if "alloc" in sections and have("alloc-"):
    print("### NP, ED and HD with pipelined VWs (2 VWs × 2 stages on 2 fast + 2 slow devices, Nm = 2, D = 0)\n")
    print("| policy | virtual workers (ranks:layers) | slowdown per rank | job minibatches/s, median (min–max, n) | ÷ NP (per repetition) |")
    print("|---|---|---|---|---|")
    reps = sorted({int(re.search(r"-(\d+)\.cmd$", f).group(1)) for f in runs("alloc-np")})
    for p in ("np", "ed", "hd"):
        vw, slow = open(f"{out}/plan-{p}.sets").read().split("\n")[:2]
        xs = [job_rate(f"alloc-{p}-{r}") for r in reps]
        ratio = [job_rate(f"alloc-{p}-{r}") / job_rate(f"alloc-np-{r}") for r in reps]
        print(f"| {p.upper()} | {', '.join(f'`{v}`' for v in json.loads(vw))} | {slow} | {spread(xs)} | "
              f"{spread(ratio, '{:.2f}')} |")
    print("\n```\n" + cmd("alloc-np-1") + "\n" + cmd("alloc-ed-1") + "\n" + cmd("alloc-hd-1") + "\n```\n")

if "waits" in sections and have("waits-"):
    print("### Polling against sleeping waits (the allocation runs, BATON_WAIT_POLICY forced)\n")
    print("| waits | NP job minibatches/s | ED job minibatches/s | ED ÷ NP (per repetition) | system seconds per run |")
    print("|---|---|---|---|---|")
    reps = sorted({int(re.search(r"-(\d+)\.cmd$", f).group(1)) for f in runs("waits-spin-np")})
    for pol in ("spin", "sleep"):
        np_ = [job_rate(f"waits-{pol}-np-{r}") for r in reps]
        ed = [job_rate(f"waits-{pol}-ed-{r}") for r in reps]
        sys_s = [float(open(f"{out}/waits-{pol}-{p}-{r}.time").read().split()[2]) for p in ("np", "ed") for r in reps]
        print(f"| {pol} | {spread(np_)} | {spread(ed)} | {spread([e / n for e, n in zip(ed, np_)], '{:.2f}')} | "
              f"{spread(sys_s, '{:.1f}')} |")
    print("\n```\nBATON_WAIT_POLICY=spin " + cmd("waits-spin-np-1") + "\nBATON_WAIT_POLICY=sleep " + cmd("waits-sleep-ed-1") + "\n```\n")

if "jitter" in sections and have("jitter-"):
    print("### D = 4 against D = 0 with pipelined VWs under jitter (4 VWs × 2 stages, Nm = 4)\n")
    print("| compute × | factor lasts | drawn per | episodes that straggle | minibatches | D | job minibatches/s, median (min–max, n) | "
          "÷ D = 0 (per repetition) | ÷ D = 0 the rule allows | waiting for the server, s per VW | idle, s per VW | idle / waiting |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    pattern = r"jitter-(a([\d.]+)-s(\d+)(-vw)?(?:-p([\d.]+))?)-d0-"
    found = {re.search(pattern, f).groups() for f in glob.glob(f"{out}/jitter-a*-d0-*.cmd")}
    variants = [g[0] for g in sorted(found, key=lambda g: (g[4] is not None, bool(g[3]), int(g[2]), float(g[1])))]
    seed = tomllib.load(open("configs/quickstart.toml", "rb"))["train"]["seed"]
    for v in variants:
        _, amp, span, vw_scope, prob = re.search(pattern, f"jitter-{v}-d0-").groups()
        steps = re.search(r"train.steps=(\d+)", cmd(f"jitter-{v}-d0-1")).group(1)
        reps = sorted({int(re.search(r"-(\d+)\.cmd$", f).group(1)) for f in runs(f"jitter-{v}-d0")})
        lasts = "1 minibatch" if span == "1" else f"{span} minibatches"
        # The quickstart GPT's even split over 2 stages (GptBuilder::default_stages): layers 0-3, 3-6.
        allows = {4: "–", 0: "–"}  # runs from before the profile was taken: no model column
        if os.path.exists(f"{out}/jitter-profile.json"):
            model = subprocess.run([sys.executable, "launch/wsp-timing-model.py", "--profile", f"{out}/jitter-profile.json",
                                    "--boundaries", "0,3,6", "--vws", "4", "--nm", "4", "--minibatches", steps,
                                    "--slowdown", "6", "--jitter", amp, "--span", span, "--scope", "vw" if vw_scope else "rank",
                                    "--probability", prob or "1", "--seed", str(seed), "--staleness", "4", "0", "--json"],
                                   check=True, capture_output=True, text=True).stdout.splitlines()
            allows = {r["staleness"]: f'{r["ratio_to_last"]:.2f}' for r in map(json.loads, model)}
        for d in (4, 0):
            names = [f"jitter-{v}-d{d}-{r}" for r in reps]
            xs = [job_rate(n) for n in names]
            ratio = [job_rate(f"jitter-{v}-d{d}-{r}") / job_rate(f"jitter-{v}-d0-{r}") for r in reps]
            wait = [statistics.mean(w[-1]["wait_total_s"] for w in vws(n)) for n in names]
            idle = [statistics.mean(w[-1]["idle_total_s"] for w in vws(n)) for n in names]
            share = [i / w if w > 0 else 0 for i, w in zip(idle, wait)]
            print(f"| [1, {1 + float(amp):g}] | {lasts} | {'VW' if vw_scope else 'rank'} | {prob or 1} | {steps} | {d} | {spread(xs)} | "
                  f"{spread(ratio, '{:.2f}')} | {allows[d]} | {spread(wait, '{:.2f}')} | {spread(idle, '{:.2f}')} | "
                  f"{spread([100 * s for s in share], '{:.0f}%')} |")
    print("\n```\n" + "\n".join(cmd(f"jitter-{v}-d{d}-1") for v in variants for d in (4, 0)) + "\n```\n")

if "place" in sections and have("place-"):
    node = {0: 0, 1: 0, 2: 1, 3: 1}  # ranks 0, 1 on node 0; 2, 3 on node 1
    stage_rank = {(0, 0): 0, (0, 1): 2, (1, 0): 1, (1, 1): 3}
    INTER, INTRA = 7e9, 15.75e9  # the paper's cluster: 56 Gb/s InfiniBand, PCIe 3 x16
    print("### ED-local against the default placement of the server (2 VWs × 2 stages, stage s of each VW on node s)\n")
    print("| placement | bytes per wave within nodes | across nodes | time per wave on the paper's network | "
          "job minibatches/s, median (min–max, n) |")
    print("|---|---|---|---|---|")
    reps = sorted({int(re.search(r"-(\d+)\.cmd$", f).group(1)) for f in runs("place-default")})
    def wire_bytes(name):
        intra = inter = 0
        waves = None
        for f in glob.glob(f"{out}/{name}/wsp-trace-vw*-stage*.jsonl"):
            vw, stage = map(int, re.search(r"vw(\d+)-stage(\d+)", f).groups())
            me = stage_rank[(vw, stage)]
            t = [json.loads(l) for l in open(f) if '"traffic"' in l][-1]
            waves = t["waves"]
            sent = [(shard, b) for shard, b in enumerate(t["server_push"])] + \
                   [(shard, b) for shard, b in enumerate(t["server_pull"])] + \
                   [(stage_rank[(vw, s)], b) for s, b in enumerate(t["vw_sent"])]
            for peer, b in sent:
                if peer == me:
                    continue  # a rank's own shard: no wire
                if node[peer] == node[me]:
                    intra += b
                else:
                    inter += b
        assert waves, f"no WSP traffic record in {out}/{name}"
        return intra / waves, inter / waves
    for placement in ("default", "local"):
        # Which rank folds pending updates into a shard depends on the run's timing, so the bytes
        # within a node (a fold into one's own shard crosses no wire) vary between repetitions;
        # the bytes across nodes do not.
        per_rep = [wire_bytes(f"place-{placement}-{r}") for r in reps]
        intra_mb = [b[0] / 1e6 for b in per_rep]
        inter_mb = [b[1] / 1e6 for b in per_rep]
        ms = [1e3 * (b[0] / INTRA + b[1] / INTER) for b in per_rep]
        xs = [job_rate(f"place-{placement}-{r}") for r in reps]
        print(f"| {placement} | {spread(intra_mb, '{:.2f}')} MB | {spread(inter_mb, '{:.2f}')} MB | "
              f"{spread(ms, '{:.2f}')} ms | {spread(xs)} |")
    print("\nBytes: what each rank's WSP traffic record (`run.trace`) says it moved — pushes, pulls and folds to "
          "and from every shard but its own, a follower's ũ parts to its leader and a leader's pull parts to its "
          "followers — summed over the ranks and divided by the waves (within a node: which rank folds pending updates into a shard, its own or another, follows the run's timing). Time: within-node bytes at 15.75 GB/s plus "
          "across-node bytes at 7 GB/s (no overlap, no latency).\n")
    print("```\n" + cmd("place-default-1") + "\n" + cmd("place-local-1") + "\n```\n")

if "conv" in sections and have("conv-"):
    print("### Convergence with pipelined VWs: 40 minibatches of 8 sequences, seeds 1–3\n")
    print("| run | lr | training loss, mean of the last 8 minibatches, per seed | median | validation loss at the end, per seed | largest staleness |")
    print("|---|---|---|---|---|---|")
    for key, label in (("dp", "dp 2 × pp 2 (pipedream, vertical sync)"), ("d0", "WSP D = 0"), ("d4", "WSP D = 4"),
                       ("d32", "WSP D = 32")):
        last, val, stale = [], [], 0
        for seed in (1, 2, 3):
            vs = vws(f"conv-{key}-s{seed}")
            if key == "dp":
                vs = vs[:1]
            last.append(statistics.mean(statistics.mean(r["loss"] for r in v[-8:]) for v in vs))
            val.append(statistics.mean(v[-1]["val_loss"] for v in vs))
            stale = max([stale] + [r.get("staleness") or 0 for v in vs for r in v])
        m = re.search(r"optim.lr=(\S+)", open(f"{out}/conv-{key}-s1.cmd").read())
        print(f"| {label} | {m.group(1) if m else 'config (2e-3)'} | {', '.join(f'{x:.4f}' for x in last)} | "
              f"{med(last):.4f} | {', '.join(f'{x:.4f}' for x in val)} | {stale if key != 'dp' else '–'} |")
    print("\n```\n" + cmd("conv-dp-s1") + "\n" + cmd("conv-d4-s1") + "\n```\n")
PY
