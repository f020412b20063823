"""The hand check behind scripts/realistic: the scripts call it only under --hand.

It times each phase with perf_counter and torch.profiler, independently of tune's
hooks, so tune's watch findings can be compared with a measurement tune did not make.
"""

import statistics
import time

import torch


class Hand:
    def __init__(self, steps, skip=3):
        self.steps = steps
        self.skip = skip
        self.rows = []
        self.cur = {}
        self.t = None
        self.samples = 0

    def start(self):
        self.t = time.perf_counter()
        self.cur = {"data": 0.0, "fwd": 0.0, "bwd": 0.0, "opt": 0.0, "other": 0.0}
        self.samples = 0

    def mark(self, phase):
        now = time.perf_counter()
        self.cur[phase] += now - self.t
        self.t = now

    def end(self, samples):
        self.mark("other")
        self.cur["samples"] = samples
        self.rows.append(self.cur)
        return len(self.rows) >= self.steps + self.skip

    def report(self):
        rows = self.rows[self.skip:]
        tot = [sum(r[k] for k in ("data", "fwd", "bwd", "opt", "other")) for r in rows]
        med = statistics.median(tot)
        print(f"HAND steps={len(rows)} median_step_ms={med * 1e3:.1f} "
              f"samples_per_s={statistics.median(r['samples'] / t for r, t in zip(rows, tot)):.1f}")
        s = sum(tot)
        for k in ("data", "fwd", "bwd", "opt", "other"):
            print(f"HAND share {k}={100 * sum(r[k] for r in rows) / s:.1f}%")


def profile(step_fn, n=5):
    """Runs n steps under torch.profiler and prints the top operators by self CPU time."""
    from torch.profiler import ProfilerActivity, profile as prof

    with prof(activities=[ProfilerActivity.CPU]) as p:
        for _ in range(n):
            step_fn()
    print(p.key_averages().table(sort_by="self_cpu_time_total", row_limit=10))
