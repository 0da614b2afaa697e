"""shapes.basic_index against numpy's own basic indexing: the ranges and dropped
axes it returns select what `x[idx]` selects, for random indices of ints and
slices (the fast path) and for indices with numpy ints, None and ... (the general
path).  shapes.normalize_axes against numpy's reductions: the axes it returns sum
what numpy's `sum(axis=...)` sums."""
import numpy as np
import pytest

from needle.errors import AxisError, IndexingError
from needle.shapes import basic_index, indexed_shape, normalize_axes


def selected(x, idx):
    """What basic_index says x[idx] is, rebuilt with plain slices and a reshape."""
    ranges, drop, new_axes, _ = basic_index("getitem", x.shape, idx)
    picked = x[np.ix_(*[np.arange(*r, dtype=np.int64) for r in ranges])]  # range() semantics, not slice's
    return picked.reshape(indexed_shape(ranges, drop, new_axes))


def random_item(rng, n):
    if rng.random() < 0.3:
        return int(rng.integers(-n, n))
    bound = lambda: None if rng.random() < 0.3 else int(rng.integers(-n - 2, n + 3))  # noqa: E731
    step = None if rng.random() < 0.3 else int(rng.choice([-3, -2, -1, 1, 2, 3]))
    return slice(bound(), bound(), step)


def test_ints_and_slices_select_what_numpy_selects():
    rng = np.random.default_rng(0)
    for _ in range(3000):
        shape = tuple(int(n) for n in rng.integers(1, 6, size=rng.integers(1, 4)))
        x = np.arange(int(np.prod(shape))).reshape(shape)
        idx = tuple(random_item(rng, n) for n in shape[:rng.integers(1, len(shape) + 1)])
        np.testing.assert_array_equal(selected(x, idx), x[idx], err_msg=f"shape {shape}, index {idx}")


@pytest.mark.parametrize("idx", [(np.int64(1), slice(None)), (None, 1), (Ellipsis, -1), (1, None, slice(0, 2)),
                                 (slice(None), Ellipsis, None)])
def test_numpy_ints_none_and_ellipsis_take_the_general_path(idx):
    x = np.arange(24).reshape(2, 3, 4)
    want = x[idx]
    ranges, drop, new_axes, _ = basic_index("getitem", x.shape, idx)
    assert indexed_shape(ranges, drop, new_axes) == want.shape


@pytest.mark.parametrize("idx", [(2,), (-3,), (0, 0, 0), (slice(0, 1, 0),), (slice(0.5, 2),), (True,)])
def test_bad_indices_name_the_op_and_the_shape(idx):
    with pytest.raises(IndexingError, match="getitem"):
        basic_index("getitem", (2, 3), idx)


def test_normalize_axes_reduces_what_numpy_reduces():
    rng = np.random.default_rng(1)
    for _ in range(2000):
        ndim = int(rng.integers(1, 5))
        x = rng.standard_normal(tuple(int(n) for n in rng.integers(1, 4, size=ndim)))
        picked = [int(a) for a in rng.choice(np.arange(-ndim, ndim), size=rng.integers(1, ndim + 1), replace=False)]
        if len({a % ndim for a in picked}) < len(picked):
            with pytest.raises(AxisError, match="repeated"):
                normalize_axes("sum", tuple(picked), ndim, x.shape)
            continue
        axes = normalize_axes("sum", tuple(picked), ndim, x.shape)
        assert list(axes) == sorted(axes) and all(0 <= a < ndim for a in axes)
        np.testing.assert_allclose(x.sum(axis=axes), x.sum(axis=tuple(picked)))


@pytest.mark.parametrize("axes", [(3,), (0, 3), (1, 1), (-4,), ("0",)])
def test_bad_axes_are_refused_with_the_op_named(axes):
    with pytest.raises(AxisError, match="sum"):
        normalize_axes("sum", axes, 3, (2, 3, 4))
