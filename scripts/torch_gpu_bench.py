#!/usr/bin/env python3
"""PyTorch eager on the GPU, the same models, batch sizes and knobs as `tune train
--device cuda`, for the side-by-side step-time ratio in docs/performance.md.

Models mirror tune's zoo (src/engine/nn/zoo.rs): mlp 784-1024-1024-10, cnn-small
(3 conv-BN-ReLU, 32/64/128 channels, strides 1/2/2, global average pool, linear) and
resnet-mini (ResNet-20: 3 stages of 3 basic blocks, 16/32/64 channels, 1x1 projection
shortcuts). PyTorch's defaults otherwise (NCHW, fp32 matmul without TF32), SGD momentum
0.9, lr 0.05, set_to_none zeroing. One JSON line per (model, batch, amp) on stdout.

`--amp` takes tune's values: off (fp32), bf16 and fp16 (autocast; fp16 with GradScaler),
tf32 (fp32 with torch.backends.cuda.matmul.allow_tf32 and cudnn.allow_tf32).
`--autotune` sets torch.backends.cudnn.benchmark, tune's `autotune`.

    python3 scripts/torch_gpu_bench.py --models mlp,cnn-small,resnet-mini --amp off,bf16,tf32
"""
import argparse
import json
import statistics
import time

import torch
import torch.nn as nn


def conv_bn_relu(ci, co, s):
    return [nn.Conv2d(ci, co, 3, s, 1, bias=False), nn.BatchNorm2d(co), nn.ReLU(inplace=True)]


class Block(nn.Module):
    def __init__(self, ci, co, s):
        super().__init__()
        self.main = nn.Sequential(*conv_bn_relu(ci, co, s)[:3], nn.Conv2d(co, co, 3, 1, 1, bias=False), nn.BatchNorm2d(co))
        self.short = (nn.Sequential(nn.Conv2d(ci, co, 1, s, 0, bias=False), nn.BatchNorm2d(co))
                      if s != 1 or ci != co else nn.Identity())

    def forward(self, x):
        return torch.relu(self.main(x) + self.short(x))


def build(name):
    if name == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10)), (1, 28, 28)
    if name == "cnn-small":
        return nn.Sequential(*conv_bn_relu(3, 32, 1), *conv_bn_relu(32, 64, 2), *conv_bn_relu(64, 128, 2),
                             nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(128, 10)), (3, 32, 32)
    layers, c = conv_bn_relu(3, 16, 1), 16
    for stage, width in enumerate([16, 32, 64]):
        for b in range(3):
            layers.append(Block(c, width, 2 if stage > 0 and b == 0 else 1))
            c = width
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c, 10)), (3, 32, 32)


def bench(name, batch, amp, steps, warmup, autotune=False):
    dev = torch.device("cuda")
    torch.backends.cudnn.benchmark = autotune
    tf32 = amp == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    model, shape = build(name)
    model = model.to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    x = torch.randn(batch, *shape, device=dev)
    y = torch.randint(0, 10, (batch,), device=dev)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(amp)
    scaler = torch.amp.GradScaler("cuda", enabled=amp == "fp16")
    times = []
    for i in range(warmup + steps):
        torch.cuda.synchronize()
        t = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=dtype or torch.float32, enabled=dtype is not None):
            loss = nn.functional.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        loss.item()
        torch.cuda.synchronize()
        if i >= warmup:
            times.append(time.perf_counter() - t)
    med = statistics.median(times)
    return {"peer": "pytorch-eager-cuda", "torch": torch.__version__, "gpu": torch.cuda.get_device_name(0),
            "model": name, "batch": batch, "amp": amp, "autotune": autotune, "step_ms_median": med * 1e3,
            "samples_per_s": batch / med, "steps": steps}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="mlp,cnn-small,resnet-mini")
    ap.add_argument("--batches", default="128")
    ap.add_argument("--amp", default="off,bf16")
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--autotune", action="store_true", help="torch.backends.cudnn.benchmark = True")
    a = ap.parse_args()
    for amp in a.amp.split(","):
        if amp not in ("off", "bf16", "fp16", "tf32"):
            ap.error(f"--amp {amp!r}: must be off, bf16, fp16 or tf32")
    for m in a.models.split(","):
        for b in a.batches.split(","):
            for amp in a.amp.split(","):
                print(json.dumps(bench(m, int(b), amp, a.steps, a.warmup, a.autotune)), flush=True)


if __name__ == "__main__":
    main()
