"""Differential fuzzing of convolutions: random NHWC shapes, kernel sizes, strides and
paddings (kernels smaller than the stride, 1x1 images, one output channel, runs of
channels above and below the implicit GEMM's 16), forward, input and weight gradients
realized in one schedule, against a float64 numpy convolution written out tap by tap.
Each covers the stored im2col, windows read in place, packed row blocks (more than
128 output channels) and the weight gradient packed from the windows."""
import numpy as np
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import needle as ndl
from needle import ops


def reference(z, w, stride: int, pad: int, g):
    """(y, dz, dw) of y = conv(z, w) and the output gradient g, in float64."""
    zp = np.pad(z.astype(np.float64), ((0, 0), (pad, pad), (pad, pad), (0, 0)))
    k = w.shape[0]
    ho, wo = (zp.shape[1] - k) // stride + 1, (zp.shape[2] - k) // stride + 1
    y, dzp, dw = np.zeros((z.shape[0], ho, wo, w.shape[3])), np.zeros_like(zp), np.zeros(w.shape)
    for a in range(k):
        for b in range(k):
            taps = (slice(None), slice(a, a + (ho - 1) * stride + 1, stride), slice(b, b + (wo - 1) * stride + 1, stride))
            y += np.einsum("nhwc,co->nhwo", zp[taps], w[a, b])
            dw[a, b] = np.einsum("nhwc,nhwo->co", zp[taps], g)
            dzp[taps] += np.einsum("nhwo,co->nhwc", g, w[a, b])
    return y, dzp[:, pad:pad + z.shape[1], pad:pad + z.shape[2]], dw


@settings(max_examples=max(1, int(settings().max_examples * 0.01)))
@given(st.integers(1, 3), st.integers(1, 19), st.integers(1, 19), st.sampled_from([3, 16, 17, 40]),
       st.sampled_from([1, 5, 16, 33, 150]), st.integers(1, 5), st.integers(1, 3), st.integers(0, 2),
       st.integers(0, 2 ** 31 - 1))
def test_conv_and_its_gradients_match_numpy(n, h, w, c, o, k, stride, pad, seed):
    assume(h + 2 * pad >= k and w + 2 * pad >= k)
    rng = np.random.default_rng(seed)
    z, kernel = rng.standard_normal((n, h, w, c)).astype(np.float32), rng.standard_normal((k, k, c, o)).astype(np.float32)
    zt, wt = ndl.Tensor(z, requires_grad=True), ndl.Tensor(kernel, requires_grad=True)
    y = ops.conv(zt, wt, stride, pad)
    g = rng.standard_normal(y.shape).astype(np.float32)
    y.backward(ndl.Tensor(g))
    got = [t.numpy() for t in ndl.realize(y, zt.grad, wt.grad)]
    want = reference(z, kernel, stride, pad, g)
    scale = reference(np.abs(z), np.abs(kernel), stride, pad, np.abs(g))
    # float32 sums of at most `terms` products: |error| <= terms * eps * sum |products|
    terms = max(k * k * c, n * h * w, k * k * o)
    for name, a, b, bound in zip(("y", "dz", "dw"), got, want, scale):
        assert a.shape == b.shape, (name, a.shape, b.shape)
        assert np.all(np.abs(a - b) <= terms * np.finfo(np.float32).eps * bound), (name, np.abs(a - b).max())
