"""Ops that produce or consume TensorTuples."""
from __future__ import annotations

from ..autograd import Tensor, TensorOp, TensorTuple, TensorTupleOp
from ..errors import DTypeError, IndexingError, ShapeError


class MakeTensorTuple(TensorTupleOp):
    def compute(self, *args):
        return tuple(args)

    def gradient(self, out_grad, node):
        if not isinstance(out_grad, TensorTuple):
            raise TypeError("make_tuple: the adjoint of a tuple must be a TensorTuple")
        return tuple(out_grad[i] for i in range(len(out_grad)))


def make_tuple(*args):
    for i, x in enumerate(args):
        if not isinstance(x, Tensor):
            raise DTypeError(f"make_tuple: argument {i} is a {type(x).__name__}, expected a Tensor")
    return MakeTensorTuple()(*args)


class TupleGetItem(TensorOp):
    def __init__(self, index: int):
        self.index = index

    def __call__(self, a: TensorTuple, fold_const: bool = True) -> Tensor:
        if not isinstance(a, TensorTuple):
            raise DTypeError(f"tuple_get_item: expected a TensorTuple, got {type(a).__name__}")
        n = len(a)
        if not -n <= self.index < n:
            raise IndexingError(f"tuple_get_item: index {self.index} out of range for a tuple of {n} tensors")
        if fold_const and isinstance(a.op, MakeTensorTuple):
            return a.inputs[self.index]
        return Tensor.make_from_op(self, [a])

    def compute(self, a):
        return a[self.index]

    def gradient(self, out_grad, node):
        from .. import init
        index = self.index % len(node.inputs[0])
        grads = []
        for i, value in enumerate(node.inputs[0]):
            grads.append(out_grad if i == index else init.zeros_like(value))
        return MakeTensorTuple()(*grads)


def tuple_get_item(value, index):
    return TupleGetItem(index)(value)


class FusedAddScalars(TensorTupleOp):
    """(a + c0, a + c1): a small two-output op, as in the course framework."""

    def __init__(self, c0: float, c1: float):
        self.c0 = c0
        self.c1 = c1

    def compute(self, a):
        return a + self.c0, a + self.c1

    def gradient(self, out_grad, node):
        return out_grad[0] + out_grad[1]


def fused_add_scalars(x, c0, c1):
    return FusedAddScalars(c0, c1)(x)


def _as_tuple(op: str, args) -> TensorTuple:
    if isinstance(args, TensorTuple):
        return args
    args = list(args)
    if not args:
        raise ShapeError(f"{op}: needs at least one tensor")
    return make_tuple(*args)
