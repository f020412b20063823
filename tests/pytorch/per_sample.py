"""Gradients without `backward`: DP-SGD's per-sample gradients, `vmap(grad(loss))` over
`functional_call` (`--via func`), or the batch's gradients from torch.autograd.grad
(`--via autograd`), written into `p.grad` for an SGD step. It knows nothing of tune.

Each step the script times its own gradient call, forward included ("GRADS <fraction of
the step>"), which tune's forward and backward shares together should match."""

import argparse
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.func import functional_call, grad, vmap


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--via", choices=["func", "autograd"], default="func")
    ap.add_argument("--steps", type=int, default=100000)
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = nn.Sequential(nn.Linear(64, 256), nn.Tanh(), nn.Linear(256, 256), nn.Tanh(), nn.Linear(256, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(64, 64), torch.randint(0, 10, (64,))

    def loss_one(params, xi, yi):
        return F.cross_entropy(functional_call(model, params, (xi.unsqueeze(0),)), yi.unsqueeze(0))

    per_sample = vmap(grad(loss_one), in_dims=(None, 0, 0))
    for _ in range(args.steps):
        t0 = time.perf_counter()
        if args.via == "func":
            params = {n: p.detach() for n, p in model.named_parameters()}
            t1 = time.perf_counter()
            g = per_sample(params, x, y)
            took = time.perf_counter() - t1
            grads = [g[n].mean(0) for n in params]
        else:
            t1 = time.perf_counter()
            grads = torch.autograd.grad(F.cross_entropy(model(x), y), list(model.parameters()))
            took = time.perf_counter() - t1
        for p, gi in zip(model.parameters(), grads):
            p.grad = gi + 0.01 * torch.randn_like(gi)
        opt.step()
        opt.zero_grad(set_to_none=True)
        print(f"GRADS {took / (time.perf_counter() - t0):.4f}", flush=True)


if __name__ == "__main__":
    main()
