#!/usr/bin/env python3
"""The GPU session's report (scripts/gpu-session.sh): reports/gpu/<date>-<gpu>.md from
the session's output folder. The device name and driver come from NVML itself (libnvidia-
ml.so.1 through ctypes, no Python package needed), never from what a test printed.

    python3 scripts/gpu_report.py --device-json             # NVML facts as one JSON line
    python3 scripts/gpu_report.py --out-dir OUT --write OUT/report.md

The step-time ratio is tune's median step time over PyTorch eager's for the same model,
batch and precision (tune `amp = off | bf16 | tf32` against fp32, bf16 autocast and
allow_tf32): below 1 tune is faster. The issue's target is at most 0.9. A run whose
backend is not plain "cuda" (the CPU stand-in) is refused: its times are not a GPU's.
"""
import argparse
import ctypes
import datetime
import glob
import json
import os
import re
import sys


def nvml_facts():
    """Name, driver, CUDA driver version and memory of GPU 0 from NVML, or an error."""
    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError as e:
        return {"error": f"NVML not loadable: {e}"}
    if nvml.nvmlInit_v2() != 0:
        return {"error": "nvmlInit_v2 failed"}
    try:
        buf = ctypes.create_string_buffer(96)
        out = {}
        if nvml.nvmlSystemGetDriverVersion(buf, 96) == 0:
            out["driver"] = buf.value.decode()
        cuda = ctypes.c_int()
        if nvml.nvmlSystemGetCudaDriverVersion_v2(ctypes.byref(cuda)) == 0:
            out["cuda_driver"] = f"{cuda.value // 1000}.{cuda.value % 1000 // 10}"
        dev = ctypes.c_void_p()
        if nvml.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(dev)) == 0:
            if nvml.nvmlDeviceGetName(dev, buf, 96) == 0:
                out["name"] = buf.value.decode()

            class Memory(ctypes.Structure):
                _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong),
                            ("used", ctypes.c_ulonglong)]

            mem = Memory()
            if nvml.nvmlDeviceGetMemoryInfo(dev, ctypes.byref(mem)) == 0:
                out["memory_bytes"] = mem.total
        return out
    finally:
        nvml.nvmlShutdown()


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def rc_lines(out_dir):
    try:
        with open(os.path.join(out_dir, "summary.txt")) as f:
            return [line.strip() for line in f if line.strip()]
    except OSError:
        return []


def tune_runs(out_dir):
    runs = {}
    for path in sorted(glob.glob(os.path.join(out_dir, "tune-*.json"))):
        s = load(path)
        m = re.match(r"tune-(.+)-(off|bf16|fp16|tf32|autotune)\.json$", os.path.basename(path))
        if s and m:
            if s.get("backend") != "cuda":
                sys.exit(f"{path}: backend {s.get('backend')!r} is not a GPU's; no report")
            runs[(m.group(1), m.group(2))] = s
    return runs


def torch_runs(out_dir):
    runs = {}
    try:
        with open(os.path.join(out_dir, "torch.jsonl")) as f:
            for line in f:
                r = json.loads(line)
                runs[(r["model"], r["amp"])] = r
    except (OSError, ValueError):
        pass
    return runs


def device_facts(out_dir):
    """The GPU's facts as the session read them there (probe.txt's first line, from
    --device-json on the GPU machine); NVML here only when the session left none."""
    try:
        with open(os.path.join(out_dir, "probe.txt")) as f:
            first = json.loads(f.readline())
            if isinstance(first, dict) and "error" not in first:
                return first
    except (OSError, ValueError):
        pass
    return nvml_facts()


def report(out_dir):
    dev = device_facts(out_dir)
    tune, torch = tune_runs(out_dir), torch_runs(out_dir)
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        f"# GPU session, {when}",
        "",
        f"- GPU: {dev.get('name', '?')} ({dev.get('memory_bytes', 0) / 2**30:.0f} GiB), "
        f"driver {dev.get('driver', '?')}, CUDA driver {dev.get('cuda_driver', '?')} (NVML)"
        + (f"; NVML: {dev['error']}" if "error" in dev else ""),
        "",
        "## Steps (exit status)",
        "",
    ]
    lines += [f"- {line}" for line in rc_lines(out_dir)]
    synth = {}
    for path in sorted(glob.glob(os.path.join(out_dir, "synth-*.json"))):
        m = re.match(r"synth-(.+)-(off|bf16|fp16|tf32)\.json$", os.path.basename(path))
        s = load(path)
        if s and m:
            if s.get("backend") != "cuda":
                sys.exit(f"{path}: backend {s.get('backend')!r} is not a GPU's; no report")
            synth[(m.group(1), m.group(2))] = s
    lines += ["", "## tune vs PyTorch eager, same footing (median step time, batch 128)", "",
              "Both on a fixed batch already on the GPU: tune `--dataset synthetic`, the bench's "
              "random tensors; measured in the same phase of one session.", "",
              "| model | precision | tune ms | PyTorch ms | tune / PyTorch (target <= 0.9) |",
              "|---|---|---|---|---|"]
    if not synth:
        lines.append("| - | - | not measured in this session | | |")
    for (model, amp), s in sorted(synth.items()):
        t = torch.get((model, amp))
        ratio = f"{s['step_ms_median'] / t['step_ms_median']:.2f}" if t else "no PyTorch run"
        torch_ms = f"{t['step_ms_median']:.2f}" if t else "-"
        lines.append(f"| {model} | {amp} | {s['step_ms_median']:.2f} | {torch_ms} | {ratio} |")
    lines += ["", "## tune with its data loader (shapes:6000, 300 steps) beside PyTorch eager on a fixed batch", "",
              "Not the same footing: tune's step here includes its loader's host-to-device copies.", "",
              "| model | precision | tune ms | PyTorch ms (fixed batch) | ratio | tune accuracy |",
              "|---|---|---|---|---|---|"]
    for (model, amp), s in sorted(tune.items()):
        if amp == "autotune":
            continue
        t = torch.get((model, amp))
        ratio = f"{s['step_ms_median'] / t['step_ms_median']:.2f}" if t else "no PyTorch run"
        torch_ms = f"{t['step_ms_median']:.2f}" if t else "-"
        acc = s.get("accuracy")
        acc = "" if acc is None else f"{acc:.4f}"
        lines.append(f"| {model} | {amp} | {s['step_ms_median']:.2f} | {torch_ms} | {ratio} | {acc} |")
    lines += ["", "## AMP against f32 (same steps and seed)", ""]
    for model in sorted({m for m, _ in tune}):
        base = tune.get((model, "off"))
        for amp in ("bf16", "fp16", "tf32"):
            s = tune.get((model, amp))
            if base and s:
                lines.append(
                    f"- {model} {amp}: final loss {s['final_loss']:.4f} (f32 {base['final_loss']:.4f}), "
                    f"accuracy {s.get('accuracy')} (f32 {base.get('accuracy')}), skipped steps "
                    f"{len(s.get('skipped_steps', []))}, activations peak "
                    f"{s['peak_bytes'].get('activations', 0)} B (f32 {base['peak_bytes'].get('activations', 0)} B)")
    lines += ["", "## conv2d: cuDNN against im2col + cuBLASLt (synthetic data, batch 128)", "",
              "| model | precision | cuDNN ms | im2col ms | cuDNN / im2col | path recorded |",
              "|---|---|---|---|---|---|"]
    for path in sorted(glob.glob(os.path.join(out_dir, "conv-*-cudnn.json"))):
        m = re.match(r"conv-(.+)-(off|bf16)-cudnn\.json$", os.path.basename(path))
        other = load(path.replace("-cudnn.json", "-im2col.json"))
        s = load(path)
        if not (m and s and other):
            continue
        if s.get("backend") != "cuda":
            sys.exit(f"{path}: backend {s.get('backend')!r} is not a GPU's; no report")
        ran = next((c["algo"] for c in s.get("algorithms", []) if c.get("key") == "path"), "?")
        lines.append(
            f"| {m.group(1)} | {m.group(2)} | {s['step_ms_median']:.2f} | {other['step_ms_median']:.2f} "
            f"| {s['step_ms_median'] / other['step_ms_median']:.2f} | {ran} |")
    lines += ["", "## Energy: tune's NVML figures beside nvidia-smi's (scripts/gpu_energy.py)", ""]
    energy = load(os.path.join(out_dir, "energy", "energy.json")) or []
    if not energy:
        lines.append("- not measured in this session")
    else:
        lines += ["| config | tune W (NVML counter, steady windows) | nvidia-smi W (busy samples) "
                  "| NVML counter W (busy span, outside tune) | tune / nvidia-smi | J/sample (tune) |",
                  "|---|---|---|---|---|---|"]
        fmt = lambda v, p=1: "-" if v is None else f"{v:.{p}f}"  # noqa: E731
        for r in energy:
            lines.append(f"| {r['config']} | {fmt(r.get('tune_mean_w'))} | {fmt(r.get('smi_busy_mean_w'))} "
                         f"| {fmt(r.get('nvml_counter_mean_w'))} | {fmt(r.get('tune_over_smi'), 3)} "
                         f"| {fmt(r.get('tune_j_per_sample'), 5)} |")
    lines += ["", "## Fidelity: each knob's effect on tune against PyTorch's (scripts/fidelity.py --device cuda)", ""]
    try:
        with open(os.path.join(out_dir, "fidelity.txt")) as f:
            table = [line.rstrip() for line in f if line.startswith("|")]
    except OSError:
        table = []
    lines += table or ["- not measured in this session"]
    lines += ["", "## Autotune's choices", ""]
    for (model, amp), s in sorted(tune.items()):
        if amp != "autotune":
            continue
        for c in s.get("algorithms", []):
            lines.append(f"- {model} {c['op']} [{c['key']}]: {c['algo']} ({c['source']})")
    return "\n".join(lines) + "\n", dev


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device-json", action="store_true")
    ap.add_argument("--out-dir")
    ap.add_argument("--write")
    a = ap.parse_args()
    if a.device_json:
        print(json.dumps(nvml_facts()))
        return
    if not a.out_dir:
        ap.error("--out-dir is required")
    text, dev = report(a.out_dir)
    name = re.sub(r"[^A-Za-z0-9]+", "-", dev.get("name", "gpu")).strip("-").lower()
    target = a.write or os.path.join(
        "reports", "gpu", f"{datetime.date.today().isoformat()}-{name}.md")
    os.makedirs(os.path.dirname(target) or ".", exist_ok=True)
    with open(target, "w") as f:
        f.write(text)
    print(target)


if __name__ == "__main__":
    main()
