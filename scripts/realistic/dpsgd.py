"""Differentially private training, Opacus-style but written with torch.func: per-sample
gradients from `vmap(grad(loss))` over `functional_call`, each sample's gradient clipped
to norm 1, summed, Gaussian noise added, the result written into `p.grad` and an SGD
step taken. There is no `loss.backward()` at all. A small conv net on 28x28 images from
fake_mnist, batch 64, DataLoader at its defaults. True bottleneck: the vmapped per-sample
backward (the per-sample gradients' memory and the batched convolutions).
`--hand N` times N steps (data, the per-sample gradients, the clip-and-noise, the step).
"""

import argparse
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.func import functional_call, grad, vmap

from fake_mnist import MNIST


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(1, 16, 5, 2, 2)
        self.c2 = nn.Conv2d(16, 32, 3, 2, 1)
        self.fc = nn.Linear(32 * 7 * 7, 10)

    def forward(self, x):
        x = torch.tanh(self.c1(x))
        x = torch.tanh(self.c2(x))
        return self.fc(x.flatten(1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--sigma", type=float, default=1.1)
    ap.add_argument("--hand", type=int, default=0)
    args = ap.parse_args()
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loader = torch.utils.data.DataLoader(MNIST(train=True), batch_size=args.batch_size, shuffle=True)
    names = [n for n, _ in model.named_parameters()]

    def loss_one(params, x, y):
        out = functional_call(model, params, (x.unsqueeze(0),))
        return F.cross_entropy(out, y.unsqueeze(0))

    per_sample = vmap(grad(loss_one), in_dims=(None, 0, 0))
    phases = {"data": [], "grads": [], "clip": [], "step": []}
    step = 0
    for epoch in range(args.epochs):
        t = time.perf_counter()
        for x, y in loader:
            t1 = time.perf_counter()
            params = {n: p.detach() for n, p in model.named_parameters()}
            g = per_sample(params, x, y)
            t2 = time.perf_counter()
            flat = torch.cat([g[n].flatten(1) for n in names], dim=1)
            scale = (args.clip / (flat.norm(dim=1) + 1e-6)).clamp(max=1.0)
            for n, p in model.named_parameters():
                s = (g[n] * scale.view(-1, *[1] * (g[n].dim() - 1))).sum(0)
                s += torch.randn_like(s) * args.sigma * args.clip
                p.grad = s / len(x)
            t3 = time.perf_counter()
            opt.step()
            opt.zero_grad(set_to_none=True)
            t4 = time.perf_counter()
            step += 1
            if args.hand and step > 3:
                for k, a, b in (("data", t, t1), ("grads", t1, t2), ("clip", t2, t3), ("step", t3, t4)):
                    phases[k].append(b - a)
                if len(phases["data"]) == args.hand:
                    tot = [sum(v[i] for v in phases.values()) for i in range(args.hand)]
                    med = sorted(tot)[args.hand // 2]
                    print(f"HAND steps={args.hand} median_step_ms={med * 1e3:.1f} samples_per_s={args.batch_size / med:.1f}")
                    for k, v in phases.items():
                        print(f"HAND share {k}={100 * sum(v) / sum(tot):.1f}%")
                    return
            if step % 100 == 0:
                print(f"epoch {epoch} step {step}", flush=True)
            t = time.perf_counter()


if __name__ == "__main__":
    main()
