"""Bad input at every public entry point gets a clear needle error.

Each case must raise a `needle.errors.NeedleError` that is also the builtin
exception that fits (ValueError for shapes/axes/values, TypeError for dtypes and
kinds, IndexError for indices), *when the program is built* — in lazy mode as in
eager mode — with a message naming the op and the offending shapes or values.
Never a segfault, an LLVM error, or an IndexError/AttributeError from inside the
compiler.

"""
import gzip
import os
import struct
from dataclasses import dataclass, field

import numpy as np
import pytest

import needle as ndl
from needle import init, nn, ops, optim
from needle.data import DataLoader, MNISTDataset, NDArrayDataset
from needle.errors import (ArgumentError, AxisError, DataError, DeviceError, DTypeError, IndexingError, NeedleError,
                           ShapeError)

CPU, REF = ndl.cpu(), ndl.cpu_numpy()


def T(*shape, dtype="float32", device=CPU):
    return ndl.Tensor(np.arange(int(np.prod(shape)), dtype=dtype).reshape(shape), device=device, dtype=dtype)


@dataclass
class Case:
    name: str
    call: object                      # builds the program (never asks for data)
    error: type                       # the NeedleError subclass expected
    says: list = field(default_factory=list)   # regexes the message must contain (op, shapes)


def case(name, call, error, *says):
    return Case(name, call, error, list(says))


A23 = r"\(2, 3\)"
CASES = [
    # ---- Tensor construction -----------------------------------------------------------------------
    case("tensor_string", lambda: ndl.Tensor("abc"), DTypeError, "float32", "str"),
    case("tensor_ragged", lambda: ndl.Tensor([[1, 2], [3]]), DTypeError, "list"),
    case("tensor_objects", lambda: ndl.Tensor([object()]), DTypeError, "float32"),
    case("tensor_dict", lambda: ndl.Tensor({"a": 1}), DTypeError, "dict"),
    case("tensor_none", lambda: ndl.Tensor(None), DTypeError, "NoneType"),
    case("tensor_complex", lambda: ndl.Tensor(np.array([1 + 2j])), DTypeError, "complex"),
    case("tensor_none_in_list", lambda: ndl.Tensor([1.0, None]), DTypeError, "float32"),
    case("tensor_dtype_float16", lambda: ndl.Tensor([1.0], dtype="float16"), DTypeError, "float16"),
    case("tensor_dtype_unknown", lambda: ndl.Tensor([1.0], dtype="banana"), DTypeError, "banana"),
    case("tensor_device_string", lambda: ndl.Tensor([1.0], device="gpu"), DeviceError, "Tensor", "gpu"),
    case("tensor_device_number", lambda: ndl.Tensor([1.0], device=3), DeviceError, "Tensor"),
    case("to_device_string", lambda: T(2, 3).to("gpu"), DeviceError, "gpu"),
    case("astype_unknown", lambda: T(2, 3).astype("float16"), DTypeError, "float16"),
    case("data_setter_dtype", lambda: setattr(T(2, 3), "data", T(2, 3, dtype="float64")), DTypeError,
         "data", "float64"),
    case("tensor_len_0d", lambda: len(ndl.Tensor(1.0)), NeedleError, "len"),
    case("tensor_item_many", lambda: T(2, 3).item(), ShapeError, "item", A23),
    # ---- elementwise -------------------------------------------------------------------------------
    *[case(f"{name}_shapes", (lambda f: lambda: f(T(2, 3), T(3, 4)))(f), ShapeError, name, A23, r"\(3, 4\)")
      for name, f in [("add", lambda a, b: a + b), ("sub", lambda a, b: a - b), ("mul", lambda a, b: a * b),
                      ("div", lambda a, b: a / b), ("pow", lambda a, b: a ** b)]],
    case("add_dtypes", lambda: T(2, 3) + T(2, 3, dtype="float64"), DTypeError, "add", "float32", "float64", A23),
    case("add_devices", lambda: T(2, 3) + T(2, 3, device=REF), DeviceError, "cpu_numpy", A23),
    case("add_string", lambda: T(2, 3) + "x", DTypeError, "str"),
    case("add_none", lambda: T(2, 3) + None, DTypeError, "NoneType"),
    case("add_list_shape", lambda: T(2, 3) + [1.0, 2.0], ShapeError, "add", A23, r"\(2,\)"),
    case("add_scalar_string", lambda: ops.add_scalar(T(2, 3), "x"), DTypeError, "add_scalar", "str"),
    case("mul_scalar_none", lambda: ops.mul_scalar(T(2, 3), None), DTypeError, "mul_scalar", "NoneType"),
    case("power_scalar_complex", lambda: ops.power_scalar(T(2, 3), 2j), DTypeError, "power_scalar", "complex"),
    # an integer tensor and a fraction: NDArray cut the fraction (t * 2.5 was t * 2)
    case("int_mul_fraction", lambda: T(2, 3, dtype="int32") * 2.5, DTypeError, "mul_scalar", "int32", A23, "2.5"),
    case("int_add_fraction", lambda: T(2, 3, dtype="int32") + 0.5, DTypeError, "add_scalar", "int32", A23),
    case("int_rsub_fraction", lambda: 2.5 - T(2, 3, dtype="int32"), DTypeError, "add_scalar", "int32", A23),
    case("int_add_float_array", lambda: T(2, 3, dtype="int32") + np.array([1.5]), DTypeError, "int32", A23,
         "floating"),
    case("exp_int", lambda: ops.exp(T(3, dtype="int32")), DTypeError, "exp", "int32", r"\(3,\)"),
    case("log_int", lambda: ops.log(T(3, dtype="int64")), DTypeError, "log", "int64"),
    case("sigmoid_int", lambda: ops.sigmoid(T(3, dtype="int32")), DTypeError, "sigmoid", "int32", r"\(3,\)"),
    case("div_ints", lambda: T(3, dtype="int32") / T(3, dtype="int32"), DTypeError, "div", "int32"),
    case("sub_bools_int", lambda: ndl.Tensor([True]) - T(1, dtype="int32"), DTypeError, "int32"),
    case("mean_int", lambda: ops.mean(T(3, dtype="int32")), DTypeError, "mean", "int32"),
    # ---- reductions --------------------------------------------------------------------------------
    case("sum_axis_range", lambda: ops.summation(T(2, 3), axes=(2,)), AxisError, "summation", "2", A23),
    case("sum_axis_negative", lambda: ops.summation(T(2, 3), axes=-3), AxisError, "summation", "-3", A23),
    case("sum_axis_repeated", lambda: ops.summation(T(2, 3), axes=(0, 0)), AxisError, "summation", "repeated"),
    case("sum_axis_string", lambda: ops.summation(T(2, 3), axes="0"), AxisError, "summation"),
    case("sum_axis_float", lambda: ops.summation(T(2, 3), axes=1.0), AxisError, "summation", "1.0"),
    case("mean_axis", lambda: ops.mean(T(2, 3), axes=5), AxisError, "mean", A23),
    case("max_axis", lambda: ops.max(T(2, 3), axes=(3,)), AxisError, "max", A23),
    case("max_empty_axis", lambda: ops.max(T(0, 3), axes=0), ShapeError, "max", r"\(0, 3\)"),
    case("logsumexp_axis", lambda: ops.logsumexp(T(2, 3), axes=(7,)), AxisError, "logsumexp", A23),
    case("logsoftmax_axis", lambda: ops.logsoftmax(T(2, 3), axis=4), AxisError, "logsoftmax", A23),
    # ---- matmul ------------------------------------------------------------------------------------
    case("matmul_inner", lambda: T(2, 3) @ T(2, 3), ShapeError, "matmul", A23),
    case("matmul_1d", lambda: T(3) @ T(3, 4), ShapeError, "matmul", r"\(3,\)", r"\(3, 4\)"),
    case("matmul_batch", lambda: T(2, 2, 3) @ T(3, 3, 4), ShapeError, "matmul", r"\(2,\)", r"\(3,\)"),
    case("matmul_dtypes", lambda: T(2, 3) @ T(3, 4, dtype="float64"), DTypeError, "matmul", "float64", A23),
    case("matmul_devices", lambda: T(2, 3) @ T(3, 4, device=REF), DeviceError, "MatMul", A23),
    # ---- shapes and movement -----------------------------------------------------------------------
    case("reshape_size", lambda: ops.reshape(T(2, 3), (4, 2)), ShapeError, "reshape", A23, r"\(4, 2\)"),
    case("reshape_two_minus_ones", lambda: ops.reshape(T(2, 3), (-1, -1)), ShapeError, "reshape", A23),
    case("reshape_negative", lambda: ops.reshape(T(2, 3), (-2, 3)), ShapeError, "reshape", A23),
    case("reshape_string", lambda: ops.reshape(T(2, 3), ("a",)), ShapeError, "reshape", A23),
    case("reshape_float", lambda: ops.reshape(T(2, 3), (2.5, 3)), ShapeError, "reshape", "2.5"),
    case("transpose_1d", lambda: ops.transpose(T(3)), ShapeError, "transpose", "1-d"),
    case("transpose_axis_range", lambda: ops.transpose(T(2, 3), (0, 5)), AxisError, "transpose", "5"),
    case("transpose_three_axes", lambda: ops.transpose(T(2, 3), (0, 1, 2)), AxisError, "transpose"),
    case("transpose_string_axes", lambda: ops.transpose(T(2, 3), ("x", "y")), AxisError, "transpose"),
    case("permute_repeated", lambda: ops.permute(T(2, 3), (0, 0)), AxisError, "permute", A23),
    case("permute_short", lambda: ops.permute(T(2, 3), (0,)), AxisError, "permute", A23),
    case("permute_float", lambda: ops.permute(T(2, 3), (1.0, 0.0)), AxisError, "permute"),
    case("broadcast_incompatible", lambda: ops.broadcast_to(T(2, 3), (3, 3)), ShapeError, "broadcast_to", A23,
         r"\(3, 3\)"),
    case("broadcast_fewer_dims", lambda: ops.broadcast_to(T(2, 3), (3,)), ShapeError, "broadcast_to", A23),
    case("broadcast_float", lambda: ops.broadcast_to(T(2, 3), (2.5, 3)), ShapeError, "broadcast_to", "2.5"),
    case("getitem_out_of_range", lambda: T(2, 3)[5], IndexingError, "getitem", "5", A23),
    case("getitem_negative", lambda: T(2, 3)[-3], IndexingError, "getitem", "-3", A23),
    case("getitem_too_many", lambda: T(2, 3)[0, 0, 0], IndexingError, "getitem", A23),
    case("getitem_float", lambda: T(2, 3)[1.5], IndexingError, "getitem", "float", A23),
    case("getitem_list", lambda: T(2, 3)[[0, 2]], IndexingError, "getitem", "2", "size 2"),
    case("getitem_tensor", lambda: T(2, 3)[T(3, dtype="int64")], IndexingError, "getitem", "index 2 is out of bounds",
         "Tensor"),
    case("getitem_tensor_float", lambda: T(2, 3)[ndl.Tensor([0.0])], IndexingError, "getitem", "integers or booleans",
         "float32"),
    case("getitem_mask", lambda: T(2, 3)[T(3) > 0], IndexingError, "getitem", r"mask of shape \(3,\)", A23),
    case("getitem_step_zero", lambda: T(2, 3)[::0], IndexingError, "getitem", "zero"),
    case("getitem_two_ellipses", lambda: T(2, 3)[..., ...], IndexingError, "getitem", "ellipsis"),
    case("getitem_float_slice", lambda: T(2, 3)[0.5:1], IndexingError, "getitem", A23),
    case("pad_pairs", lambda: ops.pad(T(2, 3), ((1, 1),)), ShapeError, "pad", A23),
    case("pad_negative", lambda: ops.pad(T(2, 3), ((1, 1), (-1, 0))), ShapeError, "pad", A23),
    case("pad_float", lambda: ops.pad(T(2, 3), ((0.5, 1), (0, 0))), ShapeError, "pad", "0.5"),
    case("flip_axis", lambda: ops.flip(T(2, 3), (3,)), AxisError, "flip", A23),
    case("flip_string", lambda: ops.flip(T(2, 3), "x"), AxisError, "flip"),
    case("dilate_axis", lambda: ops.dilate(T(2, 3), (4,), 1), AxisError, "dilate", A23),
    case("dilate_negative", lambda: ops.dilate(T(2, 3), (0,), -1), ArgumentError, "dilate", "-1"),
    case("undilate_multiple", lambda: ops.undilate(T(3, 3), (0,), 1), ShapeError, "undilate", r"\(3, 3\)"),
    case("stack_shapes", lambda: ops.stack([T(2, 3), T(3, 4)], 0), ShapeError, "stack", A23, r"\(3, 4\)"),
    case("stack_empty", lambda: ops.stack([], 0), ShapeError, "stack"),
    case("stack_axis", lambda: ops.stack([T(2, 3), T(2, 3)], 5), AxisError, "stack", "5"),
    case("stack_dtypes", lambda: ops.stack([T(2, 3), T(2, 3, dtype="float64")], 0), DTypeError, "stack", A23,
         "float64"),
    case("stack_devices", lambda: ops.stack([T(2, 3), T(2, 3, device=REF)], 0), DeviceError, "stack", A23),
    case("stack_non_tensor", lambda: ops.stack([T(2, 3), 3], 0), DTypeError, "make_tuple", "int"),
    case("concatenate_shapes", lambda: ops.concatenate([T(2, 3), T(3, 4)], 0), ShapeError, "concatenate", A23,
         r"\(3, 4\)"),
    case("concatenate_axis", lambda: ops.concatenate([T(2, 3), T(2, 3)], 2), AxisError, "concatenate", A23),
    case("concatenate_ndim", lambda: ops.concatenate([T(2, 3), T(2, 3, 1)], 0), ShapeError, "concatenate", A23),
    case("concatenate_dtypes", lambda: ops.concatenate([T(2, 3), T(2, 3, dtype="float64")], 0), DTypeError,
         "concatenate", "float64"),
    case("concatenate_axis_float", lambda: ops.concatenate([T(2, 3), T(2, 3)], axis=1.5), AxisError, "concatenate"),
    case("split_axis", lambda: ops.split(T(2, 3), 3), AxisError, "split", A23),
    case("split_axis_none", lambda: ops.split(T(2, 3), None), AxisError, "split"),
    case("tuple_index", lambda: ops.split(T(2, 3), 0)[5], IndexingError, "tuple_get_item", "5"),
    case("make_tuple_int", lambda: ops.make_tuple(T(2, 3), 3), DTypeError, "make_tuple", "int"),
    case("conv_channels", lambda: ops.conv(T(1, 5, 5, 3), T(3, 3, 4, 8)), ShapeError, "conv", r"\(1, 5, 5, 3\)",
         r"\(3, 3, 4, 8\)"),
    case("conv_ndim", lambda: ops.conv(T(5, 5, 3), T(3, 3, 3, 8)), ShapeError, "conv", r"\(5, 5, 3\)"),
    case("conv_kernel_unguardable", lambda: ops.conv(T(1, 2, 2, 3), T(3, 3, 3, 8)), ShapeError, "conv",
         r"\(1, 2, 2, 3\)"),
    case("conv_stride_zero", lambda: ops.conv(T(1, 5, 5, 3), T(3, 3, 3, 8), stride=0), ArgumentError, "conv",
         "stride"),
    case("conv_padding_negative", lambda: ops.conv(T(1, 5, 5, 3), T(3, 3, 3, 8), padding=-1), ArgumentError,
         "conv", "padding"),
    case("conv_dtypes", lambda: ops.conv(T(1, 5, 5, 3), T(3, 3, 3, 8, dtype="float64")), DTypeError, "conv",
         "float64"),
    case("backward_shape", lambda: T(2, 3).sum().backward(T(2)), ShapeError, "backward", r"\(2,\)"),
    # ---- nn modules --------------------------------------------------------------------------------
    case("linear_features", lambda: nn.Linear(4, 5)(T(2, 3)), ShapeError, "Linear", A23),
    case("linear_1d", lambda: nn.Linear(3, 5)(T(3)), ShapeError, "matmul", r"\(3,\)"),
    case("linear_negative_size", lambda: nn.Linear(-1, 5), ArgumentError, "Linear", "-1"),
    case("sequential_mismatch", lambda: nn.Sequential(nn.Linear(3, 4), nn.Linear(5, 2))(T(2, 3)), ShapeError,
         "Linear", r"\(2, 4\)"),
    case("batchnorm1d_features", lambda: nn.BatchNorm1d(4)(T(2, 3)), ShapeError, "BatchNorm1d", A23),
    case("batchnorm1d_ndim", lambda: nn.BatchNorm1d(3)(T(2, 3, 1)), ShapeError, "BatchNorm1d", r"\(2, 3, 1\)"),
    case("batchnorm2d_channels", lambda: nn.BatchNorm2d(4)(T(2, 3, 4, 4)), ShapeError, "BatchNorm2d",
         r"\(2, 3, 4, 4\)"),
    case("layernorm_features", lambda: nn.LayerNorm1d(4)(T(2, 3)), ShapeError, "LayerNorm1d", A23),
    case("softmaxloss_label_count", lambda: nn.SoftmaxLoss()(T(2, 3), ndl.Tensor([0, 1, 2])), ShapeError,
         "SoftmaxLoss", A23),
    case("softmaxloss_label_range", lambda: nn.SoftmaxLoss()(T(2, 3), ndl.Tensor([0, 7])), IndexingError,
         "one_hot|SoftmaxLoss", "7"),
    case("softmaxloss_label_fraction", lambda: nn.SoftmaxLoss()(T(2, 3), ndl.Tensor([0.5, 1])), ArgumentError,
         "SoftmaxLoss|one_hot", "0.5"),
    case("mse_shapes", lambda: nn.MSELoss()(T(2, 3), T(3, 4)), ShapeError, "MSELoss", A23, r"\(3, 4\)"),
    case("conv_module_channels", lambda: nn.Conv(3, 8, 3)(T(1, 4, 5, 5)), ShapeError, "Conv", r"\(1, 4, 5, 5\)"),
    case("conv_module_ndim", lambda: nn.Conv(3, 8, 3)(T(4, 5, 5)), ShapeError, "Conv", r"\(4, 5, 5\)"),
    case("maxpool_kernel", lambda: nn.MaxPool2d(3)(T(1, 2, 2, 2)), ShapeError, "MaxPool2d", r"\(1, 2, 2, 2\)"),
    case("embedding_index", lambda: nn.Embedding(5, 3)(ndl.Tensor([[7.0]])), IndexingError, "Embedding|one_hot",
         "7"),
    case("rnn_features", lambda: nn.RNN(3, 4)(T(5, 2, 7)), ShapeError, "RNN", r"\(5, 2, 7\)"),
    case("rnn_state", lambda: nn.RNN(3, 4)(T(5, 2, 3), T(1, 2, 5)), ShapeError, "RNN", r"\(1, 2, 5\)"),
    case("rnncell_features", lambda: nn.RNNCell(3, 4)(T(2, 5)), ShapeError, "RNNCell", r"\(2, 5\)"),
    case("lstm_features", lambda: nn.LSTM(3, 4)(T(5, 2, 7)), ShapeError, "LSTM", r"\(5, 2, 7\)"),
    case("transformer_embedding_width", lambda: nn.Transformer(12, 16, 1, num_head=2, dim_head=6, batch_first=True)(
        T(2, 5, 16)), ShapeError, "Transformer", "embedding_size=12", r"\(2, 5, 16\)"),
    case("lstm_state_not_a_pair", lambda: nn.LSTM(3, 4)(T(5, 2, 3), T(1, 2, 4)), ArgumentError, "LSTM", "pair",
         r"\(1, 2, 4\)"),
    case("lstmcell_state_not_a_pair", lambda: nn.LSTMCell(3, 4)(T(2, 3), T(2, 4)), ArgumentError, "LSTMCell",
         "pair"),
    case("lstmcell_state", lambda: nn.LSTMCell(3, 4)(T(2, 3), (T(2, 5), T(2, 4))), ShapeError, "LSTMCell",
         r"\(2, 5\)"),
    case("rnn_nonlinearity", lambda: nn.RNNCell(3, 4, nonlinearity="foo"), ArgumentError, "RNNCell", "foo"),
    case("dropout_probability", lambda: nn.Dropout(1.5), ArgumentError, "Dropout", "1.5"),
    case("load_state_dict_shape", lambda: nn.Linear(3, 4).load_state_dict({"weight": T(2, 2), "bias": T(1, 4)}),
         ShapeError, "load_state_dict", r"\(2, 2\)", r"\(3, 4\)"),
    case("load_state_dict_keys", lambda: nn.Linear(3, 4).load_state_dict({"w": T(3, 4)}), NeedleError,
         "load_state_dict", "weight"),
    # ---- optimizers --------------------------------------------------------------------------------
    case("sgd_numbers", lambda: optim.SGD([1, 2, 3], lr=0.1), DTypeError, "SGD", "int"),
    case("sgd_module", lambda: optim.SGD(nn.Linear(3, 4), lr=0.1), DTypeError, "SGD", "Linear"),
    case("sgd_numpy_array", lambda: optim.SGD([np.zeros(3)], lr=0.1).step(), DTypeError, "SGD", "ndarray"),
    case("sgd_lr_string", lambda: optim.SGD(nn.Linear(3, 4).parameters(), lr="x"), ArgumentError, "SGD", "lr"),
    case("adam_beta", lambda: optim.Adam(nn.Linear(3, 4).parameters(), beta1=2.0), ArgumentError, "Adam", "beta1"),
    # ---- init ---------------------------------------------------------------------------------------
    case("init_negative_shape", lambda: init.rand(-1, 3), ShapeError, "rand", "-1"),
    case("init_dtype", lambda: init.zeros(2, 3, dtype="float16"), DTypeError, "float16"),
    case("one_hot_range", lambda: init.one_hot(3, ndl.Tensor([5])), IndexingError, "one_hot", "5"),
    # ---- data ---------------------------------------------------------------------------------------
    case("dataloader_batch_size", lambda: DataLoader(NDArrayDataset(np.zeros((3, 2))), batch_size=0),
         ArgumentError, "DataLoader", "batch_size"),
    case("dataloader_not_a_dataset", lambda: DataLoader(5, batch_size=2), DTypeError, "DataLoader", "int"),
    case("ndarray_dataset_lengths", lambda: NDArrayDataset(np.zeros((3, 2)), np.zeros(4)), ShapeError,
         "NDArrayDataset", "3", "4"),
    case("random_crop_padding", lambda: ndl.data.RandomCrop(-1), ArgumentError, "RandomCrop", "-1"),
    # ---- IR, realize, save ---------------------------------------------------------------------------
    case("dump_stage", lambda: ndl.ir.dump(T(2, 3), stage="foo"), ArgumentError, "dump", "foo"),
    case("dump_number", lambda: ndl.ir.dump(5), DTypeError, "int"),
    case("visualize_stage", lambda: ndl.ir.visualize(T(2, 3), path="x.svg", stage="kernels"), ArgumentError,
         "visualize", "kernels"),
    case("visualize_extension", lambda: ndl.ir.visualize(T(2, 3), path="x.foo"), ArgumentError, "visualize",
         "foo"),
    case("visualize_folder", lambda: ndl.ir.visualize(T(2, 3), path="/nonexistent/dir/x.dot"), ArgumentError,
         "visualize", "nonexistent"),
    case("realize_number", lambda: ndl.realize(5), DTypeError, "realize", "int"),
    case("save_object", lambda: ndl.save(object(), "x.npz"), DTypeError, "save", "object"),
    case("save_missing_folder", lambda: ndl.save({"a": T(2)}, "/nonexistent/dir/x.npz"), DataError, "save",
         "nonexistent"),
    case("cuda_without_gpu", lambda: ndl.Tensor([1.0], device=ndl.cuda()), DeviceError, "cuda"),
]


@pytest.fixture(params=["lazy", "eager"])
def mode(request):
    with ndl.lazy(request.param == "lazy"):
        yield request.param


def _params():
    out = []
    for c in CASES:
        marks = []
        if c.name == "cuda_without_gpu" and ndl.cuda().enabled():
            marks.append(pytest.mark.skip(reason="a GPU is available"))
        out.append(pytest.param(c, id=c.name, marks=marks))
    return out


@pytest.mark.parametrize("c", _params())
def test_bad_input_raises_a_clear_needle_error(c, mode, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # paths in the cases are relative: nothing lands in the repository
    with pytest.raises(Exception) as info:
        c.call()  # builds only: errors must come at build time
    e = info.value
    assert isinstance(e, c.error), f"{type(e).__module__}.{type(e).__name__}: {e}"
    assert isinstance(e, (ValueError, TypeError, IndexError, KeyError)), type(e).__mro__
    for pattern in c.says:
        assert _search(pattern, str(e)), f"message {str(e)!r} does not mention {pattern!r}"


def _search(pattern, text):
    import re
    return re.search(pattern, text) is not None


# ---- corrupt data files --------------------------------------------------------------------------
def _idx(magic, dims, payload: bytes) -> bytes:
    return struct.pack(">I", magic) + struct.pack(f">{len(dims)}I", *dims) + payload


def _write(path, data: bytes, gz: bool = True) -> str:
    with (gzip.open if gz else open)(path, "wb") as f:
        f.write(data)
    return str(path)


GOOD_IMAGES = _idx(2051, (2, 3, 3), bytes(range(18)))
GOOD_LABELS = _idx(2049, (2,), bytes([1, 7]))

MNIST_CASES = {
    "missing_images": (None, GOOD_LABELS, "no such file"),
    "wrong_magic": (_idx(2049, (2, 3, 3), bytes(18)), GOOD_LABELS, "magic"),
    "labels_as_images": (GOOD_LABELS, GOOD_LABELS, "truncated|magic"),
    "truncated_header": (GOOD_IMAGES[:6], GOOD_LABELS, "truncated"),
    "truncated_data": (GOOD_IMAGES[:-5], GOOD_LABELS, "truncated"),
    "trailing_bytes": (GOOD_IMAGES + b"xx", GOOD_LABELS, "unexpected bytes"),
    "count_mismatch": (GOOD_IMAGES, _idx(2049, (3,), bytes(3)), "2 images"),
    "empty_file": (b"", GOOD_LABELS, "truncated"),
    "random_bytes": (bytes(np.random.RandomState(0).randint(0, 256, 200, dtype=np.uint8)), GOOD_LABELS, "magic"),
}


@pytest.mark.parametrize("name", list(MNIST_CASES))
def test_mnist_dataset_with_bad_files(tmp_path, name):
    images, labels, says = MNIST_CASES[name]
    image_file = str(tmp_path / "images.gz") if images is None else _write(tmp_path / "images.gz", images)
    label_file = _write(tmp_path / "labels.gz", labels)
    with pytest.raises(DataError, match=says) as info:
        MNISTDataset(image_file, label_file)
    assert "images.gz" in str(info.value) or "labels.gz" in str(info.value)


def test_mnist_gzip_stream_cut_short(tmp_path):
    data = gzip.compress(GOOD_IMAGES)
    image_file = str(tmp_path / "images.gz")
    with open(image_file, "wb") as f:
        f.write(data[: len(data) // 2])
    with pytest.raises(DataError, match="images.gz"):
        MNISTDataset(image_file, _write(tmp_path / "labels.gz", GOOD_LABELS))


def test_dataloader_over_good_files_still_works(tmp_path):
    ds = MNISTDataset(_write(tmp_path / "i.gz", GOOD_IMAGES), _write(tmp_path / "l.gz", GOOD_LABELS))
    (x, y), = list(DataLoader(ds, batch_size=2))
    assert x.shape == (2, 9) and list(y.numpy()) == [1, 7]


LOAD_CASES = {
    "random_bytes": lambda p: p.write_bytes(os.urandom(300)),
    "text": lambda p: p.write_text("hello, not an archive"),
    "empty": lambda p: p.write_bytes(b""),
    "foreign_npz": lambda p: np.savez(str(p)[:-4], x=np.zeros(3)),  # numpy appends .npz
    "truncated": lambda p: (ndl.save({"w": T(4, 4)}, str(p)), p.write_bytes(p.read_bytes()[:100])),
    "flipped_byte": lambda p: (ndl.save({"w": T(4, 4)}, str(p)), p.write_bytes(_flip(p.read_bytes(), 60))),
}


def _flip(data: bytes, at: int) -> bytes:
    return data[:at] + bytes([data[at] ^ 0xFF]) + data[at + 1:]


@pytest.mark.parametrize("name", list(LOAD_CASES))
def test_load_corrupt_file(tmp_path, name):
    path = tmp_path / "model.npz"
    LOAD_CASES[name](path)
    with pytest.raises(DataError, match="model.npz"):
        ndl.load(str(path))


def test_load_missing_file(tmp_path):
    with pytest.raises(DataError, match="missing.npz"):
        ndl.load(str(tmp_path / "missing.npz"))
