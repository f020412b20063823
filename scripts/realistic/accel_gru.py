"""An accelerate training loop as its examples write it: Accelerator with gradient
accumulation, prepare() on the model, optimizer, loader and scheduler, `with
accelerator.accumulate(model):`, accelerator.backward, a tqdm bar on the main process.
A GRU sequence classifier over synthetic token streams."""
import argparse
import torch
import torch.nn as nn
from torch.utils.data import Dataset, DataLoader
from accelerate import Accelerator
from tqdm.auto import tqdm


class Seqs(Dataset):
    def __len__(self):
        return 100000

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        y = i % 4
        x = torch.randint(0, 5000, (128,), generator=g) + 1000 * y
        return x % 5000, y


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(5000, 128)
        self.rnn = nn.GRU(128, 256, batch_first=True, num_layers=2)
        self.head = nn.Linear(256, 4)

    def forward(self, x):
        h, _ = self.rnn(self.emb(x))
        return self.head(h[:, -1])


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--mixed", default="no")
    ap.add_argument("--accum", type=int, default=2)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--hand", type=int, default=0)
    args = ap.parse_args()
    accelerator = Accelerator(mixed_precision=args.mixed, gradient_accumulation_steps=args.accum)
    model = Model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loader = DataLoader(Seqs(), batch_size=32, shuffle=True, num_workers=args.workers)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, 10000)
    model, opt, loader, sched = accelerator.prepare(model, opt, loader, sched)
    import time, sys
    times, last = [], time.perf_counter()
    for epoch in range(100):
        model.train()
        for x, y in tqdm(loader, disable=not accelerator.is_local_main_process or args.hand):
            if args.hand and accelerator.sync_gradients:
                now = time.perf_counter(); times.append(now - last); last = now
                if len(times) > args.hand:
                    t = sorted(times[5:]); m = t[len(t) // 2]
                    print(f"hand: median {1000*m:.1f} ms a step, {32*args.accum/m:.1f} samples/s"); sys.exit(0)
            with accelerator.accumulate(model):
                loss = nn.functional.cross_entropy(model(x), y)
                accelerator.backward(loss)
                opt.step()
                sched.step()
                opt.zero_grad()
