#!/usr/bin/env python3
"""launch/step-time-model.py: the step-time model of baton's bf16 GPT path on one GPU (issue 14 A8).

For each kernel baton's CUDA backend launches in one training step of a GPT (one micro-batch of B
sequences of T tokens, no tensor or pipeline parallelism, activation recomputation off), its FLOPs
and the bytes it moves through HBM, its roofline time on the device — max(FLOPs / (peak x GEMM or
attention efficiency), bytes / (HBM bandwidth x streaming efficiency)) plus a launch overhead — and
the predicted step time and MFU. Part B of issue 14 holds this table against measurements; docs/cuda.md
"Step-time model" carries its output, and every gap > 20% there is to be explained.

The kernel list follows src/model/transformer_block.cpp, embedding.cpp, lm_head.cpp and the
optimizer path as they are (not as they should be): layernorm backward reading the residual's gradient,
bias gradients as separate reductions, AdamW then a separate bf16 cast, gradients zeroed by memset,
the gradient norm with one reduction per parameter tensor and one host synchronisation, the embedding backward's host
bucketing (assumed to overlap the queued GPU work; its pageable copy costs a round trip). The efficiencies are assumptions (named below and in
the output), not measurements: part B replaces them with measured ones.

Usage: python3 launch/step-time-model.py [--device H100-SXM|H200] [--model 124m|1.5b] [--batch B]
       python3 launch/step-time-model.py --all      # the tables of docs/cuda.md
       python3 launch/step-time-model.py --compare BENCH_JSON [--model 124m|1.5b]
The last holds a measured step against the model op by op: BENCH_JSON is `BATON_OP_TIMES=1 baton bench
... --json BENCH_JSON` of the same model (its micro-batch is B; the device, H100 or H200, is read from
it); each model kernel is charged to the backend op that launches it (OP_OF below) and the table gives
per op the predicted and measured milliseconds a step and their ratio.
"""
import argparse
import math

# Dense bf16 peak (TFLOP/s) and HBM bandwidth (TB/s): NVIDIA's data sheets, as in
# src/core/device_table.cpp (H100 SXM5 989.4 / 3.35; H200 989.4 / 4.8).
DEVICES = {"H100-SXM": (989.4, 3.35), "H200": (989.4, 4.8)}
# GPT-2 shapes (vocabulary padded to a multiple of 128, as baton computes it).
MODELS = {"124m": dict(L=12, C=768, NH=12, V=50304, T=1024, B=32),
          "1.5b": dict(L=48, C=1600, NH=25, V=50304, T=1024, B=8)}
# Assumed efficiencies (fractions of peak): cuBLASLt bf16 GEMMs at these sizes; baton's flash
# attention (mma.sync m16n8k16, no wgmma/TMA on sm_90 yet); streaming kernels' share of HBM
# bandwidth; the cost of one kernel launch and of one host round trip (synchronize + tiny copy).
EFF = dict(gemm=0.70, attention=0.35, stream=0.80)
LAUNCH_S = 4e-6
HOST_SYNC_S = 15e-6
BF16, FP32 = 2, 4


def kernels(m):
    """(name, launches per step, FLOPs, bytes, kind) of one training step."""
    L, C, NH, V, T, B = m["L"], m["C"], m["NH"], m["V"], m["T"], m["B"]
    N = B * T
    HS = C // NH
    P = V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C  # parameters (llm.c's count)
    out = []

    def gemm(name, n, k, mout, count, backward):
        # forward: y[n, mout] = x[n, k] W[k, mout]; backward: dx = dy W^T, dW += x^T dy (2 GEMMs)
        flops = 2.0 * n * k * mout * (2 if backward else 1)
        reads = (n * k + k * mout + n * mout) * BF16
        byts = reads * (2 if backward else 1) + (k * mout * FP32 if backward else 0)  # dW in fp32
        out.append((name, count, flops * count, byts * count, "gemm"))

    def stream(name, count, byts, flops=0.0):
        out.append((name, count, flops * count, byts * count, "stream"))

    causal = 0.5
    attn_fwd = 4.0 * B * NH * T * T * HS * causal
    # forward, per block
    stream("layernorm forward (ln1)", L, 2 * N * C * BF16)
    gemm("qkv GEMM + bias (fwd)", N, C, 3 * C, L, False)
    out.append(("flash attention forward", L, attn_fwd * L, (N * 3 * C + N * C) * BF16 * L, "attention"))
    gemm("proj GEMM + bias (fwd)", N, C, C, L, False)
    stream("residual + layernorm forward (ln2)", L, 4 * N * C * BF16)
    gemm("fc GEMM + bias + GELU epilogue (fwd)", N, C, 4 * C, L, False)
    stream("  fc's pre-GELU output (GELU_AUX)", L, N * 4 * C * BF16)
    gemm("fcproj GEMM + bias (fwd)", N, 4 * C, C, L, False)
    stream("residual forward", L, 3 * N * C * BF16)
    # backward, per block (the current code: 7-GEMM flash backward, separate bias reductions; the
    # layernorm backward adds its input gradient to the residual's, dinp = dres + ..., in one pass)
    gemm("fcproj GEMM backward (dX with DGELU epilogue, dW)", N, 4 * C, C, L, True)
    gemm("fc GEMM backward (dX, dW)", N, C, 4 * C, L, True)
    stream("bias gradients (4 reductions)", L, N * (3 * C + C + 4 * C + C) * BF16)
    stream("layernorm backward (ln2, ln1)", 2 * L, 5 * N * C * BF16)
    gemm("proj GEMM backward (dX, dW)", N, C, C, L, True)
    out.append(("flash attention backward (7 GEMMs)", L, attn_fwd * 3.5 * L,
                (N * 3 * C * 2 + N * C * 2) * BF16 * L, "attention"))
    gemm("qkv GEMM backward (dX, dW)", N, C, 3 * C, L, True)
    # embeddings, head, loss
    stream("embedding forward (wte + wpe)", 1, 3 * N * C * BF16)
    gemm("LM head GEMM (fwd, logits)", N, C, V, 1, False)
    stream("softmax cross-entropy (fwd + bwd, logits in place)", 1, 2 * N * V * BF16)
    gemm("LM head GEMM backward (dX, dW)", N, C, V, 1, True)
    stream("final layernorm fwd + bwd", 1, 7 * N * C * BF16)
    # The host buckets the token ids (baton's deterministic order) while the GPU still works through
    # the queued backward, then copies the buckets from pageable memory; on the GPU, dout is read
    # and the fp32 wte rows accumulated.
    out.append(("embedding backward (host bucketing + pageable copy)", 1, 0.0, N * C * (BF16 + 2 * FP32),
                "host"))
    # optimizer and gradient bookkeeping, over the flat buffers
    stream("zero gradients (memset)", 1, P * FP32)
    tensors = 4 + 12 * L + 2  # wte, wpe, final ln (2), 12 per block: one reduction each
    out.append(("gradient norm (a reduction per tensor, one host sync)", tensors, 2.0 * P, P * FP32, "norm"))
    stream("AdamW (fp32 master, m, v, grad)", 1, P * 7 * FP32, 12.0 * P)
    stream("bf16 copy of the weights (separate cast)", 1, P * (FP32 + BF16))
    return out, P, N, L


# The backend op (src/backend/backend.h, as the op-time table names it) that launches each kernel
# of kernels(): [(op, share)]. Bias gradients run inside the matmul backwards; the final layernorm
# splits as its bytes do (forward 2, backward 5 of 7).
OP_OF = {
    "layernorm forward (ln1)": [("layernorm_forward", 1)],
    "qkv GEMM + bias (fwd)": [("matmul_forward", 1)],
    "flash attention forward": [("attention_forward", 1)],
    "proj GEMM + bias (fwd)": [("matmul_forward", 1)],
    "residual + layernorm forward (ln2)": [("residual_layernorm_forward", 1)],
    "fc GEMM + bias + GELU epilogue (fwd)": [("matmul_gelu_forward", 1)],
    "  fc's pre-GELU output (GELU_AUX)": [("matmul_gelu_forward", 1)],
    "fcproj GEMM + bias (fwd)": [("matmul_forward", 1)],
    "residual forward": [("residual_forward", 1)],
    "fcproj GEMM backward (dX with DGELU epilogue, dW)": [("matmul_backward_gelu", 1)],
    "fc GEMM backward (dX, dW)": [("matmul_backward", 1)],
    "bias gradients (4 reductions)": [("matmul_backward", 0.75), ("matmul_backward_gelu", 0.25)],
    "layernorm backward (ln2, ln1)": [("layernorm_backward", 1)],
    "proj GEMM backward (dX, dW)": [("matmul_backward", 1)],
    "flash attention backward (7 GEMMs)": [("attention_backward", 1)],
    "qkv GEMM backward (dX, dW)": [("matmul_backward", 1)],
    "embedding forward (wte + wpe)": [("embedding_forward", 1)],
    "LM head GEMM (fwd, logits)": [("matmul_forward", 1)],
    "softmax cross-entropy (fwd + bwd, logits in place)": [("softmax_cross_entropy", 1)],
    "LM head GEMM backward (dX, dW)": [("matmul_backward", 1)],
    "final layernorm fwd + bwd": [("layernorm_forward", 2 / 7), ("layernorm_backward", 5 / 7)],
    "embedding backward (host bucketing + pageable copy)": [("embedding_backward", 1)],
    "zero gradients (memset)": [("zero_bytes", 1)],
    "gradient norm (a reduction per tensor, one host sync)": [("sum_squares_spans", 1)],
    "AdamW (fp32 master, m, v, grad)": [("adamw_step", 1)],
    "bf16 copy of the weights (separate cast)": [("cast", 1)],
}


def roofline(kind, flops, byts, count, peak, bw):
    eff = EFF["attention"] if kind == "attention" else EFF["gemm"]
    compute = flops / (peak * 1e12 * eff) if flops and kind in ("gemm", "attention") else 0.0
    memory = byts / (bw * 1e12 * EFF["stream"])
    t = max(compute, memory) + count * LAUNCH_S
    if kind == "host":
        t += HOST_SYNC_S  # the pageable copy of the buckets (the bucketing overlaps the GPU queue)
    if kind == "norm":
        t += HOST_SYNC_S  # the norm is read on the host (the clip factor and the metrics)
    return t, ("compute" if compute >= memory else "memory") if kind != "host" else "host"


def table(device, model, batch=None):
    peak, bw = DEVICES[device]
    m = dict(MODELS[model])
    if batch:
        m["B"] = batch
    ks, P, N, L = kernels(m)
    rows, total = [], 0.0
    for name, count, flops, byts, kind in ks:
        t, bound = roofline(kind, flops, byts, count, peak, bw)
        rows.append((name, count, flops, byts, t, bound))
        total += t
    C, T, V = m["C"], m["T"], m["V"]
    model_flops = 72.0 * m["B"] * T * L * C * C * (1 + T / (6.0 * C) + V / (12.0 * L * C))
    flops_6n = (6.0 * P + 6.0 * L * C * T) * N
    print(f"### GPT-2 {model} on {device} (bf16, B = {m['B']}, T = {T}: {N} tokens a step)\n")
    print("| kernel | launches | GFLOP | GB moved | roofline ms | bound | share |")
    print("|---|---|---|---|---|---|---|")
    for name, count, flops, byts, t, bound in rows:
        print(f"| {name} | {count} | {flops / 1e9:.1f} | {byts / 1e9:.2f} | {1e3 * t:.3f} | {bound} | "
              f"{100 * t / total:.1f}% |")
    print(f"\nPredicted step: **{1e3 * total:.1f} ms**, {N / total / 1e3:.0f}k tokens/s; MFU "
          f"**{100 * model_flops / total / (peak * 1e12):.1f}%** by the DESIGN formula "
          f"({model_flops / 1e12:.2f} TFLOP a step), {100 * flops_6n / total / (peak * 1e12):.1f}% by 6N + 6LCT "
          f"(N = {P / 1e6:.1f}M). Assumed: GEMMs at {EFF['gemm']:.0%} of the {peak:.0f} TFLOP/s bf16 peak, "
          f"attention at {EFF['attention']:.0%}, streaming at {EFF['stream']:.0%} of {bw} TB/s, "
          f"{1e6 * LAUNCH_S:.0f} µs a launch, {1e6 * HOST_SYNC_S:.0f} µs a host round trip.\n")
    return total


def compare(path, model):
    """The model's per-op prediction beside a measured op-time table (baton bench --json)."""
    import json
    j = json.load(open(path))
    measured = {r["op"]: r["ms"] for r in j.get("op_times", [])}
    if not measured:
        raise SystemExit(f"error: {path} has no op_times (run baton bench with BATON_OP_TIMES=1)")
    device = "H200" if "H200" in str(j.get("device", "")) else "H100-SXM"
    m = dict(MODELS[model])
    m["B"] = int(j["micro_batch"])
    accum = max(1, int(j["global_batch"]) // int(j["micro_batch"]))
    peak, bw = DEVICES[device]
    ks, _, _, _ = kernels(m)
    predicted = {}
    for name, count, flops, byts, kind in ks:
        t, _ = roofline(kind, flops, byts, count, peak, bw)
        # Per micro-batch kernels run `accum` times a step; the optimizer's once.
        once = name.startswith(("zero gradients", "gradient norm", "AdamW", "bf16 copy"))
        for op, share in OP_OF[name]:
            predicted[op] = predicted.get(op, 0.0) + 1e3 * t * share * (1 if once else accum)
    print(f"### GPT-2 {model}: the model ({device}, B = {m['B']}, {accum} micro-batch(es) a step) against "
          f"{path} ({j.get('device', '?')})\n")
    print("| op | predicted ms | measured ms | measured / predicted |")
    print("|---|---|---|---|")
    tp = tm = 0.0
    for op in sorted(set(predicted) | set(measured), key=lambda o: -measured.get(o, 0.0)):
        p, q = predicted.get(op), measured.get(op)
        tp += p or 0.0
        tm += q or 0.0
        ratio = f"{q / p:.2f}" if p and q is not None else "-"
        print(f"| {op} | {'-' if p is None else f'{p:.3f}'} | {'-' if q is None else f'{q:.3f}'} | {ratio} |")
    print(f"| all ops | {tp:.3f} | {tm:.3f} | {tm / tp:.2f} |" if tp > 0 else "")
    step = j.get("step_ms_median")
    if step:
        print(f"\nMeasured step (median): {step:.3f} ms; outside the ops: {step - tm:.3f} ms.")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", choices=DEVICES, default="H100-SXM")
    ap.add_argument("--model", choices=MODELS, default="124m")
    ap.add_argument("--batch", type=int, default=None, help="sequences per micro-batch (default: 32 / 8)")
    ap.add_argument("--all", action="store_true", help="124M and 1.5B on H100 and H200")
    ap.add_argument("--compare", metavar="BENCH_JSON", default=None,
                    help="the model beside a measured op-time table (BATON_OP_TIMES=1 baton bench --json)")
    a = ap.parse_args()
    if a.compare:
        compare(a.compare, a.model)
    elif a.all:
        for model in MODELS:
            for device in DEVICES:
                table(device, model)
    else:
        table(a.device, a.model, a.batch)


if __name__ == "__main__":
    main()
