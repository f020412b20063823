"""tune's PyTorch instrumentation, shipped inside the tune binary and put on a child's
PYTHONPATH (through sitecustomize) by `tune watch` and `[workload.python]` sweeps.

Nothing happens until the script imports torch. Then it hooks DataLoader iteration,
backward, Optimizer.step/zero_grad and host-to-device copies, and writes one JSON line
per training step (bounded by Optimizer.step) to the file descriptor in TUNE_BRIDGE_FD.
It applies the knobs in TUNE_BRIDGE_KNOBS (a JSON object) and reports every knob the
script sets explicitly to another value. Any failure disables the hooks, never the
script.
"""

import json
import os
import sys
import threading
import time

_now = time.perf_counter
_lock = threading.Lock()
_out = None
_pid = os.getpid()
_knobs = {}
_sync = None  # torch.cuda.synchronize when the job uses CUDA, for honest GPU times
_depth = {"backward": 0, "data": 0}
_acc = {"data_wait": 0.0, "h2d": 0.0, "backward": 0.0, "optimizer": 0.0, "zero_grad": 0.0}
_state = {"step": 0, "t0": None, "batch": 0, "overrides": set()}


def _emit(obj):
    global _out
    if _out is None or os.getpid() != _pid:
        return
    line = json.dumps(obj, separators=(",", ":")) + "\n"
    try:
        with _lock:
            os.write(_out, line.encode())
    except OSError:
        _out = None  # tune went away: keep the script running, stop reporting


def _add(phase, dt):
    if os.getpid() == _pid:
        _acc[phase] += dt


def _override(knob, script_value, applied):
    key = (knob, repr(script_value))
    if key in _state["overrides"]:
        return
    _state["overrides"].add(key)
    _emit({"ev": "override", "knob": knob, "script": script_value, "applied": applied})


def _batch_size(batch):
    try:
        x = batch
        while isinstance(x, (list, tuple)) and x:
            x = x[0]
        if isinstance(x, dict) and x:
            x = next(iter(x.values()))
        shape = getattr(x, "shape", None)
        if shape is not None and len(shape) > 0:
            return int(shape[0])
    except Exception:
        pass
    return 0


def _install(torch):
    global _sync
    from torch.utils.data import dataloader as dl

    # --- DataLoader: knobs in, time waiting for batches out ---
    orig_init = dl.DataLoader.__init__
    import inspect

    params = list(inspect.signature(orig_init).parameters)[1:]
    dl_knobs = {
        "num_workers": "num_workers",
        "pin_memory": "pin_memory",
        "persistent_workers": "persistent_workers",
        "prefetch_factor": "prefetch_factor",
    }

    def init(self, *args, **kwargs):
        for knob, arg in dl_knobs.items():
            if knob not in _knobs:
                continue
            want = _knobs[knob]
            given = None
            if arg in kwargs:
                given = kwargs[arg]
            elif arg in params and params.index(arg) < len(args):
                i = params.index(arg)
                given = args[i]
                args = args[:i] + args[i + 1:]
            if given is not None and given != want:
                _override(knob, given, want)
            kwargs[arg] = want
        if kwargs.get("num_workers", 0) == 0:
            # These are only valid with workers.
            kwargs.pop("prefetch_factor", None)
            if kwargs.get("persistent_workers"):
                kwargs["persistent_workers"] = False
        return orig_init(self, *args, **kwargs)

    if _knobs:
        dl.DataLoader.__init__ = init

    orig_next = dl._BaseDataLoaderIter.__next__

    def next_(self):
        t = _now()
        try:
            batch = orig_next(self)
        finally:
            _add("data_wait", _now() - t)
        _state["batch"] = _batch_size(batch)
        return batch

    dl._BaseDataLoaderIter.__next__ = next_

    # --- backward (Tensor.backward calls torch.autograd.backward: count once) ---
    def timed_backward(orig):
        def wrapper(*args, **kwargs):
            if _depth["backward"]:
                return orig(*args, **kwargs)
            _depth["backward"] += 1
            t = _now()
            try:
                return orig(*args, **kwargs)
            finally:
                if _sync is not None:
                    _sync()
                _depth["backward"] -= 1
                _add("backward", _now() - t)

        return wrapper

    torch.Tensor.backward = timed_backward(torch.Tensor.backward)
    torch.autograd.backward = timed_backward(torch.autograd.backward)

    # --- host-to-device copies ---
    orig_to = torch.Tensor.to
    orig_cuda = torch.Tensor.cuda

    def to(self, *args, **kwargs):
        if self.device.type != "cpu":
            return orig_to(self, *args, **kwargs)
        t = _now()
        out = orig_to(self, *args, **kwargs)
        if out.device.type != "cpu":
            _add("h2d", _now() - t)
        return out

    def cuda(self, *args, **kwargs):
        global _sync
        t = _now()
        out = orig_cuda(self, *args, **kwargs)
        _add("h2d", _now() - t)
        if _sync is None:
            _sync = torch.cuda.synchronize
        return out

    torch.Tensor.to = to
    torch.Tensor.cuda = cuda

    # --- optimizer: zero_grad (knob in, time out) and step (the step boundary) ---
    opt = torch.optim.Optimizer
    orig_zero = opt.zero_grad

    def zero_grad(self, *args, **kwargs):
        if "zero_grad" in _knobs:
            want = _knobs["zero_grad"] == "none"
            given = kwargs.pop("set_to_none", args[0] if args else None)
            args = ()
            if given is not None and bool(given) != want:
                _override("zero_grad", "none" if given else "memset", _knobs["zero_grad"])
            kwargs["set_to_none"] = want
        t = _now()
        try:
            return orig_zero(self, *args, **kwargs)
        finally:
            _add("zero_grad", _now() - t)

    opt.zero_grad = zero_grad

    step_start = {}

    def pre(optimizer, args, kwargs):
        step_start[id(optimizer)] = _now()

    def post(optimizer, args, kwargs):
        t = _now()
        if _sync is not None:
            _sync()
            t = _now()
        _add("optimizer", t - step_start.pop(id(optimizer), t))
        _step_end(t)

    from torch.optim.optimizer import (
        register_optimizer_step_post_hook,
        register_optimizer_step_pre_hook,
    )

    register_optimizer_step_pre_hook(pre)
    register_optimizer_step_post_hook(post)

    # --- backend knobs ---
    if "autotune" in _knobs:
        torch.backends.cudnn.benchmark = bool(_knobs["autotune"])
    if "allow_tf32" in _knobs:
        torch.backends.cuda.matmul.allow_tf32 = bool(_knobs["allow_tf32"])
        torch.backends.cudnn.allow_tf32 = bool(_knobs["allow_tf32"])

    if torch.cuda.is_available() and torch.cuda.is_initialized():
        _sync = torch.cuda.synchronize
    _emit({"ev": "hello", "pid": _pid, "torch": torch.__version__, "knobs": _knobs})


def _step_end(t):
    s = _state
    if s["t0"] is None:
        # The first step's start is unknown (setup, imports): it only opens the clock.
        s["t0"] = t
        for k in _acc:
            _acc[k] = 0.0
        return
    dur = t - s["t0"]
    s["t0"] = t
    s["step"] += 1
    ev = {"ev": "step", "step": s["step"], "t": t, "dur": dur, "batch": s["batch"]}
    other = dur
    for k in _acc:
        ev[k] = _acc[k]
        other -= _acc[k]
        _acc[k] = 0.0
    # Forward, loss and the script's own Python: everything between the hooks.
    ev["forward"] = max(other, 0.0)
    _emit(ev)


class _TorchFinder:
    """Installs the hooks right after `import torch` finishes, so a Python process that
    never imports torch pays nothing."""

    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass
        import importlib.util

        spec = importlib.util.find_spec("torch")
        if spec is None or spec.loader is None:
            return spec
        orig_exec = spec.loader.exec_module

        def exec_module(module):
            orig_exec(module)
            try:
                _install(module)
            except Exception as e:  # never break the user's script
                _emit({"ev": "error", "message": "%s: %s" % (type(e).__name__, e)})

        spec.loader.exec_module = exec_module
        return spec


def activate():
    global _out, _knobs
    fd = os.environ.get("TUNE_BRIDGE_FD")
    if not fd:
        return
    try:
        _out = int(fd)
        os.fstat(_out)
    except (ValueError, OSError):
        _out = None
        return
    # Children of this process (DataLoader workers, subprocesses) must not report as it.
    os.environ.pop("TUNE_BRIDGE_FD", None)
    try:
        _knobs = json.loads(os.environ.get("TUNE_BRIDGE_KNOBS", "{}"))
    except ValueError:
        _knobs = {}
    if "torch" in sys.modules:
        _install(sys.modules["torch"])
    else:
        sys.meta_path.insert(0, _TorchFinder())
