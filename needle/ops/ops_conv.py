"""2-d convolution, NHWC, by im2col: a strided window view and one matmul.

Z has shape (N, H, W, C_in) and W has shape (K, K, C_in, C_out), as in the course
framework.  The output is (N, (H + 2p - K) // s + 1, (W + 2p - K) // s + 1, C_out).
"""
from __future__ import annotations

import numbers

from .. import array_api as A
from ..autograd import TensorOp
from ..dtypes import dtype_name, require_same
from ..errors import ArgumentError, ShapeError, fmt_shape
from .ops_mathematic import permute
from .ops_movement import dilate, flip, getitem, pad


def conv_output_size(size: int, k: int, stride: int, padding: int) -> int:
    return (size + 2 * padding - k) // stride + 1


class Conv(TensorOp):
    def __init__(self, stride: int = 1, padding: int = 0):
        for name, v, lo in (("stride", stride, 1), ("padding", padding, 0)):
            if not isinstance(v, numbers.Integral) or v < lo:
                raise ArgumentError(f"conv: {name} must be an integer >= {lo}, got {v!r}")
        self.stride = int(stride)
        self.padding = int(padding)

    def check(self, z_shape, w_shape):
        if len(z_shape) != 4 or len(w_shape) != 4:
            raise ShapeError(f"conv: expects Z (N, H, W, C_in) and W (K, K, C_in, C_out), got "
                             f"{fmt_shape(z_shape)} and {fmt_shape(w_shape)}")
        if z_shape[3] != w_shape[2]:
            raise ShapeError(f"conv: Z has {z_shape[3]} channels but W expects {w_shape[2]} "
                             f"(Z {fmt_shape(z_shape)}, W {fmt_shape(w_shape)})")
        for size, k in zip(z_shape[1:3], w_shape[:2]):
            if size + 2 * self.padding < k:
                raise ShapeError(f"conv: kernel {fmt_shape(w_shape[:2])} larger than the padded input: "
                                 f"Z {fmt_shape(z_shape)}, padding {self.padding}")

    def compute(self, Z, W):
        self.check(Z.shape, W.shape)
        require_same("conv", dtype_name(Z.dtype), dtype_name(W.dtype), shapes=(Z.shape, W.shape))
        p, s = self.padding, self.stride
        if p:
            Z = A.pad(Z, ((0, 0), (p, p), (p, p), (0, 0)))
        N, H, Wd, C = Z.shape
        KH, KW, _, O = W.shape
        cols = A.sliding_window(Z, (KH, KW), s)  # (N, Ho, Wo, KH, KW, C), a view
        Ho, Wo = cols.shape[1], cols.shape[2]
        out = A.reshape(cols, (N * Ho * Wo, KH * KW * C)) @ A.reshape(W, (KH * KW * C, O))
        return A.reshape(out, (N, Ho, Wo, O))

    def gradient(self, out_grad, node):
        Z, W = node.inputs
        s, p = self.stride, self.padding
        return (conv_input_gradient(out_grad, W, Z.shape, s, p),
                ConvWeightGradient(W.shape[:2], s, p)(Z, out_grad))


class ConvWeightGradient(TensorOp):
    """dL/dW of conv(Z, W) given G = dL/d out: im2col(Z)^T @ G, (K, K, C_in, C_out).

    The course computes it as a convolution of Z with G dilated by the stride, which
    multiplies the work by stride^2, all of it on zeros (ResNet9's 7x7 stride-4 stem
    spent 16x its FLOPs there).  Reading Z's windows at the stride does none."""

    def __init__(self, kernel, stride: int, padding: int):
        self.kernel = tuple(kernel)
        self.stride = stride
        self.padding = padding

    def compute(self, Z, G):
        p, s = self.padding, self.stride
        if p:
            Z = A.pad(Z, ((0, 0), (p, p), (p, p), (0, 0)))
        KH, KW = self.kernel
        C, O = Z.shape[3], G.shape[3]
        cols = A.sliding_window(Z, (KH, KW), s)  # (N, Ho, Wo, KH, KW, C), a view
        rows = cols.shape[0] * cols.shape[1] * cols.shape[2]
        if cols.shape[:3] != G.shape[:3]:
            raise ShapeError(f"conv weight gradient: G {fmt_shape(G.shape)} does not match the "
                             f"windows {fmt_shape(cols.shape[:3])} of Z {fmt_shape(Z.shape)}")
        out = A.permute(A.reshape(cols, (rows, KH * KW * C)), (1, 0)) @ A.reshape(G, (rows, O))
        return A.reshape(out, (KH, KW, C, O))

    def gradient(self, out_grad, node):
        Z, G = node.inputs
        s, p = self.stride, self.padding
        # linear in each input: d/dG is the forward conv with out_grad as the kernel, d/dZ
        # the conv input gradient of G through that kernel
        return conv_input_gradient(G, out_grad, Z.shape, s, p), conv(Z, out_grad, s, p)


def conv_input_gradient(out_grad, W, z_shape, s: int, p: int):
    """dL/dZ of conv(Z, W): the full correlation of out_grad, dilated by the stride,
    with the flipped kernel, cropped to Z's (H, W)."""
    _, H, Wd, _ = z_shape
    KH, KW = W.shape[:2]
    Ho, Wo = out_grad.shape[1:3]
    g = out_grad
    if s > 1:  # stride-1 zeros between rows/cols: (N, (Ho-1)s+1, (Wo-1)s+1, C_out)
        g = dilate(g, (1, 2), s - 1)
        g = getitem(g, (slice(None), slice(0, (Ho - 1) * s + 1), slice(0, (Wo - 1) * s + 1), slice(None)))
    Wf = permute(flip(W, (0, 1)), (0, 1, 3, 2))  # (KH, KW, C_out, C_in)
    gp = _pad_or_crop(g, (KH - 1 - p, H + p - 1 - (Ho - 1) * s), (KW - 1 - p, Wd + p - 1 - (Wo - 1) * s))
    return conv(gp, Wf)


def _pad_or_crop(x, rows, cols):
    """Pad axes 1 and 2 by (before, after) amounts; negative amounts crop."""
    pads = ((0, 0), (max(rows[0], 0), max(rows[1], 0)), (max(cols[0], 0), max(cols[1], 0)), (0, 0))
    if any(v for pair in pads for v in pair):
        x = pad(x, pads)
    crops = (-min(rows[0], 0), -min(rows[1], 0), -min(cols[0], 0), -min(cols[1], 0))
    if any(crops):
        h, w = x.shape[1], x.shape[2]
        x = getitem(x, (slice(None), slice(crops[0], h - crops[1]), slice(crops[2], w - crops[3]), slice(None)))
    return x


def conv(a, b, stride=1, padding=0):
    return Conv(stride, padding)(a, b)
