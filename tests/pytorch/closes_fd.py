"""A small CPU training script that, partway through, does to tune's event descriptor
what careless scripts and daemonising libraries do to inherited descriptors, then opens
files of its own and trains on (issue #27). It knows nothing about tune beyond the
variable that names the descriptor.

--how close       os.close(int(os.environ["TUNE_BRIDGE_FD"]))
--how closerange  os.closerange(3, 65536), as a daemonising library does
--how dup2        os.dup2(<a file of its own>, that descriptor)
--how c-dup2      the same through libc (a C extension's dup2, which no Python hook sees)

The descriptor goes after step --at, at the end of an epoch. Without workers the script
then opens two files (--out.after, then --out), which take the lowest free numbers, the
freed one among them. With workers (--workers) the next epoch's first worker queue is
made first: its pipe's read end takes the lowest free number and its write end the freed
one, so whatever is written there reaches the main process as a message header (what
made the issue's job deadlock); the files are opened after that epoch. --out gets one
line per step after that and "done" at the end; nothing else is written to any of them.
"""

import argparse
import ctypes
import os

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def lose(how, fd, side):
    if how == "close":
        os.close(fd)
    elif how == "closerange":
        os.closerange(3, 65536)
    elif how == "dup2":
        os.dup2(side.fileno(), fd)
    else:
        if ctypes.CDLL(None, use_errno=True).dup2(side.fileno(), fd) < 0:
            raise OSError(ctypes.get_errno(), "dup2")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--how", choices=["close", "closerange", "dup2", "c-dup2"], required=True)
    p.add_argument("--at", type=int, default=10)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--out", required=True)
    args = p.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    batch = 16
    n = batch * args.at
    data = TensorDataset(torch.randn(n, 32), torch.randint(0, 4, (n,)))
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    loss_fn = nn.CrossEntropyLoss()
    files = []
    gone = False
    step = 0
    while step < args.steps:
        loader = DataLoader(data, batch_size=batch, num_workers=args.workers)
        for x, y in loader:
            opt.zero_grad()
            loss_fn(model(x), y).backward()
            opt.step()
            step += 1
            if files:
                files[-1].write("script step %d\n" % step)
            if step >= args.steps:
                break
        if not gone and step >= args.at:
            gone = True
            fd = int(os.environ["TUNE_BRIDGE_FD"])
            side = open(args.out + ".dup2", "w") if "dup2" in args.how else None
            lose(args.how, fd, side)
            print("descriptor %d gone after step %d" % (fd, step), flush=True)
            if args.workers:
                continue
        if gone and not files:
            files.append(open(args.out + ".after", "w", buffering=1))
            files.append(open(args.out, "w", buffering=1))
    files[-1].write("done\n")
    for f in files:
        f.close()


if __name__ == "__main__":
    main()
