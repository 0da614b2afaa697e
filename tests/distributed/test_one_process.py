"""needle.distributed outside mpiexec: a world of one process that costs nothing, needs
no mpi4py, and explains what to install when a launcher started it without mpi4py."""
import os
import subprocess
import sys

import numpy as np
import pytest

import needle as ndl
import needle.distributed as dist
import needle.nn as nn
from needle.data import DataLoader, DistributedSampler, NDArrayDataset

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LAUNCHER_VARIABLES = ("PMI_RANK", "PMI_SIZE", "PMIX_RANK", "OMPI_COMM_WORLD_SIZE")


@pytest.fixture
def fresh_world(monkeypatch):
    """needle.distributed as if not initialized yet, outside any MPI launcher."""
    for name in LAUNCHER_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(dist, "_WORLD", None)
    yield
    monkeypatch.setattr(dist, "_WORLD", None)


def test_one_process_world(fresh_world):
    assert not dist.is_initialized()
    assert dist.world_size() == 1 and dist.rank() == 0  # the functions join the world themselves
    assert dist.is_initialized()
    dist.init()  # again: nothing happens
    dist.barrier()
    assert not dist.launched_by_mpi()


def test_script_runs_alone_without_importing_mpi4py():
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARIABLES}
    code = ("import sys; sys.modules['mpi4py'] = None\n"  # as if not installed
            "import needle as ndl, needle.distributed as dist\n"
            "dist.init(); t = ndl.Tensor([1.0, 2.0])\n"
            "assert dist.world_size() == 1 and dist.all_reduce(t, 'sum').numpy().tolist() == [1.0, 2.0]\n"
            "print('alone', dist.rank(), dist.world_size())\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "alone 0 1"


def test_launcher_without_mpi4py_names_what_to_install(fresh_world, monkeypatch):
    monkeypatch.setenv("PMI_RANK", "0")
    monkeypatch.setitem(sys.modules, "mpi4py", None)  # import fails as if it were not installed
    with pytest.raises(dist.DistributedError) as info:
        dist.init()
    assert "pip install 'needle[distributed]'" in str(info.value)
    assert "mpi4py" in str(info.value)
    assert not dist.is_initialized()


def test_world_of_one_costs_nothing(fresh_world):
    """average_gradients leaves the gradient tensors alone (same objects, still pending in
    lazy mode: nothing realized, nothing copied); broadcast_parameters keeps the data."""
    np.random.seed(0)
    model = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
    weights = [p.realize_cached_data() for p in model.parameters()]
    dist.broadcast_parameters(model)
    assert all(p.realize_cached_data() is w for p, w in zip(model.parameters(), weights))
    with ndl.lazy(True):
        x = ndl.Tensor(np.random.randn(5, 4).astype(np.float32), requires_grad=False)
        model(x).sum().backward()
        grads = [p.grad for p in model.parameters()]
        pending = [ndl.autograd.is_pending(g._cached_data) for g in grads]
        dist.average_gradients(model.parameters())
        assert all(p.grad is g for p, g in zip(model.parameters(), grads))
        assert [ndl.autograd.is_pending(g._cached_data) for g in grads] == pending
    assert any(pending) or ndl.BACKEND == "np"


@pytest.mark.parametrize("op", ["sum", "mean", "max"])
def test_collectives_of_one(fresh_world, op):
    a = np.array([[1.0, -2.0], [3.5, 0.25]], dtype=np.float32)
    t = ndl.Tensor(a)
    out = dist.all_reduce(t, op)
    np.testing.assert_array_equal(out.numpy(), a)
    assert not out.requires_grad and out.dtype == "float32"
    np.testing.assert_array_equal(dist.broadcast(t, root=0).numpy(), a)


def test_bad_arguments(fresh_world):
    t = ndl.Tensor([1.0])
    with pytest.raises(ValueError, match="all_reduce: op must be one of"):
        dist.all_reduce(t, "min")
    with pytest.raises(TypeError, match="all_reduce: expected a needle Tensor"):
        dist.all_reduce(np.ones(2))
    with pytest.raises(ValueError, match=r"broadcast: root must be a rank in \[0, 1\)"):
        dist.broadcast(t, root=1)
    with pytest.raises(TypeError, match="average_gradients: expected a needle Tensor"):
        dist.average_gradients([np.ones(2)])
    with pytest.raises(TypeError, match="broadcast_parameters: expected a Module or a list"):
        dist.broadcast_parameters(3)


def test_sampler_defaults_to_the_world(fresh_world):
    ds = NDArrayDataset(np.arange(10, dtype=np.float32))
    sampler = DistributedSampler(ds, shuffle=True, seed=5)
    assert (sampler.num_replicas, sampler.rank) == (1, 0)
    np.testing.assert_array_equal(list(sampler), np.random.RandomState(5).permutation(10))
    (batch,) = next(iter(DataLoader(ds, 10, sampler=sampler)))
    np.testing.assert_array_equal(batch.numpy(), np.random.RandomState(5).permutation(10))


def test_mpiexec_path_finds_the_mpich_launcher():
    pytest.importorskip("mpi4py", reason="mpi4py is not installed (pip install 'needle[distributed]')")
    path = dist.mpiexec_path()
    assert path is not None and os.path.basename(path) == "mpiexec" and os.access(path, os.X_OK)
    version = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60)
    assert "HYDRA" in version.stdout  # MPICH's launcher, not Open MPI's
