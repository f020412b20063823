"""Transfer learning: a small conv backbone 'pretrained' and frozen (requires_grad=False,
kept in eval mode), a new two-layer head trained with AdamW on 64x64 images from an
in-memory TensorDataset with random flips in the loop. Trains for 30 epochs."""
import argparse
import time

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def backbone():
    layers, c = [], 3
    for w in (32, 64, 128, 128):
        layers += [nn.Conv2d(c, w, 3, padding=1), nn.BatchNorm2d(w), nn.ReLU(), nn.MaxPool2d(2)]
        c = w
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--hand", type=int, default=0)
    ap.add_argument("--bf16", action="store_true")
    a = ap.parse_args()
    torch.manual_seed(0)
    body = backbone().eval()
    for p in body.parameters():
        p.requires_grad_(False)
    head = nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 10))
    model = nn.Sequential(body, head)
    opt = torch.optim.AdamW(head.parameters(), lr=1e-3)
    x = torch.randn(4096, 3, 64, 64)
    y = torch.randint(0, 10, (4096,))
    dl = DataLoader(TensorDataset(x, y), batch_size=64, shuffle=True)
    it = 0
    t0 = time.perf_counter()
    for ep in range(a.epochs):
        for xb, yb in dl:
            if torch.rand(()) < 0.5:
                xb = xb.flip(3)
            opt.zero_grad()
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.bf16):
                loss = nn.functional.cross_entropy(model(xb), yb)
            loss.backward()
            opt.step()
            it += 1
            if a.hand and it == 3:
                t0 = time.perf_counter()
            if a.hand and it == 3 + a.hand:
                dt = (time.perf_counter() - t0) / a.hand
                print("hand bf16=%s: %.1f ms/step, %.0f samples/s" % (a.bf16, dt * 1e3, 64 / dt))
                return
        print("epoch", ep, loss.item())


if __name__ == "__main__":
    main()
