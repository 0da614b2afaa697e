"""stage="autograd": the Tensor graph backward() walks (dump, networkx view, pictures)."""
import os
import re
import shutil

import numpy as np
import pytest

import needle as ndl
from needle import nn
from needle import autograd_graph
from tests.modes import execution_mode  # noqa: F401  (each test runs lazily and eagerly)


def hand_graph():
    """e = sum(a * b + a), written so the expected graph can be read off by hand."""
    a = ndl.Tensor([1.0, 2.0])
    b = ndl.Tensor([3.0, 4.0])
    c = a * b
    d = c + a
    e = d.sum()
    return a, b, c, d, e


# post-order DFS visiting inputs in order: a, b, c = a*b, d = c + a, e = sum(d)
EXPECTED_NODES = {0: ("leaf", ""), 1: ("leaf", ""), 2: ("op", "EWiseMul"), 3: ("op", "EWiseAdd"),
                  4: ("op", "Summation")}
EXPECTED_EDGES = {(0, 2): [0], (1, 2): [1], (2, 3): [0], (0, 3): [1], (3, 4): [0]}


def test_hand_built_graph_has_exactly_its_nodes_and_edges():
    *_, e = hand_graph()
    g = ndl.ir.graph(e, stage="autograd")
    assert {k: (g.nodes[k]["kind"], g.nodes[k]["op"]) for k in g.nodes} == EXPECTED_NODES
    assert {edge: g.edges[edge]["indices"] for edge in g.edges} == EXPECTED_EDGES
    assert all(g.nodes[k]["shape"] == (2,) for k in range(4)) and g.nodes[4]["shape"] == ()
    assert all(g.nodes[k]["dtype"] == "float32" and g.nodes[k]["requires_grad"] for k in g.nodes)
    assert [k for k in g.nodes if g.nodes[k]["output"]] == [4]


def test_dump_lists_the_hand_built_graph():
    *_, e = hand_graph()
    lines = ndl.ir.dump(e, stage="autograd").splitlines()
    heads = [re.sub(r"\s+value.*|\s+#.*", "", line).strip() for line in lines]
    assert heads == [
        "%0 = leaf : f32[2] requires_grad",
        "%1 = leaf : f32[2] requires_grad",
        "%2 = EWiseMul %0, %1 : f32[2] requires_grad",
        "%3 = EWiseAdd %2, %0 : f32[2] requires_grad",
        "%4 = Summation(axes=None, keepdims=False) %3 : f32[] requires_grad",
        "return %4",
    ]


def test_gradients_shown_equal_grad_after_backward():
    a, b, c, d, e = hand_graph()
    e.backward()
    ndl.realize(a.grad, b.grad, e)
    g = autograd_graph.to_networkx(autograd_graph.collect([e]))
    # by hand: de/da = b + 1 = [4, 5], de/db = a = [1, 2]; tiny tensors show their values
    assert g.nodes[0]["grad"] == "[4, 5]" and g.nodes[1]["grad"] == "[1, 2]"
    np.testing.assert_allclose(a.grad.numpy(), [4.0, 5.0])
    np.testing.assert_allclose(b.grad.numpy(), [1.0, 2.0])
    assert g.nodes[4]["value"] == "14"  # 1*3 + 1 + 2*4 + 2
    assert g.nodes[0]["value"] == "[1, 2]"


def test_large_tensors_show_norms_equal_to_numpy():
    np.random.seed(1)
    model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))
    x = ndl.Tensor(np.random.randn(5, 6).astype(np.float32), requires_grad=False)
    loss = (model(x) ** 2).sum()
    loss.backward()
    params = dict(model.named_parameters())
    ndl.realize(*[p.grad for p in params.values()])
    g = autograd_graph.to_networkx(autograd_graph.collect([loss]))
    by_name = {g.nodes[k]["name"]: g.nodes[k] for k in g.nodes if g.nodes[k]["name"]}
    assert set(by_name) == {"modules.0.weight", "modules.0.bias", "modules.2.weight", "modules.2.bias"}
    for name, p in params.items():
        grad = p.grad.numpy().astype(np.float64)
        np.testing.assert_allclose(by_name[name]["grad_norm"], np.sqrt((grad ** 2).sum()), rtol=1e-6)
        assert by_name[name]["kind"] == "param" and by_name[name]["module"] == name.rsplit(".", 1)[0]
    matmuls = [g.nodes[k]["module"] for k in g.nodes if g.nodes[k]["op"] in ("MatMul", "MatMulBias")]
    assert matmuls == ["modules.0", "modules.2"]


def test_names_argument_overrides_discovery():
    w = nn.Parameter(np.ones((2, 2), dtype=np.float32))
    y = (w * 2.0).sum()
    text = ndl.ir.dump(y, stage="autograd", names={"encoder.w": w})
    assert "param encoder.w" in text.splitlines()[0]
    with pytest.raises(ndl.errors.ArgumentError):
        ndl.ir.dump(y, stage="autograd", names=42)


def test_nothing_is_realized(execution_mode):
    a = ndl.Tensor(np.arange(6, dtype=np.float32).reshape(2, 3))
    y = (ndl.exp(a) * 2.0).sum()
    y.backward()
    stats = ndl.runtime.stats()
    text = ndl.ir.dump(y, a.grad, stage="autograd")
    path = ndl.ir.visualize(y, path=os.path.join(os.environ.get("TMPDIR", "/tmp"), "ag_nothing.dot"),
                            stage="autograd")
    assert os.path.getsize(path) > 0
    assert ndl.runtime.stats()["kernels_launched"] == stats["kernels_launched"]
    if execution_mode == "lazy":
        assert "pending" in text
        assert ndl.autograd.is_pending(y._cached_data)
    else:
        assert "pending" not in text


def test_bad_input_is_a_clear_error():
    with pytest.raises(ndl.errors.ArgumentError, match="autograd"):
        ndl.ir.dump(np.zeros(3), stage="autograd")
    with pytest.raises(ndl.errors.ArgumentError, match="autograd"):
        ndl.ir.visualize(path="x.dot", stage="autograd")


@pytest.mark.skipif(shutil.which("dot") is None, reason="needs Graphviz's dot")
def test_png_is_written_and_large_graphs_collapse_modules(tmp_path):
    np.random.seed(2)
    blocks = [nn.Sequential(nn.Linear(4, 4), nn.ReLU()) for _ in range(40)]
    model = nn.Sequential(*blocks)
    x = ndl.Tensor(np.random.randn(3, 4).astype(np.float32), requires_grad=False)
    loss = model(x).sum()
    graph = autograd_graph.collect([loss])
    assert len(graph.nodes) > 100  # (more than dot_text's max_nodes below: it collapses)
    dot = autograd_graph.dot_text(graph, max_nodes=100)
    boxes = re.findall(r'label="(modules\.\d+ \(Sequential\)|modules\.\d+\.modules\.0 \(Linear\))', dot)
    assert len(boxes) == 40  # one box per repeated block
    assert "subgraph" not in dot and dot.count("->") < 100
    full = autograd_graph.dot_text(graph, max_nodes=10_000)
    assert full.count("subgraph cluster_") == 40
    path = ndl.ir.visualize(loss, path=str(tmp_path / "ag.png"), stage="autograd", max_nodes=100)
    with open(path, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    assert os.path.getsize(path) > 1000


def test_tuple_ops_show_one_node_for_the_tuple():
    x = ndl.Tensor(np.array([[1.0, 2.0], [3.0, 4.0]], dtype=np.float32))
    parts = ndl.ops.split(x, axis=0)
    y = (parts[0] * parts[1]).sum()
    y.backward()
    ndl.realize(x.grad)
    g = ndl.ir.graph(y, stage="autograd")
    assert [g.nodes[k]["op"] for k in g.nodes] == ["", "Split", "TupleGetItem", "TupleGetItem", "EWiseMul",
                                                   "Summation"]
    assert g.nodes[1]["shape"] == (2,) and g.nodes[1]["dtype"] == "tuple"
    # y = x00*x10 + x01*x11: dy/dx = [[x10, x11], [x00, x01]], four values shown as is
    assert g.nodes[0]["grad"] == "[3, 4, 1, 2]"
    with pytest.raises(ndl.errors.ArgumentError):
        ndl.ir.graph(y, stage="fused")
