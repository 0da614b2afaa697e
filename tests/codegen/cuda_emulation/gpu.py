"""The `gpu` fixture: the CUDA runtime on a real GPU when one is present, else on the
PyCUDA stand-in whose memory is host memory and whose kernels run in the CPU emulator
(fake_pycuda.py).  Test modules import `gpu` and `pytestmark` from here; `cuda_runtime`
is the same as a context manager (the fuzzer holds it for a whole hypothesis test)."""
import contextlib

import pytest

from needle import config
from needle.engine import schedule_cache

from . import fake_pycuda, harness


def real_gpu() -> bool:
    from needle.runtime import cuda as rt
    return rt.available()[0]


pytestmark = pytest.mark.skipif(not real_gpu() and not harness.have_compiler(),
                                reason="neither a GPU nor g++ for the emulator")


@contextlib.contextmanager
def cuda_runtime():
    """needle.runtime.cuda, on the real GPU or on the emulator (installed for the block,
    with empty schedule and module caches, and everything put back afterwards)."""
    from needle.runtime import cuda as rt
    if rt.available()[0]:  # a real GPU
        yield rt
        return
    saved, old = fake_pycuda.install(), dict(rt._state)
    rt._state.clear()
    schedule_cache.clear()
    rt._modules.clear()
    try:
        yield rt
    finally:
        rt._state.clear()
        rt._state.update(old)
        schedule_cache.clear()
        rt._modules.clear()
        rt.POOL.clear()
        fake_pycuda.uninstall(saved)


@pytest.fixture
def gpu(tmp_path, monkeypatch):
    monkeypatch.setattr(config, "CACHE_DIR", str(tmp_path / "cache"))
    with cuda_runtime() as rt:
        yield rt
