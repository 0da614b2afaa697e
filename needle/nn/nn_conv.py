"""Convolutional layers (course hw4): Conv on NCHW input, and MaxPool2d.

The course's `ops.conv` works on NHWC with kernels (K, K, C_in, C_out); these
modules take PyTorch's NCHW layout and transpose around it.
"""
from __future__ import annotations

import numbers
from typing import Optional, Tuple, Union

from .. import init, ops
from ..autograd import Tensor
from ..errors import ArgumentError, ShapeError, fmt_shape
from .nn_basic import check_ndim, nchw_to_nhwc, nhwc_to_nchw, optional_bias, positive_int
from .nn_module import Module, Parameter

IntOrPair = Union[int, Tuple[int, int]]


def _square(what: str, value: IntOrPair) -> int:
    """Conv takes an integer size (the course's rule); a pair is accepted when both
    entries agree, and a non-square one is an error rather than silently (k, k)."""
    if isinstance(value, (tuple, list)):
        if len(value) != 2 or value[0] != value[1]:
            raise ArgumentError(f"Conv: {what} must be one integer (square kernels, as in the course), "
                                f"got {tuple(value)!r}; non-square kernels are not supported")
        return value[0]
    return value


def _pair(name: str, value: IntOrPair) -> Tuple[int, int]:
    pair = tuple(value) if isinstance(value, (tuple, list)) else (value, value)
    if len(pair) != 2 or not all(isinstance(v, numbers.Integral) and v >= 1 for v in pair):
        raise ArgumentError(f"MaxPool2d: {name} must be a positive int or a pair of them, got {value!r}")
    return int(pair[0]), int(pair[1])


class Conv(Module):
    """2-d convolution, NCHW in and out, 'same' padding k // 2 (so stride 1 keeps H, W).

    Weight (k, k, C_in, C_out) ~ kaiming_uniform(fan_in=C_in k^2, fan_out=C_out k^2);
    bias ~ U(-1/sqrt(C_in k^2), 1/sqrt(C_in k^2)); weight drawn first, as in the course.
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size: IntOrPair, stride: IntOrPair = 1,
                 bias: bool = True, device=None, dtype: str = "float32") -> None:
        super().__init__()
        kernel_size, stride = _square("kernel_size", kernel_size), _square("stride", stride)
        self.in_channels = positive_int("Conv", "in_channels", in_channels)
        self.out_channels = positive_int("Conv", "out_channels", out_channels)
        positive_int("Conv", "kernel_size", kernel_size)
        positive_int("Conv", "stride", stride)
        self.kernel_size = kernel_size
        self.stride = stride
        self.padding = kernel_size // 2
        fan_in, fan_out = in_channels * kernel_size ** 2, out_channels * kernel_size ** 2
        self.weight = Parameter(init.kaiming_uniform(
            fan_in, fan_out, shape=(kernel_size, kernel_size, in_channels, out_channels),
            device=device, dtype=dtype, requires_grad=True))
        self.bias: Optional[Parameter] = None
        if bias:
            bound = 1.0 / fan_in ** 0.5
            self.bias = Parameter(init.rand(out_channels, low=-bound, high=bound, device=device, dtype=dtype,
                                            requires_grad=True))

    def extra_repr(self) -> str:
        return (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
                f"stride={self.stride}, bias={self.bias is not None}")

    def forward(self, x: Tensor) -> Tensor:
        check_ndim("Conv", x, 4, "(N, C, H, W)")
        if x.shape[1] != self.in_channels:
            raise ShapeError(f"Conv: expects {self.in_channels} channels on axis 1, got shape {fmt_shape(x.shape)}")
        out = ops.conv(nchw_to_nhwc(x), self.weight, stride=self.stride, padding=self.padding)
        return nhwc_to_nchw(optional_bias(self.bias, out))


class MaxPool2d(Module):
    """Max over k x k windows of NCHW input, PyTorch's output size (no padding):
    H_out = (H - k) // stride + 1.  `stride` defaults to the kernel size.

    Built from strided slices and `max`, so the gradient comes from those ops: it goes
    to the maximum of each window (shared equally among exact ties)."""

    def __init__(self, kernel_size: IntOrPair, stride: Optional[IntOrPair] = None) -> None:
        super().__init__()
        self.kernel_size = _pair("kernel_size", kernel_size)
        self.stride = self.kernel_size if stride is None else _pair("stride", stride)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}"

    def forward(self, x: Tensor) -> Tensor:
        check_ndim("MaxPool2d", x, 4, "(N, C, H, W)")
        n, c, h, w = x.shape
        (kh, kw), (sh, sw) = self.kernel_size, self.stride
        if h < kh or w < kw:
            raise ShapeError(f"MaxPool2d: kernel {fmt_shape((kh, kw))} is larger than the input {fmt_shape(x.shape)}")
        ho, wo = (h - kh) // sh + 1, (w - kw) // sw + 1
        if (sh, sw) == (kh, kw):  # non-overlapping windows: crop, split each axis in two, reduce
            if (ho * kh, wo * kw) != (h, w):
                x = x[:, :, :ho * kh, :wo * kw]  # floor: drop the rows and columns no window covers
            return x.reshape((n, c, ho, kh, wo, kw)).max((3, 5))
        # overlapping (or gapped) windows: one strided slice per offset in the window
        views = [x[:, :, i:i + sh * (ho - 1) + 1:sh, j:j + sw * (wo - 1) + 1:sw]
                 for i in range(kh) for j in range(kw)]
        return ops.stack(views, 4).max((4,))
