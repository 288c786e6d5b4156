#!/usr/bin/env bash
# The README's test command (and what CI runs): install packages when root, configure, build and
# run every test that needs no GPU. GPU tests carry the ctest label `gpu` and skip themselves
# without a device; here they are excluded to keep CI honest about what it ran.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
JOBS=${JOBS:-$(nproc)}

if [ "$(id -u)" -eq 0 ]; then bash launch/install-deps.sh; fi
# Tests on, whatever an earlier configure (launch/quickstart.sh's, tests off) left in the cache.
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DBATON_TESTS=ON
cmake --build "$BUILD" -j "$JOBS"
# ctest runs JOBS tests at once on as many cores, each with OpenMP threads of its own: idle threads
# must sleep rather than spin, or concurrent tests starve each other (a two-thread test beside
# another ran 10-40x slower with spinning waits).
if [ "$JOBS" -gt 1 ]; then export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}; fi
# --no-tests=error: a build without tests is a failure, never a green run of zero tests.
ctest --test-dir "$BUILD" --output-on-failure --no-tests=error -j "$JOBS" -LE 'gpu|bench' "$@"
