"""The CUDA runtime (needle.runtime.cuda, CUDADevice) end to end: on a real GPU when
one is available (scripts/gpu_check.sh), else on a PyCUDA stand-in whose memory is
host memory and whose kernels run in the CPU emulator (cuda_emulation/fake_pycuda.py):
what a GPU run does, minus the GPU.  Results are compared with the same program on
cpu()."""
import sys
import types

import numpy as np
import pytest

import needle as ndl
from needle import config, nn, optim
from needle.engine import schedule_cache

from cuda_emulation import fake_pycuda
from cuda_emulation.gpu import gpu, pytestmark  # noqa: F401  (the fixture and its skip)


def test_device_is_enabled_and_tensors_move(gpu):
    cuda = ndl.cuda()
    assert cuda.enabled()
    x = np.random.randn(5, 7).astype(np.float32)
    t = ndl.Tensor(x, device=cuda)
    assert t.device == cuda and str(t.device) == "cuda()"
    np.testing.assert_array_equal(t.numpy(), x)
    back = t.to(ndl.cpu())
    assert back.device == ndl.cpu()
    np.testing.assert_array_equal(back.numpy(), x)
    assert "SMs" in gpu.describe()


def test_lazy_graph_matches_cpu_and_is_cached(gpu):
    import needle.runtime as runtime
    x = np.random.randn(37, 300).astype(np.float32)
    w = np.random.randn(300, 70).astype(np.float32)

    def program(device):
        a, b = ndl.Tensor(x, device=device), ndl.Tensor(w, device=device)
        h = ndl.ops.relu(a @ b * 0.37)
        return ndl.ops.logsumexp(h, axes=(1,)), ndl.ops.summation(a, axes=(0,))

    expected = [t.numpy() for t in program(ndl.cpu())]
    runtime.reset_stats()
    got = program(ndl.cuda())
    ndl.realize(*got)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g.numpy(), e, rtol=1e-4, atol=1e-4)
    stats = runtime.stats()
    assert stats["kernels_compiled"] >= 2 and stats["kernels_launched"] >= 2
    again = program(ndl.cuda())
    ndl.realize(*again)
    assert runtime.stats()["schedule_cache_hits"] >= 1
    schedule_cache.clear()
    gpu._modules.clear()  # a new process: the compiled module comes from the disk cache
    third = program(ndl.cuda())
    ndl.realize(*third)
    assert runtime.stats()["disk_cache_hits"] >= 2
    np.testing.assert_allclose(third[0].numpy(), expected[0], rtol=1e-4, atol=1e-4)


def test_eager_ndarray_ops_views_and_setitem(gpu):
    nd, cuda = ndl.nd, ndl.cuda()
    x = np.random.randn(6, 8).astype(np.float32)
    y = np.random.randn(8, 6).astype(np.float32)
    a, b = nd.array(x, device=cuda), nd.array(y, device=cuda)
    np.testing.assert_allclose((a + b.permute((1, 0))).numpy(), x + y.T, rtol=1e-6)
    np.testing.assert_allclose((a @ b).numpy(), x @ y, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(a.sum(axis=1).numpy(), x.sum(axis=1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(a[1:5:2, ::3].numpy(), x[1:5:2, ::3])
    np.testing.assert_allclose(b.permute((1, 0)).compact().numpy(), y.T)
    assert (a > 0).numpy().dtype == np.float32
    a[1:5:2, ::3] = nd.array(np.ones((2, 3)), device=cuda)
    x[1:5:2, ::3] = 1
    a[0] = 5.0
    x[0] = 5.0
    np.testing.assert_array_equal(a.numpy(), x)
    a[:, 1:] = a[:, :-1]  # overlapping source and destination
    x[:, 1:] = x[:, :-1].copy()
    np.testing.assert_array_equal(a.numpy(), x)
    a.flat[3] += 1.5
    x.flat[3] += 1.5
    np.testing.assert_array_equal(a.numpy(), x)
    ints = nd.array(np.arange(10), device=cuda, dtype="int32")
    ints[::2] = 7
    np.testing.assert_array_equal(ints.numpy(), np.where(np.arange(10) % 2 == 0, 7, np.arange(10)))
    np.testing.assert_array_equal(np.asarray(cuda.numpy_view(ints)), ints.numpy())
    np.testing.assert_array_equal(nd.full((3, 2), 2.5, device=cuda).numpy(), np.full((3, 2), 2.5, np.float32))


def test_training_steps_match_cpu(gpu):
    def train(device):
        np.random.seed(0)
        model = nn.Sequential(nn.Linear(20, 32, device=device), nn.ReLU(), nn.Linear(32, 10, device=device))
        opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        rng = np.random.RandomState(1)
        losses = []
        for _ in range(2):
            x = ndl.Tensor(rng.randn(16, 20).astype(np.float32), device=device, requires_grad=False)
            y = ndl.Tensor(rng.randint(0, 10, 16), device=device, requires_grad=False)
            loss = nn.SoftmaxLoss()(model(x), y)
            opt.reset_grad()
            loss.backward()
            opt.step()
            losses.append(float(loss.numpy()))
        return losses, [p.numpy() for p in model.parameters()]

    cpu_losses, cpu_params = train(ndl.cpu())
    gpu_losses, gpu_params = train(ndl.cuda())
    np.testing.assert_allclose(gpu_losses, cpu_losses, rtol=1e-4, atol=1e-5)
    for g, c in zip(gpu_params, cpu_params):
        np.testing.assert_allclose(g, c, rtol=1e-4, atol=1e-5)


def test_debug_timing_and_bounds_checked_kernels(gpu, monkeypatch, capsys):
    monkeypatch.setattr(config, "DEBUG", 2)
    monkeypatch.setattr(config, "BOUNDS_CHECK", True)
    x = ndl.Tensor(np.random.randn(9, 40).astype(np.float32), device=ndl.cuda())
    y = ndl.ops.exp(x) / ndl.ops.broadcast_to(ndl.ops.summation(ndl.ops.exp(x), axes=(1,), keepdims=True), x.shape)
    np.testing.assert_allclose(y.numpy().sum(axis=1), np.ones(9), rtol=1e-5)
    out = capsys.readouterr().out
    assert "schedule:" in out and " us  grid " in out


@pytest.mark.parametrize("missing", ["pycuda", "driver", "gpu"])
def test_unavailable_names_the_missing_piece(missing, monkeypatch):
    from needle.errors import DeviceError
    from needle.runtime import cuda as rt
    saved = fake_pycuda.install()
    old = dict(rt._state)
    try:
        if missing == "pycuda":
            sys.modules["pycuda"] = None  # import fails
        elif missing == "driver":
            sys.modules["pycuda.driver"] = None
        else:
            sys.modules["pycuda.driver"].Device = types.SimpleNamespace(count=lambda: 0)
        rt._state.clear()
        ok, why = rt.available()
        assert not ok and not ndl.cuda().enabled()
        word = {"pycuda": "PyCUDA is not installed", "driver": "no NVIDIA driver", "gpu": "no NVIDIA GPU"}[missing]
        assert word in why
        with pytest.raises(DeviceError, match=word):
            ndl.Tensor([1.0], device=ndl.cuda())
    finally:
        rt._state.clear()
        rt._state.update(old)
        fake_pycuda.uninstall(saved)


def test_conv_with_a_fused_epilogue_stores_in_bounds(gpu, monkeypatch):
    """Regression: the tiled matmul's epilogue indexed a reshaped root (conv's
    (N*H*W, O) result read as (N, H, W, O)) with the matmul's (row, col) and stored
    out of bounds; it now uses the same epilogue index as the CPU lowering."""
    monkeypatch.setattr(config, "BOUNDS_CHECK", True)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 8, 8, 16)).astype(np.float32)
    w = rng.standard_normal((3, 3, 16, 32)).astype(np.float32) * 0.1

    def program(device):
        y = ndl.ops.relu(ndl.ops.conv(ndl.Tensor(x, device=device), ndl.Tensor(w, device=device), padding=1))
        return y.numpy()

    with ndl.lazy(True):
        expected = program(ndl.cpu())
        np.testing.assert_allclose(program(ndl.cuda()), expected, rtol=1e-4, atol=1e-4)
