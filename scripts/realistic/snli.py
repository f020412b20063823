"""pytorch/examples' legacy/snli as it trains, with torchtext's BucketIterator replaced by
a torch DataLoader: sentence pairs padded by `pad_sequence` at its default
(batch_first=False), so each batch is [T, B] token ids, as torchtext's Fields gave them;
one Embedding, a projection, a bidirectional seq-first LSTM encoding premise and
hypothesis, a 3-layer MLP on both encodings, CrossEntropyLoss, Adam, and a dev-set
evaluation every 100 iterations. A synthetic corpus (Zipf word ids, lengths 5-30 and 3-15)
stands in for SNLI. True bottleneck: the LSTM's forward and backward.
"""

import argparse
import time

import torch
import torch.nn as nn
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import DataLoader, Dataset


class Pairs(Dataset):
    def __init__(self, n, vocab, seed):
        g = torch.Generator().manual_seed(seed)
        zipf = 1.0 / torch.arange(1, vocab + 1, dtype=torch.float)
        self.items = []
        for _ in range(n):
            lp = int(torch.randint(5, 31, (1,), generator=g))
            lh = int(torch.randint(3, 16, (1,), generator=g))
            p = torch.multinomial(zipf, lp, replacement=True, generator=g)
            h = torch.multinomial(zipf, lh, replacement=True, generator=g)
            self.items.append((p, h, int(torch.randint(0, 3, (1,), generator=g))))

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]


def collate(batch):
    p, h, y = zip(*batch)
    return pad_sequence(p), pad_sequence(h), torch.tensor(y)


class Bottle(nn.Module):
    def forward(self, input):
        if len(input.size()) <= 2:
            return super().forward(input)
        size = input.size()[:2]
        out = super().forward(input.view(size[0] * size[1], -1))
        return out.view(size[0], size[1], -1)


class Linear(Bottle, nn.Linear):
    pass


class Encoder(nn.Module):
    def __init__(self, d_in, d_hidden):
        super().__init__()
        self.d_hidden = d_hidden
        self.rnn = nn.LSTM(input_size=d_in, hidden_size=d_hidden, num_layers=1, bidirectional=True)

    def forward(self, inputs):
        batch_size = inputs.size()[1]
        h0 = c0 = inputs.new_zeros((2, batch_size, self.d_hidden))
        _, (ht, _) = self.rnn(inputs, (h0, c0))
        return ht[-2:].transpose(0, 1).contiguous().view(batch_size, -1)


class SNLIClassifier(nn.Module):
    def __init__(self, vocab, d_embed=100, d_proj=300, d_hidden=300, dp=0.2):
        super().__init__()
        self.embed = nn.Embedding(vocab, d_embed)
        self.projection = Linear(d_embed, d_proj)
        self.encoder = Encoder(d_proj, d_hidden)
        self.dropout = nn.Dropout(p=dp)
        self.relu = nn.ReLU()
        d = 4 * d_hidden
        self.out = nn.Sequential(
            Linear(d, d), self.relu, self.dropout,
            Linear(d, d), self.relu, self.dropout,
            Linear(d, d), self.relu, self.dropout,
            Linear(d, 3),
        )

    def forward(self, premise, hypothesis):
        p = self.relu(self.projection(self.embed(premise)))
        h = self.relu(self.projection(self.embed(hypothesis)))
        return self.out(torch.cat([self.encoder(p), self.encoder(h)], 1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=50)
    ap.add_argument("--batch_size", type=int, default=128)
    ap.add_argument("--dev_every", type=int, default=100)
    ap.add_argument("--hand", type=int, default=0)
    args = ap.parse_args()
    torch.manual_seed(3435)
    vocab = 20000
    train = DataLoader(Pairs(20000, vocab, 1), batch_size=args.batch_size, shuffle=True, collate_fn=collate)
    dev = DataLoader(Pairs(1000, vocab, 2), batch_size=args.batch_size, collate_fn=collate)
    model = SNLIClassifier(vocab)
    criterion = nn.CrossEntropyLoss()
    opt = torch.optim.Adam(model.parameters(), lr=0.001)
    h = None
    if args.hand:
        from handtimer import Hand

        h = Hand(args.hand)
    iterations, start = 0, time.time()
    for epoch in range(args.epochs):
        it = iter(train)
        while True:
            h and h.start()
            try:
                premise, hypothesis, label = next(it)
            except StopIteration:
                break
            h and h.mark("data")
            model.train()
            opt.zero_grad()
            iterations += 1
            answer = model(premise, hypothesis)
            loss = criterion(answer, label)
            h and h.mark("fwd")
            loss.backward()
            h and h.mark("bwd")
            opt.step()
            if h:
                h.mark("opt")
                if h.end(label.size(0)):
                    h.report()
                    return
            if iterations % args.dev_every == 0:
                model.eval()
                correct = total = 0
                with torch.no_grad():
                    for p, q, y in dev:
                        correct += (model(p, q).argmax(1) == y).sum().item()
                        total += y.size(0)
                print(f"{time.time() - start:6.0f}s epoch {epoch} iter {iterations} loss {loss.item():.4f} dev acc {100 * correct / total:.1f}", flush=True)


if __name__ == "__main__":
    main()
