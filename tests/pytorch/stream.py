"""A job fed by an IterableDataset (a seeded stream of feature rows), for tune's check
that a stream which does not shard by worker is not sped up by workers: with --shard
each worker takes every N-th row (torch.utils.data.get_worker_info); without, each
worker replays the whole stream, so N workers yield every row N times."""
import argparse

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, IterableDataset, get_worker_info


class Rows(IterableDataset):
    def __init__(self, n, shard):
        self.n, self.shard = n, shard

    def __iter__(self):
        g = torch.Generator().manual_seed(0)
        info = get_worker_info()
        for i in range(self.n):
            x = torch.randn(16, generator=g)
            if self.shard and info is not None and i % info.num_workers != info.id:
                continue
            yield x, x.sum().unsqueeze(0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shard", action="store_true")
    ap.add_argument("--workers", type=int, default=0)
    a = ap.parse_args()
    model = nn.Linear(16, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(1000):
        for x, y in DataLoader(Rows(100000, a.shard), batch_size=8, num_workers=a.workers):
            opt.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            opt.step()


if __name__ == "__main__":
    main()
