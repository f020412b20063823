"""DQN as the tutorials write it: an epsilon-greedy policy network acting in a small
grid world simulated in Python, a replay buffer (a deque) sampled into tensors each
step, a target network (a copy, synced every 200 steps) evaluated under `torch.no_grad()`
for the TD targets, Huber loss, Adam and gradient clipping. No DataLoader. True
bottleneck: the script's own Python (the environment, the buffer's sampling and
stacking), then the small networks' forward and backward. `--hand N` times N steps.
"""

import argparse
import copy
import random
import time
from collections import deque

import torch
import torch.nn as nn
import torch.nn.functional as F


class Grid:
    """A 12x12 grid, a goal and walls; the state is the agent's one-hot cell and the goal's."""

    def __init__(self, seed):
        self.rng = random.Random(seed)
        self.n = 12
        self.walls = {(self.rng.randrange(12), self.rng.randrange(12)) for _ in range(20)}
        self.reset()

    def reset(self):
        self.pos = (0, 0)
        self.goal = (11, 11)
        self.t = 0
        return self.state()

    def state(self):
        s = [0.0] * (2 * self.n * self.n)
        s[self.pos[0] * self.n + self.pos[1]] = 1.0
        s[self.n * self.n + self.goal[0] * self.n + self.goal[1]] = 1.0
        return s

    def step(self, a):
        dx, dy = [(0, 1), (1, 0), (0, -1), (-1, 0)][a]
        x, y = self.pos[0] + dx, self.pos[1] + dy
        if 0 <= x < self.n and 0 <= y < self.n and (x, y) not in self.walls:
            self.pos = (x, y)
        self.t += 1
        done = self.pos == self.goal or self.t >= 200
        reward = 1.0 if self.pos == self.goal else -0.01
        return self.state(), reward, done


def q_net(d):
    return nn.Sequential(nn.Linear(d, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 4))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=200000)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--hand", type=int, default=0)
    args = ap.parse_args()
    torch.manual_seed(0)
    env = Grid(0)
    d = 2 * env.n * env.n
    policy = q_net(d)
    target = copy.deepcopy(policy)
    target.eval()
    opt = torch.optim.Adam(policy.parameters(), lr=1e-3)
    buffer = deque(maxlen=50000)
    s = env.reset()
    for _ in range(500):
        a = random.randrange(4)
        s2, r, done = env.step(a)
        buffer.append((s, a, r, s2, done))
        s = env.reset() if done else s2
    times, t0 = [], time.perf_counter()
    for step in range(args.steps):
        eps = max(0.05, 1.0 - step / 5000)
        if random.random() < eps:
            a = random.randrange(4)
        else:
            with torch.no_grad():
                a = int(policy(torch.tensor(s).unsqueeze(0)).argmax())
        s2, r, done = env.step(a)
        buffer.append((s, a, r, s2, done))
        s = env.reset() if done else s2
        batch = random.sample(buffer, args.batch_size)
        states = torch.tensor([b[0] for b in batch])
        actions = torch.tensor([b[1] for b in batch])
        rewards = torch.tensor([b[2] for b in batch])
        nexts = torch.tensor([b[3] for b in batch])
        dones = torch.tensor([float(b[4]) for b in batch])
        q = policy(states).gather(1, actions.unsqueeze(1)).squeeze(1)
        with torch.no_grad():
            best = target(nexts).max(1).values
        loss = F.smooth_l1_loss(q, rewards + 0.99 * best * (1 - dones))
        opt.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(policy.parameters(), 10.0)
        opt.step()
        if step % 200 == 0:
            target.load_state_dict(policy.state_dict())
        if args.hand:
            now = time.perf_counter()
            times.append(now - t0)
            t0 = now
            if len(times) == args.hand + 10:
                ms = sorted(times[10:])[args.hand // 2] * 1e3
                print(f"HAND steps={args.hand} median_step_ms={ms:.2f} samples_per_s={args.batch_size / ms * 1e3:.1f}")
                return
        if step % 1000 == 0:
            print(f"step {step} loss {loss.item():.4f} eps {eps:.2f}", flush=True)


if __name__ == "__main__":
    main()
