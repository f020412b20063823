#!/usr/bin/env python3
"""Successive halving vs the full grid on experiments/halving-vs-grid.toml.

Runs the spec twice (grid, then halving) and prints: the grid's best configuration, the
configuration halving picked and where it ranks in the grid's own measurements, and the
trial time each strategy spent (the sum of every trial process's wall time).

    cargo build --release && python3 scripts/halving-vs-grid.py
"""
import json
import os
import pathlib
import subprocess
import sys
import tempfile

SPEC = pathlib.Path("experiments/halving-vs-grid.toml")


def sweep(strategy, out):
    text = SPEC.read_text().replace('strategy = "grid"', f'strategy = "{strategy}"')
    spec = pathlib.Path(out) / f"{strategy}.toml"
    spec.write_text(text)
    res = pathlib.Path(out) / strategy
    subprocess.run(["target/release/tune", "sweep", str(spec), "--out", str(res), "--json"],
                   check=True, stdout=subprocess.DEVNULL)
    return json.loads((res / "report.json").read_text())


def trial_time(report):
    return sum(r["wall_s"] for t in report["trials"] for r in t["repeats"])


def key(knobs):
    return json.dumps(knobs, sort_keys=True)


def main():
    with tempfile.TemporaryDirectory() as d:
        grid = sweep("grid", d)
        halving = sweep("halving", d)
    ok = [t for t in grid["trials"] if t["status"] == "ok" and t.get("samples_per_s")]
    by_knobs = {key(t["knobs"]): t["samples_per_s"]["median"] for t in ok}
    best = max(ok, key=lambda t: t["samples_per_s"]["median"])
    best_sps = best["samples_per_s"]["median"]
    last_round = max(t["round"] for t in halving["trials"])
    final = [t for t in halving["trials"] if t["round"] == last_round and t["status"] == "ok"]
    pick = max(final, key=lambda t: t["samples_per_s"]["median"])
    pick_in_grid = by_knobs[key(pick["knobs"])]
    ranking = sorted(by_knobs.values(), reverse=True)
    t_grid, t_halving = trial_time(grid), trial_time(halving)
    out = {
        "configs": len(ok),
        "grid_best": best["label"],
        "grid_best_sps": round(best_sps, 1),
        "halving_pick": pick["label"],
        "halving_pick_sps_in_grid": round(pick_in_grid, 1),
        "halving_pick_rank_in_grid": ranking.index(pick_in_grid) + 1,
        "pick_vs_best": round(pick_in_grid / best_sps, 4),
        "grid_trial_s": round(t_grid, 1),
        "halving_trial_s": round(t_halving, 1),
        "halving_time_share": round(t_halving / t_grid, 4),
        "halving_rounds": last_round + 1,
        "halving_trials": len(halving["trials"]),
    }
    print(json.dumps(out, indent=1))
    good = out["pick_vs_best"] >= 0.97 and out["halving_time_share"] <= 0.40
    print("target (within 3% of the grid's best at <= 40% of its trial time):",
          "met" if good else "MISSED")
    return 0


if __name__ == "__main__":
    sys.exit(main())
