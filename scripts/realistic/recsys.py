"""A two-tower recommender written as a Trainer class, as many codebases do: large user
and item embedding tables updated by dense Adam (every row, every step), a DataLoader
over in-memory interaction tensors, a validation pass every 200 steps. True bottleneck:
the optimizer (Adam touches all 3.2M embedding rows' moments each step).
"""

import argparse

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


class TwoTower(nn.Module):
    def __init__(self, users, items, dim):
        super().__init__()
        self.user = nn.Embedding(users, dim)
        self.item = nn.Embedding(items, dim)
        self.mlp = nn.Sequential(nn.Linear(2 * dim, 64), nn.ReLU(), nn.Linear(64, 1))

    def forward(self, u, i):
        return self.mlp(torch.cat([self.user(u), self.item(i)], dim=1)).squeeze(1)


class Trainer:
    def __init__(self, model, train, val, batch_size, hand):
        self.model = model
        self.opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        self.train_loader = DataLoader(train, batch_size=batch_size, shuffle=True)
        self.val_loader = DataLoader(val, batch_size=4096)
        self.loss_fn = nn.BCEWithLogitsLoss()
        self.step = 0
        self.hand = hand

    def training_step(self, batch):
        u, i, y = batch
        h = self.hand
        h and h.mark("data")
        loss = self.loss_fn(self.model(u, i), y)
        h and h.mark("fwd")
        self.opt.zero_grad()
        loss.backward()
        h and h.mark("bwd")
        self.opt.step()
        h and h.mark("opt")
        return loss

    @torch.no_grad()
    def validate(self):
        self.model.eval()
        total = sum(self.loss_fn(self.model(u, i), y).item() for u, i, y in self.val_loader)
        self.model.train()
        return total / len(self.val_loader)

    def fit(self, epochs):
        h = self.hand
        h and h.start()
        for epoch in range(epochs):
            for batch in self.train_loader:
                loss = self.training_step(batch)
                self.step += 1
                if h:
                    if h.end(batch[0].shape[0]):
                        h.report()
                        return
                    h.start()
                if self.step % 200 == 0:
                    print(f"step {self.step} loss {loss.item():.4f} val {self.validate():.4f}", flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--batch-size", type=int, default=2048)
    p.add_argument("--hand", type=int, default=0)
    args = p.parse_args()
    torch.manual_seed(0)
    users, items, n = 2_000_000, 1_200_000, 400_000
    u = torch.randint(0, users, (n,))
    i = torch.randint(0, items, (n,))
    y = ((u + i) % 3 == 0).float()
    train = TensorDataset(u[:360_000], i[:360_000], y[:360_000])
    val = TensorDataset(u[360_000:], i[360_000:], y[360_000:])
    hand = None
    if args.hand:
        from handtimer import Hand
        hand = Hand(args.hand)
    Trainer(TwoTower(users, items, 16), train, val, args.batch_size, hand).fit(args.epochs)


if __name__ == "__main__":
    main()
