"""Regression (review of b13299f, low severity): add(assemble, assemble) with disjoint
pieces is rewritten into one assemble of all the pieces (ir/build.py, elementwise).
Without the rewrite each position of a piece holds 0.0 + piece = +0.0 where the piece
is -0.0 (IEEE: +0.0 + -0.0 = +0.0), as numpy and eager mode compute; with it the piece's
-0.0 is stored as is, so the summed gradient of two slices differs in the sign of zero
(visible through 1 / g, copysign, atan2).  Accepted and documented
(docs/differences-from-pytorch.md: compiled kernels do not keep IEEE's signed zeros,
LLVM's nsz flag allows the same): the values must be equal, the signs may differ."""
import numpy as np

import needle as ndl
from needle import ops


def test_sum_of_slice_gradients_equals_numpys_up_to_the_sign_of_zero():
    X, Z = np.ones((4, 3)), np.full((2, 3), -0.0)
    want = np.zeros((4, 3))
    want[0:2] += Z
    want[2:4] += Z
    with ndl.lazy(True):
        x = ndl.Tensor(X, device=ndl.cpu(), dtype="float64", requires_grad=True)
        z = ndl.Tensor(Z, device=ndl.cpu(), dtype="float64")
        (ops.summation(x[0:2] * z) + ops.summation(x[2:4] * z)).backward()
        got = x.grad.numpy()
    np.testing.assert_array_equal(got, want)  # -0.0 == 0.0: the sign of zero is not compared
