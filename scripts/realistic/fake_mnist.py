"""A stand-in for torchvision's MNIST (not installed here, and nothing is downloaded):
28x28 uint8 digits drawn as strokes, one per item, turned into a float tensor in
`__getitem__` as `transforms.ToTensor()` (and `Normalize`, `Lambda(flatten)` where a
script asks) turn a PIL image, so a DataLoader over it costs what MNIST's does per item."""

import numpy as np
import torch
from torch.utils.data import Dataset


class MNIST(Dataset):
    def __init__(self, train=True, n=None, normalize=False, flatten=False, seed=0):
        n = n or (60000 if train else 10000)
        rng = np.random.default_rng(seed + (0 if train else 1))
        self.targets = torch.from_numpy(rng.integers(0, 10, n))
        yy, xx = np.mgrid[0:28, 0:28]
        imgs = np.zeros((n, 28, 28), np.uint8)
        for i in range(n):
            d = int(self.targets[i])
            cx, cy = 14 + rng.normal(0, 2), 14 + rng.normal(0, 2)
            r = 5 + d % 4 + rng.normal(0, 0.5)
            ring = np.abs(np.hypot(xx - cx, yy - cy) - r) < 1.5
            bar = (np.abs(xx - cx - (d - 5)) < 1.2) & (np.abs(yy - cy) < 9)
            imgs[i] = np.where(ring | bar, 255, 0) * (rng.random((28, 28)) > 0.1)
        self.data = imgs
        self.normalize = normalize
        self.flatten = flatten

    def __len__(self):
        return len(self.data)

    def __getitem__(self, i):
        pic = np.array(self.data[i], copy=True)  # PIL's Image.fromarray / np.array round trip
        x = torch.from_numpy(pic).view(28, 28, 1).permute(2, 0, 1).contiguous().float().div(255)
        if self.normalize:
            x = (x - 0.1307) / 0.3081
        if self.flatten:
            x = torch.flatten(x)
        return x, int(self.targets[i])
