"""A small, ordinary PyTorch CPU training script, as a user would write it: a CNN on a
dataset whose samples take a few milliseconds each to read (a sleep stands for disk or
network latency, so the cost does not depend on how loaded the test machine is).

It knows nothing about tune. It prints one JSON line of throughput per window of steps
after the first window (worker start-up), for `[workload.command]` sweeps.
"""

import argparse
import json
import time

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset


class SlowShapes(Dataset):
    def __init__(self, n, cost_ms):
        self.n = n
        self.cost = cost_ms / 1000.0

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        time.sleep(self.cost)
        g = torch.Generator().manual_seed(i)
        x = torch.randn(3, 32, 32, generator=g)
        y = int(x[0].mean() > 0)
        return x, y


def model(width):
    return nn.Sequential(
        nn.Conv2d(3, width, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(width, 2 * width, 3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(2 * width, 2),
    )


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--window", type=int, default=5)
    p.add_argument("--cost-ms", type=float, default=2.0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--width", type=int, default=16)
    args = p.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    ds = SlowShapes(args.batch * args.steps, args.cost_ms)
    loader = DataLoader(ds, batch_size=args.batch, shuffle=True, num_workers=args.workers)
    net = model(args.width)
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    t0 = time.perf_counter()
    for step, (x, y) in enumerate(loader, 1):
        opt.zero_grad()
        loss = loss_fn(net(x), y)
        loss.backward()
        opt.step()
        if step % args.window == 0:
            t1 = time.perf_counter()
            if step > args.window:
                sps = args.window * args.batch / (t1 - t0)
                print(json.dumps({"step": step, "loss": loss.item(), "samples_per_s": sps}), flush=True)
            t0 = t1


if __name__ == "__main__":
    main()
