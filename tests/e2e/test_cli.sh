#!/usr/bin/env bash
# The command line: --version lists the build's features, --help works on every subcommand, and
# every bad invocation exits non-zero with an `error:` and a `hint:` line.
source "$(dirname "$0")/lib.sh"

"$BATON" --version > version.txt
for feature in "cuda:" "nccl:" "mpi:" "parallel hdf5:" "blas:"; do
  grep -q "$feature" version.txt || fail "--version lacks '$feature'"
done
for cmd in "" "train" "data" "data build" "data images" "generate"; do
  # shellcheck disable=SC2086
  "$BATON" $cmd --help > help.txt || fail "'baton $cmd --help' failed"
  grep -qi "usage" help.txt || fail "'baton $cmd --help' printed no usage"
done

expect_error "" "$BATON" frobnicate
expect_error "" "$BATON" train
expect_error "" "$BATON" train --bogus-flag x.toml
expect_error "config" "$BATON" train does-not-exist.toml
expect_error "" "$BATON" data build --input a.txt --output out --train-tokenizer 100 --tokenizer m.model
expect_error "--train-tokenizer" "$BATON" data build --input a.txt --output out
expect_error "" "$BATON" generate --prompt hi
expect_error "" "$BATON" generate --checkpoint x --prompt hi --tokens -3
echo "PASS"
