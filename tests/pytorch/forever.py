"""A PyTorch CPU training script written as real ones are: an epoch loop far longer than
any test (100,000 epochs), a DataLoader, a small CNN. It knows nothing about tune.

For the tests of tune's measurement window (issue #26) it can also misbehave:
--ignore-exit   catch SystemExit (tune's polite stop) and train on;
--crash-after N raise after N optimizer steps;
--never-step    compute forever without calling optimizer.step();
--total N       end by itself after N optimizer steps;
--slow-exit S   make the interpreter's teardown take S more seconds: a module-level
                object whose finaliser sleeps, standing in for a large job's teardown
                (freeing its model and torch's libraries takes 5-7 s for ResNet-18 on a
                loaded 2-core machine), which outlived tune's polite stop.
"""

import argparse
import time

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset


class SlowExit:
    """Sleeps when the interpreter's teardown collects it (never during training)."""

    def __init__(self, s):
        self.s = s
        self.sleep = time.sleep

    def __del__(self):
        self.sleep(self.s)


class Slow(Dataset):
    def __init__(self, n, cost_ms):
        self.n = n
        self.cost = cost_ms / 1000.0

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        time.sleep(self.cost)
        g = torch.Generator().manual_seed(i)
        x = torch.randn(3, 16, 16, generator=g)
        return x, int(x[0].mean() > 0)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--cost-ms", type=float, default=1.0)
    p.add_argument("--epochs", type=int, default=100000)
    p.add_argument("--ignore-exit", action="store_true")
    p.add_argument("--crash-after", type=int, default=0)
    p.add_argument("--never-step", action="store_true")
    p.add_argument("--total", type=int, default=0)
    p.add_argument("--slow-exit", type=float, default=0.0)
    p.add_argument("--tag", default="")  # lets a test find its processes
    args = p.parse_args()
    if args.slow_exit:
        global _slow_exit
        _slow_exit = SlowExit(args.slow_exit)
    torch.manual_seed(0)
    torch.set_num_threads(1)
    loader = DataLoader(Slow(256, args.cost_ms), batch_size=args.batch, shuffle=True,
                        num_workers=args.workers)
    net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                        nn.Flatten(), nn.Linear(8, 2))
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    loss_fn = nn.CrossEntropyLoss()
    steps = 0
    for epoch in range(args.epochs):
        for x, y in loader:
            opt.zero_grad()
            loss = loss_fn(net(x), y)
            loss.backward()
            if args.never_step:
                continue
            try:
                opt.step()
            except SystemExit:
                if not args.ignore_exit:
                    raise
            steps += 1
            if args.crash_after and steps >= args.crash_after:
                raise RuntimeError("crashed on purpose after %d steps" % steps)
            if args.total and steps >= args.total:
                return


if __name__ == "__main__":
    main()
