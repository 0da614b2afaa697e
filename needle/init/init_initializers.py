"""Xavier (Glorot) and Kaiming (He) initializers, with the course's signatures."""
import math

from ..errors import ArgumentError
from .init_basic import rand, randn


def xavier_uniform(fan_in, fan_out, gain=1.0, **kwargs):
    a = gain * math.sqrt(6 / (fan_in + fan_out))
    return rand(fan_in, fan_out, low=-a, high=a, **kwargs)


def xavier_normal(fan_in, fan_out, gain=1.0, **kwargs):
    std = gain * math.sqrt(2 / (fan_in + fan_out))
    return randn(fan_in, fan_out, mean=0.0, std=std, **kwargs)


def _relu_gain(nonlinearity: str) -> float:
    if nonlinearity != "relu":
        raise ArgumentError(f"kaiming init: only nonlinearity='relu' is supported, got {nonlinearity!r}")
    return math.sqrt(2)


def kaiming_uniform(fan_in, fan_out, shape=None, nonlinearity="relu", **kwargs):
    """U(-b, b) with b = gain * sqrt(3 / fan_in); `shape` overrides (fan_in, fan_out)
    (convolution kernels)."""
    bound = _relu_gain(nonlinearity) * math.sqrt(3 / fan_in)
    shape = (fan_in, fan_out) if shape is None else tuple(shape)
    return rand(*shape, low=-bound, high=bound, **kwargs)


def kaiming_normal(fan_in, fan_out, shape=None, nonlinearity="relu", **kwargs):
    std = _relu_gain(nonlinearity) / math.sqrt(fan_in)
    shape = (fan_in, fan_out) if shape is None else tuple(shape)
    return randn(*shape, mean=0.0, std=std, **kwargs)
