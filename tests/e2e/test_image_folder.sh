#!/usr/bin/env bash
# JPEG image folders (issue 24 item 4, data.format = "image_folder"), on a folder of JPEGs the test
# writes from Fashion-MNIST (10 classes × 60 training and 20 validation images):
# - the validation transform's tensors (`baton data images`) equal torchvision's ImageFolder +
#   Resize + CenterCrop + ToTensor + Normalize, grey (in_channels 1) and RGB (3), upscaling and
#   antialiased downscaling: within 1e-6 (they are bit-identical: the same libjpeg-turbo decode and
#   PIL's fixed-point bilinear filter), with the same class order and labels;
# - training batches with RandomResizedCrop + flip are the same on 1 and 2 threads and for any row
#   slice of the batch, and differ between epochs;
# - a short training run on the JPEGs reaches the accuracy of the same images through the IDX path
#   (the original pixels; same shuffle, same seed) within 7.5 points (JPEG at quality 95 changes
#   pixels slightly);
# - decode throughput (images/s per core) is printed;
# - a folder holding PNGs, and a validation folder with other classes, are clear errors.
# Needs a python with torchvision, PIL and numpy (Debian: python3-torchvision python3-pil) and
# Debian's dataset-fashion-mnist; skips otherwise.
source "$(dirname "$0")/lib.sh"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}

PY=""
for p in python3 /usr/bin/python3; do
  if "$p" -c "import torchvision, PIL, numpy" 2>/dev/null; then PY=$p; break; fi
done
[ -n "$PY" ] || { echo "SKIP: no python3 with torchvision, PIL and numpy (apt-get install python3-torchvision python3-pil)"; exit 0; }
FMNIST=/usr/share/datasets/fashion-mnist
[ -e "$FMNIST/train-images-idx3-ubyte.gz" ] || { echo "SKIP: no $FMNIST (apt-get install dataset-fashion-mnist)"; exit 0; }

# The folders (JPEG, quality 95) and the same images as raw IDX files; class folders are named so
# that sorted order is not label order ("c<9-y>-<name>"): the labels checks see a wrong order.
"$PY" - "$FMNIST" <<'PY'
import gzip, os, struct, sys
import numpy as np
from PIL import Image
src = sys.argv[1]
names = ["tshirt", "trouser", "pullover", "dress", "coat", "sandal", "shirt", "sneaker", "bag", "boot"]
def idx(p):
    d = gzip.open(p).read()
    n = int.from_bytes(d[4:8], "big")
    return np.frombuffer(d, np.uint8, offset=8) if d[3] == 1 else np.frombuffer(d, np.uint8, offset=16).reshape(n, 28, 28)
def write(split, images, labels, per):
    count = [0] * 10
    pix, lab = [], []
    for i in range(len(images)):
        y = int(labels[i])
        if count[y] >= per: continue
        d = f"{split}/c{9 - y}-{names[y]}"
        os.makedirs(d, exist_ok=True)
        Image.fromarray(images[i]).save(f"{d}/{i:05d}.jpg", quality=95)
        count[y] += 1
        if min(count) >= per: break
    # IDX in ImageFolder's order (class folders sorted, files sorted): the same stream as the folder.
    order = []
    for cls in sorted(os.listdir(split)):
        for f in sorted(os.listdir(f"{split}/{cls}")):
            order.append((int(f[:5]), cls))
    for i, cls in order:
        pix.append(images[i]); lab.append(sorted(os.listdir(split)).index(cls))
    open(f"{split}.img", "wb").write(struct.pack(">IIII", 0x803, len(pix), 28, 28) + np.stack(pix).tobytes())
    open(f"{split}.lbl", "wb").write(struct.pack(">II", 0x801, len(lab)) + bytes(lab))
write("train", idx(f"{src}/train-images-idx3-ubyte.gz"), idx(f"{src}/train-labels-idx1-ubyte.gz"), 60)
write("valid", idx(f"{src}/t10k-images-idx3-ubyte.gz"), idx(f"{src}/t10k-labels-idx1-ubyte.gz"), 20)
PY

cat > folder.toml <<'TOML'
[model]
kind = "resnet"
n_layer = 18
width = 0.125
image_size = 28
in_channels = 1
classes = 10
[data]
format = "image_folder"
train = "train"
valid = "valid"
eval_resize = 28
[train]
steps = 36
global_batch = 50
micro_batch = 50
log_every = 12
eval_every = 36
eval_steps = 4
[optim]
kind = "sgd"
lr = 0.1
momentum = 0.9
nesterov = true
weight_decay = 5e-4
warmup_steps = 4
[checkpoint]
every = 0
TOML

# 1. Validation tensors against torchvision: (channels, image_size, eval_resize, normalise).
specs=("1 28 32 0" "1 24 26 1" "3 28 32 1" "3 14 16 0")
for spec in "${specs[@]}"; do
  read -r C S R N <<<"$spec"
  args=(--set model.in_channels="$C" --set model.image_size="$S" --set data.eval_resize="$R")
  if [ "$N" = 1 ]; then
    if [ "$C" = 1 ]; then args+=(--set 'data.mean=[0.286]' --set 'data.std=[0.353]')
    else args+=(--set 'data.mean=[0.286, 0.286, 0.286]' --set 'data.std=[0.353, 0.353, 0.353]'); fi
  fi
  "$BATON" data images folder.toml "${args[@]}" --rows 200 --out "v$C-$S-$R.bin" > dump.log 2>&1 ||
    { cat dump.log; fail "baton data images failed ($spec)"; }
done
"$PY" - "${specs[@]}" <<'PY'
import sys
import numpy as np, torch, torchvision.transforms as T
from torchvision.datasets import ImageFolder
for spec in sys.argv[1:]:
    C, S, R, N = map(int, spec.split())
    tf = [T.Resize(R), T.CenterCrop(S), T.ToTensor()]
    if N: tf.append(T.Normalize([0.286] * C, [0.353] * C))
    ds = ImageFolder("valid", T.Compose(tf))  # loads RGB: a grey JPEG's three channels are equal
    ref = torch.stack([ds[i][0][:C] for i in range(len(ds))]).numpy()
    got = np.fromfile(f"v{C}-{S}-{R}.bin", np.float32).reshape(ref.shape)
    labels = np.fromfile(f"v{C}-{S}-{R}.bin.labels", np.int32)
    assert (labels == np.array(ds.targets)).all(), f"labels differ from ImageFolder's: {labels[:25]} vs {ds.targets[:25]}"
    diff = np.abs(got - ref).max()
    assert diff <= 1e-6, f"C={C} S={S} R={R}: max |baton - torchvision| = {diff} ({(got != ref).sum()} values differ)"
    print(f"valid C={C} image_size={S} resize={R} normalise={N}: {ref.shape[0]} images equal torchvision's (max diff {diff})")
PY

# 2. Training batches (RandomResizedCrop + flip): layout-independent, new crops each epoch.
aug=(--set data.augment='"crop_flip"')
OMP_NUM_THREADS=1 "$BATON" data images folder.toml "${aug[@]}" --split train --batch 13 --out t1.bin >/dev/null
OMP_NUM_THREADS=2 "$BATON" data images folder.toml "${aug[@]}" --split train --batch 13 --out t2.bin >/dev/null
"$BATON" data images folder.toml "${aug[@]}" --split train --batch 13 --rows 7 --out t3.bin >/dev/null
"$BATON" data images folder.toml "${aug[@]}" --split train --batch 1 --out e0.bin >/dev/null
"$PY" - <<'PY'
import numpy as np
a, b, c = (np.fromfile(f, np.float32).reshape(-1, 1, 28, 28) for f in ("t1.bin", "t2.bin", "t3.bin"))
assert (a == b).all(), "training batch differs between 1 and 2 threads"
assert (a[:7] == c).all(), "a row slice of the training batch differs from the whole batch's rows"
# Step 13 of 50-image steps over 600 images is epoch 1; step 1 epoch 0: a different draw of the
# crops (and order) — the batch must not be the validation transform of the same images.
e0 = np.fromfile("e0.bin", np.float32).reshape(-1, 1, 28, 28)
assert not (a == e0).all()
assert a.min() >= 0 and a.max() <= 1, "pixels outside [0, 1] without normalisation"
print("train crop_flip batches: equal on 1 and 2 threads and for a row slice")
PY

# 3. Training: the JPEG folder reaches the IDX run's accuracy (same images, order and seed).
"$BATON" train folder.toml --set run.dir=folder > folder.log 2>&1 || { cat folder.log; fail "folder run failed"; }
"$BATON" train folder.toml --set run.dir=idx --set data.format='"idx"' --set data.eval_resize=0 \
  --set data.train='"train.img"' --set data.train_labels='"train.lbl"' --set data.valid='"valid.img"' \
  --set data.valid_labels='"valid.lbl"' --set data.normalize=false > idx.log 2>&1 || { cat idx.log; fail "IDX run failed"; }
"$BATON" train folder.toml --set run.dir=aug "${aug[@]}" --set train.steps=4 --set train.eval_every=0 > aug.log 2>&1 ||
  { cat aug.log; fail "crop_flip run failed"; }
rate=$(grep -o "decode [0-9]* images/s per core" folder.log) || { cat folder.log; fail "no decode rate in the header"; }
echo "$rate ($(lscpu | sed -n 's/^Model name: *//p' | head -1))"
"$PY" - <<'PY'
import json
last = lambda p: [r for r in map(json.loads, open(p)) if "val_top1" in r][-1]
f, i = last("folder/metrics.jsonl"), last("idx/metrics.jsonl")
print(f"top-1 after 3 epochs: JPEG folder {100 * f['val_top1']:.1f}%, IDX {100 * i['val_top1']:.1f}%")
assert i["val_top1"] > 0.4, "the IDX run did not learn"
assert f["val_top1"] >= i["val_top1"] - 0.075, "the JPEG folder run fell behind the IDX run"
PY

# 4. Errors.
mkdir -p bad/a bad/b && cp train/c0-boot/*.jpg bad/a/ && cp train/c1-bag/*.jpg bad/b/ && touch bad/b/x.png
expect_error "not a JPEG file" "$BATON" data images folder.toml --set data.train='"bad"' --out x.bin
mv bad/b/x.png bad/b/x.txt && mv bad/b bad/zzz
expect_error "class ids would differ" "$BATON" data images folder.toml --set data.valid='"bad"' --out x.bin
expect_error "data.train_labels" "$BATON" data images folder.toml --set data.train_labels='"train.lbl"' --out x.bin
echo "PASS"
