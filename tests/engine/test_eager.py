"""Eager primitives (engine/eager.py): one op, one compiled kernel, built with the
same scalar policy as lazy graphs (ir.build.scalar)."""
import numpy as np
import pytest

import needle as ndl
from needle.engine import schedule_cache
from needle.ir import build


def scalar_kinds(monkeypatch, mode, make):
    """The const/param leaves of the graph(s) computing `make()` in `mode`."""
    kinds, original = [], schedule_cache.realize

    def realize(nodes):  # read the graph before it is computed (computed nodes drop their sources)
        stack = list(nodes)
        while stack:
            n = stack.pop()
            if n.op in ("const", "param"):
                kinds.append((n.op, float(getattr(n.arg, "value", n.arg))))
            stack.extend(n.srcs)
        original(nodes)

    monkeypatch.setattr(schedule_cache, "realize", realize)
    ndl.engine.forget_later()  # state other tests left for "the next schedule" is not ours
    with ndl.lazy(mode == "lazy"):
        make().numpy()
    return kinds


@pytest.mark.parametrize("mode", ["lazy", "eager"])
@pytest.mark.parametrize("value,kind", [(2, "const"), (-1, "const"), (0.5, "const"), (3.7, "param")])
def test_eager_and_lazy_bake_the_same_scalars(monkeypatch, mode, value, kind):
    x = ndl.Tensor(np.arange(12, dtype=np.float32).reshape(3, 4), requires_grad=False)
    assert scalar_kinds(monkeypatch, mode, lambda: x * value) == [(kind, np.float32(value))]


@pytest.mark.parametrize("mode", ["lazy", "eager"])
def test_a_power_exponent_is_part_of_the_program(monkeypatch, mode):
    x = ndl.Tensor(np.arange(1, 13, dtype=np.float32).reshape(3, 4), requires_grad=False)
    assert scalar_kinds(monkeypatch, mode, lambda: x ** 3.0) == [("const", 3.0)]


def test_the_scalar_policy():
    cpu = ndl.cpu()
    for value, kind in [(2, "const"), (0.5, "const"), (-1, "const"), (3.7, "param"), (10, "param")]:
        assert build.scalar(value, (3,), "float32", cpu).op == kind, value
    assert build.scalar(3.7, (3,), "float32", cpu, exponent=True).op == "const"
