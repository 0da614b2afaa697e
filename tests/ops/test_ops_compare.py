"""Comparisons and the everyday Tensor methods (argmax argmin min max mean var std abs
squeeze unsqueeze numel item int float), against numpy and finite differences."""
import numpy as np
import pytest

import needle as ndl
from tests.gradcheck import DEVICE_IDS, DEVICES, away_from_zero, gradient_check, randn, tensor

pytestmark = pytest.mark.parametrize("device", DEVICES, ids=DEVICE_IDS)

COMPARISONS = [("lt", np.less, lambda a, b: a < b), ("le", np.less_equal, lambda a, b: a <= b),
               ("gt", np.greater, lambda a, b: a > b), ("ge", np.greater_equal, lambda a, b: a >= b),
               ("eq", np.equal, lambda a, b: a.eq(b)), ("ne", np.not_equal, lambda a, b: a.ne(b))]


@pytest.mark.parametrize("name,reference,apply", COMPARISONS, ids=[c[0] for c in COMPARISONS])
def test_comparisons_give_bool_tensors_and_no_gradient(device, name, reference, apply):
    a = tensor([[1.0, 2.0, 3.0], [3.0, 2.0, 1.0]], device)
    b = tensor([2.0, 2.0, 2.0], device)   # broadcast
    for other, other_np in ((b, b.numpy()), (2.0, 2.0)):
        out = apply(a, other)
        assert out.dtype == "bool" and not out.requires_grad
        np.testing.assert_array_equal(out.numpy(), reference(a.numpy(), other_np))


def test_equality_operator_stays_identity(device):
    a = tensor([1.0, 2.0], device)
    assert (a == a) is True and (a == tensor([1.0, 2.0], device)) is False
    assert a in [a] and len({a, a}) == 1


def test_comparison_of_int_tensors_is_bool(device):
    a = tensor([1, 5, 3], device, dtype="int64", requires_grad=False)
    out = a > 2
    assert out.dtype == "bool"
    np.testing.assert_array_equal(out.numpy(), [False, True, True])


def test_bool_tensors_count_as_0_1_in_arithmetic_and_select_as_masks(device):
    v = tensor([-0.5, 0.5, 2.0, 0.25], device)
    both = (v > 0) * (v < 1)  # (and: a mask still, as in numpy and torch)
    assert both.dtype == "bool" and ((v > 1) + (v < 0)).dtype == "bool"
    np.testing.assert_array_equal(v[both].numpy(), [0.5, 0.25])
    np.testing.assert_array_equal(((v > 0) * 2.0).numpy(), [0, 2, 2, 2])
    np.testing.assert_array_equal(((v > 0) + v).numpy(), v.numpy() + (v.numpy() > 0))
    assert ((v > 0) + v).dtype == v.dtype and (v > 0).sum().numpy() == 3
    mask = ndl.Tensor(np.array([True, False, True, False]), device=device)
    assert mask.dtype == "bool"
    np.testing.assert_array_equal(v[mask].numpy(), v.numpy()[[0, 2]])


@pytest.mark.parametrize("a, b", [([False], [True]), ([False], [False]), ([True], [True]), ([], [])])
def test_one_element_and_empty_masks_combine_as_masks_in_numpy(device, a, b):
    """A mask's truth is never asked for: a [False] mask times another stays a bool
    mask (it had become float32 when the operator asked the first result if it was true)."""
    x, y = (ndl.Tensor(np.array(v, dtype=bool), device=device) for v in (a, b))
    for mine, ref in ((x * y, np.array(a, bool) * np.array(b, bool)), (x + y, np.array(a, bool) + np.array(b, bool))):
        assert mine.dtype == "bool"
        np.testing.assert_array_equal(mine.numpy(), ref)


def test_a_float_index_raises_as_in_numpy(device):
    v = tensor([1.0, 2.0, 3.0], device)
    with pytest.raises(ndl.errors.IndexingError, match="integers or booleans, got float"):
        v[tensor([0.0, 2.0], device)]


@pytest.mark.parametrize("axis", [None, 0, 1, -1])
def test_argmax_argmin_match_numpy_first_hit(device, axis):
    x = tensor([[1.0, 7.0, 7.0, 0.0], [5.0, -1.0, 5.0, -1.0], [2.0, 2.0, 2.0, 2.0]], device)
    for mine, ref in ((x.argmax(axis), x.numpy().argmax(axis)), (x.argmin(axis), x.numpy().argmin(axis))):
        assert mine.dtype == "int64"
        np.testing.assert_array_equal(mine.numpy(), ref)
    assert x.argmax(1, keepdims=True).shape == (3, 1)


def test_argmax_output_can_index(device):
    x, table = randn((4, 5), device), randn((5, 2), device)
    picked = table[x.argmax(1)]
    np.testing.assert_array_equal(picked.numpy(), table.numpy()[x.numpy().argmax(1)])


@pytest.mark.parametrize("axes", [None, 0, (0, 1), 1])
def test_min_matches_numpy_with_gradient(device, axes):
    x = randn((3, 4), device)
    np.testing.assert_array_equal(x.min(axes).numpy(), x.numpy().min(axis=axes))
    gradient_check(lambda t: t.min(axes), x)


@pytest.mark.parametrize("axes,keepdims", [(None, False), (0, False), (1, True), ((0, 1), False)])
def test_var_std_unbiased_like_pytorch(device, axes, keepdims):
    x = randn((4, 5), device)
    np.testing.assert_allclose(x.var(axes, keepdims).numpy(), x.numpy().var(axis=axes, ddof=1, keepdims=keepdims),
                               rtol=1e-12)
    np.testing.assert_allclose(x.std(axes, keepdims).numpy(), x.numpy().std(axis=axes, ddof=1, keepdims=keepdims),
                               rtol=1e-12)
    np.testing.assert_allclose(x.var(axes, keepdims, unbiased=False).numpy(),
                               x.numpy().var(axis=axes, keepdims=keepdims), rtol=1e-12)
    gradient_check(lambda t: t.var(axes, keepdims), x)
    gradient_check(lambda t: t.std(axes, keepdims), x)


def test_abs_with_gradient(device):
    x = away_from_zero((3, 4), device)
    np.testing.assert_array_equal(x.abs().numpy(), np.abs(x.numpy()))
    np.testing.assert_array_equal(abs(x).numpy(), np.abs(x.numpy()))
    gradient_check(lambda t: t.abs() * 3.0, x)


def test_mean_max_sum_methods(device):
    x = randn((2, 3), device)
    np.testing.assert_allclose(x.mean(1).numpy(), x.numpy().mean(1), rtol=1e-12)
    np.testing.assert_array_equal(x.max(0).numpy(), x.numpy().max(0))


def test_squeeze_unsqueeze_numel_item_int_float(device):
    x = randn((3, 1, 4, 1), device)
    assert x.squeeze().shape == (3, 4) and x.squeeze(1).shape == (3, 4, 1) and x.squeeze((1, -1)).shape == (3, 4)
    assert x.squeeze().unsqueeze(0).shape == (1, 3, 4) and x.squeeze().unsqueeze(-1).shape == (3, 4, 1)
    gradient_check(lambda t: t.squeeze(1).unsqueeze(0) * 2.0, x)
    assert x.squeeze(0).shape == (3, 1, 4, 1) and x.squeeze((0, 1)).shape == (3, 4, 1)  # (torch: other sizes stay)
    assert x.numel() == 12
    one = tensor([[2.75]], device)
    assert one.item() == 2.75 and float(one) == 2.75 and int(one) == 2
    with pytest.raises(ndl.errors.ShapeError, match="item"):
        int(x)


def test_a_scalar_comparison_is_a_python_condition(device):
    loss = tensor([0.25, 0.5], device).sum()
    assert bool(loss < 1.0) and not (loss > 1.0)
    assert bool(tensor([[1.0]], device))  # a non-empty first axis, as before


@pytest.mark.parametrize("dtype,values", [
    ("uint8", [[0, 3, 7], [5, 1, 255]]),
    ("int32", [[-2 ** 31, 0, 5], [2 ** 31 - 1, -7, 3]]),
    ("int64", [[-2 ** 62, 0, 5], [2 ** 62, -7, 3]]),
    ("bool", [[True, False, True], [True, True, True]]),
])
def test_min_of_integers_and_bools_does_not_wrap(device, dtype, values):
    # (-max(-x) wrapped: uint8 min([0, 3, 7]) was 1, int32 min([-2**31, 0, 5]) was 0)
    a = np.array(values, dtype=dtype)
    t = ndl.Tensor(a, device=device, dtype=dtype, requires_grad=False)
    for axes, keepdims in ((None, False), ((1,), False), ((0,), True)):
        got = ndl.ops.amin(t, axes, keepdims)
        assert got.dtype == dtype
        np.testing.assert_array_equal(got.numpy(), np.min(a, axis=axes, keepdims=keepdims))
