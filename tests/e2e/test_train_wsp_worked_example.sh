#!/usr/bin/env bash
# The HetPipe paper's worked example, asserted from the trace of a real `baton train` run (issue 23
# item 3; docs/hetpipe.md "The runtime's trace"): 2 VWs of 2 stages, D = 0, Nm = 4, 12 minibatches,
# deterministic mode, run.trace on. Each stage writes wsp-trace-vw<v>-stage<s>.jsonl; a minibatch's
# "w" is the version vector its weights carry (tags moved with the tensors by every update, push
# and merge, not recomputed from clocks). Asserted, on every stage of both VWs:
# - pushes after minibatches 4, 8 and 12 (waves 0, 1, 2);
# - minibatches 5–7 start at c_local 0 (the paper: "while its local clock is still 0");
# - minibatch 8 is gated by the pull of clock 0, which merges c_global 1: every VW's wave 0 (and
#   in the run's order of hooks, VW v's forward of 8 comes after both VWs' update 4);
# - minibatch 11 reads global 1–4 plus its own 5–7, staleness 6 = s_global.
# The traffic records at the end: the default placement's leaders talk to the shards, followers to
# their leaders only. Then the paper's properties on every minibatch of this run and of a non-deterministic one (the
# same config without hetero.deterministic, 3 VWs, D = 1): own updates 1 … p − Nm and every VW's
# 1 … p − (s_global + 1) present; staleness ≤ s_global (reached in the example); and, in the deterministic run's
# order, no VW starts clock c before every VW pushed wave c − D − 1 (c_local ≤ c_global + D).
source "$(dirname "$0")/lib.sh"
use_mpirun
make_tiny_dataset
write_tiny_config
EX=(--set hetero.sync='"wsp"' --set run.trace=true --set train.steps=12 --set checkpoint.every=0
    --set train.global_batch=8 --set train.micro_batch=4 --set hetero.nm=4)
timeout 300 "${MPIRUN[@]}" 4 "$BATON" train tiny.toml "${EX[@]}" --set hetero.deterministic=true --set hetero.staleness=0 \
  --set hetero.virtual_workers='["0,1", "2,3"]' --set run.dir=example > example.log 2>&1 || { tail -30 example.log; fail "the example run"; }
timeout 300 "${MPIRUN[@]}" 6 "$BATON" train tiny.toml "${EX[@]}" --set hetero.staleness=1 --set train.global_batch=12 \
  --set hetero.virtual_workers='["0,1", "2,3", "4,5"]' --set run.dir=free > free.log 2>&1 || { tail -30 free.log; fail "the free run"; }

python3 - <<'PY'
import glob, json, re
def traces(d):
    out = {}
    for f in sorted(glob.glob(f"{d}/wsp-trace-vw*-stage*.jsonl")):
        vw, stage = map(int, re.search(r"vw(\d+)-stage(\d+)", f).groups())
        out[(vw, stage)] = [json.loads(l) for l in open(f)]
    return out
def has(w, vw, first, last):
    """Minibatches first..last of vw all in the version vector w ({"vw": [[a, b], ...]})."""
    return last < first or any(a <= first and last <= b for a, b in w.get(str(vw), []))

t = traces("example")
assert sorted(t) == [(0, 0), (0, 1), (1, 0), (1, 1)], sorted(t)
for (vw, stage), ev in t.items():
    where = f"VW {vw} stage {stage}"
    pushes = [e["mb"] for e in ev if e["e"] == "push"]
    assert pushes == [4, 8, 12], f"{where}: pushes after {pushes}"
    start = {e["mb"]: e for e in ev if e["e"] == "start"}
    assert [start[p]["c_local"] for p in (5, 6, 7)] == [0, 0, 0], f"{where}: 5-7 at clocks {[start[p]['c_local'] for p in (5, 6, 7)]}"
    merges = [e for e in ev if e["e"] == "merge" and not e["meeting"]]
    m8 = [m for m in merges if m["mb"] == 8]
    assert len(m8) == 1 and m8[0]["x"] == 1 and m8[0]["b"] == 4 and m8[0]["gated"], f"{where}: merges {merges}"
    assert start[8]["c_local"] == 1 and start[8]["c_global"] == 1, f"{where}: minibatch 8 {start[8]}"
    w11 = start[11]["w"]
    own, other = str(vw), str(1 - vw)
    assert w11 == {own: [[1, 7]], other: [[1, 4]]}, f"{where}: minibatch 11 reads {w11}"
    assert start[11]["staleness"] == 6, f"{where}: minibatch 11 staleness {start[11]['staleness']}"
    print(f"{where}: pushes after 4, 8, 12; 5-7 at c_local 0; 8 gated by the pull of c_global 1; "
          f"11 reads {w11} (global 1-4 + own 5-7), staleness 6 = s_global")
# The order of hooks: VW v's forward of 8 comes after both VWs' update of 4.
turn = {}
for vw in (0, 1):
    for e in t[(vw, 0)]:
        if "turn" in e and e["e"] in ("start", "update"):
            turn[(vw, e["e"], e["mb"])] = e["turn"]
for vw in (0, 1):
    assert turn[(vw, "start", 8)] > max(turn[(0, "update", 4)], turn[(1, "update", 4)]), turn
print("in the run's order: each VW's forward of 8 after every VW's update 4 (the pull waited for every VW's wave 0)")

# The traffic records (the run's end): with the default placement a leader pushes and pulls the
# whole model for its VW and sends each follower its part; a follower talks only to its leader.
for (vw, stage), ev in t.items():
    tr = [e for e in ev if e["e"] == "traffic"]
    assert len(tr) == 1 and tr[0]["waves"] == 3, (vw, stage, tr)
    tr = tr[0]
    if stage == 0:
        assert min(tr["server_push"]) > 0 and min(tr["server_pull"]) > 0 and tr["vw_sent"][1] > 0, tr
    else:
        assert sum(tr["server_push"]) == sum(tr["server_pull"]) == 0 and tr["vw_sent"][0] > 0, tr
    other = t[(vw, 1 - stage)][-1]
    assert other["e"] == "traffic"
lead, follow = t[(0, 0)][-1], t[(0, 1)][-1]
assert sum(lead["server_push"]) > follow["vw_sent"][0], "a leader pushes the whole model, a follower sends its part"
print(f"traffic: VW 0's leader moved {sum(lead['server_push']) / 3e6:.2f} MB of pushes and folds per wave to the shards, "
      f"its follower {follow['vw_sent'][0] / 3e6:.2f} MB of wave parts to the leader")

def properties(d, num_vw, nm, D, ordered, reach):
    s_global = (D + 1) * nm + (nm - 1) - 1
    tr = traces(d)
    worst = 0
    for (vw, stage), ev in tr.items():
        for e in ev:
            if e["e"] != "start":
                continue
            p, w = e["mb"], e["w"]
            assert has(w, vw, 1, p - nm), f"{d} VW {vw} stage {stage}: minibatch {p} lacks own 1..{p - nm}: {w}"
            for k in range(num_vw):
                assert has(w, k, 1, p - s_global - 1), f"{d} VW {vw}: minibatch {p} lacks VW {k}'s 1..{p - s_global - 1}: {w}"
            assert e["staleness"] <= s_global
            worst = max(worst, e["staleness"])
    assert worst == s_global or not reach, f"{d}: staleness reached {worst}, s_global {s_global}"
    if ordered:  # walk the leaders' hooks in the run's order
        events = sorted(((e["turn"], vw, e) for (vw, stage), ev in tr.items() if stage == 0 for e in ev if "turn" in e),
                        key=lambda x: x[0])
        pushed = [0] * num_vw
        for _, vw, e in events:
            if e["e"] == "push":
                pushed[vw] = e["wave"] + 1
            if e["e"] == "start":
                assert e["c_local"] <= min(pushed) + D, f"{d}: VW {vw} starts {e['mb']} at clock {e['c_local']} with c_global {min(pushed)}"
    print(f"{d}: every minibatch on every stage holds its own 1..p-{nm} and every VW's 1..p-{s_global + 1}; "
          f"staleness at most {worst} (s_global = {s_global})" + ("; c_local <= c_global + D throughout the run's order" if ordered else ""))
properties("example", 2, 4, 0, True, True)
properties("free", 3, 4, 1, False, False)
PY
echo "PASS"
