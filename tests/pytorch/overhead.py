"""The per-step cost of tune's hooks: a minimal training step (one DataLoader batch, a
tiny forward, backward, zero_grad and SGD step), timed in blocks; the fastest block is
the least disturbed by other load. Run it under `tune watch` (hooks on) and with
TUNE_BRIDGE=0 (off) and compare the printed microseconds per step."""

import json
import time

import torch
from torch.utils.data import DataLoader, TensorDataset

torch.set_num_threads(1)
data = TensorDataset(torch.randn(4096, 8), torch.randn(4096, 1))
w = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(w.parameters(), lr=0.01)
best = float("inf")
for block in range(30):
    it = iter(DataLoader(data, batch_size=16))
    t = time.perf_counter()
    for _ in range(200):
        x, y = next(it)
        opt.zero_grad()
        loss = ((w(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
    best = min(best, (time.perf_counter() - t) / 200)
print(json.dumps({"us_per_step": best * 1e6}))
