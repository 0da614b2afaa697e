"""Datasets and the DataLoader that batches them, with the course's semantics.

A dataset's `__getitem__` accepts an integer or a numpy index array and returns a
tuple of numpy arrays (one per field: images, labels, ...).  The DataLoader asks
for a whole batch at once (`dataset[batch_indices]`) and wraps each field in a
`needle.Tensor`.  Shuffling draws exactly one `np.random.permutation(len)` per
epoch from numpy's global RNG, so seeded runs reproduce the course's batches.
"""
from __future__ import annotations

from typing import Any, List, Optional, Sequence

import numpy as np

from ..autograd import Tensor
from ..errors import ArgumentError, DTypeError
from .data_transforms import Transform


class Dataset:
    """An abstract class representing a dataset.

    Subclasses implement `__getitem__` (integer or index array -> tuple of arrays)
    and `__len__`; `apply_transforms` runs the optional transforms in order.
    """

    def __init__(self, transforms: Optional[Sequence[Transform]] = None):
        self.transforms = transforms

    def __getitem__(self, index) -> Any:
        raise NotImplementedError()

    def __len__(self) -> int:
        raise NotImplementedError()

    def apply_transforms(self, x: np.ndarray) -> np.ndarray:
        if self.transforms is not None:
            for tform in self.transforms:
                x = tform(x)
        return x


class DataLoader:
    """Iterates over a dataset in batches of `batch_size` (the last one may be smaller).

    Each batch is a tuple of `needle.Tensor`s (`dtype`, on `device`), one per field
    of the dataset, built from `dataset[batch_indices]`.
    """

    dataset: Dataset
    batch_size: Optional[int]

    def __init__(self, dataset: Dataset, batch_size: Optional[int] = 1, shuffle: bool = False,
                 device=None, dtype: str = "float32"):
        if not hasattr(dataset, "__len__") or not hasattr(dataset, "__getitem__"):
            raise DTypeError(f"DataLoader: expected a Dataset (with __len__ and __getitem__), "
                             f"got {type(dataset).__name__}")
        if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
            raise ArgumentError(f"DataLoader: batch_size must be a positive integer, got {batch_size!r}")
        self.dataset = dataset
        self.shuffle = shuffle
        self.batch_size = int(batch_size)
        self.device = device
        self.dtype = dtype
        self.idx = -1
        if not self.shuffle:
            self.ordering = self._split(np.arange(len(dataset)))

    def _split(self, order: np.ndarray) -> List[np.ndarray]:
        if len(order) == 0:
            return []
        return np.array_split(order, range(self.batch_size, len(self.dataset), self.batch_size))

    def __iter__(self) -> "DataLoader":
        if self.shuffle:
            self.ordering = self._split(np.random.permutation(len(self.dataset)))
        self.idx = -1
        return self

    def __next__(self) -> tuple:
        self.idx += 1
        if self.idx >= len(self.ordering):
            raise StopIteration
        batch = self.dataset[self.ordering[self.idx]]
        if not isinstance(batch, (tuple, list)):
            batch = (batch,)
        return tuple(self._to_tensor(x) for x in batch)

    def _to_tensor(self, x) -> Tensor:
        return Tensor(np.asarray(x), device=self.device, dtype=self.dtype, requires_grad=False)

    def __len__(self) -> int:
        n = len(self.dataset)
        return (n + self.batch_size - 1) // self.batch_size

