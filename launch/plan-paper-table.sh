#!/usr/bin/env bash
# launch/plan-paper-table.sh: the planner's paper check on PTD-P Table 1 as the two markdown tables
# of docs/planner.md, "Paper check" (they are this script's output, pasted; the e2e
# test tests/e2e/test_plan_cli.sh fails when they differ). For each of the ten A100 rows
# (configs/ptdp/gpt-*.toml on configs/clusters/selene.toml, arXiv 2104.04473 Table 1):
#   1. `--evaluate`: the paper's layout (the config's: its tp x pp, vp and micro-batch 1 being our
#      assumptions) predicted against the published TFLOP/s per GPU (Eq. 4.2 count: hw_tflops);
#   2. the search within the paper's space, `--schedules 1f1b,interleaved --recompute full`
#      (PTD-P's schedules and its full recomputation; micro-batch free, the paper's table does not
#      fix it), its pick against the paper's layout: it agrees when it picks the paper's tp x pp
#      or predicts the paper's layout within 3% of its pick's step time;
#   3. the unrestricted search, `--schedules all --recompute none,selective,full` (2bw's
#      asynchronous updates and selective recomputation included: not the paper's semantics or
#      its 2021 options), its pick and predicted speed-up over the paper's layout.
# Usage: launch/plan-paper-table.sh [evaluate|search|both]   (default both)
# Environment: BATON (default build/baton).
set -euo pipefail
cd "$(dirname "$0")/.."
BATON=${BATON:-build/baton}
WHICH=${1:-both}
case "$WHICH" in evaluate | search | both) ;; *)
  echo "error: unknown table '$WHICH'" >&2
  echo "hint: use evaluate, search or both" >&2
  exit 1 ;;
esac
[ -x "$BATON" ] || { echo "error: no baton binary at $BATON" >&2; echo "hint: build it (cmake --build build --target baton) or set BATON" >&2; exit 1; }

# name GPUs published-TFLOP/s (PTD-P Table 1; shared/papers/README.md)
ROWS="1.7b 32 137
3.6b 64 138
7.5b 128 142
18.4b 256 135
39.1b 512 138
76.1b 1024 140
145.6b 1536 148
310.1b 1920 155
529.6b 2520 163
1008b 3072 163"

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
while read -r name gpus published; do
  cfg=configs/ptdp/gpt-$name.toml
  plan=("$BATON" plan "$cfg" --cluster configs/clusters/selene.toml --gpus "$gpus" --format json)
  "${plan[@]}" --evaluate > "$TMP/$name.evaluate.json"
  if [ "$WHICH" != evaluate ]; then
    "${plan[@]}" --top 1 --schedules 1f1b,interleaved --recompute full > "$TMP/$name.paper.json"
    "${plan[@]}" --top 1 --schedules all --recompute none,selective,full > "$TMP/$name.all.json"
  fi
  echo "$name $gpus $published" >> "$TMP/rows.txt"
done <<< "$ROWS"

python3 - "$TMP" "$WHICH" <<'PY'
import json, sys
tmp, which = sys.argv[1], sys.argv[2]
rows = [line.split() for line in open(f"{tmp}/rows.txt")]
load = lambda name, kind: json.load(open(f"{tmp}/{name}.{kind}.json"))["candidates"][0]
label = lambda n: n[:-1] + "B"  # 1.7b -> 1.7B
def layout(c, full=True):
    s = f"{c['tp']} × {c['pp']}"
    if c["vp"] > 1: s += f" (vp {c['vp']})"
    if full: s += f", mb {c['micro_batch']}, {c['schedule']}, {c['recompute']}"
    return s
def pct(x): return f"{100 * x:+.1f}%".replace("-", "−")

if which in ("evaluate", "both"):
    print("| model | tp × pp (vp) | GPUs | batch | published TFLOP/s | predicted | error |")
    print("|---|---|---|---|---|---|---|")
    within = 0
    for name, gpus, pub in rows:
        e = load(name, "evaluate")
        err = e["hw_tflops_per_gpu"] / float(pub) - 1
        within += abs(err) <= 0.07
        batch = round(e["tokens_per_s"] * e["step_time_s"] / 2048)
        print(f"| {label(name)} | {layout(e, False)} | {gpus} | {batch} | {pub} | "
              f"{e['hw_tflops_per_gpu']:.1f} | {pct(err)} |")
    print(f"\n{within} of {len(rows)} within ±7%.")
if which == "both": print()
if which in ("search", "both"):
    print("| model | paper's layout: step s | paper-space pick | step s | paper's layout vs pick | agrees |"
          " unrestricted pick | step s | speed-up over the paper's layout |")
    print("|---|---|---|---|---|---|---|---|---|")
    agree = 0
    for name, gpus, pub in rows:
        e, p, a = load(name, "evaluate"), load(name, "paper"), load(name, "all")
        gap = e["step_time_s"] / p["step_time_s"] - 1
        ok = (p["tp"], p["pp"]) == (e["tp"], e["pp"]) or gap <= 0.03
        agree += ok
        print(f"| {label(name)} | {layout(e, False)}: {e['step_time_s']:.2f} | {layout(p, False)}, "
              f"mb {p['micro_batch']} | {p['step_time_s']:.2f} | {pct(gap)} | {'yes' if ok else 'no'} | "
              f"{layout(a)} | {a['step_time_s']:.2f} | {e['step_time_s'] / a['step_time_s']:.2f}× |")
    print(f"\n{agree} of {len(rows)} agree (the paper's tp × pp, or the paper's layout within 3% of the pick).")
PY
