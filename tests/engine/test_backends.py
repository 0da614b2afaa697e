"""Each compiled device has one Backend (target, compiler, runtime, code); the engine
asks it, never the device's name."""
import ast
import pathlib

import numpy as np

import needle as ndl
from needle.engine import backends, schedule_cache

PACKAGE = pathlib.Path(ndl.__file__).parent
DEVICE_NAMES = {"cpu", "cuda", "cpu_numpy"}


def test_each_compiled_device_has_its_backend():
    assert backends.of(ndl.cpu()) is backends.CPU and backends.of(ndl.cuda()) is backends.CUDA
    assert backends.of(ndl.cpu_numpy()) is None  # the interpreter computes the reference device
    assert backends.CPU.target().loop_nests and backends.CUDA.target().grid
    assert schedule_cache.CACHES["cpu"].backend is backends.CPU


def test_the_cpu_backend_compiles_and_shows_code():
    x = ndl.Tensor(np.arange(6, dtype=np.float32).reshape(2, 3), requires_grad=False)
    y = (x * 2.0 + 1.0).sum((1,))
    np.testing.assert_array_equal(y.numpy(), (np.arange(6).reshape(2, 3) * 2 + 1).sum(1))
    from needle.compiler.schedule import plan
    from needle.ir.printer import output_nodes
    target = backends.CPU.target()
    schedule, _ = plan(output_nodes([x * 3.0]), target)
    code = backends.CPU.code(schedule.calls[0].kernel, target)
    assert code.lstrip().startswith(("define", ";", "target", "source_filename")) and "define" in code


def test_no_code_switches_on_a_device_or_target_name():
    """`x.name == "cuda"` and the like: a capability (Target.grid, Device.on_host) or the
    device's Backend says what differs."""
    found = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Compare):
                continue
            sides = [node.left, *node.comparators]
            names = [s for s in sides if isinstance(s, ast.Attribute) and s.attr == "name"]
            consts = [s for s in sides if isinstance(s, ast.Constant) and s.value in DEVICE_NAMES]
            if names and consts:
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert not found, found
