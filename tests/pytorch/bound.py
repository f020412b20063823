"""Two ordinary PyTorch CPU training loops, each bound by one cost, for tune watch's
findings. They know nothing of tune.

--kind optimizer: a deep stack of wide linear layers on a batch of 2, updated by a
  per-parameter (for-loop) Adam: the update touches every weight several times while the
  forward and backward are matrix-vector products (Adam dominates, as in a recommender
  with big dense layers).
--kind compute: a few narrow layers on a batch of 4096: matrix products dominate and
  the optimizer has little to update.
"""

import argparse

import torch
import torch.nn as nn


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--kind", choices=["optimizer", "compute"], required=True)
    p.add_argument("--steps", type=int, default=25)
    args = p.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    if args.kind == "optimizer":
        width, depth, batch = 1024, 8, 2
    else:
        width, depth, batch = 256, 4, 4096
    layers = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.ReLU()]
    net = nn.Sequential(*layers, nn.Linear(width, 10))
    opt = torch.optim.Adam(net.parameters(), lr=1e-4, foreach=False)
    loss_fn = nn.CrossEntropyLoss()
    x = torch.randn(batch, width)
    y = torch.randint(0, 10, (batch,))
    for _ in range(args.steps):
        opt.zero_grad()
        loss = loss_fn(net(x), y)
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()
