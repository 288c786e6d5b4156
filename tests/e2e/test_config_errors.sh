#!/usr/bin/env bash
# Bad configs and bad --set overrides (DESIGN §6): `baton train` exits non-zero, prints one line
# `error: FILE:LINE: ...` naming the key and one line `hint: ...`, never hangs, and writes no run
# directory. Env: BATON (the binary), WORK (scratch directory, recreated).
set -euo pipefail
: "${BATON:?set BATON to the baton binary}"
: "${WORK:?set WORK to a scratch directory}"
rm -rf "$WORK"
mkdir -p "$WORK"
cd "$WORK"

failures=0
fail() {
  echo "FAIL [$1]: $2" >&2
  failures=$((failures + 1))
}

# expect_error NAME WHERE KEY HINT_TEXT -- ARGS...: `baton train ARGS` must fail with an `error: `
# line that contains WHERE (e.g. "bad.toml:3:") and KEY, and a `hint: ` line containing HINT_TEXT.
expect_error() {
  local name=$1 where=$2 key=$3 hint=$4
  shift 5  # the four above and "--"
  local out rc=0
  out=$(timeout 120 "$BATON" train "$@" 2>&1) || rc=$?
  local error_line hint_line
  error_line=$(grep -E '^error: ' <<<"$out" | head -n 1 || true)
  hint_line=$(grep -E '^hint: ' <<<"$out" | head -n 1 || true)
  if [[ $rc -eq 0 ]]; then
    fail "$name" "exit status 0"
  elif [[ $rc -eq 124 ]]; then
    fail "$name" "timed out"
  elif [[ -z $error_line ]]; then
    fail "$name" "no line starting 'error: '"
  elif [[ $error_line != *"$where"* ]]; then
    fail "$name" "error line does not contain '$where': $error_line"
  elif [[ $error_line != *"$key"* ]]; then
    fail "$name" "error line does not name '$key': $error_line"
  elif [[ -z $hint_line ]]; then
    fail "$name" "no line starting 'hint: '"
  elif [[ $hint_line != *"$hint"* ]]; then
    fail "$name" "hint line does not contain '$hint': $hint_line"
  elif grep -q 'terminate called\|Aborted\|Segmentation' <<<"$out"; then
    fail "$name" "crashed instead of reporting"
  elif [[ -e runs/$name ]]; then
    fail "$name" "wrote runs/$name although the config is bad"
  else
    echo "ok   [$name] $error_line"
    return
  fi
  printf '%s\n' "$out" | sed 's/^/    | /' >&2
}

# A config that is valid on its own (for the --set cases).
cat >good.toml <<'EOF'
[model]
n_layer = 2
n_head = 2
d_model = 32
seq_len = 16

[train]
steps = 2

[run]
dir = "runs/good"
EOF

cat >unknown_key.toml <<'EOF'
[run]
dir = "runs/unknown_key"
[model]
n_layer = 2
n_heads = 4
EOF
expect_error unknown_key "unknown_key.toml:5:" "model.n_heads" "model.n_head" -- unknown_key.toml

cat >unknown_section.toml <<'EOF'
[run]
dir = "runs/unknown_section"

[optimizer]
lr = 1e-3
EOF
expect_error unknown_section "unknown_section.toml:4:" "optimizer" "optim" -- unknown_section.toml

cat >wrong_type.toml <<'EOF'
[run]
dir = "runs/wrong_type"
[train]
steps = "100"
EOF
expect_error wrong_type "wrong_type.toml:4:" "train.steps" "steps = " -- wrong_type.toml

cat >out_of_range.toml <<'EOF'
[run]
dir = "runs/out_of_range"
[model]
n_layer = 2

dropout = 1.5
EOF
expect_error out_of_range "out_of_range.toml:6:" "model.dropout" "[0, 1)" -- out_of_range.toml

cat >bad_enum.toml <<'EOF'
[run]
dir = "runs/bad_enum"
[parallel]
schedule = "1f1d"
EOF
expect_error bad_enum "bad_enum.toml:4:" "parallel.schedule" "interleaved" -- bad_enum.toml

cat >heads.toml <<'EOF'
[run]
dir = "runs/heads"
[model]
n_head = 4
d_model = 30
EOF
expect_error heads "heads.toml:5:" "model.d_model" "multiple of 4" -- heads.toml

cat >min_lr.toml <<'EOF'
[run]
dir = "runs/min_lr"
[optim]
min_lr = 1e-2
lr = 1e-3
EOF
expect_error min_lr "min_lr.toml:5:" "optim.min_lr" "min_lr" -- min_lr.toml

cat >syntax.toml <<'EOF'
[run]
dir = "runs/syntax"
[model
n_layer = 2
EOF
expect_error syntax "syntax.toml:3:" "syntax" "TOML" -- syntax.toml

expect_error missing_file "cannot read config" "does_not_exist.toml" "path" -- does_not_exist.toml

expect_error set_unknown_key "--set" "train.stepz" "train.steps" \
  -- good.toml --set train.stepz=5 --set run.dir=runs/set_unknown_key
expect_error set_wrong_type "--set" "train.steps" "steps = " \
  -- good.toml --set run.dir=runs/set_wrong_type --set train.steps=many
expect_error set_out_of_range "--set" "optim.lr" "> 0" \
  -- good.toml --set run.dir=runs/set_out_of_range --set optim.lr=-1
expect_error set_malformed "--set" "steps" "section.key=value" \
  -- good.toml --set run.dir=runs/set_malformed --set steps

# No case may have started a run.
[[ ! -e runs/good ]] || fail good "runs/good exists: a run started despite a bad --set"

if [[ $failures -ne 0 ]]; then
  echo "$failures config error case(s) failed" >&2
  exit 1
fi
echo "all config error cases passed"
