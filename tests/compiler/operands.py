"""What the matmul tests build their graphs from: random float32 operands, realized
(no gradient), their float64 values for references, and lazy mode for the test."""
import numpy as np
import pytest

import needle as ndl


@pytest.fixture(autouse=True)
def lazy():
    with ndl.lazy():
        yield


def tensor(*shape):
    return ndl.Tensor(np.random.randn(*shape).astype(np.float32), requires_grad=False)


def f64(t):
    return t.numpy().astype(np.float64)
