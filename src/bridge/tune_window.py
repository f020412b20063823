"""The measurement window of a `[workload.python]` trial (issue #26), loaded by tune_hook:
warm-up steps (or until the step times are steady), then `steps` measured steps (and
at least `min_seconds` of them) or `seconds` of measuring; then the job is stopped at a step boundary by raising
SystemExit(0) out of optimizer.step(). tune ends a job that ignores it after a grace
period, and its process tree either way. Apart from tune_hook so that each file stays
under the project's 800 lines.
"""

import atexit
import gc
import io
import json
import os
import sys

_win = None
_h = None  # tune_hook, for its event and note helpers
# "skipped": warm-up steps that compiled (they do not count towards the warm-up).
_wst = {"warm": 0, "skipped": 0, "start": None, "measured": 0, "full": False, "durs": []}


def steady(durs):
    """The last 8 step times hold no slow outlier: none above their median by more than
    max(3 sigma from the MAD, 10%), the rule of tune's steady-state analysis (stats.rs)
    with a wider floor for a job's own jitter."""
    if len(durs) < 8:
        return False
    last = sorted(durs[-8:])
    m = (last[3] + last[4]) / 2.0
    dev = sorted(abs(x - m) for x in last)
    mad = (dev[3] + dev[4]) / 2.0
    return last[-1] <= m + max(3.0 * 1.4826 * mad, 0.1 * m)


def ended():
    """After the window filled, a job that caught tune's SystemExit trains on unmeasured:
    no more steps are reported, and each step asks it again to stop."""
    if _win is None or not _wst["full"] or os.getpid() != _h._pid:
        return False
    raise SystemExit(0)


def step(dur, t, compiled=False):
    w, ws = _win, _wst
    if w is None or os.getpid() != _h._pid:
        return
    if ws["start"] is None:
        warm = w.get("warmup")
        if warm is not None and int(warm) <= 0:
            # No warm-up: this step is the window's first.
            ws["start"] = t - dur
            _h._emit(_h._ranked({"ev": "window", "warmup": 0}))
        elif compiled:
            # The first steps of a compiled model are its compile: a step that compiled
            # is warm-up that does not count, so the window starts after the compile.
            ws["skipped"] += 1
            return
        else:
            ws["warm"] += 1
            ws["durs"].append(dur)
            if warm is None:
                is_steady = steady(ws["durs"])
                done = is_steady or ws["warm"] >= int(w.get("steady_max", 200))
                if done and not is_steady:
                    ws["why"] = "not steady, measured anyway"
                    _h._notice(
                        "step times were not steady after %d warm-up steps; measuring anyway"
                        % ws["warm"]
                    )
            else:
                done = ws["warm"] >= int(warm)
            cap = w.get("warmup_max_s")
            if not done and cap is not None and ws["warm"] >= 2 and sum(ws["durs"]) >= float(cap):
                # tune's time budget: a busy machine's 5 warm-up steps of an LSTM took as
                # long as its measuring (41% of the sweep); the analysis still sets aside
                # slow steps left in the window.
                done = True
                ws["why"] = "cut short by tune's time budget"
                _h._notice(
                    "tune's time budget ended the warm-up after %d steps (%.1f s); measuring from here"
                    % (ws["warm"], sum(ws["durs"]))
                )
            if done:
                ws["start"] = t
                _h._emit(_h._ranked({"ev": "window", "warmup": ws["warm"] + ws["skipped"]}))
            return
    ws["measured"] += 1
    sec, least = w.get("seconds"), w.get("min_seconds")
    took = t - ws["start"]
    counted = ws["measured"] >= int(w["steps"]) and (least is None or took >= float(least))
    if counted or (sec is not None and took >= float(sec)):
        ws["full"] = True
        n = ws["measured"]
        _h._emit(
            _h._ranked(
                {
                    "ev": "window_full",
                    "warmup": ws["warm"] + ws["skipped"],
                    "measured": n,
                    "seconds": t - ws["start"],
                    "warmup_end": ws.get("why"),
                }
            )
        )
        try:
            sys.stderr.write(
                "tune: measurement window full after %d measured step%s: stopping the job at "
                "this step boundary\n" % (n, "" if n == 1 else "s")
            )
        except Exception:
            pass
        raise SystemExit(0)


def _read():
    """TUNE_BRIDGE_WINDOW: the trial's window as tune wrote it, or None (no window)."""
    try:
        w = json.loads(os.environ.get("TUNE_BRIDGE_WINDOW", "null"))
    except ValueError:
        return None
    if not isinstance(w, dict) or not isinstance(w.get("steps"), int) or w["steps"] < 1:
        return None
    return w


def _crashed(kind, value, tb):
    _wst["crashed"] = True
    _prev_hook(kind, value, tb)


_prev_hook = sys.excepthook


def _exit_fast():
    """After tune's stop, ends the process once the script's own exit work is done,
    without the interpreter's teardown. That teardown frees the model, the optimizer and
    torch's modules and libraries one by one: 5-7 s for a ResNet-18 job on a loaded
    2-core machine, 0.8-1.4 s with os._exit (measured, docs/pytorch.md), which pushed
    upstream examples past the polite stop's grace. Registered when the hooks install,
    before the script runs, so every atexit handler of the script's and its libraries'
    (multiprocessing ending DataLoader workers, logging flushing its files) runs before
    this one; finally: blocks and context managers ran as SystemExit unwound. Files the
    script left open are flushed first, as the teardown would have."""
    if _h is None or not _wst["full"] or os.getpid() != _h._pid:
        return
    # Exact types, not isinstance(o, io.IOBase): that ABC check took 3.0 s over the
    # 342,000 objects of a ResNet-18 job at load 10, the exact types 0.24 s.
    buffered = (io.TextIOWrapper, io.BufferedWriter, io.BufferedRandom, io.BufferedRWPair)
    for o in gc.get_objects():
        try:
            if type(o) in buffered and not o.closed:
                o.flush()
        except Exception:
            pass
    for f in (sys.stdout, sys.stderr):
        try:
            f.flush()
        except Exception:
            pass
    os._exit(1 if _wst.get("crashed") else 0)


def activate(hook):
    """Reads the trial's window (none outside a windowed trial) for this process."""
    global _h, _win
    _h = hook
    _win = _read()
    if _win is not None:
        sys.excepthook = _crashed
        atexit.register(_exit_fast)
