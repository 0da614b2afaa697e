"""CIFAR-10 in its "python version" layout (`cifar-10-batches-py`), as the course reads it.

Each batch file is a Python pickle of a dict with byte keys: `b"data"`, an N x 3072
uint8 array (1024 red, 1024 green, 1024 blue values, each a row-major 32 x 32 image),
and `b"labels"`, N ints in 0..9.  Train reads data_batch_1 ... data_batch_5 in that
order, test reads test_batch.  A missing, corrupt or misshapen file raises DataError
naming it.
"""
from __future__ import annotations

import os
import pickle
from typing import List, Optional, Sequence, Tuple

import numpy as np

from ...errors import DataError
from ..data_basic import Dataset
from ..data_transforms import Transform

TRAIN_FILES = tuple(f"data_batch_{i}" for i in range(1, 6))
TEST_FILES = ("test_batch",)
IMAGE_SHAPE = (3, 32, 32)


def read_cifar10_batch(filename: str) -> Tuple[np.ndarray, np.ndarray]:
    """One batch file: uint8 images (N, 3, 32, 32) and int64 labels (N,)."""
    try:
        with open(filename, "rb") as f:
            batch = pickle.load(f, encoding="bytes")
    except FileNotFoundError:
        raise DataError(f"{filename}: no such file (expected a CIFAR-10 batch of "
                        "the python version, cifar-10-batches-py)") from None
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, ImportError,
            IndexError, KeyError, OSError) as e:
        raise DataError(f"{filename}: not a readable CIFAR-10 pickle ({type(e).__name__}: {e})") from None
    if not isinstance(batch, dict) or b"data" not in batch or b"labels" not in batch:
        keys = sorted(batch) if isinstance(batch, dict) else type(batch).__name__
        raise DataError(f"{filename}: expected a dict with keys b'data' and b'labels', got {keys}")
    data = np.asarray(batch[b"data"])
    labels = np.asarray(batch[b"labels"])
    if data.ndim != 2 or data.shape[1] != 3072 or data.dtype != np.uint8:
        raise DataError(f"{filename}: b'data' must be an N x 3072 uint8 array, got {data.dtype} {data.shape}")
    if labels.shape != (data.shape[0],) or labels.dtype.kind not in "iu" or \
            (labels.size and (labels.min() < 0 or labels.max() > 9)):
        raise DataError(f"{filename}: b'labels' must hold {data.shape[0]} integers in 0..9, "
                        f"got {labels.dtype} {labels.shape}")
    return data.reshape((-1,) + IMAGE_SHAPE), labels.astype(np.int64)


class CIFAR10Dataset(Dataset):
    """`dataset[i]` is (image float32 (3, 32, 32) in [0, 1], label); an index array gives
    (B, 3, 32, 32) and (B,).  `p` is accepted for the course's signature and unused.

    Images are kept as uint8 (a quarter of the memory) and scaled by 1/255 when read,
    which gives the same float32 values as scaling up front.  Transforms see each image
    as H x W x C, as they expect, and it is turned back to C x H x W.
    """

    def __init__(self, base_folder: str, train: bool, p: Optional[float] = 0.5,
                 transforms: Optional[Sequence[Transform]] = None):
        super().__init__(transforms)
        self.p = p
        files = TRAIN_FILES if train else TEST_FILES
        images: List[np.ndarray] = []
        labels: List[np.ndarray] = []
        for name in files:
            x, y = read_cifar10_batch(os.path.join(os.fspath(base_folder), name))
            images.append(x)
            labels.append(y)
        self._images = np.concatenate(images)
        self.y = np.concatenate(labels)

    @property
    def X(self) -> np.ndarray:  # noqa: N802 - the course's name
        """All images, float32 (N, 3, 32, 32) in [0, 1]."""
        return _scale(self._images)

    def __len__(self) -> int:
        return self._images.shape[0]

    def __getitem__(self, index) -> Tuple[np.ndarray, object]:
        X, y = _scale(self._images[index]), self.y[index]
        if self.transforms:
            X = self._transform(X) if X.ndim == 3 else np.stack([self._transform(x) for x in X]) if len(X) else X
        return X, y

    def _transform(self, x: np.ndarray) -> np.ndarray:
        hwc = self.apply_transforms(x.transpose(1, 2, 0))
        return np.ascontiguousarray(np.asarray(hwc).transpose(2, 0, 1))


def _scale(images: np.ndarray) -> np.ndarray:
    return images.astype(np.float32) / np.float32(255.0)
