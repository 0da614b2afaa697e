"""Core data structures of needle: the Value/Tensor graph (reverse-mode autograd's
backward pass is backward.py).

A Tensor made by an op records the op and its inputs (for autograd) and holds its
data: an NDArray in eager mode, or a lazy array (a node of the IR graph) in lazy
mode, where `op.compute()` is called on lazy arrays and so *builds* the IR instead
of computing.  Either way shapes, dtypes and devices are checked when the op is
built.  Data is computed when it is asked for (`numpy()`, `realize()`, printing,
`needle.realize`).
"""
from __future__ import annotations

import contextlib
import threading
from typing import List, Optional, Tuple, Union

import numpy

from . import config
from .backend_selection import BACKEND, Device, NDArray, array_api, cpu
from .dtypes import dtype_name
from .errors import DeviceError, DTypeError, ShapeError, fmt_shape
from .ir import build as ir_build
from .ir.lazy import as_lazy
from .tensor_methods import TensorMethods
from .engine import capture as _capture
from .engine import realize as _engine

#: lazy mode: ops record IR and compute nothing until data is needed (SPEC "Lazy mode").
#: The process's default; a thread inside `needle.lazy(...)` (or an eager backward pass)
#: has its own (`_MODE`), so that one thread's switch never changes another's ops.
LAZY_MODE = config.LAZY and BACKEND == "nd"


class ModeState:
    """One thread's lazy mode (None: the process's LAZY_MODE).  An object of its own, so
    that a `needle.lazy` block entered on one thread and left on another (a generator
    handed to a worker) gives the mode back to the thread it took it from."""

    __slots__ = ("lazy",)

    def __init__(self):
        self.lazy = None


class _Mode(threading.local):
    def __init__(self):
        self.state = ModeState()


_MODE = _Mode()


def lazy_mode() -> bool:
    """Whether ops the calling thread builds now are lazy."""
    mode = _MODE.state.lazy
    return LAZY_MODE if mode is None else mode

#: number of live Tensor/TensorTuple objects (tests use it to check graphs are freed).
TENSOR_COUNTER = 0
#: False inside `no_grad()`: ops then build no graph (their results are constants).
GRAD_ENABLED = True
#: The port through which an observer learns of each Tensor an op makes, `MADE(value)`
#: (the profiler notes the line of an eager Tensor's op, whose data keeps no origin;
#: profiler/sources.py); None: nothing is paid.
MADE = None


class no_grad(contextlib.ContextDecorator):
    """`with needle.no_grad():` (or `@needle.no_grad()`): ops inside record no graph,
    so evaluation keeps no tensors alive for a backward pass that never comes."""

    def __enter__(self):
        global GRAD_ENABLED
        self._previous, GRAD_ENABLED = GRAD_ENABLED, False
        return self

    def __exit__(self, *exc):
        global GRAD_ENABLED
        GRAD_ENABLED = self._previous
        return False


def is_grad_enabled() -> bool:
    return GRAD_ENABLED


class Op:
    """Operator definition: `compute` on arrays, `gradient` on Tensors."""

    def __call__(self, *args):
        raise NotImplementedError()

    @property
    def name(self) -> str:
        return type(self).__name__

    def compute(self, *args: Tuple[NDArray]):
        """Calculate the forward pass on arrays (NDArray, numpy or lazy IR arrays)."""
        raise NotImplementedError()

    def gradient(self, out_grad: "Value", node: "Value") -> Union["Value", Tuple["Value"]]:
        """Partial adjoints of each input, given the output's adjoint."""
        raise NotImplementedError()

    def gradient_as_tuple(self, out_grad: "Value", node: "Value") -> Tuple["Value"]:
        output = self.gradient(out_grad, node)
        if isinstance(output, tuple):
            return output
        if isinstance(output, list):
            return tuple(output)
        return (output,)


class TensorOp(Op):
    """An op whose output is a Tensor."""

    def __call__(self, *args):
        return Tensor.make_from_op(self, args)


class TensorTupleOp(Op):
    """An op whose output is a TensorTuple."""

    def __call__(self, *args):
        return TensorTuple.make_from_op(self, args)


def is_pending(data) -> bool:
    """True for data that is still a node of the lazy IR graph."""
    return getattr(data, "is_lazy", False) and data.realized is None


class Value:
    """A value in the computational graph.  Its fields are slots (a step makes
    thousands of these; other attributes still go to a `__dict__`, made on first use)."""

    __slots__ = ("op", "inputs", "num_outputs", "_cached_data", "requires_grad", "grad", "_version",
                 "_saved_versions", "_earlier", "__dict__", "__weakref__")
    op: Optional[Op]
    inputs: List["Value"]
    _cached_data: object
    requires_grad: bool
    #: set by backward() (None until then)
    grad: Optional["Value"]
    #: bumped by `t[idx] = v`; a node whose input changed since it was built cannot backward
    _version: int
    #: the inputs' versions when this node was built
    _saved_versions: tuple
    #: ((version, the tensor as it was then), ...) for each index assignment that built a graph
    _earlier: tuple

    # ---- data ---------------------------------------------------------------------------
    @property
    def cached_data(self):
        """The realized data (realizes pending lazy work on access)."""
        if _capture.CURRENT is not None and _capture.reading_from_user_code():
            _capture.host_read("Tensor.cached_data")
        return self.realize_cached_data()

    @cached_data.setter
    def cached_data(self, data) -> None:
        self._cached_data = data

    def realize_cached_data(self):
        """Run the computation this value waits for and return its live storage."""
        if _capture.CURRENT is not None and _capture.reading_from_user_code():
            _capture.host_read("Tensor.realize_cached_data()")
        if self._cached_data is None:  # built without data (course-style _init); compute now
            for node in find_topo_sort([self]):
                if node._cached_data is None:
                    node._cached_data = node.op.compute(*[x.realize_cached_data() for x in node.inputs])
        data = self._cached_data
        if isinstance(data, tuple):
            if any(getattr(x, "is_lazy", False) for x in data):
                _realize([x for x in data if is_pending(x)])
                data = self._cached_data = tuple(x.realized if getattr(x, "is_lazy", False) else x for x in data)
        elif getattr(data, "is_lazy", False):
            if data.realized is None:
                _realize([data])
            data = self._cached_data = data.realized
        return data

    def _compute_input(self, lazy=None):
        """What ops compute on: the NDArray, or in lazy mode (`lazy`: the mode the op read
        once for all its inputs) a lazy array (never realizes)."""
        data = self._cached_data
        if data is None:
            return self.realize_cached_data()
        if _capture.CURRENT is not None:  # needle.jit is recording: note where state is read
            _capture.read_state(self, data)
        if lazy_mode() if lazy is None else lazy:  # (implies the nd backend)
            return tuple([as_lazy(x) for x in data]) if type(data) is tuple else as_lazy(data)
        if getattr(data, "is_lazy", False) or (isinstance(data, tuple) and any(getattr(x, "is_lazy", False)
                                                                              for x in data)):
            return self.realize_cached_data()
        return data

    def is_leaf(self) -> bool:
        return self.op is None

    def __del__(self):
        global TENSOR_COUNTER
        TENSOR_COUNTER -= 1

    def _init(self, op: Optional[Op], inputs: List["Value"], num_outputs: int = 1,
              cached_data=None, requires_grad: Optional[bool] = None) -> None:
        global TENSOR_COUNTER
        TENSOR_COUNTER += 1
        if requires_grad is None:
            requires_grad = any(x.requires_grad for x in inputs)
        self.op = op
        self.inputs = inputs
        self.num_outputs = num_outputs
        self._cached_data = cached_data
        self.requires_grad = requires_grad
        self.grad = None
        self._version = 0
        self._saved_versions = ()
        self._earlier = ()
        if _capture.CURRENT is not None:
            _capture.created(self)

    @classmethod
    def make_const(cls, data, *, requires_grad: bool = False) -> "Value":
        value = cls.__new__(cls)
        value._init(None, [], 1, data, requires_grad)  # (positional: every replay's results)
        return value

    def const_of(self) -> "Value":
        """A new constant leaf on this value's data (a detach, an index or a mask cut from
        the graph).  While needle.jit records, the read is noted as a read of this value,
        so a replay finds the data where this value lives (state a later call may have
        replaced) instead of freezing the capture's data as a constant."""
        data = self._cached_data
        if _capture.CURRENT is not None:
            _capture.read_state(self, data)
        return type(self).make_const(data)

    @classmethod
    def make_from_op(cls, op: Op, inputs: List["Value"]) -> "Value":
        """Run `op` on `inputs` (eager: compute now; lazy: record the IR now; either way
        bad shapes raise here) and wrap the result.  Every op of every step comes
        through here, so it is written out flat: no generators, no keyword calls."""
        _check_devices(op, inputs)
        lazy = _MODE.state.lazy  # (read once for all inputs)
        if lazy is None:
            lazy = LAZY_MODE
        args = [x._compute_input(lazy) for x in inputs]
        if lazy:
            origin = ir_build.ORIGIN
            previous, origin.name = origin.name, type(op).__name__
            try:
                data = op.compute(*args)
            finally:
                origin.name = previous
        else:
            data = op.compute(*args)
        value = cls.__new__(cls)
        if MADE is not None:
            MADE(value)
        if GRAD_ENABLED:
            for x in inputs:
                if x.requires_grad:
                    value._init(op, list(inputs), 1, data, True)
                    value._saved_versions = tuple([x._version for x in inputs])
                    return value
        value._init(None, [], 1, data, False)  # nothing to differentiate: keep no graph
        return value


def _holds_bools(array) -> bool:
    if isinstance(array, (bool, numpy.bool_)):
        return True
    if isinstance(array, numpy.ndarray):
        return array.dtype == numpy.bool_
    if isinstance(array, (list, tuple)) and array:
        try:
            return numpy.asarray(array).dtype == numpy.bool_
        except ValueError:  # (ragged: an error of its own, later)
            return False
    return False


def host_argument(x, what: str):
    """`x` (an array-like an op reads on the host: labels, indices) as that op should
    take it: unchanged, except inside a call needle.jit is capturing, where a numpy
    argument of the call becomes a Tensor (an input of every replay, so each call's
    values are used); a boolean one selects by its values, which a replay cannot."""
    if _capture.CURRENT is None or _capture.current() is None or not isinstance(x, numpy.ndarray) or \
            getattr(x, "_needle", None) is None:
        return x
    if x.dtype == numpy.bool_:  # (the call runs plainly: its values decide the result's shape)
        _capture.host_effect(f"indexes with {what} from a numpy argument, whose values decide the "
                             "result's shape (multiply by the mask as a float Tensor instead, which keeps the shape)")
        return x
    return Tensor(x, dtype="float32" if x.dtype.kind == "f" else "int64", requires_grad=False)


def outlives_step(value: "Value") -> "Value":
    """Lazy mode: `value` is state that outlives the graph it was built in (a detached
    tensor, `.data`, module or optimizer state); have its pending data computed with
    the next schedule that runs, so that later steps start from a buffer instead of
    extending (and recomputing) this step's graph."""
    if lazy_mode():
        _engine.realize_later(value)
    return value


def _realize(nodes) -> None:
    _engine.realize_nodes(nodes)


def realize_values(values) -> None:
    """Realize the pending data of all `values` in one go.  (On every step's path, and
    a replay's results are realized already: those are passed over first.)"""
    pending_values = [v for v in values if waiting(v)]
    if not pending_values:
        return
    pending = [n for v in pending_values for n in _engine.pending_nodes(v)]
    if pending:
        _engine.realize_nodes(pending)
    for v in pending_values:
        v.realize_cached_data()


def waiting(value) -> bool:
    """Whether `value`'s data is yet to be computed (or gathered from a tuple's)."""
    data = value._cached_data
    return data is None or type(data) is tuple or getattr(data, "is_lazy", False)


def _check_devices(op: Op, inputs) -> None:
    if len(inputs) < 2 or BACKEND == "np":
        return
    first = _device_of(inputs[0])
    for x in inputs[1:]:  # on every op's path: compare devices without building a set
        d = _device_of(x)
        if d is not first and d != first:
            break
    else:
        return
    tensors = [x for x in inputs if isinstance(x, Tensor)]
    if len({x.device for x in tensors}) > 1:
        where = ", ".join(f"{fmt_shape(x.shape)} on {x.device}" for x in tensors)
        raise DeviceError(f"{op.name}: inputs live on different devices ({where}); move them with .to(device)")


def _device_of(value) -> Device:
    data = value._cached_data
    if data is None or isinstance(data, tuple):
        return value.device
    return data.device


class TensorTuple(Value):
    """A tuple of tensors produced by one op (split, make_tuple)."""

    def __len__(self) -> int:
        return len(self._cached_data)

    def __getitem__(self, index: int):
        from . import ops
        return ops.tuple_get_item(self, index)

    def tuple(self):
        return tuple(self[i] for i in range(len(self)))

    def __repr__(self) -> str:
        return "needle.TensorTuple" + str(self.tuple())

    def __str__(self) -> str:
        return self.__repr__()

    def __add__(self, other):
        from . import ops
        assert isinstance(other, TensorTuple) and len(self) == len(other)
        return ops.make_tuple(*[self[i] + other[i] for i in range(len(self))])

    def detach(self) -> "TensorTuple":
        return outlives_step(self.const_of())

    @property
    def device(self):
        first = self._cached_data[0]
        return first.device if hasattr(first, "device") else cpu()


class Size(int):
    """`t.size`: the element count, an int; `t.size()` the shape, `t.size(dim)` one axis."""

    def __new__(cls, count: int, shape: tuple):
        out = super().__new__(cls, count)
        out.shape = shape
        return out

    def __call__(self, dim=None):
        if dim is None:
            return self.shape
        from .errors import AxisError
        if not isinstance(dim, (int, numpy.integer)) or isinstance(dim, bool):
            raise AxisError(f"size: dim must be an integer, got {type(dim).__name__} {dim!r}")
        if not -len(self.shape) <= dim < len(self.shape):
            raise AxisError(f"size: dim {dim!r} is out of range for shape {fmt_shape(self.shape)}")
        return self.shape[dim]


class Tensor(TensorMethods, Value):
    __slots__ = ()

    def __init__(self, array, *, device: Optional[Device] = None, dtype=None,
                 requires_grad: bool = True, **kwargs):
        if isinstance(array, Tensor):
            device = device if device is not None else array.device
            dtype = dtype_name(dtype) if dtype is not None else array.dtype
            if device == array.device and dtype == array.dtype:
                cached_data = array._cached_data
                if _capture.CURRENT is not None:  # (a read of `array`, as in const_of)
                    _capture.read_state(array, cached_data)
            else:
                cached_data = Tensor._array_from_numpy(array.numpy(), device=device, dtype=dtype)
        else:
            if device is None:
                device = array.device if isinstance(array, NDArray) and BACKEND == "nd" else cpu()
            # the course's numpy backend keeps numpy's dtype when none is given (float64 lists);
            # booleans stay booleans (masks, as torch)
            if dtype is None and BACKEND != "np" and _holds_bools(array):
                dtype = "bool"
            dtype = None if dtype is None and BACKEND == "np" else dtype_name(dtype)
            cached_data = Tensor._array_from_numpy(array, device=device, dtype=dtype)
            if _capture.CURRENT is not None:  # (needle.jit: an argument's values, or a constant)
                _capture.host_array(array, cached_data)
        self._init(None, [], cached_data=cached_data, requires_grad=requires_grad)
        if isinstance(array, Tensor):
            outlives_step(self)  # hw1-style `W = Tensor(W - lr * W.grad)` must not chain steps

    @staticmethod
    def _array_from_numpy(numpy_array, device, dtype):
        if BACKEND == "np":
            if not isinstance(numpy_array, numpy.ndarray):
                numpy_array = numpy.asarray(numpy_array.numpy() if hasattr(numpy_array, "numpy") else numpy_array)
            return numpy.array(numpy_array, dtype=dtype)
        if not isinstance(device, Device):
            raise DeviceError(f"Tensor: device must be a needle device such as needle.cpu(), got {device!r}")
        try:
            return array_api.array(numpy_array, device=device, dtype=dtype)
        except (TypeError, ValueError) as e:
            if isinstance(e, (DTypeError, DeviceError)):
                raise
            raise DTypeError(f"Tensor: cannot make a {dtype} array from {type(numpy_array).__name__}: {e}") from None

    @property
    def data(self) -> "Tensor":
        return self.detach()

    @data.setter
    def data(self, value: "Tensor") -> None:
        if not isinstance(value, Tensor):
            raise DTypeError(f"Tensor.data: expected a Tensor, got {type(value).__name__}")
        if value.dtype != self.dtype:
            raise DTypeError(f"Tensor.data: dtype {value.dtype} differs from the tensor's {self.dtype}")
        self._cached_data = value._cached_data
        outlives_step(self)

    def detach(self) -> "Tensor":
        """A new leaf sharing this tensor's data (pending or realized), cut from the graph.
        Pending data is computed with the next schedule (if the tensor is alive then), so
        a hidden state carried across truncated-BPTT segments does not drag them along."""
        return outlives_step(self.const_of())

    @property
    def shape(self) -> tuple:
        data = self._cached_data  # (read several times by every op: written out)
        shape = (data if data is not None else self.realize_cached_data()).shape
        return shape if type(shape) is tuple else tuple(shape)

    @property
    def dtype(self) -> str:
        data = self._cached_data
        dtype = (data if data is not None else self.realize_cached_data()).dtype
        return dtype if isinstance(dtype, str) else dtype.name  # (a str subclass: numpy.str_, a str Enum)

    @property
    def device(self):
        data = self._data_or_compute()
        if BACKEND == "np":
            return cpu()
        return data.device

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> "Size":
        """The number of elements, an int (as the course's NDArray.size) that can also be
        called as PyTorch's `size()` (the shape) and `size(dim)`."""
        return Size(int(numpy.prod(self.shape)), self.shape)

    def _data_or_compute(self):
        return self._cached_data if self._cached_data is not None else self.realize_cached_data()

    def realize(self) -> "Tensor":
        """Compute the pending work of this tensor now; returns self."""
        self.realize_cached_data()
        return self

    def backward(self, out_grad: Optional["Tensor"] = None) -> None:
        from . import init
        out_grad = out_grad if out_grad is not None else init.ones(*self.shape, dtype=self.dtype,
                                                                    device=self.device)
        compute_gradient_of_variables(self, out_grad)

    def __repr__(self) -> str:
        _capture.host_read("printing a tensor")
        return "needle.Tensor(" + str(self.realize_cached_data()) + ")"

    def __str__(self) -> str:
        _capture.host_read("printing a tensor")
        return str(self.realize_cached_data())

    def __bool__(self) -> bool:
        """A one-element tensor is true when its value is nonzero (PyTorch); a longer one
        when it is not empty.  A step captured by needle.jit cannot branch on a value."""
        _capture.host_read("a Python `if` (bool()) on a tensor")
        if self.size == 1:
            return bool(self.item())
        return len(self) != 0

    def numpy(self) -> numpy.ndarray:
        _capture.host_read(".numpy()/.item()")
        data = self.realize_cached_data()
        if BACKEND == "np":
            return numpy.asarray(data)
        return data.numpy()

    def __array__(self, dtype=None, copy=None):
        out = self.numpy()
        return out if dtype is None else out.astype(dtype)

    def item(self):
        if self.size != 1:
            raise ShapeError(f"item: only a tensor of one element is a scalar, got shape {fmt_shape(self.shape)}")
        return self.numpy().item()

    def __float__(self) -> float:
        return float(self.item())

    def __len__(self) -> int:
        if not self.shape:
            raise ShapeError("len: a 0-d tensor has no length (shape ())")
        return self.shape[0]

    def to(self, device: Device) -> "Tensor":
        """A copy on `device` (self when already there); not differentiable across devices."""
        if device == self.device:
            return self
        return Tensor(self.numpy(), device=device, dtype=self.dtype, requires_grad=self.requires_grad)


def tensors_in(value):
    """The Tensors and TensorTuples in `value` and the lists, tuples and dicts it nests."""
    if isinstance(value, Value):
        yield value
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from tensors_in(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from tensors_in(v)


# The backward pass lives in backward.py; the course's code reaches it by these names
# (imported last: backward.py builds on the classes above).
from .backward import compute_gradient_of_variables, find_topo_sort, sum_node_list  # noqa: E402,F401
