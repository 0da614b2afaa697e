"""Regression (review of f3dcbba): conv's input gradient when, along one axis, every
window reads padding only (padding > kernel, stride past the input).

conv_input_gradient crops g by -before = lo - (K - 1) *before* padding it, so when that
crop is longer than the (dilated) g, the slice comes out empty and the padding that
follows gives the gradient the wrong size ("Conv.gradient() returned a gradient of
shape (1, 2, 2, 1) for input 0 of shape (1, 1, 1, 1)").  The gradient is zero there:
numpy float64 is the reference."""
import numpy as np
import pytest

import needle as ndl
from needle import ops


def np_conv_grads(Z, W, s, p, G):
    Zp = np.pad(Z, ((0, 0), (p, p), (p, p), (0, 0)))
    KH, KW = W.shape[:2]
    Ho, Wo = G.shape[1:3]
    out, dW, dZp = np.zeros(G.shape), np.zeros(W.shape), np.zeros(Zp.shape)
    for i in range(KH):
        for j in range(KW):
            sl = (slice(None), slice(i, i + (Ho - 1) * s + 1, s), slice(j, j + (Wo - 1) * s + 1, s), slice(None))
            out += Zp[sl] @ W[i, j]
            dW[i, j] = np.einsum("nhwc,nhwo->co", Zp[sl], G)
            dZp[sl] += G @ W[i, j].T
    return out, dZp[:, p:p + Z.shape[1], p:p + Z.shape[2]], dW


# (tests/ops/conftest.py runs each test lazily and eagerly)
@pytest.mark.parametrize("z_shape, kernel, stride, padding", [
    ((1, 1, 1, 1), (1, 1), 5, 2),   # a 1x1 image, 1x1 kernel: the one window reads padding
    ((2, 1, 3, 3), (1, 1), 5, 2),   # one image row: every window row reads padding
    ((2, 1, 1, 3), (3, 1), 5, 2),   # a 3x1 kernel over a 1x1 image, stride 5
])
def test_conv_gradient_when_windows_read_only_padding(z_shape, kernel, stride, padding):
    rng = np.random.default_rng(0)
    Z = rng.standard_normal(z_shape)
    W = rng.standard_normal(kernel + (z_shape[3], 2))
    Ho = (z_shape[1] + 2 * padding - kernel[0]) // stride + 1
    Wo = (z_shape[2] + 2 * padding - kernel[1]) // stride + 1
    G = rng.standard_normal((z_shape[0], Ho, Wo, 2))
    want_y, want_dz, want_dw = np_conv_grads(Z, W, stride, padding, G)
    z = ndl.Tensor(Z, device=ndl.cpu(), dtype="float64", requires_grad=True)
    w = ndl.Tensor(W, device=ndl.cpu(), dtype="float64", requires_grad=True)
    y = ops.conv(z, w, stride=stride, padding=padding)
    y.backward(ndl.Tensor(G, device=ndl.cpu(), dtype="float64"))
    np.testing.assert_allclose(y.numpy(), want_y, atol=1e-12)
    np.testing.assert_allclose(z.grad.numpy(), want_dz, atol=1e-12)
    np.testing.assert_allclose(w.grad.numpy(), want_dw, atol=1e-12)
