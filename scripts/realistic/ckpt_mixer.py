"""An MLP-Mixer copied from a large-model recipe that checkpoints every block
(`torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)`) to save memory,
run on a CPU box with memory to spare: 16x16 patches of 64x64 images, 12 mixer blocks
of width 256, AdamW, `DataLoader(num_workers=2, pin_memory=True)` (a GPU habit: no CUDA
here, so the pinning does nothing), batch 128. True bottleneck: the blocks' matmuls,
each forward run twice (once more in backward, to recompute what checkpointing threw
away); `--no-ckpt` shows what the recompute costs.
"""

import argparse
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint
from torch.utils.data import DataLoader, TensorDataset


class MixerBlock(nn.Module):
    def __init__(self, tokens, dim):
        super().__init__()
        self.n1 = nn.LayerNorm(dim)
        self.tok = nn.Sequential(nn.Linear(tokens, tokens * 2), nn.GELU(), nn.Linear(tokens * 2, tokens))
        self.n2 = nn.LayerNorm(dim)
        self.ch = nn.Sequential(nn.Linear(dim, dim * 4), nn.GELU(), nn.Linear(dim * 4, dim))

    def forward(self, x):
        x = x + self.tok(self.n1(x).transpose(1, 2)).transpose(1, 2)
        return x + self.ch(self.n2(x))


class Mixer(nn.Module):
    def __init__(self, ckpt, patch=16, dim=256, depth=12, classes=100):
        super().__init__()
        self.ckpt = ckpt
        self.stem = nn.Conv2d(3, dim, patch, patch)
        self.blocks = nn.ModuleList(MixerBlock((64 // patch) ** 2, dim) for _ in range(depth))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        x = self.stem(x).flatten(2).transpose(1, 2)
        for b in self.blocks:
            x = checkpoint(b, x, use_reentrant=False) if self.ckpt and self.training else b(x)
        return self.head(self.norm(x).mean(1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=100)
    ap.add_argument("--hand", type=int, default=0)
    ap.add_argument("--no-ckpt", action="store_true")
    args = ap.parse_args()
    torch.manual_seed(0)
    ds = TensorDataset(torch.randn(4096, 3, 64, 64), torch.randint(0, 100, (4096,)))
    loader = DataLoader(ds, batch_size=128, shuffle=True, num_workers=2, pin_memory=True, drop_last=True)
    model = Mixer(ckpt=not args.no_ckpt)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05)
    times, t = [], time.perf_counter()
    for epoch in range(args.epochs):
        for step, (x, y) in enumerate(loader):
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if args.hand:
                times.append(time.perf_counter() - t)
                t = time.perf_counter()
                if len(times) == args.hand + 3:
                    import statistics

                    ms = statistics.median(times[3:]) * 1e3
                    print(f"HAND steps={args.hand} median_step_ms={ms:.1f} samples_per_s={128 / ms * 1e3:.1f}")
                    return
            if step % 10 == 0:
                print(f"epoch {epoch} step {step} loss {loss.item():.3f}", flush=True)


if __name__ == "__main__":
    main()
