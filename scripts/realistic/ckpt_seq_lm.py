"""A small causal Transformer LM whose layers go through
`torch.utils.checkpoint.checkpoint_sequential(self.layers, 3, x)`, as long-context recipes
write it to fit the activations, run on a CPU box with memory to spare. Token ids come
from a tensor the script slices itself (no DataLoader), batch 16 x 128 tokens, 6 layers of
width 192, AdamW with gradient clipping and a cosine schedule, a log line every 20 steps.
True bottleneck: the layers' matmuls and attention, the first 4 of 6 layers' forward run
again in backward (checkpoint_sequential leaves the last segment unchecked); `--no-ckpt`
calls the layers directly.
"""

import argparse
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint_sequential


class LM(nn.Module):
    def __init__(self, vocab=512, dim=192, depth=6, ctx=128, ckpt=True):
        super().__init__()
        self.ckpt = ckpt
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Parameter(torch.zeros(ctx, dim))
        layer = lambda: nn.TransformerEncoderLayer(
            dim, 4, 4 * dim, dropout=0.0, batch_first=True, norm_first=True, activation="gelu"
        )
        self.layers = nn.Sequential(*[Causal(layer(), ctx) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, idx):
        x = self.tok(idx) + self.pos[: idx.shape[1]]
        if self.ckpt and self.training:
            x = checkpoint_sequential(self.layers, 3, x, use_reentrant=False)
        else:
            x = self.layers(x)
        return self.head(self.norm(x))


class Causal(nn.Module):
    def __init__(self, layer, ctx):
        super().__init__()
        self.layer = layer
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(ctx))

    def forward(self, x):
        n = x.shape[1]
        return self.layer(x, src_mask=self.mask[:n, :n], is_causal=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--no-ckpt", action="store_true")
    ap.add_argument("--steps", type=int, default=3000)
    args = ap.parse_args()
    torch.manual_seed(0)
    data = torch.randint(0, 512, (200_000,))
    model = LM(ckpt=not args.no_ckpt)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: 0.5 * (1 + math.cos(math.pi * min(s, args.steps) / args.steps))
    )
    t0 = time.perf_counter()
    for step in range(args.steps):
        ix = torch.randint(0, len(data) - 129, (16,))
        x = torch.stack([data[i : i + 128] for i in ix])
        y = torch.stack([data[i + 1 : i + 129] for i in ix])
        logits = model(x)
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if step % 20 == 0:
            dt = (time.perf_counter() - t0) / (step + 1)
            print(f"step {step} loss {loss.item():.3f} {dt * 1e3:.1f} ms/step", flush=True)


if __name__ == "__main__":
    main()
