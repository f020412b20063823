"""DDPM training as diffusers' train_unconditional.py does it, without diffusers: a small
U-Net (GroupNorm, SiLU, a sinusoidal time embedding added in every residual block,
self-attention at 8x8, skip connections), a linear beta schedule, a random timestep and
Gaussian noise drawn per image each step, MSE on the predicted noise. The Dataset draws
32x32 RGB images of random discs and bars in numpy and flips half of them; a DataLoader
with the recipe's default `num_workers=0`; AdamW at 1e-4 with a linear warm-up and cosine
decay, gradient clipping at 1.0, and an EMA of the weights updated by hand
(`torch._foreach_lerp_`) after every optimizer step. Batch 32.
True bottleneck: the U-Net's convolutions, forward and backward.

`--hand N` times N steps by phase; `--bf16` wraps the forward and the loss in
`torch.autocast("cpu", torch.bfloat16)`; `--workers W` sets the DataLoader's workers; `--channels-last` puts
the model and each batch in channels-last memory format.
"""

import argparse
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

from handtimer import Hand


class Shapes(Dataset):
    def __init__(self, n, size=32):
        self.n, self.size = n, size
        yy, xx = np.mgrid[0:size, 0:size]
        self.yy, self.xx = yy.astype(np.float32), xx.astype(np.float32)

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        rng = np.random.default_rng(i)
        img = np.zeros((3, self.size, self.size), np.float32)
        for _ in range(rng.integers(1, 4)):
            cy, cx, r = rng.uniform(4, self.size - 4, 2).tolist() + [rng.uniform(3, 9)]
            disc = ((self.yy - cy) ** 2 + (self.xx - cx) ** 2) < r * r
            img += disc[None] * rng.uniform(0.2, 1.0, (3, 1, 1)).astype(np.float32)
        if rng.random() < 0.5:
            row = rng.integers(0, self.size - 3)
            img[:, row:row + 3, :] += rng.uniform(0.2, 0.6)
        if rng.random() < 0.5:
            img = img[:, :, ::-1]
        img = np.clip(img, 0, 1) * 2 - 1
        return torch.from_numpy(img.copy())


def timestep_embedding(t, dim):
    half = dim // 2
    freqs = torch.exp(-math.log(10000) * torch.arange(half, dtype=torch.float32) / half)
    args = t.float()[:, None] * freqs[None]
    return torch.cat([torch.sin(args), torch.cos(args)], dim=1)


class ResBlock(nn.Module):
    def __init__(self, cin, cout, tdim):
        super().__init__()
        self.n1 = nn.GroupNorm(8, cin)
        self.c1 = nn.Conv2d(cin, cout, 3, padding=1)
        self.t = nn.Linear(tdim, cout)
        self.n2 = nn.GroupNorm(8, cout)
        self.c2 = nn.Conv2d(cout, cout, 3, padding=1)
        self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()

    def forward(self, x, temb):
        h = self.c1(F.silu(self.n1(x)))
        h = h + self.t(F.silu(temb))[:, :, None, None]
        h = self.c2(F.silu(self.n2(h)))
        return h + self.skip(x)


class Attention(nn.Module):
    def __init__(self, ch):
        super().__init__()
        self.norm = nn.GroupNorm(8, ch)
        self.qkv = nn.Conv2d(ch, ch * 3, 1)
        self.out = nn.Conv2d(ch, ch, 1)

    def forward(self, x):
        b, c, h, w = x.shape
        q, k, v = self.qkv(self.norm(x)).reshape(b, 3, c, h * w).unbind(1)
        a = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
        return x + self.out(a.transpose(1, 2).reshape(b, c, h, w))


class UNet(nn.Module):
    def __init__(self, ch=64, mult=(1, 2, 2), tdim=256):
        super().__init__()
        self.tdim = tdim
        self.temb = nn.Sequential(nn.Linear(ch, tdim), nn.SiLU(), nn.Linear(tdim, tdim))
        self.inp = nn.Conv2d(3, ch, 3, padding=1)
        self.down, self.up = nn.ModuleList(), nn.ModuleList()
        chans, c = [ch], ch
        for i, m in enumerate(mult):
            self.down.append(ResBlock(c, ch * m, tdim))
            c = ch * m
            chans.append(c)
            if i < len(mult) - 1:
                self.down.append(nn.Conv2d(c, c, 3, stride=2, padding=1))
                chans.append(c)
        self.mid1, self.attn, self.mid2 = ResBlock(c, c, tdim), Attention(c), ResBlock(c, c, tdim)
        for i, m in reversed(list(enumerate(mult))):
            self.up.append(ResBlock(c + chans.pop(), ch * m, tdim))
            c = ch * m
            if i > 0:
                self.up.append(ResBlock(c + chans.pop(), c, tdim))
                self.up.append(nn.Upsample(scale_factor=2, mode="nearest"))
        self.up.append(ResBlock(c + chans.pop(), c, tdim))
        self.out = nn.Sequential(nn.GroupNorm(8, c), nn.SiLU(), nn.Conv2d(c, 3, 3, padding=1))
        self.base = ch

    def forward(self, x, t):
        temb = self.temb(timestep_embedding(t, self.base))
        h = self.inp(x)
        hs = [h]
        for m in self.down:
            h = m(h, temb) if isinstance(m, ResBlock) else m(h)
            hs.append(h)
        h = self.mid2(self.attn(self.mid1(h, temb)), temb)
        for m in self.up:
            if isinstance(m, ResBlock):
                h = m(torch.cat([h, hs.pop()], 1), temb)
            else:
                h = m(h)
        return self.out(h)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=200)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--workers", type=int, default=0)
    ap.add_argument("--bf16", action="store_true")
    ap.add_argument("--hand", type=int, default=0)
    ap.add_argument("--channels-last", action="store_true")
    args = ap.parse_args()
    torch.manual_seed(0)
    loader = DataLoader(Shapes(20000), batch_size=args.batch_size, shuffle=True, drop_last=True,
                        num_workers=args.workers)
    model = UNet()
    if args.channels_last:
        model = model.to(memory_format=torch.channels_last)
    ema = [p.detach().clone() for p in model.parameters()]
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=1e-2)
    total, warm = args.epochs * len(loader), 500
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: (s + 1) / warm if s < warm else 0.5 * (1 + math.cos(math.pi * (s - warm) / (total - warm))))
    steps_T = 1000
    betas = torch.linspace(1e-4, 0.02, steps_T)
    abar = torch.cumprod(1 - betas, 0)
    hand = Hand(args.hand) if args.hand else None
    step = 0
    for epoch in range(args.epochs):
        if hand:
            hand.start()
        for x0 in loader:
            if hand:
                hand.mark("data")
            if args.channels_last:
                x0 = x0.contiguous(memory_format=torch.channels_last)
            t = torch.randint(0, steps_T, (x0.shape[0],))
            noise = torch.randn_like(x0)
            a = abar[t].sqrt()[:, None, None, None]
            s = (1 - abar[t]).sqrt()[:, None, None, None]
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
                pred = model(a * x0 + s * noise, t)
                loss = F.mse_loss(pred.float(), noise)
            if hand:
                hand.mark("fwd")
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if hand:
                hand.mark("bwd")
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            with torch.no_grad():
                torch._foreach_lerp_(ema, [p.detach() for p in model.parameters()], 1 - 0.9999)
            if hand:
                hand.mark("opt")
                if hand.end(x0.shape[0]):
                    hand.report()
                    return
                hand.start()
            step += 1
            if step % 100 == 0:
                print(f"epoch {epoch} step {step} loss {loss.item():.4f}", flush=True)
        torch.save({"ema": ema}, "/tmp/ddpm_ema.pt")


if __name__ == "__main__":
    main()
