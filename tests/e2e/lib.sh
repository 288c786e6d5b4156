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

# A small dataset "tiny" (.bin/.idx) with its 300-piece tokenizer "tiny.model".
make_tiny_dataset() {
  make_corpus train.txt 20
  "$BATON" data build --input train.txt --output tiny --train-tokenizer 300 >/dev/null
}
