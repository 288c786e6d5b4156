#!/usr/bin/env python3
"""launch/step-time-model.py: the step-time model of baton's bf16 GPT path on one GPU (issue 14 A8).

For each kernel baton's CUDA backend launches in one training step of a GPT (one micro-batch of B
sequences of T tokens, no tensor or pipeline parallelism, activation recomputation off), its FLOPs
and the bytes it moves through HBM, its roofline time on the device — max(FLOPs / (peak x GEMM or
attention efficiency), bytes / (HBM bandwidth x streaming efficiency)) plus a launch overhead — and
the predicted step time and MFU. Part B of issue 14 holds this table against measurements; docs/cuda.md
"Step-time model" carries its output, and every gap > 20% there is to be explained.

The kernel list follows src/model/transformer_block.cpp, embedding.cpp, lm_head.cpp and the
optimizer path as they are (not as they should be), re-derived in session 12 (issue 20 A4) from the
kernels as they now are: flash attention with ldmatrix/cp.async and FlashAttention-2's 5-GEMM
backward whose dQ goes through per-tile-pair fp32 slots and a reduction kernel; the layernorm
backward in one pass over dout and inp (+ a small finish over the partials), adding its input
gradient to the residual's; bias gradients as separate column reductions (16-byte loads, 2 launches
each); AdamW in one launch, then a separate bf16 cast; gradients zeroed by memset; the gradient norm
in two launches and one host synchronisation; the embedding backward's host bucketing (assumed to
overlap the queued GPU work; its pageable copy costs a round trip). The efficiencies are assumptions,
each with its reason below, not measurements: part B replaces them with measured ones.

Usage: python3 launch/step-time-model.py [--device H100-SXM|H200] [--model 124m|1.5b] [--batch B] [--attention flash|cudnn]
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
# Assumed efficiencies (fractions of the dense bf16 peak or of HBM bandwidth), each with its reason:
# - gemm 0.70: cuBLASLt bf16 GEMMs of these sizes (N = B·T = 8k–32k rows, K and M 768–50304) run
#   Hopper wgmma kernels; published H100 cuBLAS figures at such shapes are 600–750 TFLOP/s.
# - attention_fwd 0.23: baton's flash forward is FlashAttention-2's design (mma.sync m16n8k16 with
#   ldmatrix and cp.async; no wgmma/TMA); FA2 itself runs causal head-dim-64 attention at T = 1k at
#   229 TFLOP/s on an H100 SXM5 (FlashAttention-3 paper, Shah et al. 2024, forward-speed figure) =
#   0.23 of 989.
# - attention_bwd 0.18: FA2's backward runs at about 0.75–0.8 of its forward rate (FlashAttention-2
#   paper, Dao 2023, §4: forward up to 73% of A100 peak, backward up to 63%, less at short
#   sequences); baton's adds the dQ slots (written, then summed by a second kernel: streamed below).
# - cudnn_fwd 0.29, cudnn_bwd 0.23 (--attention cudnn): cuDNN's fused attention at the same shape,
#   288 TFLOP/s forward in the same figure; the backward assumed in the flash kernel's ratio.
# - stream 0.80: elementwise and reduction kernels with 16-byte accesses reach ~80% of HBM
#   bandwidth on large arrays.
# A launch costs LAUNCH_S (the kernels are short enough that launch latency shows), a host round
# trip (synchronize + a tiny copy) HOST_SYNC_S.
EFF = dict(gemm=0.70, attention_fwd=0.23, attention_bwd=0.18, cudnn_fwd=0.29, cudnn_bwd=0.23, stream=0.80)
LAUNCH_S = 4e-6
HOST_SYNC_S = 15e-6
BF16, FP32 = 2, 4


def kernels(m, attention="flash"):
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

    def stream(name, count, byts, flops=0.0, launches=1):
        # `count` calls of `byts` each, every call `launches` kernel launches.
        out.append((name, count * launches, flops * count, byts * count, "stream"))

    causal = 0.5
    attn_fwd = 4.0 * B * NH * T * T * HS * causal
    # forward, per block
    stream("layernorm forward (ln1)", L, 2 * N * C * BF16)
    gemm("qkv GEMM + bias (fwd)", N, C, 3 * C, L, False)
    fwd_kind, bwd_kind = ("cudnn_fwd", "cudnn_bwd") if attention == "cudnn" else ("attention_fwd", "attention_bwd")
    out.append(("flash attention forward", L, attn_fwd * L, (N * 3 * C + N * C) * BF16 * L, fwd_kind))
    gemm("proj GEMM + bias (fwd)", N, C, C, L, False)
    stream("residual + layernorm forward (ln2)", L, 4 * N * C * BF16)
    gemm("fc GEMM + bias + GELU epilogue (fwd)", N, C, 4 * C, L, False)
    stream("  fc's pre-GELU output (GELU_AUX)", L, N * 4 * C * BF16)
    gemm("fcproj GEMM + bias (fwd)", N, 4 * C, C, L, False)
    stream("residual forward", L, 3 * N * C * BF16)
    # backward, per block: bias gradients as separate column sums (2 launches each); the layernorm
    # backward reads dout, inp and the residual's gradient once and writes dinp = dres + ... (one
    # kernel + a finish over its partials: 2 launches); flash backward with 5 GEMMs (2.5× the
    # forward's FLOPs) reading q, k, v, o, dO and writing dqkv, its dQ through (nt + 1)/2 fp32 slots
    # per query tile row (written by the main kernel, summed in order by a second one).
    gemm("fcproj GEMM backward (dX with DGELU epilogue, dW)", N, 4 * C, C, L, True)
    gemm("fc GEMM backward (dX, dW)", N, C, 4 * C, L, True)
    stream("bias gradients (4 column sums)", L, N * (3 * C + C + 4 * C + C) * BF16, launches=8)
    stream("layernorm backward (ln2, ln1: one pass + finish)", 2 * L, 4 * N * C * BF16, launches=2)
    gemm("proj GEMM backward (dX, dW)", N, C, C, L, True)
    nt = math.ceil(T / 64)
    if attention == "cudnn":
        out.append(("attention backward (cuDNN)", L, attn_fwd * 2.5 * L,
                    (N * 3 * C * 2 + N * C * 2) * BF16 * L, bwd_kind))
    else:
        # The slots' writes stream out of the compute-bound main kernel (counted in its bytes, under
        # its roofline's max); the reduction kernel reads them back and writes dQ (bf16).
        slots = (nt + 1) / 2 * N * C * FP32
        out.append(("flash attention backward (5 GEMMs, dQ slots written)", L, attn_fwd * 2.5 * L,
                    ((N * 3 * C * 2 + N * C * 2) * BF16 + slots) * L, bwd_kind))
        stream("flash dQ slot reduction", L, slots + N * C * BF16)
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
    out.append(("gradient norm (two launches, one host sync)", 2, 2.0 * P, P * FP32, "norm"))
    stream("AdamW (fp32 master, m, v, grad; one launch)", 1, P * 7 * FP32, 12.0 * P)
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
    "bias gradients (4 column sums)": [("matmul_backward", 0.75), ("matmul_backward_gelu", 0.25)],
    "layernorm backward (ln2, ln1: one pass + finish)": [("layernorm_backward", 1)],
    "proj GEMM backward (dX, dW)": [("matmul_backward", 1)],
    "flash attention backward (5 GEMMs, dQ slots written)": [("attention_backward", 1)],
    "flash dQ slot reduction": [("attention_backward", 1)],
    "attention backward (cuDNN)": [("attention_backward", 1)],
    "qkv GEMM backward (dX, dW)": [("matmul_backward", 1)],
    "embedding forward (wte + wpe)": [("embedding_forward", 1)],
    "LM head GEMM (fwd, logits)": [("matmul_forward", 1)],
    "softmax cross-entropy (fwd + bwd, logits in place)": [("softmax_cross_entropy", 1)],
    "LM head GEMM backward (dX, dW)": [("matmul_backward", 1)],
    "final layernorm fwd + bwd": [("layernorm_forward", 2 / 7), ("layernorm_backward", 5 / 7)],
    "embedding backward (host bucketing + pageable copy)": [("embedding_backward", 1)],
    "zero gradients (memset)": [("zero_bytes", 1)],
    "gradient norm (two launches, one host sync)": [("sum_squares_spans", 1)],
    "AdamW (fp32 master, m, v, grad; one launch)": [("adamw_step_segments", 1)],
    "bf16 copy of the weights (separate cast)": [("cast", 1)],
}


COMPUTE_KINDS = ("gemm", "attention_fwd", "attention_bwd", "cudnn_fwd", "cudnn_bwd")


def roofline(kind, flops, byts, count, peak, bw):
    compute = flops / (peak * 1e12 * EFF[kind]) if flops and kind in COMPUTE_KINDS else 0.0
    memory = byts / (bw * 1e12 * EFF["stream"])
    t = max(compute, memory) + count * LAUNCH_S
    if kind == "host":
        t += HOST_SYNC_S  # the pageable copy of the buckets (the bucketing overlaps the GPU queue)
    if kind == "norm":
        t += HOST_SYNC_S  # the norm is read on the host (the clip factor and the metrics)
    return t, ("compute" if compute >= memory else "memory") if kind != "host" else "host"


def table(device, model, batch=None, attention="flash"):
    peak, bw = DEVICES[device]
    m = dict(MODELS[model])
    if batch:
        m["B"] = batch
    ks, P, N, L = kernels(m, attention)
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
          f"attention at {EFF[('cudnn' if attention == 'cudnn' else 'attention') + '_fwd']:.0%} (forward) and "
          f"{EFF[('cudnn' if attention == 'cudnn' else 'attention') + '_bwd']:.0%} (backward), streaming at {EFF['stream']:.0%} of {bw} TB/s, "
          f"{1e6 * LAUNCH_S:.0f} µs a launch, {1e6 * HOST_SYNC_S:.0f} µs a host round trip.\n")
    return total


def compare(path, model, attention="flash"):
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
    ks, _, _, _ = kernels(m, j.get("attention", attention) if j.get("attention") in ("flash", "cudnn") else attention)
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
    ap.add_argument("--attention", choices=("flash", "cudnn"), default="flash",
                    help="the attention kernel (precision.attention; --compare reads it from the JSON)")
    ap.add_argument("--compare", metavar="BENCH_JSON", default=None,
                    help="the model beside a measured op-time table (BATON_OP_TIMES=1 baton bench --json)")
    a = ap.parse_args()
    if a.compare:
        compare(a.compare, a.model, a.attention)
    elif a.all:
        for model in MODELS:
            for device in DEVICES:
                table(device, model, attention=a.attention)
    else:
        table(a.device, a.model, a.batch, a.attention)


if __name__ == "__main__":
    main()
