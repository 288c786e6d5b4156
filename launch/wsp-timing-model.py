#!/usr/bin/env python3
"""What WSP's rule alone allows: the time a job of pipelined virtual workers would take on devices
that do exactly the profiled compute, stretched by the emulation's factors, with no cost for pushes,
pulls, merges, transfers or the optimizer step (docs/hetpipe.md "What the rule allows").

Written from the papers and docs/hetpipe.md, sharing no code with src/:
- HetPipe §4 inside each VW: stage s admits max(Nm - s, 1) minibatches in flight, forwards and
  backwards each in minibatch order, the last stage runs a minibatch's forward and backward back to
  back; a stage that could run both a backward and a forward runs the backward (the dynamic order).
- WSP (HetPipe §5): wave c is minibatches c*Nm+1 .. (c+1)*Nm; a VW pushes wave c when its first
  stage finishes the backward of (c+1)*Nm; its first stage's forward of (c+2)*Nm waits until
  c_global >= c + 1 - D, i.e. until every VW has pushed wave c - D (the worked example: with D = 0,
  Nm = 4 minibatch 8 waits for every VW's wave 0).
- The emulation (src/train/hetero/compute_stretch.h, as documented there): minibatch p's compute on a
  rank is stretched by slowdown x j(e), e = (p - 1) // span + 1, j(e) = 1 + jitter * u with u from a
  splitmix64 hash of (seed, "compute_stretch", rank, e) — or (seed, "compute_stretch_vw", vw, e) —
  and, with a probability q < 1, j(e) = 1 unless the draw from "..._straggles" is below q. The same
  draws as the run's, so one prediction per run, not an average over seeds.

    python3 launch/wsp-timing-model.py --profile prof.json --vws 4 --stages 2 --nm 4 --minibatches 144 \
        --slowdown 6 --jitter 2 --span 8 --scope rank --seed 1234 --staleness 4 0
prints each D's predicted job minibatches/s (the sum of the VWs' own rates, as the runs' metrics
report them), the first stages' idle seconds per VW, and the ratio to the last D given.
`--self-test` checks the model against the paper's worked example (no other input needed);
`--factors RANK VW N` prints the first N factors of a rank, for comparing with a run's metrics.
"""
import argparse
import json
import sys

M64 = (1 << 64) - 1


def splitmix64(x):
    x = (x + 0x9E3779B97F4A7C15) & M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def mix(parts):
    h = 0x6A09E667F3BCC909
    for p in parts:
        h = splitmix64(h ^ splitmix64(p & M64))
    return h


def fnv1a(s):
    h = 0xCBF29CE484222325
    for c in s.encode():
        h = ((h ^ c) * 0x100000001B3) & M64
    return h


def unit(seed, stream, key, episode):
    return (mix([seed, fnv1a(stream), key, episode]) >> 11) * 2.0**-53


class Emulation:
    """The factor minibatch p's compute is stretched by on a rank (hetero.slowdown, hetero.jitter*)."""

    def __init__(self, slowdown=1.0, jitter=0.0, span=1, scope="rank", probability=1.0, seed=1234):
        self.slowdown, self.jitter, self.span, self.scope = slowdown, jitter, span, scope
        self.probability, self.seed = probability, seed

    def factor(self, rank, vw, p, slowdown=None):
        s = self.slowdown if slowdown is None else slowdown
        if self.jitter == 0:
            return s
        e = (p - 1) // self.span + 1
        key, suffix = (vw, "_vw") if self.scope == "vw" else (rank, "")
        if self.probability < 1 and unit(self.seed, f"compute_stretch{suffix}_straggles", key, e) >= self.probability:
            return s
        return s * (1 + self.jitter * unit(self.seed, f"compute_stretch{suffix}", key, e))


def simulate(stage_ms, vws, nm, minibatches, staleness, emulation, slowdowns=None):
    """Event simulation of `vws` VWs, each the pipeline of stages stage_ms = [(forward ms, backward ms),
    ...] on ranks vw * len(stage_ms) + s. Returns per VW: its rate (minibatches/s), its first stage's
    idle seconds, and the start times of its first stage's forwards and of its pushes."""
    S = len(stage_ms)
    state = [[{"free": 0.0, "nf": 1, "nb": 1} for _ in range(S)] for _ in range(vws)]
    fwd_end = [[{} for _ in range(S)] for _ in range(vws)]
    bwd_end = [[{} for _ in range(S)] for _ in range(vws)]
    pushed = [{} for _ in range(vws)]  # wave -> time
    starts = [{} for _ in range(vws)]  # first stage's forward starts
    idle = [0.0] * vws

    def gate(p):  # the earliest start the rule allows the first stage's forward of p (None: not yet known)
        if p % nm or p < 2 * nm:
            return 0.0
        wave = p // nm - 2 - staleness  # every VW must have pushed this wave
        if wave < 0:
            return 0.0
        times = [pushed[j].get(wave) for j in range(vws)]
        return None if None in times else max(times)

    def duration(i, s, p, backward):
        rank = i * S + s
        f = emulation.factor(rank, i, p, None if slowdowns is None else slowdowns[rank])
        return stage_ms[s][1 if backward else 0] * f / 1000.0

    while True:
        best = None  # (start, 0 = backward / 1 = forward, vw, stage, minibatch, gate)
        for i in range(vws):
            for s in range(S):
                x = state[i][s]
                p = x["nb"]
                if p <= minibatches and p < x["nf"]:
                    ready = fwd_end[i][s].get(p) if s == S - 1 else bwd_end[i][s + 1].get(p)
                    if ready is not None:
                        c = (max(ready, x["free"]), 0, i, s, p, 0.0)
                        best = c if best is None or c[:2] < best[:2] else best
                p = x["nf"]
                in_flight = x["nf"] - x["nb"]
                if p <= minibatches and in_flight < max(nm - s, 1) and not (s == S - 1 and in_flight > 0):
                    ready = 0.0 if s == 0 else fwd_end[i][s - 1].get(p)
                    g = gate(p) if s == 0 else 0.0
                    if ready is not None and g is not None:
                        c = (max(ready, g, x["free"]), 1, i, s, p, g)
                        best = c if best is None or c[:2] < best[:2] else best
        if best is None:
            break
        t, kind, i, s, p, g = best
        x = state[i][s]
        if kind == 1 and s == 0:
            idle[i] += max(0.0, g - max(x["free"], 0.0))
            starts[i][p] = t
        end = t + duration(i, s, p, kind == 0)
        x["free"] = end
        if kind == 0:
            bwd_end[i][s][p] = end
            x["nb"] += 1
            if s == 0 and p % nm == 0:
                pushed[i][p // nm - 1] = end
        else:
            fwd_end[i][s][p] = end
            x["nf"] += 1
    return [{"rate": minibatches / state[i][0]["free"], "idle_s": idle[i], "starts": starts[i], "pushes": pushed[i]}
            for i in range(vws)]


def stages_from_profile(path, boundaries):
    layers = json.load(open(path))["layers"]
    if boundaries is None:  # a GPT's even split: the embedding with the first blocks, the head with the last
        raise SystemExit("give --boundaries (e.g. 0,3,6 for the quickstart GPT on 2 stages)")
    return [(sum(l["forward_ms"] for l in layers[a:b]), sum(l["backward_ms"] for l in layers[a:b]))
            for a, b in zip(boundaries, boundaries[1:])]


def self_test():
    # The paper's worked example (HetPipe §5, docs/hetpipe.md): D = 0, Nm = 4, two VWs of one stage,
    # VW 1 three times slower. VW 0's minibatches 5-7 run before VW 1 pushes wave 0; minibatch 8
    # starts exactly when it does (12 units: 4 minibatches x 3), minibatch 12 when VW 1 pushes wave 1.
    one = [(1000.0 / 3, 2000.0 / 3)]  # 1 s a minibatch
    r = simulate(one, 2, 4, 16, 0, Emulation(), slowdowns=[1, 3])
    v0, v1 = r
    assert abs(v1["pushes"][0] - 12) < 1e-9 and abs(v1["pushes"][1] - 24) < 1e-9, v1["pushes"]
    assert all(v0["starts"][p] < 12 for p in (5, 6, 7)), v0["starts"]
    assert abs(v0["starts"][8] - 12) < 1e-9 and abs(v0["starts"][12] - 24) < 1e-9, v0["starts"]
    assert v0["idle_s"] > 0 and v1["idle_s"] == 0
    # D large enough that no forward waits: each VW at its own speed (1 and 1/3 minibatch/s).
    r = simulate(one, 2, 4, 16, 10, Emulation(), slowdowns=[1, 3])
    assert abs(r[0]["rate"] - 1) < 1e-9 and abs(r[1]["rate"] - 1 / 3) < 1e-9 and r[0]["idle_s"] == 0, r
    # One VW of 2 equal stages (1 s forward + backward each): Nm = 1 is naive model parallelism (2 s a
    # minibatch); Nm = 2 keeps both stages busy (1 s a minibatch after the pipeline fills).
    two = [(1000.0 / 3, 2000.0 / 3)] * 2
    assert abs(simulate(two, 1, 1, 20, 0, Emulation())[0]["rate"] - 0.5) < 1e-9
    rate = simulate(two, 1, 2, 200, 0, Emulation())[0]["rate"]
    assert 0.99 < rate < 1, rate
    # A straggler probability of 1 is the plain draw; below 1, a share of the episodes at the slowdown.
    e1, eq = Emulation(6, 2, 8, "rank", 1.0, 7), Emulation(6, 2, 8, "rank", 0.25, 7)
    fs = [eq.factor(3, 1, p) for p in range(1, 8 * 4000, 8)]
    assert all(f == 6 or f == e1.factor(3, 1, p) for f, p in zip(fs, range(1, 8 * 4000, 8)))
    assert abs(sum(f != 6 for f in fs) / len(fs) - 0.25) < 0.03
    print("wsp-timing-model: self-test passed (worked example, free-running VWs, Nm = 1/2 pipelines, stragglers)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--self-test", action="store_true")
    ap.add_argument("--factors", nargs=3, type=int, metavar=("RANK", "VW", "N"))
    ap.add_argument("--profile", help="`baton profile --out` JSON of the model at the run's micro-batch")
    ap.add_argument("--boundaries", type=lambda s: [int(x) for x in s.split(",")], help="stage boundaries, e.g. 0,3,6")
    ap.add_argument("--vws", type=int, default=4)
    ap.add_argument("--nm", type=int, default=4)
    ap.add_argument("--minibatches", type=int, default=48)
    ap.add_argument("--staleness", type=int, nargs="+", default=[4, 0])
    ap.add_argument("--slowdown", type=float, default=1)
    ap.add_argument("--jitter", type=float, default=0)
    ap.add_argument("--span", type=int, default=1)
    ap.add_argument("--scope", choices=["rank", "vw"], default="rank")
    ap.add_argument("--probability", type=float, default=1)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--json", action="store_true", help="one JSON object per D")
    a = ap.parse_args()
    emu = Emulation(a.slowdown, a.jitter, a.span, a.scope, a.probability, a.seed)
    if a.self_test:
        return self_test()
    if a.factors:
        rank, vw, n = a.factors
        return print(json.dumps([emu.factor(rank, vw, p) for p in range(1, n + 1)]))
    if not a.profile:
        ap.error("--profile is required (or --self-test, --factors)")
    stage_ms = stages_from_profile(a.profile, a.boundaries)
    results = []
    for d in a.staleness:
        r = simulate(stage_ms, a.vws, a.nm, a.minibatches, d, emu)
        results.append({"staleness": d, "job_minibatches_per_s": sum(v["rate"] for v in r),
                        "idle_s_per_vw": sum(v["idle_s"] for v in r) / len(r)})
    base = results[-1]["job_minibatches_per_s"]
    for x in results:
        x["ratio_to_last"] = x["job_minibatches_per_s"] / base
        print(json.dumps(x) if a.json else
              f"D = {x['staleness']}: {x['job_minibatches_per_s']:.3f} job minibatches/s, first stages idle "
              f"{x['idle_s_per_vw']:.2f} s per VW, {x['ratio_to_last']:.3f} x D = {a.staleness[-1]}")


if __name__ == "__main__":
    sys.exit(main())
