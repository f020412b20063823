"""An ordinary PyTorch CPU training loop with no DataLoader, as many LM and tabular
scripts are written: batches are sliced from tensors in memory, several micro-batches
per optimizer step (gradient accumulation), and a bare `optimizer.zero_grad()` (which
PyTorch >= 2.0 makes clear gradients to None). It knows nothing of tune.

--seed changes nothing but the numbers; --extra N wastes N no-grad forward passes per
micro-batch (a real, removable cost).

--burn-once MARKER: the first run that finds no MARKER file (and is given no knob by
tune, i.e. runs the script as written) creates it and keeps the cores busy with
--burners spinning processes while it trains, as other jobs on the machine would: the
test of drift uses it to make the baseline's minute a busy one.
"""

import argparse
import json
import multiprocessing as mp
import os
import time

import torch
import torch.nn as nn


def spin(stop):
    x = 0
    while not stop.is_set():
        for _ in range(100000):
            x += 1


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--accum", type=int, default=2)
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--burn-once", default=None)
    p.add_argument("--burners", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--extra", type=int, default=0, help="wasted no-grad forwards per batch")
    args = p.parse_args()
    burners = []
    stop = None
    if args.burn_once and os.environ.get("TUNE_BRIDGE_KNOBS", "{}") in ("", "{}"):
        try:
            fd = os.open(args.burn_once, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            os.close(fd)
            stop = mp.Event()
            burners = [mp.Process(target=spin, args=(stop,), daemon=True) for _ in range(args.burners)]
            for b in burners:
                b.start()
        except FileExistsError:
            pass
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    n = 4096
    X = torch.randn(n, 64)
    Y = (X[:, 0] > 0).long()
    w = args.width
    net = nn.Sequential(nn.Linear(64, w), nn.ReLU(), nn.Linear(w, w), nn.ReLU(), nn.Linear(w, 2))
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    t0 = time.perf_counter()
    for step in range(args.steps):
        opt.zero_grad()
        for m in range(args.accum):
            i = ((step * args.accum + m) * args.batch) % (n - args.batch)
            x, y = X[i : i + args.batch], Y[i : i + args.batch]
            loss = loss_fn(net(x), y) / args.accum
            loss.backward()
            with torch.no_grad():
                for _ in range(args.extra):
                    net(x)
        opt.step()
    dt = time.perf_counter() - t0
    print(json.dumps({"samples_per_s": args.steps * args.batch * args.accum / dt}), flush=True)
    if stop is not None:
        stop.set()
        for b in burners:
            b.join(timeout=5)


if __name__ == "__main__":
    main()
