"""A nanoGPT-style character language model: token ids sliced from one tensor in memory
(no DataLoader), gradient accumulation over 4 micro-batches, AdamW, gradient clipping,
zero_grad(set_to_none=True) as nanoGPT writes it. True bottleneck: forward and backward
compute (attention and MLP matmuls).
"""

import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
        self.heads = heads

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.attn(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab=96, d=128, layers=4, heads=4, ctx=128):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(ctx, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx, targets):
        t = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(t))
        for b in self.blocks:
            x = b(x)
        logits = self.head(self.ln(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--max-iters", type=int, default=5000)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--block-size", type=int, default=128)
    p.add_argument("--grad-accum", type=int, default=4)
    p.add_argument("--hand", type=int, default=0)
    args = p.parse_args()
    torch.manual_seed(1337)
    text = torch.randint(0, 96, (400_000,))
    model = GPT(ctx=args.block_size)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)

    def get_batch():
        ix = torch.randint(len(text) - args.block_size - 1, (args.batch_size,))
        x = torch.stack([text[i:i + args.block_size] for i in ix])
        y = torch.stack([text[i + 1:i + 1 + args.block_size] for i in ix])
        return x, y

    h = None
    if args.hand:
        from handtimer import Hand
        h = Hand(args.hand)
    for it in range(args.max_iters):
        lr = 1e-3 * min(1.0, (it + 1) / 100) * 0.5 * (1 + math.cos(math.pi * it / args.max_iters))
        for g in opt.param_groups:
            g["lr"] = lr
        h and h.start()
        for micro in range(args.grad_accum):
            x, y = get_batch()
            h and h.mark("data")
            loss = model(x, y) / args.grad_accum
            h and h.mark("fwd")
            loss.backward()
            h and h.mark("bwd")
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if h:
            h.mark("opt")
            if h.end(args.batch_size * args.grad_accum):
                h.report()
                print(f"HAND tokens_per_s_factor={args.block_size}")
                return
        if it % 10 == 0:
            print(f"iter {it}: loss {loss.item() * args.grad_accum:.4f}", flush=True)


if __name__ == "__main__":
    main()
