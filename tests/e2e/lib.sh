# Shared helpers for e2e tests (sourced). Env: BATON (binary), SRC (source dir), WORK (scratch).
set -euo pipefail
: "${BATON:?}" "${SRC:?}" "${WORK:?}"
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK"

fail() { echo "FAIL: $*" >&2; exit 1; }

# expect_error "substring" cmd...: the command must exit non-zero, print `error: ...substring...`
# and a `hint: ` line on stderr.
expect_error() {
  local want=$1; shift
  local rc=0
  "$@" >out.txt 2>err.txt || rc=$?
  [ "$rc" -ne 0 ] || fail "expected failure: $*"
  grep -q "^error: .*$want" err.txt || { cat err.txt >&2; fail "no 'error: ...$want' from: $*"; }
  grep -q "^hint: " err.txt || { cat err.txt >&2; fail "no hint line from: $*"; }
}

# A small deterministic corpus with learnable structure: sentences from a tiny grammar.
make_corpus() {
  local out=$1 docs=${2:-40}
  python3 - "$out" "$docs" <<'PY'
import random, sys
out, docs = sys.argv[1], int(sys.argv[2])
rng = random.Random(7)
subj = ["the cat", "a dog", "the old man", "my sister", "the jury", "a bird"]
verb = ["saw", "liked", "followed", "heard", "found", "painted"]
obj = ["the house", "a river", "the red car", "an apple", "the city", "a song"]
with open(out, "w") as f:
    for d in range(docs):
        for s in range(30):
            f.write(f"{rng.choice(subj).capitalize()} {rng.choice(verb)} {rng.choice(obj)}. ")
        f.write("\n<|endoftext|>\n")
PY
}

# For tests that launch several ranks: mpirun may run as root (CI) and oversubscribe the cores, one
# OpenMP thread per rank; "${MPIRUN[@]}" N cmd... runs cmd on N ranks.
use_mpirun() {
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
  MPIRUN=(mpirun --oversubscribe -np)
}

# stop_rank DIR RANK: SIGSTOP the process of RANK in a run whose stall watchdog writes heartbeats to
# DIR/.heartbeat (each file starts with "<time> <pid>"); prints its pid (for the kill -9 after).
stop_rank() {
  local dir=$1 rank=$2 pid=""
  for _ in $(seq 1 100); do [ -s "$dir/.heartbeat/rank-$rank" ] && [ -e "$dir/metrics.jsonl" ] && break; sleep 0.2; done
  pid=$(head -1 "$dir/.heartbeat/rank-$rank" 2>/dev/null | cut -d' ' -f2)
  [ -n "$pid" ] || fail "no rank $rank process (no heartbeat in $dir)"
  kill -STOP "$pid"
  echo "$pid"
}

# tiny.toml: a 2-layer GPT on the "tiny" dataset, 20 steps of 8 sequences (4 micro-batches of 2),
# logged every step, checkpointed every 10 (the multi-rank and precision tests' common run).
write_tiny_config() {
  cat > tiny.toml <<'TOML'
[model]
n_layer = 2
n_head = 4
d_model = 32
seq_len = 16
[data]
train = "tiny"
tokenizer = "tiny.model"
[train]
steps = 20
global_batch = 8
micro_batch = 2
log_every = 1
[optim]
lr = 3e-3
warmup_steps = 2
[checkpoint]
every = 10
TOML
}

# tiny.toml as plain SGD (the WSP tests' reductions to data parallelism): lr 0.4, no momentum, weight
# decay, warm-up, decay or clipping, 12 steps, a checkpoint only at the end.
PLAIN_SGD=(--set optim.kind=sgd --set optim.lr=0.4 --set optim.momentum=0 --set optim.weight_decay=0
           --set optim.warmup_steps=0 --set optim.decay=constant --set optim.grad_clip=0 --set train.steps=12
           --set checkpoint.every=0)

# A small dataset "tiny" (.bin/.idx) with its 300-piece tokenizer "tiny.model".
make_tiny_dataset() {
  make_corpus train.txt 20
  "$BATON" data build --input train.txt --output tiny --train-tokenizer 300 >/dev/null
}

# Small IDX image datasets (Fashion-MNIST's format, uncompressed): img.train / lbl.train (N_TRAIN,
# default 256) and img.valid / lbl.valid (64), 12×12 grey images of 10 learnable classes (a bright
# bar whose position is the label, plus noise).
make_tiny_images() {
  python3 - "${1:-256}" <<'PY'
import random, struct, sys
def write(prefix, n, seed):
    rng = random.Random(seed)
    labels = [rng.randrange(10) for _ in range(n)]
    pix = bytearray()
    for y in labels:
        for r in range(12):
            for c in range(12):
                v = rng.randrange(60)
                if r == y + 1 or c == 10 - y: v += 150
                pix.append(min(v, 255))
    open(f"img.{prefix}", "wb").write(struct.pack(">IIII", 0x803, n, 12, 12) + bytes(pix))
    open(f"lbl.{prefix}", "wb").write(struct.pack(">II", 0x801, n) + bytes(labels))
write("train", int(sys.argv[1]), 1)
write("valid", 64, 2)
PY
}

# cnn.toml: a ResNet-18 of width 1/8 with batch norm on those images, SGD with Nesterov momentum,
# 8 steps of 16 images (4 micro-batches of 4), logged every step, evaluated and checkpointed every 4.
write_tiny_cnn_config() {
  cat > cnn.toml <<'TOML'
[model]
kind = "resnet"
n_layer = 18
width = 0.125
image_size = 12
in_channels = 1
classes = 10
[data]
train = "img.train"
train_labels = "lbl.train"
valid = "img.valid"
valid_labels = "lbl.valid"
[train]
steps = 8
global_batch = 16
micro_batch = 4
log_every = 1
eval_every = 4
eval_steps = 2
[optim]
kind = "sgd"
lr = 0.05
momentum = 0.9
nesterov = true
weight_decay = 5e-4
warmup_steps = 2
[checkpoint]
every = 4
TOML
}
