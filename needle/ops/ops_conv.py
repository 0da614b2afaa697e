"""2-d convolution, NHWC, by im2col: a strided window view and one matmul.

Z has shape (N, H, W, C_in) and W has shape (K, K, C_in, C_out), as in the course
framework.  The output is (N, (H + 2p - K) // s + 1, (W + 2p - K) // s + 1, C_out).
"""
from __future__ import annotations

import numbers

from .. import array_api as A
from .. import init
from ..autograd import TensorOp
from ..dtypes import dtype_name, require_same
from ..errors import ArgumentError, ShapeError, fmt_shape
from .ops_mathematic import permute
from .ops_movement import dilate, flip, getitem


def conv_output_size(size: int, k: int, stride: int, padding: int) -> int:
    return (size + 2 * padding - k) // stride + 1


class Conv(TensorOp):
    """conv(Z, W, stride, padding).  `padding` is an int (the course's), or, for the
    gradients, ((top, bottom), (left, right))."""

    def __init__(self, stride: int = 1, padding=0):
        if not isinstance(stride, numbers.Integral) or stride < 1:
            raise ArgumentError(f"conv: stride must be an integer >= 1, got {stride!r}")
        self.stride = int(stride)
        self.padding = padding
        self.pads = conv_pads(padding)

    def check(self, z_shape, w_shape):
        if len(z_shape) != 4 or len(w_shape) != 4:
            raise ShapeError(f"conv: expects Z (N, H, W, C_in) and W (K, K, C_in, C_out), got "
                             f"{fmt_shape(z_shape)} and {fmt_shape(w_shape)}")
        if z_shape[3] != w_shape[2]:
            raise ShapeError(f"conv: Z has {z_shape[3]} channels but W expects {w_shape[2]} "
                             f"(Z {fmt_shape(z_shape)}, W {fmt_shape(w_shape)})")
        for size, k, (lo, hi) in zip(z_shape[1:3], w_shape[:2], self.pads):
            if size + lo + hi < k:
                raise ShapeError(f"conv: kernel {fmt_shape(w_shape[:2])} larger than the padded input: "
                                 f"Z {fmt_shape(z_shape)}, padding {self.padding}")

    def compute(self, Z, W):
        self.check(Z.shape, W.shape)
        require_same("conv", dtype_name(Z.dtype), dtype_name(W.dtype), shapes=(Z.shape, W.shape))
        cols, ((a0, a1), (b0, b1)) = live_windows(Z, W.shape[:2], self.stride, self.pads)
        N, Ho, Wo, KH, KW, C = cols.shape
        if (KH, KW) != W.shape[:2]:
            W = W[a0:a1, b0:b1]
        out = A.reshape(cols, (N * Ho * Wo, KH * KW * C)) @ A.reshape(W, (KH * KW * C, W.shape[3]))
        return A.reshape(out, (N, Ho, Wo, W.shape[3]))

    def gradient(self, out_grad, node):
        Z, W = node.inputs
        s, pads = self.stride, self.pads
        return (conv_input_gradient(out_grad, W, Z.shape, s, pads),
                ConvWeightGradient(W.shape[:2], s, pads)(Z, out_grad))


class ConvWeightGradient(TensorOp):
    """dL/dW of conv(Z, W) given G = dL/d out: im2col(Z)^T @ G, (K, K, C_in, C_out).

    The course computes it as a convolution of Z with G dilated by the stride, which
    multiplies the work by stride^2, all of it on zeros (ResNet9's 7x7 stride-4 stem
    spent 16x its FLOPs there).  Reading Z's windows at the stride does none."""

    def __init__(self, kernel, stride: int, padding):
        self.kernel = tuple(kernel)
        self.stride = stride
        self.pads = conv_pads(padding)

    def compute(self, Z, G):
        cols, ((a0, a1), (b0, b1)) = live_windows(Z, self.kernel, self.stride, self.pads)
        N, Ho, Wo, KH, KW, C = cols.shape
        O = G.shape[3]
        if (N, Ho, Wo) != G.shape[:3]:
            raise ShapeError(f"conv weight gradient: G {fmt_shape(G.shape)} does not match the "
                             f"windows {fmt_shape(cols.shape[:3])} of Z {fmt_shape(Z.shape)}")
        rows = N * Ho * Wo
        out = A.permute(A.reshape(cols, (rows, KH * KW * C)), (1, 0)) @ A.reshape(G, (rows, O))
        out = A.reshape(out, (KH, KW, C, O))
        if (KH, KW) != self.kernel:  # taps that read only padding have a zero gradient
            out = A.pad(out, ((a0, self.kernel[0] - a1), (b0, self.kernel[1] - b1), (0, 0), (0, 0)))
        return out

    def gradient(self, out_grad, node):
        Z, G = node.inputs
        s, pads = self.stride, self.pads
        # linear in each input: d/dG is the forward conv with out_grad as the kernel, d/dZ
        # the conv input gradient of G through that kernel
        return conv_input_gradient(G, out_grad, Z.shape, s, pads), Conv(s, pads)(Z, out_grad)


def conv_pads(padding) -> tuple:
    """((top, bottom), (left, right)) from an int or from that pair of pairs."""
    pads = padding if isinstance(padding, tuple) else ((padding, padding), (padding, padding))
    for v in (v for pair in pads for v in pair):
        if not isinstance(v, numbers.Integral) or v < 0:
            raise ArgumentError(f"conv: padding must be an integer >= 0, got {v!r}")
    return tuple((int(lo), int(hi)) for lo, hi in pads)


def live_windows(Z, kernel, s: int, pads):
    """(windows, taps): the windows of Z padded by `pads` at stride s, (N, Ho, Wo, kh,
    kw, C) as a view, over only the kernel taps that read some input element for some
    output position, and each axis's [first, stop) of those taps.  The others read
    padding alone: a 3x3 conv of a 1x1 image (ResNet9's last blocks) has one live tap,
    so the matmul does 1/9 of the work."""
    taps, new_pads, outs = [], [], []
    for size, k, (lo, hi) in zip(Z.shape[1:3], kernel, pads):
        out = (size + lo + hi - k) // s + 1
        first, stop = max(0, lo - (out - 1) * s), min(k, lo + size)  # tap t reads o*s + t - lo
        if first >= stop:
            first, stop = 0, k
        taps.append((first, stop))
        new_pads.append((lo - first, max(0, (out - 1) * s + stop - lo - size)))
        outs.append(out)
    if any(v for pair in new_pads for v in pair):
        Z = A.pad(Z, ((0, 0), new_pads[0], new_pads[1], (0, 0)))
    cols = A.sliding_window(Z, tuple(b - a for a, b in taps), s)
    if cols.shape[1:3] != tuple(outs):  # rows past the last window's reach
        cols = cols[:, :outs[0], :outs[1]]
    return cols, tuple(taps)


def conv_input_gradient(out_grad, W, z_shape, s: int, pads):
    """dL/dZ of conv(Z, W): the full correlation of out_grad, dilated by the stride,
    with the flipped kernel, over Z's (H, W)."""
    KH, KW = W.shape[:2]
    Ho, Wo = out_grad.shape[1:3]
    g = out_grad
    if s > 1:  # stride-1 zeros between rows/cols: (N, (Ho-1)s+1, (Wo-1)s+1, C_out)
        g = dilate(g, (1, 2), s - 1)
        g = getitem(g, (slice(None), slice(0, (Ho - 1) * s + 1), slice(0, (Wo - 1) * s + 1), slice(None)))
    Wf = permute(flip(W, (0, 1)), (0, 1, 3, 2))  # (KH, KW, C_out, C_in)
    # input position x gets g[o] W[t] for x = o*s + t - lo: the correlation reads g at
    # [x + lo - (K - 1), x + lo], so x in [0, size) needs g's range [start, start + size + K - 1),
    # zero outside g: the part of g inside it, and padding for the rest
    parts, pads_g = [], []
    for d, (k, (lo, _), size) in enumerate(zip((KH, KW), pads, z_shape[1:3])):
        start = lo - (k - 1)
        stop = start + size + k - 1
        a, b = max(0, start), min(g.shape[1 + d], stop)
        if a >= b:  # every window along this axis reads padding alone: no gradient reaches Z
            return init.zeros(*z_shape, device=out_grad.device, dtype=out_grad.dtype)
        parts.append(slice(a, b))
        pads_g.append((a - start, stop - b))
    if any(p != slice(0, g.shape[1 + d]) for d, p in enumerate(parts)):
        g = getitem(g, (slice(None),) + tuple(parts) + (slice(None),))
    return Conv(1, tuple(pads_g))(g, Wf)


def conv(a, b, stride=1, padding=0):
    return Conv(stride, padding)(a, b)
