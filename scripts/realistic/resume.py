"""Resumable trainer: a small conv net on dict batches ({"image", "label"}) from a map-style
Dataset, bf16 autocast already on, cosine LR schedule, gradient clipping, a checkpoint
saved to ckpt/last.pt every 10 steps and resumed from when present, and a CSV log.
--hand N times N steps with perf_counter (after 3) and returns; --compile compiles the
model first (the change tune's sweep tries), without saving anything."""
import argparse, csv, os, time
import torch, torch.nn as nn
from torch.utils.data import DataLoader, Dataset

class Images(Dataset):
    def __init__(self, n=8192):
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, 3, 32, 32, generator=g)
        self.y = torch.randint(0, 10, (n,), generator=g)
    def __len__(self):
        return len(self.x)
    def __getitem__(self, i):
        return {"image": self.x[i], "label": self.y[i]}

def net():
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(64, 128, 3, padding=1), nn.BatchNorm2d(128), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(128, 10))

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=50)
    ap.add_argument("--ckpt", default="ckpt/last.pt")
    ap.add_argument("--hand", type=int, default=0)
    ap.add_argument("--compile", action="store_true")
    a = ap.parse_args()
    model = net()
    if a.compile:
        model.compile()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
    dl = DataLoader(Images(), batch_size=128, shuffle=True, drop_last=True)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=a.epochs * len(dl))
    step = 0
    if os.path.exists(a.ckpt):
        st = torch.load(a.ckpt)
        model.load_state_dict(st["model"]); opt.load_state_dict(st["opt"])
        sched.load_state_dict(st["sched"]); step = st["step"]
        print("resumed at step", step)
    start = step
    if not a.hand:
        os.makedirs(os.path.dirname(a.ckpt), exist_ok=True)
        log = open("train_log.csv", "a", newline="")
        w = csv.writer(log)
    for ep in range(a.epochs):
        for b in dl:
            opt.zero_grad(set_to_none=True)
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = nn.functional.cross_entropy(model(b["image"]), b["label"])
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step(); sched.step(); step += 1
            if a.hand:
                if step == start + 3:
                    t0 = time.perf_counter()
                if step == start + 3 + a.hand:
                    dt = (time.perf_counter() - t0) / a.hand
                    print("hand compile=%s: %.1f ms/step, %.0f samples/s" % (a.compile, dt * 1e3, 128 / dt))
                    return
                continue
            if step % 10 == 0:
                torch.save({"model": model.state_dict(), "opt": opt.state_dict(),
                            "sched": sched.state_dict(), "step": step}, a.ckpt)
                w.writerow([step, loss.item(), sched.get_last_lr()[0]]); log.flush()
        print("epoch", ep, loss.item())

if __name__ == "__main__":
    main()
