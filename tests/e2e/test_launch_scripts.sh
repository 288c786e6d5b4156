#!/usr/bin/env bash
# The README's first commands, as scripts (issue 15, item 8):
# - launch/test.sh after launch/quickstart.sh (which configures the build directory with tests
#   off) turns tests back on and runs them; a build that registers no tests is a failure, never a
#   green run of zero tests. Checked on a stand-in project (a CMakeLists.txt with one test, or
#   none) so that it takes a second, with the real launch/test.sh.
# - launch/install-deps.sh as a user without root: through sudo when there is one, else one clear
#   error (minimal containers run as root and have no sudo; root needs neither).
# - SIGTERM to launch/mpirun.sh ends the job cleanly with exit code 130.
# - launch/step-time-model.py (docs/cuda.md "Step-time model"): its predicted step is the sum of its
#   rows, its MFU the DESIGN formula's FLOPs over that time, and N for GPT-2 124M llm.c's 124.5M.
source "$(dirname "$0")/lib.sh"

mkdir -p fake/launch
cp "$SRC/launch/test.sh" fake/launch/test.sh
printf '#!/usr/bin/env bash\nexit 0\n' > fake/launch/install-deps.sh
cat > fake/CMakeLists.txt <<'CMAKE'
cmake_minimum_required(VERSION 3.16)
project(fake NONE)
option(BATON_TESTS "Build the tests" ON)
option(FAKE_NO_TESTS "register no test even with BATON_TESTS" OFF)
if(BATON_TESTS AND NOT FAKE_NO_TESTS)
  enable_testing()
  add_test(NAME fake.passes COMMAND true)
endif()
CMAKE
# As launch/quickstart.sh leaves it: tests off.
cmake -S fake -B fake/build -DBATON_TESTS=OFF > /dev/null
BUILD=build JOBS=1 bash fake/launch/test.sh > run1.log 2>&1 || { cat run1.log; fail "test.sh after a tests-off configure"; }
grep -q "100% tests passed, 0 tests failed out of 1" run1.log || { cat run1.log; fail "test.sh did not run the test"; }
# No tests at all: a failure.
cmake -S fake -B fake/build2 -DFAKE_NO_TESTS=ON > /dev/null
rc=0
BUILD=build2 JOBS=1 bash fake/launch/test.sh > run2.log 2>&1 || rc=$?
[ "$rc" -ne 0 ] || { cat run2.log; fail "test.sh passed with no tests"; }
grep -qi "no tests were found" run2.log || { cat run2.log; fail "no 'No tests were found' from ctest"; }

if [ "$(id -u)" -eq 0 ] && id nobody > /dev/null 2>&1 && command -v setpriv > /dev/null; then
  if command -v sudo > /dev/null; then
    echo "skipped install-deps without root: sudo is installed here (the script would ask it)"
  else
    rc=0
    setpriv --reuid=nobody --regid=nogroup --clear-groups bash "$SRC/launch/install-deps.sh" > deps.log 2>&1 || rc=$?
    [ "$rc" -ne 0 ] || { cat deps.log; fail "install-deps without root or sudo succeeded"; }
    grep -q "^error: .*needs root, and sudo is not installed" deps.log || { cat deps.log; fail "install-deps error"; }
    grep -q "^hint: " deps.log || { cat deps.log; fail "install-deps hint"; }
  fi
fi
# SIGTERM to launch/mpirun.sh (as a batch system sends it): the ranks stop after their step,
# checkpoint, and the script exits 130 as docs/commands.md says (mpirun signalled itself exits 1).
make_tiny_dataset
write_tiny_config
OVERSUBSCRIBE=1 OMP_NUM_THREADS=1 BATON="$BATON" bash "$SRC/launch/mpirun.sh" 2 tiny.toml --set run.dir=sig \
  --set train.steps=1000000 --set train.log_every=100000 --set checkpoint.every=0 > sig.log 2>&1 &
pid=$!
for _ in $(seq 1 100); do [ -e sig/metrics.jsonl ] && break; sleep 0.2; done
[ -e sig/metrics.jsonl ] || { cat sig.log; fail "the job did not start"; }
kill -TERM "$pid"
rc=0
timeout 60 tail --pid="$pid" -f /dev/null || fail "the job did not stop within 60 s"
wait "$pid" || rc=$?
[ "$rc" -eq 130 ] || { cat sig.log; fail "launch/mpirun.sh exit $rc after SIGTERM, want 130"; }
grep -q "stop requested (signal 15): stopping after step" sig.log || { cat sig.log; fail "no stop line"; }
ls sig/ckpt | grep -q "^step-" || fail "no checkpoint after SIGTERM"

python3 "$SRC/launch/step-time-model.py" --all > stm.md
python3 - <<'PY'
import re
blocks = open("stm.md").read().split("### ")[1:]
assert len(blocks) == 4, len(blocks)
for b in blocks:
    rows = [l.split("|") for l in b.splitlines() if l.startswith("| ") and "kernel" not in l]
    total = sum(float(r[5]) for r in rows)
    step = float(re.search(r"Predicted step: \*\*([0-9.]+) ms", b).group(1))
    assert abs(step - total) <= 0.05 + 1e-3 * total, (step, total)
    tokens = int(re.search(r"T = \d+: (\d+) tokens", b).group(1))
    tflop = float(re.search(r"\(([0-9.]+) TFLOP a step\)", b).group(1))
    mfu = float(re.search(r"MFU \*\*([0-9.]+)%", b).group(1))
    assert abs(mfu - 100 * tflop / (step / 1e3) / 989.4) < 0.2, (mfu, tflop, step)
assert "N = 124.5M" in blocks[0]
print("step-time model: rows sum to the step, MFU consistent")
PY
echo "PASS"
