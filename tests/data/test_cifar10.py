"""CIFAR10Dataset on small batch files written here in the real format (Python pickles
of {b"data": N x 3072 uint8, b"labels": [ints]}, as in cifar-10-batches-py).
References: the pixel layout worked out by hand (1024 red, 1024 green, 1024 blue, each
row-major 32 x 32)."""
import os
import pickle

import numpy as np
import pytest

import needle as ndl
from needle import backend_ndarray as nd


def write_batch(path, data, labels, **extra):
    with open(path, "wb") as f:
        pickle.dump({b"batch_label": b"test", b"data": data, b"labels": list(labels), **extra}, f)


@pytest.fixture
def cifar_dir(tmp_path):
    """5 train batches of 3, 4, 2, 3, 1 images and a test batch of 2, with known pixels."""
    rng = np.random.RandomState(1)
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    batches = {}
    for name, n in [("data_batch_1", 3), ("data_batch_2", 4), ("data_batch_3", 2), ("data_batch_4", 3),
                    ("data_batch_5", 1), ("test_batch", 2)]:
        data = rng.randint(0, 256, size=(n, 3072)).astype(np.uint8)
        labels = rng.randint(0, 10, size=n)
        write_batch(folder / name, data, labels)
        batches[name] = (data, labels)
    return str(folder), batches


def test_train_reads_the_five_batches_in_order(cifar_dir):
    folder, batches = cifar_dir
    ds = ndl.data.CIFAR10Dataset(folder, train=True)
    assert len(ds) == 13
    data = np.concatenate([batches[f"data_batch_{i}"][0] for i in range(1, 6)])
    labels = np.concatenate([batches[f"data_batch_{i}"][1] for i in range(1, 6)])
    for i in range(len(ds)):
        X, y = ds[i]
        assert isinstance(X, np.ndarray) and X.shape == (3, 32, 32) and X.dtype == np.float32
        assert y == labels[i]
        # channel c, row r, column k is byte c*1024 + r*32 + k of the row
        for c, r, k in [(0, 0, 0), (1, 5, 7), (2, 31, 31), (0, 31, 0)]:
            assert X[c, r, k] == np.float32(data[i, c * 1024 + r * 32 + k]) / np.float32(255)


def test_test_split_and_index_arrays(cifar_dir):
    folder, batches = cifar_dir
    ds = ndl.data.CIFAR10Dataset(folder, train=False, p=0.5)
    assert len(ds) == 2
    X, y = ds[np.array([1, 0])]
    data, labels = batches["test_batch"]
    assert X.shape == (2, 3, 32, 32) and y.shape == (2,)
    np.testing.assert_array_equal(X, data[[1, 0]].reshape(2, 3, 32, 32).astype(np.float32) / 255)
    np.testing.assert_array_equal(y, labels[[1, 0]])
    assert 0.0 <= X.min() and X.max() <= 1.0


def test_through_the_dataloader(cifar_dir):
    folder, _ = cifar_dir
    loader = ndl.data.DataLoader(ndl.data.CIFAR10Dataset(folder, train=True), 4)
    X, y = next(iter(loader))
    assert isinstance(X, ndl.Tensor) and isinstance(y, ndl.Tensor)
    assert isinstance(X.cached_data, nd.NDArray)
    assert X.dtype == "float32" and X.shape == (4, 3, 32, 32) and y.shape == (4,)
    assert sum(1 for _ in loader) == 4  # 13 images in batches of 4


def test_transforms_see_height_width_channels(cifar_dir):
    folder, _ = cifar_dir
    plain = ndl.data.CIFAR10Dataset(folder, train=False)
    flipped = ndl.data.CIFAR10Dataset(folder, train=False, transforms=[ndl.data.RandomFlipHorizontal(p=1.0)])
    np.testing.assert_array_equal(flipped[0][0], plain[0][0][:, :, ::-1])  # the width is the last axis
    np.testing.assert_array_equal(flipped[np.array([0, 1])][0], plain[np.array([0, 1])][0][:, :, :, ::-1])


def test_bad_files_raise_data_errors(tmp_path):
    with pytest.raises(ndl.errors.DataError, match="data_batch_1: no such file"):
        ndl.data.CIFAR10Dataset(str(tmp_path), train=True)
    (tmp_path / "test_batch").write_bytes(b"\x80\x04not a pickle")
    with pytest.raises(ndl.errors.DataError, match="test_batch: not a readable CIFAR-10 pickle"):
        ndl.data.CIFAR10Dataset(str(tmp_path), train=False)
    good = pickle.dumps({b"data": np.zeros((2, 3072), np.uint8), b"labels": [1, 2]})
    (tmp_path / "test_batch").write_bytes(good[:len(good) // 2])
    with pytest.raises(ndl.errors.DataError, match="test_batch"):
        ndl.data.CIFAR10Dataset(str(tmp_path), train=False)
    write_batch(tmp_path / "test_batch", np.zeros((2, 3000), np.uint8), [1, 2])
    with pytest.raises(ndl.errors.DataError, match="N x 3072"):
        ndl.data.CIFAR10Dataset(str(tmp_path), train=False)
    write_batch(tmp_path / "test_batch", np.zeros((2, 3072), np.uint8), [1, 12])
    with pytest.raises(ndl.errors.DataError, match="0..9"):
        ndl.data.CIFAR10Dataset(str(tmp_path), train=False)
