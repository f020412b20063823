"""A sweep trial's saves (#31), loaded by tune_hook: torch.save to a path goes to the
trial's scratch folder (TUNE_BRIDGE_SAVES, which tune removes after the trial), and
torch.load of a path the trial saved reads it back from there.

A trial is tune's run of the user's script with a knob changed. A script that saves a
checkpoint every N steps and resumes from it (ckpt/last.pt) had each trial overwrite the
user's checkpoint and the next trial resume from the last one's: a sweep of
scripts/realistic-style `resume.py` moved the user's checkpoint from step 50 to 410.
Now every trial starts from the user's files as they were, and leaves them so. Outside a
sweep (`tune watch` follows the user's own run) nothing is redirected.
"""

import os

_h = None
_dir = None


def _target(f):
    """Where a save to `f` goes in the trial: None for what is not a path (a buffer, an
    open file: the script chose that file itself)."""
    if not isinstance(f, (str, bytes, os.PathLike)):
        return None
    path = os.path.abspath(os.fsdecode(os.fspath(f)))
    return os.path.join(_dir, path.lstrip(os.sep))


def install(torch, hook):
    global _h, _dir
    _h = hook
    _dir = os.environ.get("TUNE_BRIDGE_SAVES")
    if not _dir:
        return
    save, load = torch.save, torch.load

    def tune_save(obj, f, *args, **kwargs):
        to = _target(f)
        if to is None:
            return save(obj, f, *args, **kwargs)
        os.makedirs(os.path.dirname(to), exist_ok=True)
        _h._notice(
            "torch.save(%r) went to the trial's scratch folder, which tune removes after "
            "the trial, not over your file: a sweep leaves what your script saved as it was, "
            "and every trial starts from it" % (os.fsdecode(os.fspath(f)),)
        )
        return save(obj, to, *args, **kwargs)

    def tune_load(f, *args, **kwargs):
        to = _target(f)
        if to is not None and os.path.exists(to):
            f = to
        return load(f, *args, **kwargs)

    tune_save.__wrapped__ = save
    tune_load.__wrapped__ = load
    torch.save = tune_save
    torch.load = tune_load
