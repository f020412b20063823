"""A small Vision Transformer as timm-style recipes train it on a CPU: a Conv2d patch
embedding, a class token and learned positions, `nn.TransformerEncoder` (batch_first,
pre-norm, GELU), AdamW with two parameter groups (no weight decay on norms, biases and
embeddings), a linear warm-up then cosine schedule through LambdaLR, label smoothing,
gradient clipping, and an EMA of the weights (`torch.optim.swa_utils.AveragedModel`)
updated after every optimizer step. 32x32 images from a TensorDataset, batch 64.
True bottleneck: the encoder's matmuls and attention, forward and backward.
"""

import argparse
import math
import time

import torch
import torch.nn as nn
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn
from torch.utils.data import DataLoader, TensorDataset


class ViT(nn.Module):
    def __init__(self, img=32, patch=4, dim=192, depth=6, heads=3, classes=10):
        super().__init__()
        self.embed = nn.Conv2d(3, dim, patch, patch)
        n = (img // patch) ** 2
        self.cls = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos = nn.Parameter(torch.randn(1, n + 1, dim) * 0.02)
        layer = nn.TransformerEncoderLayer(dim, heads, dim * 4, dropout=0.1, activation="gelu",
                                           batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        x = self.embed(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], 1) + self.pos
        x = self.encoder(x)
        return self.head(self.norm(x[:, 0]))


def param_groups(model, wd):
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (no_decay if p.ndim < 2 or name in ("cls", "pos") else decay).append(p)
    return [{"params": decay, "weight_decay": wd}, {"params": no_decay, "weight_decay": 0.0}]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=100)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--hand", type=int, default=0)
    ap.add_argument("--bf16", action="store_true")
    ap.add_argument("--no-ema", action="store_true")
    args = ap.parse_args()
    torch.manual_seed(0)
    n = 8192
    x = torch.randn(n, 3, 32, 32)
    y = torch.randint(0, 10, (n,))
    loader = DataLoader(TensorDataset(x, y), batch_size=args.batch_size, shuffle=True, drop_last=True)
    model = ViT()
    ema = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(0.999))
    opt = torch.optim.AdamW(param_groups(model, 0.05), lr=args.lr, betas=(0.9, 0.999))
    total = args.epochs * len(loader)

    def lr_at(step):
        if step < args.warmup:
            return (step + 1) / args.warmup
        return 0.5 * (1 + math.cos(math.pi * (step - args.warmup) / max(1, total - args.warmup)))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_at)
    crit = nn.CrossEntropyLoss(label_smoothing=0.1)
    times = []
    step = 0
    for epoch in range(args.epochs):
        model.train()
        t = time.perf_counter()
        for xb, yb in loader:
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
                loss = crit(model(xb), yb)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            if not args.no_ema:
                ema.update_parameters(model)
            step += 1
            if args.hand:
                times.append(time.perf_counter() - t)
                t = time.perf_counter()
                if len(times) == args.hand + 3:
                    import statistics

                    ms = statistics.median(times[3:]) * 1e3
                    print(f"HAND steps={args.hand} median_step_ms={ms:.1f} "
                          f"samples_per_s={args.batch_size / ms * 1e3:.1f}")
                    return
            if step % 50 == 0:
                print(f"epoch {epoch} step {step} loss {loss.item():.4f} lr {sched.get_last_lr()[0]:.2e}",
                      flush=True)


if __name__ == "__main__":
    main()
