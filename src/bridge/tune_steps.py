"""One training step out of the job's optimizer steps, loaded by tune_hook once torch is
imported: with one optimizer each of its steps ends a training step; with several (a
GAN's discriminator and generator, a recommender's sparse and dense optimizers) a
training step is one round of them, and a WGAN's round is its critic's n steps and the
generator's one. A job that builds no optimizer (its update written by hand) has its
steps bounded by its backward calls (`manual`), and an optimizer that runs the forward
and backward itself (L-BFGS's closure) has them counted as such, not as its update
(`opening`, `closing`). Apart from tune_hook so that each file stays under the
project's 800 lines.
"""

import atexit
import functools
import os
import weakref

_h = None  # tune_hook, for its state and its step end

# What the hooks count per training step, carried into the next step when a round of
# optimizer steps is closed after the next step's work began.
COUNTERS = ("batch", "fwd_batch", "backwards", "tokens", "fwd_tokens", "opt_steps", "closure_calls")

# The most extra steps one optimizer takes in a round while another that steps in this
# job has not stepped yet. A WGAN's critic steps 5 times per generator step (WGAN-GP's
# n_critic), the original WGAN 100 times for its first 25 generator iterations; an
# optimizer that stepped once and then no more (a warm-up phase's, still referenced)
# would otherwise hold every later round open, as would one that never steps. Past this
# the round is closed and the optimizers still waiting stop counting until they step.
MAX_REPEATS = 20


# The outermost modules that ran a training forward: the models this job trains. One of
# them called in eval mode (`model.eval()` before a validation pass) is evaluation; a
# teacher or a frozen backbone that is never trained here is part of the training step.
_trained = weakref.WeakSet()
_models = 0


def trains(module, trained=True):
    """`module` ran a training forward (`trained`: it has parameters)."""
    if not trained:
        return
    try:
        _trained.add(module)
    except TypeError:  # a module that cannot be hashed (its class sets __eq__ alone)
        return
    if "param_dtype" not in _h._state:
        try:
            _param_dtype(module)
        except Exception as e:
            _h._fail("reading the model's parameter dtype", e)


def _param_dtype(module):
    """The floating-point dtype most of the trained model's parameters hold, once per job
    (`param_dtype`): autocast casts float32 operations only, so a float64 model
    (pytorch/examples' time_sequence_prediction calls `.double()`) gains nothing from amp
    and its watch must not offer it; under an amp trial that is said as not applicable."""
    if os.getpid() != _h._pid:
        return
    from torch.nn.parameter import is_lazy

    params = list(module.parameters())
    # A LazyModule's parameters have no dtype to read before its first forward (a dry
    # run): read at a later call.
    if any(is_lazy(p) for p in params):
        return
    sizes, devices = {}, {}
    for p in params:
        if p.is_floating_point():
            name = str(p.dtype).replace("torch.", "")
            sizes[name] = sizes.get(name, 0) + p.numel()
            devices[p.device.type] = devices.get(p.device.type, 0) + p.numel()
    if not sizes:
        _h._state["param_dtype"] = None
        return
    dtype = max(sizes, key=sizes.get)
    _h._state["param_dtype"] = dtype
    _h._emit({"ev": "script_knob", "knob": "param_dtype", "value": dtype})
    # Where the model trains ("cpu", "cuda"): a CPU job's bf16 depends on the CPU's own
    # bf16 arithmetic, which the watch reads from the host.
    device = max(devices, key=devices.get)
    _h._emit({"ev": "script_knob", "knob": "param_device", "value": device})
    if _h._knobs.get("channels_last") is None:
        _own_layout(params)


def _own_layout(params):
    """The trained model's memory layout as the script leaves it (`channels_last`,
    "true" or "false"), where it has 4-D (convolution) weights: a conv net's watch can
    then offer NHWC, and a sweep trial of it reads "your script already does this" where
    the script converts its model itself. Under a `channels_last` trial tune_hook's
    layout says it, before it changes the weights."""
    import torch

    w4 = [p for p in params if p.dim() == 4 and p.is_floating_point()]
    if w4:
        nhwc = torch.channels_last
        own = any(w.is_contiguous(memory_format=nhwc) and not w.is_contiguous() for w in w4)
        _h._script_value("channels_last", own)


def one_model():
    """1 while the job trains one model, else 0 (and said once). Without a DataLoader a
    step's samples are its model's inputs, but a GAN trained on tensors of its own calls
    two models 4 to 22 times a step on batches of fakes, reals and mixes (WGAN-GP's
    critic, generator and penalty): summed, its "samples/s" read 4.4 times the real
    batches it trained on, so its throughput is steps/s then."""
    global _models
    # The most seen at once: the models are gone by the job's last round (`_job_end`).
    _models = max(_models, len(_trained))
    if _models <= 1:
        return 1
    _h._notice(
        "samples per step unknown: the job trains %d models on tensors of its own (no "
        "DataLoader), so a step's model inputs are no count of its samples; throughput "
        "is in steps/s" % _models
    )
    return 0


def training(module):
    """Whether `module` is in training mode: its own flag, or, for a wrapper (`.module`,
    Lightning's `._forward_module`), the wrapped model's. Lightning's DDP leaves its
    DistributedDataParallel wrapper in eval mode after the sanity check and puts only the
    LightningModule inside back in train mode: the wrapper's calls were not read as
    training, and their forward was timed as the optimizer's (40% of the step, forward
    1%)."""
    nn = _h._torch.nn
    for _ in range(4):
        if module.training:
            return True
        inner = getattr(module, "module", None)
        if not isinstance(inner, nn.Module):
            inner = getattr(module, "_forward_module", None)
        if not isinstance(inner, nn.Module):
            return False
        module = inner
    return False


def evaluated(module):
    """Whether this outermost call of `module` is the trained model's evaluation: in eval
    mode with gradients off (a forward in eval mode that backward follows is training)."""
    try:
        return not training(module) and not _h._torch.is_grad_enabled() and module in _trained
    except TypeError:  # a module that cannot be hashed: never one seen training
        return False


def evaluating():
    """Whether a model this job trains is in eval mode, gradients off: a DataLoader batch
    fetched then is the evaluation's (its wait is evaluation time, its samples are not trained
    on)."""
    if os.getpid() != _h._pid or _h._torch.is_grad_enabled():
        return False
    return any(not training(m) for m in list(_trained))


def _timed(run, record):
    """`run`, its duration passed to `record` however it ends."""

    def timed(*args, **kwargs):
        t = _h._now()
        try:
            return run(*args, **kwargs)
        finally:
            record(_h._now() - t)

    return timed


def timed_eval(run):
    """`run` with its time counted as the step's "eval", which tune_hook leaves out of the
    step's duration: an evaluation every N steps is not a slow training step."""
    return _timed(run, lambda dt: _h._add("eval", dt))


def manual(t):
    """A training forward or a DataLoader batch begins at t. In a job that built no
    torch.optim optimizer (the update written by hand, `p.data.add_(p.grad, alpha=-lr)`,
    as pytorch/examples' word_language_model trains by default) no optimizer step ends
    a step: there, the first forward or batch after a backward begins the next one. Before,
    such a job reported no step at all, and `tune watch --steps N` never stopped it."""
    s = _h._state
    if s["optimizers"] or not s["backwards"] or os.getpid() != _h._pid or _h._off:
        return
    _h._notice(
        "the job builds no torch.optim optimizer (its update is written by hand): a step "
        "is bounded by its backward calls, and the update's time is in the script's own "
        "code (forward's share on a GPU); the optimizer knobs cannot act"
    )
    try:
        _h._step_end(t)
    except Exception as e:  # not SystemExit: the window's stop goes through
        _h._fail("a hand-written update's step end", e)


# The optimizer step running now (L-BFGS runs the script's closure, its forward and
# backward, up to 20 times inside one step), as the phases and counts stood when it began.
_open = {"depth": 0, "fwd": 0.0}
_CLOSURE_PHASES = ("data_wait", "h2d", "backward", "zero_grad", "eval")


def in_step():
    return _open["depth"] > 0


def opening():
    """An optimizer step begins: what the hooks have counted so far, to tell its closure's
    work from its own when it ends."""
    s = _h._state
    if _open["depth"] == 0:
        _open["acc"] = sum(_h._acc[k] for k in _CLOSURE_PHASES)
        _open["fwd0"] = _open["fwd"]
        _open["counts"] = (s["backwards"], s["fwd_batch"], s["fwd_tokens"])
    _open["depth"] += 1


def closing(elapsed):
    """An optimizer step ended after `elapsed` seconds: its own time, without the closure's
    forward and backward that ran inside it (before, L-BFGS's step was all "optimizer",
    its closure's backward counted twice). A step whose closure ran k times counts its
    samples once, and says k (`closure_calls`): k backward calls are not accumulation."""
    _open["depth"] = max(_open["depth"] - 1, 0)
    if _open["depth"] or "acc" not in _open:
        return elapsed
    s = _h._state
    inner = sum(_h._acc[k] for k in _CLOSURE_PHASES) - _open["acc"] + _open["fwd"] - _open["fwd0"]
    b0, n0, t0 = _open["counts"]
    calls = s["backwards"] - b0
    if calls > 0:
        s["closure_calls"] = s.get("closure_calls", 0) + calls
        s["backwards"] = b0 + 1
        s["fwd_batch"] = n0 + (s["fwd_batch"] - n0) // calls
        s["fwd_tokens"] = t0 + (s["fwd_tokens"] - t0) // calls
    return max(elapsed - inner, 0.0)


def timed_closure_forward(run):
    """`run` timed into the open optimizer step's closure work."""

    def record(dt):
        _open["fwd"] += dt

    return _timed(run, record)


def _into(*keys):
    """A `_timed` record adding the duration to each of the step's `keys` in the main
    process."""

    def record(dt):
        if os.getpid() == _h._pid:
            for key in keys:
                _h._acc[key] += dt

    return record


def timed_model(run, module=None):
    """`run` with its time counted as the step's module calls ("model": its forward,
    apart from the script's own code between the hooks, where `split`). A model with
    weights called with gradients off inside training (a distillation's frozen teacher,
    a target network, an EMA copy: forward only, no backward follows) is counted in
    "no_grad" too, where the clock can tell (`split`: a CUDA call returns once queued).
    A teacher took 65% of a distillation's step by hand, all of it read as "forward"."""
    try:
        frozen = (
            module is not None
            and _h._state["t0"] is not None
            and not _h._torch.is_grad_enabled()
            and split()
            and next(module.parameters(), None) is not None
        )
    except Exception:
        frozen = False
    return _timed(run, _into("model", "no_grad") if frozen else _into("model"))


def timed_recompute(run):
    """`run`, a module called inside backward (activation checkpointing's forward run
    again), timed into the step's "recompute": part of backward's time, said apart."""
    return _timed(run, _into("recompute"))


def _gradient_time(run):
    """`run`, a gradient computation that no `backward` call makes, timed as the step's
    backward less the module calls inside it: a torch.func transform runs the model's
    forward itself, which the module hook times as the model's. The outermost one counts
    (torch.func.grad calls torch.autograd.grad; grad of grad is a Hessian's)."""

    @functools.wraps(run)
    def timed(*args, **kwargs):
        tl = _h._tl
        if _h._off or os.getpid() != _h._pid or _h._depth["backward"] or _h._tc.compiling() or getattr(tl, "grads", False):
            return run(*args, **kwargs)
        tl.grads = True
        model, t = _h._acc["model"], _h._now()
        try:
            return run(*args, **kwargs)
        finally:
            tl.grads = False
            _h._add("backward", max(_h._now() - t - (_h._acc["model"] - model), 0.0))

    return timed


def _install_gradients(torch):
    """Gradients a script takes without `backward`: torch.func's `grad` and
    `grad_and_value` (DP-SGD's per-sample gradients, `vmap(grad(loss))`, took 63% of its
    step by hand and were all read as the script's own code, no backward being called)
    and torch.autograd.grad (a gradient penalty's, a meta-learner's inner step). A
    script's `from torch.func import grad` runs after the hooks are in, so it gets these."""
    func = getattr(torch, "func", None)
    for name in ("grad", "grad_and_value"):
        orig = getattr(func, name, None)
        if orig is None:
            continue

        def transform(f, *args, _orig=orig, **kwargs):
            return _gradient_time(_orig(f, *args, **kwargs))

        setattr(func, name, functools.wraps(orig)(transform))
    torch.autograd.grad = _gradient_time(torch.autograd.grad)


def split():
    """Whether a step's time between the hooks splits into the model's calls and the
    script's own code: on the CPU, where a call's time is its work. A CUDA job's calls
    return once their kernels are queued, and the GPU's time lands where the script next
    waits for it (a `.item()` for its log), so there it stays one "forward" share. Read
    at the first steps and kept: torch.cuda.is_available() asks the driver each time."""
    if _h._state.get("split") is None or _h._state["step"] <= 2:
        _h._state["split"] = _accelerated() is False
    return _h._state["split"]


def _accelerated():
    torch = _h._torch
    try:
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            return True
        for name in ("xpu", "mps"):
            dev = getattr(torch, name, None)
            if dev is not None and dev.is_available():
                return True
    except Exception:
        return None
    return False


def install(hook):
    global _h
    _h = hook
    # ids of the optimizers that are alive but left out of rounds (see MAX_REPEATS).
    hook._state["idle"] = set()
    # The open round as it stood at each of its optimizer steps (`close_cycle`).
    hook._state["snaps"] = []
    hook._state["repeats"] = 0
    atexit.register(_job_end)
    try:
        _install_gradients(hook._torch)
    except Exception as e:
        hook._fail("torch.func's gradient transforms", e)


def _alive(s):
    return sum(1 for r in s["optimizers"] if r() is not None)


def before(opt):
    """An optimizer is about to step. When it stepped in the open round already, that
    round ends at its last optimizer step, unless an optimizer that steps in this job
    has not stepped in the round yet: a WGAN's critic stepping again before its
    generator's step is the same round."""
    s = _h._state
    if id(opt) not in s["cycle"]:
        return
    waiting = [
        id(o)
        for o in (r() for r in s["optimizers"])
        if o is not None and id(o) not in s["cycle"] and id(o) not in s["idle"]
    ]
    if waiting and s["repeats"] < MAX_REPEATS:
        s["repeats"] += 1
        return
    s["idle"].update(waiting)
    # Held open past MAX_REPEATS, the round was no round: one optimizer stepping while
    # the others wait for a later phase (pytorch/examples' mnist_forward_forward trains
    # each layer with its own Adam, one layer after the other). Each of its optimizer
    # steps is a step then, as the ones after it are: before, the first 21 were one
    # step, read as a 24 s start-up.
    close_cycle(split=bool(waiting))


def stepped(opt, t):
    """An optimizer step ended at t. With one optimizer that is the training step's end.
    With several alive, a step is one round of them (a GAN steps its discriminator and
    its generator on each batch: counted as two steps, DCGAN's throughput read twice its
    own), so the step stays open until an optimizer steps again (`before`)."""
    s = _h._state
    s["opt_steps"] += 1
    if _alive(s) <= 1:
        s["cycle"].clear()
        s["snap"] = None
        s["snaps"] = []
        _h._step_end(t)
        return
    s["idle"].discard(id(opt))
    s["cycle"].add(id(opt))
    s["snap"] = (t, dict(_h._acc), {k: s[k] for k in COUNTERS})
    s["snaps"].append(s["snap"])


def close_cycle(split=False):
    """End the open round of optimizer steps as it stood at its last optimizer step; what
    came after (the next batch, its forward and backward) carries into the next step.
    `split`: each optimizer step of the round is a step of its own, as it stood then."""
    s = _h._state
    s["cycle"].clear()
    s["repeats"] = 0
    snaps = s["snaps"] if split else [s["snap"]]
    s["snaps"] = []
    if s["snap"] is None:
        return
    s["snap"] = None
    now_acc = dict(_h._acc)
    now_counts = {k: s[k] for k in COUNTERS}
    acc = {k: 0.0 for k in _h._acc}
    counts = {k: 0 for k in COUNTERS}
    try:
        for t, at_acc, at_counts in snaps:
            for k in _h._acc:
                _h._acc[k] = at_acc[k] - acc[k]
            for k in COUNTERS:
                s[k] = at_counts[k] - counts[k]
            acc, counts = at_acc, at_counts
            _h._step_end(t)
    finally:
        for k in _h._acc:
            _h._acc[k] = now_acc[k] - acc[k]
        for k in COUNTERS:
            s[k] = now_counts[k] - counts[k]


def _job_end():
    """The job ended with a round still open (no optimizer stepped again to close it):
    that last round is a training step too. Not in a forked worker, and not once the
    hooks stepped aside or tune's window stopped the job."""
    if _h is None or os.getpid() != _h._pid or _h._off or _h._state["snap"] is None:
        return
    try:
        close_cycle()
    except BaseException:  # the window's SystemExit at exit, or a closed pipe
        pass
