# Shared by the checkpoint e2e tests (sourced after lib.sh): tiny datasets, a tiny config, and
# helpers to compare runs. Not a test itself (not named test_*.sh).

# tiny-train / tiny-valid datasets and tiny.toml: 20 steps, eval every 10, log every step, two
# micro-batches per step, a checkpoint every 10 steps.
make_tiny_run() {
  make_corpus train.txt 40
  make_corpus valid.txt 4
  "$BATON" data build --input train.txt --output tiny-train --train-tokenizer 300 >/dev/null
  "$BATON" data build --input valid.txt --output tiny-valid --tokenizer tiny-train.model >/dev/null
  cat > tiny.toml <<'TOML'
[model]
n_layer = 2
n_head = 2
d_model = 32
seq_len = 32
[data]
train = "tiny-train"
valid = "tiny-valid"
tokenizer = "tiny-train.model"
[train]
steps = 20
global_batch = 8
micro_batch = 4
log_every = 1
eval_every = 10
eval_steps = 2
[optim]
lr = 1e-2
min_lr = 1e-3
warmup_steps = 5
[checkpoint]
every = 10
[run]
dir = "run"
TOML
}

# same_metrics A B: the runs' metrics.jsonl hold the same steps with bit-identical loss, grad norm,
# lr and val_loss (timings aside).
same_metrics() {
  python3 - "$1/metrics.jsonl" "$2/metrics.jsonl" <<'PY'
import json, sys
a, b = ([json.loads(l) for l in open(p)] for p in sys.argv[1:3])
keys = ("step", "loss", "grad_norm", "lr", "val_loss")
ka = [tuple(r.get(k) for k in keys) for r in a]
kb = [tuple(r.get(k) for k in keys) for r in b]
if ka != kb:
    for x, y in zip(ka, kb):
        if x != y:
            sys.exit(f"metrics differ: {x} vs {y}")
    sys.exit(f"metrics differ in length: {len(ka)} vs {len(kb)}")
print(f"{len(ka)} steps identical: {sys.argv[1]} == {sys.argv[2]}")
PY
}

# The tensor lines of `baton ckpt inspect` (name, shape, dtype, checksum): equal iff the states are.
tensor_checksums() { "$BATON" ckpt inspect "$1" | grep -E '^  (params|optim|buffers)/'; }

# A python with h5py and numpy, or nothing (Debian's python3-h5py lives in /usr/bin/python3, which
# may not be the python3 on PATH).
h5py_python() {
  local p
  for p in python3 /usr/bin/python3; do
    if "$p" -c "import h5py, numpy" 2>/dev/null; then echo "$p"; return; fi
  done
}

# wait_for FILE PATTERN: up to 60 s for PATTERN to appear in FILE.
wait_for() {
  for _ in $(seq 600); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
  cat "$1" >&2
  fail "timed out waiting for '$2' in $1"
}
