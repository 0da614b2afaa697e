"""Two Python threads building and realizing lazy graphs on cpu() at the same time
get the same values as numpy: identical graphs (so both compile the same new
kernel at once), different graphs, and whole training steps.  (tests/runtime/
test_threads.py covers the kernels' own threads, config.THREADS.)"""
import json
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

import needle as ndl
from needle import nn, optim
from needle.runtime import jit

CPU = ndl.cpu()
ROUNDS = 12
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(autouse=True, scope="module")
def _jit_started():
    """The JIT engine exists before the threads start: its first use from two threads
    at once is a known race, tested on its own below (in fresh processes)."""
    jit._init()


def in_two_threads(work, *args_per_thread):
    """Run work(*args) in two threads that start together; re-raise their errors."""
    barrier = threading.Barrier(len(args_per_thread))
    errors, results = [], [None] * len(args_per_thread)

    def body(k, args):
        try:
            barrier.wait()
            results[k] = work(*args)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=body, args=(k, a)) for k, a in enumerate(args_per_thread)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    if errors:
        raise errors[0]
    return results


def softmax_chain(x: np.ndarray, w: np.ndarray):
    """A graph with an elementwise chain, a fused reduction and a matmul epilogue."""
    t, m = ndl.Tensor(x, device=CPU), ndl.Tensor(w, device=CPU)
    rows = ndl.ops.tanh(t).sum(axes=(1,), keepdims=True).broadcast_to((x.shape[0], w.shape[1]))
    z = ndl.ops.relu(t @ m) * 0.75 + rows
    e = ndl.ops.exp(z - ndl.ops.max(z, axes=(1,), keepdims=True).broadcast_to(z.shape))
    return (e / e.sum(axes=(1,), keepdims=True).broadcast_to(z.shape)).numpy()


def softmax_chain_numpy(x, w):
    x, w = x.astype(np.float64), w.astype(np.float64)
    z = np.maximum(x @ w, 0) * 0.75 + np.tanh(x).sum(1, keepdims=True)
    e = np.exp(z - z.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


def test_identical_graphs_race_to_compile_the_same_new_kernels():
    for r in range(ROUNDS):
        n, k = 3 + r, 17 + 2 * r  # new shapes every round: new kernels, compiled by both threads at once
        data = [(np.random.RandomState(seed).randn(n, k).astype(np.float32),
                 np.random.RandomState(seed + 100).randn(k, 5).astype(np.float32)) for seed in (r, r + 50)]
        got = in_two_threads(softmax_chain, *data)
        for g, (x, w) in zip(got, data):
            np.testing.assert_allclose(g, softmax_chain_numpy(x, w), rtol=1e-4, atol=1e-6)


def reductions(x: np.ndarray):
    t = ndl.Tensor(x, device=CPU)
    return (ndl.ops.logsumexp(t, axes=(0,)).numpy(), ndl.ops.summation(ndl.ops.flip(t, (1,))[::2] ** 2).numpy())


def test_different_graphs_at_once():
    def work(kind, seed):
        rng = np.random.RandomState(seed)
        out = []
        for i in range(40):
            if kind == "softmax":
                x, w = rng.randn(6, 9 + i % 4).astype(np.float32), rng.randn(9 + i % 4, 7).astype(np.float32)
                out.append((softmax_chain(x, w), softmax_chain_numpy(x, w)))
            else:
                x = rng.randn(5 + i % 3, 8).astype(np.float32)
                x64 = x.astype(np.float64)
                got = reductions(x)
                m = x64.max(0)
                want = (np.log(np.exp(x64 - m).sum(0)) + m, (np.flip(x64, 1)[::2] ** 2).sum())
                out.extend(zip(got, want))
        return out

    for pairs in in_two_threads(work, ("softmax", 1), ("reductions", 2)):
        for got, want in pairs:
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def train(seed: int, steps: int = 30) -> list:
    """A few training steps (Linear, BatchNorm, ReLU, SoftmaxLoss, SGD with momentum):
    the losses, which only depend on the seed."""
    rng = np.random.RandomState(seed)
    X = rng.randn(32, 8).astype(np.float32)
    y = X[:, :4].argmax(1).astype(np.float32)
    model = nn.Sequential(nn.Linear(8, 16, device=CPU), nn.BatchNorm1d(16, device=CPU), nn.ReLU(),
                          nn.Linear(16, 4, device=CPU))
    for p, w in zip(model.parameters(), _weights(seed, model)):
        p.data = ndl.Tensor(w, device=CPU, requires_grad=False)
    opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    losses = []
    for step in range(steps):
        i = (step * 8) % 32
        opt.reset_grad()
        loss = nn.SoftmaxLoss()(model(ndl.Tensor(X[i:i + 8], device=CPU, requires_grad=False)),
                                ndl.Tensor(y[i:i + 8], device=CPU, requires_grad=False))
        loss.backward()
        opt.step()
        losses.append(float(loss.numpy()))
    return losses


def _weights(seed, model):
    rng = np.random.RandomState(seed + 7)
    return [(rng.randn(*p.shape) * 0.3).astype(np.float32) for p in model.parameters()]


@pytest.mark.parametrize("seeds", [(3, 4), (5, 5)], ids=["different_models", "same_model"])
def test_training_in_two_threads_matches_one_thread(seeds):
    alone = [train(s) for s in seeds]
    together = in_two_threads(train, *[(s,) for s in seeds])
    for a, t in zip(alone, together):
        np.testing.assert_allclose(t, a, rtol=1e-5, atol=1e-6)


FIRST_USE = r"""
import json, threading, numpy as np
import needle as ndl
out, errors = {}, []
def work(k):
    try:
        x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4) * (k + 1)
        y = ndl.ops.tanh(ndl.Tensor(x)) * 2.0 + ndl.Tensor(x).sum(axes=(1,), keepdims=True).broadcast_to((3, 4))
        out[k] = bool(np.allclose(y.numpy(), np.tanh(x.astype(np.float64)) * 2 + x.sum(1, keepdims=True), atol=1e-5))
    except Exception as e:
        errors.append(repr(e))
threads = [threading.Thread(target=work, args=(k,)) for k in range(2)]
[t.start() for t in threads]
[t.join() for t in threads]
print(json.dumps({"ok": out, "errors": errors}))
"""


def test_first_use_of_the_jit_from_two_threads():
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), NEEDLE_CACHE="0")
    for _ in range(4):
        done = subprocess.run([sys.executable, "-c", FIRST_USE], env=env, cwd=ROOT, capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
        result = json.loads(done.stdout.strip().splitlines()[-1])
        assert not result["errors"] and all(result["ok"].values()) and len(result["ok"]) == 2, result


def test_threaded_kernels_launched_from_two_python_threads(monkeypatch):
    """Two Python threads each lead their own GOMP team (runtime/cpu.py `_Workers`):
    launching threaded kernels of one schedule (one thread has its argument tables,
    the other a copy) and of a matmul at the same time gives numpy's values."""
    from needle import config
    from needle.runtime import cpu_threads as cpu_runtime
    if jit.gomp() is None:
        pytest.skip("no libgomp")
    monkeypatch.setattr(config, "THREADS", 2)
    n = 4 * cpu_runtime.MIN_WORK_PER_THREAD

    def work(seed):
        rng = np.random.RandomState(seed)
        out = []
        for _ in range(15):
            x = rng.uniform(-3, 3, n).astype(np.float32)
            a, b = rng.randn(96, 160).astype(np.float32), rng.randn(160, 128).astype(np.float32)
            got_exp = ndl.ops.exp(ndl.Tensor(x, device=CPU)).numpy()
            got_mm = (ndl.Tensor(a, device=CPU) @ ndl.Tensor(b, device=CPU)).numpy()
            a64, b64 = a.astype(np.float64), b.astype(np.float64)
            # a float32 dot product of 160 terms is within 160 u of the sum of |terms|
            bound = 160 * 2.0 ** -24 * (np.abs(a64) @ np.abs(b64))
            out.append((got_exp, np.exp(x.astype(np.float64)), got_mm, a64 @ b64, bound))
        return out

    for results in in_two_threads(work, (1,), (2,)):
        for got_exp, want_exp, got_mm, want_mm, bound in results:
            np.testing.assert_allclose(got_exp, want_exp, rtol=2e-7)
            assert np.all(np.abs(got_mm - want_mm) <= bound)
