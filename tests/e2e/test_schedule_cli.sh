#!/usr/bin/env bash
# `baton schedule`: the grid (text form, one row per rank), the JSON summary with the fields the
# issue names, the Chrome trace, and the schedule errors (each an `error:` plus a `hint:` line).
source "$(dirname "$0")/lib.sh"

"$BATON" schedule --help > help.txt
grep -qi usage help.txt || fail "schedule --help printed no usage"

# Grid: 1F1B p = 4, m = 8, the dissertation's Figure 4.4 order (0-based): rank 0 runs four
# forwards before its first backward, the last rank alternates from the start.
"$BATON" schedule --kind 1f1b --pp 4 --microbatches 8 > grid.txt
grep -q "^rank 0: 0F0s0 0F1s1 0F2s2 0F3s3 0B0s0 0F4s0 0B1s1 " grid.txt || { cat grid.txt; fail "1f1b grid rank 0"; }
grep -q "^rank 3: 3F0s0 3B0s0 3F1s0 3B1s0 " grid.txt || fail "1f1b grid rank 3"
[ "$(grep -c '^rank ' grid.txt)" -eq 4 ] || fail "grid must have one row per rank"
"$BATON" schedule --kind 2bw --pp 2 --microbatches 2 --steps 2 --lowered > lowered.txt
grep -q "0SEND_ACT0s0p1" lowered.txt || fail "--lowered shows no sends"
grep -q "0OPT_STEPv2" lowered.txt || fail "--lowered shows no optimizer steps"

# JSON: ideal = M × (F + B [+ W]), bubble_fraction = (makespan − ideal) / ideal.
check_json() {  # check_json 'python expression over j' args...
  local expr=$1; shift
  "$BATON" schedule "$@" --format json > out.json
  python3 - "$expr" <<'PY' || { cat out.json; fail "json check '$expr' for: $*"; }
import json, sys
j = json.load(open("out.json"))
for k in ["kind", "pp", "vp", "microbatches", "makespan", "ideal", "bubble_fraction",
          "peak_activations", "peak_weight_versions"]:
    assert k in j, k
assert abs(j["bubble_fraction"] - (j["makespan"] - j["ideal"]) / j["ideal"]) < 1e-12
assert eval(sys.argv[1]), sys.argv[1]
PY
}
check_json 'j["makespan"] == 33 and j["ideal"] == 24 and abs(j["bubble_fraction"] - 3/8) < 1e-12' \
  --kind 1f1b --pp 4 --microbatches 8                                       # default F=1, B=2
check_json 'j["peak_activations"] == [4, 3, 2, 1] and j["peak_weight_versions"] == [1] * 4' \
  --kind 1f1b --pp 4 --microbatches 8
check_json 'j["peak_activations"] == [8] * 4' --kind gpipe --pp 4 --microbatches 8
check_json 'abs(j["bubble_fraction"] - 3/16) < 1e-12 and j["vp"] == 2' \
  --kind interleaved --pp 4 --vp 2 --microbatches 8 --costs 1,1
check_json 'abs(j["bubble_fraction"] - 3/24) < 1e-12 and j["ideal"] == 24' \
  --kind zb-h1 --pp 4 --microbatches 8 --costs 1,1,1
check_json 'j["peak_weight_versions"] == [4, 3, 2, 1]' --kind pipedream --pp 4 --microbatches 16
check_json 'j["peak_weight_versions"] == [2, 2, 2, 2] and j["makespan"] == (3 * 4 + 3) * 3' \
  --kind 2bw --pp 4 --microbatches 4 --steps 3
check_json 'len(j["peak_activations"]) == 3' --kind pipedream --pp 2 --replicas 2,1 --microbatches 8

# Trace: Chrome-trace JSON, to stdout or a file.
"$BATON" schedule --kind interleaved --pp 2 --vp 2 --microbatches 4 --format trace --output trace.json
python3 - <<'PY' || fail "trace is not Chrome-trace JSON"
import json
t = json.load(open("trace.json"))
xs = [e for e in t["traceEvents"] if e["ph"] == "X"]
assert len(xs) >= 32 and {e["pid"] for e in xs} == {0, 1}
PY

# Errors.
expect_error "unknown pipeline schedule kind 'zigzag'" "$BATON" schedule --kind zigzag --pp 2 --microbatches 4
grep -q "^hint: valid kinds: gpipe, 1f1b, interleaved, pipedream, 2bw, zb-h1" err.txt || fail "kinds not listed"
expect_error "multiple of pp" "$BATON" schedule --kind interleaved --pp 4 --vp 2 --microbatches 6
expect_error "needs the interleaved" "$BATON" schedule --kind 1f1b --pp 4 --vp 2 --microbatches 8
expect_error "at least 1, got 0" "$BATON" schedule --kind 1f1b --pp 0 --microbatches 8
expect_error "bad --costs '1,x'" "$BATON" schedule --kind 1f1b --pp 2 --microbatches 4 --costs 1,x
expect_error "bad --costs '1'" "$BATON" schedule --kind 1f1b --pp 2 --microbatches 4 --costs 1
expect_error "bad --costs" "$BATON" schedule --kind 1f1b --pp 2 --microbatches 4 --costs 1,2,3,4
expect_error "bad --costs" "$BATON" schedule --kind 1f1b --pp 2 --microbatches 4 --costs=-1,2
expect_error "unknown --format" "$BATON" schedule --kind 1f1b --pp 2 --microbatches 4 --format xml
expect_error "" "$BATON" schedule --pp 2 --microbatches 4
echo "PASS"
