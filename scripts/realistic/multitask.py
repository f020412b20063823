"""Multi-task learning with two datasets: 28x28 digits (fake_mnist, batch 32) and a
tabular regression set (64 features, batch 96), each from its own DataLoader, zipped so
that one optimizer step takes one batch of each (`for (xa, ya), (xb, yb) in zip(...)`).
Two encoders feed a shared residual trunk with two heads; the loss is the sum of a
cross-entropy and a weighted MSE; Adam, a StepLR. The digits' DataLoader has
`num_workers=2`, the tabular one its defaults. A step is 128 samples (32 + 96).
True bottleneck: the digits' `__getitem__` (a uint8 image to a normalized float tensor
with a random shift) and the trunk's GEMMs.
`--hand N` times N steps (data, forward, backward, optimizer); `--workers W`, `--fused`
and `--bf16` are the by-hand versions of tune's knobs.
"""

import argparse

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

from fake_mnist import MNIST
from handtimer import Hand


class Shifted(Dataset):
    def __init__(self):
        self.base = MNIST(train=True, n=20000)

    def __len__(self):
        return len(self.base)

    def __getitem__(self, i):
        img = self.base.data[i]
        dx, dy = np.random.randint(-2, 3, 2)
        img = np.roll(np.roll(img, dx, 1), dy, 0)
        x = (torch.from_numpy(img.astype(np.float32)) / 255.0 - 0.1307) / 0.3081
        return x.view(1, 28, 28), int(self.base.targets[i])


class Tabular(Dataset):
    def __init__(self, n=50000):
        g = torch.Generator().manual_seed(2)
        self.x = torch.randn(n, 64, generator=g)
        w = torch.randn(64, 1, generator=g)
        self.y = (self.x @ w).squeeze(1) + 0.1 * torch.randn(n, generator=g)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i], self.y[i]


class Net(nn.Module):
    def __init__(self, d=512):
        super().__init__()
        self.img = nn.Sequential(nn.Conv2d(1, 32, 3, 2, 1), nn.ReLU(), nn.Conv2d(32, 64, 3, 2, 1), nn.ReLU(),
                                 nn.Flatten(), nn.Linear(64 * 7 * 7, d))
        self.tab = nn.Sequential(nn.Linear(64, d), nn.ReLU(), nn.Linear(d, d))
        self.trunk = nn.ModuleList(nn.Sequential(nn.LayerNorm(d), nn.Linear(d, d), nn.GELU()) for _ in range(4))
        self.cls = nn.Linear(d, 10)
        self.reg = nn.Linear(d, 1)

    def shared(self, h):
        for blk in self.trunk:
            h = h + blk(h)
        return h

    def forward(self, xa, xb):
        return self.cls(self.shared(self.img(xa))), self.reg(self.shared(self.tab(xb))).squeeze(1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=50)
    ap.add_argument("--hand", type=int, default=0)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--fused", action="store_true")
    ap.add_argument("--bf16", action="store_true")
    args = ap.parse_args()
    torch.manual_seed(0)
    la = DataLoader(Shifted(), batch_size=32, shuffle=True, num_workers=args.workers)
    lb = DataLoader(Tabular(), batch_size=96, shuffle=True)
    model = Net()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, fused=args.fused or None)
    sched = torch.optim.lr_scheduler.StepLR(opt, 5, 0.5)
    hand = Hand(args.hand) if args.hand else None
    for epoch in range(args.epochs):
        if hand:
            hand.start()
        for step, ((xa, ya), (xb, yb)) in enumerate(zip(la, lb)):
            if hand:
                hand.mark("data")
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
                oa, ob = model(xa, xb)
                loss = F.cross_entropy(oa, ya) + 0.5 * F.mse_loss(ob, yb)
            if hand:
                hand.mark("fwd")
            opt.zero_grad()
            loss.backward()
            if hand:
                hand.mark("bwd")
            opt.step()
            if hand:
                hand.mark("opt")
                if hand.end(len(xa) + len(xb)):
                    hand.report()
                    return
                hand.start()
            if step % 100 == 0:
                print(f"epoch {epoch} step {step} loss {loss.item():.3f}", flush=True)
        sched.step()


if __name__ == "__main__":
    main()
