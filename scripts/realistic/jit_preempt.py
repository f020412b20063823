"""An older codebase's trainer made preemption-aware for a Slurm cluster: the model is
`torch.jit.script`ed (TorchScript, as production code of the 1.x era ships it), a
SIGTERM handler only sets a flag so the loop saves `preempt.pt` and exits at the end of
the current step (Slurm sends SIGTERM before the kill), a `try/except KeyboardInterrupt`
saves too, and every 100 steps it prints a line with `.item()`. A residual MLP on
synthetic tabular data from a TensorDataset, batch 256, SGD with Nesterov momentum, a
OneCycle schedule. True bottleneck: the MLP's GEMMs, forward and backward.
`--hand N` times N steps (data, forward, backward, optimizer); `--eager` leaves the model
unscripted, `--bf16` runs the forward under bf16 autocast.
"""

import argparse
import os
import signal

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from handtimer import Hand

stop = {"now": False}


def on_term(signum, frame):
    stop["now"] = True


class Res(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.fc1 = nn.Linear(d, 2 * d)
        self.fc2 = nn.Linear(2 * d, d)
        self.ln = nn.LayerNorm(d)

    def forward(self, x):
        return x + self.fc2(F.gelu(self.fc1(self.ln(x))))


class Net(nn.Module):
    def __init__(self, d_in=128, d=384, depth=6):
        super().__init__()
        self.inp = nn.Linear(d_in, d)
        self.blocks = nn.Sequential(*[Res(d) for _ in range(depth)])
        self.out = nn.Linear(d, 20)

    def forward(self, x):
        return self.out(self.blocks(self.inp(x)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=100)
    ap.add_argument("--hand", type=int, default=0)
    ap.add_argument("--eager", action="store_true", help="no torch.jit.script")
    ap.add_argument("--bf16", action="store_true", help="the forward and loss under bf16 autocast")
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, on_term)
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(3)
    x = torch.randn(60000, 128, generator=g)
    y = (x[:, :20].argmax(1) + (x[:, 20] > 0).long()) % 20
    loader = DataLoader(TensorDataset(x, y), batch_size=256, shuffle=True, drop_last=True)
    model = Net()
    if not args.eager:
        model = torch.jit.script(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=args.epochs * len(loader))
    hand = Hand(args.hand) if args.hand else None
    step = 0
    try:
        for epoch in range(args.epochs):
            if hand:
                hand.start()
            for xb, yb in loader:
                if hand:
                    hand.mark("data")
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
                    loss = F.cross_entropy(model(xb), yb)
                if hand:
                    hand.mark("fwd")
                opt.zero_grad(set_to_none=True)
                loss.backward()
                if hand:
                    hand.mark("bwd")
                opt.step()
                sched.step()
                step += 1
                if hand:
                    hand.mark("opt")
                    if hand.end(len(xb)):
                        hand.report()
                        return
                    hand.start()
                if step % 100 == 0:
                    print(f"epoch {epoch} step {step} loss {loss.item():.4f}", flush=True)
                if stop["now"]:
                    torch.save({"model": model.state_dict(), "step": step}, "preempt.pt")
                    print(f"preempted at step {step}: saved preempt.pt", flush=True)
                    return
    except KeyboardInterrupt:
        torch.save({"model": model.state_dict(), "step": step}, "preempt.pt")
        print("interrupted: saved preempt.pt", flush=True)
    finally:
        if os.path.exists("preempt.pt") and step == 0:
            os.remove("preempt.pt")


if __name__ == "__main__":
    main()
