"""pytorch/examples' word_language_model as most people run it: a 2-layer LSTM language
model over token ids batchified into columns (no DataLoader), truncated BPTT with the
hidden state detached each batch, model.zero_grad(), clip_grad_norm_, and the update
written by hand (`p.data.add_(p.grad, alpha=-lr)`): no torch.optim optimizer at all.
Validation on a held-out split at every epoch's end under no_grad; the learning rate is
divided by 4 when validation does not improve. A synthetic corpus (Zipf-distributed word
ids) stands in for Wikitext-2. True bottleneck: the LSTM's forward and backward and the
softmax over the 10k-word vocabulary.
"""

import argparse
import math
import time

import torch
import torch.nn as nn


class RNNModel(nn.Module):
    def __init__(self, ntoken, ninp, nhid, nlayers, dropout=0.2):
        super().__init__()
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(ntoken, ninp)
        self.rnn = nn.LSTM(ninp, nhid, nlayers, dropout=dropout)
        self.decoder = nn.Linear(nhid, ntoken)
        self.nlayers, self.nhid = nlayers, nhid

    def forward(self, input, hidden):
        emb = self.drop(self.encoder(input))
        output, hidden = self.rnn(emb, hidden)
        output = self.drop(output)
        return torch.log_softmax(self.decoder(output), dim=-1), hidden

    def init_hidden(self, bsz):
        w = next(self.parameters())
        return (w.new_zeros(self.nlayers, bsz, self.nhid), w.new_zeros(self.nlayers, bsz, self.nhid))


def batchify(data, bsz):
    nbatch = data.size(0) // bsz
    return data[: nbatch * bsz].view(bsz, -1).t().contiguous()


def repackage_hidden(h):
    return tuple(v.detach() for v in h) if isinstance(h, tuple) else h.detach()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=40)
    p.add_argument("--batch_size", type=int, default=20)
    p.add_argument("--bptt", type=int, default=35)
    p.add_argument("--lr", type=float, default=20.0)
    p.add_argument("--clip", type=float, default=0.25)
    p.add_argument("--ntokens", type=int, default=10000)
    p.add_argument("--log-interval", type=int, default=50)
    p.add_argument("--hand", type=int, default=0)
    args = p.parse_args()
    torch.manual_seed(1111)
    ranks = torch.arange(1, args.ntokens + 1, dtype=torch.float)
    zipf = 1.0 / ranks
    train = torch.multinomial(zipf, 400_000, replacement=True)
    valid = torch.multinomial(zipf, 40_000, replacement=True)
    train_data = batchify(train, args.batch_size)
    val_data = batchify(valid, 10)
    model = RNNModel(args.ntokens, 200, 200, 2)
    criterion = nn.NLLLoss()
    lr = args.lr

    def get_batch(source, i):
        seq_len = min(args.bptt, len(source) - 1 - i)
        return source[i : i + seq_len], source[i + 1 : i + 1 + seq_len].reshape(-1)

    def evaluate(data_source):
        model.eval()
        total = 0.0
        hidden = model.init_hidden(10)
        with torch.no_grad():
            for i in range(0, min(data_source.size(0) - 1, 35 * 40), args.bptt):
                data, targets = get_batch(data_source, i)
                output, hidden = model(data, hidden)
                hidden = repackage_hidden(hidden)
                total += len(data) * criterion(output.view(-1, args.ntokens), targets).item()
        return total / min(len(data_source) - 1, 35 * 40)

    h = None
    if args.hand:
        from handtimer import Hand
        h = Hand(args.hand)
    best = None
    for epoch in range(1, args.epochs + 1):
        model.train()
        hidden = model.init_hidden(args.batch_size)
        t0 = time.time()
        total_loss = 0.0
        for batch, i in enumerate(range(0, train_data.size(0) - 1, args.bptt)):
            h and h.start()
            data, targets = get_batch(train_data, i)
            h and h.mark("data")
            model.zero_grad()
            hidden = repackage_hidden(hidden)
            output, hidden = model(data, hidden)
            loss = criterion(output.view(-1, args.ntokens), targets)
            h and h.mark("fwd")
            loss.backward()
            h and h.mark("bwd")
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
            for p_ in model.parameters():
                p_.data.add_(p_.grad, alpha=-lr)
            total_loss += loss.item()
            if h:
                h.mark("opt")
                if h.end(args.batch_size):
                    h.report()
                    print(f"HAND tokens_per_s_factor={args.bptt}")
                    return
            if batch % args.log_interval == 0 and batch > 0:
                cur = total_loss / args.log_interval
                ms = (time.time() - t0) * 1000 / args.log_interval
                print(f"| epoch {epoch:3d} | {batch:5d} batches | lr {lr:02.2f} | ms/batch {ms:5.2f} | loss {cur:5.2f} | ppl {math.exp(cur):8.2f}", flush=True)
                total_loss, t0 = 0.0, time.time()
        val_loss = evaluate(val_data)
        print(f"| end of epoch {epoch:3d} | valid loss {val_loss:5.2f}", flush=True)
        if best is None or val_loss < best:
            best = val_loss
        else:
            lr /= 4.0


if __name__ == "__main__":
    main()
