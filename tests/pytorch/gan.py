"""A GAN's training loop as pytorch/examples' DCGAN writes it, on small MLPs and random
data: each batch from the DataLoader trains the discriminator (two backward calls, real
and fake) with its optimizer, then the generator with its own. It knows nothing of tune.

With --critic N it trains as a WGAN does (WGAN-GP's n_critic): the critic takes N
batches and N optimizer steps (Wasserstein loss, weights clipped) for each generator
step.

It times its own iterations (from taking the first batch to the generator's step) and
its optimizer steps, and writes the iterations' median, count and samples and the
optimizer steps' share of them to --truth: the figures a watch's must match.
"""

import argparse
import json
import time

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--iters", type=int, default=40)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--width", type=int, default=512)
    p.add_argument("--critic", type=int, default=0)
    p.add_argument("--truth", required=True)
    p.add_argument("--tensors", action="store_true", help="batches sliced from a tensor, no DataLoader")
    # Each model trained alone, one after the other, each with its own optimizer
    # (pytorch/examples' mnist_forward_forward trains its layers so): --iters steps of the
    # discriminator, then --iters of the generator.
    p.add_argument("--layerwise", action="store_true")
    a = p.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    nz, dim = 32, 128
    gen = nn.Sequential(nn.Linear(nz, a.width), nn.ReLU(), nn.Linear(a.width, dim))
    disc = nn.Sequential(nn.Linear(dim, a.width), nn.LeakyReLU(0.2), nn.Linear(a.width, 1))
    opt_d = torch.optim.Adam(disc.parameters(), lr=2e-4, betas=(0.5, 0.999))
    opt_g = torch.optim.Adam(gen.parameters(), lr=2e-4, betas=(0.5, 0.999))
    loss = nn.BCEWithLogitsLoss()
    per = 2 if a.layerwise else max(a.critic, 1)
    data = TensorDataset(torch.randn(a.iters * a.batch * per, dim))
    loader = DataLoader(data, batch_size=a.batch, shuffle=True, drop_last=True)
    times = []
    opt_s = []

    def timed(opt):
        t = time.perf_counter()
        opt.step()
        if len(opt_s) < len(times) + 1:
            opt_s.append(0.0)
        opt_s[-1] += time.perf_counter() - t

    it = iter(loader)
    if a.tensors:
        it = ((data.tensors[0][i:i + a.batch],) for i in range(0, len(data), a.batch))
    for i in range(2 * a.iters if a.layerwise else a.iters):
        t = time.perf_counter()
        if a.layerwise:
            (real,) = next(it)
            if i < a.iters:
                disc.zero_grad()
                loss(disc(real), torch.ones(real.size(0), 1)).backward()
                timed(opt_d)
            else:
                gen.zero_grad()
                (gen(torch.randn(real.size(0), nz)) - real).pow(2).mean().backward()
                timed(opt_g)
            times.append(time.perf_counter() - t)
            continue
        if a.critic:
            for _ in range(a.critic):
                (real,) = next(it)
                b = real.size(0)
                disc.zero_grad()
                fake = gen(torch.randn(b, nz)).detach()
                (disc(fake).mean() - disc(real).mean()).backward()
                timed(opt_d)
                with torch.no_grad():
                    for w in disc.parameters():
                        w.clamp_(-0.01, 0.01)
            gen.zero_grad()
            (-disc(gen(torch.randn(b, nz))).mean()).backward()
            timed(opt_g)
            times.append(time.perf_counter() - t)
            continue
        (real,) = next(it)
        b = real.size(0)
        disc.zero_grad()
        err_real = loss(disc(real), torch.ones(b, 1))
        err_real.backward()
        fake = gen(torch.randn(b, nz))
        err_fake = loss(disc(fake.detach()), torch.zeros(b, 1))
        err_fake.backward()
        timed(opt_d)
        gen.zero_grad()
        err_g = loss(disc(fake), torch.ones(b, 1))
        err_g.backward()
        timed(opt_g)
        times.append(time.perf_counter() - t)
    # Past the first iterations (Adam's state made at its first step), as the watch's
    # steady steps are.
    share = sum(opt_s[3:]) / sum(times[3:])
    times.sort()
    with open(a.truth, "w") as f:
        json.dump({"iters": len(times), "median_ms": times[len(times) // 2] * 1e3, "batch": a.batch * (1 if a.layerwise else per), "optimizer_share": share}, f)


if __name__ == "__main__":
    main()
