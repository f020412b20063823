"""A PyTorch CPU training script whose model is a linear layer followed by a long chain
of pointwise operations on a wide activation: eager PyTorch runs each operation as its
own pass over memory, torch.compile fuses the chain into a few kernels, so compiling
pays off by a wide margin here (a planted effect for tune's `compile` knob, issue #26).
It trains "forever" (no DataLoader: random batches) and knows nothing about tune.

--script-compile MODE   the script calls torch.compile(model, mode=MODE) itself.
"""

import argparse

import torch
import torch.nn as nn


class Chain(nn.Module):
    def __init__(self, width, depth):
        super().__init__()
        self.lin = nn.Linear(width, width)
        self.depth = depth

    def forward(self, x):
        y = self.lin(x)
        for _ in range(self.depth):
            # Not tanh/gelu: inductor's CPU code for those was slower than eager's here
            # (77.9 vs 91.8 ms a step); relu, mul and sub fuse 3.4x faster (72.4 vs
            # 21.5 ms, width and batch 512, depth 24, one thread).
            y = torch.relu(y) * 1.01 - 0.001
        return y


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--width", type=int, default=512)
    p.add_argument("--batch", type=int, default=512)
    p.add_argument("--depth", type=int, default=24)
    p.add_argument("--script-compile", default="")
    p.add_argument("--tag", default="")  # lets a test find its processes
    args = p.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = Chain(args.width, args.depth)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    if args.script_compile:
        model = torch.compile(model, mode=args.script_compile)
    x = torch.randn(args.batch, args.width)
    while True:
        opt.zero_grad()
        loss = model(x).square().mean()
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()
