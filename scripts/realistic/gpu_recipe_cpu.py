"""A text classifier copied from a GPU recipe and run on a CPU box: it sets
cudnn.benchmark, builds autocast and GradScaler with enabled=torch.cuda.is_available(),
wraps the model in DataParallel when several GPUs exist, moves batches with
.to(device, non_blocking=True), clips gradients, warms the LR up with LambdaLR and prints
a tqdm-style progress line with '\\r'. Batches are dicts from a padding collate_fn; the
model is a 2-layer nn.TransformerEncoder over token ids."""
import argparse
import sys
import time

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset

V, L = 8000, 128


class Toks(Dataset):
    def __init__(self, n=50000):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        ln = int(torch.randint(32, L, (1,), generator=g))
        return torch.randint(1, V, (ln,), generator=g), i % 4


def collate(batch):
    ids = nn.utils.rnn.pad_sequence([b[0] for b in batch], batch_first=True)
    return {"input_ids": ids, "mask": ids == 0, "labels": torch.tensor([b[1] for b in batch])}


class Cls(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, 256, padding_idx=0)
        layer = nn.TransformerEncoderLayer(256, 4, 512, batch_first=True, dropout=0.1)
        self.enc = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.out = nn.Linear(256, 4)

    def forward(self, ids, mask):
        h = self.enc(self.emb(ids), src_key_padding_mask=mask)
        return self.out(h.mean(1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--hand", type=int, default=0)
    ap.add_argument("--bf16", action="store_true")
    a = ap.parse_args()
    torch.manual_seed(0)
    torch.backends.cudnn.benchmark = True
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = Cls().to(device)
    if torch.cuda.device_count() > 1:
        model = nn.DataParallel(model)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 500))
    scaler = torch.cuda.amp.GradScaler(enabled=torch.cuda.is_available())
    dl = DataLoader(Toks(), batch_size=32, shuffle=True, collate_fn=collate, num_workers=0,
                    pin_memory=torch.cuda.is_available())
    it, t0 = 0, None
    for ep in range(a.epochs):
        for batch in dl:
            batch = {k: v.to(device, non_blocking=True) for k, v in batch.items()}
            with torch.autocast(device.type, dtype=torch.bfloat16 if a.bf16 else torch.float16,
                                enabled=torch.cuda.is_available() or a.bf16):
                logits = model(batch["input_ids"], batch["mask"])
                loss = nn.functional.cross_entropy(logits, batch["labels"])
            opt.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            scaler.unscale_(opt)
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            scaler.step(opt)
            scaler.update()
            sched.step()
            it += 1
            if a.hand and it == 5:
                t0 = time.perf_counter()
            if a.hand and it == 5 + a.hand:
                dt = (time.perf_counter() - t0) / a.hand
                print("hand bf16=%s: %.1f ms/step, %.0f samples/s" % (a.bf16, dt * 1e3, 32 / dt))
                return
            if not a.hand:
                sys.stderr.write("\rep %d it %d loss %.3f lr %.2e" % (ep, it, loss.item(), sched.get_last_lr()[0]))
        sys.stderr.write("\n")


if __name__ == "__main__":
    main()
