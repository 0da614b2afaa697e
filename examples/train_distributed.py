"""Data-parallel training with needle.distributed, written out by hand.

    mpiexec -n 2 python examples/train_distributed.py --epochs 2     # two processes
    python examples/train_distributed.py --epochs 2                  # the same, alone

Every rank builds the model, receives rank 0's weights, trains on its shard of each
global batch (DistributedSampler) and averages the gradients before the step, so all
ranks keep identical weights.  Rank 0 alone prints.  `python -m needle train
--distributed` does the same with more options; this file shows the API.
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import needle as ndl  # noqa: E402
import needle.distributed as dist  # noqa: E402
from needle import nn, optim  # noqa: E402
from needle.data import DataLoader, DistributedSampler, NDArrayDataset, parse_mnist  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=128, help="global batch, split over the ranks")
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--limit", type=int, default=10000, help="training examples used")
    args = parser.parse_args()

    dist.init()
    rank, size = dist.rank(), dist.world_size()
    X, y = parse_mnist(os.path.join(args.data, "train-images-idx3-ubyte.gz"),
                       os.path.join(args.data, "train-labels-idx1-ubyte.gz"))
    train_set = NDArrayDataset(X[:args.limit], y[:args.limit])
    sampler = DistributedSampler(train_set, shuffle=True, seed=0)
    loader = DataLoader(train_set, args.batch_size // size, sampler=sampler)

    np.random.seed(rank)  # deliberately different: broadcast_parameters makes them equal
    model = nn.Sequential(nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 10))
    dist.broadcast_parameters(model, root=0)
    opt = optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    loss_fn = nn.SoftmaxLoss()

    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)  # a new permutation, the same on every rank
        loss_sum, seen = 0.0, 0
        for xb, yb in loader:
            loss = loss_fn(model(xb), yb)
            opt.reset_grad()
            loss.backward()
            dist.average_gradients(model.parameters())  # one Allreduce for all the gradients
            opt.step()
            loss_sum, seen = loss_sum + float(loss.numpy()) * xb.shape[0], seen + xb.shape[0]
        totals = ndl.Tensor([loss_sum, seen], dtype="float64", requires_grad=False)
        loss_sum, seen = dist.all_reduce(totals, op="sum").numpy()  # over all ranks' examples
        if rank == 0:
            print(f"epoch {epoch + 1}/{args.epochs}: mean loss {loss_sum / seen:.4f} over {int(seen)} "
                  f"examples on {size} process{'es' if size > 1 else ''}", flush=True)

    mine = ndl.Tensor([p.numpy().astype(np.float64).sum() for p in model.parameters()], dtype="float64")
    highest = dist.all_reduce(mine, op="max").numpy()
    lowest = -dist.all_reduce(-mine, op="max").numpy()
    if rank == 0:
        print(f"weights identical on every rank: {bool((highest == lowest).all())}")


if __name__ == "__main__":
    main()
