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
        N, H, Wd, C = Z.shape
        KH, KW = W.shape[:2]
        s, p = self.stride, self.padding
        Ho, Wo = out_grad.shape[1:3]
        # out_grad with stride-1 zeros between rows/cols: (N, (Ho-1)s+1, (Wo-1)s+1, C_out)
        g = out_grad
        if s > 1:
            g = dilate(g, (1, 2), s - 1)
            g = getitem(g, (slice(None), slice(0, (Ho - 1) * s + 1), slice(0, (Wo - 1) * s + 1), slice(None)))
        # input gradient: full correlation of g with the flipped kernel, cropped to H x W
        Wf = permute(flip(W, (0, 1)), (0, 1, 3, 2))  # (KH, KW, C_out, C_in)
        gp = _pad_or_crop(g, (KH - 1 - p, H + p - 1 - (Ho - 1) * s), (KW - 1 - p, Wd + p - 1 - (Wo - 1) * s))
        grad_Z = conv(gp, Wf)
        # weight gradient: correlate the padded input with g, channels as batch
        Zp = pad(Z, ((0, 0), (p, p), (p, p), (0, 0))) if p else Z
        grad_W = conv(permute(Zp, (3, 1, 2, 0)), permute(g, (1, 2, 0, 3)))  # (C_in, >=KH, >=KW, C_out)
        grad_W = getitem(grad_W, (slice(None), slice(0, KH), slice(0, KW), slice(None)))
        return grad_Z, permute(grad_W, (1, 2, 0, 3))


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
