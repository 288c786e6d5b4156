#!/usr/bin/env python3
"""baton vs PyTorch on the CPU, side by side in one run (issue 12): images/s of ResNet training steps.

For each case, `baton bench` (random images of the model's shape, data.synthetic) and the same step
in PyTorch (Debian's python3-torch + python3-torchvision) on the same machine, one after the other,
with the same number of threads:
  - the model: torchvision's ResNet blocks (BasicBlock / Bottleneck) at baton's widths — at 224 px and
    width 1 exactly torchvision.models.resnet18 / resnet50; below 64 px baton's small-image stem
    (a 3×3 stride-1 convolution + BN + ReLU, no max pool, src/model/cnn.h) and channel counts
    max(1, round(c·width));
  - the step: forward, cross-entropy, backward, SGD with Nesterov momentum 0.9 and weight decay 5e-4
    (batch norm and biases not decayed, as baton), one micro-batch of `batch` images per step, a
    fresh random batch each step;
  - PyTorch runs in its default NCHW layout and in channels_last (oneDNN's preferred layout on the
    CPU); the ratio is against the faster of the two;
  - timing as baton bench: `warmup` untimed steps, then `steps` timed ones; images/s = images / the
    timed steps' total time; the three runs alternate `--repeats` times (default 3) and each reports
    its median, so that a noisy moment of the machine hits all of them alike.

  python3 tests/bench/pytorch_cnn.py                          # every case
  python3 tests/bench/pytorch_cnn.py --cases fashion --json out.json
  env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python3 tests/bench/pytorch_cnn.py   # as users' machines run

The baton binary is build/baton (or --baton). Not a test: nothing is asserted; the goals (issue 12)
are >= 1.3x at 28-32 px and >= 1.0x at 224 px.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# name: (depth, width, image_size, in_channels, classes, batch, warmup, steps)
CASES = {
    "fashion": (18, 0.25, 28, 1, 10, 250, 3, 10),      # configs/fashion-resnet.toml's model and batch
    "fashion-b32": (18, 0.25, 28, 1, 10, 32, 5, 40),   # the same at a small batch: more per-op overhead
    "cifar": (18, 0.5, 32, 3, 10, 128, 3, 10),
    "resnet18-224": (18, 1.0, 224, 3, 1000, 32, 2, 5),
    "resnet50-224": (50, 1.0, 224, 3, 1000, 16, 2, 4),
}


def baton_config(case):
    """The baton config (TOML text) of a case: the model, synthetic data, SGD as the PyTorch step."""
    depth, width, size, chans, classes, batch, warmup, steps = CASES[case]
    return f"""[model]
kind = "resnet"
n_layer = {depth}
width = {width}
image_size = {size}
in_channels = {chans}
classes = {classes}
[data]
synthetic = true
[train]
global_batch = {batch}
micro_batch = {batch}
[optim]
kind = "sgd"
lr = 0.1
momentum = 0.9
nesterov = true
weight_decay = 5e-4
grad_clip = 0.0
"""


def baton_images_per_s(baton, case, threads):
    warmup, steps = CASES[case][6:8]
    with tempfile.TemporaryDirectory() as d:
        cfg = os.path.join(d, "bench.toml")
        with open(cfg, "w") as f:
            f.write(baton_config(case))
        out = os.path.join(d, "b.json")
        env = dict(os.environ, OMP_NUM_THREADS=str(threads))
        subprocess.run([baton, "bench", cfg, "--warmup", str(warmup), "--steps", str(steps), "--json", out],
                       check=True, env=env, stdout=subprocess.DEVNULL)
        return json.load(open(out))["images_per_s"]


def torch_model(depth, width, size, chans, classes):
    import torch.nn as nn
    from torchvision.models import resnet
    block, counts = {18: (resnet.BasicBlock, [2, 2, 2, 2]), 34: (resnet.BasicBlock, [3, 4, 6, 3]),
                     50: (resnet.Bottleneck, [3, 4, 6, 3]), 101: (resnet.Bottleneck, [3, 4, 23, 3]),
                     152: (resnet.Bottleneck, [3, 8, 36, 3])}[depth]
    ch = lambda c: max(1, round(c * width))
    stem_c = ch(64)
    if size < 64:  # baton's small-image stem
        layers = [nn.Conv2d(chans, stem_c, 3, 1, 1, bias=False), nn.BatchNorm2d(stem_c), nn.ReLU(inplace=True)]
    else:
        layers = [nn.Conv2d(chans, stem_c, 7, 2, 3, bias=False), nn.BatchNorm2d(stem_c), nn.ReLU(inplace=True),
                  nn.MaxPool2d(3, 2, 1)]
    inplanes = stem_c
    for i, (planes, n) in enumerate(zip([ch(64), ch(128), ch(256), ch(512)], counts)):
        stride = 1 if i == 0 else 2
        for b in range(n):
            s = stride if b == 0 else 1
            down = None
            if s != 1 or inplanes != planes * block.expansion:
                down = nn.Sequential(nn.Conv2d(inplanes, planes * block.expansion, 1, s, bias=False),
                                     nn.BatchNorm2d(planes * block.expansion))
            layers.append(block(inplanes, planes, s, down))
            inplanes = planes * block.expansion
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(inplanes, classes)]
    return nn.Sequential(*layers)


def torch_images_per_s(case, threads, channels_last):
    import torch
    import torch.nn.functional as F
    torch.set_num_threads(threads)
    depth, width, size, chans, classes, batch, warmup, steps = CASES[case]
    torch.manual_seed(0)
    model = torch_model(depth, width, size, chans, classes)
    if width == 1.0 and size >= 64:  # the same network as torchvision's own constructor
        import torchvision
        ref = getattr(torchvision.models, f"resnet{depth}")(num_classes=classes)
        assert sum(p.numel() for p in model.parameters()) == sum(p.numel() for p in ref.parameters())
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    model = model.to(memory_format=fmt).train()
    decay = [p for p in model.parameters() if p.ndim > 1]
    no_decay = [p for p in model.parameters() if p.ndim <= 1]
    opt = torch.optim.SGD([{"params": decay, "weight_decay": 5e-4}, {"params": no_decay, "weight_decay": 0}],
                          lr=0.1, momentum=0.9, nesterov=True)
    times = []
    for step in range(warmup + steps):
        x = torch.randn(batch, chans, size, size).to(memory_format=fmt)
        y = torch.randint(0, classes, (batch,))
        t = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        if step >= warmup:
            times.append(time.perf_counter() - t)
    return batch * steps / sum(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, of {', '.join(CASES)}")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--baton", default=os.path.join(REPO, "build", "baton"))
    ap.add_argument("--repeats", type=int, default=3, help="alternating runs of each; the median is reported")
    ap.add_argument("--json", help="also write the results here")
    a = ap.parse_args()
    import torch
    results = []
    env = "OPENBLAS_CORETYPE=" + os.environ.get("OPENBLAS_CORETYPE", "(unset)")
    print(f"threads {a.threads} | torch {torch.__version__} | {env} | median of {a.repeats} alternating runs")
    print(f"{'case':<14} {'batch':>5} {'baton img/s':>12} {'torch NCHW':>11} {'torch NHWC':>11} {'ratio':>6}")
    for case in a.cases.split(","):
        if case not in CASES:
            sys.exit(f"error: unknown case '{case}' (use {', '.join(CASES)})")
        runs = [(baton_images_per_s(a.baton, case, a.threads), torch_images_per_s(case, a.threads, False),
                 torch_images_per_s(case, a.threads, True)) for _ in range(a.repeats)]
        b, t1, t2 = (statistics.median(r[i] for r in runs) for i in range(3))
        r = b / max(t1, t2)
        results.append(dict(case=case, batch=CASES[case][5], baton=b, torch_nchw=t1, torch_channels_last=t2, ratio=r))
        print(f"{case:<14} {CASES[case][5]:>5} {b:>12.1f} {t1:>11.1f} {t2:>11.1f} {r:>5.2f}x", flush=True)
    if a.json:
        json.dump(dict(threads=a.threads, torch=torch.__version__, env=env, repeats=a.repeats, results=results),
                  open(a.json, "w"), indent=2)


if __name__ == "__main__":
    main()
