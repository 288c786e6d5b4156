#!/usr/bin/env bash
# launch/wsp-timing-model.py — the time WSP's rule alone allows a job of pipelined virtual workers
# (docs/hetpipe.md "What the rule allows"): its self-test checks the model against the paper's worked
# example (D = 0, Nm = 4: minibatches 5-7 run, 8 starts when every VW has pushed wave 0, 12 when every
# VW has pushed wave 1), free-running VWs (D larger than the run), the pipeline of one VW (Nm = 1 is
# naive model parallelism, Nm = 2 keeps both stages busy) and the straggler draws. That its draws are
# the runtime's is checked in test_train_wsp.sh against the metrics of real runs.
set -euo pipefail
python3 "$SRC/launch/wsp-timing-model.py" --self-test
