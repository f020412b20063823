"""Text classifier fed by a streaming IterableDataset: each sample is a synthetic
'document' tokenised in pure Python (lower-casing, regex word split, vocabulary lookup
with hashing for unknown words, truncation and padding), as in a recipe that streams
shards it cannot hold in memory. The dataset does not shard by worker
(torch.utils.data.get_worker_info), so with num_workers=N every worker replays the
whole stream. EmbeddingBag + MLP, Adam, trains for 20 passes over a 2M-document
stream."""
import argparse
import random
import re
import time

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, IterableDataset

WORDS = ["alpha", "beta", "gamma", "delta", "tensor", "graph", "kernel", "batch",
         "epoch", "loss", "model", "layer", "token", "vector", "matrix", "gradient"]
SPLIT = re.compile(r"[A-Za-z]+")
VOCAB = {w: i + 2 for i, w in enumerate(WORDS)}


def tokenize(text, n=128, buckets=50000):
    ids = []
    for w in SPLIT.findall(text.lower()):
        ids.append(VOCAB.get(w, 2 + len(VOCAB) + hash(w) % buckets))
        if len(ids) == n:
            break
    return ids + [0] * (n - len(ids))


class Stream(IterableDataset):
    def __init__(self, docs):
        self.docs = docs

    def __iter__(self):
        rng = random.Random(0)
        for i in range(self.docs):
            k = rng.randrange(4)
            words = [rng.choice(WORDS) if rng.random() < 0.7 else "w%d" % rng.randrange(99999)
                     for _ in range(160)]
            words[rng.randrange(160)] = WORDS[k]
            yield torch.tensor(tokenize(" ".join(words).title())), k


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--passes", type=int, default=20)
    ap.add_argument("--workers", type=int, default=0)
    ap.add_argument("--hand", type=int, default=0)
    a = ap.parse_args()
    torch.manual_seed(0)
    vocab = 2 + len(VOCAB) + 50000
    model = nn.Sequential(nn.EmbeddingBag(vocab, 64, mode="mean"), nn.Linear(64, 64), nn.ReLU(),
                          nn.Linear(64, 4))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    dl = DataLoader(Stream(2_000_000), batch_size=64, num_workers=a.workers)
    it = 0
    t0 = time.perf_counter()
    for p in range(a.passes):
        for xb, yb in dl:
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(xb), yb)
            loss.backward()
            opt.step()
            it += 1
            if a.hand and it == 5:
                t0 = time.perf_counter()
            if a.hand and it == 5 + a.hand:
                dt = (time.perf_counter() - t0) / a.hand
                print("hand workers=%d: %.1f ms/step, %.0f samples/s" % (a.workers, dt * 1e3, 64 / dt))
                return
            if it % 500 == 0:
                print("pass", p, "step", it, loss.item())


if __name__ == "__main__":
    main()
