#!/usr/bin/env python3
"""Inputs for the "Scale of the faces" benchmark in docs/performance.md (issue #27).

    python3 scripts/scale-faces.py report N DIR    # a sweep folder of N trials
    python3 scripts/scale-faces.py spec N OUT.toml # a sweep whose trials print N values

`report` runs a real two-trial `[params]` sweep of a command (target/release/tune) and
makes N trials of its first: distinct parameters, labels and ids, 8 step times drawn
around 1000 samples/s, peak memory between 20 and 25 MiB, 2 device samples each. It
writes them as DIR/report.json (compact) and as a sweep journal, DIR/sweep/journal.jsonl.
Time the faces with:

    time target/release/tune report DIR/report.json --html DIR/r.html --md DIR/r.md
    time target/release/tune gate --baseline DIR/report.json --current DIR/report.json
    time target/release/tune compare DIR/report.json DIR/report.json
    time target/release/tune report DIR/sweep          # judged again from the journal

`spec` writes a `[workload.command]` sweep (two configurations, one repeat) whose
command prints N lines `samples/s: V` with V drawn around 1000; time it with

    time target/release/tune sweep OUT.toml --out /tmp/scale-sweep
"""
import json
import pathlib
import random
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
TUNE = ROOT / "target/release/tune"
SEED_SPEC = """name = "scale-faces"
[workload.command]
run = "echo samples/s: 1000 lr={lr} seed={seed}"
metric_regex = 'samples/s: ([0-9.]+)'
[params]
seed = ["0", "1"]
lr = ["0.001"]
[search]
repeats = 1
"""


def report(n, out):
    out = pathlib.Path(out)
    with tempfile.TemporaryDirectory() as tmp:
        spec = pathlib.Path(tmp) / "seed.toml"
        spec.write_text(SEED_SPEC)
        subprocess.run([str(TUNE), "sweep", str(spec), "--out", tmp + "/out", "--json"],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        header, record = [json.loads(l) for l in open(tmp + "/out/journal.jsonl")][:2]
        rep = json.loads(open(tmp + "/out/report.json").read())
    rng = random.Random(27)
    seeds = [str(i) for i in range(n)]
    header["spec"]["params"] = [["seed", seeds], ["lr", ["0.001"]]]
    rep["spec"]["params"] = header["spec"]["params"]
    proto = rep["trials"][0]
    records, trials, spans, timeline = [], [], [], []
    for i in range(n):
        rate = 900.0 + 200.0 * rng.random()
        steps = [1.0 / (rate * (1.0 + 0.05 * rng.gauss(0.0, 1.0))) for _ in range(8)]
        peak = 20_000_000 + rng.randrange(5_000_000)
        label = "baseline" if i == 0 else "seed=%d" % i
        tid = "baseline#9da326c5" if i == 0 else "seed=%d#%08x" % (i, rng.getrandbits(32))
        samples = [
            {"device": "host", "metric": m, "t_s": k * 0.2, "value": 30 + 40 * rng.random()}
            for k, m in enumerate(["cpu_util_pct", "cpu_pct"])
        ]
        r = json.loads(json.dumps(record))
        r["repeats"][0].update(step_times=steps, samples_per_s=rate, peak_total_bytes=peak)
        r["knobs"]["params"] = {"lr": "0.001", "seed": seeds[i]}
        r.update(label=label, id=tid, timeline=samples)
        records.append(r)
        # The report's trial: what `tune sweep` would write, its intervals approximated
        # (the faces draw them; gate and compare bootstrap the step times again).
        t = json.loads(json.dumps(proto))
        t["repeats"] = r["repeats"]
        t.update(id=tid, label=label, knobs=r["knobs"], peak_total_bytes=peak)
        t["samples_per_s"] = {"median": rate, "lo": rate * 0.97, "hi": rate * 1.03}
        ratio = rate / 1000.0
        t["ratio_vs_baseline"] = None if i == 0 else {
            "ratio": ratio, "lo": ratio * 0.97, "hi": ratio * 1.03,
            "significant": abs(ratio - 1.0) > 0.03}
        trials.append(t)
        spans.append({"id": tid, "label": label, "start_s": float(i), "end_s": i + 1.0})
        timeline += [dict(s, t_s=i + s["t_s"]) for s in samples]
    rep.update(trials=trials, trial_spans=spans, timeline=timeline, baseline=trials[0]["id"])
    rep["best"] = max(trials, key=lambda t: t["samples_per_s"]["median"])["id"]
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps(rep, separators=(",", ":")))
    (out / "sweep").mkdir(exist_ok=True)
    with open(out / "sweep/journal.jsonl", "w") as f:
        for r in [header] + records:
            f.write(json.dumps(r, separators=(",", ":")) + "\n")


def spec(n, out):
    here = pathlib.Path(__file__).resolve()
    text = (
        'name = "scale-metric"\n'
        "[workload.command]\n"
        'run = "python3 %s print %d {f}"\n'
        "metric_regex = 'samples/s: ([0-9.]+)'\n"
        "[params]\nf = [0, 1]\n"
        "[search]\nrepeats = 1\ntimeout_s = 1200\n" % (here, n)
    )
    pathlib.Path(out).write_text(text)


def emit(n, f):
    """The sweep's command: N lines of throughput around 1000 (x 1.1 for f = 1)."""
    rng = random.Random(27)
    scale = 1000.0 * (1.0 + 0.1 * f)
    w = sys.stdout.write
    for _ in range(n):
        w("samples/s: %.3f\n" % (scale * (1.0 + 0.05 * (rng.random() - 0.5))))


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "print":
        emit(int(sys.argv[2]), float(sys.argv[3]))
    elif len(sys.argv) == 4 and sys.argv[1] in ("report", "spec"):
        {"report": report, "spec": spec}[sys.argv[1]](int(sys.argv[2]), sys.argv[3])
    else:
        sys.exit(__doc__)
