#!/usr/bin/env python3
"""A small PyTorch job to watch with `tune watch` on a GPU machine (not run on the
CPU-only development machine).

  # DataParallel over every visible GPU: expect an imbalance finding on gpu0 (it
  # gathers the outputs, computes the loss and reduces the gradients)
  tune watch --out reports/watch-dp -- python scripts/watch_dp.py

  # The same input pipeline made CPU-bound on the training process (num_workers=0 and
  # ~per-sample decode work): expect a starvation finding (low, saw-tooth utilisation
  # while a core is saturated) on a machine where the job's CPU share is high
  tune watch --out reports/watch-starved -- python scripts/watch_dp.py --workers 0 --decode-us 400

  # One GPU shows utilisation, memory, power, clocks, throttling and the process's
  # own memory; imbalance needs two or more GPUs.

It prints `step N samples/s: X` lines and, at the end, each GPU's peak allocated memory
as PyTorch saw it, to compare with what NVML reported to tune.
"""

import argparse
import sys
import time

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset


class Synthetic(Dataset):
    """Random images with random labels; `decode_us` of CPU work per sample stands in
    for JPEG decoding and augmentation."""

    def __init__(self, n, size, classes, decode_us):
        self.n, self.size, self.classes, self.decode_us = n, size, classes, decode_us

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        x = torch.randn(3, self.size, self.size, generator=g)
        if self.decode_us:
            end = time.perf_counter() + self.decode_us * 1e-6
            while time.perf_counter() < end:
                pass
        return x, int(torch.randint(self.classes, (1,), generator=g))


def block(cin, cout, stride):
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, stride, 1, bias=False),
        nn.BatchNorm2d(cout),
        nn.ReLU(inplace=True),
    )


def model(width, classes):
    return nn.Sequential(
        block(3, width, 1),
        block(width, width, 1),
        block(width, 2 * width, 2),
        block(2 * width, 2 * width, 1),
        block(2 * width, 4 * width, 2),
        block(4 * width, 4 * width, 1),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(4 * width, classes),
    )


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch", type=int, default=256, help="global batch, split over GPUs")
    p.add_argument("--size", type=int, default=64, help="image side")
    p.add_argument("--width", type=int, default=128)
    p.add_argument("--classes", type=int, default=1000)
    p.add_argument("--workers", type=int, default=8)
    p.add_argument("--decode-us", type=int, default=0, help="CPU work per sample")
    p.add_argument("--no-dp", action="store_true", help="one GPU, no DataParallel")
    a = p.parse_args()

    if not torch.cuda.is_available():
        print("watch_dp.py: no CUDA device visible; this script is for a GPU machine", file=sys.stderr)
        return 2
    n_gpu = torch.cuda.device_count()
    net = model(a.width, a.classes).cuda()
    if n_gpu > 1 and not a.no_dp:
        net = nn.DataParallel(net)
    print(f"{n_gpu} GPU(s), DataParallel: {isinstance(net, nn.DataParallel)}", flush=True)
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    data = Synthetic(a.steps * a.batch, a.size, a.classes, a.decode_us)
    loader = DataLoader(
        data,
        batch_size=a.batch,
        num_workers=a.workers,
        pin_memory=True,
        persistent_workers=a.workers > 0,
    )
    t0, seen = time.perf_counter(), 0
    for step, (x, y) in enumerate(loader):
        x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(net(x), y)
        loss.backward()
        opt.step()
        seen += x.shape[0]
        if (step + 1) % 20 == 0:
            torch.cuda.synchronize()
            dt = time.perf_counter() - t0
            print(f"step {step + 1} samples/s: {seen / dt:.1f} loss {loss.item():.3f}", flush=True)
            t0, seen = time.perf_counter(), 0
    torch.cuda.synchronize()
    for i in range(n_gpu):
        peak = torch.cuda.max_memory_allocated(i) / 2**20
        print(f"gpu {i} torch max_memory_allocated: {peak:.0f} MiB", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
