"""The peers of benchmarks/bench_training.py train (finite, falling losses) on small sizes,
and the benchmark's busy processes end with their block.  Skipped without torch / jax."""
import math
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                                "benchmarks"))
import training_peers as tp  # noqa: E402


@pytest.fixture
def small_language_models(monkeypatch):
    """The LSTM and Transformer language models at a few words (the others' sizes are fixed by their data)."""
    monkeypatch.setitem(tp.SPECS, "lstm", dict(tp.SPECS["lstm"], batch=2, seq=4, classes=50, embedding=8, hidden=8))
    monkeypatch.setitem(tp.SPECS, "transformer", dict(tp.SPECS["transformer"], batch=2, seq=6, classes=50, embedding=16,
                                                      hidden=16, layers=1, heads=2, dim_head=8))


def _check(model, step, inputs, n=4):
    """Finite losses that start in the ballpark of log(classes) and move: down, where no
    Dropout noise or carried state can hide the first steps' progress."""
    losses = [step(*inputs) for _ in range(n)]
    assert all(math.isfinite(v) for v in losses), losses
    assert 0.5 * math.log(tp.SPECS[model]["classes"]) < losses[0] < 3 * math.log(tp.SPECS[model]["classes"])
    if model in tp.LANGUAGE_MODELS:
        assert len(set(losses)) > 1, losses
    else:
        assert losses[-1] < losses[0], losses


@pytest.mark.parametrize("model", ["mlp", "mlpresnet", "cnn", "resnet9", "lstm", "transformer"])
def test_torch_peer_trains(model, small_language_models):
    pytest.importorskip("torch")
    _check(model, *tp.torch_case(model))


@pytest.mark.parametrize("model", ["mlp", "cnn", "lstm", "transformer"])
def test_jax_peer_trains(model, small_language_models):
    pytest.importorskip("jax")
    pytest.importorskip("optax")
    _check(model, *tp.jax_case(model))


def test_sgd_momentum_is_the_courses_rule():
    """lr (1 - m) with undampened momentum gives the course's u = m u + (1 - m) g, p -= lr u."""
    torch = pytest.importorskip("torch")
    p = torch.nn.Parameter(torch.tensor([1.0]))
    opt = tp.torch_optimizer([p], "resnet9")
    _, lr, m, _ = tp.SPECS["resnet9"]["opt"]
    u, ref = 0.0, 1.0
    for g in (1.0, -2.0, 0.5):
        p.grad = torch.tensor([g])
        opt.step()
        u = m * u + (1 - m) * g
        ref -= lr * u
        assert p.item() == pytest.approx(ref, rel=1e-6)


def test_background_load_ends_its_processes():
    import bench_training
    with bench_training.BackgroundLoad(2, seconds=60) as load:
        procs = list(load.procs)
        assert all(p.poll() is None for p in procs)
    assert all(p.poll() is not None for p in procs)
