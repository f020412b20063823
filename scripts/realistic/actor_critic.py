"""pytorch/examples' reinforcement_learning/actor_critic.py as it runs: one Policy (a
shared Linear(4, 128), an actor head and a critic head) called once per environment step
on a single unbatched state (shape [4]), an action sampled from a Categorical, the
log-prob and value kept; at the episode's end the discounted returns are computed in a
Python loop, the losses stacked, one backward and one Adam step. gymnasium is not
installed here, so CartPole-v1's physics is written out in Python (the same equations,
limits and reward). True bottleneck: the script's own Python per environment step (the
simulation, Categorical's sampling, `.item()`), not the model's arithmetic: a Linear of
4x128 is microseconds.
"""

import argparse
import math
import random
from collections import namedtuple
from itertools import count

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.distributions import Categorical


class CartPole:
    """CartPole-v1: gymnasium's classic_control/cartpole.py, in plain Python."""

    def __init__(self, seed):
        self.rng = random.Random(seed)
        self.state = None

    def reset(self):
        self.state = [self.rng.uniform(-0.05, 0.05) for _ in range(4)]
        self.t = 0
        return np.array(self.state, dtype=np.float32)

    def step(self, action):
        x, x_dot, theta, theta_dot = self.state
        force = 10.0 if action == 1 else -10.0
        costheta, sintheta = math.cos(theta), math.sin(theta)
        total_mass, polemass_length, length = 1.1, 0.05, 0.5
        temp = (force + polemass_length * theta_dot**2 * sintheta) / total_mass
        thetaacc = (9.8 * sintheta - costheta * temp) / (
            length * (4.0 / 3.0 - 0.1 * costheta**2 / total_mass)
        )
        xacc = temp - polemass_length * thetaacc * costheta / total_mass
        tau = 0.02
        x, x_dot = x + tau * x_dot, x_dot + tau * xacc
        theta, theta_dot = theta + tau * theta_dot, theta_dot + tau * thetaacc
        self.state = [x, x_dot, theta, theta_dot]
        self.t += 1
        done = x < -2.4 or x > 2.4 or theta < -0.2095 or theta > 0.2095 or self.t >= 500
        return np.array(self.state, dtype=np.float32), 1.0, done


SavedAction = namedtuple("SavedAction", ["log_prob", "value"])


class Policy(nn.Module):
    def __init__(self):
        super().__init__()
        self.affine1 = nn.Linear(4, 128)
        self.action_head = nn.Linear(128, 2)
        self.value_head = nn.Linear(128, 1)
        self.saved_actions = []
        self.rewards = []

    def forward(self, x):
        x = F.relu(self.affine1(x))
        return F.softmax(self.action_head(x), dim=-1), self.value_head(x)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--gamma", type=float, default=0.99)
    p.add_argument("--seed", type=int, default=543)
    p.add_argument("--log-interval", type=int, default=10)
    p.add_argument("--episodes", type=int, default=100000)
    p.add_argument("--hand", type=int, default=0)
    args = p.parse_args()
    env = CartPole(args.seed)
    torch.manual_seed(args.seed)
    model = Policy()
    optimizer = optim.Adam(model.parameters(), lr=3e-2)
    eps = np.finfo(np.float32).eps.item()

    h = None
    if args.hand:
        from handtimer import Hand

        h = Hand(args.hand)

    def select_action(state):
        state = torch.from_numpy(state).float()
        h and h.mark("other")
        probs, state_value = model(state)
        h and h.mark("fwd")
        m = Categorical(probs)
        action = m.sample()
        model.saved_actions.append(SavedAction(m.log_prob(action), state_value))
        return action.item()

    def finish_episode():
        R = 0
        returns = []
        for r in model.rewards[::-1]:
            R = r + args.gamma * R
            returns.insert(0, R)
        returns = torch.tensor(returns)
        returns = (returns - returns.mean()) / (returns.std() + eps)
        policy_losses, value_losses = [], []
        for (log_prob, value), R in zip(model.saved_actions, returns):
            advantage = R - value.item()
            policy_losses.append(-log_prob * advantage)
            value_losses.append(F.smooth_l1_loss(value, torch.tensor([R])))
        optimizer.zero_grad()
        loss = torch.stack(policy_losses).sum() + torch.stack(value_losses).sum()
        h and h.mark("other")
        loss.backward()
        h and h.mark("bwd")
        optimizer.step()
        h and h.mark("opt")
        n = len(model.rewards)
        del model.rewards[:]
        del model.saved_actions[:]
        return n

    running_reward = 10
    for i_episode in count(1):
        h and h.start()
        state = env.reset()
        ep_reward = 0
        for t in range(1, 10000):
            action = select_action(state)
            state, reward, done = env.step(action)
            model.rewards.append(reward)
            ep_reward += reward
            if done:
                break
        running_reward = 0.05 * ep_reward + (1 - 0.05) * running_reward
        n = finish_episode()
        if h and h.end(n):
            h.report()
            return
        if i_episode % args.log_interval == 0:
            print(f"Episode {i_episode}\tLast reward: {ep_reward:.2f}\tAverage reward: {running_reward:.2f}", flush=True)
        if i_episode >= args.episodes:
            break


if __name__ == "__main__":
    main()
