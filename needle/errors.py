"""Errors raised by needle.  Every user-facing error is a NeedleError, and also a
ValueError or TypeError as fits, so `except ValueError` keeps working."""


class NeedleError(Exception):
    """Base class of all errors raised by needle on bad input."""


class ShapeError(NeedleError, ValueError):
    """Shapes of the operands do not fit the op."""


class AxisError(NeedleError, ValueError):
    """An axis is out of range or repeated."""


class DTypeError(NeedleError, TypeError):
    """A dtype is unsupported or operands' dtypes disagree."""


class DeviceError(NeedleError, ValueError):
    """Operands live on different devices, or a device is unavailable."""


class DataError(NeedleError, ValueError):
    """A data file is missing, truncated or malformed."""


class IndexingError(NeedleError, IndexError):
    """An index is out of range or of an unsupported kind (getitem, tuple items)."""


class ArgumentError(NeedleError, ValueError):
    """A non-tensor argument is invalid: a stride, a dilation, a stage name, a path."""


class GraphError(NeedleError, RuntimeError):
    """The graph cannot give what was asked: a leaf that requires grad written in place,
    a gradient through values overwritten since."""


class CompileError(NeedleError, RuntimeError):
    """Code generation or JIT compilation failed (a needle bug, reported clearly)."""


class JitError(NeedleError, RuntimeError):
    """`needle.jit` cannot capture a function faithfully (it reads a value inside the
    step, or changes state where a replay cannot follow)."""


class BoundsError(NeedleError, IndexError):
    """Generated code computed an out-of-bounds index (NEEDLE_BOUNDS_CHECK=1)."""


def fmt_shape(shape) -> str:
    return "(" + ", ".join(str(int(s)) for s in shape) + ("," if len(shape) == 1 else "") + ")"
