"""An image classifier whose Dataset decodes and augments each image in Python.

Realistic shape: a compressed image store (zlib here, JPEG in life), per-sample random
crop, flip, blur, colour jitter, resize to 64x64 and normalisation in numpy, a small CNN, SGD with momentum, the
DataLoader left at its defaults (num_workers=0). True bottleneck: the data pipeline.
"""

import argparse
import zlib

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset


class CompressedImages(Dataset):
    def __init__(self, n, size=136, seed=0):
        rng = np.random.default_rng(seed)
        self.blobs = []
        self.labels = rng.integers(0, 10, n)
        base = rng.integers(0, 255, (3, size, size), dtype=np.uint8)
        for i in range(n):
            img = np.roll(base, int(self.labels[i]) * 3, axis=2) ^ rng.integers(0, 16, base.shape, dtype=np.uint8)
            self.blobs.append(zlib.compress(img.tobytes(), 6))
        self.size = size

    def __len__(self):
        return len(self.blobs)

    def __getitem__(self, i):
        s = self.size
        img = np.frombuffer(zlib.decompress(self.blobs[i]), dtype=np.uint8).reshape(3, s, s)
        y0, x0 = np.random.randint(0, s - 128, 2)
        img = img[:, y0:y0 + 128, x0:x0 + 128].astype(np.float32) / 255.0
        if np.random.rand() < 0.5:
            img = img[:, :, ::-1]
        k = np.array([1.0, 4.0, 6.0, 4.0, 1.0], dtype=np.float32) / 16.0
        for axis in (1, 2):
            img = sum(k[j] * np.roll(img, j - 2, axis=axis) for j in range(5))
        gamma = np.random.uniform(0.7, 1.4, (3, 1, 1)).astype(np.float32)
        img = np.power(img, gamma) * np.random.uniform(0.8, 1.2, (3, 1, 1)).astype(np.float32)
        img = img.reshape(3, 64, 2, 64, 2).mean(axis=(2, 4))
        img = (img - 0.45) / 0.25
        return torch.from_numpy(np.ascontiguousarray(img)), int(self.labels[i])


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 16, 3, padding=1)
        self.c2 = nn.Conv2d(16, 32, 3, padding=1)
        self.c3 = nn.Conv2d(32, 32, 3, padding=1)
        self.fc = nn.Linear(32 * 8 * 8, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.c1(x)), 2)
        x = F.max_pool2d(F.relu(self.c2(x)), 2)
        x = F.max_pool2d(F.relu(self.c3(x)), 2)
        return self.fc(x.flatten(1))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=90)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--hand", type=int, default=0, help="hand check: time N steps, then exit")
    args = p.parse_args()
    torch.manual_seed(0)
    train = CompressedImages(2048)
    loader = DataLoader(train, batch_size=args.batch_size, shuffle=True, drop_last=True)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=args.epochs)
    h = None
    if args.hand:
        from handtimer import Hand
        h = Hand(args.hand)
        h.start()
    for epoch in range(args.epochs):
        model.train()
        for i, (x, y) in enumerate(loader):
            h and h.mark("data")
            loss = F.cross_entropy(model(x), y)
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
            if i % 20 == 0:
                print(f"epoch {epoch} step {i} loss {loss.item():.3f}", flush=True)
        sched.step()


if __name__ == "__main__":
    main()
