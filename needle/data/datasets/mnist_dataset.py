"""MNIST-format data (MNIST, Fashion-MNIST): the IDX file reader and the dataset.

IDX files are a big-endian header — a magic number (2051 for images: unsigned
bytes in 3 dims; 2049 for labels: 1 dim) and one 32-bit size per dimension —
followed by the raw bytes.  They are usually gzipped; plain files are read too.
Every way a file can be wrong raises `DataError` naming the file, because a
silently short or misaligned dataset trains to nonsense without any crash.
"""
from __future__ import annotations

import gzip
import os
import struct
import zlib
from typing import Optional, Sequence, Tuple

import numpy as np

from ...errors import DataError
from ..data_basic import Dataset
from ..data_transforms import Transform

IMAGES_MAGIC = 2051
LABELS_MAGIC = 2049
_GZIP_MAGIC = b"\x1f\x8b"


def _read_bytes(filename: str) -> bytes:
    """The file's content, gunzipped when it is gzip data."""
    try:
        with open(filename, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        raise DataError(f"{filename}: no such file") from None
    except OSError as e:
        raise DataError(f"{filename}: cannot read the file ({e.strerror or e})") from None
    if raw[:2] == _GZIP_MAGIC:
        try:
            return gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as e:
            raise DataError(f"{filename}: corrupt or truncated gzip data ({e})") from None
    if str(filename).endswith(".gz"):
        raise DataError(f"{filename}: not a gzip file (the name ends in .gz but the data "
                        "does not start with the gzip signature 1f 8b)")
    return raw


def read_idx(filename: str, magic: int, ndim: int, what: str) -> np.ndarray:
    """Read an IDX file of unsigned bytes with `ndim` dimensions as a uint8 array,
    checking the magic number and that the data is exactly as long as promised."""
    filename = os.fspath(filename)
    data = _read_bytes(filename)
    header_size = 4 + 4 * ndim
    if len(data) < header_size:
        raise DataError(f"{filename}: truncated: {len(data)} bytes, shorter than the "
                        f"{header_size}-byte IDX header of an MNIST {what} file")
    found = struct.unpack(">I", data[:4])[0]
    if found != magic:
        raise DataError(f"{filename}: bad magic number {found} (expected {magic} for an "
                        f"MNIST {what} file); is it the right file?")
    dims = struct.unpack(f">{ndim}I", data[4:header_size])
    count = int(np.prod(dims, dtype=np.int64))
    if len(data) - header_size < count:
        raise DataError(f"{filename}: truncated: the header promises {count} bytes of {what} "
                        f"data {tuple(dims)}, the file holds {len(data) - header_size}")
    if len(data) - header_size > count:
        raise DataError(f"{filename}: {len(data) - header_size - count} unexpected bytes after "
                        f"the {what} data {tuple(dims)}")
    return np.frombuffer(data, dtype=np.uint8, count=count, offset=header_size).reshape(dims)


def read_mnist(image_filename: str, label_filename: str) -> Tuple[np.ndarray, np.ndarray]:
    """Raw MNIST-format data: uint8 images (N, rows, cols) and uint8 labels (N,)."""
    images = read_idx(image_filename, IMAGES_MAGIC, 3, "images")
    labels = read_idx(label_filename, LABELS_MAGIC, 1, "labels")
    if images.shape[0] != labels.shape[0]:
        raise DataError(f"{image_filename} holds {images.shape[0]} images but {label_filename} "
                        f"holds {labels.shape[0]} labels")
    return images, labels.copy()


def parse_mnist(image_filename: str, label_filename: str) -> Tuple[np.ndarray, np.ndarray]:
    """Read MNIST-format images and labels.

    Returns X, float32 of shape (N, rows * cols) scaled to [0, 1], and y, uint8
    labels of shape (N,).  Raises DataError if either file is bad or the counts differ.
    """
    images, labels = read_mnist(image_filename, label_filename)
    return _scale(images), labels


def _scale(images: np.ndarray) -> np.ndarray:
    return images.reshape(images.shape[0], -1).astype(np.float32) / np.float32(255.0)


class MNISTDataset(Dataset):
    """Images (N, rows * cols) float32 in [0, 1] and uint8 labels; `dataset[index]`
    returns `(images[index], labels[index])` for an integer, slice or index array.

    With transforms, each image is viewed as rows x cols x 1 (H x W x C, what the
    transforms expect), transformed, and flattened back.
    """

    def __init__(self, image_filename: str, label_filename: str,
                 transforms: Optional[Sequence[Transform]] = None):
        super().__init__(transforms)
        images, self.labels = read_mnist(image_filename, label_filename)
        self.image_shape = (int(images.shape[1]), int(images.shape[2]))
        self.images = _scale(images)

    def __len__(self) -> int:
        return self.images.shape[0]

    def __getitem__(self, index) -> Tuple[np.ndarray, np.ndarray]:
        X, y = self.images[index], self.labels[index]
        if self.transforms:
            if X.ndim == 1:
                X = self._transform(X)
            else:
                X = np.stack([self._transform(x) for x in X]) if len(X) else X
        return X, y

    def _transform(self, x: np.ndarray) -> np.ndarray:
        rows, cols = self.image_shape
        return np.ascontiguousarray(self.apply_transforms(x.reshape(rows, cols, 1))).reshape(-1)
