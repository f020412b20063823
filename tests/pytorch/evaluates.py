"""A classifier that validates every few steps, as most training scripts do: the model
put in eval mode, a pass over a held-out DataLoader under torch.no_grad, back to train
mode. With --teacher it also distils from a teacher model called in eval mode under
no_grad on every batch: that forward is part of each training step, not an evaluation.
It knows nothing of tune."""

import argparse

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def mlp(width):
    return nn.Sequential(nn.Linear(64, width), nn.ReLU(), nn.Dropout(0.1), nn.Linear(width, 10))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--eval-every", type=int, default=5)
    p.add_argument("--val", type=int, default=1024, help="held-out samples")
    p.add_argument("--teacher", action="store_true")
    a = p.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = mlp(256)
    teacher = mlp(1024).eval() if a.teacher else None
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    train = DataLoader(TensorDataset(torch.randn(8192, 64), torch.randint(0, 10, (8192,))),
                       batch_size=32, shuffle=True)
    val = DataLoader(TensorDataset(torch.randn(a.val, 64), torch.randint(0, 10, (a.val,))),
                     batch_size=64)
    step = 0
    while step < a.steps:
        for x, y in train:
            opt.zero_grad()
            out = model(x)
            loss = nn.functional.cross_entropy(out, y)
            if teacher is not None:
                with torch.no_grad():
                    soft = teacher(x).softmax(1)
                loss = loss + nn.functional.cross_entropy(out, soft)
            loss.backward()
            opt.step()
            step += 1
            if a.eval_every and step % a.eval_every == 0:
                model.eval()
                correct = 0
                with torch.no_grad():
                    for vx, vy in val:
                        correct += (model(vx).argmax(1) == vy).sum().item()
                model.train()
            if step >= a.steps:
                break


if __name__ == "__main__":
    main()
