#!/usr/bin/env bash
# run.tensorboard (issue 24 item 3; docs/configuration.md "TensorBoard"): the events files are read
# back here in Python, apart from baton's code: every TFRecord's two masked CRC32Cs checked (CRC32C
# written here), each Event decoded by python3-protobuf with classes protoc generates now from
# src/train/observe/tensorboard.proto, the first event "brain.Event:2", and every scalar equal (at
# float32) to the metrics file's value of the same step and key, and nothing else there:
# - a GPT with evaluation (train/, val/loss, perf/), crashed after logging steps 7-12 but before
#   checkpoint 12, then resumed from 6 on 2 data-parallel ranks (perf/comm_share), rank 0 alone
#   writing: a second file whose SessionLog START at 7 drops the first file's steps 7-12
#   (TensorBoard's restart rule, applied here as TensorBoard does), after which the points are
#   metrics.jsonl's;
# - a rewind (train.on_spike = "rewind", a noise batch at data step 24 as in e2e/test_divergence.sh):
#   a START at 21 in the same file drops steps 21-24; train/rewinds, train/batches_skipped;
# - a ResNet (perf/images_per_s, val/top1, val/top5);
# - 2 WSP virtual workers: VW k's files in run.dir/vw<k> equal metrics.jsonl / metrics-vw<k>.jsonl,
#   with vw/clock, vw/staleness, ...;
# run.tensorboard = false (the default) writing none: e2e/test_train_tiny.sh.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/lib_checkpoint.sh"
use_mpirun
command -v protoc > /dev/null || fail "protoc not found (launch/install-deps.sh installs protobuf-compiler)"
PY=""
for p in /usr/bin/python3 python3; do  # (Debian's python3-protobuf: /usr/bin/python3)
  if "$p" -c "import google.protobuf" 2> /dev/null; then PY=$p; break; fi
done
[ -n "$PY" ] || fail "no python3 with google.protobuf (launch/install-deps.sh installs python3-protobuf)"
protoc --python_out=. -I "$SRC/src/train/observe" "$SRC/src/train/observe/tensorboard.proto"

# check_events DIR METRICS_FILE: the events files of DIR against METRICS_FILE.
check_events() {
  "$PY" - "$1" "$2" <<'PY'
import glob, json, math, os, struct, sys
import tensorboard_pb2 as tb

TABLE = []
for i in range(256):
    c = i
    for _ in range(8):
        c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
    TABLE.append(c)

def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF

def masked(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF

assert crc32c(b"123456789") == 0xE3069283

def records(path):
    data = open(path, "rb").read()
    at = 0
    while at < len(data):
        assert at + 12 <= len(data), f"{path}: a cut record header at byte {at}"
        header = data[at:at + 8]
        (n,) = struct.unpack("<Q", header)
        (crc_n,) = struct.unpack("<I", data[at + 8:at + 12])
        assert crc_n == masked(header), f"{path}: bad length CRC at byte {at}"
        payload = data[at + 12:at + 12 + n]
        assert len(payload) == n and at + 16 + n <= len(data), f"{path}: a cut record at byte {at}"
        (crc_d,) = struct.unpack("<I", data[at + 12 + n:at + 16 + n])
        assert crc_d == masked(payload), f"{path}: bad data CRC at byte {at}"
        yield payload
        at += 16 + n

SECTION = {"loss": "train", "lr": "train", "grad_norm": "train", "rewinds": "train", "batches_skipped": "train",
           "step_ms": "perf", "tokens_per_s": "perf", "images_per_s": "perf", "tflops_per_gpu": "perf",
           "mfu": "perf", "comm_share": "perf"}
VW = ("clock", "c_global", "staleness", "wait_s", "wait_total_s", "push_s", "idle_s", "idle_total_s",
      "minibatches_per_s", "slowdown", "stretch_s")

def tag(key):
    if key.startswith("val_"):
        return "val/" + key[4:]
    if key in VW:
        return "vw/" + key
    return SECTION[key] + "/" + key  # a new metrics key without a tag fails here

def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]

d, metrics = sys.argv[1], sys.argv[2]
files = sorted(glob.glob(os.path.join(d, "events.out.tfevents.*")))
assert files, f"no events file in {d}"
points = {}  # (tag, step) -> value, as TensorBoard keeps them
starts = 0
for path in files:
    for i, payload in enumerate(records(path)):
        e = tb.Event()
        e.ParseFromString(payload)
        assert e.wall_time > 1.6e9, (path, e)
        if i == 0:
            assert e.WhichOneof("what") == "file_version" and e.file_version == "brain.Event:2", (path, e)
            continue
        what = e.WhichOneof("what")
        if what == "session_log":
            assert e.session_log.status == tb.SessionLog.START, e
            starts += 1
            if starts > 1:  # a restart: TensorBoard drops the points at and after its step
                points = {k: v for k, v in points.items() if k[1] < e.step}
            continue
        assert what == "summary", (path, e)
        for v in e.summary.value:
            assert v.WhichOneof("value") == "simple_value", v
            # TensorBoard keeps every point it reads: a second one at a step is a stale point shown.
            assert (v.tag, e.step) not in points, f"{path}: {v.tag} at step {e.step} twice (not purged)"
            points[(v.tag, e.step)] = v.simple_value

want = {}
for row in map(json.loads, open(metrics)):
    for key, value in row.items():
        if key in ("step", "vw", "resumed_changes") or value is None:
            continue
        if key == "tokens_per_s" and "images_per_s" in row:
            continue  # the same number: written once, as images_per_s
        want[(tag(key), row["step"])] = value
bad = [(k, want.get(k), points.get(k)) for k in sorted(set(want) | set(points))
       if k not in want or k not in points or f32(want[k]) != points[k]]
assert not bad, f"{d} vs {metrics}: {len(bad)} differ, e.g. {bad[:5]}"
tags = sorted({t for t, _ in points})
print(f"{d}: {len(files)} events file(s), {len(points)} scalars over {len({s for _, s in points})} steps "
      f"= {metrics}; tags {' '.join(tags)}")
PY
}

# ---- a GPT on 2 ranks with evaluation; a crash after logging 7-12 before checkpoint 12; resume ----
make_tiny_run
GPT=(--set train.steps=12 --set train.eval_every=4 --set checkpoint.every=6 --set run.tensorboard=true)
rc=0
BATON_CKPT_FAIL_AT=before_rename@12 "$BATON" train tiny.toml "${GPT[@]}" > crash.log 2>&1 || rc=$?
[ "$rc" -eq 86 ] || { cat crash.log; fail "the injected crash: exit $rc, want 86"; }
grep -q "TensorBoard run/events.out.tfevents" crash.log || { cat crash.log; fail "no TensorBoard path in the log"; }
grep -q '"step":12' run/metrics.jsonl || fail "step 12 not logged before the crash"
"${MPIRUN[@]}" 2 "$BATON" train tiny.toml "${GPT[@]}" > resumed.log 2>&1 || { cat resumed.log; fail "resume"; }
grep -q "^resumed from run/ckpt/step-0000006.h5 at step 6 " resumed.log || { cat resumed.log; fail "no resume at 6"; }
[ "$(ls run/events.out.tfevents.* | wc -l)" -eq 2 ] || { ls -R run; fail "want 2 events files (2 runs, rank 0's)"; }
check_events run run/metrics.jsonl > gpt.out || { cat gpt.out; fail "GPT events vs metrics.jsonl"; }
cat gpt.out
for t in train/loss train/lr train/grad_norm val/loss perf/tokens_per_s perf/comm_share perf/step_ms; do
  grep -q " $t\b" gpt.out || fail "no $t"
done

# ---- a rewind from the spike at 25 to checkpoint 20, in one file ----
BATON_FAULT_BAD_BATCH=24 "$BATON" train tiny.toml --set train.steps=26 --set checkpoint.every=5 --set train.spike_factor=1.5 \
  --set train.spike_window=8 --set train.on_spike='"rewind"' --set optim.decay='"constant"' --set run.dir=rw \
  --set run.tensorboard=true > rw.log 2>&1 || { cat rw.log; fail "rewind run"; }
grep -q "rewinding to step-0000020.h5" rw.log || { cat rw.log; fail "no rewind"; }
check_events rw rw/metrics.jsonl > rw.out || { cat rw.out; fail "rewind: events vs metrics.jsonl"; }
cat rw.out
for t in train/rewinds train/batches_skipped; do grep -q " $t\b" rw.out || fail "no $t"; done

# ---- a ResNet: images/s and top-1/top-5 ----
make_tiny_images
write_tiny_cnn_config
"$BATON" train cnn.toml --set train.steps=4 --set train.eval_every=2 --set checkpoint.every=0 --set run.dir=cnn \
  --set run.tensorboard=true > cnn.log 2>&1 || { cat cnn.log; fail "CNN run"; }
check_events cnn cnn/metrics.jsonl > cnn.out || { cat cnn.out; fail "CNN events vs metrics.jsonl"; }
cat cnn.out
for t in perf/images_per_s val/top1 val/top5; do grep -q " $t\b" cnn.out || fail "no $t"; done
grep -q "perf/tokens_per_s" cnn.out && fail "a CNN wrote tokens_per_s beside images_per_s"

# ---- 2 WSP virtual workers: one TensorBoard run per VW (run.dir/vw<k>) ----
"${MPIRUN[@]}" 2 "$BATON" train tiny.toml --set train.steps=6 --set train.eval_every=3 --set checkpoint.every=0 \
  --set hetero.sync='"wsp"' --set hetero.staleness=1 --set run.dir=wsp --set run.tensorboard=true > wsp.log 2>&1 ||
  { cat wsp.log; fail "WSP run"; }
ls wsp/events.out.tfevents.* > /dev/null 2>&1 && fail "a VW run wrote an events file outside run.dir/vw<k>"
check_events wsp/vw0 wsp/metrics.jsonl > wsp.out && check_events wsp/vw1 wsp/metrics-vw1.jsonl >> wsp.out ||
  { cat wsp.out; fail "VW events vs their metrics files"; }
cat wsp.out
for t in vw/clock vw/staleness vw/wait_s train/loss val/loss; do grep -q " $t\b" wsp.out || fail "no $t"; done

echo PASS
