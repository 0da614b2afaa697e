"""Elementwise ops — two tensors, a tensor and a scalar, one tensor — and casts.

`compute()` is written against `needle.array_api`, so it runs on NDArrays (eager),
numpy arrays (NEEDLE_BACKEND=np) and lazy IR arrays (lazy mode records the graph).
Binary ops broadcast like numpy; their gradients sum back over the broadcast axes.
"""
from __future__ import annotations

import numpy

from .. import array_api as A
from ..autograd import TensorOp
from ..dtypes import dtype_name
from .checks import check_scalar as _check_real, check_scalar_fits, require_float
from .ops_reduce import unbroadcast


def check_scalar(op: str, scalar):
    """A Python number, or (as course code passes them) a numpy scalar or a 1-element
    array such as `np.random.randn(1)`, as a Python number; anything else is an error."""
    if isinstance(scalar, numpy.ndarray) and scalar.size == 1 or isinstance(scalar, numpy.generic):
        scalar = scalar.item()
    return _check_real(op, scalar)


# ---- elementwise with two tensors ---------------------------------------------------------
class EWiseAdd(TensorOp):
    def compute(self, a, b):
        return a + b

    def gradient(self, out_grad, node):
        a, b = node.inputs
        return unbroadcast(out_grad, a.shape), unbroadcast(out_grad, b.shape)


def add(a, b):
    return EWiseAdd()(a, b)


class EWiseSub(TensorOp):
    def compute(self, a, b):
        return a - b

    def gradient(self, out_grad, node):
        a, b = node.inputs
        return unbroadcast(out_grad, a.shape), unbroadcast(-out_grad, b.shape)


def subtract(a, b):
    return EWiseSub()(a, b)


class EWiseMul(TensorOp):
    def compute(self, a, b):
        return a * b

    def gradient(self, out_grad, node):
        a, b = node.inputs
        return unbroadcast(out_grad * b, a.shape), unbroadcast(out_grad * a, b.shape)


def multiply(a, b):
    return EWiseMul()(a, b)


class EWiseDiv(TensorOp):
    def compute(self, a, b):
        return a / b

    def gradient(self, out_grad, node):
        # d(a/b)/db = -(g / b) (a / b): the first gradient times this node, two ops where
        # -g a / (b b) built four on every step
        a, b = node.inputs
        grad_a = out_grad / b
        return unbroadcast(grad_a, a.shape), unbroadcast(-(grad_a * node), b.shape)


def divide(a, b):
    return EWiseDiv()(a, b)


class EWisePow(TensorOp):
    """a ** b elementwise.  As torch: no gradient to a where b == 0 (b a^(b-1) is 0 * inf
    at a == 0), none to b where a == 0 and b >= 0 (a^b log a is 0 * -inf there)."""

    def compute(self, a, b):
        return a ** b

    def gradient(self, out_grad, node):
        a, b = node.inputs
        zero = out_grad * 0
        grad_a = where(b.eq(0), zero, out_grad * b * power(a, b - 1))
        grad_b = where(a.eq(0) * (b >= 0), zero, out_grad * node * log(a))
        return unbroadcast(grad_a, a.shape), unbroadcast(grad_b, b.shape)


def power(a, b):
    return EWisePow()(a, b)


class Where(TensorOp):
    """`a` where `cond` holds (is nonzero), else `b`, broadcast together; the gradient
    goes to the operand taken (none to `cond`)."""

    def compute(self, cond, a, b):
        return A.where(cond, a, b)

    def gradient(self, out_grad, node):
        cond, a, b = node.inputs  # (zeros, not out_grad * 0: an inf or nan upstream stays where it goes)
        return (None, unbroadcast(where(cond, out_grad, 0), a.shape), unbroadcast(where(cond, 0, out_grad), b.shape))


def where(cond, a, b):
    """torch.where / numpy.where: `a` where `cond`, else `b` (scalars allowed for a, b).
    Scalars take the tensor's dtype, except a fraction beside an integer or bool tensor,
    which makes the result float32; two scalars are float32, int64 or bool (torch's
    promotion)."""
    from ..autograd import Tensor
    from ..dtypes import FLOATS
    from ..errors import DTypeError
    from ..shapes import broadcast_shapes
    tensors = [x for x in (a, b) if isinstance(x, Tensor)]
    scalars = [x for x in (a, b) if not isinstance(x, Tensor)]
    for x in scalars:
        if not isinstance(x, (bool, int, float, numpy.bool_, numpy.number)):
            raise DTypeError(f"where: a and b must be Tensors or numbers, got {type(x).__name__}")
    fraction = any(not isinstance(x, (bool, numpy.bool_, int, numpy.integer)) for x in scalars)
    if tensors:
        dtype = tensors[0].dtype
        if len(tensors) == 2 and tensors[1].dtype != dtype:
            raise DTypeError(f"where: the operands' dtypes differ ({a.dtype} {tuple(a.shape)} and {b.dtype} "
                             f"{tuple(b.shape)}); cast one first")
        if fraction and dtype not in FLOATS:
            dtype = "float32"
        elif dtype == "bool" and any(not isinstance(x, (bool, numpy.bool_)) for x in scalars):
            dtype = "int64"
    else:
        dtype = "float32" if fraction else "bool" if all(isinstance(x, (bool, numpy.bool_)) for x in scalars) \
            else "int64"
    device = tensors[0].device if tensors else cond.device if isinstance(cond, Tensor) else None
    a, b = (x.astype(dtype) if isinstance(x, Tensor) and x.dtype != dtype else x if isinstance(x, Tensor) else
            Tensor(numpy.full((), x, dtype=numpy.dtype(dtype)), device=device, dtype=dtype, requires_grad=False)
            for x in (a, b))
    if not isinstance(cond, Tensor):
        cond = Tensor(numpy.asarray(cond), device=a.device, requires_grad=False)
    shape = broadcast_shapes("where", tuple(cond.shape), tuple(a.shape), tuple(b.shape))
    from .ops_reduce import broadcast_to
    cond, a, b = (x if tuple(x.shape) == shape else broadcast_to(x, shape) for x in (cond.const_of(), a, b))
    return Where()(cond, a, b)


# ---- elementwise with a scalar ------------------------------------------------------------
class AddScalar(TensorOp):
    def __init__(self, scalar):
        self.scalar = check_scalar("add_scalar", scalar)

    def compute(self, a):
        check_scalar_fits("add_scalar", a, self.scalar)
        return a + self.scalar

    def gradient(self, out_grad, node):
        return out_grad


def add_scalar(a, scalar):
    return AddScalar(scalar)(a)


class MulScalar(TensorOp):
    def __init__(self, scalar):
        self.scalar = check_scalar("mul_scalar", scalar)

    def compute(self, a):
        check_scalar_fits("mul_scalar", a, self.scalar)
        return a * self.scalar

    def gradient(self, out_grad, node):
        return out_grad * self.scalar


def mul_scalar(a, scalar):
    return MulScalar(scalar)(a)


class DivScalar(TensorOp):
    def __init__(self, scalar):
        self.scalar = check_scalar("divide_scalar", scalar)

    def compute(self, a):
        return a / self.scalar

    def gradient(self, out_grad, node):
        return out_grad / self.scalar


def divide_scalar(a, scalar):
    return DivScalar(scalar)(a)


class RDivScalar(TensorOp):
    """scalar / a (a true division: 0 / 1e-40 is 0, not 0 * inf)."""

    def __init__(self, scalar):
        self.scalar = check_scalar("rdivide_scalar", scalar)

    def compute(self, a):
        return self.scalar / a

    def gradient(self, out_grad, node):
        a = node.inputs[0]
        return -out_grad * node / a


def rdivide_scalar(a, scalar):
    return RDivScalar(scalar)(a)


class PowerScalar(TensorOp):
    """a ** scalar (any real exponent)."""

    def __init__(self, scalar):
        self.scalar = check_scalar("power_scalar", scalar)

    def compute(self, a):
        return a ** self.scalar

    def gradient(self, out_grad, node):
        a = node.inputs[0]
        if self.scalar == 0:
            return out_grad * 0
        return out_grad * self.scalar * power_scalar(a, self.scalar - 1)


def power_scalar(a, scalar):
    return PowerScalar(scalar)(a)


# ---- elementwise unary --------------------------------------------------------------------
class Negate(TensorOp):
    def compute(self, a):
        return -a

    def gradient(self, out_grad, node):
        return -out_grad


def negate(a):
    return Negate()(a)


class Exp(TensorOp):
    def compute(self, a):
        return A.exp(a)

    def gradient(self, out_grad, node):
        return out_grad * node


def exp(a):
    return Exp()(a)


class Log(TensorOp):
    def compute(self, a):
        return A.log(a)

    def gradient(self, out_grad, node):
        return out_grad / node.inputs[0]


def log(a):
    return Log()(a)


class ReLU(TensorOp):
    def compute(self, a):
        return A.maximum(a, 0)

    def gradient(self, out_grad, node):
        return relu_gradient(out_grad, node.inputs[0])


def relu(a):
    return ReLU()(a)


class ReLUGradient(TensorOp):
    """relu's gradient, g where a > 0 else 0: selected, as torch does (an inf upstream
    where a <= 0 gives 0, not nan), and one op, not a mask, a scalar tensor and a
    select (every ReLU of every backward pass comes through here)."""

    def compute(self, g, a):
        return A.where(A.positive(a), g, A.zeros(g.shape, g))

    def gradient(self, out_grad, node):  # (zero almost everywhere with respect to a, as torch)
        return relu_gradient(out_grad, node.inputs[1]), None


def relu_gradient(g, a):
    return ReLUGradient()(g, a)


class Tanh(TensorOp):
    def compute(self, a):
        return A.tanh(a)

    def gradient(self, out_grad, node):
        return TanhGrad()(out_grad, node)


def tanh(a):
    return Tanh()(a)


class TanhGrad(TensorOp):
    """tanh's backward, g * (1 - y * y) for y = tanh(a), as one op: a lazy LSTM step
    builds 80 of them, and four Tensor ops cost four times the Python of one."""

    def compute(self, g, y):
        return g * (1 - y * y)

    def gradient(self, out_grad, node):
        g, y = node.inputs
        return TanhGrad()(out_grad, y), out_grad * g * (y * -2)


class Sigmoid(TensorOp):
    """1 / (1 + exp(-a)), one IR primitive computed so that it never overflows and keeps
    its relative precision for negative inputs: with z = exp(-|a|) in (0, 1],
    sigmoid(|a|) = 1 / (1 + z) and sigmoid(-|a|) = z / (1 + z) (array_api.sigmoid,
    codegen/vecmath).  ((tanh(a/2) + 1) / 2 cancels: it gave 0 from a = -17 on, so
    log(sigmoid(a)) was -inf.)"""

    def compute(self, a):
        require_float("sigmoid", a)
        return A.sigmoid(a)

    def gradient(self, out_grad, node):
        return SigmoidGrad()(out_grad, node)


def sigmoid(a):
    return Sigmoid()(a)


class SigmoidGrad(TensorOp):
    """sigmoid's backward, g * y * (1 - y) for y = sigmoid(a), as one op (see TanhGrad)."""

    def compute(self, g, y):
        return g * y * (1 - y)

    def gradient(self, out_grad, node):
        g, y = node.inputs
        return SigmoidGrad()(out_grad, y), out_grad * g * (1 - y * 2)


class Sqrt(TensorOp):
    def compute(self, a):
        return A.sqrt(a)

    def gradient(self, out_grad, node):
        return out_grad / (node * 2)


class StdSqrt(Sqrt):
    """sqrt of a variance: a standard deviation, whose gradient is 0 where it is 0 (torch:
    all the values equal, so no direction changes it), not 0 / 0."""

    def gradient(self, out_grad, node):
        return where(node.eq(0), out_grad * 0, out_grad / (node * 2))


def sqrt(a):
    return Sqrt()(a)


class AsType(TensorOp):
    """Cast to another dtype; the gradient is cast back."""

    def __init__(self, dtype):
        self.dtype = dtype_name(dtype)

    def compute(self, a):
        return A.astype(a, self.dtype)

    def gradient(self, out_grad, node):
        return astype(out_grad, node.inputs[0].dtype)


def astype(a, dtype):
    return a if a.dtype == dtype_name(dtype) else AsType(dtype)(a)
