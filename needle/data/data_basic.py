"""Datasets and the DataLoader that batches them, with the course's semantics.

A course-style dataset's `__getitem__` accepts an integer or a numpy index array
and returns a tuple of numpy arrays (one per field: images, labels, ...); the
DataLoader asks it for a whole batch at once (`dataset[batch_indices]`).  A
PyTorch-style dataset returns one sample per integer index; the DataLoader stacks
the samples (`collate`).  Each field becomes a `needle.Tensor`.  Shuffling draws
exactly one `np.random.permutation(len)` per epoch from numpy's global RNG, so
seeded runs reproduce the course's batches; a `sampler` (e.g. DistributedSampler)
decides the order instead.
"""
from __future__ import annotations

from typing import Any, List, Optional, Sequence

import numpy as np

from ..autograd import Tensor
from ..errors import ArgumentError, DataError, DTypeError, fmt_shape
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
    """Iterates over a dataset in batches of `batch_size` (the last one may be smaller,
    or dropped with `drop_last=True`).

    Each batch is a tuple of `needle.Tensor`s (`dtype`, on `device`), one per field of
    the dataset.  Course-style datasets answer a whole batch at once
    (`dataset[index_array]`); PyTorch-style ones answer one sample per integer index,
    and the loader stacks the samples into a batch itself.  Which kind a dataset is,
    the first batch tells: if `dataset[index_array]` raises, or does not return one row
    per index, the loader asks for the samples one by one from then on.

    `sampler`: an iterable of indices with a length (e.g. `DistributedSampler`), asked
    afresh each epoch, instead of `shuffle`.
    """

    dataset: Dataset
    batch_size: Optional[int]

    def __init__(self, dataset: Dataset, batch_size: Optional[int] = 1, shuffle: bool = False,
                 device=None, dtype: str = "float32", drop_last: bool = False, sampler=None):
        if not hasattr(dataset, "__len__") or not hasattr(dataset, "__getitem__"):
            raise DTypeError(f"DataLoader: expected a Dataset (with __len__ and __getitem__), "
                             f"got {type(dataset).__name__}")
        if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
            raise ArgumentError(f"DataLoader: batch_size must be a positive integer, got {batch_size!r}")
        if isinstance(device, bool):
            raise ArgumentError(f"DataLoader: device must be a needle device, got {device!r}; the fourth "
                                "argument is the device (as in the course): pass drop_last= by name")
        if sampler is not None:
            if shuffle:
                raise ArgumentError("DataLoader: give either shuffle=True or a sampler, not both "
                                    "(the sampler decides the order)")
            if not hasattr(sampler, "__iter__") or not hasattr(sampler, "__len__"):
                raise DTypeError(f"DataLoader: sampler must be an iterable of indices with a length, "
                                 f"got {type(sampler).__name__}")
        self.dataset = dataset
        self.shuffle = shuffle
        self.sampler = sampler
        self.batch_size = int(batch_size)
        self.drop_last = bool(drop_last)
        self.device = device
        self.dtype = dtype
        self.idx = -1
        self._batched: Optional[bool] = None  # does dataset[index_array] give a batch? (first batch tells)
        if not self.shuffle and sampler is None:
            self.ordering = self._split(np.arange(len(dataset)))

    def _split(self, order: np.ndarray) -> List[np.ndarray]:
        if len(order) == 0:
            return []
        batches = np.array_split(order, range(self.batch_size, len(order), self.batch_size))
        if self.drop_last and len(batches[-1]) < self.batch_size:
            batches.pop()
        return batches

    def __iter__(self) -> "DataLoader":
        if self.sampler is not None:
            self.ordering = self._split(np.fromiter(iter(self.sampler), dtype=np.int64))
        elif self.shuffle:
            self.ordering = self._split(np.random.permutation(len(self.dataset)))
        self.idx = -1
        return self

    def __next__(self) -> tuple:
        self.idx += 1
        if self.idx >= len(self.ordering):
            raise StopIteration
        batch = self._fetch(self.ordering[self.idx])
        if isinstance(batch, dict):
            return {k: self._to_tensor(v) for k, v in batch.items()}
        if not isinstance(batch, (tuple, list)):
            batch = (batch,)
        return tuple(self._to_tensor(x) for x in batch)

    def _fetch(self, indices: np.ndarray):
        """The batch at `indices`: asked for at once, or sample by sample and stacked."""
        if self._batched is None:
            try:
                batch = self.dataset[indices]
            except Exception as error:  # noqa: BLE001 - a PyTorch-style dataset may raise anything here
                self._batched = False
                try:
                    return collate([self.dataset[int(i)] for i in indices])
                except Exception as per_sample:
                    raise per_sample from error
            self._batched = _is_batch(batch, len(indices))
            if self._batched:
                return batch
        if self._batched:
            return self.dataset[indices]
        return collate([self.dataset[int(i)] for i in indices])

    def _to_tensor(self, x) -> Tensor:
        return Tensor(np.asarray(x), device=self.device, dtype=self.dtype, requires_grad=False)

    def __len__(self) -> int:
        n = len(self.sampler) if self.sampler is not None else len(self.dataset)
        if self.drop_last:
            return n // self.batch_size
        return (n + self.batch_size - 1) // self.batch_size


def _is_batch(batch, count: int) -> bool:
    """Whether `batch` (what dataset[index_array] returned) holds `count` rows in every field."""
    if isinstance(batch, dict):
        fields = list(batch.values())
    else:
        fields = batch if isinstance(batch, (tuple, list)) else (batch,)
    try:
        return all(np.ndim(f) >= 1 and len(f) == count for f in fields)
    except TypeError:
        return False


def collate(samples: Sequence) -> Any:
    """Stack samples (each an array, a number, a tuple/list of fields or a dict of fields)
    into one batch with the same structure, or a DataError naming the misfit."""
    if not samples:
        raise DataError("DataLoader: cannot make a batch of no samples")
    first = samples[0]
    if isinstance(first, dict):
        keys = list(first)
        for j, s in enumerate(samples):
            if not isinstance(s, dict) or list(s) != keys:
                raise DataError(f"DataLoader: sample {j} does not have the fields {keys} of sample 0")
        return {k: _stack(k, [s[k] for s in samples]) for k in keys}
    if isinstance(first, (tuple, list)):
        for j, s in enumerate(samples):
            if not isinstance(s, (tuple, list)) or len(s) != len(first):
                got = f"{len(s)} fields" if isinstance(s, (tuple, list)) else type(s).__name__
                raise DataError(f"DataLoader: sample 0 has {len(first)} fields but sample {j} has {got}")
        return tuple(_stack(k, [s[k] for s in samples]) for k in range(len(first)))
    return _stack(0, list(samples))


def _stack(field, values: list) -> np.ndarray:
    arrays = [np.asarray(v.numpy() if isinstance(v, Tensor) else v) for v in values]
    shape = arrays[0].shape
    for j, a in enumerate(arrays):
        if a.shape != shape:
            raise DataError(f"DataLoader: cannot stack field {field!r} into a batch: sample 0 has shape "
                            f"{fmt_shape(shape)} but sample {j} has shape {fmt_shape(a.shape)}")
        if a.dtype == object:
            raise DataError(f"DataLoader: field {field!r} of sample {j} is not numeric "
                            f"({type(values[j]).__name__}); it cannot become a tensor")
    return np.stack(arrays)
