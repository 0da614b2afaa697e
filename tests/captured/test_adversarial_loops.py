"""An independent tester's 221 training loops (tests/captured/adversarial/first_loops.py), each
run plainly and through needle.jit: every one must be equal bit for bit, or run plainly
with needle's warning, or raise JitError — never silently different."""
import os
import sys
import warnings

import numpy as np
import pytest

from needle.errors import JitError

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "adversarial"))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "adversarial2"))
import first_loops  # noqa: E402
import second_loops  # noqa: E402

LOOPS = first_loops.LOOPS + second_loops.LOOPS
#: known differences (docs/jit.md): an input still pending when the call starts is computed
#: first, where a plain call computes it inside its own schedule, whose fusion can round the
#: last bit differently
KNOWN = {"pgd_same_input_object_data_rebound"}


def first_difference(a, b, path="out"):
    if type(a) is not type(b):
        return f"{path}: {type(a).__name__} vs {type(b).__name__}"
    if isinstance(a, np.ndarray):
        same = a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()
        return None if same else f"{path}: arrays differ"
    if isinstance(a, dict):
        if list(a) != list(b):
            return f"{path}: keys {list(a)} vs {list(b)}"
        return next((d for k in a for d in [first_difference(a[k], b[k], f"{path}[{k!r}]")] if d), None)
    if isinstance(a, (list, tuple)):
        if len(a) != len(b):
            return f"{path}: length {len(a)} vs {len(b)}"
        return next((d for i, (x, y) in enumerate(zip(a, b)) for d in [first_difference(x, y, f"{path}[{i}]")] if d),
                    None)
    if isinstance(a, float) and a != a and b != b:
        return None
    return None if a == b else f"{path}: {a!r} vs {b!r}"


@pytest.mark.parametrize("fn", LOOPS, ids=[f.__name__ for f in LOOPS])
def test_a_jitted_loop_is_never_silently_different(fn):
    if fn.__name__ in KNOWN:
        pytest.xfail("a known difference (docs/jit.md)")
    try:
        plain = fn(False)
    except AttributeError as e:  # (an API the loop expects that needle lacks: nothing to compare)
        pytest.skip(f"the plain run needs {e}")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            jitted = fn(True)
        except JitError:
            return
    said = [w for w in caught if "needle.jit" in str(w.message)]
    difference = first_difference(plain, jitted)
    assert difference is None or said, f"silently different: {difference}"
