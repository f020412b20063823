#!/usr/bin/env python3
"""Fidelity benchmark (#30): does a knob change the engine's speed the way it changes
PyTorch's, on the same model, batch, threads and host?

For each (workload, knob) it measures, in alternating rounds, the engine
(`tune train --dataset synthetic --json`, a fixed in-memory batch: no loader) and PyTorch
(the same model in this process' child, a fixed batch, SGD momentum 0.9) with the knob
off and on, and prints the effect ratio (samples/s with the knob / without) of each side,
their quotient, and whether they agree: same direction (a ratio inside +-3% counts as no
effect on either side) and sizes within 20% of each other.

Usage: scripts/fidelity.py TUNE_BIN PYTHON_WITH_TORCH [--rounds 3] [--steps 40]
       [--workloads mlp,cnn] [--knobs amp_bf16,amp_fp16,zero_grad,checkpoint,batch_x2,threads,channels_last]
       [--json OUT.jsonl]
Run on a quiet machine: the ratios are paired per round, but a busy machine still moves them.
"""
import argparse
import json
import statistics
import subprocess
import sys

TORCH_SIDE = r'''
import json, statistics, sys, time, contextlib
import torch, torch.nn as nn, torch.nn.functional as F
from torch.utils.checkpoint import checkpoint_sequential
def measure(cfg):
    torch.set_num_threads(cfg["threads"]); torch.manual_seed(0)
    dev = cfg.get("device", "cpu")
    if dev == "cuda":
        torch.backends.cudnn.benchmark = bool(cfg.get("autotune"))
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = bool(cfg.get("tf32"))
    w, batch, steps, warm = cfg["workload"], cfg["batch"], cfg["steps"], cfg["warmup"]
    if w == "mlp":
        layers = [nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10)]
        shape = (batch, 784)
    else:
        def block(cin, cout, s):
            return [nn.Conv2d(cin, cout, 3, stride=s, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU()]
        layers = [*block(3, 32, 1), *block(32, 64, 2), *block(64, 128, 2), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(128, 10)]
        shape = (batch, 3, 32, 32)
    model = nn.Sequential(*layers)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(shape, generator=g); y = torch.randint(0, 10, (batch,), generator=g)
    model, x, y = model.to(dev), x.to(dev), y.to(dev)
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    if cfg.get("channels_last"):
        model = model.to(memory_format=torch.channels_last); x = x.contiguous(memory_format=torch.channels_last)
    if cfg.get("compile"):
        model = torch.compile(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, **({"fused": True} if cfg.get("fused_opt") else {}))
    half = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(cfg.get("amp"))
    ctx = (lambda: torch.autocast(dev, dtype=half)) if half is not None else contextlib.nullcontext
    segments = cfg.get("checkpoint_segments", 0)
    def step():
        opt.zero_grad(set_to_none=cfg.get("set_to_none", False))
        with ctx():
            out = checkpoint_sequential(model, segments, x, use_reentrant=False) if segments else model(x)
            loss = F.cross_entropy(out.float(), y)
        loss.backward(); opt.step()
    for _ in range(warm):
        step()
    sync()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter(); step(); sync(); times.append(time.perf_counter() - t0)
    return {"samples_per_s": batch / statistics.median(times), "torch": torch.__version__}
# One configuration (a JSON object) or several in order (a JSON list): on a GPU one
# process measures a whole round, since starting PyTorch and CUDA costs seconds.
arg = json.loads(sys.argv[1])
for cfg in (arg if isinstance(arg, list) else [arg]):
    print(json.dumps(measure(cfg)), flush=True)
'''
BATCH = {"mlp": 128, "cnn": 64}
# On a GPU these batches leave it idle between launches: a larger batch per step, the
# same on both sides.
BATCH_GPU = {"mlp": 512, "cnn": 256}
MODEL = {"mlp": "mlp", "cnn": "cnn-small"}


def knob_pairs(workload, knob, threads, device="cpu"):
    """(engine flags off, engine flags on, torch cfg off, torch cfg on) for one knob.
    The engine's default zero_grad is memset, PyTorch's set_to_none=False is the same."""
    b = (BATCH_GPU if device == "cuda" else BATCH)[workload]
    base_e = ["--batch-size", str(b), "--threads", str(threads), "--device", device]
    base_t = {"workload": workload, "batch": b, "threads": threads, "device": device}
    if knob in ("amp_bf16", "amp_fp16"):
        # Speed only: neither side scales the loss (the engine's fp16 scaler costs one
        # finiteness pass, PyTorch's GradScaler about the same).
        dt = knob[4:]
        flags = ["--amp", dt, "--loss-scaling", "off"]
        return base_e, base_e + flags, base_t, {**base_t, "amp": dt}
    if knob == "zero_grad":
        return base_e, base_e + ["--zero-grad", "none"], base_t, {**base_t, "set_to_none": True}
    if knob == "checkpoint":
        # The engine's sqrt: segments of about sqrt(layers); torch's checkpoint_sequential
        # over the same number of segments.
        n = 5 if workload == "mlp" else 12
        seg = max(2, round(n ** 0.5))
        return base_e, base_e + ["--checkpoint", "sqrt"], base_t, {**base_t, "checkpoint_segments": seg}
    if knob == "autotune":
        # cuDNN-style autotuning: the engine's choice of algorithms per shape against
        # torch.backends.cudnn.benchmark.
        return base_e, base_e + ["--autotune"], base_t, {**base_t, "autotune": True}
    if knob == "tf32":
        return base_e, base_e + ["--amp", "tf32"], base_t, {**base_t, "tf32": True}
    if knob == "batch_x2":
        e2 = ["--batch-size", str(2 * b), "--threads", str(threads), "--device", device]
        return base_e, e2, base_t, {**base_t, "batch": 2 * b}
    if knob == "threads":
        e1 = ["--batch-size", str(b), "--threads", "1"]
        e2 = ["--batch-size", str(b), "--threads", "2"]
        return e1, e2, {**base_t, "threads": 1}, {**base_t, "threads": 2}
    if knob == "channels_last":
        if workload != "cnn":
            return None
        return base_e, base_e + ["--channels-last"], base_t, {**base_t, "channels_last": True}
    if knob == "fuse":
        # The engine's fused pointwise chains and one-sweep optimizer; PyTorch's
        # torch.compile (inductor fuses the pointwise ops) and SGD(fused=True). The
        # compile time stays in the warm-up steps, outside the measured ones.
        return base_e, base_e + ["--fuse", "on"], base_t, {**base_t, "compile": True, "fused_opt": True}
    raise SystemExit(f"unknown knob {knob}")


def engine(tune, workload, flags, steps):
    cmd = [tune, "train", "--model", MODEL[workload], "--dataset", "synthetic", "--steps",
           str(steps), "--warmup", "5", "--no-eval", "--json", *flags]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])["samples_per_s"]


def torch_side(py, cfgs, steps):
    """Samples/s of each configuration in `cfgs`, in order, from one PyTorch process."""
    cfgs = [{**c, "steps": steps, "warmup": 5} for c in cfgs]
    out = subprocess.run([py, "-c", TORCH_SIDE, json.dumps(cfgs)], capture_output=True, text=True, check=True).stdout
    got = [json.loads(line)["samples_per_s"] for line in out.strip().splitlines()[-len(cfgs):]]
    if len(got) != len(cfgs):
        raise SystemExit(f"PyTorch side: {len(got)} results for {len(cfgs)} configurations")
    return got


def agree(e, t):
    flat = lambda r: abs(r - 1) <= 0.03  # noqa: E731
    if flat(e) and flat(t):
        return "yes (no effect on either)"
    if (e > 1) != (t > 1) and not (flat(e) or flat(t)):
        return "NO: opposite direction"
    if flat(e) != flat(t):
        return "NO: one side has no effect"
    q = e / t
    return "yes" if 0.8 <= q <= 1.25 else f"NO: size differs ({q:.2f}x)"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tune")
    ap.add_argument("python")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--workloads", default="mlp,cnn")
    ap.add_argument("--knobs", default="amp_bf16,zero_grad,checkpoint,batch_x2,threads,channels_last")
    ap.add_argument("--json", default=None)
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                    help="cuda: both sides on GPU 0 (knobs autotune and tf32 apply there)")
    a = ap.parse_args()
    rows = []
    sink = open(a.json, "w") if a.json else None
    items = []
    for w in a.workloads.split(","):
        for k in a.knobs.split(","):
            pair = knob_pairs(w, k, a.threads, a.device)
            if pair is not None:
                items.append((w, k, pair))
    ratios = {(w, k): ([], []) for w, k, _ in items}
    for r in range(a.rounds):
        # On a GPU one PyTorch process measures the whole round (its start costs seconds
        # there); on the CPU each configuration has a process of its own, as measured
        # before, so no allocator or thread pool carries over between them.
        if a.device == "cuda":
            flat = torch_side(a.python, [c for _, _, p in items for c in p[2:]], a.steps)
            torch_rates = [(flat[2 * i], flat[2 * i + 1]) for i in range(len(items))]
        else:
            torch_rates = [None] * len(items)
        for (w, k, (eo, en, to, tn)), tr_pair in zip(items, torch_rates):
            e0, e1 = engine(a.tune, w, eo, a.steps), engine(a.tune, w, en, a.steps)
            t0, t1 = tr_pair or (torch_side(a.python, [to], a.steps)[0], torch_side(a.python, [tn], a.steps)[0])
            er, tr = ratios[(w, k)]
            er.append(e1 / e0)
            tr.append(t1 / t0)
            rec = {"workload": w, "knob": k, "round": r + 1, "engine_off": e0, "engine_on": e1,
                   "torch_off": t0, "torch_on": t1, "device": a.device}
            if sink:
                sink.write(json.dumps(rec) + "\n")
                sink.flush()
            print(f"  {w} {k} round {r + 1}: engine {e0:.0f} -> {e1:.0f}, torch {t0:.0f} -> {t1:.0f}", file=sys.stderr)
    for w, k, _ in items:
        er, tr = ratios[(w, k)]
        e, t = statistics.median(er), statistics.median(tr)
        rows.append((w, k, e, t, min(er), max(er), min(tr), max(tr)))
    print(f"| workload | knob | engine effect (median, range) | PyTorch effect (median, range) | engine / PyTorch | agree? |")
    print("|---|---|---|---|---|---|")
    for w, k, e, t, el, eh, tl, th in rows:
        print(f"| {w} | {k} | {e:.2f}x ({el:.2f}-{eh:.2f}) | {t:.2f}x ({tl:.2f}-{th:.2f}) | {e / t:.2f} | {agree(e, t)} |")


if __name__ == "__main__":
    main()
