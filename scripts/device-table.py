#!/usr/bin/env python3
"""Per-device table (markdown) of a sweep's report.json: for each trial, each device's
busy fraction, time in communication, DDP all-reduce overlap and peak memory (median over
the repeats), with the trial's throughput and imbalance (max/mean).

usage: scripts/device-table.py reports/dp-vs-ddp/report.json
"""
import json
import statistics
import sys


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def main(path):
    r = json.load(open(path))
    print("| trial | samples/s [95% CI] | device | busy | comm | all-reduce overlap | peak MiB | imbalance busy / memory |")
    print("|---|---|---|---|---|---|---|---|")
    for t in r["trials"]:
        reps = [x for x in t["repeats"] if x.get("devices")]
        if t["status"] != "ok" or not reps:
            print(f"| {t['label']} | {t['status']} | | | | | | |")
            continue
        ci = t["samples_per_s"]
        thr = f"{ci['median']:.1f} [{ci['lo']:.1f}, {ci['hi']:.1f}]" if ci else "-"
        ib = med([x["imbalance"]["busy"] for x in reps if x.get("imbalance")])
        im = med([x["imbalance"]["memory"] for x in reps if x.get("imbalance")])
        n = len(reps[0]["devices"])
        for i in range(n):
            ds = [x["devices"][i] for x in reps]
            busy = med([d["busy_fraction"] for d in ds]) * 100
            comm = med([d["comm_fraction"] for d in ds]) * 100
            ov = med([d.get("comm_overlap") for d in ds])
            peak = med([d["peak_bytes"] for d in ds]) / 2**20
            first = i == 0
            print(
                f"| {t['label'] if first else ''} | {thr if first else ''} | {i} | {busy:.1f}% | {comm:.1f}% | "
                f"{'-' if ov is None else f'{ov * 100:.0f}%'} | {peak:.2f} | "
                f"{f'{ib:.3f} / {im:.3f}' if first else ''} |"
            )


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
