"""tune's hook on torch.optim's constructors, loaded by tune_hook once torch is imported:
the optim_impl knob (default, foreach, fused, forloop: which implementation of the
update the script's optimizer runs), what the script passes itself read as its own value, and the
knob said to be not applicable where the optimizer has no such implementation. Apart
from tune_hook so that each file stays under the project's 800 lines.

Why a knob: a recommender's dense Adam over 3.2M embedding rows took 78% of its step on
2 CPU cores; fused=True made the step 3.7x shorter (scripts/realistic/recsys.py, timed
by hand), and the watch's optimizer finding had no sweep to test it with.
"""

import functools
import inspect
import os
import sys
import threading

_h = None  # tune_hook, for its knobs and event helpers
_tl = threading.local()
# Optimizers built with the trial's implementation, and those that could not take it.
_state = {"applied": 0, "refused": []}

IMPLS = ("default", "foreach", "fused", "forloop")


def script_impl(kwargs):
    """What the script asks for itself: fused=True, foreach=True, foreach=False (the
    per-parameter loop), or none of them (PyTorch's choice)."""
    if kwargs.get("fused"):
        return "fused"
    if kwargs.get("foreach"):
        return "foreach"
    if kwargs.get("foreach") is False:
        return "forloop"
    return "default"


def _impl_kwargs(want, accepts):
    """The constructor arguments that select `want`, for the ones the class takes."""
    value = {
        "default": {"fused": None, "foreach": None},
        "forloop": {"fused": False, "foreach": False},
        "foreach": {"fused": False, "foreach": True},
        "fused": {"fused": True, "foreach": False},
    }[want]
    return {k: v for k, v in value.items() if k in accepts}


def _fused_ok(torch, params):
    """fused=True needs floating-point parameters on a device with fused kernels; PyTorch
    checks that only at the first step, so a trial would crash there instead of saying
    the knob cannot act."""
    try:
        from torch.utils._foreach_utils import _get_fused_kernels_supported_devices

        devices = set(_get_fused_kernels_supported_devices())
    except Exception:
        return None
    for p in params:
        tensors = p.get("params", []) if isinstance(p, dict) else [p]
        if torch.is_tensor(tensors):
            tensors = [tensors]
        for t in tensors:
            if not torch.is_tensor(t):
                continue
            if t.device.type not in devices or not torch.is_floating_point(t):
                return "its parameters include %s on %s, and fused kernels take floating-point tensors on %s" % (
                    t.dtype,
                    t.device.type,
                    ", ".join(sorted(devices)),
                )
    return None


def _class_seen(made, cls, accepts):
    """Each optimizer class the script builds, once, as the advice names it: the PyTorch
    line of an optim_impl change says `torch.optim.SGD(params, ..., fused=True)` for the
    script's SGD rather than AdamW with "your optimizer's class" (#31). A subclass of a
    torch.optim class (`class MyAdam(torch.optim.Adam)`) is named as the script names it."""
    name = "torch.optim." + cls.__name__ if made is cls else made.__name__
    if _h._pid != os.getpid() or not _h._once(("optimizer", name)):
        return
    _h._emit({"ev": "script_knob", "knob": "optimizer", "value": name})
    # The implementations every optimizer class of the job has a switch for (Adadelta,
    # RMSprop, NAdam... have foreach and no fused): the watch offers only those. Before,
    # pytorch/examples' siamese_network was told to try Adadelta(..., fused=True).
    seen = _state.get("impls")
    impls = set(accepts) if seen is None else seen & set(accepts)
    if impls != seen:
        _state["impls"] = impls
        _h._emit({"ev": "script_knob", "knob": "optim_impls", "value": ",".join(sorted(impls))})


def _wrap(torch, cls, accepts):
    orig = cls.__init__

    @functools.wraps(orig)
    def init(self, params, *args, **kwargs):
        want = _h._knobs.get("optim_impl")
        if _h._off or getattr(_tl, "inside", False):
            return orig(self, params, *args, **kwargs)
        _tl.inside = True
        try:
            return _init(self, params, args, kwargs, want)
        finally:
            _tl.inside = False

    def _init(self, params, args, kwargs, want):
        try:
            own = script_impl(kwargs)
            _h._script_value("optim_impl", own)
            _class_seen(type(self), cls, accepts)
        except Exception as e:
            _h._fail("%s.__init__" % cls.__name__, e)
            return orig(self, params, *args, **kwargs)
        if want not in IMPLS or want == own:
            if want in IMPLS:
                _state["applied"] += 1
            return orig(self, params, *args, **kwargs)
        # A generator of parameters is consumed by a constructor that raises: a list lets
        # the script's own arguments be used again (Optimizer makes one anyway).
        if not isinstance(params, (list, tuple)) and not torch.is_tensor(params):
            params = list(params)
        why = None
        if want in ("fused", "foreach") and want not in accepts:
            why = "torch.optim.%s has no %s implementation" % (cls.__name__, want)
        elif want == "forloop" and "foreach" not in accepts:
            why = "torch.optim.%s has no foreach switch: its loop is its only implementation" % cls.__name__
        elif want == "fused":
            why = _fused_ok(torch, params)
        if why is not None:
            _state["refused"].append(why)
            return orig(self, params, *args, **kwargs)
        new = dict(kwargs)
        new.update(_impl_kwargs(want, accepts))
        if own != "default":
            _h._override("optim_impl", own, want)
        try:
            out = orig(self, params, *args, **new)
        except (RuntimeError, ValueError, TypeError) as e:
            _state["refused"].append("torch.optim.%s refused %s=True: %s" % (cls.__name__, want, str(e)[:200]))
            return orig(self, params, *args, **kwargs)
        _state["applied"] += 1
        return out

    cls.__init__ = init


def install(torch, hook):
    global _h
    _h = hook
    base = torch.optim.Optimizer
    for name in dir(torch.optim):
        cls = getattr(torch.optim, name, None)
        if not isinstance(cls, type) or not issubclass(cls, base) or cls is base:
            continue
        try:
            accepts = set(inspect.signature(cls.__init__).parameters)
        except (TypeError, ValueError):
            continue
        _wrap(torch, cls, accepts & {"fused", "foreach"})


# The training frameworks whose own settings spell tune's knobs (`knobs::torch`'s
# framework lines), by the module names of their training loops' frames. Lightning's and
# the Hugging Face Trainer's loops run on Fabric's and accelerate's wrappers, so the loop
# that holds them is named, not the wrapper.
_FRAMEWORKS = (
    ("lightning", ("lightning.pytorch.",)),
    # The package before its 2.0 rename: its scripts `import pytorch_lightning as pl`.
    ("pytorch_lightning", ("pytorch_lightning.",)),
    ("transformers", ("transformers.trainer",)),
    ("fabric", ("lightning.fabric.", "lightning_fabric.")),
    ("accelerate", ("accelerate.",)),
)


def framework_of(frame):
    """The framework whose loop runs `frame` (a frame inside the first optimizer step),
    or None for a loop of the script's own."""
    found = set()
    while frame is not None:
        mod = frame.f_globals.get("__name__") or ""
        for name, prefixes in _FRAMEWORKS:
            if mod.startswith(prefixes):
                found.add(name)
        frame = frame.f_back
    return next((name for name, _ in _FRAMEWORKS if name in found), None)


def first_step_checks():
    """Once a step has run: the framework whose loop ran it, for the advice's lines (a
    Lightning user's bf16 is `Trainer(precision="bf16-mixed")`, not an autocast block
    around a loss the framework computes); and a trial's implementation that no optimizer
    took is said to be not applicable, with the reason, so it is never recommended."""
    if _h._pid == os.getpid():
        try:
            name = framework_of(sys._getframe(1))
        except Exception:
            name = None
        if name is not None:
            _h._emit({"ev": "script_knob", "knob": "framework", "value": name})
    want = _h._knobs.get("optim_impl")
    if want not in IMPLS or want == "default" or _state["applied"]:
        return
    if _state["refused"]:
        why = _state["refused"][0]
    elif not _h._state["optimizers"]:
        why = "the job builds no torch.optim optimizer (its update is written by hand)"
    else:
        why = "the job's optimizer is not one of torch.optim's, so tune cannot choose its implementation"
    _h._not_applicable("optim_impl", why)
