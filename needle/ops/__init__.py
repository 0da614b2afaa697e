"""needle.ops: the differentiable operators, as module functions and Op classes."""
from .ops_conv import Conv, conv  # noqa: F401
from .ops_compare import Abs, ArgMax, Compare, absolute, amin, argmax, argmin, compare, var  # noqa: F401
from .ops_indexing import (Gather, Pick, ScatterAdd, Select, gather, index, pick, scatter_add,  # noqa: F401
                           select, setitem)
from .ops_logarithmic import LogSoftmax, LogSumExp, logsoftmax, logsumexp, logsumexp_less  # noqa: F401
from .ops_mathematic import *  # noqa: F401,F403
from .ops_mathematic import max, mean, unbroadcast  # noqa: F401
from .ops_norm import Standardize, standardize  # noqa: F401
from .ops_fused import (Fused, FusedGradient, LSTMCellOutput, LSTMCellState, MatMulBias, ScaleShift,  # noqa: F401
                        lstm_cell, matmul_bias, scale_shift)
from .ops_movement import (Concatenate, Dilate, Flip, GetItem, Pad, Scatter, Split, Stack,  # noqa: F401
                           UnDilate, concatenate, dilate, flip, getitem, pad, scatter, split, stack,
                           undilate)
from .ops_tuple import (FusedAddScalars, MakeTensorTuple, TupleGetItem, fused_add_scalars,  # noqa: F401
                        make_tuple, tuple_get_item)

#: the public ops: functions and Op classes defined in needle.ops (not what they import)
__all__ = sorted(name for name, obj in list(globals().items())
                 if not name.startswith("_") and getattr(obj, "__module__", "").startswith(__name__ + "."))
