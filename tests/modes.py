"""Run a directory's tests in both execution modes: importing `execution_mode` into
a conftest.py makes every test there run once lazily and once eagerly."""
import pytest

import needle


@pytest.fixture(autouse=True, params=["lazy", "eager"])
def execution_mode(request, monkeypatch):
    """Eager mode with a kernel per gradient op too (NEEDLE_EAGER_FUSED_BACKWARD=0): every
    op and its gradient checked in eager kernels as well as fused (the default eager
    backward() is the fused pass lazy mode checks; tests/test_eager_backward.py)."""
    monkeypatch.setattr(needle.config, "EAGER_FUSED_BACKWARD", False)
    with needle.lazy(request.param == "lazy"):
        yield request.param
