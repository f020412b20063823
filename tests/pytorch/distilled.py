"""Knowledge distillation: a frozen teacher MLP, in eval mode and called under
torch.no_grad(), beside a small student trained on its softened logits (`--teacher on`),
or the student alone on the labels (`--teacher off`). It knows nothing of tune.

Each step the script times its own teacher call ("TEACHER <fraction of the step>"), which
tune's forward-without-gradients share should match."""

import argparse
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def mlp(d, width, depth):
    layers, c = [], d
    for _ in range(depth):
        layers += [nn.Linear(c, width), nn.ReLU()]
        c = width
    return nn.Sequential(*layers, nn.Linear(c, 10))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--teacher", choices=["on", "off"], default="on")
    ap.add_argument("--steps", type=int, default=100000)
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    teacher = mlp(128, 768, 4).eval()
    for p in teacher.parameters():
        p.requires_grad_(False)
    student = mlp(128, 128, 2)
    opt = torch.optim.SGD(student.parameters(), lr=0.01)
    x, y = torch.randn(256, 128), torch.randint(0, 10, (256,))
    for _ in range(args.steps):
        t0 = time.perf_counter()
        out = student(x)
        if args.teacher == "on":
            t1 = time.perf_counter()
            with torch.no_grad():
                soft = teacher(x)
            took = time.perf_counter() - t1
            loss = F.kl_div(F.log_softmax(out / 4, 1), F.softmax(soft / 4, 1), reduction="batchmean")
        else:
            took = 0.0
            loss = F.cross_entropy(out, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"TEACHER {took / (time.perf_counter() - t0):.4f}", flush=True)


if __name__ == "__main__":
    main()
