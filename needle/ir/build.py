"""Constructors of IR nodes, with shape and dtype inference.

Every check happens here, when the node is built, so a bad program fails at the
line that wrote it with a message naming the op and the shapes; later stages
(passes, codegen) can assume a well-formed graph.
"""
from __future__ import annotations

import math
import threading
import weakref

from ..dtypes import FLOATS, check_elementwise, dtype_name, is_float, require_same
from ..errors import AxisError, DeviceError, DTypeError, ShapeError, fmt_shape
from ..shapes import normalize_axes
from .nodes import BINARY, COMPARE, UNARY, Node, RuntimeScalar, Scalar

class _Origin(threading.local):
    """Name of the frontend op whose compute() is building nodes right now (for
    dumps); per thread, so graphs built concurrently are labelled correctly."""
    name = ""


ORIGIN = _Origin()

#: The port through which an observer labels each new node's origin, `STAMP(name)`
#: -> the origin to keep (a str equal to `name`): the profiler and needle.viz stamp
#: the user's source line on it while they watch (profiler/sources.py).  None: nothing
#: is paid.
STAMP = None


#: the class of the nodes built here: lazy.LazyArray (a Node that answers to NDArray's
#: methods, written with these builders), a port filled by needle/wiring.py
NODE_TYPE = None


def _new(op, srcs, arg, shape, dtype, device):
    if type(srcs) is not tuple:  # (every node of every graph comes through here)
        srcs = tuple(srcs)
    for s in srcs:
        s.consumed = True
    return NODE_TYPE(op, srcs, arg, shape if type(shape) is tuple else tuple(shape), dtype, device,
                     ORIGIN.name if STAMP is None else STAMP(ORIGIN.name))


# ---- loads ------------------------------------------------------------------------------------
def buffer(array) -> Node:
    """A realized NDArray as a graph input (read through its own strides)."""
    return _new("buffer", (), array, array._shape, array._dtype, array._device)


def const(value, shape, dtype, device) -> Node:
    """A scalar baked into the kernels, broadcast to `shape`."""
    return _new("const", (), _scalar(value, dtype), shape, dtype_name(dtype), device)


def param(value, shape, dtype, device) -> Node:
    """A scalar passed to the kernels at run time (user scalars: learning rates,
    bias corrections), so that a new value does not mean a new kernel.  A
    RuntimeScalar has one node per shape: an optimizer uses each of its scalars once
    per parameter, and the compiler would merge those nodes anyway (common.py), so
    sharing them spares every later walk of the graph a fifth of its nodes."""
    dtype = dtype_name(dtype)
    if type(value) is RuntimeScalar and dtype in FLOATS:
        key = (tuple(shape), dtype, device)
        nodes = value.nodes
        if nodes is None:
            nodes = value.nodes = {}
        ref = nodes.get(key)  # (a weak reference: the node holds the scalar, no cycle)
        node = ref() if ref is not None else None
        # (reused only while it is a param read by another node: one realized as an output
        # holds a value, and one nothing read yet could still be rewritten by a lazy setitem)
        if node is None or node.op != "param" or not node.consumed:
            node = _new("param", (), value, shape, dtype, device)
            nodes[key] = weakref.ref(node)
        return node
    return _new("param", (), scalar_value(value, dtype), shape, dtype, device)


#: scalars baked into kernels; any other Python scalar is a run-time `param`, so that
#: a learning rate or a bias correction that changes every step reuses the kernel
BAKED = (0, 1, -1, 2, 0.5)


def baked(value, exponent: bool = False) -> bool:
    """The one policy every mode follows for a Python scalar operand: a power's
    exponent (x**2 becomes x*x, x**0.5 sqrt) and the common values in BAKED are part
    of the program (`const`); any other value is a run-time `param`."""
    return exponent or (value in BAKED and not isinstance(value, RuntimeScalar))


def scalar(value, shape, dtype, device, exponent: bool = False) -> Node:
    """A Python scalar operand: a `const` or a `param`, as `baked` decides."""
    return (const if baked(value, exponent) else param)(value, shape, dtype, device)


def scalar_value(value, dtype):
    """`value` as a scalar of `dtype` holds it (what a `param` node carries); the
    nodes of one RuntimeScalar share its Scalar, so the schedule passes it once."""
    if isinstance(value, RuntimeScalar) and is_float(dtype):
        return value
    return Scalar(_scalar(value, dtype))


def _scalar(value, dtype):
    dtype = dtype_name(dtype)
    if isinstance(value, RuntimeScalar) and is_float(dtype):
        return value  # a float already, and replays of captured steps read it again
    if dtype == "bool":
        return bool(value)
    return float(value) if is_float(dtype) else int(value)


# ---- elementwise ------------------------------------------------------------------------------
def elementwise(op: str, *srcs) -> Node:
    """An elementwise op on sources of one shape (broadcast them first)."""
    first = srcs[0]
    shape, dtype, device = first.shape, first.dtype, first.device
    for s in srcs:
        if s.shape != shape:
            raise ShapeError(f"{op}: shapes {' and '.join(fmt_shape(x.shape) for x in srcs)} differ "
                             "(broadcast first)")
        if s.device is not device:
            _same_device(op, srcs)
    if op == "where":
        cond, a, b = srcs
        if cond.dtype != "bool":
            raise DTypeError(f"where: condition must be bool, got {cond.dtype}")
        dtype = require_same("where", a.dtype, b.dtype, shapes=(a.shape, b.shape))
    elif op in _UNARY_OR_BINARY:
        for s in srcs:
            if s.dtype != dtype:
                require_same(op, *[x.dtype for x in srcs], shapes=[x.shape for x in srcs])
        if (op, dtype) not in _ACCEPTED:
            check_elementwise(op, dtype, [x.shape for x in srcs])
            _ACCEPTED.add((op, dtype))
        if op in COMPARE:
            dtype = "bool"
    else:
        raise ValueError(f"unknown elementwise op {op!r}")
    if first.op == "const":
        if op != "where" and all(s.op == "const" for s in srcs):
            return const(_fold(op, [s.arg for s in srcs], dtype), shape, dtype, device)
    elif op == "ne" and first.op == "cast" and srcs[1].op == "const" and srcs[1].arg == 0 \
            and first.srcs[0].dtype == "bool":
        return first.srcs[0]  # (bool as number) != 0 is the bool itself
    elif op == "add" and first.op == "assemble" and srcs[1].op == "assemble" and _disjoint(first.arg, srcs[1].arg):
        # the gradients of slices (an LSTM's four gates) summed: one assemble of all the
        # pieces, instead of a zero fill and a kernel per piece, then the additions
        # (both were checked when they were built: an LSTM's input gradient merges one
        # piece per time step, and checking them all again at each merge was quadratic)
        return _new("assemble", first.srcs + srcs[1].srcs, first.arg + srcs[1].arg, shape, dtype, device)
    return _new(op, srcs, None, shape, dtype, device)


def _disjoint(indices_a, indices_b) -> bool:
    """Whether no slice of `indices_a` (assemble indices: (start, stop, step) per axis)
    shares an element with one of `indices_b`: on some axis their ranges do not meet,
    or they step alike from starts in different residues."""
    for x in indices_a:  # (loops, not generators: a merge per time step of an LSTM)
        for y in indices_b:
            for (a0, a1, c), (b0, b1, d) in zip(x, y):
                if a1 <= b0 or b1 <= a0 or (c == d and a0 % c != b0 % d):
                    break  # apart on this axis
            else:
                return False
    return True


_UNARY_OR_BINARY = frozenset(UNARY + BINARY)
#: (op, dtype) pairs that passed `check_elementwise` (a pure rule: checked once per pair)
_ACCEPTED = set()


def _fold(op, values, dtype):
    """Constant folding with the reference semantics (numpy)."""
    import numpy as np
    from ..backend_ndarray import numpy_kernels
    from ..dtypes import np_dtype
    arrays = [np.asarray(v, dtype=np_dtype(dtype) if op not in COMPARE else None) for v in values]
    out = numpy_kernels.unary(op, arrays[0]) if op in UNARY else numpy_kernels.binary(op, arrays[0], arrays[1], arrays[0].dtype)
    return out.item()


def cast(src, dtype) -> Node:
    dtype = dtype_name(dtype)
    if dtype == src.dtype:
        return src
    if src.op == "const":
        return const(src.arg, src.shape, dtype, src.device)
    return _new("cast", (src,), dtype, src.shape, dtype, src.device)


def _same_device(op, srcs) -> None:
    first = srcs[0].device
    if all(s.device is first for s in srcs):
        return
    devices = {s.device for s in srcs}
    if len(devices) > 1:
        raise DeviceError(f"{op}: operands on different devices: {', '.join(map(str, devices))}")


# ---- reductions -------------------------------------------------------------------------------
def reduce(op: str, src, axes) -> Node:
    """Reduce over `axes`; the reduced axes stay as size 1."""
    axes = normalize_axes(op, axes, src.ndim, src.shape)
    if src.dtype == "bool" and op == "reduce_sum":
        raise DTypeError("sum: cast bool to a number type first")
    if not axes:
        return src
    shape = tuple(1 if i in axes else s for i, s in enumerate(src.shape))
    return _new(op, (src,), axes, shape, src.dtype, src.device)


# ---- movement ---------------------------------------------------------------------------------
def _movable(src, op, arg, shape):
    """Movement of a broadcast scalar is again a broadcast scalar."""
    if src.op in ("const", "param"):
        return _new(src.op, (), src.arg, shape, src.dtype, src.device)
    return _new(op, (src,), arg, shape, src.dtype, src.device)


def reshape(src, shape) -> Node:
    shape = tuple(int(s) for s in shape)
    if math.prod(shape) != src.size or any(s < 0 for s in shape):
        raise ShapeError(f"reshape: cannot reshape {fmt_shape(src.shape)} (size {src.size}) into {fmt_shape(shape)}")
    if shape == src.shape:
        return src
    return _movable(src, "reshape", shape, shape)


def permute(src, axes) -> Node:
    axes = tuple(int(a) % max(src.ndim, 1) for a in axes)
    if sorted(axes) != list(range(src.ndim)):
        raise AxisError(f"permute: axes {axes} are not a permutation for shape {fmt_shape(src.shape)}")
    if axes == tuple(range(src.ndim)):
        return src
    return _movable(src, "permute", axes, tuple(src.shape[a] for a in axes))


def expand(src, shape) -> Node:
    """Broadcast size-1 axes to `shape` (same number of dims)."""
    shape = tuple(int(s) for s in shape)
    if len(shape) != src.ndim or any(s != n and s != 1 for s, n in zip(src.shape, shape)):
        raise ShapeError(f"broadcast_to: cannot broadcast {fmt_shape(src.shape)} to {fmt_shape(shape)}")
    if shape == src.shape:
        return src
    return _movable(src, "expand", shape, shape)


def pad(src, pads) -> Node:
    """Zero padding, one (before, after) pair per axis."""
    pads = tuple((int(lo), int(hi)) for lo, hi in pads)
    if len(pads) != src.ndim or any(lo < 0 or hi < 0 for lo, hi in pads):
        raise ShapeError(f"pad: need one non-negative (before, after) pair per axis of {fmt_shape(src.shape)}, "
                         f"got {pads}")
    if not any(lo or hi for lo, hi in pads):
        return src
    shape = tuple(s + lo + hi for s, (lo, hi) in zip(src.shape, pads))
    return _new("pad", (src,), pads, shape, src.dtype, src.device)


def shrink(src, bounds) -> Node:
    """Keep [start, stop) along each axis."""
    bounds = tuple([(int(a), int(b)) for a, b in bounds])
    fits, whole = len(bounds) == src.ndim, True
    for (a, b), s in zip(bounds, src.shape):  # (a loop: every slice of every step comes here)
        fits = fits and 0 <= a <= b <= s
        whole = whole and a == 0 and b == s
    if not fits:
        raise ShapeError(f"shrink: bounds {bounds} do not fit shape {fmt_shape(src.shape)}")
    if whole:
        return src
    return _movable(src, "shrink", bounds, tuple([b - a for a, b in bounds]))


def flip(src, axes) -> Node:
    axes = normalize_axes("flip", axes, src.ndim, src.shape)
    axes = tuple(a for a in axes if src.shape[a] > 1)
    if not axes:
        return src
    return _movable(src, "flip", axes, src.shape)


def stride(src, steps) -> Node:
    """Keep every steps[i]-th element along axis i (from the first)."""
    steps = tuple(int(s) for s in steps)
    if len(steps) != src.ndim or any(s < 1 for s in steps):
        raise ShapeError(f"stride: need one positive step per axis of {fmt_shape(src.shape)}, got {steps}")
    if all(s == 1 for s in steps):
        return src
    shape = tuple(-(-n // s) for n, s in zip(src.shape, steps))
    return _movable(src, "stride", steps, shape)


def window(src, axes, kernel, step) -> Node:
    """Sliding windows over consecutive `axes`: each windowed axis of size n becomes
    (n - k) // step + 1 positions, and the kernel axes are inserted after the last
    windowed axis.  NHWC with axes (1, 2) gives (N, Ho, Wo, KH, KW, C)."""
    axes, kernel = tuple(axes), tuple(kernel)
    if list(axes) != list(range(axes[0], axes[0] + len(axes))) or len(kernel) != len(axes) or step < 1:
        raise ShapeError(f"window: bad axes {axes} / kernel {kernel} / step {step}")
    outs = []
    for a, k in zip(axes, kernel):
        if not 1 <= k <= src.shape[a]:
            raise ShapeError(f"window: kernel {kernel} does not fit shape {fmt_shape(src.shape)}")
        outs.append((src.shape[a] - k) // step + 1)
    first, last = axes[0], axes[-1]
    shape = src.shape[:first] + tuple(outs) + kernel + src.shape[last + 1:]
    return _new("window", (src,), (axes, kernel, step), shape, src.dtype, src.device)


def as_strided(src, shape, strides, offset=0) -> Node:
    """A view with element strides over src's row-major layout (like numpy's)."""
    shape, strides = tuple(int(s) for s in shape), tuple(int(s) for s in strides)
    if len(shape) != len(strides):
        raise ShapeError(f"as_strided: shape {fmt_shape(shape)} and strides {strides} differ in length")
    if math.prod(shape):
        hi = offset + sum((n - 1) * st for n, st in zip(shape, strides) if st > 0)
        lo = offset + sum((n - 1) * st for n, st in zip(shape, strides) if st < 0)
        if lo < 0 or hi >= src.size:
            raise ShapeError(f"as_strided: view {fmt_shape(shape)} strides {strides} offset {offset} reads "
                             f"outside the {src.size} elements of {fmt_shape(src.shape)}")
    return _new("as_strided", (src,), (shape, strides, int(offset)), shape, src.dtype, src.device)


# ---- matmul, assemble, copy -------------------------------------------------------------------
def matmul(a, b) -> Node:
    """(..., m, k) @ (..., k, n) with identical batch shapes (broadcast first)."""
    if a.ndim < 2 or b.ndim < 2 or a.shape[:-2] != b.shape[:-2] or a.shape[-1] != b.shape[-2]:
        raise ShapeError(f"matmul: shapes {fmt_shape(a.shape)} and {fmt_shape(b.shape)} do not match")
    dtype = a.dtype
    if b.dtype != dtype:
        require_same("matmul", a.dtype, b.dtype, shapes=(a.shape, b.shape))
    if dtype == "bool":
        raise DTypeError("matmul: not defined for bool")
    if b.device is not a.device:
        _same_device("matmul", (a, b))
    return _new("matmul", (a, b), None, a.shape[:-1] + b.shape[-1:], dtype, a.device)


def assemble(shape, pieces, like) -> Node:
    """Zeros of `shape` with each piece written at its index: a tuple of
    (start, stop, step) per axis, step > 0.  Pieces must not overlap."""
    shape = tuple(shape)
    srcs, indices = [], []
    for node, index in pieces:  # (loops, not generators: every slice's gradient comes here)
        if len(index) != len(shape):
            raise ShapeError(f"assemble: index {index} does not fit shape {fmt_shape(shape)}")
        fits = len(node.shape) == len(shape)
        for (a, b, c), n, m in zip(index, shape, node.shape):
            fits = fits and 0 <= a <= b <= n and c > 0 and len(range(a, b, c)) == m
        if not fits:
            raise ShapeError(f"assemble: piece {fmt_shape(node.shape)} does not fit slice {index} of {fmt_shape(shape)}")
        if node.dtype != like.dtype:
            require_same("assemble", like.dtype, node.dtype)
        if node.device is not like.device:
            _same_device("assemble", [like, node])
        srcs.append(node)
        indices.append(tuple(index))
    return _new("assemble", srcs, tuple(indices), shape, like.dtype, like.device)


def copy(src) -> Node:
    return _new("copy", (src,), None, src.shape, src.dtype, src.device)


# ---- indexing ---------------------------------------------------------------------------------
def _check_indices(op: str, shape, indices, axis: int, sizes) -> tuple:
    """Index arrays: at least one, one shape, numeric, fitting axes [axis, axis + k)."""
    indices = tuple(indices)
    if not indices:
        raise ShapeError(f"{op}: needs at least one index array")
    k = len(indices)
    if not isinstance(axis, int) or not 0 <= axis <= len(shape) - (0 if op == "scatter_add" else k):
        raise AxisError(f"{op}: {k} index array(s) at axis {axis} do not fit shape {fmt_shape(shape)}")
    ishape = indices[0].shape
    for i in indices:
        if i.shape != ishape:
            raise ShapeError(f"{op}: index arrays differ in shape: "
                             f"{', '.join(fmt_shape(x.shape) for x in indices)} (broadcast first)")
        if i.dtype == "bool":
            raise DTypeError(f"{op}: index arrays must be numbers, not bool (turn a mask into positions first)")
    if math.prod(ishape) and any(n == 0 for n in sizes):
        raise ShapeError(f"{op}: cannot index an empty axis (sizes {tuple(sizes)}) with {fmt_shape(ishape)} indices")
    return indices


def gather(src, indices, axis: int) -> Node:
    """out[p, j, q] = src[p, i_0[j], ..., i_{k-1}[j], q]: k index arrays of one shape I
    pick along axes [axis, axis + k); the result has shape src[:axis] + I + src[axis+k:].
    Index values are read as integers; negative ones count from the end once, and the
    kernels clamp the rest into range (reads never leave the array; frontends check
    indices they know, so clamping only meets computed indices)."""
    indices = tuple(indices)
    k = len(indices)
    _check_indices("gather", src.shape, indices, axis, src.shape[axis:axis + k])
    _same_device("gather", (src,) + indices)
    shape = src.shape[:axis] + indices[0].shape + src.shape[axis + k:]
    return _new("gather", (src,) + indices, axis, shape, src.dtype, src.device)


def scatter_add(values, indices, axis: int, sizes) -> Node:
    """gather's adjoint: zeros of shape values[:axis] + sizes + values[axis+I.ndim:], with
    out[p, i_0[j], ..., i_{k-1}[j], q] += values[p, j, q] (repeated indices add up;
    indices are wrapped and clamped as in gather)."""
    indices = tuple(indices)
    sizes = tuple(int(n) for n in sizes)
    _check_indices("scatter_add", values.shape, indices, axis, sizes)
    if len(sizes) != len(indices):
        raise ShapeError(f"scatter_add: {len(indices)} index arrays but {len(sizes)} output sizes {sizes}")
    ishape = indices[0].shape
    if values.shape[axis:axis + len(ishape)] != ishape:
        raise ShapeError(f"scatter_add: values {fmt_shape(values.shape)} do not hold the index shape "
                         f"{fmt_shape(ishape)} at axis {axis}")
    if values.dtype == "bool":
        raise DTypeError("scatter_add: cannot add bools; cast to a number type first")
    _same_device("scatter_add", (values,) + indices)
    shape = values.shape[:axis] + sizes + values.shape[axis + len(ishape):]
    return _new("scatter_add", (values,) + indices, (axis, sizes), shape, values.dtype, values.device)
