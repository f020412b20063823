"""A text classifier fed tokenizer-style batches: a mapping (a UserDict, as transformers'
BatchEncoding is) of `input_ids` padded to the batch's longest sequence, its
`attention_mask` and `labels`. It knows nothing of tune.

--loader: the batches come from a DataLoader whose collate pads them; without it the loop
builds them itself and calls the model with keyword arguments only
(`model(input_ids=..., attention_mask=...)`). --dataclass: the collate returns a dataclass
of the same three fields (a codebase's `Batch`), not a mapping.
Each batch holds sequences of 8 to 64 tokens, the same lengths in every batch, so its
real tokens are the same each step; the script prints them ("REAL <tokens>") and the
padded count ("PADDED <tokens>")."""

import argparse
import dataclasses
from collections import UserDict

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

LENGTHS = [8, 16, 24, 32, 40, 48, 56, 64]


class Encoding(UserDict):
    pass


@dataclasses.dataclass
class Encoded:
    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    labels: torch.Tensor

    def __getitem__(self, k):
        return getattr(self, k)


AS_DATACLASS = False


class Texts(Dataset):
    def __init__(self, n, vocab):
        g = torch.Generator().manual_seed(0)
        self.items = [
            (torch.randint(1, vocab, (LENGTHS[i % len(LENGTHS)],), generator=g), i % 2)
            for i in range(n)
        ]

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]


def collate(items):
    longest = max(len(ids) for ids, _ in items)
    ids = torch.zeros(len(items), longest, dtype=torch.long)
    mask = torch.zeros(len(items), longest, dtype=torch.long)
    for row, (seq, _) in enumerate(items):
        ids[row, : len(seq)] = seq
        mask[row, : len(seq)] = 1
    labels = torch.tensor([y for _, y in items])
    kind = Encoded if AS_DATACLASS else Encoding
    return kind(input_ids=ids, attention_mask=mask, labels=labels)


class Classifier(nn.Module):
    def __init__(self, vocab, dim):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.mix = nn.Linear(dim, dim)
        self.out = nn.Linear(dim, 2)

    def forward(self, input_ids, attention_mask):
        h = torch.tanh(self.mix(self.emb(input_ids)))
        m = attention_mask.unsqueeze(-1).float()
        return self.out((h * m).sum(1) / m.sum(1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--loader", action="store_true")
    ap.add_argument("--steps", type=int, default=100000)
    ap.add_argument("--dataclass", action="store_true")
    args = ap.parse_args()
    global AS_DATACLASS
    AS_DATACLASS = args.dataclass
    torch.manual_seed(0)
    torch.set_num_threads(1)
    vocab, batch = 1000, 16
    data = Texts(batch * 64, vocab)
    model = Classifier(vocab, 64)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    if args.loader:
        # In order: each batch of 16 holds every length twice.
        batches = DataLoader(data, batch_size=batch, collate_fn=collate)
    else:
        batches = [collate([data[i] for i in range(b, b + batch)]) for b in range(0, len(data), batch)]
    step = 0
    while step < args.steps:
        for enc in batches:
            labels = enc["labels"]
            logits = model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"])
            loss = F.cross_entropy(logits, labels)
            opt.zero_grad()
            loss.backward()
            opt.step()
            print(f"REAL {int(enc['attention_mask'].sum())}", flush=True)
            print(f"PADDED {enc['input_ids'].numel()}", flush=True)
            step += 1
            if step >= args.steps:
                break


if __name__ == "__main__":
    main()
