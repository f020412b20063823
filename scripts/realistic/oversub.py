"""A U-Net-ish segmentation trainer copied from a recipe tuned on a 16-core box: it pins
torch.set_num_threads(8) at the top. On a 2-core machine those threads oversubscribe the
CPU. Data: random tensors made on the fly in the main process (cheap). True bottleneck:
conv compute, slowed by thread oversubscription.
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.set_num_threads(8)


class TinyUNet(nn.Module):
    def __init__(self, c=16):
        super().__init__()
        self.d1 = nn.Conv2d(3, c, 3, padding=1)
        self.d2 = nn.Conv2d(c, 2 * c, 3, padding=1)
        self.u1 = nn.ConvTranspose2d(2 * c, c, 2, stride=2)
        self.out = nn.Conv2d(2 * c, 4, 1)

    def forward(self, x):
        a = F.relu(self.d1(x))
        b = F.relu(self.d2(F.max_pool2d(a, 2)))
        u = F.relu(self.u1(b))
        return self.out(torch.cat([u, a], dim=1))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=20000)
    p.add_argument("--hand", type=int, default=0)
    args = p.parse_args()
    torch.manual_seed(0)
    model = TinyUNet()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    h = None
    if args.hand:
        from handtimer import Hand
        h = Hand(args.hand)
    for step in range(args.steps):
        h and h.start()
        x = torch.randn(8, 3, 96, 96)
        mask = (x[:, :1] > 0).long().squeeze(1) + (x[:, 1:2] > 0.5).long().squeeze(1)
        h and h.mark("data")
        loss = F.cross_entropy(model(x), mask)
        h and h.mark("fwd")
        opt.zero_grad()
        loss.backward()
        h and h.mark("bwd")
        opt.step()
        h and h.mark("opt")
        if h and h.end(x.shape[0]):
            h.report()
            return
        if step % 25 == 0:
            print(f"step {step} loss {loss.item():.4f}", flush=True)


if __name__ == "__main__":
    main()
