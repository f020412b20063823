"""A PyTorch Lightning job as its docs write one, small enough for a test: a
LightningModule over an MLP, a LightningDataModule whose validation loader (batch 50) the
Trainer builds first for its sanity check, a training loader of batch 16, and
`accumulate_grad_batches=2`: Lightning calls backward once before each optimizer step and
once inside the closure it hands `optimizer.step`. `--ddp`: 2 CPU ranks, which Lightning
starts by running this script again, its loaders re-created around a DistributedSampler.
Trains "for hours" (max_epochs)."""
import argparse

import lightning as L
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


class Data(L.LightningDataModule):
    def __init__(self, batch):
        super().__init__()
        self.batch = batch

    def setup(self, stage=None):
        g = torch.Generator().manual_seed(0)
        x = torch.randn(16384, 64, generator=g)
        y = (x[:, :8].sum(1) > 0).long()
        self.train_set = TensorDataset(x, y)
        self.val_set = TensorDataset(x[:200], y[:200])

    def train_dataloader(self):
        return DataLoader(self.train_set, batch_size=self.batch, shuffle=True)

    def val_dataloader(self):
        return DataLoader(self.val_set, batch_size=50)


class Net(L.LightningModule):
    def __init__(self, width):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(64, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 2)
        )

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.cross_entropy(self(x), y)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", F.cross_entropy(self(x), y))

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("out", nargs="?", default=None, help="the Trainer's default_root_dir")
    ap.add_argument("--accum", type=int, default=2)
    ap.add_argument("--ddp", action="store_true", help="2 CPU ranks, strategy=\"ddp\"")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--width", type=int, default=256)
    args = ap.parse_args()
    trainer = L.Trainer(
        max_epochs=1000,
        default_root_dir=args.out,
        accelerator="cpu",
        devices=2 if args.ddp else 1,
        strategy="ddp" if args.ddp else "auto",
        accumulate_grad_batches=args.accum,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(Net(args.width), Data(args.batch))
