"""Regression (review session): the schedule cache takes const 0.0 and const -0.0 for the
same graph.

compiler/schedule.structure() keys a const node by its value, and 0.0 == -0.0 (with
equal hashes), so after `x * 0.0` has been compiled, `x * -0.0` (a baked constant:
-0.0 == 0 is in ir.build.BAKED) hits that schedule and runs the kernel that multiplies
by +0.0: the zeros get the wrong sign, and 1 / (x * -0.0) is +inf instead of -inf.
Fresh, the -0.0 graph computes the right values.  (compiler/common.py tells the two
constants apart by repr; the cache key should too.)"""
import numpy as np
import pytest

import needle as ndl


@pytest.mark.parametrize("lazy", [True, False], ids=["lazy", "eager"])
def test_negative_zero_constant_does_not_reuse_the_positive_zero_schedule(lazy):
    x = np.array([1.0, 2.0, -3.0, 0.5], dtype=np.float32)
    with ndl.lazy(lazy):
        t = ndl.Tensor(x, device=ndl.cpu())
        plus = (t * 0.0).numpy()
        minus = (t * -0.0).numpy()
    np.testing.assert_array_equal(np.signbit(plus), np.signbit(x.astype(np.float64) * 0.0))
    np.testing.assert_array_equal(np.signbit(minus), np.signbit(x.astype(np.float64) * -0.0))
    with np.errstate(divide="ignore"):
        np.testing.assert_array_equal(1.0 / minus, 1.0 / (x.astype(np.float64) * -0.0))
