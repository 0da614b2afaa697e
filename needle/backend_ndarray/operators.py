"""Python's operators for an array type, written once.

NDArray (eager) and the IR's LazyArray answer to the same operators; each only
provides `_binary(op, other, reverse)` and `_unary(op)`.  Comparisons return 1/0
in the array's own dtype, as in the course framework.
"""
from __future__ import annotations


class ArrayOperators:
    __slots__ = ()

    def _binary(self, op: str, other, reverse: bool = False):
        raise NotImplementedError

    def _unary(self, op: str):
        raise NotImplementedError

    def _compare(self, op: str, other, reverse: bool = False):
        result = self._binary(op, other, reverse)
        return result if result is NotImplemented else result.astype(self.dtype)

    def __add__(self, other): return self._binary("add", other)
    def __radd__(self, other): return self._binary("add", other, True)
    def __sub__(self, other): return self._binary("sub", other)
    def __rsub__(self, other): return self._binary("sub", other, True)
    def __mul__(self, other): return self._binary("mul", other)
    def __rmul__(self, other): return self._binary("mul", other, True)
    def __truediv__(self, other): return self._binary("div", other)
    def __rtruediv__(self, other): return self._binary("div", other, True)
    def __pow__(self, other): return self._binary("pow", other)
    def __rpow__(self, other): return self._binary("pow", other, True)
    def __neg__(self): return self._unary("neg")

    def __eq__(self, other): return self._compare("eq", other)
    def __ne__(self, other): return self._compare("ne", other)
    def __lt__(self, other): return self._compare("lt", other)
    def __le__(self, other): return self._compare("le", other)
    def __gt__(self, other): return self._compare("lt", other, True)
    def __ge__(self, other): return self._compare("le", other, True)
    __hash__ = None

    def maximum(self, other): return self._binary("max", other)
    def minimum(self, other): return self._binary("min", other)
    def exp(self): return self._unary("exp")
    def log(self): return self._unary("log")
    def tanh(self): return self._unary("tanh")
    def sqrt(self): return self._unary("sqrt")
    def sigmoid(self): return self._unary("sigmoid")
    def abs(self): return self._unary("abs")
