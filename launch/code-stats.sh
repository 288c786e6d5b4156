#!/usr/bin/env bash
# The size of the runtime, as issues 11 and 21 measure it: lines of src/train + src/model +
# src/pipeline (every line of their .h/.cpp/.cu files), of the virtual-worker runtime (the WSP and
# wave all-reduce code, VW rows and the device emulation: wsp_*, virtual_worker*, wave_allreduce*,
# vw_rows*, compute_stretch* under src/train), the longest functions of src/ and how many are over
# 80 lines (Universal Ctags' start and end lines of every function, lambdas included, in
# .h/.cpp/.cu files).
#
#   bash launch/code-stats.sh            # the working tree
#   bash launch/code-stats.sh REV [TOP]  # a git revision (e.g. a14b86b^), TOP longest functions (5)
set -euo pipefail
cd "$(dirname "$0")/.."
command -v ctags > /dev/null || { echo "code-stats: needs Universal Ctags (apt-get install universal-ctags)" >&2; exit 1; }
rev=${1:-}
top=${2:-5}
tree=.
if [ -n "$rev" ]; then
  tree=$(mktemp -d)
  trap 'rm -rf "$tree"' EXIT
  git archive "$rev" src | tar -x -C "$tree"
fi
label=${rev:-working tree}
sources() { find "$@" -type f \( -name '*.h' -o -name '*.cpp' -o -name '*.cu' \) 2> /dev/null | sort; }
cd "$tree"
runtime=$(sources src/train src/model src/pipeline | xargs cat | wc -l)
echo "$label: src/train + src/model + src/pipeline = $runtime lines"
for d in src/train src/model src/pipeline; do
  printf '  %-13s %6d lines\n' "$d" "$(sources "$d" | xargs cat | wc -l)"
done
vw=$(find src/train -type f \( -name 'wsp_*' -o -name 'virtual_worker*' -o -name 'wave_allreduce*' -o -name 'vw_rows*' \
  -o -name 'compute_stretch*' \) | sort | xargs cat | wc -l)
echo "$label: the virtual-worker runtime (src/train: wsp_*, virtual_worker*, wave_allreduce*, vw_rows*, compute_stretch*) = $vw lines"
# ctags' line:/end: fields; a function nested in another (a lambda) is counted on its own too.
functions=$(sources src | xargs ctags --c++-kinds=f --language-force=C++ --fields=+ne -o - 2> /dev/null |
  awk -F'\t' '{
    start = ""; end = ""
    for (i = 4; i <= NF; i++) {
      if ($i ~ /^line:/) start = substr($i, 6)
      if ($i ~ /^end:/) end = substr($i, 5)
    }
    if (start != "" && end != "") printf "%d %s:%s %s\n", end - start + 1, $2, start, $1
  }' | sort -rn)
echo "$label: $(echo "$functions" | awk '$1 > 80' | wc -l) functions of src/ over 80 lines; the $top longest (lines, start to end)"
echo "$functions" | head -n "$top" | awk '{ printf "  %5d  %s  %s\n", $1, $2, $3 }'
