"""Advanced indexing: the gather and scatter_add ops, and numpy-style indexing
(integer arrays, lists, Tensors, boolean masks) lowered onto them.

`a[idx]` applies the basic part of the index (slices, None, ...) as a view, moves
the indexed axes together and gathers along them, so the result is one gather
node that fuses into its reader's kernel like any elementwise op; its gradient is
a scatter_add, and scatter_add's is a gather.  Index values that needle can see
(lists, numpy arrays, boolean masks) are checked here, with errors naming the op
and the shapes; values computed on the device (a Tensor) are never read back, and
the kernels clamp them into range, so no index ever reads or writes out of bounds.
"""
from __future__ import annotations

import numbers

import numpy as np

from .. import array_api as A
from ..autograd import Tensor, TensorOp, host_argument
from ..backend_ndarray import numpy_kernels as NK
from ..dtypes import np_dtype
from ..engine import capture
from ..errors import DTypeError, IndexingError, ShapeError, fmt_shape
from .ops_movement import getitem
from .ops_shape import permute, reshape
from .ops_reduce import broadcast_to


def _build():
    from ..ir import build
    return build


def _run(make_node, numpy_fn, first, arrays):
    """One indexing primitive on any array type: numpy (the np backend), a lazy array
    (records the node), or an NDArray (a compiled kernel, or numpy on cpu_numpy())."""
    if A._np(first):
        return numpy_fn(first, [np.asarray(i) for i in arrays])
    if getattr(first, "is_lazy", False) or any(getattr(i, "is_lazy", False) for i in arrays):
        from ..ir.lazy import as_lazy
        return make_node(as_lazy(first), [as_lazy(i) for i in arrays])
    device = first.device
    if hasattr(device, "_kernel"):
        return device._kernel(lambda x, *ix: make_node(x, ix), first, *arrays)
    return device.wrap(numpy_fn(device.numpy_view(first), [device.numpy_view(i) for i in arrays]))


class Gather(TensorOp):
    """out[p, j, q] = a[p, i_0[j], ..., i_{k-1}[j], q]: index arrays of one shape pick
    along axes [axis, axis + k) of `a`.  Inputs: (a, i_0, ..., i_{k-1})."""

    def __init__(self, axis: int):
        self.axis = axis

    def compute(self, a, *indices):
        return _run(lambda x, ix: _build().gather(x, ix, self.axis),
                    lambda x, ix: NK.gather(x, ix, self.axis), a, indices)

    def gradient(self, out_grad, node):
        a, indices = node.inputs[0], tuple(node.inputs[1:])
        sizes = a.shape[self.axis:self.axis + len(indices)]
        return (scatter_add(out_grad, indices, self.axis, sizes),) + (None,) * len(indices)


class ScatterAdd(TensorOp):
    """Zeros of shape values[:axis] + sizes + values[axis + I.ndim:] with
    out[p, i_0[j], ..., q] += values[p, j, q] (gather's adjoint)."""

    def __init__(self, axis: int, sizes):
        self.axis = axis
        self.sizes = tuple(int(n) for n in sizes)

    def compute(self, values, *indices):
        return _run(lambda x, ix: _build().scatter_add(x, ix, self.axis, self.sizes),
                    lambda x, ix: NK.scatter_add(x, ix, self.axis, self.sizes), values, indices)

    def gradient(self, out_grad, node):
        indices = tuple(node.inputs[1:])
        return (gather(out_grad, indices, self.axis),) + (None,) * len(indices)


def _index_tensor(i, device, op: str, size=None) -> Tensor:
    """An index array as a constant Tensor.  A Tensor is used as is, on its device (so a
    step captured by needle.jit reads each call's indices); its values are checked when
    they are already computed, and clamped by the kernels otherwise.  Host data (lists,
    numpy) is checked against `size` and made non-negative."""
    i = host_argument(i, op)
    if isinstance(i, Tensor):
        if i.dtype == "bool":
            raise IndexingError(f"{op}: index arrays must hold integers, got a bool tensor of shape "
                                f"{fmt_shape(i.shape)}")
        known = _computed_values(i)
        if known is not None:
            _check_range(op, known, size, " (a Tensor index)")
            capture.check(i.realize_cached_data(), lambda v: _check_range(op, v, size, " (a Tensor index)"))
        return i.const_of()
    arr = np.asarray(i.numpy() if hasattr(i, "numpy") else i)
    if arr.size == 0:
        arr = arr.astype(np.int64)
    if arr.dtype.kind not in "iu":
        raise IndexingError(f"{op}: index arrays must hold integers, got {arr.dtype}")
    arr = arr.astype(np.int64)
    _check_range(op, arr, size)
    if size is not None and arr.size:
        arr = np.where(arr < 0, arr + size, arr)
    return Tensor(arr, device=device, dtype="int64", requires_grad=False)


def _computed_values(t: Tensor):
    """The values of `t` if they are computed already (a look, not a computation), else None."""
    data = t._cached_data
    if data is None or (getattr(data, "is_lazy", False) and data.realized is None):
        return None
    data = t.realize_cached_data()
    return np.asarray(data.numpy() if hasattr(data, "numpy") else data)


def _check_range(op: str, values: np.ndarray, size, what: str = "") -> None:
    if not values.size:
        return
    if values.dtype.kind == "f" and np.modf(values)[0].any():
        bad = values[values != np.floor(values)].flat[0]
        raise IndexingError(f"{op}: index values must be whole numbers, got {bad}{what}")
    if size is not None and (values.min() < -size or values.max() >= size):  # (the common case: two passes)
        bad = (values < -size) | (values >= size)
        if bad.any():
            raise IndexingError(f"{op}: index {values[bad].flat[0]:g} is out of bounds for an axis of size "
                                f"{size}{what}")


def gather(a: Tensor, indices, axis: int = 0) -> Tensor:
    """a gathered along axes [axis, axis + k) by k index arrays (Tensors, lists or
    numpy arrays) of one shape, passed as a tuple (or one array for k = 1, which is
    `np.take(a, indices, axis)`)."""
    if not isinstance(indices, tuple):
        indices = (indices,)
    if not isinstance(axis, numbers.Integral) or not 0 <= axis <= len(a.shape) - len(indices):
        raise IndexingError(f"gather: {len(indices)} index array(s) at axis {axis} do not fit shape {fmt_shape(a.shape)}")
    ix = [_index_tensor(i, a.device, "gather", a.shape[axis + d]) for d, i in enumerate(indices)]
    return Gather(int(axis))(a, *ix)


def scatter_add(values: Tensor, indices, axis: int, sizes) -> Tensor:
    """Zeros of shape values[:axis] + sizes + values[axis + I.ndim:] plus `values`
    added at the positions the index arrays (a tuple, or one array) name."""
    if not isinstance(indices, tuple):
        indices = (indices,)
    sizes = (sizes,) if isinstance(sizes, numbers.Integral) else tuple(sizes)
    ix = [_index_tensor(i, values.device, "scatter_add", n) for i, n in zip(indices, sizes)]
    shape, k = tuple(values.shape), (len(ix[0].shape) if ix else 0)
    where = f"values of shape {fmt_shape(shape)}, index arrays of shape " + \
        ", ".join(fmt_shape(i.shape) for i in ix) + f", sizes {sizes}"
    if len(sizes) != len(ix) or any(i.shape != ix[0].shape for i in ix):
        raise ShapeError(f"scatter_add: one index array per output size, all of one shape ({where})")
    if not isinstance(axis, numbers.Integral) or not -(len(shape) - k + 1) <= axis <= len(shape) - k:
        raise IndexingError(f"scatter_add: axis {axis} does not fit ({where})")
    axis = int(axis) % (len(shape) - k + 1)  # (-1: the index arrays' axes end at the last)
    if shape[axis:axis + k] != tuple(ix[0].shape):
        raise ShapeError(f"scatter_add: the values' axes {axis}..{axis + k - 1} must have the index arrays' "
                         f"shape ({where})")
    return ScatterAdd(axis, sizes)(values, *ix)


class Pick(TensorOp):
    """out[r] = a[r, idx[r]] for every row r of the leading axes: one entry of the last
    axis per row (the label logits of a classification loss).  Forward, a gather;
    backward, out_grad times (position == idx) — elementwise, so it fuses into the
    kernel reading the gradient instead of a scatter kernel of its own."""

    def compute(self, a, idx):
        rows, k = a.shape[:-1], a.shape[-1]
        n = int(np.prod(rows))
        flat = A.reshape(a, (n, k))
        picked = _run(lambda x, ix: _build().gather(x, ix, 0), lambda x, ix: NK.gather(x, ix, 0),
                      flat, (_ramp(n, "int64", a), A.reshape(idx, (n,))))
        return A.reshape(picked, rows)

    def gradient(self, out_grad, node):
        a, idx = node.inputs
        return PickGrad(a.shape[-1])(out_grad, idx), None


class PickGrad(TensorOp):
    """Pick's backward as one op: g (rows) -> rows + (k,), g[r] at column idx[r] of
    row r and zeros elsewhere, i.e. g times (column == idx).  One op instead of the
    seven a classification loss's every backward built from a column ramp, reshapes,
    broadcasts and a compare.  Linear in g: its gradient picks."""

    def __init__(self, k: int):
        self.k = k

    def compute(self, g, idx):
        from .ops_compare import _compare_arrays  # (ops_compare imports this module)
        rows = tuple(g.shape)
        shape = rows + (self.k,)
        column = A.broadcast_to(A.reshape(_ramp(self.k, g.dtype, g), (1,) * len(rows) + (self.k,)), shape)
        labels = idx if idx.dtype == g.dtype else A.astype(idx, g.dtype)
        hit = _compare_arrays("eq", column, A.broadcast_to(A.reshape(labels, rows + (1,)), shape))  # 0/1
        return A.broadcast_to(A.reshape(g, rows + (1,)), shape) * hit

    def gradient(self, out_grad, node):
        return Pick()(out_grad, node.inputs[1]), None


_RAMPS = {}


def _ramp(n: int, dtype, like):
    """0, 1, ..., n - 1 of `dtype` in `like`'s array type.  The NDArray is made once per
    (n, dtype, device) and read by every step's graph (a graph never writes a leaf)."""
    if A._np(like) or not like.device.on_host:  # (device memory is not held past a step)
        return host_array(np.arange(n, dtype=np_dtype(dtype)), like)
    key = (n, str(dtype), like.device)
    array = _RAMPS.get(key)
    if array is None:
        if len(_RAMPS) >= 64:  # bounded: a few label counts and batch sizes in practice
            _RAMPS.clear()
        array = _RAMPS[key] = _on_device(np.arange(n, dtype=np_dtype(dtype)), like.device)
    return _operand(array, like)


def host_array(array: np.ndarray, like):
    """A host constant in `like`'s array type (numpy, NDArray, or a lazy buffer)."""
    if A._np(like):
        return array
    return _operand(_on_device(array, like.device), like)


def _on_device(array: np.ndarray, device):
    from ..backend_ndarray.ndarray import NDArray
    return NDArray(array, device=device, dtype=str(array.dtype))


def _operand(array, like):
    """An NDArray as an operand next to `like`: itself, or a buffer node of a lazy graph."""
    if getattr(like, "is_lazy", False):
        from ..ir.lazy import as_lazy
        return as_lazy(array)
    return array


def pick(a: Tensor, idx) -> Tensor:
    """a[..., idx] row by row: for a of shape rows + (k,) and idx of shape rows,
    out[r] = a[r, idx[r]] (like np.take_along_axis on the last axis, squeezed)."""
    if not a.shape:
        raise ShapeError("pick: a 0-d tensor has no axis to pick from (shape ())")
    rows, k = tuple(a.shape[:-1]), a.shape[-1]
    ix = _index_tensor(idx, a.device, "pick", k)
    if tuple(ix.shape) != rows:
        raise ShapeError(f"pick: indices of shape {fmt_shape(ix.shape)} do not match the rows {fmt_shape(rows)} "
                         f"of {fmt_shape(a.shape)}")
    return Pick()(a, ix)


class Select(TensorOp):
    """`a` where the constant `mask` is nonzero, else `b` (setitem's functional form)."""

    def compute(self, mask, a, b):
        if A._np(mask):
            return np.where(mask != 0, a, b).astype(a.dtype)
        return mask.where(a, b)

    def gradient(self, out_grad, node):  # (selected, not multiplied by the mask: an inf upstream gives 0, not nan)
        from .ops_elementwise import where
        mask = node.inputs[0]
        return None, where(mask, out_grad, 0), where(mask, 0, out_grad)


def select(mask, a, b) -> Tensor:
    return Select()(mask, a, b)


# ---- numpy-style index lowering --------------------------------------------------------------
def _is_basic(i) -> bool:
    return i is None or i is Ellipsis or isinstance(i, slice) or \
        (isinstance(i, (numbers.Integral, np.integer)) and not isinstance(i, (bool, np.bool_)))


def is_mask(i) -> bool:
    """A boolean index: bool data, or a Tensor made by a comparison (float 0/1)."""
    if isinstance(i, Tensor):
        return i.dtype == "bool"
    return not _is_basic(i) and np.asarray(i).dtype == np.bool_


def _host_mask(i) -> np.ndarray:
    i = host_argument(i, "a boolean mask")
    return np.asarray(i.numpy() if hasattr(i, "numpy") else i) != 0


def _expand(shape, items, op: str) -> list:
    """Items per axis: None, a slice, or ("array", data, axis); masks become their
    nonzero positions (one array per mask axis), ellipsis becomes slices."""
    for i in items:
        if isinstance(i, (bool, np.bool_)):
            raise IndexingError(f"{op}: a bare True/False index is not supported (shape {fmt_shape(shape)})")
    items = [_host_mask(i) if is_mask(i) else i for i in items]  # a mask's shape needs its data
    n_used = sum(i.ndim if isinstance(i, np.ndarray) and i.dtype == np.bool_ else 0 if i is None or i is Ellipsis
                 else 1 for i in items)
    if sum(1 for i in items if i is Ellipsis) > 1:
        raise IndexingError(f"{op}: an index can have only one ellipsis (...), shape {fmt_shape(shape)}")
    if n_used > len(shape):
        raise IndexingError(f"{op}: too many indices ({n_used}) for shape {fmt_shape(shape)}")
    out, axis = [], 0
    for i in items:
        if i is Ellipsis:
            out.extend([slice(None)] * (len(shape) - n_used))
            axis += len(shape) - n_used
        elif i is None or isinstance(i, slice):
            out.append(i)
            axis += i is not None
        elif is_mask(i):
            mask = _host_mask(i)
            if mask.shape != tuple(shape[axis:axis + mask.ndim]):
                raise IndexingError(f"{op}: boolean mask of shape {fmt_shape(mask.shape)} does not match axes "
                                    f"{axis}..{axis + mask.ndim - 1} of shape {fmt_shape(shape)}")
            out.extend(("array", pos, axis + d) for d, pos in enumerate(np.nonzero(mask)))
            axis += mask.ndim
        else:
            out.append(("array", i, axis))
            axis += 1
    out.extend([slice(None)] * (len(shape) - axis))
    return out


def index(a: Tensor, idxs) -> Tensor:
    """a[idxs] with numpy's rules: basic indices make a view; integer arrays, lists,
    Tensors and boolean masks gather (the result's advanced dims sit where the first
    index array was when the arrays are adjacent, else first)."""
    items = idxs if isinstance(idxs, tuple) else (idxs,)
    if all(_is_basic(i) for i in items):
        return getitem(a, idxs)
    if len(items) == 1 and is_mask(items[0]) and _host_mask(items[0]).ndim == 0:  # (numpy: a new axis of
        return index(reshape(a, (1,) + tuple(a.shape)), (_host_mask(items[0]).reshape(1),))  # 1 or 0 items)
    entries = _expand(a.shape, items, "getitem")
    basic, arrays, positions = [], [], []
    out_axis = 0
    for e in entries:
        if isinstance(e, tuple):
            basic.append(slice(None))
            arrays.append((e[1], a.shape[e[2]]))
            positions.append(out_axis)
        else:
            basic.append(e)
        out_axis += 1
    b = a if all(isinstance(e, slice) and e == slice(None) for e in basic) else getitem(a, tuple(basic))
    # (numpy's rule reads the index as written: a slice, None or an ellipsis between two
    # advanced indices separates them, an ellipsis that stands for no axis too)
    advanced = [k for k, i in enumerate(items) if not (i is None or i is Ellipsis or isinstance(i, slice))]
    adjacent = advanced == list(range(advanced[0], advanced[0] + len(advanced)))
    if adjacent:
        axis = positions[0]
    else:  # numpy puts the broadcast index dims first
        rest = [d for d in range(len(b.shape)) if d not in positions]
        b, axis = permute(b, tuple(positions + rest)), 0
    for data, _ in arrays:  # (numpy's rule: a float index is an error, not rounded to a position)
        dtype = data.dtype if isinstance(data, Tensor) else np.asarray(data).dtype
        if str(dtype).startswith("float"):
            raise IndexingError(f"getitem: index arrays must hold integers or booleans, got {dtype} "
                                f"(tensor shape {fmt_shape(a.shape)}); x.long() makes integers")
    try:
        ix = [_index_tensor(data, a.device, "getitem", n) for data, n in arrays]
    except IndexingError as e:
        raise IndexingError(f"{e} (tensor shape {fmt_shape(a.shape)})") from None
    try:
        ishape = np.broadcast_shapes(*[i.shape for i in ix])
    except ValueError:
        raise IndexingError("getitem: index arrays of shapes " + ", ".join(fmt_shape(i.shape) for i in ix)
                            + f" cannot be broadcast together (tensor shape {fmt_shape(a.shape)})") from None
    ix = [i if i.shape == ishape else broadcast_to(i, ishape) for i in ix]
    return Gather(axis)(b, *ix)


def _flat_positions(shape, idxs) -> np.ndarray:
    """The row-major position of every element `x[idxs]` selects, by numpy's own
    indexing rules (read on a broadcast view, so no array of the full size is made)."""
    strides = np.cumprod((1,) + tuple(shape[::-1]))[::-1][1:] if shape else ()
    total = np.zeros((), dtype=np.int64)
    if not shape:
        return np.broadcast_to(total, ())[idxs]
    parts = []
    for d, (n, st) in enumerate(zip(shape, strides)):
        axis_pos = (np.arange(n, dtype=np.int64) * st).reshape([-1 if j == d else 1 for j in range(len(shape))])
        parts.append(np.broadcast_to(axis_pos, shape)[idxs])
    return sum(parts[1:], parts[0])


def _host_index(idxs):
    items = idxs if isinstance(idxs, tuple) else (idxs,)
    out = []
    for i in items:
        if _is_basic(i):
            out.append(i)
        elif is_mask(i):
            out.append(_host_mask(i))
        else:
            i = host_argument(i, "setitem")
            arr = np.asarray(i.numpy() if hasattr(i, "numpy") else i)
            if arr.size == 0:
                arr = arr.astype(np.int64)
            if arr.dtype.kind == "f" and isinstance(i, Tensor) and np.all(arr == np.round(arr)):
                arr = arr.astype(np.int64)
            out.append(arr)
    return tuple(out)


#: an integer Tensor index of at most this many positions is written by kernels
#: (repeated positions are found by comparing every pair), so a step needle.jit
#: captures can use it; a longer one is read on the host, which a capture refuses
DEVICE_INDEX_LIMIT = 1024


def setitem(a: Tensor, idxs, value) -> Tensor:
    """The functional form of `a[idxs] = value`: a new Tensor equal to `a` except at
    the indexed positions, which hold `value` (broadcast; for a position indexed
    twice the last value wins, as in numpy).  Differentiable in `a` and `value`."""
    index = host_argument(idxs, "setitem") if a.shape and not isinstance(idxs, (tuple, list)) and \
        not _is_basic(idxs) and not is_mask(idxs) else None
    if isinstance(index, Tensor) and 0 < int(np.prod(index.shape)) <= DEVICE_INDEX_LIMIT:
        return _setitem_by_kernels(a, index, value)
    try:
        positions = _flat_positions(a.shape, _host_index(idxs))
    except IndexError as e:
        raise IndexingError(f"setitem: {e} (tensor shape {fmt_shape(a.shape)})") from None
    target = positions.shape
    value = _stored_value(a, value, target)
    flat_pos = positions.reshape(-1)
    if flat_pos.size == 0:
        return a
    # last occurrence of each position wins (numpy's assignment order)
    unique, first_from_end = np.unique(flat_pos[::-1], return_index=True)
    last = flat_pos.size - 1 - first_from_end
    flat_value = reshape(broadcast_to(value, target) if value.shape != target else value, (flat_pos.size,))
    if unique.size != flat_pos.size or not np.array_equal(last, np.arange(flat_pos.size)):
        flat_value = gather(flat_value, last, 0)
    size = int(np.prod(a.shape))
    placed = reshape(scatter_add(flat_value, unique, 0, (size,)), a.shape)
    mask = np.zeros(size, dtype=np_dtype(a.dtype))
    mask[unique] = 1
    mask = Tensor(mask.reshape(a.shape), device=a.device, dtype=a.dtype, requires_grad=False)
    return select(mask, placed, a)


def _stored_value(a: Tensor, value, target: tuple) -> Tensor:
    """`value` as a Tensor of `a`'s dtype that broadcasts to the indexed shape `target`."""
    if not isinstance(value, Tensor):
        try:
            value = Tensor(np.asarray(value, dtype=np_dtype(a.dtype)), device=a.device, dtype=a.dtype,
                           requires_grad=False)
        except (TypeError, ValueError):
            raise DTypeError(f"setitem: cannot store {type(value).__name__} in a {a.dtype} tensor") from None
    try:
        if np.broadcast_shapes(value.shape, target) != target:
            raise ValueError
    except ValueError:
        raise ShapeError(f"setitem: value of shape {fmt_shape(value.shape)} cannot be broadcast to the "
                         f"indexed shape {fmt_shape(target)} of tensor {fmt_shape(a.shape)}") from None
    return value.astype(a.dtype) if value.dtype != a.dtype else value


def _setitem_by_kernels(a: Tensor, index: Tensor, value) -> Tensor:
    """`a[index] = value` for an integer Tensor index into the first axis, computed by
    kernels, as a step needle.jit captures must (it cannot read the index on the host),
    and a plain call too (so both compute alike).  The index is computed first and its
    values checked (and checked again at each replay).  Of repeated positions the last
    wins, as in numpy: a position is kept unless a later one repeats it, found by
    comparing every pair (in the kernels: m^2 comparisons for m positions)."""
    from .ops_compare import compare
    from .ops_elementwise import astype, where
    from .ops_reduce import summation
    if a.dtype == "bool":  # (a sum places the values: on numbers)
        return astype(_setitem_by_kernels(astype(a, "float32"), index, value), "bool")
    n, rest = a.shape[0], tuple(a.shape[1:])
    index.realize_cached_data()  # (its values are checked: a plain call's bad index raises here)
    i = _index_tensor(index, a.device, "setitem", n)
    m = int(np.prod(i.shape))
    value = _stored_value(a, value, tuple(i.shape) + rest)
    rows = (m,) + rest
    flat = reshape(broadcast_to(value, tuple(i.shape) + rest), rows)
    i = reshape(i, (m,))
    i = where(compare("lt", i, 0), i + n, i)  # (negative positions count from the end)
    order = Tensor(np.arange(m, dtype=np.float32), device=a.device, requires_grad=False)
    later = astype(compare("gt", reshape(order, (1, m)), reshape(order, (m, 1))), "float32")  # [j, k]: k after j
    same = astype(compare("eq", reshape(i, (m, 1)), reshape(i, (1, m))), "float32")
    last = astype(compare("eq", summation(same * later, (1,)), 0), a.dtype)
    column = (1,) * len(rest)
    kept = where(broadcast_to(reshape(last, (m,) + column), rows), flat, 0)
    placed = scatter_add(kept, i, 0, (n,))
    written = broadcast_to(reshape(scatter_add(last, i, 0, (n,)), (n,) + column), a.shape)
    return select(written, placed, a)
