#!/usr/bin/env python3
"""baton vs PyTorch on the CPU, side by side in one run (issue 25): GPT-2 124M shapes, CNNs.

Run it through launch/cpu-side-by-side.sh, which finds a Python with torch, compiles the sgemm
probe and runs everything with OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset (as on users'
machines). For each case and each of `--repeats` rounds it runs, each in a fresh process:
  - `baton bench` on the case's config (synthetic data), with OMP_NUM_THREADS = --threads;
  - the same training step in PyTorch (Debian's python3-torch 1.13 / python3-torchvision) with
    torch.set_num_threads(--threads) and OMP_NUM_THREADS = OPENBLAS_NUM_THREADS = --threads (torch
    calls OpenBLAS's pthread build for its matmuls; OpenBLAS's pool would otherwise take every core);
    CNNs twice, in NCHW and in channels_last;
  - this machine's OpenBLAS sgemm at 2048^3 with --threads threads (the ceiling the GPT figures are
    compared against; a tiny C program, not torch: see the shell script).
The order inside a round is reversed every other round (baton first, then PyTorch first) so that
neither side always runs right after the other. Each figure is reported as the median of the
rounds with its min-max and spread (half the range over the median); PyTorch's figure for CNNs is
its faster layout by median; the ratio is median(baton) / median(PyTorch), and its range is that of
the per-round ratios (each round's baton over the same round's PyTorch).

The cases:
  - gpt2-124m: baton's GPT (src/model/gpt.h) at GPT-2 124M's shapes, configs/gpt2-124m.toml with
    seq_len 64, batch 4 (one micro-batch), fp32 on the CPU; PyTorch: the same network written out —
    learned positions, pre-LN blocks (LayerNorm eps 1e-5 with bias), fused QKV with bias, causal
    softmax attention, 4x MLP with tanh GELU, final LayerNorm, LM head tied to the token embedding,
    vocabulary padded to a multiple of 128 with the loss over the real columns, no dropout; the
    step: fresh uniform random tokens, forward, cross-entropy, backward, global-norm clipping,
    AdamW (betas, eps, lr, weight decay on 2-D weights only, from configs/gpt2-124m.toml). The
    parameter counts of both sides are printed and checked equal (baton's is read from its log).
  - gpt2-124m-v8k: the same with an 8192-token vocabulary (the shape of docs/benchmarks.md's
    CPU throughput table).
  - gpt-seq1024: the same network at the quickstart's width (4 layers, d_model 256, 4 heads,
    vocabulary 8192) with 1024-token sequences, batch 2: attention's T^2 work is a large share of
    the step (at T = 64 it is ~3%).
  - fashion, resnet50 and the other cases of tests/bench/pytorch_cnn.py: ResNet training steps with
    SGD (Nesterov momentum, weight decay), the model and step described there; `resnet50` is
    ResNet-50 at 224 px, batch 8.

  launch/cpu-side-by-side.sh                                  # gpt2-124m, fashion, resnet50
  launch/cpu-side-by-side.sh --cases fashion --repeats 5 --json sbs.json
  launch/cpu-side-by-side.sh --cases gpt2-124m --steps 3 --warmup 1 --repeats 1   # a quick look

Not a test: nothing is asserted except that both sides build the same number of parameters.
"""
import argparse
import datetime
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import pytorch_cnn  # noqa: E402  (CASES, baton_config, torch_model, torch_images_per_s)

# ResNet-50 at the batch of issue 25's figures (pytorch_cnn's resnet50-224 uses 16).
pytorch_cnn.CASES.setdefault("resnet50", (50, 1.0, 224, 3, 1000, 8, 2, 4))

GPT_CASES = {
    # name: (n_layer, d_model, n_head, seq_len, vocab, batch, warmup, steps)
    "gpt2-124m": (12, 768, 12, 64, 50257, 4, 2, 10),
    "gpt2-124m-v8k": (12, 768, 12, 64, 8192, 4, 2, 10),
    # Long sequences, where attention's T^2 work is a large share of the step.
    "gpt-seq1024": (4, 256, 4, 1024, 8192, 2, 1, 4),
}
DEFAULT_CASES = "gpt2-124m,fashion,resnet50"
GPT_CONFIG = os.path.join(REPO, "configs", "gpt2-124m.toml")


def all_cases():
    return list(GPT_CASES) + list(pytorch_cnn.CASES)


def padded_vocab(v):
    return (v + 127) // 128 * 128


def gpt_param_count(T, L, C, Vp):
    """baton's gpt_parameter_count (src/model/gpt.h): Vp*C + T*C + L*(12C^2 + 13C) + 2C."""
    return Vp * C + T * C + L * (12 * C * C + 13 * C) + 2 * C


def gpt_flops_per_step(B, s, l, h, Vp):
    """baton's gpt_model_flops_per_step (PTD-P): 72*B*s*l*h^2*(1 + s/(6h) + V/(12lh))."""
    return 72.0 * B * s * l * h * h * (1.0 + s / (6.0 * h) + Vp / (12.0 * l * h))


def human_count(x):
    """baton's human_count (src/core/bytes.h), to compare with the count baton logs."""
    if x >= 1e9:
        return "%.2fG" % (x / 1e9)
    if x >= 1e6:
        return "%.2fM" % (x / 1e6)
    if x >= 1e3:
        return "%.1fk" % (x / 1e3)
    return "%.0f" % x


def case_steps(case, a):
    spec = GPT_CASES[case] if case in GPT_CASES else pytorch_cnn.CASES[case]
    warmup, steps = spec[-2], spec[-1]
    return (a.warmup if a.warmup is not None else warmup), (a.steps if a.steps is not None else steps)


def describe(case):
    if case in GPT_CASES:
        L, C, H, T, V, B = GPT_CASES[case][:6]
        return "GPT %d layers, d_model %d, %d heads, seq %d, vocab %d, batch %d, fp32, AdamW" % (L, C, H, T, V, B)
    depth, width, size, chans, classes, batch = pytorch_cnn.CASES[case][:6]
    w = "" if width == 1.0 else " w %g" % width
    return "ResNet-%d%s, %d×%d×%d, %d classes, batch %d, SGD" % (depth, w, size, size, chans, classes, batch)


# ---------------------------------------------------------------------------------------------
# PyTorch side (run in a worker process: python3 cpu_side_by_side.py --worker ...)

def torch_gpt_tokens_per_s(case, threads, warmup, steps):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    sys.path.insert(0, HERE)
    from pytorch_gpt2 import load_hparams  # the optimizer settings of configs/gpt2-124m.toml
    torch.set_num_threads(threads)
    torch.manual_seed(1234)
    L, C, H, T, V, B = GPT_CASES[case][:6]
    Vp = padded_vocab(V)
    hp, _ = load_hparams("124m", GPT_CONFIG)
    hs = C // H
    sdpa = getattr(F, "scaled_dot_product_attention", None)  # torch >= 2.0; 1.13 has none

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1 = nn.LayerNorm(C, eps=1e-5)
            self.qkv = nn.Linear(C, 3 * C)
            self.proj = nn.Linear(C, C)
            self.ln2 = nn.LayerNorm(C, eps=1e-5)
            self.fc = nn.Linear(C, 4 * C)
            self.fc_proj = nn.Linear(4 * C, C)
            self.register_buffer("mask", torch.ones(T, T, dtype=torch.bool).triu(1), persistent=False)

        def forward(self, x):
            B_, T_, _ = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
            q = q.view(B_, T_, H, hs).transpose(1, 2)
            k = k.view(B_, T_, H, hs).transpose(1, 2)
            v = v.view(B_, T_, H, hs).transpose(1, 2)
            if sdpa is not None:
                y = sdpa(q, k, v, is_causal=True)
            else:
                att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
                att = att.masked_fill(self.mask[:T_, :T_], float("-inf")).softmax(dim=-1)
                y = att @ v
            y = y.transpose(1, 2).contiguous().view(B_, T_, C)
            x = x + self.proj(y)
            return x + self.fc_proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(Vp, C)
            self.wpe = nn.Embedding(T, C)
            self.blocks = nn.ModuleList([Block() for _ in range(L)])
            self.lnf = nn.LayerNorm(C, eps=1e-5)

        def forward(self, idx, targets):
            x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
            for block in self.blocks:
                x = block(x)
            logits = F.linear(self.lnf(x), self.wte.weight)[:, :, :V]  # tied head; real columns only
            return F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1))

    model = GPT().train()
    with torch.no_grad():  # baton's init (values do not change the timing; kept for the loss)
        for name, p in model.named_parameters():
            if name.endswith(".bias"):
                p.zero_()
            elif ".ln" in name or name.startswith("lnf"):
                p.fill_(1.0)
            elif name == "wpe.weight":
                p.normal_(0.0, 0.01)
            elif name.endswith("proj.weight"):
                p.normal_(0.0, 0.02 / math.sqrt(2 * L))
            else:
                p.normal_(0.0, 0.02)
    n_params = sum(p.numel() for p in model.parameters())
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": hp["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=hp["lr"], betas=(hp["beta1"], hp["beta2"]), eps=hp["eps"])
    times, losses = [], []
    for step in range(warmup + steps):
        tokens = torch.randint(0, V, (B, T + 1))
        t = time.perf_counter()
        loss = model(tokens[:, :-1], tokens[:, 1:])
        loss.backward()
        if hp["grad_clip"] > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), hp["grad_clip"])
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
        if step >= warmup:
            times.append(time.perf_counter() - t)
    return dict(value=B * T * steps / sum(times), n_params=n_params, loss_first=losses[0], loss_last=losses[-1],
                gflops=gpt_flops_per_step(B, T, L, C, Vp) * steps / sum(times) / 1e9)


def torch_cnn_images_per_s(case, threads, warmup, steps, layout):
    import torch
    spec = list(pytorch_cnn.CASES[case])
    spec[6], spec[7] = warmup, steps
    pytorch_cnn.CASES[case] = tuple(spec)
    depth, width, size, chans, classes = spec[:5]
    torch.set_num_threads(threads)
    n_params = sum(p.numel() for p in pytorch_cnn.torch_model(depth, width, size, chans, classes).parameters())
    value = pytorch_cnn.torch_images_per_s(case, threads, layout == "channels_last")
    return dict(value=value, n_params=n_params)


def worker(a):
    import torch
    if a.case in GPT_CASES:
        r = torch_gpt_tokens_per_s(a.case, a.threads, a.warmup, a.steps)
    else:
        r = torch_cnn_images_per_s(a.case, a.threads, a.warmup, a.steps, a.layout)
    r["torch"] = torch.__version__
    print("RESULT " + json.dumps(r), flush=True)


# ---------------------------------------------------------------------------------------------
# The driver

def run_torch(a, case, layout, warmup, steps):
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads), OPENBLAS_NUM_THREADS=str(a.threads))
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--case", case, "--threads", str(a.threads),
           "--warmup", str(warmup), "--steps", str(steps), "--layout", layout]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    lines = [l for l in p.stdout.splitlines() if l.startswith("RESULT ")]
    if p.returncode != 0 or not lines:
        sys.exit("error: PyTorch run failed (%s):\n%s%s" % (" ".join(cmd), p.stdout, p.stderr))
    return json.loads(lines[-1][len("RESULT "):])


def run_baton(a, case, warmup, steps):
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads))
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "b.json")
        if case in GPT_CASES:
            L, C, H, T, V, B = GPT_CASES[case][:6]
            sets = {"model.n_layer": L, "model.d_model": C, "model.n_head": H, "model.seq_len": T,
                    "model.vocab_size": V, "train.micro_batch": B, "train.global_batch": B,
                    "precision.device": "cpu", "precision.compute": "fp32"}
            cmd = [a.baton, "bench", GPT_CONFIG]
            for k, v in sets.items():
                cmd += ["--set", "%s=%s" % (k, v)]
        else:
            cfg = os.path.join(d, "bench.toml")
            with open(cfg, "w") as f:
                f.write(pytorch_cnn.baton_config(case))
            cmd = [a.baton, "bench", cfg]
        cmd += ["--warmup", str(warmup), "--steps", str(steps)]
        shown = " ".join([os.path.relpath(a.baton, REPO)] + [os.path.relpath(x, REPO) if x == GPT_CONFIG else x
                                                              for x in cmd[1:]])
        cmd += ["--json", out]
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=d)
        if p.returncode != 0 or not os.path.exists(out):
            sys.exit("error: baton run failed (%s):\n%s%s" % (" ".join(cmd), p.stdout, p.stderr))
        res = json.load(open(out))
    m = re.search(r"\| ([0-9.]+[kMG]?) parameters", p.stdout + p.stderr)
    value = res["tokens_per_s"] if case in GPT_CASES else res.get("images_per_s", res["tokens_per_s"])
    return dict(value=value, params_logged=m.group(1) if m else None, loss=[res.get("loss_first"), res.get("loss_last")],
                gflops=res.get("tflops_per_device", 0.0) * 1e3, command=shown)


def run_sgemm(a):
    if not a.sgemm_bin:
        return None
    env = dict(os.environ, OPENBLAS_NUM_THREADS=str(a.threads), OMP_NUM_THREADS=str(a.threads))
    p = subprocess.run([a.sgemm_bin, "2048", "5"], env=env, capture_output=True, text=True)
    vals = [float(l.split()[1]) for l in p.stdout.splitlines() if l.startswith("gflops ")]
    if p.returncode != 0 or not vals:
        print("warning: sgemm probe failed: %s%s" % (p.stdout, p.stderr), file=sys.stderr)
        return None
    info = [l[len("openblas "):] for l in p.stdout.splitlines() if l.startswith("openblas ")]
    a.openblas = info[0] if info else None
    return max(vals)  # the best of 5: the ceiling, not the machine's noise


def lscpu_model():
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        m = re.search(r"^Model name:\s*(.+)$", out, re.M)
        return m.group(1).strip() if m else "unknown CPU"
    except OSError:
        return "unknown CPU"


def cpu_flags():
    try:
        flags = open("/proc/cpuinfo").read().split("flags", 1)[1].split("\n", 1)[0].split()
    except (OSError, IndexError):
        return ""
    keep = [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile") if f in flags]
    return " ".join(keep)


def med(xs):
    return statistics.median(xs)


def fmt_fig(xs, unit_digits):
    f = "%%.%df" % unit_digits
    if len(xs) == 1:
        return f % xs[0]
    return (f + " (" + f + "–" + f + ")") % (med(xs), min(xs), max(xs))


def spread(xs):
    """Half the min-max range, relative to the median."""
    return "±%.0f%%" % (50 * (max(xs) - min(xs)) / med(xs)) if len(xs) > 1 else "—"


def digits(x):
    return 0 if x >= 100 else (1 if x >= 10 else 2)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n", 2)[2])
    ap.add_argument("--cases", default=DEFAULT_CASES, help="comma-separated, of: %s (default %s)"
                    % (", ".join(all_cases()), DEFAULT_CASES))
    ap.add_argument("--threads", type=int, default=2, help="threads of each side (default 2)")
    ap.add_argument("--repeats", type=int, default=3, help="alternating rounds; medians reported (default 3)")
    ap.add_argument("--warmup", type=int, default=None, help="untimed steps of every run (default: per case)")
    ap.add_argument("--steps", type=int, default=None, help="timed steps of every run (default: per case)")
    ap.add_argument("--baton", default=os.path.join(REPO, "build", "baton"))
    ap.add_argument("--json", help="also write every figure (all rounds) here")
    ap.add_argument("--sgemm-bin", help="the sgemm probe (launch/cpu-side-by-side.sh builds it)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--case", help=argparse.SUPPRESS)
    ap.add_argument("--layout", default="nchw", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        return worker(a)

    if a.repeats < 1 or a.threads < 1:
        sys.exit("error: --repeats and --threads must be at least 1")
    cases = [c for c in a.cases.split(",") if c]
    for c in cases:
        if c not in all_cases():
            sys.exit("error: unknown case '%s' (use %s)" % (c, ", ".join(all_cases())))
    if not os.access(a.baton, os.X_OK):
        sys.exit("error: no baton binary at %s (build it, or pass --baton)" % a.baton)
    a.baton = os.path.abspath(a.baton)
    import torch
    import torchvision
    a.openblas = None
    baton_mtime = os.stat(a.baton).st_mtime
    started = datetime.datetime.now()
    load0 = os.getloadavg()
    baton_version = subprocess.run([a.baton, "--version"], capture_output=True, text=True).stdout.strip().splitlines()
    commit = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    ob_env = ", ".join("%s=%s" % (k, os.environ[k]) for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
                       if k in os.environ) or "OPENBLAS_CORETYPE/L2_SIZE unset"
    print("cpu-side-by-side: %s | %d cores (%s) | %d threads each | %d alternating rounds | torch %s, torchvision %s | "
          "%s (%s) | %s" % (lscpu_model(), os.cpu_count(), cpu_flags(), a.threads, a.repeats, torch.__version__,
                                  torchvision.__version__, baton_version[0] if baton_version else "?", commit or "?",
                                  ob_env), flush=True)

    results, sgemm = [], []
    for case in cases:
        warmup, steps = case_steps(case, a)
        gpt = case in GPT_CASES
        layouts = ["nchw"] if gpt else ["nchw", "channels_last"]
        rounds = []
        for r in range(a.repeats):
            s = run_sgemm(a)
            if s:
                sgemm.append(s)
            order = ["baton"] + layouts
            if r % 2 == 1:
                order = order[::-1]
            rnd = {}
            for who in order:
                rnd[who] = run_baton(a, case, warmup, steps) if who == "baton" else run_torch(a, case, who, warmup, steps)
            rounds.append(rnd)
            print("  %s round %d/%d: baton %.1f | %s | sgemm %s GFLOP/s" % (
                case, r + 1, a.repeats, rnd["baton"]["value"],
                " | ".join("torch %s %.1f" % (l, rnd[l]["value"]) for l in layouts),
                "%.0f" % s if s else "n/a"), flush=True)
        # The same network on both sides: PyTorch's exact count against baton's (logged rounded) and,
        # for the GPT, against baton's formula.
        n_torch = rounds[0][layouts[0]]["n_params"]
        logged = rounds[0]["baton"]["params_logged"]
        same = logged is not None and logged == human_count(n_torch)
        if gpt:
            L, C, H, T, V = GPT_CASES[case][:5]
            same = same and n_torch == gpt_param_count(T, L, C, padded_vocab(V))
        if not same:
            sys.exit("error: %s: PyTorch builds %d parameters, baton logs %s" % (case, n_torch, logged))
        b = [x["baton"]["value"] for x in rounds]
        t = {l: [x[l]["value"] for x in rounds] for l in layouts}
        # PyTorch's figure is its faster layout (by median); the ratio and each round's ratio are
        # against that layout.
        best = max(layouts, key=lambda l: med(t[l]))
        round_ratios = [bi / ti for bi, ti in zip(b, t[best])]
        res = dict(case=case, shape=describe(case), unit="tokens/s" if gpt else "images/s", warmup=warmup, steps=steps,
                   params=n_torch, baton_params_logged=logged, baton=b, baton_median=med(b),
                   torch={l: v for l, v in t.items()}, torch_median={l: med(v) for l, v in t.items()},
                   torch_best_layout=best, ratio=med(b) / med(t[best]), round_ratios=round_ratios,
                   baton_command=rounds[0]["baton"]["command"])
        if gpt:
            res["baton_gflops"] = med([x["baton"]["gflops"] for x in rounds])
            res["torch_gflops"] = med([x["nchw"]["gflops"] for x in rounds])
            res["torch_loss"] = [rounds[0]["nchw"]["loss_first"], rounds[0]["nchw"]["loss_last"]]
            res["baton_loss"] = rounds[0]["baton"]["loss"]
        results.append(res)

    load1 = os.getloadavg()
    rebuilt = os.stat(a.baton).st_mtime != baton_mtime
    if rebuilt:
        print("warning: %s changed during the run (rebuilt?): its rounds mix two binaries" % a.baton, file=sys.stderr)
    sg = med(sgemm) if sgemm else None
    day = started.strftime("%Y-%m-%d")
    machine = "%s, %d cores, %d threads each; OpenBLAS sgemm 2048³ (%d threads): %s GFLOP/s" % (
        lscpu_model(), os.cpu_count(), a.threads, a.threads,
        ("%.0f (%.0f–%.0f)" % (sg, min(sgemm), max(sgemm))) if sg else "not measured")
    openblas = " (%s)" % a.openblas.split(" | %d threads" % a.threads)[0] if a.openblas else ""
    print()
    print("**%s**%s, %s; torch %s (Debian), %s; median (min–max) of %d alternating rounds; "
          "load average %.1f at the start, %.1f at the end." % (machine, openblas, day, torch.__version__, ob_env,
                                                               a.repeats, load0[0], load1[0]))
    print()
    print("| case | model, input | params | unit | baton | PyTorch NCHW | PyTorch channels_last | ratio (rounds) "
          "| spread baton / PyTorch |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in results:
        d = digits(r["baton_median"])
        tn = fmt_fig(r["torch"]["nchw"], d)
        tc = fmt_fig(r["torch"]["channels_last"], d) if "channels_last" in r["torch"] else "—"
        rr = r["round_ratios"]
        ratio = "%.2f×" % r["ratio"] + (" (%.2f–%.2f)" % (min(rr), max(rr)) if len(rr) > 1 else "")
        tb = r["torch"][r["torch_best_layout"]]
        print("| %s | %s | %s | %s | %s | %s | %s | %s | %s / %s |" % (
            r["case"], r["shape"], human_count(r["params"]), r["unit"], fmt_fig(r["baton"], d), tn, tc, ratio,
            spread(r["baton"]), spread(tb)))
    for r in results:
        if "baton_gflops" in r:
            print("\n%s: `%s` (PyTorch: the same warm-up and timed steps)." % (r["case"], r["baton_command"]))
            pct = (lambda g: " = %.0f%% of sgemm" % (100 * g / sg)) if sg else (lambda g: "")
            print("\n%s: model FLOP/s by the PTD-P formula, baton %.1f GFLOP/s%s, PyTorch %.1f GFLOP/s%s."
                  % (r["case"], r["baton_gflops"], pct(r["baton_gflops"]), r["torch_gflops"], pct(r["torch_gflops"])))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(tool="launch/cpu-side-by-side.sh", date=started.isoformat(timespec="seconds"),
                           cpu=lscpu_model(), cores=os.cpu_count(), cpu_flags=cpu_flags(), threads=a.threads,
                           repeats=a.repeats, torch=torch.__version__, torchvision=torchvision.__version__,
                           baton_version=baton_version, commit=commit, openblas_env=ob_env, openblas=a.openblas,
                           sgemm_2048_gflops=sgemm, sgemm_2048_gflops_median=sg, load_average=[load0[0], load1[0]], baton_rebuilt_during_run=rebuilt,
                           results=results), f, indent=2)
            f.write("\n")


if __name__ == "__main__":
    main()
