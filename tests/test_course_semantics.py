"""The course framework's exact semantics (COURSE.md): numpy-backend dtypes, `a - b` as
add(a, negate(b)), and scalars given as numpy scalars or 1-element arrays."""
import numpy as np
import pytest

import needle as ndl
from needle import ops
from tests.modes import execution_mode  # noqa: F401  (every test runs lazily and eagerly)


def test_default_backend_keeps_float32():
    assert ndl.Tensor([[4.0], [4.55]]).dtype == "float32"
    assert ndl.Tensor(np.random.randn(3)).dtype == "float32"


@pytest.mark.parametrize("device", [ndl.cpu(), ndl.cpu_numpy()], ids=str)
def test_subtraction_is_add_of_negate(device):
    a_np, b_np = np.random.randn(3, 4), np.random.randn(4)
    a = ndl.Tensor(a_np, device=device, dtype="float64")
    b = ndl.Tensor(b_np, device=device, dtype="float64")
    for c, want, ga, gb in ((a - b, a_np - b_np, 1.0, -3.0), (b.__rsub__(a_np), a_np - b_np, None, -3.0)):
        assert isinstance(c.op, ops.EWiseAdd)
        assert isinstance(c.inputs[1].op, ops.Negate)
        np.testing.assert_allclose(c.numpy(), want, rtol=1e-12)
        c.sum().backward()
        if ga is not None:
            np.testing.assert_allclose(a.grad.numpy(), np.full((3, 4), ga))
        np.testing.assert_allclose(b.grad.numpy(), np.full(4, gb))  # summed over the broadcast rows
    np.testing.assert_allclose((2.0 - a).numpy(), 2.0 - a_np, rtol=1e-12)


SCALARS = [2.5, np.float64(2.5), np.float32(2.5), np.array([2.5]), np.array(2.5), np.array([[2.5]]), 2]


@pytest.mark.parametrize("scalar", SCALARS, ids=lambda s: f"{type(s).__name__}{np.shape(s)}")
@pytest.mark.parametrize("name, fn", [("add_scalar", lambda x, s: x + s), ("mul_scalar", lambda x, s: x * s),
                                      ("divide_scalar", lambda x, s: x / s), ("power_scalar", lambda x, s: x ** s)])
def test_scalar_ops_accept_numpy_scalars_and_one_element_arrays(scalar, name, fn):
    x_np = np.random.uniform(0.5, 2.0, size=(2, 3))
    x = ndl.Tensor(x_np, dtype="float32")
    out = getattr(ops, name)(x, scalar=scalar)
    assert out.shape == (2, 3) and out.dtype == "float32"  # the tensor's dtype, not the scalar's
    np.testing.assert_allclose(out.numpy(), fn(x_np, float(np.asarray(scalar).item())), rtol=1e-6)


@pytest.mark.parametrize("bad", [np.array([1.0, 2.0]), "2", None, np.array([True])])
def test_scalar_ops_reject_non_scalars(bad):
    x = ndl.Tensor(np.ones((2, 2)))
    with pytest.raises(ndl.errors.DTypeError, match="divide_scalar"):
        ops.divide_scalar(x, scalar=bad)


def test_divide_scalar_gradient_with_an_array_scalar():
    s = np.random.randn(1)
    x = ndl.Tensor(np.random.randn(5, 4), dtype="float64")
    ops.divide_scalar(x, scalar=s).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), np.full((5, 4), 1 / s[0]), rtol=1e-12)


def test_topological_order_of_a_matmul_graph_with_subtraction():
    # the course's third topological-order case: (a @ b + b - a) @ a has 7 nodes
    a = ndl.Tensor(np.asarray([[1.4335016, 0.30559972], [0.08130171, -1.15072371]]))
    b = ndl.Tensor(np.asarray([[1.34571691, -0.95584433], [-0.99428573, -0.04017499]]))
    e = (a @ b + b - a) @ a
    order = ndl.autograd.find_topo_sort([e])
    an, bn = a.numpy().astype(np.float64), b.numpy().astype(np.float64)
    want = [an, bn, an @ bn, an @ bn + bn, -an, an @ bn + bn - an, (an @ bn + bn - an) @ an]
    assert len(order) == len(want)
    for got, ref in zip(order, want):
        np.testing.assert_allclose(got.numpy(), ref, rtol=1e-6, atol=1e-6)
