"""A reinforcement-learning loop, as pytorch/examples' actor_critic writes it: a small
policy called once per environment step on one unbatched state ([4]), the environment
simulated in Python between the calls, one backward and one Adam step per episode of
EPISODE environment steps. It knows nothing of tune.

The environment's simulation is the step's largest cost; the script times it itself and
prints, per episode, its wall time ("STEP <ms>") and the share its simulation took
("OWN <fraction>")."""

import argparse
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

EPISODE = 40


class Policy(nn.Module):
    def __init__(self):
        super().__init__()
        self.affine = nn.Linear(4, 32)
        self.head = nn.Linear(32, 2)

    def forward(self, x):
        return F.softmax(self.head(F.relu(self.affine(x))), dim=-1)


def simulate(state, action, work):
    """A physics step in plain Python, `work` sub-steps of it."""
    x, v, a, w = state
    for _ in range(work):
        f = 1.0 if action else -1.0
        acc = (9.8 * math.sin(a) - math.cos(a) * f) / 1.5
        x, v = x + 0.001 * v, v + 0.001 * f
        a, w = a + 0.001 * w, w + 0.001 * acc
    return [x, v, a, w]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--episodes", type=int, default=100000)
    p.add_argument("--work", type=int, default=1200)
    a = p.parse_args()
    torch.manual_seed(0)
    model = Policy()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for _ in range(a.episodes):
        t = time.perf_counter()
        own = 0.0
        state = [0.01, 0.0, 0.02, 0.0]
        logps = []
        for _ in range(EPISODE):
            probs = model(torch.tensor(state))
            action = int(probs[1] > 0.5)
            logps.append(torch.log(probs[action]))
            s = time.perf_counter()
            state = simulate(state, action, a.work)
            own += time.perf_counter() - s
        opt.zero_grad()
        loss = -torch.stack(logps).sum()
        loss.backward()
        opt.step()
        dur = time.perf_counter() - t
        print("STEP %.3f" % (dur * 1e3))
        print("OWN %.4f" % (own / dur), flush=True)


if __name__ == "__main__":
    main()
