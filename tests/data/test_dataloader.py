"""DataLoader and NDArrayDataset: batching, the partial last batch, shuffling."""
import numpy as np
import pytest

import needle as ndl
from needle.data import DataLoader, Dataset, DistributedSampler, NDArrayDataset


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


# ---- drop_last, samplers, PyTorch-style datasets ------------------------------------------
def test_drop_last_drops_only_the_partial_batch():
    X, y, ds = make_dataset(n=10)
    loader = DataLoader(ds, batch_size=4, drop_last=True)
    assert len(loader) == 2
    np.testing.assert_array_equal(np.concatenate([b[0].numpy() for b in loader]), X[:8])
    assert len(DataLoader(ds, batch_size=5, drop_last=True)) == 2  # exact multiple: nothing dropped
    assert len(DataLoader(ds, batch_size=11, drop_last=True)) == 0
    assert list(DataLoader(ds, batch_size=11, drop_last=True)) == []


def test_sampler_decides_the_order_each_epoch():
    X, y, ds = make_dataset(n=7)

    class Backwards:
        def __init__(self):
            self.epochs = 0

        def __iter__(self):
            self.epochs += 1
            return iter(range(6, -1, -1))

        def __len__(self):
            return 7

    sampler = Backwards()
    loader = DataLoader(ds, batch_size=3, sampler=sampler)
    assert len(loader) == 3
    for _ in range(2):
        rows = np.concatenate([b[0].numpy() for b in loader])
        np.testing.assert_array_equal(rows, X[::-1])
    assert sampler.epochs == 2
    with pytest.raises(ValueError, match="either shuffle=True or a sampler"):
        DataLoader(ds, batch_size=3, shuffle=True, sampler=sampler)
    with pytest.raises(TypeError, match="sampler must be an iterable"):
        DataLoader(ds, batch_size=3, sampler=5)


@pytest.mark.parametrize("n,ranks", [(10, 2), (10, 3), (11, 4), (3, 4), (64, 4)])
def test_distributed_sampler_shards(n, ranks):
    """Disjoint shards of one permutation per epoch, padded to equal length by repeating
    its first indices, and every rank the same number of batches."""
    ds = NDArrayDataset(np.arange(n))
    samplers = [DistributedSampler(ds, num_replicas=ranks, rank=r, seed=3) for r in range(ranks)]
    per_rank = -(-n // ranks)
    perm = np.random.RandomState(3).permutation(n)  # epoch 0 uses seed + 0
    padded = np.resize(perm, per_rank * ranks)
    shards = [list(s) for s in samplers]
    for r, shard in enumerate(shards):
        assert len(samplers[r]) == len(shard) == per_rank
        assert shard == padded[r::ranks].tolist()
    if n % ranks == 0:
        assert sorted(sum(shards, [])) == list(range(n))  # disjoint and complete
    else:
        assert set(sum(shards, [])) == set(range(n))
    assert len({len(DataLoader(ds, 2, sampler=s)) for s in samplers}) == 1


def test_distributed_sampler_epochs_drop_last_and_no_shuffle():
    ds = NDArrayDataset(np.arange(10))
    s = DistributedSampler(ds, num_replicas=3, rank=1, seed=0)
    first = list(s)
    assert list(s) == first  # the same epoch until set_epoch
    s.set_epoch(1)
    assert list(s) == np.resize(np.random.RandomState(1).permutation(10), 12)[1::3].tolist()
    dropped = DistributedSampler(ds, num_replicas=3, rank=2, shuffle=False, drop_last=True)
    assert list(dropped) == [2, 5, 8] and len(dropped) == 3
    assert list(DistributedSampler(ds, num_replicas=3, rank=0, shuffle=False)) == [0, 3, 6, 9]
    with pytest.raises(ValueError, match="rank must be in"):
        DistributedSampler(ds, num_replicas=2, rank=2)
    with pytest.raises(ValueError, match="num_replicas must be a positive integer"):
        DistributedSampler(ds, num_replicas=0, rank=0)


def test_distributed_sampler_global_batches_are_one_process_batches():
    """Step k's batches on all ranks together are the k-th batch of one process whose
    batch is the ranks' batches combined, over the same permutation."""
    X, y, ds = make_dataset(n=24)
    ranks, per_rank = 3, 2
    loaders = [DataLoader(ds, per_rank, sampler=DistributedSampler(ds, num_replicas=ranks, rank=r, seed=9))
               for r in range(ranks)]
    single = DataLoader(ds, per_rank * ranks, sampler=DistributedSampler(ds, num_replicas=1, rank=0, seed=9))
    for parts, whole in zip(zip(*loaders), single):
        rows = np.concatenate([p[0].numpy() for p in parts])
        np.testing.assert_array_equal(np.sort(rows[:, 0]), np.sort(whole[0].numpy()[:, 0]))


class PerSample(Dataset):
    """PyTorch style: one (image, label) per integer index; an index array is an error."""

    def __init__(self, n=7):
        self.X = np.arange(n * 6, dtype=np.float32).reshape(n, 2, 3)
        self.labels = [int(i % 3) for i in range(n)]

    def __len__(self):
        return len(self.X)

    def __getitem__(self, i):
        return self.X[i], self.labels[i]  # list indexing rejects arrays


def test_pytorch_style_dataset_is_collated():
    ds = PerSample()
    batches = list(DataLoader(ds, batch_size=3))
    assert [b[0].shape for b in batches] == [(3, 2, 3), (3, 2, 3), (1, 2, 3)]
    np.testing.assert_array_equal(np.concatenate([b[0].numpy() for b in batches]), ds.X)
    np.testing.assert_array_equal(np.concatenate([b[1].numpy() for b in batches]), ds.labels)
    np.random.seed(1)
    shuffled = np.concatenate([b[1].numpy() for b in DataLoader(ds, batch_size=4, shuffle=True)])
    np.random.seed(1)
    np.testing.assert_array_equal(shuffled, np.asarray(ds.labels)[np.random.permutation(7)])


def test_samples_with_scalar_fields_and_dicts_are_collated():
    class Pairs(Dataset):
        def __len__(self):
            return 4

        def __getitem__(self, i):
            return {"x": float(i) * 2, "v": np.array([i, -i])}

    (batch,) = list(DataLoader(Pairs(), batch_size=4))
    np.testing.assert_array_equal(batch["x"].numpy(), [0, 2, 4, 6])
    np.testing.assert_array_equal(batch["v"].numpy(), [[0, 0], [1, -1], [2, -2], [3, -3]])


def test_samples_that_do_not_stack_are_a_clear_error():
    class Ragged(Dataset):
        def __len__(self):
            return 3

        def __getitem__(self, i):
            return np.zeros(int(i) + 1), int(i)

    with pytest.raises(ndl.errors.DataError, match=r"cannot stack field 0 .* sample 0 has shape \(1,\) "
                                                   r"but sample 1 has shape \(2,\)"):
        list(DataLoader(Ragged(), batch_size=3))

    class Uneven(Dataset):
        def __len__(self):
            return 2

        def __getitem__(self, i):
            return (np.zeros(2), 1) if int(i) == 0 else (np.zeros(2),)

    with pytest.raises(ndl.errors.DataError, match="sample 0 has 2 fields but sample 1 has 1 fields"):
        list(DataLoader(Uneven(), batch_size=2))


def test_a_failing_dataset_reports_its_own_error():
    class Broken(Dataset):
        def __len__(self):
            return 3

        def __getitem__(self, i):
            raise KeyError(f"no item {i}")

    with pytest.raises(KeyError, match="no item 0"):
        list(DataLoader(Broken(), batch_size=2))


def test_distributed_sampler_arguments_in_spec_order():
    ds = NDArrayDataset(np.arange(6))
    s = DistributedSampler(ds, False, 0, num_replicas=2, rank=1)
    assert list(s) == [1, 3, 5]
    with pytest.raises(ValueError, match="shuffle must be True or False, got 2"):
        DistributedSampler(ds, 2, 0)  # PyTorch's positional (dataset, num_replicas, rank)
    with pytest.raises(ValueError, match="seed must be an integer"):
        DistributedSampler(ds, True, 0.5)


def test_drop_last_given_where_the_course_has_device_is_a_clear_error():
    with pytest.raises(ValueError, match="pass drop_last= by name"):
        DataLoader(make_dataset()[2], 4, False, True)
