"""A GRU encoder-decoder (pytorch/examples-style seq2seq with attention) trained with
gradient accumulation the way most scripts write it: the DataLoader's batches of padded
token ids (a `collate_fn` with `pad_sequence(batch_first=True)`), the loss divided by
`accum`, `optimizer.step()` and `zero_grad(set_to_none=False)` every `accum` batches,
teacher forcing over the target, Adam, and a StepLR stepped once an epoch. True
bottleneck: the decoder's per-time-step GRUCell and attention, forward and backward, in
many small operations; each optimizer step takes `accum` (4) micro-batches of 32.
"""

import argparse
import random
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import DataLoader, Dataset

PAD, BOS, EOS, VOCAB = 0, 1, 2, 2000


class Pairs(Dataset):
    """Source sentences of 8-24 tokens; the target is the source reversed (a toy task of
    the right shape: variable lengths, padding, an end token)."""

    def __init__(self, n):
        rng = random.Random(0)
        self.items = []
        for _ in range(n):
            src = [rng.randrange(3, VOCAB) for _ in range(rng.randint(8, 24))]
            self.items.append((src, list(reversed(src))))

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        src, tgt = self.items[i]
        return torch.tensor(src + [EOS]), torch.tensor([BOS] + tgt + [EOS])


def collate(batch):
    src, tgt = zip(*batch)
    return pad_sequence(src, batch_first=True, padding_value=PAD), pad_sequence(tgt, batch_first=True, padding_value=PAD)


class Seq2Seq(nn.Module):
    def __init__(self, dim=256):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, dim, padding_idx=PAD)
        self.enc = nn.GRU(dim, dim, batch_first=True, bidirectional=True)
        self.bridge = nn.Linear(2 * dim, dim)
        self.cell = nn.GRUCell(3 * dim, dim)
        self.attn = nn.Linear(dim, 2 * dim, bias=False)
        self.out = nn.Linear(3 * dim, VOCAB)

    def forward(self, src, tgt_in):
        mem, h = self.enc(self.emb(src))
        mask = src.eq(PAD)
        s = torch.tanh(self.bridge(torch.cat([h[0], h[1]], -1)))
        ctx = torch.zeros(src.shape[0], mem.shape[-1])
        logits = []
        for t in range(tgt_in.shape[1]):
            s = self.cell(torch.cat([self.emb(tgt_in[:, t]), ctx], -1), s)
            score = torch.bmm(mem, self.attn(s).unsqueeze(2)).squeeze(2).masked_fill(mask, -1e9)
            ctx = torch.bmm(F.softmax(score, -1).unsqueeze(1), mem).squeeze(1)
            logits.append(self.out(torch.cat([s, ctx], -1)))
        return torch.stack(logits, 1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=50)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--accum", type=int, default=4)
    ap.add_argument("--hand", type=int, default=0)
    ap.add_argument("--bf16", action="store_true")
    args = ap.parse_args()
    torch.manual_seed(0)
    loader = DataLoader(Pairs(20000), batch_size=args.batch_size, shuffle=True, collate_fn=collate)
    model = Seq2Seq()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.StepLR(opt, 1, 0.9)
    times, t = [], time.perf_counter()
    updates = 0
    for epoch in range(args.epochs):
        opt.zero_grad(set_to_none=False)
        for i, (src, tgt) in enumerate(loader):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
                logits = model(src, tgt[:, :-1])
                loss = F.cross_entropy(logits.reshape(-1, VOCAB).float(), tgt[:, 1:].reshape(-1), ignore_index=PAD)
            (loss / args.accum).backward()
            if (i + 1) % args.accum == 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
                opt.zero_grad(set_to_none=False)
                updates += 1
                if args.hand:
                    times.append(time.perf_counter() - t)
                    t = time.perf_counter()
                    if len(times) == args.hand + 3:
                        import statistics

                        ms = statistics.median(times[3:]) * 1e3
                        print(f"HAND steps={args.hand} median_step_ms={ms:.1f} "
                              f"samples_per_s={args.batch_size * args.accum / ms * 1e3:.1f}")
                        return
                if updates % 20 == 0:
                    print(f"epoch {epoch} update {updates} loss {loss.item():.3f}", flush=True)
        sched.step()


if __name__ == "__main__":
    main()
