"""A fourth independent tester's training loops (tests/captured/adversarial4), each run
plainly and through needle.jit in this process: the observations (losses, parameters,
optimizer state, returned objects and tensors' metadata, numpy's global RNG) must be
equal bit for bit, or needle must say so (a warning, or JitError) — never silently
different.  They found returned objects frozen at the capture, numpy copies made in C
replayed as constants, a JitError swallowed by the step, jitted methods bound by
equality, and more (the loops name them)."""
import importlib
import os
import sys
import warnings

import numpy as np
import pytest

from needle.errors import JitError

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "adversarial4"))
import fourth_harness as h  # noqa: E402

MODULES = [importlib.import_module(f"fourth_loops_{n:02d}") for n in range(1, 14)]
LOOPS = [(m, name) for m in MODULES for name in sorted(vars(m)) if name.startswith("t_")]


def _observed(module, name):
    """What the loop observed, and numpy's global RNG after it, from the module's globals
    as they were written (a loop may refill its module's arrays), or the error it raised."""
    try:
        return getattr(importlib.reload(module), name)(), h.snap(list(np.random.get_state()[1:3]))
    except JitError:
        raise
    except Exception as e:  # (the plain loop's own error: the jitted one must raise it too)
        return type(e)


@pytest.mark.parametrize("module,name", LOOPS, ids=[f"{m.__name__[-2:]}-{n}" for m, n in LOOPS])
def test_a_jitted_loop_is_never_silently_different(module, name):
    h.MODE = "plain"
    plain = _observed(module, name)
    h.MODE = "jit"
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                jitted = _observed(module, name)
            except JitError:
                return  # (needle said so)
    finally:
        h.MODE = "plain"
        h.JITS.clear()
    if isinstance(plain, type) or isinstance(jitted, type):
        assert jitted is plain, f"plain: {plain}, jitted: {jitted}"
        return
    said = [str(w.message) for w in caught if "needle.jit" in str(w.message)]
    differences = h.diff(plain, jitted, "observed")
    assert not differences or said, f"silently different: {differences[:5]}"
