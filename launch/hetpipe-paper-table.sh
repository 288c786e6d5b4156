#!/usr/bin/env bash
# launch/hetpipe-paper-table.sh: the HetPipe planner's predictions on HetPipe's cluster next to the
# paper's figures (Park et al., ATC'20; notes-hetpipe-madpipe §A.6–A.8), as the markdown tables of
# docs/hetpipe.md ("The planner against the paper"). VGG-19 and ResNet-152 at ImageNet's shape,
# minibatches of 32 images, fp32 (configs/vgg16.toml, configs/resnet50.toml with model.n_layer
# set), analytical layer times (no profile):
#   1. the policies (Table 3) on the 16 GPUs (configs/clusters/hetpipe.toml): NP, ED, HD with the
#      default Nm (the smallest Max_m) — the paper gives no numbers for Figure 4, only its prose;
#   2. "adding whimpy GPUs" (Table 4, ED, 4 VWs; one VW of the 4 V for the first column) on
#      configs/clusters/hetpipe-vrqg.toml (nodes in the order V, R, Q, G) with --gpus 4, 8, 12, 16:
#      the planner's own Nm (the smallest Max_m, no --nm: Max_m is the largest Nm whose partition
#      fits the trainer's memory on every GPU, pipeline/stage_memory.h) next to the paper's Nm (its
#      concurrent minibatches / 4 VWs, or 5 for 4[V]), and the predictions at the planner's Nm, at
#      the best Nm ≤ it and at the paper's Nm ("does not fit" where the trainer's memory does not).
# Predicted images/s = 32 × Σ over the VWs of min(1 / slowest partition, Nm / round trip)
# (plan/hetpipe.h hetpipe_minibatches_per_s): no parameter-server traffic, no WSP waiting.
# Usage: launch/hetpipe-paper-table.sh   Environment: BATON (default build/baton).
set -euo pipefail
cd "$(dirname "$0")/.."
BATON=${BATON:-build/baton}
[ -x "$BATON" ] || { echo "error: no baton binary at $BATON" >&2; echo "hint: build it (cmake --build build --target baton) or set BATON" >&2; exit 1; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
MB=(--set train.micro_batch=32 --set train.global_batch=32)
model() {  # name -> the config and its overrides
  case $1 in
    vgg19) echo "configs/vgg16.toml --set model.n_layer=19 --set model.batch_norm=false" ;;
    resnet152) echo "configs/resnet50.toml --set model.n_layer=152" ;;
  esac
}
for m in vgg19 resnet152; do
  read -r -a cfg <<< "$(model $m)"
  for policy in np ed hd; do
    "$BATON" plan "${cfg[@]}" "${MB[@]}" --cluster configs/clusters/hetpipe.toml --algorithm hetpipe \
      --policy $policy --format json > "$TMP/$m.$policy.json"
  done
  # Table 4's columns: GPUs, policy, GPUs per VW, the paper's Nm per VW (its concurrent minibatches
  # over 4 VWs; 4[V] is one VW)
  case $m in
    vgg19) cols=("4 np 4 5" "8 ed 2 4" "12 ed 3 5" "16 ed 4 5") ;;
    resnet152) cols=("4 np 4 5" "8 ed 2 5" "12 ed 3 6" "16 ed 4 7") ;;
  esac
  for col in "${cols[@]}"; do
    read -r gpus policy k nm <<< "$col"
    plan=("$BATON" plan "${cfg[@]}" "${MB[@]}" --cluster configs/clusters/hetpipe-vrqg.toml --gpus "$gpus"
          --algorithm hetpipe --policy "$policy" --vw-size "$k" --format json)
    "${plan[@]}" > "$TMP/$m.t4.$gpus.json"
    "${plan[@]}" --nm "$nm" > "$TMP/$m.t4.$gpus.paper-nm.json" 2> /dev/null || echo '{}' > "$TMP/$m.t4.$gpus.paper-nm.json"
  done
done

python3 - "$TMP" <<'PY'
import json, sys
tmp = sys.argv[1]
load = lambda f: json.load(open(f"{tmp}/{f}.json"))
names = {"vgg19": "VGG-19", "resnet152": "ResNet-152"}
def vws(j):
    return " ".join(v["label"] + ("" if v["feasible"] else " (no fit)") for v in j["virtual_workers"])

print("| model | policy | virtual workers | Nm = smallest Max_m | predicted images/s (WSP) | each VW at its own pace | "
      "best Nm ≤ Max_m: images/s |")
print("|---|---|---|---|---|---|---|")
for m in names:
    for p in ["np", "ed", "hd"]:
        j = load(f"{m}.{p}")
        print(f"| {names[m]} | {p.upper()} | {vws(j)} | {j['nm']} | {j['samples_per_s']:.0f} | "
              f"{j['unsynchronised_samples_per_s']:.0f} | {j['best_nm']}: {j['best_samples_per_s']:.0f} |")
print()
# HetPipe Table 4 (ED-local; the number in parentheses: concurrent minibatches over all VWs).
paper = {"vgg19": {"horovod": [164, 205, 265, 339], "hetpipe": [(300, 5), (530, 16), (572, 20), (606, 20)]},
         "resnet152": {"horovod": [233, 353, 415, None], "hetpipe": [(256, 5), (516, 20), (538, 24), (580, 28)]}}
cols = [(4, "4[V]"), (8, "4[VR]"), (12, "4[VRQ]"), (16, "4[VRQG]")]
print("| model | GPUs | paper Horovod | paper HetPipe (concurrent) | paper Nm | planner Nm (smallest Max_m) | "
      "predicted at the planner's Nm | predicted, best Nm | predicted at the paper's Nm | paper ÷ 4 GPUs | "
      "predicted (best Nm) ÷ 4 GPUs |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for m in names:
    base_paper = paper[m]["hetpipe"][0][0]
    base_pred = load(f"{m}.t4.4")["best_samples_per_s"]
    for i, (g, label) in enumerate(cols):
        j, jp = load(f"{m}.t4.{g}"), load(f"{m}.t4.{g}.paper-nm")
        hv = paper[m]["horovod"][i]
        ph, pc = paper[m]["hetpipe"][i]
        nvw = len(j["virtual_workers"])
        at_paper = f"{jp['samples_per_s']:.0f}" if jp else "does not fit"
        print(f"| {names[m]} | {g} {label} | {hv if hv else 'X'} | {ph} ({pc}) | {pc // nvw} | {j['nm']} | "
              f"{j['samples_per_s']:.0f} | {j['best_samples_per_s']:.0f} (Nm {j['best_nm']}) | {at_paper} | "
              f"{ph / base_paper:.2f} | {j['best_samples_per_s'] / base_pred:.2f} |")
PY
