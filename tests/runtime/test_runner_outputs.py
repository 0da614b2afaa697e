"""The runner's output plan: each requested output gets an array of its own shape,
also when several requests are one computed result (or views of it)."""
import numpy as np

import needle as ndl


def test_repeated_and_reshaped_outputs_of_one_result():
    rng = np.random.default_rng(0)
    a_np, b_np = rng.standard_normal((4, 6)).astype("float32"), rng.standard_normal((4, 6)).astype("float32")
    for _ in range(2):  # the second time runs the cached schedule
        with ndl.lazy(True):
            a, b = ndl.Tensor(a_np, requires_grad=False), ndl.Tensor(b_np, requires_grad=False)
            y = ops_exp(a + b)
            flat, again, t = y.reshape((24,)), y, y.transpose()
            ndl.realize(y, flat, again, t)
        expected = np.exp(a_np + b_np)
        np.testing.assert_allclose(y.numpy(), expected, rtol=1e-6)
        np.testing.assert_allclose(flat.numpy(), expected.reshape(24), rtol=1e-6)
        np.testing.assert_allclose(again.numpy(), expected, rtol=1e-6)
        np.testing.assert_allclose(t.numpy(), expected.T, rtol=1e-6)
        assert flat.shape == (24,) and t.shape == (6, 4)


def test_empty_and_scalar_free_outputs():
    with ndl.lazy(True):
        a = ndl.Tensor(np.zeros((0, 3), "float32"), requires_grad=False)
        x = ndl.Tensor(np.arange(5, dtype="float32"), requires_grad=False)
        e, s, p = a + a, x * 2, x * 3.5  # no run-time scalar, then one
        ndl.realize(e, s, p)
    assert e.numpy().shape == (0, 3)
    np.testing.assert_allclose(s.numpy(), np.arange(5) * 2)
    np.testing.assert_allclose(p.numpy(), np.arange(5) * 3.5)


def ops_exp(x):
    return ndl.ops.exp(x)
