"""The `gpu` fixture: the CUDA runtime on a real GPU when one is present, else on the
PyCUDA stand-in whose memory is host memory and whose kernels run in the CPU emulator
(fake_pycuda.py).  Test modules import `gpu` and `pytestmark` from here."""
import pytest

from needle import config

from . import fake_pycuda, harness


def real_gpu() -> bool:
    from needle.runtime import cuda as rt
    return rt.available()[0]


pytestmark = pytest.mark.skipif(not real_gpu() and not harness.have_compiler(),
                                reason="neither a GPU nor g++ for the emulator")


@pytest.fixture
def gpu(tmp_path, monkeypatch):
    from needle.runtime import cuda as rt
    monkeypatch.setattr(config, "CACHE_DIR", str(tmp_path / "cache"))
    if rt.available()[0]:  # a real GPU
        yield rt
        return
    saved, old = fake_pycuda.install(), dict(rt._state)
    rt._state.clear()
    rt.clear_schedule_cache()
    rt._modules.clear()
    try:
        yield rt
    finally:
        rt._state.clear()
        rt._state.update(old)
        rt.clear_schedule_cache()
        rt._modules.clear()
        rt.POOL.clear()
        fake_pycuda.uninstall(saved)
