"""A small DDP training script on the CPU (gloo), launched with torchrun: every rank
trains a replica on its shard and spends --base-ms per step in its own Python (a sleep
stands for reading its data, so the figure does not depend on how loaded the machine
is); rank 1 spends --slow-ms more (as a rank with a slower disk or a busier host
would), so the others wait for it in the gradient all-reduce. It knows nothing about
tune."""

import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--base-ms", type=float, default=20.0)
    p.add_argument("--slow-ms", type=float, default=30.0)
    args = p.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    n = 16 * args.steps * dist.get_world_size()
    data = TensorDataset(torch.randn(n, 64), torch.randint(0, 4, (n,)))
    loader = DataLoader(data, batch_size=16, sampler=DistributedSampler(data))
    model = DistributedDataParallel(nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 4)))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    loss_fn = nn.CrossEntropyLoss()
    for x, y in loader:
        time.sleep((args.base_ms + (args.slow_ms if rank == 1 else 0.0)) / 1000.0)
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
    # Both ranks leave together: destroying gloo's group while the peer still has work
    # in flight aborted rank 0 once ("terminate called without an active exception").
    dist.barrier()
    dist.destroy_process_group()
    if rank == 0:
        print("rank 0 done, LOCAL_RANK", os.environ.get("LOCAL_RANK"))


if __name__ == "__main__":
    main()
