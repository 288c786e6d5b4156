#!/usr/bin/env bash
# The example configs of virtual-worker runs (configs/hetero/*.toml, issue 21 item 6) run as they
# are: each file's header names its mpirun line; that line runs here with the tiny dataset in
# place of the Brown corpus and a few steps, and every virtual worker trains and writes its
# metrics and the checkpoint at the run's end (8 steps: more than D + 1 waves).
source "$(dirname "$0")/lib.sh"
use_mpirun
make_tiny_dataset
TINY=(--set data.train='"tiny"' --set data.valid='"tiny"' --set data.tokenizer='"tiny.model"' --set train.steps=8
      --set train.eval_steps=1 --set model.d_model=64 --set model.seq_len=32)  # the same layers, smaller
for config in "$SRC"/configs/hetero/*.toml; do
  name=$(basename "$config" .toml)
  line=$(grep -m1 '^#   mpirun ' "$config" | sed 's/^#   //') || fail "$name: no mpirun line in its header"
  read -r -a cmd <<< "$line"
  [ "${cmd[0]}" = mpirun ] && [[ " ${cmd[*]} " == *" baton train configs/hetero/$name.toml "* ]] ||
    fail "$name: the header's line is not 'mpirun ... baton train configs/hetero/$name.toml': $line"
  for i in "${!cmd[@]}"; do
    [ "${cmd[$i]}" = baton ] && cmd[$i]=$BATON
    [ "${cmd[$i]}" = "configs/hetero/$name.toml" ] && cmd[$i]=$config
  done
  timeout 300 "${cmd[@]}" "${TINY[@]}" --set run.dir="$name" > "$name.log" 2>&1 ||
    { cat "$name.log"; fail "$name: $line"; }
  n=$(python3 -c "import tomllib; print(len(tomllib.load(open('$config', 'rb'))['hetero'].get('virtual_workers', [])) or 4)")
  for k in $(seq 0 $((n - 1))); do
    f=$name/metrics.jsonl; [ "$k" -gt 0 ] && f=$name/metrics-vw$k.jsonl
    [ "$(wc -l < "$f")" -ge 1 ] || fail "$name: VW $k wrote no metrics"
  done
  ls "$name"/ckpt/wsp-0000008.json > /dev/null || fail "$name: no checkpoint marker at the run's end"
  echo "$name: $line -> $n virtual workers trained, checkpointed"
done
echo "PASS"
