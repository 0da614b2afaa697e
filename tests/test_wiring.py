"""needle's ports (the few calls that go up the layers) are filled by the composition
root alone: no module plugs itself in by being imported."""
import ast
import pathlib

import needle
from needle import autograd_graph, ir
from needle.backend_ndarray.devices import CompiledDevice, CUDADevice
from needle.engine import eager, realize, stages
from needle.ir import lazy
from needle.runtime import cuda

PACKAGE = pathlib.Path(needle.__file__).parent
PORTS = {"eager", "runtime", "REALIZE"}


def test_import_needle_fills_every_port():
    assert CompiledDevice.eager is eager and CUDADevice.runtime is cuda
    assert lazy.REALIZE is realize.realize_nodes
    assert ir.VIEWS == {"compiler": stages, "autograd": autograd_graph}


def test_only_the_composition_root_plugs_ports_in():
    found = []
    for path in PACKAGE.rglob("*.py"):
        if path.name == "wiring.py" and path.parent == PACKAGE:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] \
                if isinstance(node, ast.AnnAssign) and node.value is not None else []
            for t in targets:
                if isinstance(t, ast.Attribute) and t.attr in PORTS:
                    found.append(f"{path.relative_to(PACKAGE)}:{node.lineno} sets .{t.attr}")
            if isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) == "register_view":
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno} registers a view")
    assert not found, found
