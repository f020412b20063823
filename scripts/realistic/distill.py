"""Knowledge distillation as people write it: a frozen teacher CNN in eval mode under
`torch.no_grad()` beside a small student trained on the teacher's softened logits plus the
labels (Hinton's KD loss, temperature 4), SGD with momentum and a step schedule, a
DataLoader over synthetic 3x32x32 images with a flip augmentation, and an accuracy print
every 50 steps. True bottleneck: the teacher's forward (no backward) and the student's
forward and backward, all compute; the loader is cheap. `--hand N` times N steps by hand,
the teacher's forward apart ("HAND teacher").
"""

import argparse
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset


class Images(Dataset):
    def __init__(self, n, seed):
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(n, 3, 32, 32, generator=g)
        self.y = torch.randint(0, 10, (n,), generator=g)

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        x = self.x[i]
        if i % 2:
            x = torch.flip(x, dims=[2])
        return x, self.y[i]


def conv_net(width, blocks):
    layers, c = [], 3
    for i in range(blocks):
        layers += [nn.Conv2d(c, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU()]
        if i % 2:
            layers.append(nn.MaxPool2d(2))
        c = width
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c, 10)]
    return nn.Sequential(*layers)


def kd_loss(student, teacher, y, t=4.0, alpha=0.9):
    soft = F.kl_div(
        F.log_softmax(student / t, dim=1), F.softmax(teacher / t, dim=1), reduction="batchmean"
    )
    return alpha * soft * t * t + (1 - alpha) * F.cross_entropy(student, y)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=50)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--hand", type=int, default=0)
    args = ap.parse_args()
    torch.manual_seed(0)
    teacher = conv_net(96, 6)
    teacher.eval()
    for p in teacher.parameters():
        p.requires_grad_(False)
    student = conv_net(32, 4)
    opt = torch.optim.SGD(student.parameters(), lr=args.lr, momentum=0.9, weight_decay=5e-4)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=200, gamma=0.5)
    loader = DataLoader(Images(4096, 1), batch_size=args.batch_size, shuffle=True, drop_last=True)
    step, t0, hand = 0, time.perf_counter(), []
    for epoch in range(args.epochs):
        student.train()
        t_data = time.perf_counter()
        for x, y in loader:
            t1 = time.perf_counter()
            with torch.no_grad():
                t_logits = teacher(x)
            t2 = time.perf_counter()
            s_logits = student(x)
            loss = kd_loss(s_logits, t_logits, y)
            t3 = time.perf_counter()
            opt.zero_grad()
            loss.backward()
            t4 = time.perf_counter()
            opt.step()
            sched.step()
            step += 1
            if args.hand:
                hand.append((t1 - t_data, t2 - t1, t3 - t2, t4 - t3, time.perf_counter() - t4))
                if len(hand) == args.hand + 3:
                    rows = hand[3:]
                    total = sum(sum(r) for r in rows)
                    med = sorted(sum(r) for r in rows)[len(rows) // 2]
                    print(f"HAND steps={args.hand} median_step_ms={med * 1e3:.1f} "
                          f"samples_per_s={args.batch_size / med:.1f}")
                    for i, k in enumerate(("data", "teacher", "student_fwd", "bwd", "opt")):
                        print(f"HAND share {k}={100 * sum(r[i] for r in rows) / total:.1f}%")
                    return
            t_data = time.perf_counter()
            if step % 50 == 0:
                acc = (s_logits.argmax(1) == y).float().mean().item()
                dt = (time.perf_counter() - t0) / 50
                print(f"epoch {epoch} step {step} loss {loss.item():.3f} acc {acc:.2f} {dt * 1000:.1f} ms/step", flush=True)
                t0 = time.perf_counter()


if __name__ == "__main__":
    main()
