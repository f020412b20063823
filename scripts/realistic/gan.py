"""DCGAN-style training on 32x32 images: generator and discriminator, two Adam
optimizers (fused, as a recipe from a GPU box would set), a Dataset that normalises and
flips each image in numpy. Trains for 50 epochs."""
import argparse
import time

import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset


class Faces(Dataset):
    def __init__(self, n=20000):
        rng = np.random.default_rng(0)
        self.raw = rng.integers(0, 255, size=(n, 32, 32, 3), dtype=np.uint8)

    def __len__(self):
        return len(self.raw)

    def __getitem__(self, i):
        x = self.raw[i].astype(np.float32) / 127.5 - 1.0
        if i % 2:
            x = x[:, ::-1]
        return torch.from_numpy(np.ascontiguousarray(x.transpose(2, 0, 1)))


def gen(nz=64):
    return nn.Sequential(
        nn.ConvTranspose2d(nz, 128, 4, 1, 0, bias=False), nn.BatchNorm2d(128), nn.ReLU(True),
        nn.ConvTranspose2d(128, 64, 4, 2, 1, bias=False), nn.BatchNorm2d(64), nn.ReLU(True),
        nn.ConvTranspose2d(64, 32, 4, 2, 1, bias=False), nn.BatchNorm2d(32), nn.ReLU(True),
        nn.ConvTranspose2d(32, 3, 4, 2, 1, bias=False), nn.Tanh(),
    )


def disc():
    return nn.Sequential(
        nn.Conv2d(3, 32, 4, 2, 1, bias=False), nn.LeakyReLU(0.2, True),
        nn.Conv2d(32, 64, 4, 2, 1, bias=False), nn.BatchNorm2d(64), nn.LeakyReLU(0.2, True),
        nn.Conv2d(64, 128, 4, 2, 1, bias=False), nn.BatchNorm2d(128), nn.LeakyReLU(0.2, True),
        nn.Conv2d(128, 1, 4, 1, 0, bias=False), nn.Flatten(),
    )


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=50)
    ap.add_argument("--hand", type=int, default=0)
    a = ap.parse_args()
    torch.manual_seed(0)
    G, D = gen(), disc()
    oG = torch.optim.Adam(G.parameters(), lr=2e-4, betas=(0.5, 0.999), fused=True)
    oD = torch.optim.Adam(D.parameters(), lr=2e-4, betas=(0.5, 0.999), fused=True)
    loss = nn.BCEWithLogitsLoss()
    dl = DataLoader(Faces(), batch_size=64, shuffle=True, drop_last=True)
    it = 0
    t0 = time.perf_counter()
    for ep in range(a.epochs):
        for real in dl:
            b = real.size(0)
            z = torch.randn(b, 64, 1, 1)
            fake = G(z)
            oD.zero_grad()
            ld = loss(D(real), torch.ones(b, 1)) + loss(D(fake.detach()), torch.zeros(b, 1))
            ld.backward()
            oD.step()
            oG.zero_grad()
            lg = loss(D(fake), torch.ones(b, 1))
            lg.backward()
            oG.step()
            it += 1
            if a.hand and it == 5:
                t0 = time.perf_counter()
            if a.hand and it == 5 + a.hand:
                dt = (time.perf_counter() - t0) / a.hand
                print("hand: %.1f ms/iter, %.1f samples/s" % (dt * 1e3, 64 / dt))
                return
            if it % 200 == 0:
                print("epoch %d iter %d lossD %.3f lossG %.3f" % (ep, it, ld.item(), lg.item()))


if __name__ == "__main__":
    main()
