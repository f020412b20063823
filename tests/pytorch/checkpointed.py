"""A residual MLP whose blocks go through torch.utils.checkpoint (`--ckpt on`, as large-
model recipes write it) or are called directly (`--ckpt off`). It knows nothing of tune.

Each step the script times its own forward pass ("FWD <fraction of the step>"): under
checkpointing, backward runs that forward's blocks again, so the recompute tune measures
inside backward is close to it."""

import argparse
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.up = nn.Linear(d, 4 * d)
        self.down = nn.Linear(4 * d, d)

    def forward(self, x):
        return x + self.down(F.gelu(self.up(self.norm(x))))


class Net(nn.Module):
    def __init__(self, ckpt, d=128, depth=6):
        super().__init__()
        self.ckpt = ckpt
        self.blocks = nn.ModuleList(Block(d) for _ in range(depth))
        self.head = nn.Linear(d, 10)

    def forward(self, x):
        for b in self.blocks:
            x = checkpoint(b, x, use_reentrant=False) if self.ckpt else b(x)
        return self.head(x)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ckpt", choices=["on", "off"], default="on")
    ap.add_argument("--steps", type=int, default=100000)
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = Net(args.ckpt == "on")
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(256, 128), torch.randint(0, 10, (256,))
    for _ in range(args.steps):
        t0 = time.perf_counter()
        out = model(x)
        t1 = time.perf_counter()
        loss = F.cross_entropy(out, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"FWD {(t1 - t0) / (time.perf_counter() - t0):.4f}", flush=True)


if __name__ == "__main__":
    main()
