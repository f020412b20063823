"""Tabular regression with a deep narrow MLP (48 residual blocks, LayerNorm each), small
batches from a TensorDataset, SGD with momentum and foreach=False (copied from a
recipe that wanted bit-identical updates across versions). Trains for 100 epochs."""
import argparse
import time

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, d)
        self.fc2 = nn.Linear(d, d)

    def forward(self, x):
        return x + self.fc2(torch.relu(self.fc1(self.norm(x))))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=100)
    ap.add_argument("--hand", type=int, default=0)
    ap.add_argument("--impl", default="forloop")
    a = ap.parse_args()
    torch.manual_seed(0)
    x = torch.randn(50000, 32)
    y = (x[:, :4].sum(1, keepdim=True)).tanh()
    model = nn.Sequential(nn.Linear(32, 64), *[Block(64) for _ in range(48)], nn.Linear(64, 1))
    kw = {"forloop": {"foreach": False}, "foreach": {"foreach": True}, "fused": {"fused": True}, "default": {}}[a.impl]
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9, **kw)
    dl = DataLoader(TensorDataset(x, y), batch_size=32, shuffle=True)
    it = 0
    t0 = time.perf_counter()
    for ep in range(a.epochs):
        for xb, yb in dl:
            opt.zero_grad()
            loss = nn.functional.mse_loss(model(xb), yb)
            loss.backward()
            opt.step()
            it += 1
            if a.hand and it == 10:
                t0 = time.perf_counter()
            if a.hand and it == 10 + a.hand:
                dt = (time.perf_counter() - t0) / a.hand
                print("hand %s: %.2f ms/step, %.0f samples/s" % (a.impl, dt * 1e3, 32 / dt))
                return
        print("epoch", ep, loss.item())


if __name__ == "__main__":
    main()
