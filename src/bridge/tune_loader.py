"""tune's hooks on torch's DataLoader, loaded by tune_hook once torch is imported: the
trial's loader knobs (num_workers, pin_memory, persistent_workers, prefetch_factor,
batch_size) applied to every DataLoader the script builds, what the script sets itself
read as its own values, and the time the loop waits for each batch. Apart from tune_hook
so that each file stays under the project's 800 lines.
"""

import dataclasses
import functools
import os
import threading
import weakref
from collections.abc import Mapping

_h = None  # tune_hook, for its state and event helpers


def _head(batch):
    """The batch's first element that is no list or tuple; a dataclass (a collate_fn's
    `Batch(features, target)`) as the mapping of its fields, which read "batch size
    unknown" before."""
    x = batch
    while isinstance(x, (list, tuple)) and x:
        x = x[0]
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        x = {f.name: getattr(x, f.name, None) for f in dataclasses.fields(x)}
    return x


def _mapping_of(batch):
    """The batch's mapping of named tensors, if it is one: a dict, or a Mapping that is no
    dict (transformers' BatchEncoding, which DataCollatorWithPadding returns, is a
    UserDict: before, its samples read 0), alone or first in a tuple; else None."""
    x = _head(batch)
    return x if isinstance(x, Mapping) and x else None


def _first_leaf(batch):
    x = _head(batch)
    if isinstance(x, Mapping) and x:
        # A tokenizer's batch names its ids; a dict ordered {"labels", "input_ids"} would
        # give the labels' [B] and no tokens.
        x = x["input_ids"] if "input_ids" in x else next(iter(x.values()))
    return x


def tokens_of_batch(batch, x):
    """Tokens of a batch whose first tensor is `x`: its attention mask's ones where the
    batch is a mapping with an `attention_mask` of `x`'s shape (padding is no token: a
    padded batch of lengths 8-64 counted 64 a sequence), else `_tokens_of(x)`. A mask on
    an accelerator is not summed: that would wait for the device."""
    tokens = _tokens_of(x)
    m = _mapping_of(batch)
    if not tokens or m is None or "attention_mask" not in m:
        return tokens
    try:
        mask = m["attention_mask"]
        if tuple(mask.shape) == tuple(x.shape) and mask.device.type == "cpu":
            return int(mask.count_nonzero())
    except Exception:
        pass
    return tokens


def _size_of(x):
    try:
        shape = getattr(x, "shape", None)
        if shape is not None and len(shape) > 0:
            return int(shape[0])
    except Exception:
        pass
    return 0


def _tokens_of(x):
    """Tokens of a batch of token ids: an integer tensor of shape [B, T] as the model's
    input; 0 for anything else (images, features, labels)."""
    try:
        dtype = getattr(x, "dtype", None)
        if dtype is None or x.dim() != 2 or dtype.is_floating_point or dtype.is_complex:
            return 0
        if str(dtype) == "torch.bool":
            return 0
        return int(x.shape[0]) * int(x.shape[1])
    except Exception:
        return 0


def _shape2(x):
    """(first, second) dimensions of a batch's first tensor `x`, for a seq-first model's
    correction; None for a tensor of fewer than two."""
    try:
        shape = x.shape
        return (int(shape[0]), int(shape[1])) if len(shape) >= 2 else None
    except Exception:
        return None


# The seq-first layers (nn.LSTM, nn.GRU, nn.RNN without batch_first, and the
# Transformer layers without it) of each model this job trains, found at its first
# training forward: their input is [T, B, ...], so the model's input is too.
_seq_first = weakref.WeakKeyDictionary()
_tl = threading.local()


def _seq_layers(torch, model):
    nn = torch.nn
    kinds = (nn.RNNBase, nn.TransformerEncoderLayer, nn.TransformerDecoderLayer)
    return [m for m in model.modules() if isinstance(m, kinds) and not getattr(m, "batch_first", True)]


def _seq_pre_hook(module, args):
    """The batch a seq-first layer sees, [T, B, ...] or a PackedSequence, corrects the
    samples counted from its model's input by its first dimension (T): the model's own
    inputs' count, or the DataLoader batch's (`_tl.counted`: which count, its n, and for
    the loader's the batch's second dimension, which must be the layer's B: the model
    may be fed a slice of the batch, `x[:-1]` for a language model's inputs)."""
    # While dynamo traces a compiled model the hook passes through (a traced side effect
    # would break its graph); its samples then stay the input's first dimension.
    counted = getattr(_tl, "counted", None)
    if counted is None or not args or _h._tc.compiling():
        return
    _tl.counted = None
    key, counted, columns = counted
    x = args[0]
    b = 0
    try:
        sizes = getattr(x, "batch_sizes", None)
        if sizes is not None:
            b = int(sizes[0])
        elif getattr(x, "dim", None) is not None and x.dim() == 3:
            b = int(x.shape[1])
    except Exception:
        return
    if b > 0 and columns in (None, b):
        _h._state[key] += b - counted


# Each trained model's first layer with weights and the input rank that layer takes
# without a batch dimension (nn.Linear's [in], Conv2d's [C, H, W]), or None.
_first_layer = weakref.WeakKeyDictionary()


def _unbatched_rank(torch, model):
    nn = torch.nn
    ranks = ((nn.Linear, 1), (nn.Conv1d, 2), (nn.Conv2d, 3), (nn.Conv3d, 4))
    for m in model.modules():
        if next(m.parameters(recurse=False), None) is None:
            continue
        for kind, rank in ranks:
            if isinstance(m, kind):
                return m, rank
        return None
    return None


def input_counts(model, args):
    """(samples, tokens) of a training forward's input without a DataLoader. A model fed
    one unbatched sample (pytorch/examples' actor_critic calls its policy on each [4]
    state) is one sample, not the state's length: its first layer (a Linear, a conv)
    takes the input at the rank it has without a batch dimension, with the layer's
    width (before, the watch read 4 samples for each environment step)."""
    x = _first_leaf(args)
    n, tokens = _size_of(x), tokens_of_batch(args, x)
    try:
        first = _first_layer.get(model, False)
        if first is False:
            first = _unbatched_rank(_h._torch, model)
            _first_layer[model] = first
        if first is not None and n > 0 and x.is_floating_point() and x.dim() == first[1]:
            layer = first[0]
            width = getattr(layer, "in_features", None) or getattr(layer, "in_channels", None)
            if width == int(x.shape[0]):
                n = 1
    except (TypeError, AttributeError):  # a model that cannot be weakly referenced
        pass
    return n, tokens


def count_inputs(model, n, tokens):
    """A training forward of `model` fed `n` samples (its input's first dimension) and
    `tokens` token ids, without a DataLoader. A seq-first model (pytorch/examples'
    word_language_model feeds its LSTM [35, 20] ids: 35 steps of 20 sequences) has its
    samples from its first seq-first layer's batch dimension instead, when that layer runs
    (before, the watch read 35 samples a step for its 20)."""
    s = _h._state
    s["fwd_batch"] += n
    s["fwd_tokens"] += tokens
    _watch_seq(model, ("fwd_batch", n, None))


def loader_input(model):
    """A training forward of `model` with a DataLoader. Where the loader's last batch is
    [T, B] token ids (a collate_fn that pads with `pad_sequence` at its default,
    batch_first=False, as pytorch/examples' SNLI had its batches from torchtext), a
    seq-first model corrects that batch's samples (its T) to its LSTM's B, once per batch:
    a batch-first batch [B, T] transposed for the model is B already, and its LSTM's
    batch (B) is not the batch's second dimension (T), so it stays."""
    s = _h._state
    last = s.get("last_batch")
    if not last:
        return
    s["last_batch"] = None
    _watch_seq(model, ("batch",) + last)


def _watch_seq(model, counted):
    """The first seq-first layer of `model`, if it has one, is to correct `counted`."""
    try:
        layers = _seq_first.get(model)
        if layers is None:
            layers = _seq_layers(_h._torch, model)
            _seq_first[model] = layers
            if layers:
                layers[0].register_forward_pre_hook(_seq_pre_hook)
        _tl.counted = counted if layers else None
    except TypeError:  # a model that cannot be weakly referenced
        _tl.counted = None


def call_ended():
    """The outermost model call returned: a seq-first layer run later is not its batch."""
    _tl.counted = None


def _batch_injectable(self, given, want):
    """batch_size can replace the script's only where the DataLoader batches by it: not
    with a batch_sampler (its batches are the sampler's) nor batch_size=None (samples).
    Where it cannot, the reason waits on the loader until it yields a training batch
    (`next_`): only the trained-on loader's counts. A batch sampler of the trial's size
    took it already: accelerate rebuilds the Hugging Face Trainer's loader around the
    first one's sampler, and its batch_size=16 trial, which measured 1.64x, was called
    "not applicable" and its gain drift."""
    sampler = given.get("batch_sampler")
    if sampler is not None:
        if getattr(sampler, "batch_size", None) != want:
            self._tune_na = "the DataLoader takes a batch_sampler: its batches are the sampler's"
        return False
    if "batch_size" in given and given["batch_size"] is None:
        self._tune_na = "the DataLoader is built with batch_size=None (no batching)"
        return False
    return True


def _replay_check(it, batch):
    """An IterableDataset that does not shard by worker (torch.utils.data.get_worker_info)
    gives each of N workers the whole stream: more workers repeat every sample instead of
    loading faster, and a trial's samples/s counts each of them N times. Seen on the
    first batches, which come from the workers in turn: worker 1's first batch equal to
    worker 0's, where worker 0's second differs (so the stream is not one constant
    batch). A stream seeded apart per worker, or not at all, is not caught."""
    n = getattr(it, "_num_workers", 0)
    seen = getattr(it, "_tune_seen", None)
    if n < 2 or seen is False:
        return
    if seen is None:
        from torch.utils.data import IterableDataset

        if not isinstance(getattr(it, "_dataset", None), IterableDataset):
            it._tune_seen = False
            return
        seen = it._tune_seen = []
    torch = _h._torch
    x = _first_leaf(batch)
    if not torch.is_tensor(x):
        it._tune_seen = False
        return
    seen.append(x.detach().clone() if len(seen) < 2 else x)
    if len(seen) <= n:
        return
    it._tune_seen = False

    def same(a, b):
        return a.shape == b.shape and a.dtype == b.dtype and bool(torch.equal(a, b))

    if same(seen[0], seen[1]) and not same(seen[0], seen[n]):
        why = (
            "the DataLoader's IterableDataset gives each of its %d workers the whole stream "
            "(worker 1's first batch equals worker 0's): more workers repeat every sample "
            "instead of loading faster; shard the stream by "
            "torch.utils.data.get_worker_info() first" % n
        )
        _h._notice(why)
        if _h._once("stream_replayed"):
            _h._emit({"ev": "stream_replayed", "workers": n})
        if "num_workers" in _h._knobs:
            _h._not_applicable("num_workers", why)


def install(torch, hook):
    global _h
    _h = hook
    from torch.utils.data import dataloader as dl
    import inspect

    orig_init = dl.DataLoader.__init__
    sig = inspect.signature(orig_init)
    dl_knobs = ("num_workers", "pin_memory", "persistent_workers", "prefetch_factor", "batch_size")

    # functools.wraps: `inspect.signature` of the patched method is DataLoader's own.
    # Lightning reads it to re-create a loader for a DistributedSampler (its DDP): with
    # `(self, *args, **kwargs)` it found no `dataset` parameter and every DDP job failed
    # "'DataLoader' object has no attribute '__dataset'".
    @functools.wraps(orig_init)
    def init(self, *args, **kwargs):
        if _h._off:
            return orig_init(self, *args, **kwargs)
        try:
            given = _loader_args(self, args, kwargs)
        except TypeError:
            return orig_init(self, *args, **kwargs)  # let DataLoader name the mistake
        except Exception as e:
            _h._fail("DataLoader.__init__", e)
            return orig_init(self, *args, **kwargs)
        return orig_init(self, **given)

    def _loader_args(self, args, kwargs):
        """The DataLoader's arguments with the trial's knobs applied."""
        given = dict(sig.bind(self, *args, **kwargs).arguments)
        given.pop(next(iter(sig.parameters)), None)
        extra = given.pop("kwargs", {}) if "kwargs" in sig.parameters else {}
        _loader_script_values(self, given)
        for knob in dl_knobs:
            if knob not in _h._knobs:
                continue
            if knob == "batch_size" and not _batch_injectable(self, given, _h._knobs[knob]):
                continue
            want = _h._knobs[knob]
            if knob in given and given[knob] is not None and given[knob] != want:
                _h._override(knob, given[knob], want)
            given[knob] = want
        if not given.get("num_workers") and any(k in _h._knobs for k in dl_knobs):
            # Valid only with worker processes: this DataLoader loads on the main process.
            for knob in ("prefetch_factor", "persistent_workers"):
                if knob in _h._knobs and _h._knobs[knob] != _h._DEFAULTS[knob]:
                    _h._not_applicable(
                        knob, "needs num_workers > 0; this DataLoader loads in the main process"
                    )
            given.pop("prefetch_factor", None)
            if given.get("persistent_workers"):
                given["persistent_workers"] = False
        given.update(extra)
        return given

    def _loader_script_values(self, given):
        """The loader's own settings, kept on it until it yields a training batch: the
        script's values are the trained-on loader's. Lightning builds the validation
        loader first (its sanity check), and its batch_size=256 was read as the
        script's where the training loader's was 64."""
        own = {}
        sampler = given.get("batch_sampler")
        for knob in dl_knobs:
            value = given.get(knob)
            if knob == "batch_size" and sampler is not None:
                # Its batches are the sampler's (accelerate's shard of the Hugging Face
                # Trainer's loader): batch_size's default 1 is not the script's.
                value = getattr(sampler, "batch_size", None)
            elif knob == "batch_size" and knob in given and value is None:
                continue  # batch_size=None: the dataset's items are the batches
            elif value is None and knob in sig.parameters:
                value = sig.parameters[knob].default
            if isinstance(value, (bool, int)):
                own[knob] = value
        self._tune_own = own
        self._tune_na = None

    # Always: the script's own loader settings are read even where no loader knob is
    # swept (cheap: once per DataLoader, never per batch).
    dl.DataLoader.__init__ = init

    orig_iter = dl.DataLoader._get_iterator

    @functools.wraps(orig_iter)
    def get_iterator(self):
        it = orig_iter(self)
        try:
            it._tune_own = getattr(self, "_tune_own", None)
            it._tune_na = getattr(self, "_tune_na", None)
        except Exception:
            pass
        return it

    dl.DataLoader._get_iterator = get_iterator

    orig_next = dl._BaseDataLoaderIter.__next__

    def next_(self):
        if _h._off:
            return orig_next(self)
        # A batch fetched while the trained model is in eval mode is the evaluation's:
        # its wait is evaluation time and its samples are not trained on.
        evaluating = _h._st.evaluating()
        if not evaluating:
            _h._st.manual(_h._now())
        t = _h._now()
        loading = getattr(_h._tl, "loading", False)
        _h._tl.loading = True
        try:
            batch = orig_next(self)
        finally:
            _h._tl.loading = loading
            _h._add("eval" if evaluating else "data_wait", _h._now() - t)
        if os.getpid() == _h._pid and not evaluating:
            # Gradients off: no training batch (Lightning's sanity check runs its
            # validation under inference_mode before any model is known to train).
            own = getattr(self, "_tune_own", None)
            if own is not None and _h._torch.is_grad_enabled():
                self._tune_own = None
                for knob, value in own.items():
                    _h._script_value(knob, value)
                if getattr(self, "_tune_na", None):
                    _h._not_applicable("batch_size", self._tune_na)
            _replay_check(self, batch)
            # Summed over the step: under gradient accumulation one optimizer step
            # consumes several batches.
            x = _first_leaf(batch)
            _h._state["batch"] += _size_of(x)
            _h._state["tokens"] += tokens_of_batch(batch, x)
            _h._state["loader_batches"] += 1
            _h._state["last_batch"] = _shape2(x)
        return batch

    dl._BaseDataLoaderIter.__next__ = next_
