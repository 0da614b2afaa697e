"""compiler/schedule.structure, the schedule cache's key of every lazy realize, is one
walk written for speed; here it is checked against a plain reference (ir.nodes.toposort,
then one entry per node naming its sources by position) on random graphs: shared
sources, repeated and nested outputs, outputs that are loads, one array read twice,
run-time scalars shared between nodes."""
import numpy as np
import pytest

import needle as ndl
from needle.backend_ndarray.ndarray import NDArray
from needle.compiler.schedule import structure
from needle.ir import build
from needle.ir.nodes import toposort
from needle.ir.nodes import RuntimeScalar


def reference(outputs):
    """(key entries, leaves, scalars) the plain way."""
    order = toposort(outputs)
    position = {id(n): i for i, n in enumerate(order)}
    leaves, scalars, entries = [], [], []
    for n in order:
        if n.op == "buffer":
            if not any(a is n.arg for a in leaves):
                leaves.append(n.arg)
            k = next(i for i, a in enumerate(leaves) if a is n.arg)
            entries.append(("buffer", n.shape, n.arg._strides, n.dtype, k))
        elif n.op == "param":
            if not any(s is n.arg for s in scalars):
                scalars.append(n.arg)
            k = next(i for i, s in enumerate(scalars) if s is n.arg)
            entries.append(("param", n.shape, n.dtype, k))
        elif n.op == "const":
            entries.append(("const", repr(n.arg), n.shape, n.dtype))
        else:
            entries.append((n.op, n.arg, n.shape, n.dtype, tuple(position[id(s)] for s in n.srcs)))
    entries.append(tuple(position[id(n)] for n in outputs))
    return tuple(entries), leaves, scalars


def random_graph(rng):
    """Outputs of a random graph over a few (4, 5) arrays, some read by two buffer
    nodes, with shared subexpressions, scalars and views."""
    arrays = [NDArray(rng.randn(4, 5).astype("float32"), device=ndl.cpu()) for _ in range(3)]
    lr = RuntimeScalar(lambda: 0.5)
    pool = [build.buffer(arrays[rng.randint(3)]) for _ in range(4)]
    for _ in range(rng.randint(1, 30)):
        kind = rng.randint(6)
        a, b = pool[rng.randint(len(pool))], pool[rng.randint(len(pool))]
        if kind == 0:
            pool.append(build.elementwise("add", a, b))
        elif kind == 1:
            pool.append(build.elementwise("mul", a, build.param(lr, a.shape, a.dtype, a.device)))
        elif kind == 2:
            pool.append(build.elementwise("exp", a))
        elif kind == 3:
            pool.append(build.elementwise("where", build.elementwise("lt", a, b), a,
                                          build.const(-0.0, a.shape, a.dtype, a.device)))
        elif kind == 4:
            pool.append(build.reshape(build.reshape(a, (5, 4)), (4, 5)))
        else:
            pool.append(build.buffer(arrays[rng.randint(3)]))
    picks = [pool[i] for i in rng.randint(len(pool), size=rng.randint(1, 5))]  # repeats allowed
    return picks


@pytest.mark.parametrize("seed", range(60))
def test_structure_matches_the_plain_walk(seed):
    with ndl.lazy():
        outputs = random_graph(np.random.RandomState(seed))
        got = structure(outputs)
        entries, leaves, scalars = reference(outputs)
    assert got.key.entries == entries
    assert len(got.leaves) == len(leaves) and all(a is b for a, b in zip(got.leaves, leaves))
    assert len(got.scalars) == len(scalars) and all(a is b for a, b in zip(got.scalars, scalars))
    assert got.leaf_ids == {id(a): i for i, a in enumerate(leaves)}
    assert got.scalar_ids == {id(s): i for i, s in enumerate(scalars)}
