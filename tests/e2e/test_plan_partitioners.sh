#!/usr/bin/env bash
# `baton plan --algorithm pipedream|hetpipe|madpipe` on CNN and GPT configs, homogeneous and
# heterogeneous clusters: the printed structure (stages cover the layers in order, replicas sum to
# the workers, NOAM = ⌈workers / input-stage replicas⌉ (notes-pipedream §1), HetPipe's virtual
# workers follow the policy (§A.6) with partitions within each GPU's memory, MadPipe's normal GPUs
# hold one stage and the special GPU the rest (§C.3), memory per GPU = Σ of its stages, period ≥
# every GPU's load), and errors for combinations that are not supported.
source "$(dirname "$0")/lib.sh"
CL="$SRC/configs/clusters"

cat > vgg.toml <<'TOML'
[model]
kind = "vgg"
n_layer = 16
image_size = 224
[train]
micro_batch = 64
global_batch = 64
TOML
cat > resnet.toml <<'TOML'
[model]
kind = "resnet"
n_layer = 50
image_size = 224
[train]
micro_batch = 32
global_batch = 32
TOML
cat > gpt.toml <<'TOML'
[model]
n_layer = 4
n_head = 4
d_model = 256
seq_len = 128
vocab_size = 8192
[train]
micro_batch = 4
global_batch = 16
TOML

# ---- PipeDream ----
"$BATON" plan vgg.toml --cluster "$CL/pipedream-cluster-a.toml" --algorithm pipedream --format json > pd.json
"$BATON" plan gpt.toml --cluster "$CL/pipedream-cluster-b.toml" --algorithm pipedream --format json > pd_gpt.json
python3 - <<'PY' || fail "pipedream structure"
import json, math
for f, layers, workers in [("pd.json", 16, 16), ("pd_gpt.json", 6, 16)]:
    j = json.load(open(f))
    st = j["stages"]
    assert st[0]["first"] == 0 and st[-1]["last"] == layers - 1, st
    assert all(a["last"] + 1 == b["first"] for a, b in zip(st, st[1:])), st
    assert sum(s["replicas"] for s in st) == j["workers"] == workers, j
    assert j["noam"] == math.ceil(workers / st[0]["replicas"]), j
    assert j["config"] == "-".join(str(s["replicas"]) for s in st), j
    assert abs(j["samples_per_s"] * j["slowest_s"] - (64 if f == "pd.json" else 4)) < 1e-6, j
j = json.load(open("pd.json"))
# VGG-16 (PipeDream Table 1's shape): convolutions replicated widely, the FC layers on one worker.
assert j["stages"][0]["replicas"] >= 12 and j["stages"][-1]["replicas"] == 1, j
assert j["stages"][-1]["first_name"] == "classifier.0", j  # the runtime's layer names
PY
"$BATON" plan vgg.toml --cluster "$CL/pipedream-cluster-a.toml" --algorithm pipedream > pd.txt
grep -q "NOAM" pd.txt && grep -q "replicas" pd.txt || { cat pd.txt; fail "pipedream table"; }

# ---- HetPipe on the heterogeneous cluster (4 nodes V, R, G, Q of 4 GPUs) ----
# VGG-16-BN at 16 images a minibatch: at 64 no virtual worker's first GPU holds the trainer's
# activations of even one minibatch (and its evaluation slot) within the 12 GB less 3 GB of a TITAN V.
HP=(--set train.micro_batch=16 --set train.global_batch=16)
for policy in np ed hd; do
  "$BATON" plan vgg.toml "${HP[@]}" --cluster "$CL/hetpipe.toml" --algorithm hetpipe --policy $policy \
    --format json > hp_$policy.json
done
"$BATON" plan resnet.toml --cluster "$CL/hetpipe.toml" --algorithm hetpipe --format json > hp_resnet.json
"$BATON" plan gpt.toml --cluster "$CL/hetpipe.toml" --algorithm hetpipe --policy ed --nm 2 --format json > hp_gpt.json
python3 - <<'PY' || fail "hetpipe structure"
import json
dev = {"V": "TITAN-V", "R": "TITAN-RTX", "G": "RTX-2060", "Q": "QUADRO-P4000"}
def check(f, layers, policy):
    j = json.load(open(f))
    assert j["policy"] == policy, j["policy"]
    vws = j["virtual_workers"]
    assert len(vws) == 4 and j["vw_size"] == 4
    labels = [v["label"] for v in vws]
    # The cluster has 4 GPUs of each node type: every policy uses each GPU once.
    assert sorted("".join(labels)) == sorted("VVVVRRRRGGGGQQQQ"), labels
    if policy == "np": assert labels == ["VVVV", "RRRR", "GGGG", "QQQQ"], labels
    if policy == "ed": assert labels == ["VRGQ"] * 4, labels
    if policy == "hd":  # Table 3: the fastest with the slowest by the file's relative_speed (V > R > G > Q)
        assert labels == ["VVQQ", "VVQQ", "RRGG", "RRGG"], labels
        assert j["speed_ranking"] == "relative_speed", j["speed_ranking"]
    total = 0
    for v in vws:
        if not v["feasible"]:
            continue
        parts = v["partitions"]
        assert len(parts) == 4
        assert parts[0]["first"] == 0 and parts[-1]["last"] == layers - 1
        assert all(a["last"] + 1 == b["first"] for a, b in zip(parts, parts[1:])), parts
        for q, p in enumerate(parts):
            assert p["device"] == dev[v["label"][q]], (p, v["label"])
            assert p["memory_gb"] <= p["capacity_gb"] + 1e-9, p
        assert abs(v["slowest_s"] - max(p["time_s"] for p in parts)) < 1e-12
        total += v["samples_per_s"]
    assert abs(total - j["unsynchronised_samples_per_s"]) < 1e-6 * total, (total, j)
    # WSP: every VW at the slowest one's pace.
    fit = [v["samples_per_s"] for v in vws if v["feasible"]]
    assert abs(len(fit) * min(fit) - j["samples_per_s"]) < 1e-6 * total, (fit, j["samples_per_s"])
    if f != "hp_gpt.json":  # default Nm = the smallest Max_m, within the range best_nm is chosen from
        assert j["best_samples_per_s"] >= j["samples_per_s"] * (1 - 1e-9), j
        assert 1 <= j["best_nm"] <= j["nm"], j
    assert any(v["feasible"] for v in vws)
for policy in ["np", "ed", "hd"]:
    check(f"hp_{policy}.json", 16, policy)
check("hp_gpt.json", 6, "ed")
j = json.load(open("hp_resnet.json"))
assert j["policy"] == "hd" and len(j["virtual_workers"]) == 4
# The snippet runs the 4 virtual workers under WSP: [hetero] with Nm and the VWs' stages
# (RANK@DEVICE:FIRST-END), ranks 0..15 in VW order, each VW covering the 16 layers.
j = json.load(open("hp_ed.json"))
r = j["runnable"]
assert r["exact"] and r["ranks"] == 16 and r["sync"] == "wsp" and r["nm"] == j["nm"], r
rank = 0
for vw in r["virtual_workers"]:
    stages = [s.strip() for s in vw.split(",")]
    assert [s.split("@")[1].split(":")[0] for s in stages] == list(dev.values()), vw
    ranges = [tuple(map(int, s.split(":")[1].split("-"))) for s in stages]
    assert ranges[0][0] == 0 and ranges[-1][1] == 16, vw
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:])), vw
    assert [int(s.split("@")[0]) for s in stages] == list(range(rank, rank + 4)), vw
    rank += 4
# Nm = the smallest Max_m, memory's alone (no cap at 2k = 8), within the search bound.
assert 1 <= j["nm"] <= j["nm_bound"] and j["nm"] == min(v["max_m"] for v in j["virtual_workers"]), j["nm"]
PY
"$BATON" plan vgg.toml "${HP[@]}" --cluster "$CL/hetpipe.toml" --algorithm hetpipe --policy ed > hp.txt
[ "$(grep -c '^VW ' hp.txt)" = 4 ] || { cat hp.txt; fail "hetpipe table: 4 virtual workers"; }
grep -q "^total: " hp.txt || fail "hetpipe table total"
# HetPipe Table 3's HD from the command line: hetpipe.toml's relative_speed ranks V > R > G > Q
# (the paper's ranking; data-sheet fp32 peaks put R first and give RRQQ/VVGG), so VVQQ x2, RRGG x2.
"$BATON" plan vgg.toml "${HP[@]}" --cluster "$CL/hetpipe.toml" --algorithm hetpipe --policy hd > hp_hd.txt
[ "$(grep -oE '^VW [0-3] [A-Z]{4}' hp_hd.txt | cut -d' ' -f3 | tr '\n' ' ')" = "VVQQ VVQQ RRGG RRGG " ] \
  || { cat hp_hd.txt; fail "hetpipe hd: Table 3's VVQQ x2, RRGG x2"; }
grep -q "^HD pairs the fastest node with the slowest by the cluster file's relative_speed: V 16.3 > R 14.9 > G 6.45 > Q 5.3$" hp_hd.txt \
  || { cat hp_hd.txt; fail "hetpipe hd: the ranking line"; }
# Without relative_speed (the same cluster, keys dropped): data-sheet peaks, RRQQ x2, VVGG x2.
grep -v '^relative_speed' "$CL/hetpipe.toml" > peaks.toml
"$BATON" plan vgg.toml "${HP[@]}" --cluster peaks.toml --algorithm hetpipe --policy hd > hp_peaks.txt
[ "$(grep -oE '^VW [0-3] [A-Z]{4}' hp_peaks.txt | cut -d' ' -f3 | tr '\n' ' ')" = "RRQQ RRQQ VVGG VVGG " ] \
  || { cat hp_peaks.txt; fail "hetpipe hd by data-sheet peak"; }
grep -q "^HD pairs .* by data-sheet fp32 peak" hp_peaks.txt || { cat hp_peaks.txt; fail "hetpipe hd: the peak line"; }
# relative_speed on some nodes only, or not a positive number: errors naming the file and node.
awk '/^relative_speed/ && ++n == 2 {next} {print}' "$CL/hetpipe.toml" > partial.toml
expect_error "partial.toml:[0-9]*: node 'R' has no relative_speed, but node 'V'" \
  "$BATON" plan vgg.toml "${HP[@]}" --cluster partial.toml --algorithm hetpipe --policy hd
sed 's/^relative_speed = 5.3$/relative_speed = -1/' "$CL/hetpipe.toml" > negative.toml
expect_error "negative.toml:[0-9]*: relative_speed must be > 0, got -1" \
  "$BATON" plan vgg.toml "${HP[@]}" --cluster negative.toml --algorithm hetpipe --policy hd

# --output writes the [hetero] snippet: valid TOML, its keys the run line's --sets.
"$BATON" plan vgg.toml "${HP[@]}" --cluster "$CL/hetpipe.toml" --algorithm hetpipe --policy hd --output hp_hd.toml > /dev/null
python3 - hp_hd.toml <<'PY' || { cat hp_hd.toml; fail "hetpipe snippet"; }
import shlex, sys, tomllib
text = open(sys.argv[1]).read()
t = tomllib.loads(text)
h = t["hetero"]
assert h["sync"] == "wsp" and h["nm"] >= 1 and len(h["virtual_workers"]) == 4, h
# One minibatch of micro_batch rows per virtual worker and step (a pipelined VW runs it as one micro-batch).
assert t["train"]["global_batch"] == 4 * t["train"]["micro_batch"] and t["train"]["steps"] % h["nm"] == 0, t
run = [l for l in text.splitlines() if "run: " in l][0].split("run: ", 1)[1]
words = shlex.split(run)
assert words[:3] == ["mpirun", "-n", "16"], words
keys = {w.split("=", 1)[0] for w in words[words.index("train") + 2:][1::2]}
assert keys == {f"{s}.{k}" for s in t for k in t[s]}, keys
PY

# docs/hetpipe.md's paper tables are launch/hetpipe-paper-table.sh's output.
BATON="$BATON" bash "$SRC/launch/hetpipe-paper-table.sh" > hp-paper.md
python3 - "$SRC" <<'PY' || fail "docs/hetpipe.md tables differ from launch/hetpipe-paper-table.sh: rerun it and paste"
import sys
blocks = open("hp-paper.md").read().strip().split("\n\n")
assert len(blocks) == 2 and all(b.startswith("| model") for b in blocks), blocks
text = open(f"{sys.argv[1]}/docs/hetpipe.md").read()
for b in blocks:
    assert b in text, b
PY

# ---- MadPipe ----
"$BATON" plan vgg.toml --cluster "$CL/pipedream-cluster-a.toml" --gpus 4 --algorithm madpipe --format json > mp.json
"$BATON" plan gpt.toml --cluster "$CL/selene.toml" --gpus 4 --algorithm madpipe --format json > mp_gpt.json
python3 - <<'PY' || fail "madpipe structure"
import json
for f, layers, gpus in [("mp.json", 16, 4), ("mp_gpt.json", 6, 4)]:
    j = json.load(open(f))
    st = j["stages"]
    assert st[0]["first"] == 0 and st[-1]["last"] == layers - 1, st
    assert all(a["last"] + 1 == b["first"] for a, b in zip(st, st[1:])), st
    normal = [s["gpu"] for s in st if not s["special"]]
    special = {s["gpu"] for s in st if s["special"]}
    assert len(normal) == len(set(normal)), st           # one stage per normal GPU
    assert len(special) <= 1 and not (special & set(normal)), st
    assert len(set(normal) | special) <= gpus == j["gpus"]
    mem = [0.0] * len(j["memory_gb"])
    for s in st:
        mem[s["gpu"]] += s["memory_gb"]
    assert all(abs(a - b) < 1e-9 for a, b in zip(mem, j["memory_gb"])), (mem, j["memory_gb"])
    assert j["fits"] and max(j["memory_gb"]) <= j["memory_limit_gb"] + 1e-9, j
    special_load = sum(s["load_s"] for s in st if s["special"])
    assert abs(special_load - j["special_load_s"]) < 1e-12
    assert j["period_s"] >= max([special_load] + [s["load_s"] for s in st]) * (1 - 1e-9), j
    assert j["period_s"] >= j["simulated_period_s"] - 1e-15
    assert all(s["activations"] >= 1 for s in st) and st[-1]["activations"] == 1, st
    assert abs(j["samples_per_s"] * j["period_s"] - (64 if f == "mp.json" else 4)) < 1e-6
PY
"$BATON" plan vgg.toml --cluster "$CL/pipedream-cluster-a.toml" --gpus 4 --algorithm madpipe > mp.txt
grep -q "checked with the simulated 1F1B\* schedule" mp.txt && grep -q "^memory per GPU" mp.txt \
  || { cat mp.txt; fail "madpipe table"; }

# ---- Errors ----
expect_error "mixes device types" "$BATON" plan vgg.toml --cluster "$CL/hetpipe.toml" --algorithm pipedream
expect_error "mixes device types" "$BATON" plan vgg.toml --cluster "$CL/hetpipe.toml" --algorithm madpipe
expect_error "model.kind = \"vgg\"" "$BATON" plan vgg.toml --cluster "$CL/hetpipe.toml"
expect_error "unknown --algorithm 'gpipe'" "$BATON" plan vgg.toml --cluster "$CL/hetpipe.toml" --algorithm gpipe
expect_error "HetPipe options" "$BATON" plan vgg.toml --cluster "$CL/pipedream-cluster-a.toml" --algorithm pipedream --policy np
expect_error "HetPipe options" "$BATON" plan vgg.toml --cluster "$CL/pipedream-cluster-a.toml" --algorithm madpipe --gpu-memory-gb 8
expect_error "gpu-memory-gb -1 is negative" "$BATON" plan vgg.toml "${HP[@]}" --cluster "$CL/hetpipe.toml" --algorithm hetpipe --gpu-memory-gb=-1
expect_error "unknown --policy 'xx'" "$BATON" plan vgg.toml "${HP[@]}" --cluster "$CL/hetpipe.toml" --algorithm hetpipe --policy xx
expect_error "ED needs k" "$BATON" plan vgg.toml "${HP[@]}" --cluster "$CL/hetpipe.toml" --algorithm hetpipe --policy ed --vw-size 2
expect_error "--evaluate predicts" "$BATON" plan vgg.toml --cluster "$CL/pipedream-cluster-a.toml" --algorithm madpipe --evaluate
expect_error "n_layer = 17" "$BATON" plan vgg.toml --cluster "$CL/pipedream-cluster-a.toml" --algorithm pipedream --set model.n_layer=17
expect_error "cannot read profile 'x.json'" "$BATON" plan vgg.toml --cluster "$CL/pipedream-cluster-a.toml" --algorithm pipedream --profile x.json
expect_error "no virtual worker" "$BATON" plan vgg.toml --cluster "$CL/hetpipe.toml" --algorithm hetpipe --set train.micro_batch=4096 --set train.global_batch=4096
expect_error "no bf16" "$BATON" plan vgg.toml "${HP[@]}" --cluster "$CL/hetpipe.toml" --algorithm hetpipe --set precision.compute=bf16
echo "plan partitioners e2e ok"
