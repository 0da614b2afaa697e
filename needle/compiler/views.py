"""Views: how a kernel reads a buffer, as data.

A View maps an index `i` over `shape` to the element `offset + sum(strides * i)`
of a buffer, and is *valid* only where every mask constraint
`lo <= sum(coeffs * i) < hi` holds; invalid positions read as zero (padding).

Every movement op (permute, expand, shrink, flip, stride, pad, window) is an
affine change of index, so it composes into a View exactly; `reshape` composes
when the merged dimensions are contiguous in every linear function of the view
(strides and mask coefficients) and returns None otherwise — the caller then
materializes a copy.  Constraints that always hold are dropped; a view whose
mask can never hold reads only zeros.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..shapes import compact_strides


@dataclass(frozen=True)
class View:
    shape: tuple
    strides: tuple
    offset: int = 0
    mask: tuple = ()      # ((coeffs, lo, hi), ...)
    empty: bool = False   # the mask never holds: the view reads only zeros

    # ---- construction -----------------------------------------------------------------
    @staticmethod
    def contiguous(shape, offset: int = 0) -> "View":
        shape = tuple(shape)
        return View(shape, _canonical_strides(shape, compact_strides(shape)), offset)

    @staticmethod
    def strided(shape, strides, offset: int = 0) -> "View":
        return View(tuple(shape), _canonical_strides(shape, strides), offset)

    # ---- queries --------------------------------------------------------------------
    @property
    def ndim(self) -> int:
        return len(self.shape)

    def is_contiguous(self) -> bool:
        """Row-major over its shape, from `offset`, with no mask."""
        return not self.mask and not self.empty and \
            self.strides == _canonical_strides(self.shape, compact_strides(self.shape))

    def linear_functions(self) -> list:
        return [self.strides] + [c[0] for c in self.mask]

    def __str__(self) -> str:
        text = f"view{self.shape} strides={self.strides}"
        if self.offset:
            text += f" offset={self.offset}"
        for coeffs, lo, hi in self.mask:
            text += f" mask[{lo}<={_fmt_linear(coeffs)}<{hi}]"
        if self.empty:
            text += " empty"
        return text

    # ---- movement -------------------------------------------------------------------
    def _affine(self, new_shape, rows, consts, extra=()) -> "View":
        """Compose with old_index[d] = sum_j rows[d][j] * new_index[j] + consts[d]."""
        n = len(new_shape)
        strides = [sum(self.strides[d] * rows[d][j] for d in range(self.ndim)) for j in range(n)]
        offset = self.offset + sum(s * c for s, c in zip(self.strides, consts))
        mask = []
        for coeffs, lo, hi in self.mask:
            shift = sum(c * k for c, k in zip(coeffs, consts))
            mask.append((tuple(sum(coeffs[d] * rows[d][j] for d in range(self.ndim)) for j in range(n)),
                         lo - shift, hi - shift))
        return _simplified(tuple(new_shape), strides, offset, mask + list(extra), self.empty)

    def permute(self, axes) -> "View":
        rows = [[0] * self.ndim for _ in range(self.ndim)]
        for j, d in enumerate(axes):
            rows[d][j] = 1
        return self._affine(tuple(self.shape[a] for a in axes), rows, [0] * self.ndim)

    def expand(self, shape) -> "View":
        rows = [[1 if (j == d and s == n) else 0 for j in range(self.ndim)]
                for d, (s, n) in enumerate(zip(self.shape, shape))]
        return self._affine(tuple(shape), rows, [0] * self.ndim)

    def shrink(self, bounds) -> "View":
        return self._affine(tuple(b - a for a, b in bounds), _identity(self.ndim), [a for a, _ in bounds])

    def flip(self, axes) -> "View":
        rows = _identity(self.ndim)
        consts = [0] * self.ndim
        for a in axes:
            rows[a][a] = -1
            consts[a] = self.shape[a] - 1
        return self._affine(self.shape, rows, consts)

    def stride(self, steps) -> "View":
        rows = _identity(self.ndim)
        for d, s in enumerate(steps):
            rows[d][d] = s
        return self._affine(tuple(-(-n // s) for n, s in zip(self.shape, steps)), rows, [0] * self.ndim)

    def pad(self, pads) -> "View":
        shape = tuple(n + lo + hi for n, (lo, hi) in zip(self.shape, pads))
        extra = []
        for d, ((lo, hi), n) in enumerate(zip(pads, self.shape)):
            if lo or hi:
                extra.append((tuple(1 if j == d else 0 for j in range(self.ndim)), lo, lo + n))
        return self._affine(shape, _identity(self.ndim), [-lo for lo, _ in pads], extra)

    def window(self, axes, kernel, step) -> "View":
        """(.., n, ..) -> (.., (n-k)//step+1, .., k, ..): old = step * out + ker."""
        first, last, w = axes[0], axes[-1], len(axes)
        outs = tuple((self.shape[a] - k) // step + 1 for a, k in zip(axes, kernel))
        new_shape = self.shape[:first] + outs + tuple(kernel) + self.shape[last + 1:]
        rows = [[0] * len(new_shape) for _ in range(self.ndim)]
        for d in range(self.ndim):
            if d < first:
                rows[d][d] = 1
            elif d <= last:
                rows[d][d] = step
                rows[d][d + w] = 1
            else:
                rows[d][d + w] = 1
        return self._affine(new_shape, rows, [0] * self.ndim)

    def reshape(self, new_shape) -> "View | None":
        """The same elements seen as `new_shape`, or None when strides cannot say it."""
        new_shape = tuple(new_shape)
        if math.prod(new_shape) == 0 or self.shape == new_shape:
            return View.contiguous(new_shape, self.offset) if math.prod(new_shape) == 0 else self
        funcs = _reshape_functions(self.shape, self.linear_functions(), new_shape)
        if funcs is None:
            return None
        mask = [(f, lo, hi) for f, (_, lo, hi) in zip(funcs[1:], self.mask)]
        return _simplified(new_shape, funcs[0], self.offset, mask, self.empty)

    def as_strided(self, shape, strides, offset) -> "View | None":
        """numpy's as_strided over this view's row-major order: exact only when the
        view is contiguous (then its order is the memory order)."""
        if not self.is_contiguous():
            return None
        return View.strided(shape, strides, self.offset + offset)


def _identity(n: int) -> list:
    return [[1 if i == j else 0 for j in range(n)] for i in range(n)]


def _canonical_strides(shape, strides) -> tuple:
    """Size-1 dims never move the index: give them stride 0 so equal views compare equal."""
    return tuple(0 if n == 1 else int(s) for n, s in zip(shape, strides))


def _simplified(shape, strides, offset, mask, empty) -> View:
    """Drop constraints that always hold, intersect ones on the same function, and
    flag a view whose mask can never hold."""
    merged = {}
    for coeffs, lo, hi in mask:
        coeffs = _canonical_strides(shape, coeffs)
        low = sum(min(0, c * (n - 1)) for c, n in zip(coeffs, shape))
        high = sum(max(0, c * (n - 1)) for c, n in zip(coeffs, shape))
        if lo <= low and high < hi:
            continue  # always true over the whole shape
        if high < lo or low >= hi or lo >= hi:
            empty = True
        old = merged.get(coeffs)
        merged[coeffs] = (max(lo, old[0]), min(hi, old[1])) if old else (lo, hi)
    if math.prod(shape) == 0:
        empty = False
    out_mask = tuple(sorted((c, lo, hi) for c, (lo, hi) in merged.items()))
    return View(tuple(shape), _canonical_strides(shape, strides), int(offset), () if empty else out_mask, empty)


def _reshape_functions(shape, funcs, new_shape):
    """Re-express linear functions of an index over `shape` as functions of an index
    over `new_shape` (same row-major order), or None if some function is not linear
    in the new index.  Old dims are split freely; merging old dims requires every
    function to weigh the outer dim exactly `inner size` times the inner one."""
    factors = [[n, [f[d] for f in funcs]] for d, n in enumerate(shape) if n != 1]
    new_funcs = [[0] * len(new_shape) for _ in funcs]
    i = 0
    for j, size in enumerate(new_shape):
        need, acc = size, None
        while need > 1:
            if i >= len(factors):
                return None
            a, c = factors[i]
            if need % a == 0:  # the whole old factor goes into new dim j
                take, coeffs = a, c
                i += 1
            elif a % need == 0:  # split the old factor; its outer part goes into j
                take, coeffs = need, [x * (a // need) for x in c]
                factors[i] = [a // need, c]
            else:  # sizes interleave: merge this old factor with the next one first
                if i + 1 >= len(factors):
                    return None
                a2, c2 = factors[i + 1]
                if any(x != y * a2 for x, y in zip(c, c2)):
                    return None
                factors[i:i + 2] = [[a * a2, c2]]
                continue
            if acc is not None and any(x != y * take for x, y in zip(acc, coeffs)):
                return None
            acc = coeffs
            need //= take
        if acc is not None:
            for f, x in zip(new_funcs, acc):
                f[j] = x
    if i != len(factors):
        return None
    return [tuple(f) for f in new_funcs]


def _fmt_linear(coeffs) -> str:
    terms = [f"{c}*i{j}" if c != 1 else f"i{j}" for j, c in enumerate(coeffs) if c]
    return "+".join(terms) or "0"


def same_memory_order(view: View, size: int) -> bool:
    """The view reads a stored result as is, possibly reshaped (conv's output)."""
    return view.is_contiguous() and view.offset == 0 and math.prod(view.shape) == size
