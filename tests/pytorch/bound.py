"""Two ordinary PyTorch CPU training loops, each bound by one cost, for tune watch's
findings. They know nothing of tune.

--kind optimizer: a deep stack of wide linear layers on a batch of 2, updated by a
  per-parameter (for-loop) Adam: the update touches every weight several times while the
  forward and backward are matrix-vector products (Adam dominates, as in a recommender
  with big dense layers).
--kind compute: a few narrow layers on a batch of 4096: matrix products dominate and
  the optimizer has little to update.
--kind mixed: a deep narrow residual MLP (48 blocks of width 64) on a batch of 32,
  updated by SGD's per-parameter loop (foreach=False): the computation is the largest
  cost, and the update of its 300 small tensors about a quarter of the step.
--kind conv: a small conv net on a batch of 64 32x32 images, SGD: its convolutions
  dominate; `--channels-last` has the script put the model and its batch in NHWC itself.
--kind data: a DataLoader (no workers) over a Dataset that takes 2 ms per sample, the
  model computing with as many threads as the process may use cores: waiting for data
  dominates, and a loader worker would have no core of its own.
"""

import argparse
import os
import time

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset


class Slow(Dataset):
    def __len__(self):
        return 1 << 20

    def __getitem__(self, i):
        time.sleep(0.002)
        return torch.randn(64), i % 10


def data_bound(steps):
    torch.set_num_threads(len(os.sched_getaffinity(0)))
    net = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()
    for i, (x, y) in enumerate(DataLoader(Slow(), batch_size=16)):
        if i == steps:
            break
        opt.zero_grad()
        loss_fn(net(x), y).backward()
        opt.step()


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, d)
        self.fc2 = nn.Linear(d, d)

    def forward(self, x):
        return x + self.fc2(torch.relu(self.fc1(self.norm(x))))


def mixed(steps):
    net = nn.Sequential(nn.Linear(32, 64), *[Block(64) for _ in range(48)], nn.Linear(64, 1))
    opt = torch.optim.SGD(net.parameters(), lr=1e-3, momentum=0.9, foreach=False)
    x, y = torch.randn(32, 32), torch.randn(32, 1)
    for _ in range(steps):
        opt.zero_grad()
        nn.functional.mse_loss(net(x), y).backward()
        opt.step()


def conv(steps, nhwc):
    net = nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(),
        nn.Conv2d(32, 64, 3, stride=2, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10),
    )
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    x, y = torch.randn(64, 3, 32, 32), torch.randint(0, 10, (64,))
    if nhwc:
        net = net.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    for _ in range(steps):
        opt.zero_grad()
        nn.functional.cross_entropy(net(x), y).backward()
        opt.step()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--kind", choices=["optimizer", "compute", "mixed", "conv", "data"], required=True)
    p.add_argument("--steps", type=int, default=25)
    # The forward under the script's own bf16 autocast, as a mixed-precision recipe.
    p.add_argument("--autocast", action="store_true")
    # Adadelta (pytorch/examples' siamese_network and mnist): a foreach switch, no fused.
    p.add_argument("--optim", choices=["adam", "adadelta"], default="adam")
    p.add_argument("--channels-last", action="store_true")
    args = p.parse_args()
    torch.manual_seed(0)
    if args.kind == "data":
        return data_bound(args.steps)
    torch.set_num_threads(1)
    if args.kind == "mixed":
        return mixed(args.steps)
    if args.kind == "conv":
        return conv(args.steps, args.channels_last)
    if args.kind == "optimizer":
        width, depth, batch = 1024, 8, 2
    else:
        width, depth, batch = 256, 4, 4096
    layers = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.ReLU()]
    net = nn.Sequential(*layers, nn.Linear(width, 10))
    if args.optim == "adadelta":
        opt = torch.optim.Adadelta(net.parameters(), lr=1.0, foreach=False)
    else:
        opt = torch.optim.Adam(net.parameters(), lr=1e-4, foreach=False)
    loss_fn = nn.CrossEntropyLoss()
    x = torch.randn(batch, width)
    y = torch.randint(0, 10, (batch,))
    for _ in range(args.steps):
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.autocast):
            loss = loss_fn(net(x), y)
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()
