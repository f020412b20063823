"""tune's knobs that set torch's global modes, loaded by tune_hook once torch is imported:
autotune (cudnn.benchmark), amp = "tf32" (TF32 matmuls), num_threads
(torch.set_num_threads), the script's own autocast and GradScaler, and its activation
checkpointing, each applied once and a script that sets it itself reported and
overruled. Apart from tune_hook so that
each file stays under the project's 800 lines.
"""

import functools

_h = None  # tune_hook, for its knobs, state and event helpers


def install(torch, hook):
    global _h
    _h = hook
    install_backends(torch)
    install_threads(torch)
    install_autocast(torch)
    install_checkpoint(torch)


def install_backends(torch):
    """cudnn.benchmark (tune's autotune) and TF32 (amp = "tf32"): set once, and a script
    that sets them itself is reported and overruled."""
    cudnn = type(torch.backends.cudnn)
    orig_bench = cudnn.__dict__.get("benchmark")
    if "autotune" in _h._knobs:
        want = bool(_h._knobs["autotune"])
        torch._C._set_cudnn_benchmark(want)
        if orig_bench is not None:

            class Benchmark:
                def __get__(self, obj, objtype=None):
                    return torch._C._get_cudnn_benchmark()

                def __set__(self, obj, val):
                    if _h._off:
                        torch._C._set_cudnn_benchmark(bool(val))
                    elif bool(val) != want:
                        _h._override("autotune", bool(val), want)

            cudnn.benchmark = Benchmark()

    amp = _h._knobs.get("amp")
    if amp is None:
        return
    tf32 = amp == "tf32"
    torch._C._set_cublas_allow_tf32(tf32)
    if tf32:
        torch._C._set_cudnn_allow_tf32(True)
    matmul = type(torch.backends.cuda.matmul)
    orig_setattr = matmul.__setattr__

    def setattr_(self, name, value):
        if not _h._off and name == "allow_tf32" and bool(value) != tf32:
            _h._override("amp", "tf32" if value else "off (allow_tf32=False)", amp)
            return None
        return orig_setattr(self, name, value)

    matmul.__setattr__ = setattr_
    orig_prec = torch.set_float32_matmul_precision

    def set_precision(precision):
        if not _h._off and (precision != "highest") != tf32:
            _h._override("amp", "set_float32_matmul_precision(%r)" % precision, amp)
            return None
        return orig_prec(precision)

    torch.set_float32_matmul_precision = set_precision


def install_threads(torch):
    """num_threads: torch.set_num_threads(n) now, and a script's own call reported and
    overruled. Without the knob the script's own count is read at its first step."""
    n = _h._knobs.get("num_threads")
    if not n:
        return
    orig = torch.set_num_threads
    orig(int(n))

    def set_num_threads(k):
        if _h._off:
            return orig(k)
        if int(k) != int(n):
            _h._override("num_threads", int(k), int(n))
        return None

    torch.set_num_threads = set_num_threads


def hold(ctx):
    """Keep tune's autocast, entered at a training forward, open past the model's call
    until the step's backward begins (`release`), as PyTorch's recipe places it:
    `with torch.autocast(...): out = model(x); loss = loss_fn(out, y)`, backward
    outside. A loss computed by the script's own function, outside the model, then
    runs under autocast too, in float32 where autocast's fp32 list has it. Before, the
    region ended with the model's call: pytorch/examples' VAE, whose loss is
    `F.binary_cross_entropy(recon_x, x)` in a function of its own, met bf16 outputs
    outside autocast and every amp trial crashed ("Found dtype Float but expected
    BFloat16"). Only where no autocast region was open at the forward (the script's own
    would end before the backward, and autocast's state is a stack)."""
    _h._tl.held = ctx
    _h._tl.release_due = False


def release():
    """End tune's held autocast (`hold`): the backward, the optimizer step, zero_grad or
    the step's end came. While a region the script opened inside it is still open
    (`with torch.autocast(enabled=False): loss = ...; loss.backward()`), it ends when
    that region does, so that autocast's state unwinds in the order it was entered."""
    tl = _h._tl
    ctx = getattr(tl, "held", None)
    if ctx is None:
        return
    if getattr(tl, "script_depth", 0) > 0:
        tl.release_due = True
        return
    tl.held = None
    tl.release_due = False
    try:
        ctx.__exit__(None, None, None)
    except Exception as e:
        _h._fail("autocast.__exit__", e)


def direct_forward(opening, args, dev):
    """tune's autocast opens at a training forward whose inputs a graph already made:
    computation with the model's weights ran before the first module call the hooks
    see, a model calling its `forward` directly (pytorch/examples' forward-forward
    layers, `self.forward(x)`) whose first matmul then ran in float32 (its amp trial
    measured 1.10-1.16x against 1.23-1.29x by hand). From then on it opens once each
    optimizer step ends (`reopen`), as the recipe's region opens before the forward.
    `opening`: tune's autocast opens at this training call."""
    try:
        if opening and any(getattr(a, "grad_fn", None) is not None for a in args):
            _h._state["early_amp"] = dev
    except Exception as e:
        _h._fail("autocast's opening", e)


def reopen(torch):
    """After an optimizer step, in a job whose forward starts outside the hooks
    (`direct_forward`): tune's autocast held from here until the next backward, zero_grad
    or optimizer step (`release`)."""
    dev = _h._state.get("early_amp")
    if dev is None or _h._off or getattr(_h._tl, "held", None) is not None:
        return
    dtype = autocast_dtype(torch, _h._knobs.get("amp"))
    try:
        if dtype is not None and not torch.is_autocast_enabled(dev):
            hold(enter(torch, dev, dtype))
    except Exception as e:
        _h._fail("autocast's opening", e)


def enter(torch, dev, dtype):
    """tune's own autocast region, entered: marked as tune's, so `install_autocast` does
    not read it as the script's."""
    _h._tl.ours = True
    try:
        ctx = torch.autocast(dev, dtype=dtype)
        ctx.__enter__()
    finally:
        _h._tl.ours = False
    return ctx


def autocast_dtype(torch, amp):
    return {"bf16": torch.bfloat16, "fp16": torch.float16}.get(amp)


def install_autocast(torch):
    """A script's own autocast (`with torch.autocast(...)`, the decorator, the
    torch.cuda.amp/torch.cpu.amp spellings) is what the script does for `amp` (recorded,
    so a trial of the same precision is the baseline again, not a finding), and takes
    tune's setting where the trial sets one, reported once."""
    amp = _h._knobs.get("amp")
    ac = torch.amp.autocast_mode.autocast
    orig_enter = ac.__enter__
    dtype = autocast_dtype(torch, amp)
    names = {torch.bfloat16: "bf16", torch.float16: "fp16"}

    def enter(self):
        # A region the script turns autocast off in (a loss kept in float32) stays off;
        # one under no_grad (an eval pass) says nothing of how the script trains.
        try:
            if not _h._off and self._enabled and not getattr(_h._tl, "ours", False):
                seen = names.get(self.fast_dtype, str(self.fast_dtype))
                if torch.is_grad_enabled():
                    _h._script_value("amp", seen)
                if amp is not None and self.fast_dtype != dtype:
                    _h._override("amp", "torch.autocast(%s)" % seen, amp)
                    if dtype is None:
                        self._enabled = False
                    else:
                        self.fast_dtype = dtype
            if not getattr(_h._tl, "ours", False) and getattr(_h._tl, "held", None) is not None:
                self._tune_inside = True
                _h._tl.script_depth = getattr(_h._tl, "script_depth", 0) + 1
        except Exception as e:
            _h._fail("autocast.__enter__", e)
        return orig_enter(self)

    def exit_(self, *exc):
        out = orig_exit(self, *exc)
        # A region the script opened inside tune's held one has closed: the held one
        # may end now, if its end came while the script's was open (`release`).
        if getattr(self, "_tune_inside", False):
            self._tune_inside = False
            tl = _h._tl
            tl.script_depth = max(getattr(tl, "script_depth", 1) - 1, 0)
            if tl.script_depth == 0 and getattr(tl, "release_due", False):
                release()
        return out

    orig_exit = ac.__exit__
    ac.__enter__ = enter
    ac.__exit__ = exit_

    gs = torch.amp.GradScaler
    orig_gs_init = gs.__init__

    @functools.wraps(orig_gs_init)
    def gs_init(self, *args, **kwargs):
        orig_gs_init(self, *args, **kwargs)
        try:
            if not getattr(_h._tl, "ours", False) and self.is_enabled():
                _h._state["script_scaler"] = True
        except Exception as e:
            _h._fail("GradScaler.__init__", e)

    gs.__init__ = gs_init


# torch.utils.checkpoint.checkpoint's own keywords, not the checkpointed function's.
_CHECKPOINT_ONLY = ("use_reentrant", "context_fn", "determinism_check", "debug", "preserve_rng_state")


def install_checkpoint(torch):
    """checkpoint: a script's activation checkpointing (torch.utils.checkpoint's
    checkpoint and checkpoint_sequential, which HF's gradient_checkpointing_enable and
    checkpoint_wrapper call too) is its "on"; under checkpoint = "off" each call runs as a
    plain call, so the trial measures the script without the recompute, at the memory the
    activations take. Patched on the module, so a later `from torch.utils.checkpoint
    import checkpoint` and checkpoint_sequential's own calls get it too."""
    try:
        import torch.utils.checkpoint as tuc
    except Exception as e:
        _h._fail("import torch.utils.checkpoint", e)
        return
    off = _h._knobs.get("checkpoint") == "off"
    orig, orig_seq = tuc.checkpoint, tuc.checkpoint_sequential

    def plain():
        # Under no_grad (an eval pass) checkpoint keeps everything it is given anyway.
        try:
            if _h._off or not torch.is_grad_enabled():
                return False
            # While dynamo traces a compiled model: the same choice, and no I/O for it to
            # trace (which would break the graph); the step's end says it
            # (tune_hook's first step, `checkpoint_seen`).
            if _h._tc.compiling():
                _h._state["checkpoint_seen"] = True
                return off
            _h._script_value("checkpoint", "on")
            if off:
                _h._override("checkpoint", "on", "off")
            return off
        except Exception as e:
            _h._fail("checkpoint", e)
            return False

    def checkpoint(function, *args, **kwargs):
        if not plain():
            return orig(function, *args, **kwargs)
        for k in _CHECKPOINT_ONLY:
            kwargs.pop(k, None)
        return function(*args, **kwargs)

    def checkpoint_sequential(functions, segments, input, *args, **kwargs):
        if not plain():
            return orig_seq(functions, segments, input, *args, **kwargs)
        if isinstance(functions, torch.nn.Sequential):
            functions = list(functions.children())
        for f in functions:
            input = f(input)
        return input

    checkpoint.__wrapped__ = orig
    checkpoint_sequential.__wrapped__ = orig_seq
    tuc.checkpoint = checkpoint
    tuc.checkpoint_sequential = checkpoint_sequential
