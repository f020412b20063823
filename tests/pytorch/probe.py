"""An ordinary small PyTorch CPU training script that also writes down, per run, what it
observed from the inside: the autocast state in its model's forward, the memory layout
of its conv weights and input batch there, the gradient its loss received (the loss
scale under GradScaler), its DataLoader's settings and the backend flags. The tests
compare those observations with the knobs tune injected (TUNE_BRIDGE_KNOBS).

It trains for --epochs over --steps batches (by default far longer than a test: tune's
measurement window ends it, which is cheaper than a job's own exit) and writes its record
as it ends, however it ends. It knows nothing of tune's hooks. With --own it sets every one of those knobs itself,
as a tuned script would, so the tests can see tune detect and report each override.
"""

import argparse
import json
import os

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

seen = {}


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.head = nn.Linear(8, 2)

    def forward(self, x):
        if not self.training:
            # An evaluation pass (--eval-every): the precision it runs in.
            seen["eval_autocast"] = torch.is_autocast_enabled("cpu")
            out = self.head(torch.relu(self.conv(x)).mean((2, 3)))
            seen["eval_out_dtype"] = str(out.dtype).replace("torch.", "")
            return out
        seen["autocast"] = torch.is_autocast_enabled("cpu")
        seen["autocast_dtype"] = str(torch.get_autocast_dtype("cpu")).replace("torch.", "")
        seen["input_nhwc"] = x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous()
        w = self.conv.weight
        seen["weight_nhwc"] = w.is_contiguous(memory_format=torch.channels_last) and not w.is_contiguous()
        h = torch.relu(self.conv(x)).mean((2, 3))
        out = self.head(h)
        seen["out_dtype"] = str(out.dtype).replace("torch.", "")
        return out


class Plain(torch.optim.Optimizer):
    """A hand-written optimizer, not one of torch.optim's: no foreach or fused to choose."""

    def __init__(self, params, lr):
        super().__init__(params, {"lr": lr})

    @torch.no_grad()
    def step(self, closure=None):
        for g in self.param_groups:
            for q in g["params"]:
                if q.grad is not None:
                    q.add_(q.grad, alpha=-g["lr"])


_opt = None


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--record", required=True)
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--epochs", type=int, default=1000)
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--own", action="store_true")
    p.add_argument("--optim", choices=["sgd", "adam", "custom"], default="sgd")
    p.add_argument("--own-impl", choices=["none", "foreach", "fused"], default="none")
    # bce: the loss is the script's own function of the model's output, outside the model
    # (F.binary_cross_entropy needs its input and target in one dtype), as pytorch/examples'
    # VAE computes it; every other step keeps it in float32 under the script's own
    # `autocast(enabled=False)`, its backward inside that region.
    p.add_argument("--loss", choices=["module", "bce"], default="module")
    p.add_argument("--eval-every", type=int, default=0)
    args = p.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    data = TensorDataset(torch.randn(16 * args.steps, 3, 16, 16), torch.randint(0, 2, (16 * args.steps,)))
    extra = {}
    if args.own:
        extra = {"prefetch_factor": 3, "persistent_workers": True}
        torch.backends.cudnn.benchmark = True
    loader = DataLoader(data, batch_size=16, num_workers=args.workers, **extra)
    net = Net()
    if args.own:
        net = net.to(memory_format=torch.channels_last)
    impl = {} if args.own_impl == "none" else {args.own_impl: True}
    if args.optim == "adam":
        # A generator of parameters, as most scripts pass: the hooks must not consume it.
        opt = torch.optim.Adam(net.parameters(), lr=1e-3, **impl)
    elif args.optim == "custom":
        opt = Plain(net.parameters(), lr=0.05)
    else:
        opt = torch.optim.SGD(net.parameters(), lr=0.05, **impl)
    global _opt
    _opt = opt
    loss_fn = nn.CrossEntropyLoss()
    losses = []
    try:
        for _ in range(args.epochs):
            for x, y in loader:
                if args.own:
                    x = x.contiguous(memory_format=torch.channels_last)
                opt.zero_grad()
                if args.loss == "bce":
                    bce_step(net, x, y, len(losses))
                    loss = torch.tensor(seen["bce"])
                elif args.own:
                    with torch.autocast("cpu", dtype=torch.bfloat16):
                        loss = loss_fn(net(x), y)
                else:
                    loss = loss_fn(net(x), y)
                if args.loss != "bce":
                    loss.register_hook(lambda g: seen.__setitem__("loss_grad", float(g)))
                    loss.backward()
                opt.step()
                # No autocast left open by the step, whoever opened it.
                seen["autocast_after"] = seen.get("autocast_after", False) or torch.is_autocast_enabled("cpu")
                losses.append(loss.item())
                if args.eval_every and len(losses) % args.eval_every == 0:
                    net.eval()
                    with torch.no_grad():
                        o = net(x)
                        nn.functional.binary_cross_entropy(torch.sigmoid(o)[:, 1], y.float())
                    net.train()
    finally:
        record(args, loader, net, losses)


def bce_step(net, x, y, i):
    out = net(x)
    if i % 2 == 0:
        seen["loss_autocast"] = torch.is_autocast_enabled("cpu")
        loss = nn.functional.binary_cross_entropy(torch.sigmoid(out)[:, 1], y.float())
        loss.backward()
    else:
        with torch.autocast("cpu", enabled=False):
            loss = nn.functional.binary_cross_entropy(torch.sigmoid(out.float())[:, 1], y.float())
            loss.backward()
    seen["autocast_after"] = seen.get("autocast_after", False) or torch.is_autocast_enabled("cpu")
    seen["bce"] = float(loss)


def record(args, loader, net, losses):
    rec = {
        "knobs": json.loads(os.environ.get("TUNE_BRIDGE_KNOBS", "{}")),
        "seen": seen,
        "loader": {
            "num_workers": loader.num_workers,
            "persistent_workers": loader.persistent_workers,
            "prefetch_factor": loader.prefetch_factor,
        },
        "cudnn_benchmark": torch.backends.cudnn.benchmark,
        # What the optimizer's update runs: the implementation its param groups hold.
        "optim": {k: _opt.param_groups[0].get(k) for k in ("foreach", "fused")} if _opt else None,
        "matmul_tf32": torch.backends.cuda.matmul.allow_tf32,
        "weights_finite": all(bool(torch.isfinite(q).all()) for q in net.parameters()),
        "first_loss": losses[0],
        "last_loss": losses[-1],
    }
    with open(args.record, "a") as f:
        f.write(json.dumps(rec) + "\n")


if __name__ == "__main__":
    main()
