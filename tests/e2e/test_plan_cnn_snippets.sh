#!/usr/bin/env bash
# The planner and the runtime close the loop on a CNN: `baton plan --algorithm pipedream|madpipe
# --output snippet.toml` on a small ResNet-18 writes a [parallel] snippet whose `run:` line (the
# snippet's keys as --sets) trains 2 steps under mpirun with the snippet's rank count, and the run's
# header shows the snippet's stage boundaries (and replicas); `baton profile` of the same CNN feeds
# `baton plan --profile` (measured per-layer times: the chain's layer count and names are the
# runtime's); and the errors around them.
source "$(dirname "$0")/lib.sh"
use_mpirun

cat > r18.toml <<'TOML'
[model]
kind = "resnet"
n_layer = 18
image_size = 32
width = 0.125
classes = 10
[data]
synthetic = true
[train]
steps = 2
micro_batch = 4
global_batch = 8
log_every = 1
[optim]
kind = "sgd"
lr = 0.01
warmup_steps = 0
TOML
# Four V100s on one node. The model's layers take microseconds there, so the bus decides: at 2 GB/s
# PipeDream picks a straight 4-stage pipeline (1-1-1-1: data parallelism's weight all-reduce costs
# more than sending activations), at 5 GB/s 2-1-1 (not expressible: replicas need first = last);
# at 100 GB/s MadPipe puts two non-contiguous stages on its special GPU (not expressible either).
for bw in 2 5 100; do
  cat > bus$bw.toml <<TOML
name = "bus$bw"
inter_node_gbs = 1
[[nodes]]
name = "box"
device = "V100-PCIE-16GB"
gpus = 4
intra_node_gbs = $bw
count = 1
TOML
done

# run_snippet NAME: trains with the snippet's run line (mpirun -n R baton train CONFIG --set ...),
# and checks the header's model stages against the snippet's stages.
run_snippet() {
  local name=$1
  python3 - "$name.toml" > "$name.cmd" <<'PY' || fail "$name: snippet"
import shlex, sys, tomllib
text = open(sys.argv[1]).read()
t = tomllib.loads(text)                          # valid TOML
run = [l for l in text.splitlines() if "run: " in l]
assert len(run) == 1, text
words = shlex.split(run[0].split("run: ", 1)[1])
n = int(words[2]) if words[0] == "mpirun" else 1
sets = words[words.index("train") + 2:]
keys = {s.split("=", 1)[0] for s in sets[1::2]}
assert keys == {f"{sec}.{k}" for sec in ("train", "parallel") for k in t[sec]}, (keys, t)
stages = t["parallel"]["stages"]
assert stages[0][0] == 0 and stages[-1][1] == 10, stages       # ResNet-18: 10 global layers
assert all(a[1] == b[0] for a, b in zip(stages, stages[1:])), stages
reps = t["parallel"]["replicas"] or [1] * len(stages)
assert n == sum(reps) * (1 if len(stages) > 1 else n), (n, reps)
print(n, " ".join(shlex.quote(s) for s in sets))
print(" ".join(f"[{a},{b})" for a, b in stages))
PY
  local n sets want
  n=$(head -1 "$name.cmd" | cut -d' ' -f1)
  sets=$(head -1 "$name.cmd" | cut -d' ' -f2-)
  want=$(sed -n 2p "$name.cmd")
  eval "\"\${MPIRUN[@]}\" $n \"\$BATON\" train r18.toml $sets --set run.dir=run_$name" > "$name.log" 2>&1 \
    || { cat "$name.log"; fail "$name: baton train with the snippet"; }
  grep -qF "model stages (global layers) $want" "$name.log" || { cat "$name.log"; fail "$name: stages $want"; }
  [ "$(grep -c '"step":2[,}]' "run_$name/metrics.jsonl")" = 1 ] || fail "$name: 2 steps"
}

# ---- PipeDream ----
"$BATON" plan r18.toml --cluster bus2.toml --algorithm pipedream --output pd.toml > pd.txt
grep -q "^stages: 4 (1-1-1-1)" pd.txt || { cat pd.txt; fail "pipedream: 1-1-1-1 expected on bus2"; }
grep -q "^runnable layout as config (written to pd.toml):" pd.txt || { cat pd.txt; fail "pipedream: snippet"; }
grep -q '^schedule = "pipedream"' pd.toml || { cat pd.toml; fail "pipedream: schedule"; }
cmp -s pd.toml <(sed -n '/^runnable layout as config/,$p' pd.txt | tail -n +2) || fail "printed = written snippet"
run_snippet pd
# 2-1-1: one clear line, and the closest layout (the same stages, unreplicated) is the snippet.
"$BATON" plan r18.toml --cluster bus5.toml --algorithm pipedream --format json > pd5.json
python3 - <<'PY' || fail "pipedream 2-1-1"
import json
j = json.load(open("pd5.json"))
r = j["runnable"]
assert j["config"] == "2-1-1" and not r["exact"], j
assert "replicates the first stage 2x and the last 1x" in r["unexpressible"], r
assert r["stages"] == [[s["first"], s["last"] + 1] for s in j["stages"]] and r["replicas"] == [], r
assert r["ranks"] == 3 and "# not runnable as planned: " in j["toml"], r
PY

# ---- MadPipe ----
"$BATON" plan r18.toml --cluster bus100.toml --algorithm madpipe --output mp.toml --format json > mp.json
python3 - <<'PY' || fail "madpipe json"
import json
j = json.load(open("mp.json"))
r = j["runnable"]
assert j["toml"] == open("mp.toml").read()
st = j["stages"]
# The runnable stages are MadPipe's, adjacent stages of one GPU merged.
bounds = [[st[0]["first"], st[0]["last"] + 1]]
for a, b in zip(st, st[1:]):
    if b["gpu"] == a["gpu"]: bounds[-1][1] = b["last"] + 1
    else: bounds.append([b["first"], b["last"] + 1])
assert r["stages"] == bounds, (r, st)
assert r["exact"] == (len({s["gpu"] for s in st}) == len(bounds)), r
assert not r["exact"] and "non-contiguous stages" in r["unexpressible"], r   # what bus100 gives
assert r["schedule"] == ("2bw" if len(bounds) > 1 else "1f1b"), r
assert any("1F1B*" in n for n in r["notes"]) or len(bounds) == 1, r
PY
run_snippet mp

# ---- profile -> plan --profile ----
"$BATON" profile r18.toml --out prof.json --repeats 1 > prof.log 2>&1 || { cat prof.log; fail "profile"; }
python3 - <<'PY' || fail "profile json"
import json
p = json.load(open("prof.json"))
assert p["kind"] == "resnet" and p["seq_len"] == 1 and p["micro_batch"] == 4, p
assert p["model"].startswith("ResNet-18 (10 layers"), p["model"]
names = [l["name"] for l in p["layers"]]
assert names == ["stem"] + [f"layer{s}.{i}" for s in range(1, 5) for i in range(2)] + ["fc"], names
assert all(l["forward_ms"] > 0 and l["backward_ms"] > 0 and l["stash_bytes"] > 0 for l in p["layers"]), p
assert sum(l["params"] for l in p["layers"]) > 100000
PY
"$BATON" plan r18.toml --cluster bus2.toml --algorithm pipedream --profile prof.json --format json > pdp.json
python3 - <<'PY' || fail "plan --profile"
import json
p = json.load(open("prof.json"))
j = json.load(open("pdp.json"))
# Measured times replace the analytical ones: the stages' f+b times are sums of measured layers.
for s in j["stages"]:
    want = sum((l["forward_ms"] + l["backward_ms"]) / 1e3 for l in p["layers"][s["first"]:s["last"] + 1])
    assert abs(s["compute_s"] - want) <= 1e-9 + 1e-9 * want, (s, want)
assert j["runnable"]["stages"][-1][1] == 10
PY
"$BATON" plan r18.toml --cluster bus2.toml --algorithm madpipe --profile prof.json --set train.micro_batch=8 \
  --set train.global_batch=16 > /dev/null || fail "madpipe --profile at another micro-batch"

# ---- errors ----
expect_error "measured ResNet-18" "$BATON" plan r18.toml --cluster bus2.toml --algorithm pipedream \
  --profile prof.json --set model.width=0.25
expect_error "measured ResNet-18" "$BATON" plan r18.toml --cluster bus2.toml --algorithm pipedream \
  --profile prof.json --set model.image_size=64
expect_error "computes in bf16" "$BATON" plan r18.toml --cluster bus2.toml --algorithm pipedream \
  --profile prof.json --set precision.compute=bf16
expect_error "--evaluate predicts" "$BATON" plan r18.toml --cluster bus2.toml --algorithm madpipe --evaluate
# A config that does not train for its own reasons gets no snippet (WSP without virtual workers).
printf '[model]\nn_layer = 2\nvocab_size = 512\n[train]\nmicro_batch = 2\nglobal_batch = 8\n[hetero]\nsync = "wsp"\n' > gpt.toml
expect_error "does not train with gpt.toml: " "$BATON" plan gpt.toml --cluster bus2.toml --algorithm pipedream
echo "plan cnn snippets e2e ok"
