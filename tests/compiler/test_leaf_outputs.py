"""An output that folds to a leaf (a constant, a run-time scalar, a view of a
realized buffer) is written by a copy: regression for outputs that had no kernel and
came back as uninitialized memory."""
import numpy as np
import pytest

import needle as ndl
from needle.engine.realize import realize_nodes
from needle.ir import build
from needle.ir.lazy import as_lazy
from needle.ir.nodes import RuntimeScalar


@pytest.mark.parametrize("make", [
    lambda: build.const(0.3, (2, 3), "float32", ndl.cpu()),
    lambda: build.param(0.3, (2, 3), "float32", ndl.cpu()),
    lambda: build.param(RuntimeScalar(lambda: 0.3), (2, 3), "float32", ndl.cpu()),
], ids=["const", "param", "runtime scalar"])
@pytest.mark.parametrize("view", [None, "reshape", "broadcast", "permute"])
@pytest.mark.parametrize("alongside", [False, True])
def test_a_scalar_output_is_written(make, view, alongside):
    node = make()
    want = np.full((2, 3), 0.3, np.float32)
    if view == "reshape":
        node, want = node.reshape((3, 2)), want.reshape(3, 2)
    elif view == "broadcast":
        node, want = node.reshape((1, 2, 3)).broadcast_to((4, 2, 3)), np.broadcast_to(want, (4, 2, 3))
    elif view == "permute":
        node, want = node.permute((1, 0)), want.T
    outputs = [node]
    if alongside:  # with another output that reads it
        x = ndl.backend_ndarray.array(np.ones(want.shape, np.float32), device=ndl.cpu())
        outputs = [as_lazy(x) * node, node]
    realize_nodes(outputs)
    np.testing.assert_array_equal(node.arg.numpy(), want)
    if alongside:
        np.testing.assert_array_equal(outputs[0].arg.numpy(), want)


@pytest.mark.parametrize("view,expect", [
    (lambda b: b.reshape((3, 2)), lambda a: a.reshape(3, 2)),
    (lambda b: b.permute((1, 0)), lambda a: a.T),
    (lambda b: b.broadcast_to((2, 2, 3)), lambda a: np.broadcast_to(a, (2, 2, 3))),
    (lambda b: b[1:2], lambda a: a[1:2]),
], ids=["reshape", "permute", "broadcast", "slice"])
def test_a_view_of_a_realized_buffer_is_written(view, expect):
    base = np.arange(6, dtype=np.float32).reshape(2, 3)
    node = view(as_lazy(ndl.backend_ndarray.array(base, device=ndl.cpu())))
    realize_nodes([node])
    np.testing.assert_array_equal(node.arg.numpy(), expect(base))
