#!/usr/bin/env bash
# e2e: `baton data build` on generated text. Trains a tokenizer and writes a dataset, reuses the
# tokenizer for a second dataset, checks the MMIDIDX header and document count, and checks that
# bad invocations fail with `error:` / `hint:` lines and leave existing outputs untouched.
# Environment (set by ctest): BATON (binary), WORK (scratch directory).
set -euo pipefail
: "${BATON:?set BATON to the baton binary}"
WORK=${WORK:-$(mktemp -d)}
rm -rf "$WORK"
mkdir -p "$WORK"
cd "$WORK"

fail() { echo "FAIL: $*" >&2; exit 1; }

# 60 pseudo-English documents separated by `<|endoftext|>` lines (deterministic).
awk 'BEGIN {
  srand(7)
  n = split("the jury said that county election was held in a city and new laws", w, " ")
  for (d = 0; d < 60; d++) {
    for (s = 0; s < 5; s++) {
      line = ""
      for (k = 0; k < 12; k++) line = line w[int(rand() * n) + 1] " "
      print line "."
    }
    print "<|endoftext|>"
  }
}' > train.txt
head -n 12 train.txt > valid.txt   # two documents, the second ends at end of file
sed -i '$d' valid.txt

"$BATON" data build --input train.txt --output out/train --train-tokenizer 320 > build.log \
  || { cat build.log; fail "data build with --train-tokenizer failed"; }
for f in out/train.bin out/train.idx out/train.model out/train.vocab; do
  [ -s "$f" ] || fail "$f missing or empty"
done
ls out | grep -q tmp && fail "temporary files left in out/: $(ls out)"
grep -q "60 documents" build.log || { cat build.log; fail "summary does not report 60 documents"; }

# Header: magic, version 1, dtype code 8 (uint16), 60 sequences, 61 document-index entries.
[ "$(head -c 7 out/train.idx)" = "MMIDIDX" ] || fail "bad magic in out/train.idx"
read -r version code sequences documents < <(python3 -c '
import struct, sys
print(*struct.unpack("<QBQQ", open(sys.argv[1], "rb").read(34)[9:]))' out/train.idx)
[ "$version $code $sequences $documents" = "1 8 60 61" ] \
  || fail "header says version=$version dtype=$code sequences=$sequences doc-index=$documents"

"$BATON" data build --input valid.txt --output out/valid --tokenizer out/train.model > valid.log \
  || { cat valid.log; fail "data build with --tokenizer failed"; }
[ -s out/valid.bin ] && [ -s out/valid.idx ] || fail "out/valid.{bin,idx} missing"
[ ! -e out/valid.model ] || fail "--tokenizer must not write a new model"
grep -q "2 documents" valid.log || { cat valid.log; fail "valid set should have 2 documents"; }

# Bad invocations: non-zero exit, `error:` and `hint:` lines, existing outputs untouched.
before=$(cksum out/train.bin out/train.idx out/train.model)
expect_failure() {
  local expect=$1; shift
  if "$BATON" "$@" > bad.out 2> bad.err; then fail "'$*' succeeded"; fi
  grep -q '^error: ' bad.err || { cat bad.err; fail "'$*' printed no error: line"; }
  grep -q '^hint: ' bad.err || { cat bad.err; fail "'$*' printed no hint: line"; }
  grep -q -- "$expect" bad.err || { cat bad.err; fail "'$*' error does not mention $expect"; }
}
expect_failure "missing.txt" data build --input missing.txt --output out/train --train-tokenizer 320
expect_failure "nope.model" data build --input train.txt --output out/train --tokenizer nope.model
expect_failure "too small" data build --input train.txt --output out/train --train-tokenizer 50
expect_failure "train-tokenizer" data build --input train.txt --output out/train
# Binary input (a built dataset, a gzip file, text with an invalid UTF-8 byte) is not text; an
# --output prefix naming an input would overwrite it: refused, nothing written.
expect_failure "out/train.bin is not text: byte .* is NUL" data build --input out/train.bin --output out/x --tokenizer out/train.model
gzip -k -c train.txt > train.txt.gz
expect_failure "train.txt.gz is not text" data build --input train.txt.gz --output out/x --tokenizer out/train.model
{ head -n 3 train.txt; printf 'caf\xe9 latin-1\n'; } > latin1.txt
expect_failure "latin1.txt is not text: byte .* not UTF-8" data build --input latin1.txt --output out/x --tokenizer out/train.model
# Binary data after more than 64 KiB of text (the first 64 KiB were all that was checked, issue 22:
# 175k garbage tokens): NULs, and a gzip member; and a multi-byte character cut by a 1 MiB chunk
# boundary is text.
python3 - <<'PY'
text = open("train.txt", "rb").read()
body = (text * (70_000 // len(text) + 1))[:70_000]
open("tail-nul.txt", "wb").write(body + b"\0" * 4096)
import gzip
open("tail-gz.txt", "wb").write(body + gzip.compress(text))
# A 4-byte character straddling the reader's first 1 MiB chunk (bytes 2^20 - 1 .. 2^20 + 2).
words = (b"plain words " * ((1 << 20) // 12 + 1))[: (1 << 20) - 1]
open("big-utf8.txt", "wb").write(words + "\U0001F600 caf\u00e9 \u2014 end\n".encode())
PY
expect_failure "tail-nul.txt is not text: byte 70000 (0x00) is NUL" data build --input tail-nul.txt --output out/x --tokenizer out/train.model
expect_failure "tail-gz.txt is not text: byte 700" data build --input tail-gz.txt --output out/x --tokenizer out/train.model
expect_failure "tail-nul.txt is not text" data build --input tail-nul.txt --output out/x --train-tokenizer 320
[ ! -e out/x.bin ] && [ ! -e out/x.model ] || fail "a refused input left output files"
"$BATON" data build --input big-utf8.txt --output out/big --tokenizer out/train.model > big.log \
  || { cat big.log; fail "UTF-8 text over several 1 MiB chunks refused"; }
printf 'na\xc3\xafve caf\xc3\xa9 \xe2\x80\x94 UTF-8 text\n' >> valid.txt  # multi-byte UTF-8 is text
"$BATON" data build --input valid.txt --output out/valid2 --tokenizer out/train.model > valid2.log \
  || { cat valid2.log; fail "UTF-8 text refused"; }
# Text with nothing to train a tokenizer on: the reason, not an empty one.
printf '  \n<|endoftext|>\n\n' > blank.txt
expect_failure "hold no text to train a tokenizer on" data build --input blank.txt --output out/blank --train-tokenizer 320
cp train.txt self.bin
expect_failure "would overwrite self.bin" data build --input self.bin --output self --tokenizer out/train.model
cmp -s self.bin train.txt || fail "the refused build changed its input"
[ ! -e out/x.bin ] && [ ! -e out/x.idx ] || fail "a refused build wrote out/x"
[ "$(cksum out/train.bin out/train.idx out/train.model)" = "$before" ] \
  || fail "a failed build changed the existing dataset or tokenizer"

echo "test_data_build: ok"
