"""Module.state_dict / load_state_dict and needle.save / needle.load."""
import io
import os

import numpy as np
import pytest

import needle as ndl
import needle.nn as nn
from needle.errors import DataError, NeedleError, ShapeError
from nn_helpers import tensor


def small_model():
    return nn.Sequential(nn.Linear(4, 5), nn.BatchNorm1d(5), nn.ReLU(), nn.Linear(5, 3))


def trained_model():
    """A model whose running statistics have moved away from their initial values."""
    model = small_model()
    for _ in range(3):
        model(tensor(np.random.randn(6, 4) * 2 + 1))
    return model


def outputs(model, x):
    model.eval()
    return model(tensor(x)).numpy()


# ---- state_dict ---------------------------------------------------------------------------
def test_state_dict_names_shapes_and_buffers():
    state = small_model().state_dict()
    assert list(state) == ["modules.0.weight", "modules.0.bias", "modules.1.weight", "modules.1.bias",
                           "modules.1.running_mean", "modules.1.running_var", "modules.3.weight",
                           "modules.3.bias"]
    assert state["modules.0.weight"].shape == (4, 5) and state["modules.1.running_var"].shape == (5,)
    assert all(not t.requires_grad for t in state.values())


def test_load_state_dict_gives_identical_outputs_and_keeps_parameter_identity():
    source, target = trained_model(), small_model()
    params = target.parameters()
    target.load_state_dict(source.state_dict())
    assert all(a is b for a, b in zip(params, target.parameters()))
    x = np.random.randn(3, 4)
    np.testing.assert_array_equal(outputs(target, x), outputs(source, x))
    np.testing.assert_array_equal(target.modules[1].running_mean.numpy(), source.modules[1].running_mean.numpy())


def test_state_dict_is_a_snapshot():
    model = small_model()
    state = model.state_dict()
    before = state["modules.0.weight"].numpy()
    model.modules[0].weight.data = model.modules[0].weight.data * 0.0
    np.testing.assert_array_equal(state["modules.0.weight"].numpy(), before)


def test_load_state_dict_accepts_numpy_arrays_and_casts():
    layer = nn.Linear(2, 3)
    w, b = np.arange(6.0).reshape(2, 3), np.ones((1, 3))  # float64 into a float32 layer
    layer.load_state_dict({"weight": w, "bias": b})
    assert layer.weight.dtype == "float32"
    np.testing.assert_array_equal(layer.weight.numpy(), w)
    np.testing.assert_array_equal(layer(tensor([[1.0, 1.0]])).numpy(), [[4.0, 6.0, 8.0]])


def test_load_state_dict_missing_and_unexpected_keys_are_named():
    model = small_model()
    state = model.state_dict()
    del state["modules.1.running_var"]
    with pytest.raises(NeedleError, match="modules.1.running_var") as info:
        model.load_state_dict(state)
    assert isinstance(info.value, KeyError)
    state = model.state_dict()
    state["modules.9.weight"] = state["modules.0.weight"]
    with pytest.raises(KeyError, match="unexpected.*modules.9.weight"):
        model.load_state_dict(state)
    model.load_state_dict(state, strict=False)  # ignores the extra key


def test_load_state_dict_shape_mismatch_leaves_module_unchanged():
    model = small_model()
    before = [p.numpy() for p in model.parameters()]
    state = {k: v.numpy() + 1.0 for k, v in model.state_dict().items()}
    state["modules.3.bias"] = np.zeros((1, 4))
    with pytest.raises(ShapeError, match=r"modules\.3\.bias.*\(1, 4\).*\(1, 3\)"):
        model.load_state_dict(state)
    for p, old in zip(model.parameters(), before):
        np.testing.assert_array_equal(p.numpy(), old)


# ---- save / load --------------------------------------------------------------------------
def test_save_load_model_state_round_trip(tmp_path):
    source, target = trained_model(), small_model()
    path = tmp_path / "model.ndl"
    ndl.save(source.state_dict(), path)
    assert os.listdir(tmp_path) == ["model.ndl"]  # no ".npz" appended, no temp files left
    target.load_state_dict(ndl.load(path))
    x = np.random.randn(4, 4)
    np.testing.assert_array_equal(outputs(target, x), outputs(source, x))


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "uint8", "bool"])
def test_save_load_tensor_keeps_dtype_and_values(tmp_path, dtype):
    values = (np.random.randn(3, 2) * 5).astype(dtype)
    t = ndl.Tensor(values, dtype=dtype, requires_grad=False)
    ndl.save(t, str(tmp_path / "t"))
    back = ndl.load(str(tmp_path / "t"))
    assert isinstance(back, ndl.Tensor) and back.dtype == dtype and back.shape == (3, 2)
    np.testing.assert_array_equal(back.numpy(), values)


def test_save_load_nested_structures(tmp_path):
    obj = {
        "epoch": 3, "lr": 0.1, "name": "run-1", "none": None, "flag": True, "big": 2 ** 70,
        "special": [float("inf"), -0.0],
        "weights": [ndl.Tensor(np.ones((2, 2))), (ndl.Tensor(np.arange(3.0), dtype="float64"), "x")],
        "array": np.arange(4, dtype=np.int64), "scalar": np.float32(1.5), 7: {"inner": [1, 2]},
    }
    ndl.save(obj, tmp_path / "obj")
    back = ndl.load(tmp_path / "obj")
    assert set(back) == set(obj)
    for key in ("epoch", "lr", "name", "none", "flag", "big"):
        assert back[key] == obj[key] and type(back[key]) is type(obj[key])
    assert back["special"][0] == float("inf") and str(back["special"][1]) == "-0.0"
    assert isinstance(back["weights"][1], tuple) and back["weights"][1][1] == "x"
    np.testing.assert_array_equal(back["weights"][0].numpy(), np.ones((2, 2)))
    assert back["weights"][1][0].dtype == "float64"
    assert back["array"].dtype == np.int64 and back["scalar"].dtype == np.float32 and back["scalar"] == 1.5
    assert back[7] == {"inner": [1, 2]}


def test_save_load_file_objects_and_device():
    buffer = io.BytesIO()
    ndl.save({"w": ndl.Tensor([1.0, 2.0], device=ndl.cpu_numpy())}, buffer)
    buffer.seek(0)
    back = ndl.load(buffer)
    if ndl.BACKEND == "nd":  # the numpy backend has no separate devices
        assert back["w"].device == ndl.cpu_numpy()
    buffer.seek(0)
    assert ndl.load(buffer, device=ndl.cpu())["w"].device == ndl.cpu()


def test_save_rejects_unsupported_objects(tmp_path):
    with pytest.raises(TypeError, match="Linear"):
        ndl.save({"model": nn.Linear(2, 2)}, tmp_path / "m")


def test_load_missing_file_names_it(tmp_path):
    path = tmp_path / "nope.ndl"
    with pytest.raises(DataError, match="nope.ndl"):
        ndl.load(path)


def test_load_truncated_or_corrupt_file_names_it(tmp_path):
    good = tmp_path / "good"
    ndl.save(small_model().state_dict(), good)
    data = good.read_bytes()
    for name, content in [("truncated", data[: len(data) // 2]), ("empty", b""),
                          ("garbage", b"not a needle file at all" * 10), ("tail", data[:-30])]:
        path = tmp_path / name
        path.write_bytes(content)
        with pytest.raises(DataError, match=name):
            ndl.load(path)


def test_load_foreign_npz_is_rejected(tmp_path):
    path = tmp_path / "foreign.npz"
    with open(path, "wb") as f:
        np.savez(f, x=np.ones(3))
    with pytest.raises(DataError, match="foreign.npz"):
        ndl.load(path)
