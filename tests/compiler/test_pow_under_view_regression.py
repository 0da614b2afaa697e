"""Regression (fuzzer, review session): x ** 0.5 under a pad is lowered to pow, not sqrt.

View folding pushes the pad through `pow %x, const 0.5`, so the exponent reaches
kernel_exprs.power as a masked read of the constant (not a K.Const) and the kernel
computes pow(x, 0.5): pow(-inf, 0.5) = inf and pow(-0.0, 0.5) = +0.0, where numpy (and
needle without the pad, and in eager mode) give sqrt's nan and -0.0."""
import numpy as np

import needle as ndl
from needle import ops


def test_power_half_under_pad_is_sqrt():
    x = np.array([[-np.inf, -1.0, 4.0], [np.inf, -0.0, 9.0]], dtype=np.float32)
    with np.errstate(invalid="ignore"):
        want = np.pad(np.sqrt(x.astype(np.float64)), ((0, 0), (0, 1)))
    with ndl.lazy(True):
        got = ops.pad(ndl.Tensor(x, device=ndl.cpu()) ** 0.5, ((0, 0), (0, 1))).numpy()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(got[~np.isnan(want)], want[~np.isnan(want)])
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
