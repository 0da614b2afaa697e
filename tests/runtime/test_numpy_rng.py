"""Dropout's masks drawn by compiled code are numpy's own: the same values from the
same seed, and numpy's global state left where `np.random.rand(*shape) <= p` leaves it."""
import numpy as np
import pytest

import needle as ndl
from needle.runtime import numpy_rng

SHAPES = [(1,), (7,), (311,), (312,), (313,), (624,), (1000,), (16, 4, 32, 32), (0,), (3, 0, 2)]


def numpy_draw(seed, skip, shape, p, dtype):
    np.random.seed(seed)
    np.random.rand(skip)
    mask = (np.random.rand(*shape) <= p).astype(dtype)
    return mask, np.random.get_state()


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", ["float32", "bool"])
def test_the_same_mask_and_state_as_numpy(shape, dtype):
    if numpy_rng._compiled() is None:
        pytest.skip("the native draw is off here (numpy draws): nothing to compare")
    for seed, skip, p in ((0, 0, 0.9), (1, 5, 0.5), (2, 311, 0.1), (3, 623, 1.0), (4, 1, 0.0), (5, 2, float("nan")),
                          (6, 3, -0.25), (7, 4, 1.5), (8, 0, float("inf")), (9, 1, -float("inf")),
                          (10, 2, np.float32(0.3))):
        expected, state = numpy_draw(seed, skip, shape, p, dtype)
        np.random.seed(seed)
        np.random.rand(skip)
        got = numpy_rng.bernoulli(shape, p, dtype)
        after = np.random.get_state()
        assert got.dtype == expected.dtype and got.shape == expected.shape
        np.testing.assert_array_equal(got, expected)
        np.testing.assert_array_equal(after[1], state[1])
        assert after[2:] == state[2:]  # (position, and the Gaussian cache left alone)


def test_randb_and_dropout_follow_the_seed_in_every_mode():
    np.random.seed(11)
    expected = (np.random.rand(64, 33) <= 0.7).astype(np.float32)
    for lazy in (True, False):
        with ndl.lazy(lazy):
            np.random.seed(11)
            np.testing.assert_array_equal(ndl.init.randb(64, 33, p=0.7, dtype="float32").numpy(), expected)
    x = np.random.default_rng(0).standard_normal((64, 33)).astype(np.float32)
    np.random.seed(11)
    mask = (np.random.rand(64, 33) <= 0.7).astype(np.float32)
    np.random.seed(11)
    got = ndl.nn.Dropout(0.3)(ndl.Tensor(x)).numpy()
    np.testing.assert_allclose(got, x * mask / 0.7, rtol=1e-6)


def test_other_dtypes_and_other_generators_are_left_to_numpy(monkeypatch):
    assert numpy_rng.bernoulli((4,), 0.5, "float64") is None
    monkeypatch.setattr(numpy_rng, "_generator", lambda: None)
    assert numpy_rng.bernoulli((4,), 0.5, "float32") is None
    np.random.seed(2)
    expected = (np.random.rand(5, 3) <= 0.5).astype(np.float32)
    np.random.seed(2)
    np.testing.assert_array_equal(ndl.init.randb(5, 3, p=0.5, dtype="float32").numpy(), expected)


def test_a_loop_that_does_not_match_numpy_is_never_used():
    """The first-use check compares against numpy: a wrong loop is refused."""
    def wrong(state, n, th, tl, out):
        np.ctypeslib.as_array((np.ctypeslib.ctypes.c_float * max(n, 1)).from_address(out))[:n] = 1.0
    assert not numpy_rng._matches_numpy(wrong, True)


def test_a_draw_equal_to_p_is_kept_and_one_just_above_is_not():
    """`u <= p` at the boundary: the native loop compares 53-bit integers in two halves,
    so p equal to a draw, one ulp below it and one above, at the start of the stream
    and across a twist, must each agree with numpy's double comparison."""
    if numpy_rng._compiled() is None:
        pytest.skip("the native draw is off here (numpy draws): nothing to compare")
    rng = np.random.default_rng(5)
    for seed, skip in ((5, 0), (6, 311), (7, 623), (8, 1000)):
        np.random.seed(seed)
        np.random.rand(skip)
        draws = np.random.rand(40)
        for i in rng.choice(40, 6, replace=False):
            for p in (draws[i], np.nextafter(draws[i], 0.0), np.nextafter(draws[i], 1.0)):
                expected, _ = numpy_draw(seed, skip, (40,), p, np.float32)
                np.random.seed(seed)
                np.random.rand(skip)
                np.testing.assert_array_equal(numpy_rng.bernoulli((40,), p, "float32"), expected)


@pytest.mark.parametrize("dtype", ["float32", "bool", "uint8"])
@pytest.mark.parametrize("device", ["cpu", "cpu_numpy"])
def test_randb_draws_into_its_tensor_as_numpy_would(dtype, device):
    """randb draws into the new tensor's own storage on host devices: the values,
    dtype, requires_grad and numpy's state afterwards are those of numpy's draw."""
    np.random.seed(21)
    expected = (np.random.rand(3, 70, 5) <= 0.4).astype(dtype)
    state = np.random.get_state()
    np.random.seed(21)
    t = ndl.init.randb(3, 70, 5, p=0.4, dtype=dtype, device=getattr(ndl, device)(), requires_grad=False)
    assert t.dtype == dtype and t.shape == (3, 70, 5) and not t.requires_grad
    np.testing.assert_array_equal(t.numpy(), expected)
    np.testing.assert_array_equal(np.random.get_state()[1], state[1])
    assert np.random.get_state()[2] == state[2]


def test_fill_refuses_arrays_it_cannot_write_as_numpy_would():
    """`fill` writes native float32 or bytes in place: a read-only, non-contiguous, byte-swapped
    or other-typed array is left alone (False) and numpy's state is not advanced."""
    state = np.random.get_state()
    read_only = np.zeros(8, np.float32)
    read_only.flags.writeable = False
    for out in (read_only, np.zeros(16, np.float32)[::2], np.zeros(8, ">f4"), np.zeros(8, np.float64)):
        assert not numpy_rng.fill(out, 0.5)
        assert not out.any()
    np.testing.assert_array_equal(np.random.get_state()[1], state[1])


def test_p_that_no_float64_holds_is_compared_by_numpy():
    """numpy compares a Fraction or a long double p as it is: p just below a drawn value
    rounds to that value as a float64, where the native loop would keep it; such p are
    left to numpy, which keeps the stream (and compares an int too large for a float with
    a scalar draw as Python does)."""
    from fractions import Fraction
    np.random.seed(8)
    draws = np.random.rand(10)
    below = Fraction(float(draws[8])) - Fraction(1, 2 ** 80)
    expected, state = numpy_draw(8, 0, (10,), below, np.float32)
    np.random.seed(8)
    np.testing.assert_array_equal(ndl.init.randb(10, p=below, dtype="float32").numpy(), expected)
    np.testing.assert_array_equal(np.random.get_state()[1], state[1])
    assert not numpy_rng.fill(np.zeros(4, np.float32), below)
    for huge, kept in ((10 ** 400, True), (-10 ** 400, False)):
        assert ndl.init.randb(p=huge, dtype="bool").numpy() == kept


@pytest.mark.parametrize("dtype", ["float64", "int32", "float32", "bool"])
def test_randb_of_a_scalar_shape(dtype):
    np.random.seed(4)
    expected = np.asarray(np.random.rand() <= 0.5).astype(dtype)
    np.random.seed(4)
    got = ndl.init.randb(p=0.5, dtype=dtype).numpy()
    assert got.shape == () and got.dtype == expected.dtype and got == expected


def test_each_generator_draws_from_its_own_state():
    """The state address is remembered per generator: two MT19937s drawn from in turn
    each advance only themselves, as numpy's own draws do."""
    if numpy_rng._compiled() is None:
        pytest.skip("the native draw is off here (numpy draws): nothing to compare")
    saved = np.random.mtrand._rand._bit_generator
    a, b = np.random.MT19937(1), np.random.MT19937(2)
    reference = [np.random.RandomState(np.random.MT19937(1)), np.random.RandomState(np.random.MT19937(2))]
    try:
        for turn in range(6):
            np.random.set_bit_generator((a, b)[turn % 2])
            got = numpy_rng.bernoulli((700,), 0.3, "float32")
            np.testing.assert_array_equal(got, (reference[turn % 2].rand(700) <= 0.3).astype(np.float32))
    finally:
        np.random.set_bit_generator(saved)
