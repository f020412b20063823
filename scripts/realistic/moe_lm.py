"""A mixture-of-experts language model as small MoE repos write it: 4 Transformer
blocks whose MLP is 8 experts under a top-2 router (softmax gates, a load-balancing
auxiliary loss), the tokens sent to each expert by a Python loop over the experts with
boolean masks, `index_select` and `index_add_`; token ids sliced from one synthetic
corpus tensor (no DataLoader), batch 16 x 128 tokens, AdamW, clipping, a cosine
schedule. True bottleneck: the experts' small GEMMs and the gather/scatter around them,
each step a different split of tokens among experts.
`--hand N` times N steps (forward, backward, optimizer).
"""

import argparse
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class MoE(nn.Module):
    def __init__(self, d, n_exp=8, k=2):
        super().__init__()
        self.k, self.n = k, n_exp
        self.router = nn.Linear(d, n_exp, bias=False)
        self.experts = nn.ModuleList(
            nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d)) for _ in range(n_exp))

    def forward(self, x):
        b, t, d = x.shape
        flat = x.reshape(-1, d)
        probs = F.softmax(self.router(flat), dim=-1)
        gate, idx = probs.topk(self.k, dim=-1)
        gate = gate / gate.sum(-1, keepdim=True)
        out = torch.zeros_like(flat)
        for e, expert in enumerate(self.experts):
            hit = idx == e
            rows = hit.any(-1).nonzero(as_tuple=True)[0]
            if rows.numel() == 0:
                continue
            w = (gate * hit).sum(-1).index_select(0, rows).unsqueeze(-1)
            out.index_add_(0, rows, expert(flat.index_select(0, rows)) * w)
        load = F.one_hot(idx[:, 0], self.n).float().mean(0)
        self.aux = self.n * (load * probs.mean(0)).sum()
        return out.view(b, t, d)


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.moe = MoE(d)

    def forward(self, x, mask):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.moe(self.ln2(x))


class LM(nn.Module):
    def __init__(self, vocab=4096, d=192, heads=6, layers=4, ctx=128):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.zeros(ctx, d))
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.register_buffer("mask", torch.triu(torch.full((ctx, ctx), float("-inf")), 1))

    def forward(self, ids):
        x = self.tok(ids) + self.pos[: ids.shape[1]]
        for b in self.blocks:
            x = b(x, self.mask[: ids.shape[1], : ids.shape[1]])
        return self.head(self.ln(x))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=50000)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--ctx", type=int, default=128)
    ap.add_argument("--hand", type=int, default=0)
    args = ap.parse_args()
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    corpus = torch.randint(0, 4096, (2_000_000,), generator=g)
    model = LM(ctx=args.ctx)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda i: 0.5 * (1 + math.cos(math.pi * min(i, args.iters) / args.iters)))
    rows = []
    for it in range(args.iters):
        t0 = time.perf_counter()
        ix = torch.randint(0, len(corpus) - args.ctx - 1, (args.batch_size,))
        x = torch.stack([corpus[i:i + args.ctx] for i in ix])
        y = torch.stack([corpus[i + 1:i + 1 + args.ctx] for i in ix])
        logits = model(x)
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1))
        loss = loss + 0.01 * sum(b.moe.aux for b in model.blocks)
        t1 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        t2 = time.perf_counter()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        t3 = time.perf_counter()
        if args.hand and it >= 3:
            rows.append((t1 - t0, t2 - t1, t3 - t2))
            if len(rows) == args.hand:
                tot = sorted(sum(r) for r in rows)
                med = tot[len(tot) // 2]
                print(f"HAND steps={args.hand} median_step_ms={med * 1e3:.1f} "
                      f"tokens_per_s={args.batch_size * args.ctx / med:.0f}")
                s = sum(sum(r) for r in rows)
                for k, i in (("fwd", 0), ("bwd", 1), ("opt", 2)):
                    print(f"HAND share {k}={100 * sum(r[i] for r in rows) / s:.1f}%")
                return
        if it % 50 == 0:
            print(f"iter {it} loss {loss.item():.3f}", flush=True)


if __name__ == "__main__":
    main()
