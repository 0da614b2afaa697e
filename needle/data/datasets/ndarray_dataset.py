"""A dataset over in-memory arrays that share their first dimension."""
from __future__ import annotations

import numpy as np

from ...errors import ArgumentError, ShapeError
from ..data_basic import Dataset


class NDArrayDataset(Dataset):
    """`dataset[i]` is `(a[i] for a in arrays)` as a tuple; no transforms."""

    def __init__(self, *arrays: np.ndarray):
        super().__init__()
        if not arrays:
            raise ArgumentError("NDArrayDataset: give at least one array")
        self.arrays = tuple(np.asarray(a) for a in arrays)
        if len({len(a) for a in self.arrays}) != 1:
            raise ShapeError(f"NDArrayDataset: arrays differ in length: {[len(a) for a in self.arrays]}")

    def __len__(self) -> int:
        return len(self.arrays[0])

    def __getitem__(self, i) -> tuple:
        return tuple(a[i] for a in self.arrays)
