"""torch.compile for an unmodified script: tune's `compile` knob (issue #26), loaded by
tune_hook once torch is imported.

- The knob's mode (`default`, `reduce-overhead`, `max-autotune`,
  `max-autotune-no-cudagraphs`) compiles, in place (`nn.Module.compile`), each module the
  training loop calls outermost with trainable parameters, on its first forward: the
  script keeps its own reference to the model and its optimizer the same parameters.
- A script that calls torch.compile itself is reported as what it does (`script_knob`),
  and its call takes the trial's mode (`off` returns the model uncompiled).
- Compile time comes from dynamo's compile callbacks, per step, so tune can keep it
  apart from the steady step time (the first steps of a compiled model are its compile).
- A compile that fails (no C compiler, an inductor error, a mode this torch lacks) is
  reported with PyTorch's message as the trial's reason, then raised on as PyTorch
  raised it: the trial ends, never measured as eager under the compile label.
- A compile budget (`compile_budget_s` in the trial's window): when no optimizer step
  has ended that long after the job's first compile began, the job is ended from a
  watcher thread, with an event that says so (a `timeout` trial with why, instead of a
  compile that eats the trial's whole time limit).
"""

import os
import sys
import threading
import time
import weakref

_now = time.perf_counter
_h = None  # tune_hook, for its event and note helpers
_st = {
    "mode": None,  # the trial's mode (None: the knob is not set in this trial)
    "script": None,  # the mode of the script's own torch.compile call, once seen
    "t": 0.0,  # seconds compiling since the last step's end
    "n": 0,  # compilations since the last step's end
    "start": None,
    "failed": False,
    "steps": 0,  # optimizer steps ended (the budget's watcher waits for one)
    "watched": False,
}
_seen = weakref.WeakSet()


def compiling():
    """True while dynamo traces: tune's wrappers then pass straight through, so tracing
    never sees them (a traced wrapper would break the graph)."""
    return False


def install(torch, hook):
    global _h, compiling
    _h = hook
    _st["mode"] = hook._knobs.get("compile")
    comp = getattr(getattr(torch, "compiler", None), "is_compiling", None)
    if comp is not None:
        compiling = comp
    try:
        from torch._dynamo import callback as cb

        cb.on_compile_start(_started)
        cb.on_compile_end(_ended)
    except Exception:
        pass  # an older torch: the compile shows in the first step's time only
    orig = torch.compile

    def compile_(model=None, *args, **kwargs):
        if _h._off or getattr(_h._tl, "ours", False):
            return orig(model, *args, **kwargs)
        mode = _st["mode"]
        try:
            own = "off" if kwargs.get("disable") else (kwargs.get("mode") or "default")
            if _st["script"] is None:
                _st["script"] = own
            _h._script_value("compile", own)
            if mode is not None and mode != own:
                _h._override("compile", own, mode)
            if mode == "off":
                # The trial is eager: the script's model (or, as a decorator, its
                # function) runs uncompiled.
                return model if model is not None else (lambda fn: fn)
            if mode is not None:
                kwargs = dict(kwargs, mode=mode)
                kwargs.pop("options", None)  # torch takes a mode or options, not both
        except Exception as e:
            _h._fail("torch.compile", e)
            return orig(model, *args, **kwargs)
        try:
            return orig(model, *args, **kwargs)
        except Exception as e:
            failed(mode or own, e)
            raise

    torch.compile = compile_


def _started(*args):
    _st["start"] = _now()
    if not _st["watched"]:
        _st["watched"] = True
        _watch_budget()


def _watch_budget():
    """Ends the job if no optimizer step ends within the budget after this, the first
    compile: the compile (forward and backward) is inside the first compiled steps."""
    win = getattr(getattr(_h, "_tw", None), "_win", None) or {}
    budget = win.get("compile_budget_s")
    if not isinstance(budget, (int, float)) or budget <= 0 or os.getpid() != _h._pid:
        return
    t0, steps0 = _now(), _st["steps"]

    def watch():
        while _st["steps"] == steps0:
            left = t0 + budget - _now()
            if left <= 0:
                _over(budget, _now() - t0)
                return
            time.sleep(min(left, 0.25))

    threading.Thread(target=watch, name="tune-compile-budget", daemon=True).start()


def _over(budget, took):
    mode = _st["mode"] or _st["script"] or "default"
    _h._emit({"ev": "compile_budget", "mode": mode, "budget": float(budget), "seconds": took})
    try:
        sys.stderr.write(
            "tune: torch.compile(mode=%r) still compiling %.0f s after it began "
            "(compile_budget_s = %g): ending the job\n" % (mode, took, budget)
        )
        sys.stderr.flush()
    except Exception:
        pass
    # From a thread, mid-compile: nothing of the script's can run safely now, and
    # inductor's compile workers are ended with the process tree by tune.
    os._exit(3)


def _ended(*args):
    s = _st["start"]
    if s is not None:
        _st["t"] += _now() - s
        _st["n"] += 1
        _st["start"] = None


def taken():
    """Seconds compiling and compilations since the last call (one step's)."""
    t, n = _st["t"], _st["n"]
    _st["t"], _st["n"] = 0.0, 0
    _st["steps"] += 1
    return t, n


def active():
    """Whether anything in this job is compiled (the trial's mode, or the script's own)."""
    return _st["mode"] not in (None, "off") or _st["script"] not in (None, "off")


def script_mode():
    """The script's own mode, "off" when it never called torch.compile."""
    return _st["script"] or "off"


def _trained(module):
    """The module has parameters that train, held by an optimizer when one exists."""
    params = [p for p in module.parameters() if p.requires_grad]
    if not params:
        return False
    opts = [o() for o in _h._state["optimizers"]]
    held = set()
    for o in opts:
        if o is not None:
            for g in o.param_groups:
                held.update(id(p) for p in g["params"])
    return not held or any(id(p) in held for p in params)


def maybe_compile(torch, module):
    """Compiles `module` in place with the trial's mode on its first training forward,
    unless the script compiles by itself (its call already took the trial's mode)."""
    mode = _st["mode"]
    if mode in (None, "off") or _st["script"] is not None or module in _seen:
        return
    _seen.add(module)
    opt_mod = getattr(getattr(torch, "_dynamo", None), "eval_frame", None)
    opt_mod = getattr(opt_mod, "OptimizedModule", ())
    if getattr(module, "_compiled_call_impl", None) is not None or isinstance(module, opt_mod):
        return
    if not _trained(module):
        return
    if not hasattr(module, "compile"):
        e = RuntimeError(
            "this torch (%s) has no nn.Module.compile (PyTorch >= 2.2), which tune uses to "
            "compile the script's model in place" % torch.__version__
        )
        failed(mode, e)
        raise e
    _h._tl.ours = True
    try:
        module.compile(mode=mode)
    except Exception as e:
        failed(mode, e)
        raise
    finally:
        _h._tl.ours = False
    _h._emit({"ev": "compiled", "module": type(module).__name__, "mode": mode})


def is_compile_error(e):
    """Raised by dynamo or inductor (BackendCompilerFailed, InductorError, ...)."""
    for cls in type(e).__mro__:
        m = getattr(cls, "__module__", "") or ""
        if m.startswith("torch._dynamo") or m.startswith("torch._inductor"):
            return True
    return False


def guarded(orig_call):
    """The module call, with a compile failure inside it reported as the trial's reason."""

    def run(module, *args, **kwargs):
        try:
            return orig_call(module, *args, **kwargs)
        except Exception as e:
            if is_compile_error(e):
                failed(_st["mode"] or _st["script"], e)
            raise

    return run


def _first_lines(text, n=3, width=600):
    # PyTorch's advice on its own logging is no part of the reason.
    lines = [
        l.strip()
        for l in str(text).splitlines()
        if l.strip() and "TORCHDYNAMO_VERBOSE" not in l and "TORCH_LOGS" not in l
    ]
    return " | ".join(lines[:n])[:width]


def failed(mode, e):
    if _st["failed"]:
        return
    _st["failed"] = True
    message = "%s: %s" % (type(e).__name__, _first_lines(e))
    try:
        sys.stderr.write("tune: torch.compile(mode=%r) failed: %s\n" % (mode, message))
    except Exception:
        pass
    _h._emit({"ev": "compile_failed", "mode": mode, "message": message})
