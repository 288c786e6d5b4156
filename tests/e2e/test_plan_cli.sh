#!/usr/bin/env bash
# `baton plan`: the JSON fields the issue names, the table, the best layout as a TOML snippet that
# round-trips through --evaluate, the paper check on PTD-P Table 1 through the CLI, and errors.
source "$(dirname "$0")/lib.sh"
SEL="$SRC/configs/clusters/selene.toml"

"$BATON" plan --help > help.txt
grep -qi usage help.txt || fail "plan --help printed no usage"

# Search, JSON: every field, sorted by step time, layouts multiply to the GPU count.
"$BATON" plan "$SRC/configs/ptdp/gpt-39.1b.toml" --cluster "$SEL" --gpus 512 --top 4 --format json \
  --output best.toml > plan.json
python3 - <<'PY' || { cat plan.json; fail "plan json"; }
import json
j = json.load(open("plan.json"))
c = j["candidates"]
assert 1 <= len(c) <= 4, len(c)
for x in c:
    for k in ["tp", "pp", "dp", "vp", "micro_batch", "schedule", "recompute", "step_time_s",
              "tokens_per_s", "tflops_per_gpu", "bubble_fraction", "memory_gb"]:
        assert k in x, k
    assert x["tp"] * x["pp"] * x["dp"] == 512
    assert len(x["memory_gb"]) == x["pp"] and max(x["memory_gb"]) <= 80
    assert abs(x["tokens_per_s"] - 1536 * 2048 / x["step_time_s"]) < 1e-6 * x["tokens_per_s"]
assert all(a["step_time_s"] <= b["step_time_s"] for a, b in zip(c, c[1:]))
PY

# The snippet is TOML with the chosen layout; feeding it back with --set predicts the same time.
python3 - <<'PY' > sets.txt || fail "snippet is not TOML"
import tomllib
t = tomllib.load(open("best.toml", "rb"))
sets = [f"train.micro_batch={t['train']['micro_batch']}"]
for k, v in t["parallel"].items():
    sets.append(f"parallel.{k}={str(v).lower() if isinstance(v, bool) else v}")
print(" ".join("--set " + s for s in sets))
PY
# shellcheck disable=SC2046
"$BATON" plan "$SRC/configs/ptdp/gpt-39.1b.toml" --cluster "$SEL" --gpus 512 --evaluate \
  --format json $(cat sets.txt) > eval.json
python3 - <<'PY' || fail "snippet round trip"
import json
best = json.load(open("plan.json"))["candidates"][0]
ev = json.load(open("eval.json"))["candidates"][0]
assert abs(best["step_time_s"] - ev["step_time_s"]) < 1e-9 * best["step_time_s"], (best, ev)
PY

# Table output ends with the snippet.
"$BATON" plan "$SRC/configs/ptdp/gpt-1.7b.toml" --cluster "$SEL" --gpus 32 > table.txt
grep -q "^best layout as config" table.txt || fail "table has no snippet"
grep -q "^\[parallel\]" table.txt || fail "table snippet has no [parallel]"

# Paper check through the CLI: the 1T row within ±15% of 163 TFLOP/s (hardware count, Eq. 4.2).
"$BATON" plan "$SRC/configs/ptdp/gpt-1008b.toml" --cluster "$SEL" --gpus 3072 --evaluate --format json > t1.json
python3 -c "
import json; c = json.load(open('t1.json'))['candidates'][0]
assert abs(c['hw_tflops_per_gpu'] / 163 - 1) <= 0.15, c
assert (c['tp'], c['pp'], c['dp'], c['vp']) == (8, 64, 6, 2), c" || fail "1T paper check"

# Errors.
expect_error "cannot read cluster file" "$BATON" plan "$SRC/configs/ptdp/gpt-1.7b.toml" --cluster nope.toml
expect_error "--gpus 5000" "$BATON" plan "$SRC/configs/ptdp/gpt-1.7b.toml" --cluster "$SEL" --gpus 5000
expect_error "vocab_size" "$BATON" plan "$SRC/configs/quickstart.toml" --cluster "$SEL" --gpus 8
expect_error "not a multiple" "$BATON" plan "$SRC/configs/ptdp/gpt-39.1b.toml" --cluster "$SEL" --gpus 100 --evaluate
expect_error "unknown --format" "$BATON" plan "$SRC/configs/ptdp/gpt-1.7b.toml" --cluster "$SEL" --format xml
echo "plan e2e ok"
