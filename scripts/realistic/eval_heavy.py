"""Image classifier that validates every 25 steps on a held-out set four times the size of a
batch-set (a full pass under torch.no_grad), as recipes that 'validate often' do. A small
conv net on 32x32 tensors from a TensorDataset; SGD with momentum; trains for 50 epochs."""
import argparse
import time

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def net():
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 8 * 8, 128), nn.ReLU(), nn.Linear(128, 10))


def evaluate(model, dl):
    model.eval()
    correct = n = 0
    with torch.no_grad():
        for xb, yb in dl:
            correct += (model(xb).argmax(1) == yb).sum().item()
            n += len(yb)
    model.train()
    return correct / n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=50)
    ap.add_argument("--eval-every", type=int, default=25)
    ap.add_argument("--hand", type=int, default=0)
    a = ap.parse_args()
    torch.manual_seed(0)
    model = net()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    train = TensorDataset(torch.randn(8192, 3, 32, 32), torch.randint(0, 10, (8192,)))
    val = TensorDataset(torch.randn(2048, 3, 32, 32), torch.randint(0, 10, (2048,)))
    dl = DataLoader(train, batch_size=64, shuffle=True)
    vdl = DataLoader(val, batch_size=256)
    it = 0
    times = []
    for ep in range(a.epochs):
        for xb, yb in dl:
            t = time.perf_counter()
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(xb), yb)
            loss.backward()
            opt.step()
            it += 1
            times.append(time.perf_counter() - t)
            if it % a.eval_every == 0:
                t = time.perf_counter()
                acc = evaluate(model, vdl)
                if a.hand:
                    print("hand eval %.1f ms" % ((time.perf_counter() - t) * 1e3))
                else:
                    print("step %d val acc %.3f" % (it, acc))
            if a.hand and it == 5 + a.hand:
                tt = sorted(times[5:])
                print("hand train step median %.1f ms, %.0f samples/s" % (tt[len(tt) // 2] * 1e3, 64 / tt[len(tt) // 2]))
                return
        print("epoch", ep, loss.item())


if __name__ == "__main__":
    main()
