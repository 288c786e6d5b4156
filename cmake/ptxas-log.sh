#!/usr/bin/env bash
# cmake/ptxas-log.sh DIR COMPILER ARGS...: the CUDA compiler launcher of baton_kernels
# (kernels/CMakeLists.txt, which passes -Xptxas=-v). Runs the compile; ptxas' resource-usage lines
# (registers, shared memory, spills per kernel and architecture) go to DIR/<source>.txt, rewritten
# by each compile of that source — launch/gpu-check.sh --make-bundle puts them into the bundle —
# and everything else to stderr as usual.
dir=$1
shift
tmp=$(mktemp)
"$@" 2> "$tmp"
rc=$?
pattern='^ptxas info|^ptxas *: *info|^ +[0-9]+ bytes stack frame'
grep -v -E "$pattern" "$tmp" >&2
src=""
for a in "$@"; do case $a in *.cu) src=$a ;; esac; done
if [ -n "$src" ]; then
  mkdir -p "$dir"
  grep -E "$pattern" "$tmp" > "$dir/$(basename "$src").txt"
fi
rm -f "$tmp"
exit $rc
