"""nn.utils.clip_grad_norm_ against numpy (PyTorch's semantics), in every mode (conftest)."""
import math

import numpy as np
import pytest

import needle as ndl
import needle.runtime as rt
from needle import nn


def params_with_grads(rng, scale):
    ps = [nn.Parameter(ndl.Tensor(rng.standard_normal(s).astype("float32"))) for s in ((3, 4), (5,), (2, 2))]
    weights = [rng.standard_normal(p.shape).astype("float32") * scale for p in ps]
    loss = sum(((p * ndl.Tensor(w, requires_grad=False)).sum() for p, w in zip(ps, weights)), start=ps[0].sum() * 0)
    loss.backward()
    return ps, weights  # d loss / d p = w


@pytest.mark.parametrize("norm_type", [2.0, 1.0, 3.0, math.inf])
def test_clip_grad_norm_matches_numpy(norm_type):  # lazy and eager: tests/nn/conftest.py
    rng = np.random.default_rng(0)
    ps, grads = params_with_grads(rng, scale=3.0)
    flat = np.concatenate([g.ravel() for g in grads]).astype(np.float64)
    expected = np.abs(flat).max() if math.isinf(norm_type) else (np.abs(flat) ** norm_type).sum() ** (1 / norm_type)
    total = nn.utils.clip_grad_norm_(ps, max_norm=1.5, norm_type=norm_type)
    np.testing.assert_allclose(float(total.numpy()), expected, rtol=1e-5)
    coef = min(1.0, 1.5 / (expected + 1e-6))
    for p, g in zip(ps, grads):
        np.testing.assert_allclose(p.grad.numpy(), g * coef, rtol=1e-5, atol=1e-7)


def test_small_gradients_are_left_as_they_are():
    rng = np.random.default_rng(1)
    ps, grads = params_with_grads(rng, scale=0.01)
    nn.utils.clip_grad_norm_(ps, max_norm=10.0)
    for p, g in zip(ps, grads):
        np.testing.assert_allclose(p.grad.numpy(), g, rtol=1e-6)


def test_the_global_norm_and_all_gradients_are_one_schedule(execution_mode):
    if execution_mode == "lazy":
        rng = np.random.default_rng(2)
        ps, _ = params_with_grads(rng, scale=3.0)
        before = rt.stats()["schedules"]
        total = nn.utils.clip_grad_norm_(ps, max_norm=1.0)
        assert rt.stats()["schedules"] == before  # nothing read back
        total.numpy()
        [p.grad.numpy() for p in ps]
        assert rt.stats()["schedules"] - before == 1


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="clip_grad_norm_: max_norm"):
        nn.utils.clip_grad_norm_([], max_norm=-1.0)
    with pytest.raises(ValueError, match="clip_grad_norm_: norm_type"):
        nn.utils.clip_grad_norm_([], max_norm=1.0, norm_type=0)
