"""A trainer that resumes: it loads ckpt/last.pt (relative to its folder) when present,
saves it every 2 steps (a str path) and a pathlib copy in ckpt/copies/, and after its
fourth step loads its own save back and checks it is the one it just wrote, as a
script that reloads its best model would. It knows nothing of tune.

--start-file F: the step it resumed from is appended to F (a file of the test's, apart
from the script's folder), so the test can see that every trial started from the
user's checkpoint as it was.
"""

import argparse
import os
import pathlib

import torch
import torch.nn as nn


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=10000)
    p.add_argument("--start-file", default=None)
    a = p.parse_args()
    model = nn.Linear(16, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    step = 0
    if os.path.exists("ckpt/last.pt"):
        st = torch.load("ckpt/last.pt")
        model.load_state_dict(st["model"])
        step = st["step"]
    if a.start_file:
        with open(a.start_file, "a") as f:
            f.write("%d\n" % step)
    os.makedirs("ckpt/copies", exist_ok=True)
    x, y = torch.randn(64, 16), torch.randn(64, 4)
    for i in range(a.steps):
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        step += 1
        if step % 2 == 0:
            torch.save({"model": model.state_dict(), "step": step}, "ckpt/last.pt")
            torch.save({"step": step}, pathlib.Path("ckpt/copies") / "last.pt")
        if i == 3:
            back = torch.load("ckpt/last.pt")["step"]
            if back != step - step % 2:
                raise SystemExit("loaded step %d back, saved %d" % (back, step - step % 2))


if __name__ == "__main__":
    main()
