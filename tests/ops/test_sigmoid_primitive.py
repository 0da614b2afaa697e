"""sigmoid is one IR primitive: one node in the lazy graph (not the fourteen of its
spelled-out formula), one compiled kernel in eager mode, the same values everywhere:
within 1 ulp of the float64 logistic function for float32 (codegen/vecmath), and within
a few float64 ulp for float64 (the overflow-free formula), saturating without overflow
and passing nan through, in lazy, eager compiled and eager numpy modes."""
import numpy as np
import pytest

import needle as ndl
from needle import ops
from needle.ir import toposort
from tests.codegen.test_vecmath_accuracy import within_one_ulp

X = np.array([-1e4, -700.0, -103.0, -87.5, -50.0, -17.0, -1.0, -1e-3, -0.0, 0.0, 1e-3, 0.5, 1.0, 17.0, 40.0,
              1e4, np.inf, -np.inf, np.nan], dtype=np.float64)


def reference(x64):
    """The logistic function in float64 (exact enough to round to float32 correctly
    but for double-rounding ties)."""
    with np.errstate(all="ignore"):  # both branches are evaluated: inf / inf where x = inf
        return np.where(x64 >= 0, 1 / (1 + np.exp(-x64)), np.exp(x64) / (1 + np.exp(x64)))


MODES = {"lazy": (True, ndl.cpu), "eager compiled": (False, ndl.cpu), "eager numpy": (False, ndl.cpu_numpy)}


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_values_at_the_edges(mode, dtype):
    lazy, device = MODES[mode]
    x = X.astype(dtype)
    with ndl.lazy(lazy):
        got = ops.sigmoid(ndl.Tensor(x, device=device(), dtype=dtype, requires_grad=False)).numpy()
    want = reference(x.astype(np.float64))
    assert got.dtype == np.dtype(dtype)
    assert np.array_equal(np.isnan(got), np.isnan(want))
    if dtype == "float32":
        assert within_one_ulp(got, want.astype(np.float32)).all(), list(zip(x, got, want))
    else:
        ok = ~np.isnan(want)
        np.testing.assert_allclose(got[ok], want[ok], rtol=8 * np.finfo(np.float64).eps, atol=0)


def test_one_node_in_the_lazy_graph():
    with ndl.lazy(True):
        x = ndl.Tensor(np.linspace(-3, 3, 8, dtype=np.float32), requires_grad=False)
        y = ops.sigmoid(x)
        ops_built = sorted(n.op for n in toposort([y._cached_data]))
    assert ops_built == ["buffer", "sigmoid"]


def test_integer_input_is_refused_when_built():
    with ndl.lazy(True):
        x = ndl.Tensor(np.arange(4), dtype="int32", requires_grad=False)
        with pytest.raises(ndl.errors.DTypeError, match="sigmoid"):
            ops.sigmoid(x)


def test_one_kernel_in_eager_mode():
    x = ndl.Tensor(np.linspace(-3, 3, 8, dtype=np.float32), requires_grad=False)
    with ndl.lazy(False):
        before = ndl.runtime.stats()["kernels_launched"]
        ops.sigmoid(x)
        assert ndl.runtime.stats()["kernels_launched"] - before == 1


@pytest.mark.parametrize("op, backward", [(ops.sigmoid, "SigmoidGrad"), (ops.tanh, "TanhGrad")])
def test_backward_is_one_tensor_op(op, backward):
    """The backward of sigmoid and tanh is one op (a lazy LSTM step builds 200 of them:
    one Tensor op each instead of four), with the textbook values:
    sigmoid' = y (1 - y), tanh' = 1 - y^2."""
    x64 = np.linspace(-4, 4, 9)
    x = ndl.Tensor(x64, dtype="float64")
    y = op(x)
    y.backward()
    assert type(x.grad.op).__name__ == backward
    s = 1 / (1 + np.exp(-x64))
    want = s * (1 - s) if op is ops.sigmoid else 1 - np.tanh(x64) ** 2
    np.testing.assert_allclose(x.grad.numpy(), want, rtol=1e-12, atol=1e-15)
