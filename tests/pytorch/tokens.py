"""A small next-token language model trained on random token ids, written for tune's
watch-timeline tests. It knows nothing of tune.

--loader: batches of token ids ([B, T] int64) come from a torch DataLoader; without it
the loop slices them from a tensor in memory and feeds the model directly.
--first-s S: the model's first forward also sleeps S seconds, a planted stand-in for a
torch.compile of the first step (real compilation needs a C++ toolchain and minutes).
--sleep-ms M: every forward sleeps M ms more, a planted slower version of the same job.
"""

import argparse
import time

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


class LM(nn.Module):
    def __init__(self, vocab, dim, first_s, sleep_ms):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.mix = nn.Linear(dim, dim)
        self.out = nn.Linear(dim, vocab)
        self.first_s = first_s
        self.sleep_s = sleep_ms / 1000.0

    def forward(self, ids):
        if self.first_s:
            time.sleep(self.first_s)
            self.first_s = 0
        if self.sleep_s:
            time.sleep(self.sleep_s)
        return self.out(torch.relu(self.mix(self.emb(ids))))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq", type=int, default=32)
    p.add_argument("--vocab", type=int, default=256)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--loader", action="store_true")
    p.add_argument("--first-s", type=float, default=0.0)
    p.add_argument("--sleep-ms", type=float, default=0.0)
    args = p.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    n = args.batch * (args.steps + 2)
    data = torch.randint(0, args.vocab, (n, args.seq + 1))
    model = LM(args.vocab, args.dim, args.first_s, args.sleep_ms)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loss_fn = nn.CrossEntropyLoss()

    def batches():
        if args.loader:
            yield from DataLoader(TensorDataset(data[:, :-1], data[:, 1:]), batch_size=args.batch)
        else:
            for i in range(0, n - args.batch + 1, args.batch):
                yield data[i : i + args.batch, :-1], data[i : i + args.batch, 1:]

    for step, (x, y) in enumerate(batches()):
        if step == args.steps:
            break
        opt.zero_grad()
        logits = model(x)
        loss = loss_fn(logits.reshape(-1, args.vocab), y.reshape(-1))
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()
