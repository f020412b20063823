"""A PyTorch Lightning image classifier as Lightning's tutorials write it: a LightningDataModule
over a Dataset of synthetic 32x32 images with a numpy augmentation, a LightningModule with a
small conv net, AdamW with a OneCycle schedule stepping each batch, validation each epoch,
Trainer defaults (progress bar, CSV logger, checkpoint at each epoch's end). `--ddp N`:
N CPU ranks (Lightning starts them by running the script again). `--hand N` times N
steps with a Callback, apart from tune."""
import argparse
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import Dataset, DataLoader
import lightning as L


class Shapes(Dataset):
    def __init__(self, n, seed):
        rng = np.random.default_rng(seed)
        self.labels = rng.integers(0, 10, size=n)
        self.base = rng.standard_normal((10, 3, 32, 32)).astype(np.float32)
        self.seed = seed

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        rng = np.random.default_rng(self.seed * 100003 + i)
        y = int(self.labels[i])
        x = self.base[y] + 0.8 * rng.standard_normal((3, 32, 32)).astype(np.float32)
        if rng.random() < 0.5:
            x = x[:, :, ::-1]
        dx, dy = rng.integers(-3, 4, size=2)
        x = np.roll(x, (dx, dy), axis=(1, 2))
        return torch.from_numpy(np.ascontiguousarray(x)), y


class DataModule(L.LightningDataModule):
    def __init__(self, batch_size, workers):
        super().__init__()
        self.batch_size = batch_size
        self.workers = workers

    def setup(self, stage=None):
        self.train_set = Shapes(50000, 1)
        self.val_set = Shapes(2000, 2)

    def train_dataloader(self):
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True,
                          num_workers=self.workers)

    def val_dataloader(self):
        return DataLoader(self.val_set, batch_size=256, num_workers=self.workers)


class Net(L.LightningModule):
    def __init__(self, lr=3e-3, steps=100000):
        super().__init__()
        self.save_hyperparameters()
        def block(i, o):
            return nn.Sequential(nn.Conv2d(i, o, 3, padding=1, bias=False), nn.BatchNorm2d(o), nn.ReLU())
        self.net = nn.Sequential(block(3, 32), block(32, 32), nn.MaxPool2d(2),
                                 block(32, 64), block(64, 64), nn.MaxPool2d(2),
                                 block(64, 128), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                                 nn.Linear(128, 10))

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        loss = F.cross_entropy(logits, y)
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        self.log("val_acc", (logits.argmax(1) == y).float().mean(), prog_bar=True)

    def configure_optimizers(self):
        opt = torch.optim.AdamW(self.parameters(), lr=self.hparams.lr, weight_decay=0.05)
        sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=self.hparams.lr,
                                                    total_steps=self.hparams.steps)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--precision", default="32-true")
    ap.add_argument("--hand", type=int, default=0, help="time N steps by hand and stop")
    ap.add_argument("--accum", type=int, default=1)
    ap.add_argument("--channels-last", action="store_true")
    ap.add_argument("--ddp", type=int, default=0, help="N CPU ranks under strategy=\"ddp\"")
    args = ap.parse_args()
    L.seed_everything(0)
    dm = DataModule(args.batch_size, args.workers)
    model = Net(steps=args.epochs * (50000 // args.batch_size + 1))
    callbacks = []
    if args.hand:
        import time

        class Hand(L.Callback):
            times = []

            def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
                self.t0 = time.perf_counter()

            def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
                self.times.append(time.perf_counter() - self.t0)
                if len(self.times) >= args.hand:
                    t = sorted(self.times[5:])
                    print(f"hand: median {1000 * t[len(t) // 2]:.1f} ms a step, "
                          f"{args.batch_size / t[len(t) // 2]:.1f} samples/s", flush=True)
                    trainer.should_stop = True

        callbacks.append(Hand())
    if args.channels_last:
        model = model.to(memory_format=torch.channels_last)
    ddp = {"accelerator": "cpu", "devices": args.ddp, "strategy": "ddp"} if args.ddp else {
        "accelerator": "auto", "devices": 1}
    trainer = L.Trainer(max_epochs=args.epochs, **ddp,
                        precision=args.precision, log_every_n_steps=20, callbacks=callbacks, accumulate_grad_batches=args.accum,
                        enable_progress_bar=not args.hand)
    trainer.fit(model, dm)
