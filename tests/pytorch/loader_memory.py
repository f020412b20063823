"""A compute-bound PyTorch CPU job whose DataLoader asks for 4 workers that buy nothing:
its dataset holds ready-made batches (reading one is a tensor index, as with pre-tokenized
or pre-batched shards), so a worker's work per batch is next to nothing and the loop never
waits for data, with 4 workers, 2 or none; the MLP's step costs tens of milliseconds. Each
worker builds a per-worker cache of --cache-mib MiB at start (as datasets that open files,
tokenizers or decoded-image caches per worker do), so the memory grows with the workers
while the speed does not. It knows nothing of tune.
"""

import argparse

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset

CACHE = None


class Batches(Dataset):
    def __init__(self, n, batch, dim):
        self.x = torch.randn(n, batch, dim)
        self.y = (self.x[:, :, 0] > 0).long()

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i], self.y[i]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--cache-mib", type=int, default=300)
    p.add_argument("--width", type=int, default=1536)
    args = p.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)

    def init(_):
        global CACHE
        # Written, so the pages are really resident.
        CACHE = torch.ones(args.cache_mib * (1 << 20) // 4)

    loader = DataLoader(
        Batches(args.steps + 1, 64, 256),
        batch_size=None,
        shuffle=True,
        num_workers=4,
        worker_init_fn=init,
    )
    w = args.width
    net = nn.Sequential(nn.Linear(256, w), nn.ReLU(), nn.Linear(w, w), nn.ReLU(), nn.Linear(w, 10))
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()
    for x, y in loader:
        opt.zero_grad()
        loss_fn(net(x), y).backward()
        opt.step()


if __name__ == "__main__":
    main()
