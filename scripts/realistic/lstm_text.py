"""A sentiment classifier over variable-length token sequences: a padding collate_fn,
a bidirectional LSTM over packed sequences, a OneCycle schedule, gradient clipping, a
validation pass every 100 steps. True bottleneck: the LSTM's forward and backward.
"""

import argparse

import torch
import torch.nn as nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_sequence
from torch.utils.data import DataLoader, Dataset


class Reviews(Dataset):
    def __init__(self, n, vocab, seed):
        g = torch.Generator().manual_seed(seed)
        self.lengths = torch.randint(20, 200, (n,), generator=g)
        self.docs = [torch.randint(1, vocab, (int(l),), generator=g) for l in self.lengths]
        self.labels = torch.tensor([int(d[:5].sum()) % 2 for d in self.docs])

    def __len__(self):
        return len(self.docs)

    def __getitem__(self, i):
        return self.docs[i], self.labels[i]


def collate(batch):
    docs, labels = zip(*batch)
    lengths = torch.tensor([len(d) for d in docs])
    return pad_sequence(docs, batch_first=True), lengths, torch.stack(labels)


class Classifier(nn.Module):
    def __init__(self, vocab, dim=64, hidden=128):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim, padding_idx=0)
        self.lstm = nn.LSTM(dim, hidden, batch_first=True, bidirectional=True)
        self.head = nn.Linear(2 * hidden, 2)

    def forward(self, x, lengths):
        packed = pack_padded_sequence(self.emb(x), lengths, batch_first=True, enforce_sorted=False)
        _, (h, _) = self.lstm(packed)
        return self.head(torch.cat([h[0], h[1]], dim=1))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--hand", type=int, default=0)
    args = p.parse_args()
    torch.manual_seed(0)
    vocab = 20_000
    train = DataLoader(Reviews(8000, vocab, 0), batch_size=32, shuffle=True, collate_fn=collate)
    val = DataLoader(Reviews(500, vocab, 1), batch_size=64, collate_fn=collate)
    model = Classifier(vocab)
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=2e-3, total_steps=args.epochs * len(train))
    crit = nn.CrossEntropyLoss()
    h = None
    if args.hand:
        from handtimer import Hand
        h = Hand(args.hand)
        h.start()
    step = 0
    for epoch in range(args.epochs):
        for x, lengths, y in train:
            h and h.mark("data")
            loss = crit(model(x, lengths), y)
            h and h.mark("fwd")
            opt.zero_grad()
            loss.backward()
            h and h.mark("bwd")
            nn.utils.clip_grad_norm_(model.parameters(), 5.0)
            opt.step()
            sched.step()
            h and h.mark("opt")
            step += 1
            if h:
                if h.end(x.shape[0]):
                    h.report()
                    return
                h.start()
            if step % 100 == 0:
                model.eval()
                with torch.no_grad():
                    acc = sum((model(a, b).argmax(1) == c).float().mean().item() for a, b, c in val) / len(val)
                model.train()
                print(f"step {step} loss {loss.item():.3f} val_acc {acc:.3f}", flush=True)


if __name__ == "__main__":
    main()
