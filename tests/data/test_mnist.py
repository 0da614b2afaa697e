"""The IDX reader and MNISTDataset, on small files written here and on Fashion-MNIST."""
import gzip
import os
import struct

import numpy as np
import pytest

from needle.data import DataLoader, MNISTDataset, RandomCrop, RandomFlipHorizontal, parse_mnist
from needle.errors import DataError

FASHION = "/usr/share/datasets/fashion-mnist"


def idx_images(images, magic=2051):
    n, rows, cols = images.shape
    return struct.pack(">IIII", magic, n, rows, cols) + images.astype(np.uint8).tobytes()


def idx_labels(labels, magic=2049):
    return struct.pack(">II", magic, len(labels)) + labels.astype(np.uint8).tobytes()


def write(path, payload, compress=True):
    with open(path, "wb") as f:
        f.write(gzip.compress(payload) if compress else payload)
    return str(path)


@pytest.fixture
def small(tmp_path):
    images = np.random.randint(0, 256, size=(7, 4, 3)).astype(np.uint8)
    images[0, 0, 0], images[0, 0, 1] = 0, 255
    labels = np.random.randint(0, 10, size=7).astype(np.uint8)
    img = write(tmp_path / "img.gz", idx_images(images))
    lbl = write(tmp_path / "lbl.gz", idx_labels(labels))
    return images, labels, img, lbl


def test_parse_small_gzipped(small):
    images, labels, img, lbl = small
    X, y = parse_mnist(img, lbl)
    assert X.shape == (7, 12) and X.dtype == np.float32
    assert y.shape == (7,) and y.dtype == np.uint8
    np.testing.assert_allclose(X, images.reshape(7, 12) / 255.0, rtol=1e-6)
    assert X.min() == 0.0 and X.max() == 1.0
    np.testing.assert_array_equal(y, labels)


def test_parse_uncompressed(tmp_path):
    images = np.random.randint(0, 256, size=(3, 2, 2)).astype(np.uint8)
    labels = np.array([1, 2, 3], dtype=np.uint8)
    img = write(tmp_path / "img-idx3-ubyte", idx_images(images), compress=False)
    lbl = write(tmp_path / "lbl-idx1-ubyte", idx_labels(labels), compress=False)
    X, y = parse_mnist(img, lbl)
    np.testing.assert_allclose(X, images.reshape(3, 4) / 255.0, rtol=1e-6)
    np.testing.assert_array_equal(y, labels)


def test_dataset_indexing(small):
    images, labels, img, lbl = small
    ds = MNISTDataset(img, lbl)
    assert len(ds) == 7
    x, y = ds[2]
    assert x.shape == (12,)
    np.testing.assert_allclose(x, images[2].reshape(-1) / 255.0, rtol=1e-6)
    assert y == labels[2]
    xb, yb = ds[np.array([5, 0])]
    assert xb.shape == (2, 12)
    np.testing.assert_array_equal(yb, labels[[5, 0]])


def test_dataset_transforms_act_per_image(small):
    images, labels, img, lbl = small
    ds = MNISTDataset(img, lbl, transforms=[RandomFlipHorizontal(p=1.0)])
    xb, _ = ds[np.array([1, 3])]
    expected = images[[1, 3]][:, :, ::-1].reshape(2, 12) / 255.0
    np.testing.assert_allclose(xb, expected, rtol=1e-6)
    x, _ = ds[4]
    np.testing.assert_allclose(x, images[4][:, ::-1].reshape(-1) / 255.0, rtol=1e-6)


def test_dataset_crop_draws_per_image_in_order(small):
    images, labels, img, lbl = small
    ds = MNISTDataset(img, lbl, transforms=[RandomCrop(padding=1)])
    np.random.seed(5)
    shifts = [np.random.randint(-1, 2, size=2) for _ in range(3)]
    np.random.seed(5)
    xb, _ = ds[np.array([0, 1, 2])]
    for k, (sx, sy) in enumerate(shifts):
        padded = np.pad(images[k] / 255.0, 1)
        np.testing.assert_allclose(xb[k].reshape(4, 3), padded[1 + sx:5 + sx, 1 + sy:4 + sy], rtol=1e-6)


def test_dataloader_over_mnist(small):
    images, labels, img, lbl = small
    batches = list(DataLoader(MNISTDataset(img, lbl), batch_size=3))
    assert [b[0].shape for b in batches] == [(3, 12), (3, 12), (1, 12)]
    np.testing.assert_array_equal(batches[2][1].numpy(), labels[6:])


# ---- bad files: each raises DataError naming the file ---------------------------------------
def expect_error(path, call, fragment):
    with pytest.raises(DataError) as info:
        call()
    message = str(info.value)
    assert str(path) in message, message
    assert fragment in message.lower(), message
    return message


def test_missing_file(small, tmp_path):
    _, _, img, lbl = small
    missing = str(tmp_path / "nope.gz")
    expect_error(missing, lambda: parse_mnist(missing, lbl), "no such file")
    expect_error(missing, lambda: MNISTDataset(img, missing), "no such file")


def test_wrong_magic(small, tmp_path):
    images, labels, img, lbl = small
    bad = write(tmp_path / "bad.gz", idx_images(images, magic=2049))
    expect_error(bad, lambda: parse_mnist(bad, lbl), "magic")
    # labels and images swapped
    expect_error(lbl, lambda: parse_mnist(lbl, img), "magic")


def test_truncated_data(small, tmp_path):
    images, labels, img, lbl = small
    short = write(tmp_path / "short.gz", idx_images(images)[:-5])
    expect_error(short, lambda: parse_mnist(short, lbl), "truncated")
    short_labels = write(tmp_path / "short_lbl.gz", idx_labels(labels)[:-1])
    expect_error(short_labels, lambda: parse_mnist(img, short_labels), "truncated")


def test_truncated_header(small, tmp_path):
    _, _, img, lbl = small
    tiny = write(tmp_path / "tiny.gz", struct.pack(">I", 2051))
    expect_error(tiny, lambda: parse_mnist(tiny, lbl), "truncated")
    empty = write(tmp_path / "empty", b"", compress=False)
    expect_error(empty, lambda: parse_mnist(empty, lbl), "truncated")


def test_truncated_gzip_stream(small, tmp_path):
    images, _, _, lbl = small
    data = gzip.compress(idx_images(images))
    cut = write(tmp_path / "cut.gz", data[: len(data) // 2], compress=False)
    expect_error(cut, lambda: parse_mnist(cut, lbl), "gzip")


def test_not_gzip(small, tmp_path):
    images, _, _, lbl = small
    fake = write(tmp_path / "fake.gz", b"this is not gzip data at all, just text\n", compress=False)
    expect_error(fake, lambda: parse_mnist(fake, lbl), "not a gzip file")


def test_trailing_bytes(small, tmp_path):
    images, _, _, lbl = small
    long = write(tmp_path / "long.gz", idx_images(images) + b"\x00\x00")
    expect_error(long, lambda: parse_mnist(long, lbl), "unexpected bytes")


def test_count_mismatch(small, tmp_path):
    images, labels, img, _ = small
    lbl = write(tmp_path / "six.gz", idx_labels(labels[:6]))
    message = expect_error(img, lambda: MNISTDataset(img, lbl), "7 images")
    assert lbl in message and "6 labels" in message


def test_directory_instead_of_file(small, tmp_path):
    _, _, _, lbl = small
    expect_error(str(tmp_path), lambda: parse_mnist(str(tmp_path), lbl), "cannot read")


def test_data_error_is_a_value_error(small, tmp_path):
    _, _, img, _ = small
    with pytest.raises(ValueError):
        parse_mnist(img, str(tmp_path / "missing"))


# ---- the real Fashion-MNIST files ---------------------------------------------------------
needs_fashion = pytest.mark.skipif(not os.path.isdir(FASHION),
                                   reason=f"{FASHION} absent (apt-get install dataset-fashion-mnist)")


@needs_fashion
@pytest.mark.parametrize("prefix,count", [("train", 60000), ("t10k", 10000)])
def test_fashion_mnist(prefix, count):
    ds = MNISTDataset(os.path.join(FASHION, f"{prefix}-images-idx3-ubyte.gz"),
                      os.path.join(FASHION, f"{prefix}-labels-idx1-ubyte.gz"))
    assert len(ds) == count
    assert ds.images.shape == (count, 784) and ds.images.dtype == np.float32
    assert ds.labels.shape == (count,) and ds.labels.dtype == np.uint8
    assert ds.images.min() == 0.0 and ds.images.max() == 1.0
    assert set(np.unique(ds.labels)) == set(range(10))
    # Fashion-MNIST is balanced: every class has a tenth of the examples
    np.testing.assert_array_equal(np.bincount(ds.labels), np.full(10, count // 10))
    x, y = ds[0]
    assert x.shape == (784,) and 0 <= y <= 9
    if prefix == "train":  # the published first labels: ankle boot, T-shirt, T-shirt, dress, ...
        np.testing.assert_array_equal(ds.labels[:10], [9, 0, 0, 3, 0, 2, 7, 2, 5, 5])
