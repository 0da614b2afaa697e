"""`DistributedSampler`: each rank's share of every epoch, for data-parallel training."""
from __future__ import annotations

from typing import Iterator, Optional

import numpy as np

from ..errors import ArgumentError


class DistributedSampler:
    """The indices of one rank's shard of `dataset`, for `DataLoader(..., sampler=...)`.

    Every epoch all ranks draw the same permutation (from `seed + epoch`, not from the
    global RNG, so it does not depend on what else a rank draws) and rank r takes
    positions r, r + R, r + 2R, ... of it (R = number of ranks).  The shards are
    disjoint; when R does not divide the dataset, the permutation's first indices are
    repeated at its end (or, with `drop_last=True`, its tail is dropped) so that every
    rank gets the same number of samples, hence the same number of batches: no rank
    waits forever in an all-reduce that the others never reach.

    With a per-rank batch size b, step k's global batch (all ranks' k-th batches) is
    positions [k*b*R, (k+1)*b*R) of the permutation: exactly the batch one process
    with batch size b*R would take.  Call `set_epoch(e)` before each epoch for a new
    permutation (as in PyTorch).  `num_replicas` and `rank` default to the world's
    (PyTorch takes them second and third; here they come after `shuffle, seed`).
    """

    def __init__(self, dataset, shuffle: bool = True, seed: int = 0, num_replicas: Optional[int] = None,
                 rank: Optional[int] = None, drop_last: bool = False) -> None:
        if not isinstance(shuffle, (bool, np.bool_)):  # PyTorch's order: (dataset, num_replicas, rank)
            raise ArgumentError(f"DistributedSampler: shuffle must be True or False, got {shuffle!r} "
                                "(arguments are (dataset, shuffle, seed); pass num_replicas= and rank= "
                                "by name)")
        if not _is_int(seed):
            raise ArgumentError(f"DistributedSampler: seed must be an integer, got {seed!r}")
        if not hasattr(dataset, "__len__"):
            raise ArgumentError(f"DistributedSampler: the dataset must have a length, "
                                f"got {type(dataset).__name__}")
        if num_replicas is None or rank is None:
            from .. import distributed
            num_replicas = distributed.world_size() if num_replicas is None else num_replicas
            rank = distributed.rank() if rank is None else rank
        if not _is_int(num_replicas) or num_replicas < 1:
            raise ArgumentError(f"DistributedSampler: num_replicas must be a positive integer, "
                                f"got {num_replicas!r}")
        if not _is_int(rank) or not 0 <= rank < num_replicas:
            raise ArgumentError(f"DistributedSampler: rank must be in [0, {num_replicas}), got {rank!r}")
        self.dataset = dataset
        self.num_replicas, self.rank = int(num_replicas), int(rank)
        self.shuffle, self.seed, self.drop_last = bool(shuffle), int(seed), bool(drop_last)
        self.epoch = 0
        n = len(dataset)
        if drop_last:
            self.num_samples = n // self.num_replicas
        else:
            self.num_samples = -(-n // self.num_replicas)
        self.total_size = self.num_samples * self.num_replicas

    def set_epoch(self, epoch: int) -> None:
        """Use epoch `epoch`'s permutation from now on (the same on every rank)."""
        self.epoch = int(epoch)

    def indices(self) -> np.ndarray:
        """This rank's indices for the current epoch, in order."""
        n = len(self.dataset)
        if self.shuffle:
            order = np.random.RandomState(self.seed + self.epoch).permutation(n)
        else:
            order = np.arange(n)
        if self.total_size <= n:
            order = order[:self.total_size]
        elif n > 0:
            order = np.resize(order, self.total_size)  # repeats the start to pad the end
        return order[self.rank:self.total_size:self.num_replicas]

    def __iter__(self) -> Iterator[int]:
        return iter(self.indices().tolist())

    def __len__(self) -> int:
        return self.num_samples


def _is_int(value) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)
