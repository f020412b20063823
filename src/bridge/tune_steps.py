"""One training step out of the job's optimizer steps, loaded by tune_hook once torch is
imported: with one optimizer each of its steps ends a training step; with several (a
GAN's discriminator and generator, a recommender's sparse and dense optimizers) a
training step is one round of them. Apart from tune_hook so that each file stays under
the project's 800 lines.
"""

_h = None  # tune_hook, for its state and its step end

# What the hooks count per training step, carried into the next step when a round of
# optimizer steps is closed after the next step's work began.
COUNTERS = ("batch", "fwd_batch", "backwards", "tokens", "fwd_tokens", "opt_steps")


def install(hook):
    global _h
    _h = hook


def stepped(opt, t):
    """An optimizer step ended at t. With one optimizer that is the training step's end.
    With several alive, a step is one round of them (a GAN steps its discriminator and
    its generator on each batch: counted as two steps, DCGAN's throughput read twice its
    own), so the step stays open until an optimizer steps again (close_cycle)."""
    s = _h._state
    s["opt_steps"] += 1
    if sum(1 for r in s["optimizers"] if r() is not None) <= 1:
        s["cycle"].clear()
        s["snap"] = None
        _h._step_end(t)
        return
    s["cycle"].add(id(opt))
    s["snap"] = (t, dict(_h._acc), {k: s[k] for k in COUNTERS})


def close_cycle():
    """End the open round of optimizer steps as it stood at its last optimizer step; what
    came after (the next batch, its forward and backward) carries into the next step."""
    s = _h._state
    s["cycle"].clear()
    if s["snap"] is None:
        return
    t, acc, counts = s["snap"]
    s["snap"] = None
    now_acc = dict(_h._acc)
    now_counts = {k: s[k] for k in COUNTERS}
    _h._acc.update(acc)
    s.update(counts)
    try:
        _h._step_end(t)
    finally:
        for k in _h._acc:
            _h._acc[k] = now_acc[k] - acc[k]
        for k in COUNTERS:
            s[k] = now_counts[k] - counts[k]
