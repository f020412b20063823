"""Augmentation-heavy classifier whose DataLoader uses the 'spawn' start method (as
recipes written for macOS or for CUDA-in-workers do), persistent workers and
prefetch_factor 4. Each sample is a 3x48x48 tensor, randomly cropped, flipped, rotated by
90 degrees and colour-jittered with torch ops in __getitem__. A ResNet-ish net, AdamW."""
import argparse
import time

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset


class Aug(Dataset):
    def __init__(self, n=20000):
        g = torch.Generator().manual_seed(0)
        self.x = torch.rand(512, 3, 56, 56, generator=g)
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        img = self.x[i % 512]
        top, left = torch.randint(0, 9, (2,)).tolist()
        img = img[:, top:top + 48, left:left + 48]
        if torch.rand(()) < 0.5:
            img = img.flip(2)
        img = torch.rot90(img, int(torch.randint(0, 4, ())), (1, 2))
        for _ in range(6):  # a jitter chain, as torchvision's ColorJitter + blur
            img = (img * (0.8 + 0.4 * torch.rand(3, 1, 1)) + 0.1 * torch.randn(3, 1, 1)).clamp(0, 1)
            img = torch.nn.functional.avg_pool2d(img[None], 3, 1, 1)[0]
        return (img - 0.5) / 0.25, i % 10


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.a = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(c)

    def forward(self, x):
        return torch.relu(x + self.bn(self.a(x)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=40)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--hand", type=int, default=0)
    a = ap.parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 32, 3, stride=2, padding=1), nn.ReLU(), Block(32), Block(32),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    dl = DataLoader(Aug(), batch_size=32, shuffle=True, num_workers=a.workers,
                    multiprocessing_context="spawn" if a.workers else None,
                    persistent_workers=a.workers > 0, prefetch_factor=4 if a.workers else None)
    it, t0 = 0, None
    for ep in range(a.epochs):
        for xb, yb in dl:
            opt.zero_grad(set_to_none=True)
            loss = nn.functional.cross_entropy(model(xb), yb)
            loss.backward()
            opt.step()
            it += 1
            if a.hand and it == 5:
                t0 = time.perf_counter()
            if a.hand and it == 5 + a.hand:
                dt = (time.perf_counter() - t0) / a.hand
                print("hand workers=%d: %.1f ms/step, %.0f samples/s" % (a.workers, dt * 1e3, 32 / dt))
                return
            if it % 50 == 0:
                print("it", it, loss.item())


if __name__ == "__main__":
    main()
