#!/usr/bin/env python3
"""PyTorch baseline for `baton bench` (issue 6): GPT-2 training steps on synthetic tokens.

The same model, optimizer and step as baton's `configs/gpt2-<size>.toml` in bf16:
  - GPT-2: learned positions, pre-LN blocks (LayerNorm eps 1e-5 with bias), fused QKV, causal
    F.scaled_dot_product_attention (flash backend by default), 4x MLP with tanh GELU, final
    LayerNorm, LM head tied to the token embedding (no bias), biases on every Linear, no dropout;
    vocabulary 50257 padded to a multiple of 128 (50304); the loss is cross-entropy over the 50257
    real columns only (as baton's classifier, which ignores the padded columns).
  - Init as baton: N(0, 0.02), residual projections N(0, 0.02/sqrt(2L)), wpe N(0, 0.01).
  - AdamW (fused=True where available): lr schedule, betas (0.9, 0.95), eps 1e-8, weight decay on
    2-D weights only (wte, wpe, Linear weights), global-norm gradient clipping; values read from
    the baton config (configs/gpt2-<size>.toml) when Python has tomllib, else the same values
    built in.
  - bf16 autocast with fp32 master weights, gradients and optimizer state; TF32 allowed for the
    fp32 matmuls that remain; torch.compile(model) (the loss is computed inside the compiled
    module).
  - Synthetic uniform random token ids in [0, vocab) (baton bench's SyntheticTokens), a fresh
    batch for every micro-batch.
  - Timing as baton bench: each step (grad_accum micro-batches + clip + AdamW) timed between
    torch.cuda.synchronize() calls; warm-up steps (which include compilation) are not timed;
    tokens/s and TFLOP/s over the sum of the timed steps; median and min step time.
  - TFLOP/s per GPU by baton's formula (src/train/observe/metrics.cpp, PTD-P, DESIGN §6):
      F = 72 * B * s * l * h^2 * (1 + s/(6h) + V/(12 l h)),  B = sequences per step,
    V = padded vocabulary; MFU against baton's peaks (src/backend/device.cpp): 989 TFLOP/s for a
    GPU whose name contains H100 or H200, 312 for A100, unknown otherwise.

  python3 tests/bench/pytorch_gpt2.py --model 124m --micro-batch 16 --warmup 5 --steps 20 --json out.json
  python3 tests/bench/pytorch_gpt2.py --model 1.5b --find-max-batch --json max.json
"""
import argparse
import datetime
import gc
import json
import math
import os
import statistics
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Shapes (the table) and baton's optimizer settings of configs/gpt2-<size>.toml.
MODELS = {
    "124m": dict(n_layer=12, d_model=768, n_head=12, seq_len=1024, vocab=50257,
                 lr=6e-4, min_lr=6e-5, warmup_steps=10, decay="cosine", weight_decay=0.1,
                 grad_clip=1.0, beta1=0.9, beta2=0.95, eps=1e-8),
    "1.5b": dict(n_layer=48, d_model=1600, n_head=25, seq_len=1024, vocab=50257,
                 lr=2e-4, min_lr=2e-5, warmup_steps=10, decay="cosine", weight_decay=0.1,
                 grad_clip=1.0, beta1=0.9, beta2=0.95, eps=1e-8),
}


def padded_vocab(v):
    return (v + 127) // 128 * 128


def model_flops_per_step(global_batch, s, l, h, v_padded):
    """Baton's gpt_model_flops_per_step (src/train/observe/metrics.cpp), term for term."""
    hd = float(h)
    return 72.0 * global_batch * s * l * hd * hd * (1.0 + s / (6.0 * hd) + v_padded / (12.0 * l * hd))


def peak_tflops_for(name):
    """Baton's peak_tflops_for (src/backend/device.cpp): 0 = unknown."""
    if "A100" in name:
        return 312.0
    if "H100" in name or "H200" in name:
        return 989.0
    return 0.0


def lr_at(step, hp, total_steps):
    """Baton's LrSchedule::at (src/optim/lr_schedule.cpp)."""
    lr, min_lr, warm = hp["lr"], hp["min_lr"], hp["warmup_steps"]
    if step < warm:
        return lr * (step + 1) / warm
    if hp["decay"] == "constant":
        return lr
    span = max(1, total_steps - warm)
    progress = min(max((step - warm) / span, 0.0), 1.0)
    if hp["decay"] == "linear":
        return lr + (min_lr - lr) * progress
    return min_lr + 0.5 * (lr - min_lr) * (1.0 + math.cos(math.pi * progress))


def load_hparams(size, config_path):
    """The built-in table, overridden by the baton config's [model] and [optim] keys if readable."""
    hp = dict(MODELS[size])
    source = "built-in table"
    path = config_path or os.path.join(REPO, "configs", "gpt2-%s.toml" % size)
    try:
        import tomllib  # Python >= 3.11
    except ImportError:
        tomllib = None
    if tomllib is not None and os.path.exists(path):
        with open(path, "rb") as f:
            cfg = tomllib.load(f)
        m, o = cfg.get("model", {}), cfg.get("optim", {})
        for key, toml_key in (("n_layer", "n_layer"), ("d_model", "d_model"), ("n_head", "n_head"),
                              ("seq_len", "seq_len"), ("vocab", "vocab_size")):
            if toml_key in m and m[toml_key]:
                hp[key] = int(m[toml_key])
        for key in ("lr", "min_lr", "weight_decay", "grad_clip", "beta1", "beta2", "eps"):
            if key in o:
                hp[key] = float(o[key])
        if "warmup_steps" in o:
            hp["warmup_steps"] = int(o["warmup_steps"])
        if "decay" in o:
            hp["decay"] = str(o["decay"])
        if o.get("kind", "adamw") != "adamw":
            sys.exit("error: %s: optim.kind = %r; this baseline implements AdamW only" % (path, o["kind"]))
        source = path
    elif config_path:
        sys.exit("error: cannot read %s (needs Python >= 3.11 for tomllib)" % config_path)
    return hp, source


def parse_args(argv):
    p = argparse.ArgumentParser(
        description="PyTorch GPT-2 baseline for baton bench: tokens/s, TFLOP/s (baton's formula), MFU")
    p.add_argument("--model", choices=sorted(MODELS), required=True, help="124m or 1.5b")
    p.add_argument("--config", default=None,
                   help="baton config to take shapes and optimizer settings from "
                        "(default configs/gpt2-<model>.toml)")
    p.add_argument("--micro-batch", type=int, default=None,
                   help="sequences per forward/backward (default 8 for 124m, 1 for 1.5b; "
                        "the start of the search with --find-max-batch)")
    p.add_argument("--grad-accum", type=int, default=1,
                   help="micro-batches per optimizer step (baton: train.global_batch = micro-batch x this)")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps first (compilation happens here)")
    p.add_argument("--steps", type=int, default=20, help="timed steps")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--json", default=None, help="write the results as JSON to this file")
    p.add_argument("--no-compile", action="store_true", help="eager mode (debugging only)")
    p.add_argument("--compile-mode", default=None,
                   help="torch.compile mode (default: torch's default; e.g. max-autotune-no-cudagraphs)")
    p.add_argument("--sdpa-backend", default="flash", choices=["flash", "cudnn", "efficient", "auto"],
                   help="scaled_dot_product_attention backend (default flash)")
    p.add_argument("--find-max-batch", action="store_true",
                   help="find the largest micro-batch that fits: double from --micro-batch until "
                        "out of memory, then bisect")
    p.add_argument("--max-batch", type=int, default=1024, help="--find-max-batch: stop doubling here")
    p.add_argument("--probe-steps", type=int, default=2,
                   help="--find-max-batch: full training steps run at each candidate size")
    a = p.parse_args(argv)
    if a.micro_batch is None:
        a.micro_batch = 8 if a.model == "124m" else 1
    if a.micro_batch < 1 or a.grad_accum < 1 or a.steps < 1 or a.warmup < 0 or a.probe_steps < 1:
        p.error("need --micro-batch >= 1, --grad-accum >= 1, --steps >= 1, --warmup >= 0, --probe-steps >= 1")
    return a


def main(argv):
    args = parse_args(argv)
    hp, hp_source = load_hparams(args.model, args.config)

    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    if not torch.cuda.is_available():
        sys.exit("error: no CUDA device visible to PyTorch")
    device = torch.device("cuda")
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    torch.set_float32_matmul_precision("high")
    torch.manual_seed(args.seed)

    L, C, H, T = hp["n_layer"], hp["d_model"], hp["n_head"], hp["seq_len"]
    V = hp["vocab"]
    Vp = padded_vocab(V)
    if C % H != 0:
        sys.exit("error: d_model %d is not a multiple of n_head %d" % (C, H))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1 = nn.LayerNorm(C, eps=1e-5)
            self.qkv = nn.Linear(C, 3 * C)
            self.proj = nn.Linear(C, C)
            self.ln2 = nn.LayerNorm(C, eps=1e-5)
            self.fc = nn.Linear(C, 4 * C)
            self.fc_proj = nn.Linear(4 * C, C)

        def forward(self, x):
            B_, T_, _ = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
            q = q.view(B_, T_, H, C // H).transpose(1, 2)
            k = k.view(B_, T_, H, C // H).transpose(1, 2)
            v = v.view(B_, T_, H, C // H).transpose(1, 2)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            y = y.transpose(1, 2).contiguous().view(B_, T_, C)
            x = x + self.proj(y)
            x = x + self.fc_proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))
            return x

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(Vp, C)
            self.wpe = nn.Embedding(T, C)
            self.blocks = nn.ModuleList([Block() for _ in range(L)])
            self.lnf = nn.LayerNorm(C, eps=1e-5)

        def forward(self, idx, targets):
            B_, T_ = idx.shape
            pos = torch.arange(T_, device=idx.device)
            x = self.wte(idx) + self.wpe(pos)
            for block in self.blocks:
                x = block(x)
            x = self.lnf(x)
            logits = F.linear(x, self.wte.weight)  # tied LM head, no bias: [B, T, Vp]
            # Cross-entropy over the real vocabulary: the padded columns take no part (baton's
            # classifier ignores them too).
            logits = logits[:, :, :V]
            return F.cross_entropy(logits.reshape(-1, V).float(), targets.reshape(-1))

    with torch.device(device):
        raw = GPT()
    proj_std = 0.02 / math.sqrt(2 * L)
    with torch.no_grad():
        for name, prm in raw.named_parameters():
            if name.endswith(".bias"):
                prm.zero_()
            elif ".ln" in name or name.startswith("lnf"):
                prm.fill_(1.0)
            elif name == "wpe.weight":
                prm.normal_(0.0, 0.01)
            elif name.endswith("proj.weight"):  # attn.proj and mlp fc_proj: the residual projections
                prm.normal_(0.0, proj_std)
            else:
                prm.normal_(0.0, 0.02)
    n_params = sum(p.numel() for p in raw.parameters())

    decay = [p for p in raw.parameters() if p.dim() >= 2]
    no_decay = [p for p in raw.parameters() if p.dim() < 2]
    import inspect
    fused_ok = "fused" in inspect.signature(torch.optim.AdamW).parameters
    opt_kwargs = dict(lr=hp["lr"], betas=(hp["beta1"], hp["beta2"]), eps=hp["eps"])
    if fused_ok:
        opt_kwargs["fused"] = True
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": hp["weight_decay"]},
                                   {"params": no_decay, "weight_decay": 0.0}], **opt_kwargs)

    if not args.no_compile:
        try:  # bisection and a few shapes must not hit dynamo's recompile limit
            import torch._dynamo
            for knob in ("cache_size_limit", "recompile_limit"):
                if hasattr(torch._dynamo.config, knob):
                    setattr(torch._dynamo.config, knob, 64)
        except Exception:
            pass
        model = torch.compile(raw, mode=args.compile_mode) if args.compile_mode else torch.compile(raw)
    else:
        model = raw

    def sdpa_context():
        if args.sdpa_backend == "auto":
            import contextlib
            return contextlib.nullcontext()
        try:
            from torch.nn.attention import SDPBackend, sdpa_kernel
            backend = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
                       "efficient": SDPBackend.EFFICIENT_ATTENTION}[args.sdpa_backend]
            return sdpa_kernel(backend)
        except (ImportError, AttributeError):
            if args.sdpa_backend == "cudnn":
                sys.exit("error: this torch has no cuDNN SDPA backend selection")
            return torch.backends.cuda.sdp_kernel(enable_flash=args.sdpa_backend == "flash",
                                                  enable_math=False,
                                                  enable_mem_efficient=args.sdpa_backend == "efficient")

    gen = torch.Generator(device=device)
    gen.manual_seed(args.seed)

    def train_step(step, micro_batch, grad_accum, total_steps):
        """One optimizer step: grad_accum forward/backward passes, clipping, AdamW. Returns the
        mean loss as a device tensor (no host synchronisation)."""
        loss_sum = None
        for _ in range(grad_accum):
            tokens = torch.randint(0, V, (micro_batch, T + 1), device=device, generator=gen)
            x, y = tokens[:, :-1], tokens[:, 1:]
            with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
                loss = model(x, y)
            (loss / grad_accum).backward()
            loss_sum = loss.detach() if loss_sum is None else loss_sum + loss.detach()
        if hp["grad_clip"] > 0:
            torch.nn.utils.clip_grad_norm_(raw.parameters(), hp["grad_clip"])
        lr = lr_at(step, hp, total_steps)
        for group in optimizer.param_groups:
            group["lr"] = lr
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss_sum / grad_accum

    gpu_name = torch.cuda.get_device_name(0)
    peak = peak_tflops_for(gpu_name)
    info = {
        "tool": "tests/bench/pytorch_gpt2.py",
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": " ".join([os.path.basename(sys.executable) or "python3"] + [sys.argv[0]] + list(argv)),
        "gpu": gpu_name,
        "gpu_memory_gib": torch.cuda.get_device_properties(0).total_memory / 2**30,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": sys.version.split()[0],
        "model": args.model,
        "hparams_from": hp_source,
        "n_layer": L, "d_model": C, "n_head": H, "seq_len": T, "vocab": V, "vocab_padded": Vp,
        "n_params": n_params,
        "compile": not args.no_compile,
        "compile_mode": args.compile_mode or "default",
        "sdpa_backend": args.sdpa_backend,
        "adamw_fused": fused_ok,
        "precision": "bf16 autocast, fp32 master weights, TF32 allowed",
        "lr": hp["lr"], "min_lr": hp["min_lr"], "warmup_steps": hp["warmup_steps"], "decay": hp["decay"],
        "betas": [hp["beta1"], hp["beta2"]], "eps": hp["eps"], "weight_decay": hp["weight_decay"],
        "grad_clip": hp["grad_clip"],
        "peak_tflops": peak if peak > 0 else None,
    }
    print("pytorch_gpt2: %s | %s | torch %s (CUDA %s) | GPT %d layers, d_model %d, %d heads, seq %d, "
          "vocab %d (padded %d) | %.2fM parameters | compile %s | sdpa %s | AdamW fused %s | hparams: %s"
          % (args.model, gpu_name, torch.__version__, torch.version.cuda, L, C, H, T, V, Vp, n_params / 1e6,
             info["compile_mode"] if info["compile"] else "off", args.sdpa_backend, fused_ok, hp_source),
          flush=True)

    def write_json(obj):
        if args.json:
            d = os.path.dirname(os.path.abspath(args.json))
            os.makedirs(d, exist_ok=True)
            with open(args.json, "w") as f:
                json.dump(obj, f, indent=2)
                f.write("\n")

    if args.find_max_batch:
        return find_max_batch(args, info, train_step, optimizer, sdpa_context, torch, write_json)

    # ---- timed run ----
    if args.warmup < 2 and not args.no_compile:
        print("warning: --warmup %d: torch.compile compiles the forward in the first step and the "
              "backward in its backward pass; use --warmup >= 2 so no compilation is timed" % args.warmup)
    B, A = args.micro_batch, args.grad_accum
    global_batch = B * A
    tokens_per_step = global_batch * T
    flops = model_flops_per_step(global_batch, T, L, C, Vp)
    total_steps = args.warmup + args.steps
    seconds, losses = [], []
    torch.cuda.reset_peak_memory_stats()
    compile_s = None
    with sdpa_context():
        for step in range(total_steps):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            loss = train_step(step, B, A, total_steps)
            torch.cuda.synchronize()
            dt = time.perf_counter() - t0
            losses.append(loss.item())
            if step == 0:
                compile_s = dt
            if step >= args.warmup:
                seconds.append(dt)
    total = sum(seconds)
    n = len(seconds)
    tokens_per_s = tokens_per_step * n / total
    tflops = flops * n / total / 1e12
    res = dict(info)
    res.update({
        "micro_batch": B, "grad_accum": A, "global_batch": global_batch,
        "tokens_per_step": tokens_per_step, "warmup": args.warmup, "steps": args.steps,
        "first_step_s": compile_s,
        "median_step_ms": 1e3 * statistics.median(seconds),
        "min_step_ms": 1e3 * min(seconds),
        "mean_step_ms": 1e3 * total / n,
        "tokens_per_s": tokens_per_s,
        "flops_per_step": flops,
        "tflops_per_gpu": tflops,
        "mfu": tflops / peak if peak > 0 else None,
        "peak_memory_gib": torch.cuda.max_memory_allocated() / 2**30,
        "peak_memory_reserved_gib": torch.cuda.max_memory_reserved() / 2**30,
        "loss_first": losses[0], "loss_last": losses[-1],
    })
    print("bench: %d warm-up + %d timed steps on synthetic tokens | %d tokens/step = %d x %d micro-batches x %d seq "
          "| loss %.4f -> %.4f | first step %.1f s (compilation)"
          % (args.warmup, args.steps, tokens_per_step, A, B, T, losses[0], losses[-1], compile_s))
    print("step time: median %.1f ms, min %.1f ms, mean %.1f ms (over %d timed steps)"
          % (res["median_step_ms"], res["min_step_ms"], res["mean_step_ms"], n))
    print("throughput: %.1f tokens/s | %.3f TFLOP/s per GPU (model FLOPs by baton's PTD-P formula, %.4g per step)"
          % (tokens_per_s, tflops, flops))
    if peak > 0:
        print("mfu: %.1f%% of the %.0f TFLOP/s peak of %s" % (100 * tflops / peak, peak, gpu_name))
    else:
        print("mfu: not reported: the peak of %s is unknown" % gpu_name)
    print("memory: peak allocated %.2f GiB, peak reserved %.2f GiB (torch.cuda.max_memory_*)"
          % (res["peak_memory_gib"], res["peak_memory_reserved_gib"]))
    print("RESULT " + json.dumps({k: res[k] for k in ("model", "micro_batch", "grad_accum", "tokens_per_s",
                                                       "tflops_per_gpu", "mfu", "median_step_ms", "gpu")}))
    write_json(res)
    return 0


def is_oom(exc, torch):
    if isinstance(exc, torch.cuda.OutOfMemoryError):
        return True
    # torch.compile may wrap the allocator's error (e.g. BackendCompilerFailed during autotuning).
    text = str(exc).lower()
    return "out of memory" in text or "cuda_error_out_of_memory" in text


def find_max_batch(args, info, train_step, optimizer, sdpa_context, torch, write_json):
    """Doubling from --micro-batch until a try runs out of memory, then bisection. A try is
    --probe-steps full training steps (forward, backward, clip, AdamW: the optimizer state is
    allocated by the first and kept, as in a real run). The compiled model recompiles once with a
    dynamic batch dimension after the first shape change (torch.compile's automatic dynamic
    shapes), so the timed run at the found size (static shapes) should be checked to fit too."""
    tried = []

    def fits(b):
        ok, err = True, None
        try:
            for i in range(args.probe_steps):
                loss = train_step(i, b, 1, args.probe_steps)
            torch.cuda.synchronize()
            loss = float(loss.item())
            if not math.isfinite(loss):
                raise RuntimeError("non-finite loss %r at micro-batch %d" % (loss, b))
        except Exception as e:  # noqa: BLE001 -- only out-of-memory errors are expected here
            if not is_oom(e, torch):
                raise
            ok, err = False, str(e).splitlines()[0][:200]
        peak = torch.cuda.max_memory_allocated() / 2**30
        optimizer.zero_grad(set_to_none=True)
        gc.collect()
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        tried.append({"micro_batch": b, "fits": ok, "peak_memory_gib": peak, "error": err})
        print("find-max-batch: micro-batch %d: %s (peak allocated %.2f GiB)"
              % (b, "fits" if ok else "out of memory: " + err, peak), flush=True)
        return ok

    lo, hi = 0, None  # lo: largest size seen to fit; hi: smallest size seen not to
    b = args.micro_batch
    with sdpa_context():
        while True:
            if fits(b):
                lo = b
                if b >= args.max_batch:
                    break
                b = min(2 * b, args.max_batch)
            else:
                hi = b
                break
        if hi is not None:
            if lo == 0 and hi > 1:  # the starting size did not fit: search below it
                lo_try = hi // 2
                while lo_try >= 1 and not fits(lo_try):
                    hi = lo_try
                    lo_try //= 2
                lo = max(lo_try, 0)
            while lo >= 1 and hi - lo > 1:
                mid = (lo + hi) // 2
                if fits(mid):
                    lo = mid
                else:
                    hi = mid
    res = dict(info)
    res.update({"mode": "find-max-batch", "max_micro_batch": lo if lo >= 1 else None,
                "first_oom_micro_batch": hi, "capped_at": args.max_batch if hi is None else None,
                "probe_steps": args.probe_steps, "tried": tried})
    if lo >= 1:
        print("find-max-batch: largest micro-batch that fits: %d%s" %
              (lo, " (the --max-batch cap; none ran out of memory)" if hi is None
               else " (%d ran out of memory)" % hi))
    else:
        print("find-max-batch: not even micro-batch 1 fits")
    print("RESULT " + json.dumps({"model": args.model, "max_micro_batch": res["max_micro_batch"],
                                  "first_oom_micro_batch": hi, "gpu": info["gpu"]}))
    write_json(res)
    return 0 if lo >= 1 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
