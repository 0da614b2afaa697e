"""`python -m needle train --distributed`: the data-parallel pieces of `train.run`.

Run as `mpiexec -n N python -m needle train --distributed ...`.  Every rank builds the
same model (rank 0's weights are broadcast anyway), takes its `DistributedSampler`
shard of each epoch with a per-rank batch of `--batch-size / N` (so `--batch-size` is
the global batch, the one a single process would use), and averages the gradients
before each step.  Each rank evaluates its share of the test set; the metrics are
summed over ranks, and rank 0 alone prints, shows a progress bar and saves.
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Callable, Tuple

import numpy as np

from .. import config, distributed as dist
from ..autograd import Tensor
from ..data import DataLoader, DistributedSampler, NDArrayDataset


def guarded(run: Callable[[argparse.Namespace], dict], args: argparse.Namespace) -> dict:
    """Join the world and call `run(args)` so that a failure on any rank ends every rank
    (the CLI would otherwise catch the error and exit while the others wait forever)."""
    dist.init()
    if "NEEDLE_THREADS" not in os.environ:  # the ranks on one machine share its cores
        local = int(os.environ.get("MPI_LOCALNRANKS", os.environ.get("OMPI_COMM_WORLD_LOCAL_SIZE", "1")))
        config.THREADS = max(1, config.THREADS // max(1, local))
    args._rank_guarded = True
    stdout = sys.stdout
    if dist.rank() != 0:  # rank 0 alone prints; errors still reach stderr
        sys.stdout = open(os.devnull, "w")
    try:
        with dist.abort_on_error():
            return run(args)
    finally:
        if sys.stdout is not stdout:
            sys.stdout.close()
            sys.stdout = stdout


class DataParallel:
    """The sharded loaders, the gradient averaging hook and the metric reduction."""

    def __init__(self, args: argparse.Namespace, model, train_set: NDArrayDataset,
                 test_set: NDArrayDataset, device) -> None:
        self.rank, self.size = dist.rank(), dist.world_size()
        self.is_main = self.rank == 0
        if args.batch_size % self.size:
            raise ValueError(f"--batch-size {args.batch_size} is the global batch: it must be a multiple "
                             f"of the {self.size} processes")
        dist.broadcast_parameters(model)
        self.params = model.parameters()
        self.sampler = DistributedSampler(train_set, shuffle=True, seed=args.seed)
        self.train_loader = DataLoader(train_set, args.batch_size // self.size, sampler=self.sampler,
                                       device=device)
        rows = slice(self.rank, None, self.size)  # this rank's test examples, disjoint from the others'
        self.test_count = len(range(len(test_set))[rows])
        test_shard = NDArrayDataset(*(a[rows] for a in test_set.arrays))
        self.test_loader = DataLoader(test_shard, 1000, device=device)

    def set_epoch(self, epoch: int) -> None:
        self.sampler.set_epoch(epoch)

    def sync_gradients(self) -> None:
        dist.average_gradients(self.params)

    def combine(self, train_loss: float, train_acc: float, test_loss: float,
                test_acc: float) -> Tuple[float, float, float, float]:
        """Per-rank means -> means over all ranks' examples (one all-reduce)."""
        n_train, n_test = len(self.sampler), self.test_count
        local = np.array([train_loss * n_train, train_acc * n_train, n_train,
                          test_loss * n_test, test_acc * n_test, n_test], dtype=np.float64)
        s = dist.all_reduce(Tensor(local, dtype="float64", requires_grad=False), "sum").numpy()
        return s[0] / s[2], s[1] / s[2], s[3] / max(s[5], 1), s[4] / max(s[5], 1)
