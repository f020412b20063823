# Written by tune (the `tune watch` / `tune sweep` PyTorch bridge); see tune_hook.py.
# Activates tune's hooks, then runs the sitecustomize this one shadows, if any.
import os
import sys

try:
    import tune_hook

    tune_hook.activate()
except Exception as _e:  # never break the user's script
    sys.stderr.write("tune: PyTorch hooks disabled: %s\n" % (_e,))

_here = os.path.dirname(os.path.abspath(__file__))
for _d in sys.path:
    if _d and os.path.abspath(_d) != _here and os.path.isfile(os.path.join(_d, "sitecustomize.py")):
        import importlib.util

        _spec = importlib.util.spec_from_file_location("_shadowed_sitecustomize", os.path.join(_d, "sitecustomize.py"))
        if _spec is not None and _spec.loader is not None:
            _spec.loader.exec_module(importlib.util.module_from_spec(_spec))
        break
