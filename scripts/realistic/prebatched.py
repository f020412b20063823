"""A pre-batched reader, as an HDF5 or webdataset shard reader is written: the Dataset
returns whole batches, the DataLoader runs with batch_size=None and `--workers` worker
processes (2 by default), an MLP trains with SGD and momentum, `zero_grad()` as PyTorch
defaults it. `--bf16` computes the loss under the script's own
`torch.autocast("cpu", dtype=torch.bfloat16)`. `--hand N` times N steps with
perf_counter, apart from tune."""
import argparse
import statistics
import time

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset


class Shards(Dataset):
    def __init__(self, n, batch):
        self.n, self.batch = n, batch

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        x = torch.randn(self.batch, 256, generator=g)
        # Per-batch decoding work, in the worker.
        for _ in range(3):
            x = torch.tanh(x @ torch.eye(256) * 1.01)
        return x, (x.sum(1) > 0).long()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=100000)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--bf16", action="store_true")
    ap.add_argument("--hand", type=int, default=0, help="time N steps by hand and stop")
    a = ap.parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 2)
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    dl = DataLoader(Shards(a.steps, a.batch), batch_size=None, shuffle=True, num_workers=a.workers)
    times, t = [], time.perf_counter()
    for i, (x, y) in enumerate(dl):
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.bf16):
            loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        now = time.perf_counter()
        times.append(now - t)
        t = now
        if a.hand and len(times) >= a.hand + 5:
            ms = statistics.median(times[5:]) * 1e3
            print(f"hand: median {ms:.1f} ms a step, {a.batch / ms * 1e3:.1f} samples/s")
            return
        if i % 200 == 0:
            print(f"step {i} loss {loss.item():.3f}", flush=True)


if __name__ == "__main__":
    main()
