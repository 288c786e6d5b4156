# Sourced by launch/gpu-check.sh and launch/gpu-first-run.sh: the pieces of a GPU run that must
# fit one short call on a node with only the driver and CUDA. The caller sets BUNDLE, OUT,
# SUMMARY (the file every result line is appended to), DEADLINE and PROGRAM_S (seconds), then
# calls gpu_run_start; results accumulate in `failures`.

gpu_run_start() {
  mkdir -p "$OUT"
  : > "$SUMMARY"
  t0=$(date +%s)
  failures=()
}
say() { echo "$*" | tee -a "$SUMMARY"; }
stop() { say "${STOP_NAME:-gpu-check}: STOPPED in preflight: $1"; say "hint: $2"; exit 2; }
# Seconds for the next step: `want`, clipped to what the deadline leaves (0: none left).
budget() { local left=$(( DEADLINE - ($(date +%s) - t0) )); (( left < $1 )) && echo $(( left > 0 ? left : 0 )) || echo "$1"; }
elapsed() { echo $(( $(date +%s) - t0 )); }

# Highest GLIBC_x.y symbol version a set of ELF files needs (empty: none found or no objdump).
glibc_needed() {
  command -v objdump > /dev/null || return 0
  objdump -T "$@" 2> /dev/null | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -V -u | tail -1
}
node_glibc() {
  getconf GNU_LIBC_VERSION 2> /dev/null | awk '{print $2}' || true
}

# Preflight, stopping at once with the reason: nvidia-smi works; the driver's CUDA is at least the
# build's (major); the node's glibc is at least what the bundle needs (bundle.sh records it); every
# bundled program finds every library and every symbol version (ldd through the bundle's wrapper
# environment: "=> not found" and "version `...' not found" alike).
preflight() {
  [ -x "$BUNDLE/run" ] || stop "$BUNDLE is not a bundle with test programs" \
    "on the build machine: bash launch/gpu-check.sh --make-bundle build bundle"
  nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1 || stop "nvidia-smi failed: $(head -2 "$OUT/nvidia-smi.txt" | tr '\n' ' ')" \
    "is the NVIDIA driver loaded and a GPU visible to this job (CUDA_VISIBLE_DEVICES)?"
  local gpu driver_cuda build_cuda need have
  gpu=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -1)
  driver_cuda=$(grep -o 'CUDA Version: *[0-9.]*' "$OUT/nvidia-smi.txt" | grep -o '[0-9.]*$')
  build_cuda=$(cat "$BUNDLE/build-cuda.txt" 2> /dev/null)
  have=$(node_glibc)
  need=$(cat "$BUNDLE/glibc-needed.txt" 2> /dev/null)
  say "gpu: $gpu | driver supports CUDA ${driver_cuda:-?} | built with CUDA ${build_cuda:-?} | glibc ${have:-?} (bundle needs ${need:-?}) | $(date -u +%FT%TZ)"
  if [ -n "$driver_cuda" ] && [ -n "$build_cuda" ]; then
    if (( ${driver_cuda%%.*} < ${build_cuda%%.*} )); then
      stop "the driver supports CUDA $driver_cuda, older than the build's $build_cuda" \
        "update the driver, or build with a CUDA $driver_cuda toolkit"
    elif [ "$(printf '%s\n%s\n' "$driver_cuda" "$build_cuda" | sort -V | head -1)" != "$build_cuda" ]; then
      say "preflight: note: driver CUDA $driver_cuda < build CUDA $build_cuda (same major: minor-version compatibility)"
    fi
  fi
  if [ -n "$have" ] && [ -n "$need" ] && [ "$(printf '%s\n%s\n' "$have" "$need" | sort -V | head -1)" != "$need" ]; then
    stop "this node's glibc $have is older than the $need the bundle's programs need" \
      "build the bundle on a system with glibc <= $have (e.g. a container of the node's distribution)"
  fi
  local missing
  missing=$(here=$(cd "$BUNDLE" && pwd); export LD_LIBRARY_PATH="$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
            . "$here/node-libs.sh" 2> "$OUT/node-libs.log"
            for b in "$here"/bin/*; do
              ldd "$b" 2>&1 | sed -n -e "s|^\s*\(\S*\) => not found|$(basename "$b"): \1|p" \
                                    -e "s|^.*: \(version .* not found\) (required by \(.*\))|$(basename "$b"): \1 by \2|p"
            done)
  [ -z "$missing" ] || stop "libraries not found: $(echo "$missing" | sort -u | tr '\n' ';') $(cat "$OUT/node-libs.log")" \
    "install them on the node or add their folder to LD_LIBRARY_PATH (the bundle looks in the CUDA toolkit and in Python's site-packages/nvidia/*/lib)"
  say "preflight: ok ($(ls "$BUNDLE/bin" | wc -l) programs, every library found)"
}

# program NAME [SECONDS]: one gtest program of the bundle (within SECONDS, default PROGRAM_S), its
# line in the summary; failed tests again with CUDA_LAUNCH_BLOCKING=1. Programs run with
# BATON_REQUIRE_GPU=1: a test that finds no device fails instead of skipping.
program() {
  local t=$1 limit
  [ -x "$BUNDLE/bin/$t" ] || { say "$t: not in the bundle"; failures+=("$t (missing)"); return; }
  limit=$(budget "${2:-$PROGRAM_S}")
  (( limit > 5 )) || { say "$t: not run (deadline)"; failures+=("$t (deadline)"); return; }
  local start rc passed failed skipped verdict=ok names
  start=$(date +%s)
  BATON_REQUIRE_GPU=1 timeout "$limit" "$BUNDLE/run" "$t" "${@:3}" > "$OUT/$t.log" 2>&1
  rc=$?
  passed=$(grep -c '^\[       OK \]' "$OUT/$t.log")
  failed=$(sed -n 's/^\[  FAILED  \] \([A-Za-z][A-Za-z0-9_/.]*\).*/\1/p' "$OUT/$t.log" | sort -u | wc -l)
  skipped=$(grep -c '^\[  SKIPPED \] [A-Za-z]' "$OUT/$t.log")
  if (( rc == 124 )); then verdict="TIMED OUT after ${limit} s"
  elif (( passed + failed == 0 )); then verdict="ZERO TESTS RAN"
  elif (( rc != 0 || failed > 0 || skipped > 0 )); then verdict=FAILED
  fi
  say "$t: $verdict | rc $rc, $passed passed, $failed failed, $skipped skipped, $(( $(date +%s) - start )) s"
  [ "$verdict" = ok ] && return
  failures+=("$t")
  names=$(sed -n 's/^\[  FAILED  \] \([A-Za-z][A-Za-z0-9_/.]*\).*/\1/p' "$OUT/$t.log" | sort -u | tr '\n' ':')
  limit=$(budget 60)
  if [ -n "$names" ] && (( limit > 5 )); then
    BATON_REQUIRE_GPU=1 CUDA_LAUNCH_BLOCKING=1 timeout "$limit" "$BUNDLE/run" "$t" --gtest_filter="$names" \
      > "$OUT/$t.blocking.log" 2>&1
    say "  rerun with CUDA_LAUNCH_BLOCKING=1: rc $? (log $OUT/$t.blocking.log)"
  fi
}
