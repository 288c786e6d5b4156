#!/usr/bin/env bash
# baton vs PyTorch on the CPU, side by side in one run (issue 25): GPT-2 124M shapes (B 4, T 64,
# fp32, AdamW), the fashion CNN (ResNet-18 w 1/4, 28 px, batch 250) and ResNet-50 (224 px, batch 8),
# alternating baton and PyTorch runs, medians and spread, and the machine line: lscpu's model name
# and this machine's OpenBLAS sgemm GFLOP/s at 2048^3, measured here by a small C program built on
# the fly against -lopenblas (torch is no probe: it may carry its own BLAS).
#
#   launch/cpu-side-by-side.sh                                   # gpt2-124m,fashion,resnet50, 2 threads, 3 rounds
#   launch/cpu-side-by-side.sh --threads 2 --repeats 5 --json sbs.json
#   launch/cpu-side-by-side.sh --cases fashion --steps 3 --warmup 1 --repeats 1   # a quick look
#   launch/cpu-side-by-side.sh --help                            # every option and case
#
# Needs build/baton (or --baton PATH), Debian's python3-torch and python3-torchvision
# (apt-get install python3-torch python3-torchvision; PYTHON=... picks the interpreter), and for
# the sgemm figure a C compiler and libopenblas-dev. Every figure runs with OPENBLAS_CORETYPE and
# OPENBLAS_L2_SIZE unset, as on users' machines. Markdown table on stdout; --json FILE keeps every
# round. The implementation is tests/bench/cpu_side_by_side.py. A benchmark, not a test: not in CI.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# A Python that has torch: $PYTHON, else python3 on PATH, else Debian's /usr/bin/python3 (a pyenv
# or venv python3 earlier on PATH does not see Debian's dist-packages).
PY="${PYTHON:-}"
if [[ -z "$PY" ]]; then
  for cand in python3 /usr/bin/python3; do
    if command -v "$cand" >/dev/null && "$cand" -c 'import torch, torchvision' 2>/dev/null; then
      PY="$cand"
      break
    fi
  done
fi
if [[ -z "$PY" ]]; then
  echo "error: no Python with torch and torchvision (apt-get install python3-torch python3-torchvision, or set PYTHON)" >&2
  exit 1
fi

TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT

# The sgemm probe: C = A.B at n^3 after one untimed call, `reps` timed calls, GFLOP/s of each.
SGEMM=()
cat >"$TMP/sgemm.c" <<'EOF'
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}
int main(int argc, char** argv) {
  const int n = argc > 1 ? atoi(argv[1]) : 2048, reps = argc > 2 ? atoi(argv[2]) : 5;
  const size_t sz = (size_t)n * n;
  float *a = aligned_alloc(64, sz * 4), *b = aligned_alloc(64, sz * 4), *c = aligned_alloc(64, sz * 4);
  if (!a || !b || !c) return 1;
  for (size_t i = 0; i < sz; i++) {
    a[i] = (float)((i * 7) % 13) / 13.0f - 0.5f;
    b[i] = (float)((i * 5) % 11) / 11.0f - 0.5f;
    c[i] = 0.0f;
  }
  printf("openblas %s | core %s | %d threads\n", openblas_get_config(), openblas_get_corename(),
         openblas_get_num_threads());
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
  for (int r = 0; r < reps; r++) {
    const double t0 = now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
    const double dt = now() - t0;
    printf("gflops %.2f\n", 2.0 * n * n * (double)n / dt / 1e9);
  }
  return c[n + 1] != c[n + 1];  // keeps the result live; fails on NaN
}
EOF
if "${CC:-cc}" -O2 -o "$TMP/sgemm" "$TMP/sgemm.c" -lopenblas 2>"$TMP/cc.log"; then
  SGEMM=(--sgemm-bin "$TMP/sgemm")
else
  echo "warning: could not build the sgemm probe (needs cc and libopenblas-dev); no sgemm figure:" >&2
  cat "$TMP/cc.log" >&2
fi

cd "$ROOT"
env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE "$PY" tests/bench/cpu_side_by_side.py "${SGEMM[@]}" "$@"
