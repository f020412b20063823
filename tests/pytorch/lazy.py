"""Lazy modules: LazyConv2d and LazyLinear take their shapes at a dry-run forward, before
the optimizer exists, as such scripts are written. Then trains until stopped, on batches
made in the loop (no DataLoader). It knows nothing of tune.

--boom: a hook of tune's is made to raise at the first step (as tune_hook's own test
does), so the hooks turn themselves off while the script trains on.
"""

import argparse

import torch
import torch.nn as nn


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--boom", action="store_true")
    a = p.parse_args()
    if a.boom:
        import tune_hook

        def boom(t):
            raise RuntimeError("boom")

        tune_hook._step_end = boom
    model = nn.Sequential(
        nn.LazyConv2d(8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(2),
        nn.Flatten(), nn.LazyLinear(10),
    )
    model(torch.randn(1, 3, 16, 16))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    while True:
        x, y = torch.randn(16, 3, 16, 16), torch.randint(0, 10, (16,))
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()


if __name__ == "__main__":
    main()
