"""Dumps and pictures of the IR (needle.ir.dump / graph / visualize)."""
import re
import shutil

import numpy as np
import pytest

import needle as ndl
from needle import nn, optim


@pytest.fixture(autouse=True)
def lazy_mode():
    with ndl.lazy(True):
        yield


def mlp_step_outputs():
    np.random.seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))
    opt = optim.SGD(model.parameters(), lr=0.1)
    x = ndl.Tensor(np.random.randn(4, 6), requires_grad=False)
    y = ndl.Tensor([0, 1, 2, 1], requires_grad=False)
    loss = nn.SoftmaxLoss()(model(x), y)
    loss.backward()
    for p in model.parameters():
        p.data = p.data - 0.1 * p.grad.data  # pending updates, not realized
    return [loss] + list(model.parameters())


def test_graph_dump_is_ssa_with_types_and_origins():
    a = ndl.Tensor(np.zeros((128, 256)))
    b = ndl.Tensor(np.zeros((128, 256)))
    text = ndl.ir.dump(a + b)
    lines = text.splitlines()
    assert re.match(r"%0 = buffer : f32\[128,256\]", lines[0])
    assert re.search(r"%2 = add %0, %1 : f32\[128,256\]\s+# EWiseAdd", text)
    assert lines[-1] == "return %2"


def test_networkx_graph_has_ops_shapes_and_edges():
    x = ndl.Tensor(np.zeros((3, 4)))
    g = ndl.ir.graph(ndl.exp(x).sum((1,)))
    ops = [d["op"] for _, d in sorted(g.nodes(data=True))]
    assert ops[0] == "buffer" and "exp" in ops and "reduce_sum" in ops
    assert all(isinstance(d["shape"], tuple) for _, d in g.nodes(data=True))
    import networkx as nx
    assert nx.is_directed_acyclic_graph(g)


def test_importing_needle_leaves_networkx_until_a_graph_is_asked_for():
    """networkx costs a quarter second of import and thousands of objects that every
    full garbage collection walks: it is imported by ndl.ir.graph, not by needle."""
    import subprocess
    import sys
    code = ("import sys, numpy as np, needle as ndl; assert 'networkx' not in sys.modules; "
            "g = ndl.ir.graph(ndl.Tensor(np.ones(3, 'float32')) + 1); print(type(g).__name__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "DiGraph"


def test_dump_every_stage_of_a_training_step():
    outs = mlp_step_outputs()
    graph = ndl.ir.dump(*outs)
    fused = ndl.ir.dump(*outs, stage="fused")
    kernels = ndl.ir.dump(*outs, stage="kernels")
    llvm = ndl.ir.dump(*outs, stage="llvm")
    assert "matmul" in graph and "reduce" in graph
    assert "kernel 0:" in fused and "stored" in fused
    assert kernels.count("kernel ") >= 3 and "for " in kernels
    assert "define void" in llvm


def test_visualize_dot_and_svg(tmp_path):
    outs = mlp_step_outputs()
    dot = ndl.ir.visualize(*outs, path=str(tmp_path / "g.dot"))
    text = open(dot).read()
    assert text.startswith("digraph") and "->" in text and "f32[" in text
    fused = ndl.ir.visualize(*outs, path=str(tmp_path / "f.dot"), stage="fused")
    assert "subgraph cluster_" in open(fused).read()
    if shutil.which("dot") is None:
        with pytest.raises(ndl.errors.NeedleError, match="graphviz"):
            ndl.ir.visualize(*outs, path=str(tmp_path / "g.svg"))
        return
    svg = ndl.ir.visualize(*outs, path=str(tmp_path / "g.svg"))
    assert open(svg).read().lstrip().startswith("<?xml")
    png = ndl.ir.visualize(*outs, path=str(tmp_path / "g.png"), stage="fused")
    assert open(png, "rb").read(8) == b"\x89PNG\r\n\x1a\n"


def test_bad_stage_and_format():
    x = ndl.Tensor(np.zeros(3))
    with pytest.raises(ValueError, match="stage"):
        ndl.ir.dump(x, stage="nope")
    with pytest.raises(ndl.errors.NeedleError, match="format"):
        ndl.ir.visualize(x, path="/tmp/x.jpg")
