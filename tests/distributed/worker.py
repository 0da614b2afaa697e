"""One rank of a distributed test scenario: `python worker.py SCENARIO OUTDIR [DTYPE]`,
started by tests/distributed/test_distributed.py under `mpiexec -n N` (or alone, for the
one-process reference).  Each rank writes OUTDIR/rank{r}.npz with what it saw."""
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

import needle as ndl  # noqa: E402
import needle.distributed as dist  # noqa: E402
import needle.nn as nn  # noqa: E402
from needle.data import DataLoader, DistributedSampler, NDArrayDataset  # noqa: E402

GLOBAL_BATCH, FEATURES, HIDDEN, CLASSES, STEPS = 64, 20, 32, 10, 5


def global_batch(dtype):
    rng = np.random.RandomState(42)
    X = rng.randn(GLOBAL_BATCH, FEATURES).astype(dtype)
    y = rng.randint(0, CLASSES, size=GLOBAL_BATCH)
    return X, y


class CountingComm:
    """Wraps the world's communicator to count the collectives average_gradients makes."""

    def __init__(self, comm):
        self.comm, self.calls = comm, []

    def __getattr__(self, name):
        attr = getattr(self.comm, name)
        if not callable(attr):
            return attr

        def counted(*args, **kwargs):
            self.calls.append(name)
            return attr(*args, **kwargs)
        return counted


def train(model, dtype, steps=STEPS):
    """SGD steps on each rank's shard of the fixed global batch; returns the global losses."""
    X, y = global_batch(dtype)
    loader = DataLoader(NDArrayDataset(X, y), GLOBAL_BATCH // dist.world_size(), dtype=dtype,
                        sampler=DistributedSampler(NDArrayDataset(X, y), shuffle=False))
    assert len(loader) == 1
    opt = ndl.optim.SGD(model.parameters(), lr=0.1, momentum=0.5, weight_decay=1e-3)
    loss_fn = nn.SoftmaxLoss()
    losses, collectives = [], []
    for _ in range(steps):
        for xb, yb in loader:
            loss = loss_fn(model(xb), yb)
            opt.reset_grad()
            loss.backward()
            world = dist._WORLD
            if world.comm is not None:
                counting = world.comm = CountingComm(world.comm)
                dist.average_gradients(model.parameters())
                world.comm = counting.comm
                collectives.append(len(counting.calls))
            else:
                dist.average_gradients(model.parameters())
            opt.step()
            losses.append(float(dist.all_reduce(loss.detach(), "mean").numpy()))
    return losses, collectives


def params_of(model):
    return {f"param_{name}": t.numpy() for name, t in model.state_dict().items()}


def scenario_mlp(dtype):
    np.random.seed(0 if dist.rank() == 0 else 100 + dist.rank())  # broadcast must fix the others
    model = nn.Sequential(nn.Linear(FEATURES, HIDDEN, dtype=dtype), nn.ReLU(),
                          nn.Linear(HIDDEN, CLASSES, dtype=dtype))
    dist.broadcast_parameters(model)
    losses, collectives = train(model, dtype)
    return dict(losses=np.array(losses), collectives=np.array(collectives), **params_of(model))


def scenario_mlp_jit(dtype, steps=8):
    """The step (backward, all-reduce, update) captured by needle.jit, against the same
    steps run plainly on a copy: equal bit for bit, the all-reduce replayed as a host call."""
    np.random.seed(0)
    models = [nn.Sequential(nn.Linear(FEATURES, HIDDEN, dtype=dtype), nn.ReLU(),
                            nn.Linear(HIDDEN, CLASSES, dtype=dtype)) for _ in range(2)]
    models[1].load_state_dict(models[0].state_dict())
    X, y = global_batch(dtype)
    share = GLOBAL_BATCH // dist.world_size()
    xb = ndl.Tensor(X[dist.rank() * share:(dist.rank() + 1) * share], dtype=dtype, requires_grad=False)
    yb = ndl.Tensor(y[dist.rank() * share:(dist.rank() + 1) * share], dtype=dtype, requires_grad=False)
    out = {}
    for name, model in zip(("plain", "jit"), models):
        opt = ndl.optim.SGD(model.parameters(), lr=0.1, momentum=0.5)

        def step(x, t):
            opt.reset_grad()
            loss = nn.SoftmaxLoss()(model(x), t)
            loss.backward()
            dist.average_gradients(model.parameters())
            opt.step()
            return loss
        fn = ndl.jit(step) if name == "jit" else step
        out[f"losses_{name}"] = np.array([fn(xb, yb).numpy() for _ in range(steps)])
        out.update({f"{name}_{k}": v for k, v in params_of(model).items()})
        if name == "jit":
            out["replays"] = np.array(fn.replays)
    return out


def scenario_batchnorm(dtype):
    np.random.seed(0)
    model = nn.Sequential(nn.Linear(FEATURES, HIDDEN, dtype=dtype), nn.BatchNorm1d(HIDDEN, dtype=dtype),
                          nn.ReLU(), nn.Linear(HIDDEN, CLASSES, dtype=dtype))
    dist.broadcast_parameters(model)
    initial = {f"initial_{k}": v for k, v in params_of(model).items()}
    losses, _ = train(model, dtype, steps=1)
    bn = model.modules[1]
    mean_over_ranks = dist.all_reduce(bn.running_mean, "mean").numpy()
    return dict(losses=np.array(losses), running_mean=bn.running_mean.numpy(),
                running_var=bn.running_var.numpy(), running_mean_over_ranks=mean_over_ranks,
                **initial, **params_of(model))


def scenario_raise(dtype):
    np.random.seed(0)
    model = nn.Sequential(nn.Linear(FEATURES, CLASSES, dtype=dtype))
    dist.broadcast_parameters(model)
    if dist.rank() == dist.world_size() - 1:
        raise RuntimeError(f"deliberate failure on rank {dist.rank()}")
    train(model, dtype)  # the other ranks block in average_gradients until the abort
    return dict(finished=np.array(1))


def scenario_mismatch(dtype):
    np.random.seed(0)
    hidden = HIDDEN + (dist.rank() == 1)
    model = nn.Sequential(nn.Linear(FEATURES, hidden, dtype=dtype), nn.ReLU(),
                          nn.Linear(hidden, CLASSES, dtype=dtype))
    dist.broadcast_parameters(model)
    return dict(finished=np.array(1))


scenario_raise_before_init = scenario_raise  # rank 1 fails in main() before dist.init()


def scenario_exit(dtype):
    np.random.seed(0)
    model = nn.Sequential(nn.Linear(FEATURES, CLASSES, dtype=dtype))
    with dist.abort_on_error():
        if dist.rank() == 0:
            sys.exit(2)  # a clean-looking exit on one rank only: must not leave the others hanging
    train(model, dtype)
    return dict(finished=np.array(1))


def main():
    scenario, outdir = sys.argv[1], sys.argv[2]
    dtype = sys.argv[3] if len(sys.argv) > 3 else "float32"
    if scenario == "raise_before_init" and os.environ.get("PMI_RANK") == "1":
        raise RuntimeError("deliberate failure on rank 1 before init")
    dist.init()
    result = globals()["scenario_" + scenario](dtype)
    np.savez(os.path.join(outdir, f"rank{dist.rank()}.npz"), world_size=dist.world_size(), **result)


if __name__ == "__main__":
    main()
