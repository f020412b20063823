"""A text classifier fine-tuned as Hugging Face scripts do it, without transformers: a
collate that pads each batch to its longest sequence and returns a tokenizer-style
mapping (a UserDict, as BatchEncoding is) of `input_ids`, `attention_mask` and `labels`;
a small batch-first Transformer encoder called as `model(**batch)`; AdamW with a linear
warm-up and decay; clipping; a DataLoader at its defaults. Lengths follow a long-tailed
distribution (16-256 tokens), so padding is a large share of each batch. True
bottleneck: the encoder's forward and backward (and the padding it computes on).
`--hand N` times N steps and prints the real and padded tokens a step.
"""

import argparse
import time
from collections import UserDict

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset


class Encoding(UserDict):
    pass


class Reviews(Dataset):
    def __init__(self, n, vocab, seed):
        g = torch.Generator().manual_seed(seed)
        lengths = (16 + torch.empty(n).exponential_(1 / 40.0, generator=g)).clamp(max=256).long()
        self.items = [(torch.randint(1, vocab, (int(k),), generator=g), int(k) % 2) for k in lengths]

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]


def collate(items):
    longest = max(len(s) for s, _ in items)
    ids = torch.zeros(len(items), longest, dtype=torch.long)
    mask = torch.zeros(len(items), longest, dtype=torch.long)
    for row, (s, _) in enumerate(items):
        ids[row, : len(s)] = s
        mask[row, : len(s)] = 1
    return Encoding(input_ids=ids, attention_mask=mask, labels=torch.tensor([y for _, y in items]))


class Classifier(nn.Module):
    def __init__(self, vocab, dim=128, layers=2):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(256, dim)
        layer = nn.TransformerEncoderLayer(dim, 4, 4 * dim, dropout=0.1, batch_first=True)
        self.enc = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(dim, 2)

    def forward(self, input_ids, attention_mask, labels=None):
        pos = torch.arange(input_ids.shape[1]).unsqueeze(0)
        h = self.enc(self.emb(input_ids) + self.pos(pos), src_key_padding_mask=attention_mask == 0)
        m = attention_mask.unsqueeze(-1).float()
        logits = self.head((h * m).sum(1) / m.sum(1))
        loss = F.cross_entropy(logits, labels) if labels is not None else None
        return loss, logits


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--hand", type=int, default=0)
    args = ap.parse_args()
    torch.manual_seed(0)
    loader = DataLoader(Reviews(4000, 8000, 0), batch_size=args.batch_size, shuffle=True, collate_fn=collate)
    model = Classifier(8000)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.01)
    total = args.epochs * len(loader)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 100) * max(0.0, 1 - s / total))
    times, real, padded = [], [], []
    for epoch in range(args.epochs):
        model.train()
        t0 = time.perf_counter()
        for step, batch in enumerate(loader):
            loss, _ = model(**batch)
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            opt.zero_grad()
            if args.hand:
                now = time.perf_counter()
                times.append(now - t0)
                t0 = now
                real.append(int(batch["attention_mask"].sum()))
                padded.append(batch["input_ids"].numel())
                if len(times) == args.hand + 3:
                    mid = lambda v: sorted(v[3:])[len(v[3:]) // 2]
                    print(f"HAND steps={args.hand} median_step_ms={mid(times) * 1e3:.1f} "
                          f"samples_per_s={args.batch_size / mid(times):.1f} "
                          f"real_tokens={mid(real)} padded_tokens={mid(padded)} "
                          f"tokens_per_s={mid(real) / mid(times):.0f}")
                    return
            if step % 50 == 0:
                print(f"epoch {epoch} step {step} loss {loss.item():.4f}", flush=True)


if __name__ == "__main__":
    main()
