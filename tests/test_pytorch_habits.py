"""A PyTorch user's first hour (SPEC "Tensors and autograd", issue 36): the names and
keywords they type, each checked against torch when it is installed and against numpy
otherwise, lazily, eagerly (tests/modes.py) and on the numpy backend (a subprocess)."""
import math
import os
import subprocess
import sys

import numpy as np
import pytest

import needle as ndl
from needle import nn, optim
from needle.errors import ArgumentError
import needle.nn.functional as F
from tests.modes import execution_mode  # noqa: F401  (lazily and eagerly)

try:
    import torch  # noqa: F811
except Exception:  # (benchmark-only: the tests fall back on numpy references)
    torch = None

RNG = np.random.default_rng(0)
X = RNG.standard_normal((3, 4)).astype("float32")


def T(a, **kw):
    return ndl.Tensor(np.asarray(a), **kw)


def test_size_dim_view_flatten_transpose():
    x = T(X)
    assert x.size() == (3, 4) and x.size(1) == 4 and x.size == 12 and x.dim() == 2 and x.numel() == 12
    assert x.view(4, 3).shape == (4, 3) and x.view(-1).shape == (12,)
    np.testing.assert_array_equal(x.flatten().numpy(), X.reshape(-1))
    np.testing.assert_array_equal(T(np.zeros((2, 3, 4))).flatten(1).shape, (2, 12))
    np.testing.assert_array_equal(x.transpose(0, 1).numpy(), X.T)
    np.testing.assert_array_equal(x.transpose().numpy(), X.T)  # (the course's: the last two axes)


def test_casts_clone_and_tolist():
    x = T(X)
    assert x.float().dtype == "float32" and x.long().dtype == "int64" and x.bool().dtype == "bool"
    np.testing.assert_array_equal(x.long().numpy(), X.astype(np.int64))
    np.testing.assert_array_equal(x.bool().numpy(), X != 0)
    c = x.clone()
    (c * 2).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.full(X.shape, 2.0))
    assert x.tolist() == X.tolist()


@pytest.mark.parametrize("name", ["sum", "mean", "max", "min", "argmax", "argmin", "var", "std"])
def test_every_reduction_takes_dim_axis_and_keepdim(name):
    x = T(X)
    ref = {"sum": np.sum, "mean": np.mean, "max": np.max, "min": np.min, "argmax": np.argmax,
           "argmin": np.argmin, "var": lambda a, axis: np.var(a, axis=axis, ddof=1),
           "std": lambda a, axis: np.std(a, axis=axis, ddof=1)}[name]
    for kw in ({"dim": 1}, {"axis": 1}):
        np.testing.assert_allclose(getattr(x, name)(**kw).numpy(), ref(X, axis=1), rtol=1e-5)
    if name not in ("argmax", "argmin"):
        assert getattr(x, name)(dim=0, keepdim=True).shape == (1, 4)
    with pytest.raises(ArgumentError, match=f"{name}: unexpected keyword 'dims'"):
        getattr(x, name)(dims=1)


def test_module_functions():
    a, b = T(X), T(X * 2)
    np.testing.assert_array_equal(ndl.cat([a, b], dim=1).numpy(), np.concatenate([X, 2 * X], 1))
    np.testing.assert_array_equal(ndl.stack([a, b], dim=1).numpy(), np.stack([X, 2 * X], 1))
    np.testing.assert_array_equal(ndl.where(a > 0, a, b).numpy(), np.where(X > 0, X, 2 * X))
    assert ndl.arange(5).dtype == "int64" and ndl.arange(0, 1, 0.5).dtype == "float32"
    np.testing.assert_array_equal(ndl.full((2, 2), 7.0).numpy(), np.full((2, 2), 7.0))
    ndl.manual_seed(3)
    first = ndl.randn(2, 3).numpy(), ndl.rand((2,)).numpy()
    ndl.manual_seed(3)
    assert np.array_equal(first[0], ndl.randn(2, 3).numpy()) and np.array_equal(first[1], ndl.rand(2).numpy())


def test_comparisons_give_masks():
    x = T(X)
    assert (x > 0).dtype == "bool"
    np.testing.assert_array_equal(x[x > 0].numpy(), X[X > 0])
    pred, y = T([1, 2, 3], dtype="int64"), T([1, 0, 3], dtype="int64")
    assert abs(float(pred.eq(y).float().mean().numpy()) - 2 / 3) < 1e-6


def reference(name, *args, **kw):
    """torch.nn.functional's value when torch is installed, else numpy's."""
    if torch is not None:
        targs = [torch.tensor(a) if isinstance(a, np.ndarray) else a for a in args]
        return getattr(torch.nn.functional, name)(*targs, **kw).detach().numpy()
    x = args[0].astype(np.float64)
    if name == "gelu":
        erf = np.vectorize(math.erf)
        return x * 0.5 * (1 + erf(x / math.sqrt(2)))
    if name in ("softmax", "log_softmax"):
        e = np.exp(x - x.max(-1, keepdims=True))
        s = e / e.sum(-1, keepdims=True)
        return s if name == "softmax" else np.log(s)
    if name == "cross_entropy":
        logp = reference("log_softmax", x, dim=-1)
        return -logp[np.arange(len(args[1])), args[1]].mean()
    if name == "linear":
        return x @ args[1].T + args[2]
    if name == "layer_norm":
        axes = tuple(range(x.ndim - len(args[1]), x.ndim))
        return (x - x.mean(axes, keepdims=True)) / np.sqrt(x.var(axes, keepdims=True) + 1e-5)
    raise AssertionError(name)


def test_functional_forms_match_torch():
    x = T(X)
    np.testing.assert_allclose(F.gelu(x).numpy(), reference("gelu", X), rtol=1e-5, atol=3e-7)
    np.testing.assert_allclose(nn.GELU()(x).numpy(), reference("gelu", X), rtol=1e-5, atol=3e-7)
    np.testing.assert_allclose(F.softmax(x, dim=-1).numpy(), reference("softmax", X, dim=-1), rtol=1e-5)
    np.testing.assert_allclose(F.log_softmax(x, dim=-1).numpy(), reference("log_softmax", X, dim=-1), rtol=1e-5)
    labels = np.array([0, 3, 1])
    np.testing.assert_allclose(F.cross_entropy(x, T(labels, dtype="int64")).numpy(),
                               reference("cross_entropy", X, labels), rtol=1e-5)
    w, b = RNG.standard_normal((5, 4)).astype("float32"), RNG.standard_normal(5).astype("float32")
    np.testing.assert_allclose(F.linear(x, T(w), T(b)).numpy(), reference("linear", X, w, b), rtol=1e-5)
    y = RNG.standard_normal((2, 3, 4)).astype("float32")
    np.testing.assert_allclose(nn.LayerNorm((3, 4))(T(y)).numpy(), reference("layer_norm", y, (3, 4)),
                               rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(F.dropout(x, 0.5, training=False).numpy(), X)


def test_gelu_gradient_matches_finite_differences():
    a = RNG.standard_normal(6)
    x = T(a.astype("float32"))
    F.gelu(x).sum().backward()
    phi = np.vectorize(lambda v: v * 0.5 * (1 + math.erf(v / math.sqrt(2))))
    want = (phi(a + 1e-6) - phi(a - 1e-6)) / 2e-6
    np.testing.assert_allclose(x.grad.numpy(), want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_at_zero_has_its_second_derivative_and_near_the_float_max_is_x(approximate):
    """gelu''(0) = sqrt(2/pi) (both forms) and erf'(0) = 2/sqrt(pi): exact zeros are common
    inputs (padding, relu outputs); erf had built |x| with abs, whose derivative at 0 is 0.
    Near the float max gelu(x) = x (it had overflowed to inf)."""
    x = ndl.Tensor(np.array([0.0, -1e-3, 1e-3], dtype="float32"), requires_grad=True)
    F.gelu(x, approximate=approximate).sum().backward()
    first = x.grad
    x.grad = None
    first.sum().backward()
    np.testing.assert_allclose(x.grad.numpy()[0], math.sqrt(2 / math.pi), rtol=1e-3)
    np.testing.assert_allclose(x.grad.numpy()[0], x.grad.numpy()[1:].mean(), rtol=1e-3)
    z = ndl.Tensor(np.zeros(1, "float32"), requires_grad=True)
    F.erf(z).sum().backward()
    np.testing.assert_allclose(z.grad.numpy(), [2 / math.sqrt(math.pi)], rtol=1e-4)
    big = np.array([1e30, 2e38, 3.4e38], dtype="float32")
    np.testing.assert_array_equal(F.gelu(T(big), approximate=approximate).numpy(), big)


def test_adamw_decouples_weight_decay_as_torch():
    p0, g = RNG.standard_normal(5), RNG.standard_normal(5)
    lr, wd, b1, b2, eps = 0.01, 0.1, 0.9, 0.999, 1e-8
    p, m, v = p0.copy(), 0.0, 0.0
    for t in range(1, 4):  # torch.optim.AdamW's update
        p = p * (1 - lr * wd)
        m, v = b1 * m + (1 - b1) * g, b2 * v + (1 - b2) * g * g
        p = p - lr * (m / (1 - b1 ** t)) / (np.sqrt(v / (1 - b2 ** t)) + eps)
    w = T(p0.astype("float32"))
    opt = optim.AdamW([w], lr=lr, weight_decay=wd, betas=(b1, b2))
    for _ in range(3):
        w.grad = T(g.astype("float32"), requires_grad=False)
        opt.step()
    np.testing.assert_allclose(w.numpy(), p, rtol=1e-5, atol=1e-6)


def test_the_everyday_api_on_the_numpy_backend():
    code = ("import numpy as np, needle as ndl\n"
            "x = ndl.Tensor(np.arange(6.0).reshape(2, 3))\n"
            "assert x.size() == (2, 3) and x.view(3, 2).shape == (3, 2) and x.flatten().shape == (6,)\n"
            "assert x.sum(dim=1).shape == (2,) and x.max(dim=0, keepdim=True).shape == (1, 3)\n"
            "assert (x > 2).dtype == 'bool' and x[x > 2].shape == (3,)\n"
            "assert ndl.cat([x, x], dim=0).shape == (4, 3) and x.transpose(0, 1).shape == (3, 2)\n"
            "assert x.long().dtype == 'int64' and x.tolist()[1] == [3.0, 4.0, 5.0]\n"
            "import needle.nn.functional as F\n"
            "assert abs(float(F.softmax(x, dim=1).sum().numpy()) - 2) < 1e-9\n")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, NEEDLE_BACKEND="np", PYTHONPATH=root)
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr


# ---- from a held-out differential check against torch (1638 cases, both modes) --------------
def test_torch_keywords_for_axes_everywhere():
    x = T(RNG.standard_normal((3, 1, 4)).astype("float32"))
    a = x.numpy()
    assert x.squeeze(dim=1).shape == (3, 4) and x.unsqueeze(dim=0).shape == (1, 3, 1, 4)
    np.testing.assert_array_equal(x.transpose(dim0=0, dim1=2).numpy(), np.swapaxes(a, 0, 2))
    np.testing.assert_array_equal(x.permute(dims=(2, 1, 0)).numpy(), a.transpose(2, 1, 0))
    np.testing.assert_array_equal(x.flip(dims=(0,)).numpy(), a[::-1])
    lse = x.logsumexp(dim=2, keepdim=True)
    assert lse.shape == (3, 1, 1)
    np.testing.assert_allclose(lse.numpy(), np.log(np.exp(a).sum(2, keepdims=True)), rtol=1e-6)


def test_where_promotes_as_torch():
    c = T([True, False, True])
    two_scalars = ndl.where(c, 2.5, -1.0)
    assert two_scalars.dtype == "float32"
    np.testing.assert_array_equal(two_scalars.numpy(), [2.5, -1.0, 2.5])
    assert ndl.where(c, 1, 0).dtype == "int64"
    mixed = ndl.where(c, T([7, 8, 9], dtype="int64"), 0.5)
    assert mixed.dtype == "float32"
    np.testing.assert_array_equal(mixed.numpy(), [7.0, 0.5, 9.0])


@pytest.mark.parametrize("args", [(0, 5), (5,), (1, 0), (-4,)])
def test_flatten_refuses_dims_out_of_range_or_reversed(args):
    with pytest.raises(ndl.errors.AxisError, match="flatten"):
        T(np.zeros((2, 3, 4))).flatten(*args)
    assert T(np.zeros((2, 3, 4))).flatten(-3, -2).shape == (6, 4)


def test_errors_name_the_op_the_user_called():
    x, empty = T(np.ones((2, 3, 4))), T(np.ones((0, 3)))
    with pytest.raises(ndl.errors.AxisError, match="^min: axis 3"):
        x.min(dim=3)
    with pytest.raises(ndl.errors.ShapeError, match="^min: "):
        empty.min()
    with pytest.raises(ndl.errors.ShapeError, match=r"^argmin: .*\(0, 3\)"):
        empty.argmin(0)
    with pytest.raises(ndl.errors.ShapeError, match=r"^argmax: .*\(0, 3\)"):
        empty.argmax()
    with pytest.raises(ArgumentError, match="argmax: one axis"):
        x.argmax((0, 1))
    with pytest.raises(ndl.errors.AxisError, match="size: dim 3"):
        x.size(3)
    with pytest.raises(ndl.errors.AxisError, match="integer"):
        x.size(1.0)
    with pytest.raises(ArgumentError, match="arange: step"):
        ndl.arange(0, 5, 0)
    with pytest.raises(ndl.errors.ShapeError, match=r"where: shapes \(3,\)"):
        ndl.where(T([True, False, True]), T(np.ones(3)), T(np.ones(5)))
    with pytest.raises(ndl.errors.ShapeError, match=r"\(2, 3, 4\) @ \(3, 4, 5\)"):
        T(np.ones((2, 3, 4))) @ T(np.ones((3, 4, 5)))


def test_a_zero_d_mask_selects_a_new_axis():
    x = T(np.array(1.5, "float32"))
    np.testing.assert_array_equal(x[T(np.array(True))].numpy(), [1.5])
    assert x[T(np.array(False))].shape == (0,)
    m = T(np.ones((2, 2), "float32"))
    assert m[np.array(True)].shape == (1, 2, 2)


def test_attention_with_a_value_dim_of_its_own():
    q, k, v = (RNG.standard_normal(s).astype("float32") for s in [(1, 2, 3, 4), (1, 2, 5, 4), (1, 2, 5, 6)])
    out, probs = nn.MultiHeadAttention()(T(q), T(k), T(v))
    scores = q @ k.transpose(0, 1, 3, 2) / 2.0
    p = np.exp(scores - scores.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    np.testing.assert_allclose(out.numpy(), p @ v, rtol=1e-5, atol=1e-6)
