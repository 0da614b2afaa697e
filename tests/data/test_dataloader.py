"""DataLoader and NDArrayDataset: batching, the partial last batch, shuffling."""
import numpy as np
import pytest

import needle as ndl
from needle.data import DataLoader, Dataset, NDArrayDataset


def make_dataset(n=10, d=3):
    X = np.arange(n * d, dtype=np.float32).reshape(n, d)
    y = np.arange(n, dtype=np.uint8) % 4
    return X, y, NDArrayDataset(X, y)


def test_ndarray_dataset_indexing():
    X, y, ds = make_dataset()
    assert len(ds) == 10
    xi, yi = ds[3]
    np.testing.assert_array_equal(xi, X[3])
    assert yi == y[3]
    xb, yb = ds[np.array([4, 1])]
    np.testing.assert_array_equal(xb, X[[4, 1]])
    np.testing.assert_array_equal(yb, y[[4, 1]])


def test_ndarray_dataset_rejects_mismatched_lengths():
    with pytest.raises(ValueError):
        NDArrayDataset(np.zeros((3, 2)), np.zeros(4))


def test_batches_in_order_with_partial_last_batch():
    X, y, ds = make_dataset(n=10)
    loader = DataLoader(ds, batch_size=4)
    assert len(loader) == 3
    batches = list(loader)
    assert [b[0].shape for b in batches] == [(4, 3), (4, 3), (2, 3)]
    for k, (xb, yb) in enumerate(batches):
        assert isinstance(xb, ndl.Tensor) and isinstance(yb, ndl.Tensor)
        assert xb.dtype == "float32" and yb.dtype == "float32"
        np.testing.assert_array_equal(xb.numpy(), X[4 * k:4 * k + 4])
        np.testing.assert_array_equal(yb.numpy(), y[4 * k:4 * k + 4])


def test_exact_multiple_and_default_batch_size():
    X, y, ds = make_dataset(n=8)
    assert [b[0].shape[0] for b in DataLoader(ds, batch_size=4)] == [4, 4]
    loader = DataLoader(ds)
    assert len(loader) == 8 and len(list(loader)) == 8


def test_batch_larger_than_dataset():
    X, y, ds = make_dataset(n=5)
    batches = list(DataLoader(ds, batch_size=100))
    assert len(batches) == 1
    np.testing.assert_array_equal(batches[0][0].numpy(), X)


def test_iterating_twice_gives_the_same_epoch_without_shuffle():
    X, y, ds = make_dataset()
    loader = DataLoader(ds, batch_size=3)
    first = [b[0].numpy() for b in loader]
    second = [b[0].numpy() for b in loader]
    for a, b in zip(first, second):
        np.testing.assert_array_equal(a, b)


def test_shuffle_draws_one_permutation_per_epoch():
    X, y, ds = make_dataset(n=10)
    loader = DataLoader(ds, batch_size=4, shuffle=True)
    np.random.seed(7)
    epochs = [[b[0].numpy() for b in loader] for _ in range(2)]
    next_draw = np.random.rand()
    np.random.seed(7)
    perms = [np.random.permutation(10) for _ in range(2)]
    assert np.random.rand() == next_draw  # the loader drew exactly those two permutations
    for batches, perm in zip(epochs, perms):
        assert [len(b) for b in batches] == [4, 4, 2]
        np.testing.assert_array_equal(np.concatenate(batches), X[perm])


def test_shuffle_covers_every_example_once():
    X, y, ds = make_dataset(n=11)
    loader = DataLoader(ds, batch_size=3, shuffle=True)
    rows = np.concatenate([b[0].numpy() for b in loader])
    assert [len(b[0].numpy()) for b in loader] == [3, 3, 3, 2]
    np.testing.assert_array_equal(np.sort(rows[:, 0]), X[:, 0])


def test_shuffle_is_reproducible_with_a_seed():
    X, y, ds = make_dataset(n=20)

    def epoch():
        return np.concatenate([b[0].numpy()[:, 0] for b in DataLoader(ds, batch_size=6, shuffle=True)])

    np.random.seed(3)
    a = epoch()
    np.random.seed(3)
    b = epoch()
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, X[:, 0])


def test_dtype_and_device_arguments():
    X, y, ds = make_dataset()
    xb, yb = next(iter(DataLoader(ds, batch_size=2, device=ndl.cpu_numpy(), dtype="float64")))
    assert xb.dtype == "float64"
    assert xb.device == ndl.cpu_numpy() or ndl.BACKEND == "np"  # the np backend has one device
    assert not xb.requires_grad


def test_custom_dataset_single_field():
    class Squares(Dataset):
        def __len__(self):
            return 5

        def __getitem__(self, i):
            return (np.asarray(i, dtype=np.float32) ** 2)[..., None]

    (xb,), (xc,) = list(DataLoader(Squares(), batch_size=3))
    np.testing.assert_array_equal(xb.numpy()[:, 0], [0, 1, 4])
    np.testing.assert_array_equal(xc.numpy()[:, 0], [9, 16])


def test_bad_batch_size():
    with pytest.raises(ValueError):
        DataLoader(make_dataset()[2], batch_size=0)
