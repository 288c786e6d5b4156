#!/usr/bin/env bash
# The README's main job: build baton, fetch the Brown corpus, build the tokenizer and datasets,
# train the quickstart GPT on the CPU (or GPU when available) and sample from it. Steps whose
# outputs already exist are skipped; extra arguments go to `baton train` (e.g. --set train.steps=50).
# RUN_DIR (default runs/quickstart) is where the run writes its config, metrics and checkpoints.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}

if [ ! -x "$BUILD/baton" ]; then
  echo "== building baton ($BUILD)"
  cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DBATON_TESTS=OFF >/dev/null
  cmake --build "$BUILD" -j "$(nproc)" --target baton
fi
BATON="$BUILD/baton"
RUN_DIR=${RUN_DIR:-runs/quickstart}

echo "== corpus"
bash data/fetch-brown.sh data/corpus

mkdir -p data/brown
if [ ! -f data/brown/brown-train.idx ]; then
  echo "== dataset: train (and an 8192-piece BPE tokenizer)"
  "$BATON" data build --input data/corpus/brown-train.txt --output data/brown/brown-train --train-tokenizer 8192
fi
if [ ! -f data/brown/brown-valid.idx ]; then
  echo "== dataset: valid"
  "$BATON" data build --input data/corpus/brown-valid.txt --output data/brown/brown-valid --tokenizer data/brown/brown-train.model
fi

echo "== train"
"$BATON" train configs/quickstart.toml --set run.dir="$RUN_DIR" "$@"

echo "== sample"
"$BATON" generate --checkpoint "$RUN_DIR/ckpt" --prompt "The jury said" --tokens 60
