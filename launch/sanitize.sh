#!/usr/bin/env bash
# launch/sanitize.sh [ctest args...]: the CPU test suite built with AddressSanitizer and
# UndefinedBehaviorSanitizer (-DBATON_SANITIZE=address,undefined) in its own build folder
# (BUILD, default build-asan), then run like launch/test.sh: every test but `gpu` and `bench`,
# or the ones the arguments pick (e.g. `-L unit`, `-R emulated`).
#
# What it covers: the host C++ — CPU backend, runtime, data and checkpoint code, MPI programs —
# and the CUDA kernels' source where the CPU emulator runs it (tests/emu: a kernel's out-of-bounds
# global read is a host read there, which ASan reports; the fibers' stack switches are announced
# to ASan). Not the nvcc-compiled device code (compute-sanitizer's job, in launch/gpu-check.sh).
# A finding stops the process that made it (halt_on_error) and is written to
# BUILD/sanitizer-reports/; the script fails listing them even where the test passed — a test
# that expects baton to exit with an error cannot tell that exit from a sanitizer's.
# Slower than the plain suite (2038 s against 870-903 s on the 2-core VM) and not part of CI: a developer's check after changes
# to memory-handling code. Leak checking is off: every baton process initialises Open MPI, whose
# components keep process-lifetime allocations and are unloaded before the leak check, so their
# reports name no module and cannot be suppressed. (ASAN_OPTIONS=detect_leaks=1 with `-L unit`,
# which runs no MPI, checks leaks too.)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build-asan}
JOBS=${JOBS:-$(nproc)}

cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DBATON_TESTS=ON -DBATON_SANITIZE=address,undefined
cmake --build "$BUILD" -j "$JOBS"

# protect_shadow_gap=0: the CUDA runtime maps memory where ASan's shadow gap would be (harmless
# without a GPU, needed with one). detect_stack_use_after_return=0: the emulator's fibers switch
# stacks under ASan's fake stacks.
REPORTS=$PWD/$BUILD/sanitizer-reports
case $BUILD in /*) REPORTS=$BUILD/sanitizer-reports ;; esac
rm -rf "$REPORTS" && mkdir -p "$REPORTS"
export ASAN_OPTIONS=${ASAN_OPTIONS:-protect_shadow_gap=0:detect_stack_use_after_return=0:halt_on_error=1:detect_leaks=0}:log_path=$REPORTS/asan
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}:log_path=$REPORTS/ubsan
if [ "$JOBS" -gt 1 ]; then export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}; fi
rc=0
ctest --test-dir "$BUILD" --output-on-failure --no-tests=error -j "$JOBS" -LE 'gpu|bench' "$@" || rc=$?
reports=$(find "$REPORTS" -type f | sort)
if [ -n "$reports" ]; then
  for f in $reports; do echo "== $f"; cat "$f"; done
  echo "sanitize: $(echo "$reports" | wc -l) sanitizer report(s) in $REPORTS" >&2
  exit 1
fi
[ $rc -eq 0 ] && echo "sanitize: no sanitizer reports"
exit $rc
