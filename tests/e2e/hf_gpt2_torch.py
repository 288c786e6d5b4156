"""An independent GPT-2 for tests/e2e/test_hf_interop.sh: GPT2LMHeadModel's forward pass written
out in plain PyTorch (no transformers, no safetensors package) on a Hugging Face directory that
`baton ckpt export --format hf` wrote. It parses model.safetensors itself (the format: an 8-byte
little-endian header length, a JSON header, the raw little-endian data), checks the file and
config.json against what transformers expects of a GPT-2, runs the model (float64) on the tokens
of `baton generate --logits` and compares the logits with baton's.

usage: hf_gpt2_torch.py HF_DIR LOGITS_JSON [TOLERANCE]
"""
import json
import math
import struct
import sys

import numpy as np
import torch


def fail(msg):
    sys.exit(f"FAIL: {msg}")


def read_safetensors(path):
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    if n % 8 != 0:
        fail(f"header length {n} is not padded to a multiple of 8")
    header = json.loads(data[8 : 8 + n].decode("utf-8"))
    meta = header.pop("__metadata__", None)
    base = 8 + n
    tensors, spans = {}, []
    for name, e in header.items():
        if e["dtype"] != "F32":
            fail(f"{name}: dtype {e['dtype']}, expected F32")
        begin, end = e["data_offsets"]
        count = (end - begin) // 4
        if count != math.prod(e["shape"]):
            fail(f"{name}: {end - begin} bytes for shape {e['shape']}")
        arr = np.frombuffer(data, dtype="<f4", count=count, offset=base + begin).reshape(e["shape"])
        tensors[name] = torch.from_numpy(arr.astype(np.float64))
        spans.append((begin, end, name))
    # The data section is the tensors back to back (no gaps, no overlaps), in the header's order.
    pos = 0
    for begin, end, name in sorted(spans):
        if begin != pos:
            fail(f"{name} starts at {begin}, expected {pos}")
        pos = end
    if base + pos != len(data):
        fail(f"data section ends at {base + pos}, file has {len(data)} bytes")
    return meta, tensors


def expected_names(n_layer):
    names = {"transformer.wte.weight", "transformer.wpe.weight", "transformer.ln_f.weight", "transformer.ln_f.bias"}
    for i in range(n_layer):
        for p in ("ln_1", "ln_2", "attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"):
            names |= {f"transformer.h.{i}.{p}.weight", f"transformer.h.{i}.{p}.bias"}
    return names


def gelu_new(x):  # transformers' "gelu_new": the tanh approximation
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


def gpt2_logits(w, cfg, tokens):
    C, nh, eps = cfg["n_embd"], cfg["n_head"], cfg["layer_norm_epsilon"]
    hs = C // nh
    T = len(tokens)
    idx = torch.tensor(tokens, dtype=torch.long)
    x = w["transformer.wte.weight"][idx] + w["transformer.wpe.weight"][:T]
    ln = lambda x, p: torch.nn.functional.layer_norm(x, (C,), w[p + ".weight"], w[p + ".bias"], eps)
    conv1d = lambda x, p: x @ w[p + ".weight"] + w[p + ".bias"]  # Conv1D: weight [in, out]
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
    for i in range(cfg["n_layer"]):
        h = f"transformer.h.{i}."
        q, k, v = conv1d(ln(x, h + "ln_1"), h + "attn.c_attn").split(C, dim=-1)
        q, k, v = (t.view(T, nh, hs).transpose(0, 1) for t in (q, k, v))  # [nh, T, hs]
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
        att = torch.softmax(att.masked_fill(~causal, float("-inf")), dim=-1)
        y = (att @ v).transpose(0, 1).reshape(T, C)
        x = x + conv1d(y, h + "attn.c_proj")
        x = x + conv1d(gelu_new(conv1d(ln(x, h + "ln_2"), h + "mlp.c_fc")), h + "mlp.c_proj")
    return ln(x, "transformer.ln_f") @ w["transformer.wte.weight"].T  # lm_head tied to wte


def main():
    hf_dir, logits_path = sys.argv[1], sys.argv[2]
    tol = float(sys.argv[3]) if len(sys.argv) > 3 else 1e-5
    cfg = json.load(open(f"{hf_dir}/config.json"))
    meta, w = read_safetensors(f"{hf_dir}/model.safetensors")
    if meta != {"format": "pt"}:
        fail(f"__metadata__ {meta}: transformers loads files whose format is 'pt'")
    for key, want in (("model_type", "gpt2"), ("architectures", ["GPT2LMHeadModel"]),
                      ("activation_function", "gelu_new"), ("layer_norm_epsilon", 1e-5),
                      ("tie_word_embeddings", True), ("n_inner", None)):
        if cfg.get(key) != want:
            fail(f"config.json {key} = {cfg.get(key)!r}, expected {want!r}")
    names = set(w)
    if names != expected_names(cfg["n_layer"]):
        fail(f"tensor names: missing {sorted(expected_names(cfg['n_layer']) - names)}, "
             f"unexpected {sorted(names - expected_names(cfg['n_layer']))} (lm_head.weight is tied, not stored)")
    C, V, P = cfg["n_embd"], cfg["vocab_size"], cfg["n_positions"]
    shapes = {"transformer.wte.weight": [V, C], "transformer.wpe.weight": [P, C],
              "transformer.h.0.attn.c_attn.weight": [C, 3 * C], "transformer.h.0.mlp.c_fc.weight": [C, 4 * C],
              "transformer.h.0.mlp.c_proj.weight": [4 * C, C]}
    for name, shape in shapes.items():
        if list(w[name].shape) != shape:
            fail(f"{name} has shape {list(w[name].shape)}, GPT2LMHeadModel's is {shape}")
    ref = json.load(open(logits_path))
    baton = torch.tensor(ref["logits"], dtype=torch.float64)
    ours = gpt2_logits(w, cfg, ref["tokens"])
    if ours.shape != baton.shape:
        fail(f"logits shape {tuple(ours.shape)} vs baton's {tuple(baton.shape)}")
    diff = (ours - baton).abs().max().item()
    scale = max(1.0, ours.abs().max().item())
    print(f"PyTorch GPT-2 vs baton: {len(ref['tokens'])} tokens x {V} logits, max |diff| {diff:.3g} "
          f"(max |logit| {ours.abs().max().item():.3g}, tolerance {tol:g} x {scale:.3g})")
    if not diff <= tol * scale:
        fail(f"logits differ by {diff:.3g} > {tol:g} x {scale:.3g}")


if __name__ == "__main__":
    main()
