"""needle's ports (the few calls that go up the layers) are filled by the composition
root alone: no module plugs itself in by being imported."""
import ast
import pathlib

import needle
import needle as ndl
from needle import inspect, ir
from needle.backend_ndarray import ndarray
from needle.backend_ndarray.devices import CompiledDevice, CUDADevice
from needle.engine import capture, eager, realize
from needle.ir import build, lazy
from needle.profiler import sources
from needle.runtime import cuda

PACKAGE = pathlib.Path(needle.__file__).parent
PORTS = {"eager", "runtime", "REALIZE"}


def test_import_needle_fills_every_port():
    assert CompiledDevice.eager is eager and CUDADevice.runtime is cuda
    assert lazy.REALIZE is realize.realize_nodes
    assert (ir.graph, ir.dump, ir.visualize) == (inspect.graph, inspect.dump, inspect.visualize)
    assert ndarray.DEFAULT_DEVICE is ndl.cpu() and build.NODE_TYPE is lazy.LazyArray
    assert capture.STAMP_SOURCES is sources.stamping


def test_only_the_composition_root_plugs_ports_in():
    found = []
    for path in PACKAGE.rglob("*.py"):
        if path.name == "wiring.py" and path.parent == PACKAGE:
            continue
        tree = ast.parse(path.read_text())
        for node in tree.body:  # a module that sets another module's attribute when imported
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Attribute) for t in node.targets):
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno} sets an attribute at import")
        for node in ast.walk(tree):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] \
                if isinstance(node, ast.AnnAssign) and node.value is not None else []
            for t in targets:
                if isinstance(t, ast.Attribute) and t.attr in PORTS:
                    found.append(f"{path.relative_to(PACKAGE)}:{node.lineno} sets .{t.attr}")
            if isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) == "register_view":
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno} registers a view")
    assert not found, found
