"""Two training loops without an ordinary optimizer step, as pytorch/examples writes
them. It knows nothing of tune.

--mode sgd: word_language_model's default: an LSTM language model over token ids laid
out seq-first ([T, B], no DataLoader), model.zero_grad(), clip_grad_norm_ and the update
written by hand (`p.data.add_(p.grad, alpha=-lr)`): no torch.optim optimizer at all.
Each step prints its own wall time ("STEP <ms>").

--mode padded: the same model fed by a DataLoader whose collate_fn pads with
pad_sequence at its default, so each batch is [T, B] ids as they come (torchtext's
layout, pytorch/examples' SNLI); each step prints its own wall time ("STEP <ms>").

--mode lbfgs: time_sequence_prediction's: LSTMCells in float64 (`.double()`) trained
with L-BFGS, whose step runs the closure (zero_grad, forward, loss, backward) several
times; each step prints its closure calls ("CALLS <n>")."""

import argparse
import time

import torch
import torch.nn as nn


class LM(nn.Module):
    def __init__(self, vocab=500, d=64):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.rnn = nn.LSTM(d, d, 1)
        self.out = nn.Linear(d, vocab)

    def forward(self, x, hidden):
        y, hidden = self.rnn(self.emb(x), hidden)
        return torch.log_softmax(self.out(y), -1), hidden


class Seq(nn.Module):
    def __init__(self):
        super().__init__()
        self.cell = nn.LSTMCell(1, 16)
        self.linear = nn.Linear(16, 1)

    def forward(self, x):
        h = torch.zeros(x.size(0), 16, dtype=x.dtype)
        c = torch.zeros(x.size(0), 16, dtype=x.dtype)
        outs = []
        for x_t in x.split(1, dim=1):
            h, c = self.cell(x_t, (h, c))
            outs.append(self.linear(h))
        return torch.cat(outs, dim=1)


def sgd(a):
    bsz, bptt = 12, 20
    data = torch.randint(0, 500, (bsz * 4000,)).view(bsz, -1).t().contiguous()
    model = LM()
    crit = nn.NLLLoss()
    hidden = None
    for step in range(a.steps):
        t = time.perf_counter()
        i = (step * bptt) % (data.size(0) - bptt - 1)
        x, y = data[i:i + bptt], data[i + 1:i + 1 + bptt].reshape(-1)
        model.zero_grad()
        if hidden is not None:
            hidden = tuple(h.detach() for h in hidden)
        out, hidden = model(x, hidden)
        loss = crit(out.view(-1, 500), y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
        for p in model.parameters():
            p.data.add_(p.grad, alpha=-1.0)
        print("STEP %.3f" % ((time.perf_counter() - t) * 1e3), flush=True)


def lbfgs(a):
    x = torch.sin(torch.arange(0, 60, dtype=torch.float64) / 4.0).repeat(8, 1)
    x = x + 0.01 * torch.randn_like(x)
    inp, target = x[:, :-1], x[:, 1:]
    model = Seq().double()
    opt = torch.optim.LBFGS(model.parameters(), lr=0.5, max_iter=5)
    crit = nn.MSELoss()
    for step in range(a.steps):
        calls = [0]

        def closure():
            calls[0] += 1
            opt.zero_grad()
            loss = crit(model(inp), target)
            loss.backward()
            return loss

        opt.step(closure)
        print("CALLS %d" % calls[0], flush=True)


def padded(a):
    """A DataLoader whose collate_fn pads with pad_sequence at its default
    (batch_first=False): [T, B] ids of 12 sequences of up to 30 tokens, fed as they come
    to the seq-first LSTM model, under Adam."""
    from torch.nn.utils.rnn import pad_sequence
    from torch.utils.data import DataLoader

    seqs = [torch.randint(0, 500, (int(n),)) for n in torch.randint(20, 31, (2400,))]
    loader = DataLoader(seqs, batch_size=12, shuffle=True, collate_fn=pad_sequence)
    model = LM()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    crit = nn.NLLLoss()
    for _ in range(1000):
        for x in loader:
            t = time.perf_counter()
            opt.zero_grad()
            out, _ = model(x[:-1], None)
            crit(out.reshape(-1, 500), x[1:].reshape(-1)).backward()
            opt.step()
            print("STEP %.3f" % ((time.perf_counter() - t) * 1e3), flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=["sgd", "lbfgs", "padded"], default="sgd")
    p.add_argument("--steps", type=int, default=100000)
    a = p.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    {"sgd": sgd, "lbfgs": lbfgs, "padded": padded}[a.mode](a)


if __name__ == "__main__":
    main()
