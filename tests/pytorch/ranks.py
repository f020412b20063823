"""A small DDP training script on the CPU (gloo), launched with torchrun: every rank
trains a replica on its shard and spends --base-ms per step in its own Python (a sleep
stands for reading its data, so the figure does not depend on how loaded the machine
is); rank 1 spends --slow-ms more (as a rank with a slower disk or a busier host
would), so the others wait for it in the gradient all-reduce. It knows nothing about
tune."""

import argparse
import os
import sys
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
    # Both ranks leave together, then leave at once: no destroy_process_group and no
    # interpreter teardown, where gloo's threads can still be joinable and the rank
    # aborts ("terminate called without an active exception": rank 0 once without the
    # barrier in a clean-clone .ci/run, rank 1 once after barrier + destroy_process_group
    # in CI; never in 12 runs of the script alone). That is PyTorch's exit, not the training the test
    # measures: after the barrier no collective is in flight, and every step's event was
    # written when its optimizer step returned.
    dist.barrier()
    if rank == 0:
        print("rank 0 done, LOCAL_RANK", os.environ.get("LOCAL_RANK"), flush=True)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
