#!/usr/bin/env python3
"""`fuse` off vs on (#30): `tune train` on mlp and cnn-small at 1 and 2 threads, the two
settings alternating in order each round; prints samples/s and the per-round ratio.

    cargo build --release && python3 scripts/fuse-bench.py target/release/tune 3
"""
import json, subprocess, sys, statistics, os
tune = sys.argv[1]; rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
cfg = {"mlp": (128, 60), "cnn-small": (64, 30)}
res = {}
for r in range(rounds):
    for model, (b, steps) in cfg.items():
        for th in (1, 2):
            order = ("off", "on") if r % 2 == 0 else ("on", "off")
            for fuse in order:
                cmd = [tune, "train", "--model", model, "--dataset", "synthetic", "--steps", str(steps),
                       "--warmup", "5", "--batch-size", str(b), "--threads", str(th), "--no-eval", "--json", "--fuse", fuse]
                out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
                j = json.loads(out.strip().splitlines()[-1])
                ph = j.get("phases") or {}
                res.setdefault((model, th, fuse), []).append((j["samples_per_s"], ph))
                print(r, model, th, fuse, round(j["samples_per_s"], 1), {k: round(v, 3) if isinstance(v, float) else v for k, v in ph.items() if k in ("forward", "backward", "optimizer")}, "load", os.getloadavg()[0], flush=True)
print("| model | threads | unfused samples/s | fused samples/s | fused/unfused per round |")
for model in cfg:
    for th in (1, 2):
        off = [s for s, _ in res[(model, th, "off")]]; on = [s for s, _ in res[(model, th, "on")]]
        ratios = [b / a for a, b in zip(off, on)]
        print(f"| {model} | {th} | {statistics.median(off):.0f} | {statistics.median(on):.0f} | " + ", ".join(f"{x:.3f}" for x in ratios) + " |")
