"""Forward-forward layers as pytorch/examples writes them: an `nn.Linear` subclass whose
training calls its own `forward` directly (`self.forward(x)`, never `self(x)`), a matmul
on the weights and then a ReLU module. Each step appends the first matmul's dtype to
`--log`, so a test can tell whether an amp trial's autocast covered it. It knows nothing
of tune."""

import argparse

import torch
import torch.nn as nn


class Layer(nn.Linear):
    def __init__(self, i, o):
        super().__init__(i, o)
        self.relu = nn.ReLU()
        self.opt = torch.optim.Adam(self.parameters(), lr=0.03)

    def forward(self, x):
        self.first = torch.mm(x / (x.norm(2, 1, keepdim=True) + 1e-4), self.weight.T)
        return self.relu(self.first + self.bias.unsqueeze(0))

    def train_steps(self, pos, neg, steps, log):
        for _ in range(steps):
            g_pos = self.forward(pos).pow(2).mean(1)
            with open(log, "a") as f:
                f.write(f"{self.first.dtype}\n")
            g_neg = self.forward(neg).pow(2).mean(1)
            loss = torch.log1p(torch.exp(torch.cat([2.0 - g_pos, g_neg - 2.0]))).float().mean()
            self.opt.zero_grad()
            loss.backward()
            self.opt.step()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--log", required=True)
    args = ap.parse_args()
    torch.manual_seed(0)
    pos, neg = torch.randn(512, 256), torch.randn(512, 256)
    Layer(256, 256).train_steps(pos, neg, 100000, args.log)


if __name__ == "__main__":
    main()
