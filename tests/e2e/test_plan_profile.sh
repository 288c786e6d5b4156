#!/usr/bin/env bash
# `baton profile` -> `baton plan --profile`: the planner uses the measured per-layer times (the
# predicted compute time of a one-GPU layout is m × Σ measured (forward + backward), derived here
# from the profile JSON), doubling the measured times doubles it, the search runs with a profile,
# and profiles that cannot describe the plan are errors (docs/planner.md "Measured profiles").
source "$(dirname "$0")/lib.sh"
SEL="$SRC/configs/clusters/selene.toml"

cat > tiny.toml <<'TOML'
[model]
n_layer = 2
n_head = 2
d_model = 32
seq_len = 16
vocab_size = 500
[train]
micro_batch = 2
global_batch = 8
TOML
"$BATON" profile tiny.toml --out prof.json --repeats 2 > profile.log
python3 - <<'PY'
import json
p = json.load(open("prof.json"))
for l in p["layers"]:
    l["forward_ms"] *= 2
    l["backward_ms"] *= 2
json.dump(p, open("prof2.json", "w"))
PY
"$BATON" plan tiny.toml --cluster "$SEL" --gpus 1 --evaluate --profile prof.json --format json > a.json
"$BATON" plan tiny.toml --cluster "$SEL" --gpus 1 --evaluate --profile prof2.json --format json > b.json
"$BATON" plan tiny.toml --cluster "$SEL" --gpus 1 --evaluate --format json > analytic.json
python3 - <<'PY' || fail "profile not used as measured"
import json
p = json.load(open("prof.json"))
a = json.load(open("a.json"))["candidates"][0]
b = json.load(open("b.json"))["candidates"][0]
n = json.load(open("analytic.json"))["candidates"][0]
m = 8 // 2                                     # micro-batches per step at dp = 1
measured = m * sum(l["forward_ms"] + l["backward_ms"] for l in p["layers"]) / 1e3
assert abs(a["compute_s"] / measured - 1) < 1e-6, (a["compute_s"], measured)
assert abs(b["compute_s"] / a["compute_s"] - 2) < 1e-9, (a, b)
assert abs(a["step_time_s"] - n["step_time_s"]) > 1e-12   # not the analytical prediction
print("compute", a["compute_s"], "measured", measured, "analytical", n["compute_s"])
PY

# Micro-batch 4 from a micro-batch-2 profile: linear scaling, so the same compute per step.
"$BATON" plan tiny.toml --cluster "$SEL" --gpus 1 --evaluate --profile prof.json --format json \
  --set train.micro_batch=4 > c.json
python3 -c "
import json
a = json.load(open('a.json'))['candidates'][0]; c = json.load(open('c.json'))['candidates'][0]
assert c['micro_batch'] == 4 and abs(c['compute_s'] / a['compute_s'] - 1) < 1e-6, (a, c)" \
  || fail "micro-batch scaling"

# The search with a profile: says so, and prints layouts.
"$BATON" plan tiny.toml --cluster "$SEL" --gpus 8 --profile prof.json > search.txt
grep -q "^profile: measured per-layer times from prof.json" search.txt || fail "search did not use the profile"
grep -q "^best layout as config" search.txt || fail "search printed no layout"

# Profiles that cannot describe the plan.
expect_error "seq_len 16, the config has 32" "$BATON" plan tiny.toml --cluster "$SEL" --gpus 1 --profile prof.json --set model.seq_len=32
expect_error "has 4 layers; the config's GPT has 5" "$BATON" plan tiny.toml --cluster "$SEL" --gpus 1 --profile prof.json --set model.n_layer=3
expect_error "measured in fp32, the config computes in bf16" "$BATON" plan tiny.toml --cluster "$SEL" --gpus 1 --profile prof.json --set precision.compute=bf16
expect_error "cannot read profile" "$BATON" plan tiny.toml --cluster "$SEL" --gpus 1 --profile missing.json
echo "{" > bad.json
expect_error "not JSON" "$BATON" plan tiny.toml --cluster "$SEL" --gpus 1 --profile bad.json
echo "plan --profile e2e ok"
