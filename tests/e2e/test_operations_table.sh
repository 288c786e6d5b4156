#!/usr/bin/env bash
# docs/operations.md is the fault suite's index (issue 22 item 5): every row of its table names the
# tests that reproduce the fault, and each named test exists (a renamed or deleted test leaves a row
# that proves nothing). Unit test names (`unit/test_x.cpp` (Suite)) count as their files.
source "$(dirname "$0")/lib.sh"
python3 - "$SRC" <<'PY'
import os, re, sys
src = sys.argv[1]
rows = [l for l in open(os.path.join(src, "docs/operations.md")) if l.startswith("| ") and not l.startswith("| fault")
        and not l.startswith("| ---")]
assert len(rows) >= 30, f"only {len(rows)} rows in the table"
missing, untested = [], []
for row in rows:
    cells = [c.strip() for c in row.strip().strip("|").split(" | ")]
    named = re.findall(r"`((?:e2e|unit|dist)/[\w./-]+)`", cells[-1])
    if not named:
        untested.append(cells[0][:60])
    for n in named:
        if not os.path.exists(os.path.join(src, "tests", n)):
            missing.append(n)
assert not untested, f"rows without a test: {untested}"
assert not missing, f"tests named in docs/operations.md that do not exist: {missing}"
print(f"{len(rows)} faults, each with a test that exists")
PY
echo PASS
