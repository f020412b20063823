"""WGAN-GP on 28x28 'images' (random tensors, a realistic shape), batches sliced from one
tensor (no DataLoader). Five critic
updates per generator update, each with a gradient penalty (torch.autograd.grad with
create_graph=True), two Adam optimizers with betas (0.5, 0.9), as in Gulrajani et al.
Runs 100k generator iterations."""
import argparse
import time

import torch
import torch.nn as nn

Z = 64


def gen():
    return nn.Sequential(nn.Linear(Z, 256), nn.ReLU(), nn.Linear(256, 512), nn.ReLU(),
                         nn.Linear(512, 784), nn.Tanh())


def critic():
    return nn.Sequential(nn.Linear(784, 512), nn.LeakyReLU(0.2), nn.Linear(512, 256),
                         nn.LeakyReLU(0.2), nn.Linear(256, 1))


def penalty(c, real, fake):
    eps = torch.rand(real.size(0), 1)
    x = (eps * real + (1 - eps) * fake).requires_grad_(True)
    out = c(x)
    g, = torch.autograd.grad(out.sum(), x, create_graph=True)
    return ((g.norm(2, dim=1) - 1) ** 2).mean()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=100000)
    ap.add_argument("--n-critic", type=int, default=5)
    ap.add_argument("--hand", type=int, default=0)
    a = ap.parse_args()
    torch.manual_seed(0)
    G, D = gen(), critic()
    og = torch.optim.Adam(G.parameters(), lr=1e-4, betas=(0.5, 0.9))
    od = torch.optim.Adam(D.parameters(), lr=1e-4, betas=(0.5, 0.9))
    data = torch.rand(60000, 784) * 2 - 1
    bs = 64
    t0 = None
    for it in range(a.iters):
        for _ in range(a.n_critic):
            real = data[torch.randint(0, len(data), (bs,))]
            fake = G(torch.randn(bs, Z)).detach()
            od.zero_grad()
            loss_d = D(fake).mean() - D(real).mean() + 10 * penalty(D, real, fake)
            loss_d.backward()
            od.step()
        og.zero_grad()
        loss_g = -D(G(torch.randn(bs, Z))).mean()
        loss_g.backward()
        og.step()
        if a.hand and it == 3:
            t0 = time.perf_counter()
        if a.hand and it == 3 + a.hand:
            dt = (time.perf_counter() - t0) / a.hand
            print("hand %.1f ms per generator iteration (%d critic steps)" % (dt * 1e3, a.n_critic))
            return
        if it % 200 == 0:
            print("it", it, loss_d.item(), loss_g.item())


if __name__ == "__main__":
    main()
