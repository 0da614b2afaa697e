"""Tensor creation and weight initialization (`needle.init`)."""
from .init_basic import (constant, one_hot, ones, ones_like, rand, randb, randn, zeros,  # noqa: F401
                         zeros_like)
from .init_initializers import (kaiming_normal, kaiming_uniform, xavier_normal,  # noqa: F401
                                xavier_uniform)
