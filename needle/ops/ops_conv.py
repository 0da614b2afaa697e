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
        # (an input that needs no gradient gets None: a network's first conv would
        # otherwise build its image's gradient on every step, for nothing)
        Z, W = node.inputs
        s, pads = self.stride, self.pads
        return (conv_input_gradient(out_grad, W, Z.shape, s, pads) if Z.requires_grad else None,
                ConvWeightGradient(W.shape[:2], s, pads)(Z, out_grad) if W.requires_grad else None)


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
        return (conv_input_gradient(G, out_grad, Z.shape, s, pads) if Z.requires_grad else None,
                Conv(s, pads)(Z, out_grad) if G.requires_grad else None)


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


class ConvInputGradient(TensorOp):
    """dL/dZ of conv(Z, W) given G = dL/d out, (N, H, W, C_in) for Z's shape `z_shape`,
    by phases: Z's positions x = s u + j of one residue j per axis receive the taps
    t = (j + lo) mod s, + s, + 2s, ... only, so each of the s**2 phases is a stride-1
    full correlation of G with that sub-kernel, flipped, and the phases interleave into
    dZ.  (The course's dilated G, correlated with the whole kernel, multiplies by zeros
    in all but 1/s**2 of its products, and its im2col is s**2 times larger.)  One op,
    written on arrays: as a dozen Tensor ops (flips, slices, a conv per phase, a stack)
    it was most of the cost of building ResNet9's backward pass."""

    def __init__(self, z_shape, stride: int, padding):
        self.z_shape = tuple(z_shape)
        self.stride = stride
        self.pads = conv_pads(padding)

    def compute(self, G, W):
        N, C = self.z_shape[0], self.z_shape[3]
        s = self.stride
        counts = [-(-size // s) for size in self.z_shape[1:3]]  # positions of each residue, rounded up
        Wf = A.permute(A.flip(W, (0, 1)), (0, 1, 3, 2))  # (KH, KW, C_out, C_in), taps reversed
        phases = [self._phase(G, Wf, (jh, jw), counts) for jh in range(s) for jw in range(s)]
        if s == 1:
            return phases[0]
        dz = A.reshape(A.stack(phases, 3), (N, counts[0], counts[1], s, s, C))
        dz = A.reshape(A.permute(dz, (0, 1, 3, 2, 4, 5)), (N, counts[0] * s, counts[1] * s, C))
        if dz.shape[1:3] != self.z_shape[1:3]:
            dz = dz[:, :self.z_shape[1], :self.z_shape[2], :]
        return dz

    def _phase(self, g, Wf, residues, counts):
        """dZ at x = s u + j (u < counts, j = residues per axis), (N, counts..., C_in), from
        Wf, the kernel flipped.  x + lo = s q + t reads g[q] W[t]: with t = phi + s i (phi =
        (j + lo) mod s) and q = u + (j + lo) // s - i, a correlation of g with W's taps phi,
        phi + s, ... reversed, reading g at [u + start, u + start + m), zero outside g."""
        s = self.stride
        parts, pads_g, taps = [], [], []
        for d, (k, (lo, _), j, count) in enumerate(zip(Wf.shape[:2], self.pads, residues, counts)):
            phi = (j + lo) % s
            m = len(range(phi, k, s))
            start = (j + lo) // s - (m - 1)
            stop = start + count + m - 1
            a, b = max(0, start), min(g.shape[1 + d], stop)
            if m == 0 or a >= b:  # no tap lands on these positions, or every window reads padding
                return A.zeros((self.z_shape[0], *counts, self.z_shape[3]), g)
            parts.append(slice(a, b))
            pads_g.append((a - start, stop - b))
            last = phi + s * (m - 1)  # taps phi..last of W are k-1-last..k-1-phi of Wf, step s
            taps.append(slice(k - 1 - last, k - phi, s))
        if any(p != slice(0, g.shape[1 + d]) for d, p in enumerate(parts)):
            g = g[(slice(None),) + tuple(parts) + (slice(None),)]
        if taps != [slice(0, Wf.shape[0], 1), slice(0, Wf.shape[1], 1)]:
            Wf = Wf[tuple(taps) + (slice(None), slice(None))]
        return Conv(1, tuple(pads_g)).compute(g, Wf)

    def gradient(self, out_grad, node):
        # linear in each input, the adjoint of conv in Z: d/dG is the forward conv of
        # out_grad with W, d/dW the conv weight gradient of out_grad against G
        G, W = node.inputs
        s, pads = self.stride, self.pads
        return (Conv(s, pads)(out_grad, W) if G.requires_grad else None,
                ConvWeightGradient(W.shape[:2], s, pads)(out_grad, G) if W.requires_grad else None)


def conv_input_gradient(out_grad, W, z_shape, s: int, pads):
    """dL/dZ of conv(Z, W) for Z of shape z_shape: ConvInputGradient."""
    return ConvInputGradient(z_shape, s, pads)(out_grad, W)


def conv(a, b, stride=1, padding=0):
    return Conv(stride, padding)(a, b)
