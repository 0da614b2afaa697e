"""Data-parallel training under `mpiexec` (tests/distributed/worker.py is one rank),
checked against one process training on the whole batch; faults end every rank."""
import importlib.util
import os
import subprocess
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
WORKER = os.path.join(HERE, "worker.py")
TIMEOUT = 120  # a hang is a failure, not a stuck CI job

pytestmark = pytest.mark.skipif(importlib.util.find_spec("mpi4py") is None,
                                reason="mpi4py is not installed (pip install 'needle[distributed]')")


def mpiexec() -> str:
    """The MPICH wheel's launcher (needle.distributed.mpiexec_path finds it)."""
    from needle.distributed import mpiexec_path
    found = mpiexec_path()
    assert found, "mpi4py is installed but mpiexec is not: pip install mpich"
    return found


def rank_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "PMIX_", "OMPI_"))}
    env.update(NEEDLE_THREADS="1", OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", PYTHONPATH=ROOT, **extra)
    return env


def run_worker(scenario, outdir, ranks=None, dtype="float32", **extra_env):
    """Run the scenario on `ranks` ranks under mpiexec (None: one plain process)."""
    command = [sys.executable, WORKER, scenario, str(outdir), dtype]
    if ranks is not None:
        command = [mpiexec(), "-n", str(ranks)] + command
    proc = subprocess.run(command, cwd=ROOT, env=rank_env(**extra_env), capture_output=True, text=True,
                          timeout=TIMEOUT)
    return proc


def results(outdir, ranks):
    return [dict(np.load(os.path.join(outdir, f"rank{r}.npz"))) for r in range(ranks)]


def params(result):
    return {k: v for k, v in result.items() if k.startswith("param_")}


_reference_cache = {}


def reference(tmp_path_factory, scenario, dtype, **extra_env):
    """The scenario in one process without mpiexec: a world of one, the whole batch."""
    key = (scenario, dtype, tuple(sorted(extra_env.items())))
    if key not in _reference_cache:
        out = tmp_path_factory.mktemp(f"ref_{scenario}_{dtype}")
        proc = run_worker(scenario, out, None, dtype, **extra_env)
        assert proc.returncode == 0, proc.stderr
        (_reference_cache[key],) = results(out, 1)
        assert _reference_cache[key]["world_size"] == 1
    return _reference_cache[key]


MODES = {"lazy": {}, "eager": {"NEEDLE_LAZY": "0"}, "numpy backend": {"NEEDLE_BACKEND": "np"}}


@pytest.mark.parametrize("ranks,dtype,mode", [(2, "float32", "lazy"), (4, "float32", "lazy"),
                                              (4, "float64", "lazy"), (2, "float64", "eager"),
                                              (2, "float64", "numpy backend")])
def test_mlp_steps_match_one_process_on_the_whole_batch(tmp_path, tmp_path_factory, ranks, dtype, mode):
    """5 SGD steps on a fixed global batch of 64 split over the ranks give one process's
    losses and parameters: the same sums in another order, so float32 agrees to rounding
    (rtol 1e-5) and float64 to 1e-12; the ranks agree bit for bit (same reduced sums)."""
    proc = run_worker("mlp", tmp_path, ranks, dtype, **MODES[mode])
    assert proc.returncode == 0, proc.stderr
    ranks_out = results(tmp_path, ranks)
    single = reference(tmp_path_factory, "mlp", dtype, **MODES[mode])
    rtol, atol = (1e-5, 1e-6) if dtype == "float32" else (1e-12, 1e-14)
    for out in ranks_out:
        assert out["world_size"] == ranks
        assert list(out["collectives"]) == [1] * 5  # one Allreduce per average_gradients call
        np.testing.assert_allclose(out["losses"], single["losses"], rtol=rtol, atol=atol)
        assert len(params(out)) == 4
        for name, value in params(out).items():
            assert value.dtype == dtype
            np.testing.assert_allclose(value, single[name], rtol=rtol, atol=atol, err_msg=name)
            np.testing.assert_array_equal(value, params(ranks_out[0])[name], err_msg=name)
    assert single["losses"][-1] < single["losses"][0]  # the steps did train


def test_a_jitted_step_replays_the_all_reduce(tmp_path):
    """needle.jit captures backward, average_gradients and the update; a replay runs the
    all-reduce between the captured schedules and equals the plain step bit for bit."""
    proc = run_worker("mlp_jit", tmp_path, 2)
    assert proc.returncode == 0, proc.stderr
    for out in results(tmp_path, 2):
        assert int(out["replays"]) == 6
        np.testing.assert_array_equal(out["losses_jit"], out["losses_plain"])
        for key in [k for k in out if k.startswith("plain_")]:
            np.testing.assert_array_equal(out[key.replace("plain_", "jit_", 1)], out[key], err_msg=key)


def test_batchnorm_running_statistics_are_per_rank(tmp_path):
    """Gradients are averaged, BatchNorm's running statistics are not: after one step each
    rank's running mean/var follow from its own shard (as in PyTorch DDP without
    SyncBatchNorm), computed here in numpy from the broadcast initial weights."""
    ranks, dtype = 2, "float64"
    proc = run_worker("batchnorm", tmp_path, ranks, dtype)
    assert proc.returncode == 0, proc.stderr
    outs = results(tmp_path, ranks)
    sys.path.insert(0, HERE)
    from worker import global_batch
    X, _ = global_batch(dtype)
    W, b = outs[0]["initial_param_modules.0.weight"], outs[0]["initial_param_modules.0.bias"]
    momentum = 0.1
    for r, out in enumerate(outs):
        hidden = X[r::ranks] @ W + b.reshape(1, -1)  # DistributedSampler: rank r takes rows r, r+R, ...
        np.testing.assert_allclose(out["running_mean"], momentum * hidden.mean(0), rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(out["running_var"], (1 - momentum) + momentum * hidden.var(0),
                                   rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(out["running_mean_over_ranks"],
                                   np.mean([o["running_mean"] for o in outs], axis=0), rtol=1e-12)
        trained = {k: v for k, v in params(out).items() if "running" not in k}
        assert len(trained) == 6
        for name, value in trained.items():  # the trained parameters are still identical
            np.testing.assert_array_equal(value, params(outs[0])[name], err_msg=name)
    assert not np.allclose(outs[0]["running_mean"], outs[1]["running_mean"])


@pytest.mark.parametrize("scenario,message", [
    ("raise", "deliberate failure on rank 1"),
    ("exit", "rank 0 failed (SystemExit: 2)"),
    ("raise_before_init", "deliberate failure on rank 1 before init"),
])
def test_a_failing_rank_ends_every_rank(tmp_path, scenario, message):
    """One rank raises (before or after init, or exits inside abort_on_error) while the
    other waits in MPI_Init or a collective: every rank ends, non-zero, instead of
    hanging until the timeout."""
    proc = run_worker(scenario, tmp_path, 2)
    assert proc.returncode != 0
    assert message in proc.stderr, proc.stderr
    assert not any(name.endswith(".npz") for name in os.listdir(tmp_path))  # no rank finished


def test_mismatched_models_fail_clearly_at_broadcast_parameters(tmp_path):
    proc = run_worker("mismatch", tmp_path, 2)
    assert proc.returncode != 0
    assert "DistributedError: broadcast_parameters: ranks disagree" in proc.stderr, proc.stderr
    assert "'modules.0.weight' of shape (20, 32)" in proc.stderr and "(20, 33)" in proc.stderr
