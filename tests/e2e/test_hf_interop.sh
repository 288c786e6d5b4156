#!/usr/bin/env bash
# Hugging Face GPT-2 interop (issue 24 item 2; docs/checkpoints.md "Hugging Face GPT-2"):
# - a GPT trained under pp = 2 (mpirun) exports with `baton ckpt export --format hf`; an
#   independent PyTorch GPT-2 (tests/e2e/hf_gpt2_torch.py: parses the safetensors itself, no
#   transformers) gives baton's logits (`baton generate --logits`) to 1e-5;
# - export -> import (model.init_from = "hf:DIR", under tp = 2, train.steps = 0 saves the imported
#   weights as step 0) -> export is bit-identical (model.safetensors and config.json);
# - a fine-tuning run from the imported weights, crashed after its checkpoint and resumed, equals
#   the uninterrupted run from the step-0 checkpoint (and the resumed run does not import again);
# - a directory of another shape is refused with a hint (the other refusals: unit/test_hf_gpt2.cpp).
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/lib_checkpoint.sh"
make_tiny_dataset
write_tiny_config
use_mpirun

# A python with PyTorch and numpy (Debian's python3-torch lives in /usr/bin/python3, which may not
# be the python3 on PATH), or nothing.
PY=""
for p in python3 /usr/bin/python3; do
  if "$p" -c "import torch, numpy" 2>/dev/null; then PY=$p; break; fi
done

# ---- a pp = 2 run's checkpoint, exported, against PyTorch ----
"${MPIRUN[@]}" 2 "$BATON" train tiny.toml --set parallel.pp=2 --set train.steps=4 --set checkpoint.every=0 \
  --set run.dir=pp2 > pp2.log 2>&1 || { cat pp2.log; fail "pp=2 training"; }
"$BATON" ckpt export pp2/ckpt --format hf hf1 > export1.log || { cat export1.log; fail "export"; }
grep -q "^exported pp2/ckpt/step-0000004.h5 (step 4) to hf1/: .* vocab 300 (84 padding rows of wte dropped)" export1.log ||
  { cat export1.log; fail "export summary line"; }
[ -s hf1/model.safetensors ] && [ -s hf1/config.json ] || fail "export wrote no model.safetensors / config.json"
"$BATON" generate --checkpoint pp2/ckpt --prompt "The cat saw a river. A dog heard the song." --tokens 1 \
  --temperature 0 --logits logits.json > gen.log || { cat gen.log; fail "generate --logits"; }
if [ -n "$PY" ]; then
  "$PY" "$SRC/tests/e2e/hf_gpt2_torch.py" hf1 logits.json 1e-5 || fail "PyTorch GPT-2 disagrees with baton"
else
  echo "SKIP PyTorch part: no python3 with torch and numpy (apt-get install python3-torch)"
fi

# ---- export -> import under tp = 2 -> export: the same bytes ----
"${MPIRUN[@]}" 2 "$BATON" train tiny.toml --set parallel.tp=2 --set 'model.init_from="hf:hf1"' --set train.steps=0 \
  --set run.dir=rt > rt.log 2>&1 || { cat rt.log; fail "import under tp=2"; }
grep -q "^initialised from hf:hf1 (GPT-2 2 layers, n_embd 32, 4 heads, n_positions 16, vocab 300" rt.log ||
  { cat rt.log; fail "no 'initialised from' line"; }
[ -f rt/ckpt/step-0000000.h5 ] || { cat rt.log; fail "train.steps = 0 saved no step-0 checkpoint"; }
"$BATON" ckpt export rt/ckpt --format hf hf2 > export2.log || { cat export2.log; fail "export of the import"; }
cmp hf1/model.safetensors hf2/model.safetensors || fail "export -> import -> export: model.safetensors differs"
cmp hf1/config.json hf2/config.json || fail "export -> import -> export: config.json differs"

# ---- fine-tuning from the import: crashed after step 3 and resumed = uninterrupted ----
# The uninterrupted run starts from the step-0 checkpoint of the import (train.steps = 0 above): the
# same weights, optimizer state zero. The crashed run imports with model.init_from; its steps before
# the crash, its resume and its end state must all match, and the resumed run must not import again.
"$BATON" train tiny.toml --set train.steps=6 --set checkpoint.every=3 --set 'checkpoint.resume="rt/ckpt/step-0000000.h5"' \
  --set run.dir=ft-ref > ft-ref.log || { cat ft-ref.log; fail "training from the step-0 checkpoint"; }
FT=(--set 'model.init_from="hf:hf1"' --set train.steps=6 --set checkpoint.every=3 --set run.dir=ft)
rc=0
BATON_CKPT_FAIL_AT=before_prune@3 "$BATON" train tiny.toml "${FT[@]}" > ft.log 2>&1 || rc=$?
[ "$rc" -eq 86 ] || { cat ft.log; fail "injected crash: exit $rc, want 86"; }
grep -q "^initialised from hf:hf1" ft.log || { cat ft.log; fail "fine-tuning did not import"; }
"$BATON" train tiny.toml "${FT[@]}" > ft-resumed.log || { cat ft-resumed.log; fail "resume"; }
grep -q "^resumed from ft/ckpt/step-0000003.h5 at step 3 " ft-resumed.log || { cat ft-resumed.log; fail "no resume"; }
! grep -q "initialised from" ft-resumed.log || fail "the resumed run imported the weights again"
same_metrics ft-ref ft || fail "resumed fine-tuning from the import differs from the uninterrupted run"
cmp -s <(tensor_checksums ft-ref/ckpt) <(tensor_checksums ft/ckpt) || fail "fine-tuning: final states differ"

# ---- a directory of another model is refused before training (more cases: unit/test_hf_gpt2.cpp) ----
expect_error "is another model than the config: model.d_model = 64 (config.json n_embd = 32)" \
  "$BATON" train tiny.toml --set 'model.init_from="hf:hf1"' --set model.d_model=64 --set run.dir=bad
grep -q "^hint: set model.n_layer = 2, model.d_model = 32, model.n_head = 4" err.txt || { cat err.txt; fail "shape hint"; }
echo PASS
