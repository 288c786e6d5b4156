#!/usr/bin/env bash
# baton profile: one entry per layer (embedding, blocks, head) with positive times and the memory
# the layers actually allocate; bad invocations give error/hint lines.
source "$(dirname "$0")/lib.sh"

cat > tiny.toml <<'TOML'
[model]
n_layer = 3
n_head = 2
d_model = 32
seq_len = 16
vocab_size = 500
[train]
micro_batch = 2
global_batch = 2
TOML
"$BATON" profile tiny.toml --out prof.json --repeats 2 > profile.log
python3 - <<'PY'
import json
p = json.load(open("prof.json"))
names = [l["name"] for l in p["layers"]]
assert names == ["embedding", "h.0", "h.1", "h.2", "lm_head"], names
assert all(l["forward_ms"] > 0 and l["backward_ms"] > 0 for l in p["layers"])
C, N, V = 32, 2 * 16, 512
emb = p["layers"][0]
assert emb["params"] == V * C + 16 * C, emb                   # wte (padded vocab) + wpe
assert emb["stash_bytes"] == N * C * 4 and emb["output_bytes"] == N * C * 4
blk = p["layers"][1]
assert blk["params"] == 12 * C * C + 13 * C, blk              # GPT-2 block: 4 matrices + biases + 2 norms
head = p["layers"][-1]
assert head["params"] == 2 * C, head                          # lnf; wte is tied to the embedding
assert head["stash_bytes"] >= N * V * 4                       # the logits are kept for backward
print("profile ok:", round(p["forward_ms"], 3), "ms forward,", round(p["backward_ms"], 3), "ms backward")
PY
expect_error "" "$BATON" profile tiny.toml
expect_error "config" "$BATON" profile missing.toml --out x.json
echo "PASS"
