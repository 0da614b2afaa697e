"""A long lazy training loop does not grow: 2,000 steps of a small MLP with
BatchNorm, trained by SGD with momentum, keep the number of live tensors, the
buffer pool (its allocations and idle bytes), the compiled schedules and the
process's resident memory flat after warm-up; every step reuses the pooled
temporaries of the one cached schedule."""
import gc
import resource

import numpy as np

import needle as ndl
import needle.autograd as autograd
import needle.runtime as rt
from needle import nn, optim
from needle.engine import schedule_cache
from needle.runtime.pool import POOL

STEPS, WARMUP = 2000, 200


def rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * resource.getpagesize()
    except OSError:  # not Linux: the peak is the best there is
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def snapshot() -> dict:
    gc.collect()
    return {"tensors": autograd.TENSOR_COUNTER, "pool_allocations": POOL.allocations,
            "pool_idle": POOL.idle_bytes, "schedules": len(schedule_cache.CACHES['cpu'].entries),
            "kernels_compiled": rt.stats()["kernels_compiled"], "rss": rss_bytes()}


def test_two_thousand_lazy_steps_keep_memory_flat():
    rng = np.random.RandomState(0)
    X = rng.randn(64, 16).astype(np.float32)
    y = X[:, :10].argmax(1).astype(np.float32)
    with ndl.lazy(True):
        model = nn.Sequential(nn.Linear(16, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Linear(32, 10))
        opt = optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        loss_fn = nn.SoftmaxLoss()
        losses, marks = [], {}
        for step in range(STEPS):
            i = (step * 8) % 64
            xb = ndl.Tensor(X[i:i + 8], requires_grad=False)
            yb = ndl.Tensor(y[i:i + 8], requires_grad=False)
            opt.reset_grad()
            loss = loss_fn(model(xb), yb)
            loss.backward()
            opt.step()
            if step % 100 == 0:
                losses.append(float(loss.numpy()))
            if step == WARMUP:
                marks["warm"] = snapshot()
        marks["end"] = snapshot()
    warm, end = marks["warm"], marks["end"]
    # live tensors: the model, the optimizer state and this step's loss; nothing per step
    assert end["tensors"] <= warm["tensors"], (warm, end)
    # temporaries come from the pool: one set, reused by every step
    assert end["pool_allocations"] == warm["pool_allocations"], (warm, end)
    assert end["pool_idle"] == warm["pool_idle"], (warm, end)
    # one training step is one cached schedule; nothing new to compile
    assert end["schedules"] == warm["schedules"] and end["kernels_compiled"] == warm["kernels_compiled"]
    # resident memory: allocator noise only (1,800 steps leaking even 10 KB each would show)
    assert end["rss"] - warm["rss"] < 16 * 2 ** 20, (warm["rss"], end["rss"])
    # and it learned
    assert losses[-1] < 0.2 * losses[0], losses


def test_a_cached_schedule_keeps_no_kernel_statements():
    """Once compiled, a schedule's kernels drop their statement trees (every full
    garbage collection would walk them); running the schedule again, and dumping the
    kernels of a graph, still work."""
    from needle.codegen import kernel_ir as K
    rng = np.random.default_rng(1)
    with ndl.lazy(True):
        x = ndl.Tensor(rng.standard_normal((8, 5)).astype(np.float32), requires_grad=False)
        w = ndl.Tensor(rng.standard_normal((5, 3)).astype(np.float32), requires_grad=False)
        y = ndl.ops.exp(x @ w).sum((1,))
        text = ndl.ir.dump(y, stage="kernels")
        first = y.numpy()
    entry, _ = next(reversed(schedule_cache.CACHES["cpu"].entries.entries.values()))  # y's, used last
    kernels = [c.kernel for c in entry.schedule.calls]
    assert kernels and all(isinstance(k, K.Kernel) and k.body is None for k in kernels)
    assert "statements released" in kernels[0].text()
    assert "exp(" in text  # the dump plans afresh: statements and all
    expected = np.exp(x.numpy().astype(np.float64) @ w.numpy().astype(np.float64)).sum(1)
    with ndl.lazy(True):
        again = ndl.ops.exp(x @ w).sum((1,)).numpy()  # the cached schedule, run again
    for got in (first, again):
        np.testing.assert_allclose(got, expected, rtol=1e-5)
