#!/usr/bin/env bash
# A failure on one rank ends the whole job promptly with that rank's message (issue 4: "never a
# hang"). Usage: guard_fail.sh BINARY MPIEXEC [MPIEXEC_FLAGS...]
set -uo pipefail
bin=$1; shift
start=$(date +%s%N)
out=$(timeout 60 "$@" 3 "$bin" 2>&1)
rc=$?
elapsed_ms=$(( ($(date +%s%N) - start) / 1000000 ))
echo "$out"
echo "exit code $rc after ${elapsed_ms} ms"
fail() { echo "FAIL: $*"; exit 1; }
[ "$rc" -ne 0 ] || fail "the job exited 0"
[ "$rc" -ne 124 ] || fail "the job hung (killed by timeout)"
grep -qF 'error: [rank 1] bad input on rank 1' <<<"$out" || fail "no error line from rank 1"
grep -qF 'hint: fix the input of rank 1' <<<"$out" || fail "no hint line"
# Generous for a loaded 2-core CI machine; a hang is caught by the timeout above.
(( elapsed_ms < 20000 )) || fail "took ${elapsed_ms} ms"
echo PASS
