"""A script that already follows the usual advice: DataLoader with num_workers=2,
pin_memory=True, persistent_workers=True, zero_grad() (None gradients by default since
PyTorch 2.0), a residual MLP on tabular features with a cheap in-memory dataset.
True bottleneck: forward/backward compute; the two workers only take cores from it.
"""

import argparse

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset


class Tabular(Dataset):
    def __init__(self, n, features):
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, features, generator=g)
        self.y = (self.x[:, :8].sum(1) > 0).long()

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i], self.y[i]


class ResMLP(nn.Module):
    def __init__(self, features, width=512, depth=4):
        super().__init__()
        self.inp = nn.Linear(features, width)
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.LayerNorm(width), nn.Linear(width, width), nn.GELU(), nn.Linear(width, width))
            for _ in range(depth))
        self.out = nn.Linear(width, 2)

    def forward(self, x):
        x = self.inp(x)
        for b in self.blocks:
            x = x + b(x)
        return self.out(x)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=50)
    p.add_argument("--hand", type=int, default=0)
    args = p.parse_args()
    torch.manual_seed(0)
    loader = DataLoader(Tabular(50_000, 64), batch_size=256, shuffle=True, num_workers=2,
                        pin_memory=True, persistent_workers=True, drop_last=True)
    model = ResMLP(64)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    crit = nn.CrossEntropyLoss()
    h = None
    if args.hand:
        from handtimer import Hand
        h = Hand(args.hand)
        h.start()
    for epoch in range(args.epochs):
        for step, (x, y) in enumerate(loader):
            h and h.mark("data")
            loss = crit(model(x), y)
            h and h.mark("fwd")
            opt.zero_grad()
            loss.backward()
            h and h.mark("bwd")
            opt.step()
            h and h.mark("opt")
            if h:
                if h.end(x.shape[0]):
                    h.report()
                    return
                h.start()
            if step % 50 == 0:
                print(f"epoch {epoch} step {step} loss {loss.item():.3f}", flush=True)


if __name__ == "__main__":
    main()
