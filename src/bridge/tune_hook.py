"""tune's PyTorch instrumentation, shipped inside the tune binary and put on a child's
PYTHONPATH (through sitecustomize) by `tune watch` and `[workload.python]` sweeps.

Nothing happens until the script imports torch. Then it hooks DataLoader iteration,
backward, Optimizer.step/zero_grad and host-to-device copies, and writes one JSON line
per training step (bounded by Optimizer.step) to tune's event pipe (tune_pipe: it never
writes anywhere else, whatever the script does to its descriptors).
It applies the knobs in TUNE_BRIDGE_KNOBS (a JSON object), reports every knob the
script sets explicitly to another value ("override") and every knob that cannot act in
this job ("not_applicable"). Any failure of a hook disables the hooks (they pass every
call straight through from then on), never the script.

Processes started by the script (torchrun's ranks, mp.spawn workers) find the same pipe:
launchers close inherited descriptors, so a child that lacks it reopens it through
/proc/<holder>/fd/<n> of the nearest ancestor that has it (TUNE_BRIDGE_HOLDER).
"""

import functools
import json
import os
import sys
import threading
import time

import tune_compile as _tc
import tune_loader as _ld
import tune_modes as _md
import tune_optim as _to
import tune_pipe
import tune_saves as _sv
import tune_steps as _st
import tune_window as _tw

_now = time.perf_counter
_tl = threading.local()
_pid = os.getpid()
# Set when a hook of tune's failed: every wrapper then calls straight through.
_off = False
_rank = None
_knobs = {}
# PyTorch's own defaults, which are tune's (src/knobs.rs): a knob at its default needs no
# "not applicable" note when the job cannot use it.
_DEFAULTS = {"persistent_workers": False, "prefetch_factor": 2, "pin_memory": False, "num_workers": 0}
_LOADER_KNOBS = ("num_workers", "pin_memory", "persistent_workers", "prefetch_factor")
# torch.cuda.synchronize at phase boundaries: only on request (TUNE_BRIDGE_SYNC=1), since it
# removes the overlap of CPU and GPU work that the job has without tune.
_sync = None
_depth = {"backward": 0}
# "eval": the trained model's evaluation (tune_steps.timed_eval), not in the step's dur.
# "model": the outermost module calls of the step (the model's forward, a loss module's),
# which the step's "forward" is, apart from the script's own code between the hooks
# ("script"); not a phase of its own, so not subtracted from the step.
_acc = {"data_wait": 0.0, "h2d": 0.0, "backward": 0.0, "optimizer": 0.0, "zero_grad": 0.0, "eval": 0.0, "model": 0.0, "recompute": 0.0, "no_grad": 0.0}
# Not phases: left out of the step's remainder (recompute is inside backward's time).
_APART = ("eval", "model", "recompute", "no_grad")
_state = {
    "step": 0,
    "t0": None,
    "batch": 0,
    "said": set(),
    "stepped": False,
    "scaler": None,  # tune's GradScaler (amp = fp16, when the script has none)
    "script_scaler": False,
    "optimizers": [],
    "conv_weights": False, "cl_undo": False,
    "loader_batches": 0, "fwd_batch": 0,
    "backwards": 0,
    "first_t": None,
    "tokens": 0, "fwd_tokens": 0,
    # When the first training forward began: the first step's start (compile included).
    "fwd0": None, "opt_steps": 0, "closure_calls": 0,
    # With several optimizers (a GAN's generator and discriminator), one training step is
    # one round of them (tune_steps): the optimizers stepped in the open step, and the
    # step as it stood at the last optimizer step's end.
    "cycle": set(),
    "snap": None,
}


_emit = tune_pipe.emit


def _fail(where, e):
    """A hook of tune's raised: the hooks step aside for the rest of the run, said once on
    stderr and in tune's report; the script's call goes on as if tune were not there."""
    global _off
    if _off:
        return
    _off = True
    message = "%s: %s: %s" % (where, type(e).__name__, e)
    try:
        sys.stderr.write("tune: PyTorch hooks disabled (%s); the script runs on\n" % message)
    except Exception:
        pass
    _emit(_ranked({"ev": "error", "message": message[:1000], "main": os.getpid() == _pid}))


def _add(phase, dt):
    if os.getpid() == _pid:
        _acc[phase] += dt
        _opened(_now() - dt)


def _opened(t):
    """The job's first training work (a batch, a forward, a phase hook) starts the first
    step, which no earlier optimizer step bounds: its time (start-up, compilation) is
    reported apart as "first_step", never mixed into the step times."""
    if _state["first_t"] is None and _state["t0"] is None:
        _state["first_t"] = t


def _once(key):
    if key in _state["said"]:
        return False
    _state["said"].add(key)
    return True


def _override(knob, script_value, applied):
    if _once(("override", knob, repr(script_value))):
        _emit({"ev": "override", "knob": knob, "script": script_value, "applied": applied})


def _not_applicable(knob, why):
    if _once(("na", knob)):
        _emit({"ev": "not_applicable", "knob": knob, "why": why})


def _script_value(knob, value):
    """What the script itself does for a knob (its own argument, or PyTorch's default when
    it passes none), once per knob: the report says "your script already does this"
    rather than recommend it, and the baseline is the script as written."""
    if os.getpid() == _pid and _once(("script", knob)):
        _emit({"ev": "script_knob", "knob": knob, "value": value})


def _notice(message):
    """One line at run time on the job's stderr, and in tune's report."""
    if os.getpid() == _pid and _once(("notice", message)):
        sys.stderr.write("tune: %s\n" % message)
        _emit({"ev": "notice", "message": message})


def _scaler_for(loss):
    """tune's GradScaler under amp = fp16, made on the first backward, unless the script
    scales its loss itself."""
    if _knobs.get("amp") != "fp16" or _state["script_scaler"]:
        return None
    if _state["scaler"] is None:
        _tl.ours = True
        try:
            _state["scaler"] = _torch.amp.GradScaler(loss.device.type)
        finally:
            _tl.ours = False
    return _state["scaler"]


def _install_backward(torch):
    # Tensor.backward calls torch.autograd.backward: time (and scale) once.
    def timed(orig, is_method):
        def scaled(args, kwargs):
            """The loss scaled by tune's GradScaler (amp = fp16), else `args` as given."""
            if args and not kwargs.get("create_graph"):
                loss = args[0]
                plain = len(args) == 1 and kwargs.get(
                    "gradient" if is_method else "grad_tensors"
                ) is None
                if plain and isinstance(loss, torch.Tensor) and loss.numel() == 1:
                    scaler = _scaler_for(loss)
                    if scaler is not None:
                        return (scaler.scale(loss),)
            return args

        def wrapper(*args, **kwargs):
            _md.release()
            if _off or _depth["backward"]:
                return orig(*args, **kwargs)
            _depth["backward"] += 1
            if os.getpid() == _pid:
                _state["backwards"] += 1
            t = _now()
            try:
                try:
                    args = scaled(args, kwargs)
                except Exception as e:
                    _fail("backward", e)
                return orig(*args, **kwargs)
            finally:
                if _sync is not None:
                    _sync()
                _depth["backward"] -= 1
                _add("backward", _now() - t)

        return wrapper

    torch.Tensor.backward = timed(torch.Tensor.backward, True)
    torch.autograd.backward = timed(torch.autograd.backward, False)

    clip = torch.nn.utils.clip_grad_norm_

    def clip_grad_norm_(*args, **kwargs):
        # Clipping must see true gradients: the GradScaler recipe unscales first.
        sc = _state["scaler"]
        try:
            if not _off and sc is not None and sc._scale is not None and len(_state["optimizers"]) == 1:
                opt = _state["optimizers"][0]()
                if opt is not None:
                    try:
                        sc.unscale_(opt)
                    except RuntimeError:
                        pass  # already unscaled this step
        except Exception as e:
            _fail("clip_grad_norm_", e)
        return clip(*args, **kwargs)

    if _knobs.get("amp") == "fp16":
        torch.nn.utils.clip_grad_norm_ = clip_grad_norm_


def _install_copies(torch):
    orig_to = torch.Tensor.to
    orig_cuda = torch.Tensor.cuda

    def to(self, *args, **kwargs):
        if _tc.compiling() or _off or self.device.type != "cpu":
            return orig_to(self, *args, **kwargs)
        t = _now()
        out = orig_to(self, *args, **kwargs)
        if out.device.type != "cpu":
            _add("h2d", _now() - t)
        return out

    def cuda(self, *args, **kwargs):
        if _tc.compiling() or _off:
            return orig_cuda(self, *args, **kwargs)
        t = _now()
        out = orig_cuda(self, *args, **kwargs)
        _add("h2d", _now() - t)
        return out

    torch.Tensor.to = to
    torch.Tensor.cuda = cuda


def _zero_grad(orig_zero):
    """Optimizer.zero_grad or nn.Module.zero_grad, timed, with the script's own choice read
    and the zero_grad knob applied."""
    import inspect

    name = orig_zero.__qualname__
    try:
        # PyTorch >= 2.0 clears to None by default: that, not a memset, is what a bare
        # zero_grad() in the script does.
        zero_default = inspect.signature(orig_zero).parameters["set_to_none"].default
        if not isinstance(zero_default, bool):
            zero_default = None
    except Exception:
        zero_default = None

    def zero_grad(self, *args, **kwargs):
        _md.release()
        if _off:
            return orig_zero(self, *args, **kwargs)
        try:
            own = kwargs.get("set_to_none", args[0] if args else None)
            if own is None:
                own = zero_default
            if own is not None:
                _script_value("zero_grad", "none" if own else "memset")
        except Exception as e:
            _fail(name, e)
        if "zero_grad" in _knobs:
            want = _knobs["zero_grad"] == "none"
            given = kwargs.get("set_to_none", args[0] if args else None)
            if given is not None and bool(given) != want:
                _override("zero_grad", "none" if given else "memset", _knobs["zero_grad"])
            kwargs = dict(kwargs, set_to_none=want)
            args = ()
        _state["zeroed"] = True
        t = _now()
        try:
            return orig_zero(self, *args, **kwargs)
        finally:
            _add("zero_grad", _now() - t)

    return zero_grad


def _install_optimizer(torch):
    import weakref

    opt = torch.optim.Optimizer
    opt.zero_grad = _zero_grad(opt.zero_grad)
    # model.zero_grad() clears the same gradients (older scripts and hand-written updates
    # call it instead of the optimizer's): before, the zero_grad knob did not act on such
    # a script, and its own choice was not read.
    torch.nn.Module.zero_grad = _zero_grad(torch.nn.Module.zero_grad)

    orig_init = opt.__init__

    # functools.wraps: libraries read patched signatures (Lightning's, tune_loader.py).
    @functools.wraps(orig_init)
    def init(self, *args, **kwargs):
        orig_init(self, *args, **kwargs)
        if _off:
            return
        try:
            _state["optimizers"].append(weakref.ref(self))
            if _knobs.get("amp") == "fp16":
                self.step = _scaled_step(self, self.step)
        except Exception as e:
            _fail("Optimizer.__init__", e)

    opt.__init__ = init

    step_start = {}

    def pre(optimizer, args, kwargs):
        _md.release()
        _state["stepped"] = True
        if not _off:
            # This optimizer stepped in the open step already: that step may have ended
            # with the last optimizer step before this one (tune_steps.before). Raising
            # here (the window is full) leaves the model as that step left it.
            try:
                _st.before(optimizer)
            except Exception as e:  # not SystemExit: the window's stop goes through
                _fail("the optimizer step's end", e)
        # After `before`, which may end the open round and take its phases out of the
        # accumulators: counted from before that, this step's own time took in the
        # round's backward and data wait (a forward-forward layer's Adam read 50%).
        _st.opening()
        step_start[id(optimizer)] = _now()

    def post(optimizer, args, kwargs):
        if _off:
            return
        t = _now()
        if _sync is not None:
            _sync()
            t = _now()
        _add("optimizer", _st.closing(t - step_start.pop(id(optimizer), t)))
        try:
            _st.stepped(optimizer, t)
        except Exception as e:  # not SystemExit: the window's stop goes through
            _fail("the optimizer step's end", e)
        _md.reopen(torch)

    from torch.optim.optimizer import (
        register_optimizer_step_post_hook,
        register_optimizer_step_pre_hook,
    )

    register_optimizer_step_pre_hook(pre)
    register_optimizer_step_post_hook(post)


def _scaled_step(opt, step):
    """optimizer.step() under amp = fp16 as GradScaler's recipe has it: unscale, skip the
    step on inf/nan, update the scale. The script keeps calling optimizer.step()."""

    def scaled(*args, **kwargs):
        sc = _state["scaler"]
        # No scaled backward yet (GradScaler then has no scale to unscale by), a closure,
        # or GradScaler's own call of optimizer.step(): the plain step.
        if _off or sc is None or sc._scale is None or getattr(_tl, "in_step", False) or args or kwargs:
            return step(*args, **kwargs)
        _state["stepped"] = False
        _tl.in_step = True
        try:
            out = sc.step(opt)
            sc.update()
        finally:
            _tl.in_step = False
        if not _state["stepped"]:
            # Skipped for an inf/nan gradient: still one training step of the job.
            _st.stepped(opt, _now())
        return out

    return scaled


def _device_of(torch, module, args):
    for p in module.parameters():
        return p.device.type
    for a in args:
        if isinstance(a, torch.Tensor):
            return a.device.type
    return getattr(_tl, "device", "cpu")


def _install_module_call(torch):
    """Autocast around the model's forward and channels_last for its weights and input
    batches, at the outermost nn.Module call: the model called by the training loop
    (and the loss module, as PyTorch's autocast recipe has it). Nested module calls
    run inside it and pay one attribute read."""
    amp = _knobs.get("amp")
    dtype = _md.autocast_dtype(torch, amp)
    cl = _knobs.get("channels_last")
    import weakref
    from torch.nn.parameter import is_lazy

    nhwc = torch.channels_last
    seen = weakref.WeakSet()
    orig_call = torch.nn.Module.__call__

    def layout(module):
        # A LazyModule's parameters have no shape before its first forward (a dry run).
        if module in seen or any(is_lazy(p) for p in module.parameters()):
            return
        seen.add(module)
        w4 = [p for p in module.parameters() if p.dim() == 4]
        if not w4:
            return
        script_cl = any(w.is_contiguous(memory_format=nhwc) and not w.is_contiguous() for w in w4)
        _script_value("channels_last", script_cl)
        _state["conv_weights"] = True
        if cl and not script_cl:
            module.to(memory_format=nhwc)
        elif not cl and script_cl:
            _override("channels_last", True, False)
            _state["cl_undo"] = True
            module.to(memory_format=torch.contiguous_format)

    def batch(x):
        if not (isinstance(x, torch.Tensor) and x.dim() == 4 and x.is_floating_point()):
            return x
        if cl:
            return x.contiguous(memory_format=nhwc)
        if not x.is_contiguous():
            if x.is_contiguous(memory_format=nhwc):
                _override("channels_last", True, False)
            return x.contiguous()
        return x

    def prepare(module, args):
        """The call's arguments in the trial's layout, and tune's autocast entered (or
        None): the outermost call of the thread."""
        if cl is not None:
            layout(module)
            args = tuple(batch(a) for a in args)
        # The trained model's evaluation runs in the script's own precision, as where a
        # user adds autocast to the training step: a loss the script then computes on its
        # outputs, outside the model, meets the float32 it was written for.
        if dtype is None or _st.evaluated(module):
            return args, None, False
        dev = _device_of(torch, module, args)
        _tl.device = dev
        held = torch.is_grad_enabled() and getattr(_tl, "held", None) is None and not torch.is_autocast_enabled(dev)
        _md.direct_forward(held and _st.training(module), args, dev)
        return args, _md.enter(torch, dev, dtype), held

    def call(self, *args, **kwargs):
        # While dynamo traces a compiled model, its submodules' calls come here too.
        if _tc.compiling() or _off or getattr(_tl, "inside", False) or os.getpid() != _pid:
            return orig_call(self, *args, **kwargs)
        _tl.inside = True
        try:
            if _depth["backward"]:
                # A checkpointed segment's forward, run again inside backward: backward's
                # time, in the precision checkpoint restores, and no model of its own.
                return _st.timed_recompute(orig_call)(self, *args, **kwargs)
            train = _st.training(self)
            if _state["t0"] is None and train:
                _opened(_now())
            run = orig_call
            if train and torch.is_grad_enabled():
                trained = next(self.parameters(), None) is not None
                if trained and not _st.in_step():
                    _st.manual(_now())
                _st.trains(self, trained)
                if not _state["loader_batches"] and trained:
                    # No DataLoader: the samples are what the training loop feeds its
                    # model (summed over the step, so accumulation counts every
                    # micro-batch); a loss module has no parameters and is not counted.
                    n, tokens = _ld.input_counts(self, args or (kwargs,))
                    _ld.count_inputs(self, n, tokens)
                elif trained:
                    _ld.loader_input(self)
                if _st.in_step():
                    run = _st.timed_closure_forward(run)
                if trained and _state["fwd0"] is None:
                    _state["fwd0"] = _now()
                if trained:
                    # The compile failure (reported) ends the call as PyTorch's would.
                    _tc.maybe_compile(torch, self)
            if _tc.active():
                run = _tc.guarded(orig_call)
            if _st.evaluated(self):
                run = _st.timed_eval(run)
            elif not getattr(_tl, "loading", False):
                # Not a transform the DataLoader runs in this process (data wait's).
                run = _st.timed_model(run, self)
            if dtype is None and cl is None:
                return run(self, *args, **kwargs)
            try:
                args, ctx, held = prepare(self, args)
            except Exception as e:
                _fail("nn.Module.__call__", e)
                ctx = None
            if ctx is None:
                return run(self, *args, **kwargs)
            try:
                out = run(self, *args, **kwargs)
            except BaseException:
                ctx.__exit__(None, None, None)
                raise
            if held:
                _md.hold(ctx)  # until the backward (tune_modes.release)
            else:
                ctx.__exit__(None, None, None)
            return out
        finally:
            _tl.inside = False
            _ld.call_ended()

    torch.nn.Module.__call__ = call


def _install_dp(torch):
    dp = torch.nn.DataParallel
    orig_init = dp.__init__

    @functools.wraps(orig_init)
    def init(self, *args, **kwargs):
        orig_init(self, *args, **kwargs)
        if _off:
            return
        try:
            notice_dp(self)
        except Exception as e:
            _fail("nn.DataParallel.__init__", e)

    def notice_dp(self):
        n = len(getattr(self, "device_ids", None) or [])
        if not torch.cuda.is_available():
            _notice(
                "nn.DataParallel without CUDA runs the module on one device: per-device DP "
                "phases cannot be measured (no GPU)"
            )
        elif n > 1:
            _notice(
                "nn.DataParallel over %d GPUs: the hooks time the whole step; per-device load "
                "comes from NVML utilization, not per-replica phases" % n
            )

    dp.__init__ = init


def _first_step_checks():
    """Knobs that cannot act in this job, known once one step has run."""
    torch = _torch
    cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
    if not cuda:
        if _knobs.get("autotune"):
            _not_applicable("autotune", "the job does not use CUDA: cudnn.benchmark changes nothing")
        if _knobs.get("amp") == "tf32":
            _not_applicable("amp", "the job does not use CUDA: TF32 is a GPU matmul mode")
        if _knobs.get("pin_memory"):
            _not_applicable("pin_memory", "the job does not use CUDA: there is no copy to pin for")
    elif _sync is None:
        _notice(
            "the job uses CUDA: phase times are CPU-side (launch) times; set "
            "TUNE_BRIDGE_SYNC=1 to synchronize at phase boundaries (exact, but costs overlap)"
        )
    _to.first_step_checks()
    if _knobs.get("amp") in ("bf16", "fp16") and _state.get("param_dtype") == "float64":
        _not_applicable(
            "amp",
            "the model's parameters are float64: autocast casts float32 operations only, so "
            "it leaves this model's arithmetic as it is",
        )
    if "zero_grad" in _knobs and not _state.get("zeroed"):
        _not_applicable(
            "zero_grad",
            "the job calls neither optimizer.zero_grad() nor model.zero_grad(): it clears its "
            "gradients itself, so tune cannot choose how",
        )
    if _knobs.get("channels_last") and not _state["conv_weights"]:
        _not_applicable("channels_last", "the model has no 4-D (convolution) weights")
    if not _state["loader_batches"]:
        for knob in _LOADER_KNOBS:
            if knob in _knobs and _knobs[knob] != _DEFAULTS[knob]:
                _not_applicable(
                    knob,
                    "the job takes its batches from no torch DataLoader: there is no loader "
                    "for this knob to act on",
                )
    if "autotune" not in _knobs:
        _script_value("autotune", bool(torch.backends.cudnn.benchmark))
    if not _knobs.get("num_threads"):
        _script_value("num_threads", int(torch.get_num_threads()))
    # A script that called torch.compile, or trained under its own autocast, has said so
    # already (once per knob): a first step without either is the script's "off".
    _script_value("compile", _tc.script_mode())
    _script_value("amp", "off")
    # Inside a compiled graph the checkpoint calls may go unseen: no "off" claimed there.
    seen = _state.get("checkpoint_seen")
    if seen or _tc.script_mode() == "off":
        _script_value("checkpoint", "on" if seen else "off")
    if seen and _knobs.get("checkpoint") == "off":
        _override("checkpoint", "on", "off")
    if _knobs.get("compile") == "reduce-overhead" and not cuda:
        _notice(
            "compile = reduce-overhead adds CUDA graphs to the default compile; this job "
            "does not use CUDA, so it compiles as mode default"
        )


def _step_end(t):
    global _sync
    _md.release()
    s = _state
    comp_s, comps = _tc.taken()
    if s["t0"] is None:
        # The first step starts at the job's first training work (`_opened`), not at an
        # optimizer step: it opens the clock and is reported apart, with its phases;
        # `fwd_dur` (from the first training forward) is what a compile is judged by.
        s["t0"] = t
        if s["first_t"] is not None and os.getpid() == _pid:
            first = {"ev": "first_step", "t": t, "dur": max(t - s["first_t"], 0.0)}
            for k in _acc:
                if k != "model":
                    first[k] = _acc[k]
            if s["fwd0"] is not None:
                first["fwd_dur"] = t - s["fwd0"]
            first["compile"] = comp_s
            first["compiles"] = comps
            _emit(_ranked(first))
        for k in _acc:
            _acc[k] = 0.0
        for k in _st.COUNTERS:
            s[k] = 0
        if os.environ.get("TUNE_BRIDGE_SYNC") == "1" and _torch.cuda.is_initialized():
            _sync = _torch.cuda.synchronize
        _first_step_checks()
        return
    # An evaluation between two optimizer steps is reported apart, not as a slow step.
    dur = max(t - s["t0"] - _acc["eval"], 1e-9)
    s["t0"] = t
    s["step"] += 1
    # Samples of this optimizer step: the DataLoader's batches, else the model's inputs
    # (unknown where several models are trained on the job's own tensors: _st.one_model).
    loader = s["loader_batches"]
    known = 1 if loader else _st.one_model()
    batch = s["batch"] if loader else s["fwd_batch"] * known
    ev = {"ev": "step", "step": s["step"], "t": t, "dur": dur, "batch": batch}
    tokens = s["tokens"] if loader else s["fwd_tokens"] * known
    if tokens:
        ev["tokens"] = tokens
    ev["backwards"] = s["backwards"]
    if s["closure_calls"]:
        ev["closure_calls"] = s["closure_calls"]
    if s["opt_steps"] > 1:
        ev["optim_steps"] = s["opt_steps"]
    if comps:
        # A recompilation (a new input shape, a guard that failed) inside this step.
        ev["compile"] = comp_s
        ev["compiles"] = comps
    _ranked(ev)
    other = dur
    for k in _acc:
        if k not in _APART:
            other -= _acc[k]
        if k != "model" and (k not in ("recompute", "no_grad") or _acc[k] > 0):
            ev[k] = _acc[k]
    other = max(other, 0.0)
    # Forward, loss and the script's own Python: everything between the hooks, split into
    # the module calls and the rest where the clock can tell them apart (`tune_steps.split`).
    if _st.split():
        ev["forward"] = min(_acc["model"], other)
        ev["script"] = other - ev["forward"]
    else:
        ev["forward"] = other
    for k in _acc:
        _acc[k] = 0.0
    for k in _st.COUNTERS:
        s[k] = 0
    if _tw.ended():
        return
    _emit(ev)
    _tw.step(dur, t, comps > 0)


def _rank_of():
    """torchrun's RANK, else torch.distributed's rank once the job initialized it (a job
    that starts its ranks with mp.spawn passes each its rank, with no RANK to read:
    before, its ranks' steps were one stream)."""
    global _rank
    if _rank is None and _torch is not None:
        try:
            dist = _torch.distributed
            if dist.is_available() and dist.is_initialized():
                _rank = int(dist.get_rank())
        except Exception:
            pass
    return _rank


def _ranked(ev):
    """`ev` tagged with its process: the rank, else, in a process that multiprocessing
    started (Hogwild!'s trainers sharing one model), its pid, so that each process's
    steps stay a stream of their own."""
    rank = _rank_of()
    if rank is not None:
        ev["rank"] = rank
    elif _child():
        ev["proc"] = _pid
    return ev


def _child():
    """Whether Python's multiprocessing started this process (a spawned trainer, or a
    spawned DataLoader worker, which trains nothing). Asked each time: a spawned child
    learns its parent after sitecustomize ran, in multiprocessing's spawn_main."""
    mp = sys.modules.get("multiprocessing")
    try:
        return mp is not None and mp.parent_process() is not None
    except Exception:
        return False


_torch = None


def _install(torch):
    global _torch
    _torch = torch
    _ld.install(torch, sys.modules[__name__])
    _st.install(sys.modules[__name__])
    _install_backward(torch)
    _install_copies(torch)
    _install_optimizer(torch)
    _to.install(torch, sys.modules[__name__])
    _md.install(torch, sys.modules[__name__])
    _install_module_call(torch)
    _install_dp(torch)
    _tc.install(torch, sys.modules[__name__])
    _sv.install(torch, sys.modules[__name__])
    hello = {"ev": "hello", "pid": _pid, "torch": torch.__version__, "knobs": _knobs}
    if _rank is not None:
        hello["rank"] = _rank
        hello["world"] = os.environ.get("WORLD_SIZE")
    _emit(hello)


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
                _fail("installing the hooks", e)

        spec.loader.exec_module = exec_module
        return spec


def activate():
    global _knobs, _rank
    if not tune_pipe.open_pipe():
        return
    _tw.activate(sys.modules[__name__])
    _rank = os.environ.get("RANK")
    if _rank is not None:
        try:
            _rank = int(_rank)
        except ValueError:
            _rank = None
    try:
        _knobs = json.loads(os.environ.get("TUNE_BRIDGE_KNOBS", "{}"))
    except ValueError:
        _knobs = {}
    if not isinstance(_knobs, dict):
        _knobs = {}
    if "torch" in sys.modules:
        try:
            _install(sys.modules["torch"])
        except Exception as e:  # never break the user's script
            _fail("installing the hooks", e)
    else:
        sys.meta_path.insert(0, _TorchFinder())
