# Shared by launch/hetpipe-figures.sh and launch/hetpipe-regime.sh (sourced; they set OUT, BATON, ROOT).

section() { [[ " $SECTIONS " == *" $1 "* ]]; }

# hp_require: the baton binary and the quickstart's Brown datasets exist, else one error + hint.
hp_require() {
  [ -x "$BATON" ] || { echo "error: no baton binary at $BATON" >&2; echo "hint: build it (cmake --build build --target baton) or set BATON" >&2; exit 1; }
  [ -f data/brown/brown-train.bin ] || { echo "error: data/brown/brown-train.bin is missing" >&2; echo "hint: bash launch/quickstart.sh (or the two \`baton data build\` lines of data/README.md)" >&2; exit 1; }
}
#
# hp_job NAME RANKS CONFIG [--set ...]: one `baton train` under mpirun, one OpenMP thread per rank,
# into $OUT/NAME (log $OUT/NAME.log); the exact command goes to $OUT/NAME.cmd for the tables and
# "wall user system" seconds to $OUT/NAME.time. A failed run ends the script with its log's tail.
hp_job() {
  local name=$1 n=$2 config=$3
  shift 3
  local a
  { printf 'mpirun --oversubscribe --bind-to none -n %s -x OMP_NUM_THREADS=1 baton train %s' "$n" "$config"
    for a in "$@"; do
      if [[ $a =~ ^[A-Za-z0-9_./=:,+-]+$ ]]; then printf ' %s' "$a"; else printf " '%s'" "$a"; fi
    done; } > "$OUT/$name.cmd"
  # The CPU seconds of the ranks (mpirun's children) over the wall time: how many of the machine's
  # cores the run kept busy (the emulated slowdown sleeps, so it does not count).
  local TIMEFORMAT="%R %U %S" rc=0
  rm -rf "${OUT:?}/$name"  # a kept run of that name would be resumed from its final checkpoint
  { time OMP_NUM_THREADS=1 mpirun "${ROOT[@]}" --oversubscribe --bind-to none -n "$n" -x OMP_NUM_THREADS "$BATON" \
      train "$config" "$@" --set run.dir="\"$OUT/$name\"" > "$OUT/$name.log" 2>&1 || rc=$?; } 2> "$OUT/$name.time"
  [ "$rc" = 0 ] || { tail -20 "$OUT/$name.log" >&2; echo "error: run $name failed (log: $OUT/$name.log)" >&2; exit 1; }
  echo "$name: $(cut -d' ' -f1 "$OUT/$name.time") s" >&2
}

# hp_cluster_2fast_2slow FILE: the cluster file of both scripts' allocation runs — one node of 2
# TITAN RTX, one of 2 RTX 2060 (2.5x apart in fp32 peak).
hp_cluster_2fast_2slow() {
  cat > "$1" <<'TOML'
# 2 fast + 2 slow GPUs (launch/lib-hetpipe-runs.sh)
name = "2fast-2slow"
inter_node_gbs = 7

[[nodes]]
name = "F"
device = "TITAN-RTX"
gpus = 2
intra_node_gbs = 15.75

[[nodes]]
name = "S"
device = "RTX-2060"
gpus = 2
intra_node_gbs = 15.75
TOML
}

# hp_plan_sets PLAN_JSON FAST SLOW: from `baton plan --format json`'s runnable VWs, two lines —
# the VW list without devices ("0@TITAN-RTX:0-5, 1@RTX-2060:5-6" -> "0:0-5, 1:5-6") and each
# rank's hetero.slowdown (FAST for a TITAN RTX, SLOW for an RTX 2060).
hp_plan_sets() {
  python3 - "$@" <<'PY'
import json, re, sys
vws = json.load(open(sys.argv[1]))["runnable"]["virtual_workers"]
factor = {"TITAN-RTX": float(sys.argv[2]), "RTX-2060": float(sys.argv[3])}
slow = {}
for vw in vws:
    for rank, dev in re.findall(r"(\d+)@([A-Z0-9-]+)", vw):
        slow[int(rank)] = factor[dev]
print(json.dumps([re.sub(r"@[A-Z0-9-]+", "", vw) for vw in vws]))
print(json.dumps([int(slow[r]) if slow[r] == int(slow[r]) else slow[r] for r in range(len(slow))]).replace(" ", ""))
PY
}
