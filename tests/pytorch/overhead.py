"""The per-step cost of tune's hooks: a minimal training step (one DataLoader batch, a
tiny forward, backward, zero_grad and SGD step), timed in blocks; the fastest block is
the least disturbed by other load. Run it under `tune watch` (hooks on) and with
TUNE_BRIDGE=0 (off) and compare the printed microseconds per step: wall time, and the
main thread's CPU time (`cpu_us_per_step`), which another job's load inflates far less
than wall time on a busy machine.

--depth N: the model is N Linear+ReLU layers in an nn.Sequential (2N + 1 module calls
per forward, each through the always-on nn.Module.__call__ hook) instead of one Linear."""

import json
import sys
import time

import torch
from torch.utils.data import DataLoader, TensorDataset

depth = int(sys.argv[sys.argv.index("--depth") + 1]) if "--depth" in sys.argv else 0
torch.set_num_threads(1)
data = TensorDataset(torch.randn(4096, 8), torch.randn(4096, 1))
if depth:
    layers = [torch.nn.Linear(8, 32), torch.nn.ReLU()]
    for _ in range(depth - 1):
        layers += [torch.nn.Linear(32, 32), torch.nn.ReLU()]
    w = torch.nn.Sequential(*layers, torch.nn.Linear(32, 1))
else:
    w = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(w.parameters(), lr=0.01)
best = float("inf")
best_cpu = float("inf")
for block in range(30):
    it = iter(DataLoader(data, batch_size=16))
    c = time.thread_time()
    t = time.perf_counter()
    for _ in range(200):
        x, y = next(it)
        opt.zero_grad()
        loss = ((w(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
    best = min(best, (time.perf_counter() - t) / 200)
    best_cpu = min(best_cpu, (time.thread_time() - c) / 200)
print(json.dumps({"us_per_step": best * 1e6, "cpu_us_per_step": best_cpu * 1e6}))
