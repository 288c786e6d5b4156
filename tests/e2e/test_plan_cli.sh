#!/usr/bin/env bash
# `baton plan`: the JSON fields the issue names, the table, the best layout as a TOML snippet that
# round-trips through --evaluate, the search's space (--schedules, --recompute; synchronous kinds
# by default), the paper check on PTD-P Table 1 through the CLI (docs/planner.md's tables being
# launch/plan-paper-table.sh's output), and errors.
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

# Paper check through the CLI: the 1T row within ±7% of 163 TFLOP/s (hardware count, Eq. 4.2).
"$BATON" plan "$SRC/configs/ptdp/gpt-1008b.toml" --cluster "$SEL" --gpus 3072 --evaluate --format json > t1.json
python3 -c "
import json; c = json.load(open('t1.json'))['candidates'][0]
assert abs(c['hw_tflops_per_gpu'] / 163 - 1) <= 0.07, c
assert (c['tp'], c['pp'], c['dp'], c['vp']) == (8, 64, 6, 2), c" || fail "1T paper check"

# The search's space. Default: synchronous kinds only (no 2bw among 40 candidates, though the
# unrestricted search's best is 2bw); --schedules / --recompute restrict it, and it is echoed.
P39=("$BATON" plan "$SRC/configs/ptdp/gpt-39.1b.toml" --cluster "$SEL" --gpus 512 --format json)
"${P39[@]}" --top 40 > default.json
"${P39[@]}" --top 40 --schedules 1f1b,interleaved --recompute full > paper.json
"${P39[@]}" --top 40 --schedules 2bw,1f1b --recompute none,selective > async.json
"${P39[@]}" --top 1 --schedules all > all.json
python3 - <<'EOF' || fail "search space"
import json
load = lambda f: json.load(open(f))
d, p, a, u = load("default.json"), load("paper.json"), load("async.json"), load("all.json")
assert d["searched"] == {"schedules": ["gpipe", "1f1b", "interleaved"],
                         "recompute": ["none", "selective", "full"]}, d["searched"]
assert len(d["candidates"]) == 40
assert {c["schedule"] for c in d["candidates"]} <= {"gpipe", "1f1b", "interleaved"}, d
assert p["searched"] == {"schedules": ["1f1b", "interleaved"], "recompute": ["full"]}, p["searched"]
assert all(c["schedule"] in ("1f1b", "interleaved") and c["recompute"] == "full" for c in p["candidates"])
assert all(c["schedule"] in ("2bw", "1f1b") and c["recompute"] != "full" for c in a["candidates"])
assert any(c["schedule"] == "2bw" for c in a["candidates"]), a
assert all(c["pp"] >= 2 for c in a["candidates"] if c["schedule"] == "2bw")
assert u["searched"]["schedules"] == ["gpipe", "1f1b", "interleaved", "2bw"], u["searched"]
assert u["candidates"][0]["schedule"] == "2bw", u["candidates"][0]
assert u["candidates"][0]["step_time_s"] <= d["candidates"][0]["step_time_s"] <= p["candidates"][0]["step_time_s"]
EOF
"$BATON" plan "$SRC/configs/ptdp/gpt-39.1b.toml" --cluster "$SEL" --gpus 512 --schedules 1f1b \
  --recompute full --top 2 > restricted.txt
grep -q "^searched: schedules 1f1b | recompute full" restricted.txt || fail "table names the space"

# docs/planner.md's paper-check tables are launch/plan-paper-table.sh's output.
BATON="$BATON" bash "$SRC/launch/plan-paper-table.sh" > paper-table.md
python3 - "$SRC" <<'EOF' || fail "docs/planner.md tables differ from launch/plan-paper-table.sh: rerun it and paste"
import sys
src = sys.argv[1]
blocks = open("paper-table.md").read().strip().split("\n\n")  # table, summary, table, summary
assert len(blocks) == 4 and all(b.startswith("| model") for b in blocks[::2]), blocks
for doc in ("docs/planner.md",):
    text = open(f"{src}/{doc}").read()
    for b in blocks:
        assert b in text, (doc, b)
EOF

# Errors.
expect_error "cannot read cluster file" "$BATON" plan "$SRC/configs/ptdp/gpt-1.7b.toml" --cluster nope.toml
expect_error "--gpus 5000" "$BATON" plan "$SRC/configs/ptdp/gpt-1.7b.toml" --cluster "$SEL" --gpus 5000
expect_error "vocab_size" "$BATON" plan "$SRC/configs/quickstart.toml" --cluster "$SEL" --gpus 8
expect_error "not a multiple" "$BATON" plan "$SRC/configs/ptdp/gpt-39.1b.toml" --cluster "$SEL" --gpus 100 --evaluate
expect_error "unknown --format" "$BATON" plan "$SRC/configs/ptdp/gpt-1.7b.toml" --cluster "$SEL" --format xml
P17=("$BATON" plan "$SRC/configs/ptdp/gpt-1.7b.toml" --cluster "$SEL" --gpus 32)
expect_error "unknown schedule kind 'nope'" "${P17[@]}" --schedules 1f1b,nope
expect_error "no cost model for schedule 'zb-h1'" "${P17[@]}" --schedules zb-h1
expect_error "no cost model for schedule 'pipedream'" "${P17[@]}" --schedules 2bw,pipedream
expect_error "no schedule kinds" "${P17[@]}" --schedules ,
expect_error "unknown recompute mode 'some'" "${P17[@]}" --recompute full,some
expect_error "restrict the PTD-P layout search, not --evaluate" "${P17[@]}" --evaluate --recompute full
expect_error "restrict the PTD-P layout search, not pipedream" "${P17[@]}" --algorithm pipedream --schedules 1f1b
echo "plan e2e ok"
