"""Run a directory's tests in both execution modes: importing `execution_mode` into
a conftest.py makes every test there run once lazily and once eagerly."""
import pytest

import needle


@pytest.fixture(autouse=True, params=["lazy", "eager"])
def execution_mode(request):
    with needle.lazy(request.param == "lazy"):
        yield request.param
