"""A recipe written for a node shared by 8 jobs, run alone: it pins
`torch.set_num_threads(1)` at the top, then trains a 3-layer MLP (512-2048-2048-10, batch
256, SGD with momentum) on tensors of its own. `python pinned_threads.py N` times 40 steps
with N threads instead. True bottleneck: the matmuls, on one core of the free ones."""
import torch, torch.nn as nn, torch.nn.functional as F, time, sys
torch.set_num_threads(1)  # copied from a recipe run 8 jobs per node
torch.manual_seed(0)
m = nn.Sequential(nn.Linear(512, 2048), nn.ReLU(), nn.Linear(2048, 2048), nn.ReLU(), nn.Linear(2048, 10))
opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)
x, y = torch.randn(256, 512), torch.randint(0, 10, (256,))
hand = int(sys.argv[1]) if len(sys.argv) > 1 else 0
if hand: torch.set_num_threads(hand)
ts = []
for i in range(100000):
    t = time.perf_counter()
    opt.zero_grad(); F.cross_entropy(m(x), y).backward(); opt.step()
    ts.append(time.perf_counter() - t)
    if hand and len(ts) == 40:
        ts.sort(); print("HAND", hand, ts[20] * 1e3); break
