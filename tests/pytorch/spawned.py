"""Trainers that Python's multiprocessing starts, as pytorch/examples does without
torchrun. It knows nothing of tune.

--mode hogwild: mnist_hogwild's: one model in shared memory (`share_memory()`), two
spawned processes each training it with a DataLoader of its own and SGD, no
torch.distributed. Each iteration prints its own wall time ("STEP <ms>").

--mode ddp: the mp.spawn recipe (ImageNet's --multiprocessing-distributed): two spawned
ranks, each given its rank as an argument (no RANK in the environment), gloo through a
file store, DistributedDataParallel; each rank prints "RANK <r>" once."""

import argparse
import os
import sys
import tempfile
import time

import torch
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F


def model():
    return nn.Sequential(nn.Linear(64, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10))


def hogwild(rank, net, steps):
    torch.manual_seed(rank)
    torch.set_num_threads(1)
    data = torch.utils.data.TensorDataset(torch.randn(4096, 64), torch.randint(0, 10, (4096,)))
    loader = torch.utils.data.DataLoader(data, batch_size=32, shuffle=True)
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    done = 0
    t = time.perf_counter()
    while done < steps:
        for x, y in loader:
            opt.zero_grad()
            F.cross_entropy(net(x), y).backward()
            opt.step()
            # The whole iteration, the batch's fetch included.
            now = time.perf_counter()
            print("STEP %.3f" % ((now - t) * 1e3), flush=True)
            t = now
            done += 1


def ddp(rank, store, steps):
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="file://" + store, rank=rank, world_size=2)
    print("RANK %d" % dist.get_rank(), flush=True)
    net = nn.parallel.DistributedDataParallel(model())
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))
    for _ in range(steps):
        opt.zero_grad()
        F.cross_entropy(net(x), y).backward()
        opt.step()
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=["hogwild", "ddp"], default="hogwild")
    p.add_argument("--steps", type=int, default=100000)
    a = p.parse_args()
    if a.mode == "hogwild":
        mp.set_start_method("spawn", force=True)
        net = model()
        net.share_memory()
        procs = [mp.Process(target=hogwild, args=(r, net, a.steps)) for r in range(2)]
        for pr in procs:
            pr.start()
        for pr in procs:
            pr.join()
    else:
        with tempfile.TemporaryDirectory() as d:
            mp.spawn(ddp, args=(os.path.join(d, "store"), a.steps), nprocs=2)
    sys.exit(0)


if __name__ == "__main__":
    main()
