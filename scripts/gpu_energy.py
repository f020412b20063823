#!/usr/bin/env python3
"""tune's energy per sample beside nvidia-smi's and NVML's own counter (#28), on a GPU.

For each configuration, one `tune sweep` (one trial, 3 repeats, on GPU 0) runs while two
observers outside tune sample the same GPU every 100 ms: `nvidia-smi --query-gpu=...
-lms 100` (power.draw, utilisation, SM clock) and NVML's total-energy counter read here
through ctypes. tune's figure is the trial's mean draw over its steady windows
(report.json's joules_per_sample.mean_power_w, from the counter's rise); the observers'
is the mean over the busy part of the sweep's span (utilisation >= 50%), by nvidia-smi's
power samples and by the counter's rise over that part. Writes OUT/energy.json and the
raw series (smi.csv, nvml.csv) beside each sweep's folder; prints a table.

    python3 scripts/gpu_energy.py TUNE_BIN OUT
"""
import ctypes
import json
import os
import subprocess
import sys
import threading
import time

CONFIGS = [  # (name, model, batch, amp, steps): each repeat a few seconds of steady work
    ("cnn-small-b256-f32", "cnn-small", 256, "off", 1200),
    ("cnn-small-b256-bf16", "cnn-small", 256, "bf16", 1200),
    ("mlp-b1024-f32", "mlp", 1024, "off", 1500),
]


class Nvml:
    def __init__(self):
        self.lib = ctypes.CDLL("libnvidia-ml.so.1")
        if self.lib.nvmlInit_v2() != 0:
            raise OSError("nvmlInit_v2 failed")
        self.dev = ctypes.c_void_p()
        if self.lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(self.dev)) != 0:
            raise OSError("no GPU 0")

    def energy_mj(self):
        v = ctypes.c_ulonglong()
        return v.value if self.lib.nvmlDeviceGetTotalEnergyConsumption(self.dev, ctypes.byref(v)) == 0 else None

    def power_mw(self):
        v = ctypes.c_uint()
        return v.value if self.lib.nvmlDeviceGetPowerUsage(self.dev, ctypes.byref(v)) == 0 else None


def sample_nvml(nvml, stop, rows):
    while not stop.is_set():
        rows.append((time.time(), nvml.energy_mj(), nvml.power_mw()))
        time.sleep(0.1)


def spec(name, model, batch, amp, steps):
    return f'''name = "energy-{name}"
[workload]
model = "{model}"
dataset = "synthetic"
batch_size = {batch}
steps = {steps}
warmup = 50
device = "cuda"

[knobs]
amp = ["{amp}"]

[search]
strategy = "grid"
repeats = 3
timeout_s = 120
'''


def interp(series, t):
    for (t0, v0), (t1, v1) in zip(series, series[1:]):
        if t0 <= t <= t1:
            return v0 + (v1 - v0) * (t - t0) / (t1 - t0) if t1 > t0 else v0
    return None


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    tune, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    nvml = Nvml()
    rows = []
    for name, model, batch, amp, steps in CONFIGS:
        d = os.path.join(out, name)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "spec.toml"), "w") as f:
            f.write(spec(name, model, batch, amp, steps))
        smi_path = os.path.join(d, "smi.csv")
        smi = subprocess.Popen(
            ["nvidia-smi", "-i", "0", "--query-gpu=timestamp,power.draw,utilization.gpu,clocks.sm",
             "--format=csv,noheader,nounits", "-lms", "100"],
            stdout=open(smi_path, "w"), stderr=subprocess.DEVNULL)
        stop, nv = threading.Event(), []
        th = threading.Thread(target=sample_nvml, args=(nvml, stop, nv))
        th.start()
        smi_t0 = time.time()
        r = subprocess.run([tune, "sweep", os.path.join(d, "spec.toml"), "--out", os.path.join(d, "sweep")],
                           capture_output=True, text=True, timeout=400)
        stop.set()
        th.join()
        smi.terminate()
        smi.wait()
        with open(os.path.join(d, "sweep.log"), "w") as f:
            f.write(r.stdout + r.stderr)
        with open(os.path.join(d, "nvml.csv"), "w") as f:
            f.writelines(f"{t:.3f},{e},{p}\n" for t, e, p in nv)
        row = {"config": name, "tune_rc": r.returncode}
        try:
            rep = json.load(open(os.path.join(d, "sweep", "report.json")))
            trial = rep["trials"][0]
            jps = trial.get("joules_per_sample") or {}
            row.update(tune_mean_w=jps.get("mean_power_w"), tune_j_per_sample=jps.get("median"),
                       tune_source=jps.get("source"), stand_in=jps.get("stand_in"),
                       samples_per_s=(trial.get("samples_per_s") or {}).get("median"),
                       contaminated=[h.get("reasons") for h in trial.get("hardware", []) if h.get("reasons")])
        except (OSError, ValueError, KeyError, IndexError) as e:
            row["tune_error"] = repr(e)
        # nvidia-smi's samples carry wall-clock timestamps; their order is their time.
        busy_w = []
        for line in open(smi_path):
            f = [x.strip() for x in line.split(",")]
            try:
                w, util = float(f[1]), float(f[2])
            except (ValueError, IndexError):
                continue
            if util >= 50:
                busy_w.append(w)
        row["smi_busy_mean_w"] = sum(busy_w) / len(busy_w) if busy_w else None
        row["smi_busy_samples"] = len(busy_w)
        busy_nv = [(t, e, p) for t, e, p in nv if p is not None and e is not None]
        # The counter over the span where NVML's own power reading says busy: the rise
        # from the first to the last such sample over the time between them.
        if busy_nv:
            peak = max(p for _, _, p in busy_nv)
            hot = [(t, e) for t, e, p in busy_nv if p >= 0.5 * peak]
            if len(hot) >= 2 and hot[-1][0] > hot[0][0]:
                row["nvml_counter_mean_w"] = (hot[-1][1] - hot[0][1]) / 1e3 / (hot[-1][0] - hot[0][0])
                row["nvml_span_s"] = hot[-1][0] - hot[0][0]
        if row.get("tune_mean_w") and row.get("smi_busy_mean_w"):
            row["tune_over_smi"] = row["tune_mean_w"] / row["smi_busy_mean_w"]
        rows.append(row)
        print(json.dumps(row), flush=True)
    with open(os.path.join(out, "energy.json"), "w") as f:
        json.dump(rows, f, indent=1)
    print("| config | tune W (counter, steady windows) | nvidia-smi W (busy samples) | NVML counter W (busy span) | tune / smi | J/sample |")
    print("|---|---|---|---|---|---|")
    fmt = lambda v, p=1: "-" if v is None else f"{v:.{p}f}"  # noqa: E731
    for r in rows:
        print(f"| {r['config']} | {fmt(r.get('tune_mean_w'))} | {fmt(r.get('smi_busy_mean_w'))} "
              f"| {fmt(r.get('nvml_counter_mean_w'))} | {fmt(r.get('tune_over_smi'), 3)} | {fmt(r.get('tune_j_per_sample'), 5)} |")


if __name__ == "__main__":
    main()
