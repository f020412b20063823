#!/usr/bin/env python3
"""What one step line costs the PyTorch hooks to send (docs/performance.md, "Scale of the
faces"): 2,000 step events through the module's emit into a pipe that a thread drains,
best of 20 blocks, in microseconds per line.

    git show 8286591:src/bridge/tune_hook.py > /tmp/old/tune_hook.py
    python scripts/hook-emit-bench.py /tmp/old      # the hooks before #27
    python scripts/hook-emit-bench.py src/bridge    # these hooks
"""
import os
import sys
import threading
import time

bridge = sys.argv[1]
r, w = os.pipe()
os.environ.update(
    TUNE_BRIDGE_FD=str(w), TUNE_BRIDGE_INO=str(os.fstat(w).st_ino), TUNE_BRIDGE_KNOBS="{}"
)


def drain():
    while os.read(r, 1 << 16):
        pass


threading.Thread(target=drain, daemon=True).start()
sys.path.insert(0, bridge)
import tune_hook  # noqa: E402

tune_hook.activate()
ev = {"ev": "step", "step": 1, "t": 123.456, "dur": 0.0123, "batch": 32, "data_wait": 0.001,
      "h2d": 0.0, "backward": 0.004, "optimizer": 0.001, "zero_grad": 0.0002, "forward": 0.006}
best = float("inf")
for _ in range(20):
    t = time.perf_counter()
    for _ in range(2000):
        tune_hook._emit(ev)
    best = min(best, (time.perf_counter() - t) / 2000)
print("%s: %.2f us per line" % (bridge, best * 1e6))
