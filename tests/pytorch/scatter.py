"""A mixture-of-experts layer as small MoE repos write it: tokens routed to two experts,
each expert's output added into a `torch.zeros_like` buffer with `index_add_`. Under
autocast the experts' outputs are bfloat16 and the buffer float32, so it is not
autocast-safe (`--cast` casts the source, as the fix would). It knows nothing of tune."""

import argparse

import torch
import torch.nn as nn


class MoE(nn.Module):
    def __init__(self, d=64, cast=False):
        super().__init__()
        self.cast = cast
        self.router = nn.Linear(d, 2)
        self.experts = nn.ModuleList(nn.Linear(d, d) for _ in range(2))

    def forward(self, x):
        pick = self.router(x).argmax(-1)
        out = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            rows = (pick == e).nonzero(as_tuple=True)[0]
            y = expert(x.index_select(0, rows))
            out.index_add_(0, rows, y.to(out.dtype) if self.cast else y)
        return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cast", action="store_true")
    args = ap.parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(nn.LayerNorm(64), MoE(cast=args.cast), nn.Linear(64, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(256, 64), torch.randint(0, 10, (256,))
    for _ in range(100000):
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()
