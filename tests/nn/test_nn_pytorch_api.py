"""The everyday PyTorch-shaped module API: no_grad evaluation, Module.to(device),
Sequential indexing / iteration / len, named_modules, reprs with sizes, and Conv's
integer kernel size."""
import numpy as np
import pytest

import needle as ndl
import needle.nn as nn
from needle.errors import ArgumentError, IndexingError


def mlp():
    return nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Residual(nn.Sequential(nn.Linear(5, 5), nn.BatchNorm1d(5))),
                         nn.Dropout(0.25), nn.Linear(5, 3, bias=False))


def test_eval_under_no_grad_builds_no_graph():
    model = mlp().eval()
    x = ndl.Tensor(np.random.randn(4, 6).astype(np.float32), requires_grad=False)
    with_graph = model(x)
    with ndl.no_grad():
        out = model(x)
    assert with_graph.op is not None and with_graph.requires_grad
    assert out.op is None and not out.requires_grad
    np.testing.assert_allclose(out.numpy(), with_graph.numpy(), rtol=1e-6)


def test_sequential_indexes_iterates_and_has_len():
    model = mlp()
    assert len(model) == 5
    assert list(model) == list(model.modules)
    assert model[0] is model.modules[0] and model[-1] is model.modules[4]
    head = model[:2]
    assert isinstance(head, nn.Sequential) and list(head) == list(model.modules[:2])
    x = ndl.Tensor(np.random.randn(2, 6).astype(np.float32))
    np.testing.assert_allclose(head(x).numpy(), np.maximum(x.numpy() @ model[0].weight.numpy()
                                                            + model[0].bias.numpy(), 0), rtol=1e-5, atol=1e-6)
    with pytest.raises(IndexingError, match="Sequential"):
        model[5]


def test_named_modules_and_parameters_use_dotted_names():
    model = mlp()
    names = [n for n, _ in model.named_modules()]
    assert names == ["", "modules.0", "modules.1", "modules.2", "modules.2.fn", "modules.2.fn.modules.0",
                     "modules.2.fn.modules.1", "modules.3", "modules.4"]
    assert dict(model.named_modules())["modules.2.fn.modules.1"] is model[2].fn[1]
    params = dict(model.named_parameters())
    assert params["modules.4.weight"] is model[4].weight and "modules.4.bias" not in params
    assert [n for n, _ in model[2].named_children()] == ["fn"]


def test_reprs_show_sizes():
    assert repr(nn.Linear(784, 256)) == "Linear(in_features=784, out_features=256, bias=True)"
    assert repr(nn.Linear(3, 2, bias=False)) == "Linear(in_features=3, out_features=2, bias=False)"
    assert repr(nn.Conv(3, 16, 3, stride=2)) == "Conv(3, 16, kernel_size=3, stride=2, bias=True)"
    assert repr(nn.BatchNorm1d(8)) == "BatchNorm1d(8, eps=1e-05, momentum=0.1)"
    assert repr(nn.LayerNorm1d(8)) == "LayerNorm1d(8, eps=1e-05)"
    assert repr(nn.Dropout(0.1)) == "Dropout(p=0.1)"
    assert repr(nn.Embedding(10, 4)) == "Embedding(10, 4)"
    assert repr(nn.ReLU()) == "ReLU()"
    text = repr(mlp())
    assert text.startswith("Sequential(\n  (0): Linear(in_features=6, out_features=5, bias=True)\n  (1): ReLU()\n")
    assert "    (fn): Sequential(\n      (0): Linear(in_features=5, out_features=5, bias=True)" in text


def test_conv_keeps_integer_kernel_sizes():
    with pytest.raises(ArgumentError, match=r"kernel_size must be one integer.*\(3, 5\)"):
        nn.Conv(3, 4, (3, 5))
    with pytest.raises(ArgumentError, match="stride"):
        nn.Conv(3, 4, 3, stride=(1, 2))
    conv = nn.Conv(3, 4, (3, 3), stride=(2, 2))  # a square pair is the integer
    assert conv.kernel_size == 3 and conv.stride == 2 and conv.weight.shape == (3, 3, 3, 4)


def test_module_to_moves_parameters_and_buffers_in_place():
    model = mlp()
    weight = model[0].weight
    before = {n: t.numpy() for n, t in model.state_dict().items()}
    assert model.to(ndl.cpu_numpy()) is model
    assert model[0].weight is weight  # identity kept (an optimizer keeps working)
    for name, t in model.state_dict().items():
        assert t.device == ndl.cpu_numpy(), name
        np.testing.assert_array_equal(t.numpy(), before[name])
    x = ndl.Tensor(np.random.randn(2, 6).astype(np.float32), device=ndl.cpu_numpy())
    assert model(x).device == ndl.cpu_numpy()
    model.to(ndl.cpu())
    assert model[2].fn[1].running_var.device == ndl.cpu()


def test_embedding_gathers_rows_with_gradient_per_id():
    emb = nn.Embedding(6, 3)
    ids = ndl.Tensor(np.array([[5, 0], [5, 2]], dtype=np.float32), requires_grad=False)
    out = emb(ids)
    np.testing.assert_array_equal(out.numpy(), emb.weight.numpy()[[[5, 0], [5, 2]]])
    out.backward(ndl.Tensor(np.ones((2, 2, 3), np.float32), requires_grad=False))
    expected = np.zeros((6, 3), np.float32)
    np.add.at(expected, np.array([5, 0, 5, 2]), 1.0)
    np.testing.assert_array_equal(emb.weight.grad.numpy(), expected)
