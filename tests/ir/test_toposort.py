"""ir.toposort, the walk every realize makes, against the generic post-order."""
import random

import needle as ndl
from needle.ir import build
from needle.ir.nodes import toposort
from needle.traversal import postorder


def _random_dag(seed: int, size: int):
    rng = random.Random(seed)
    dev = ndl.cpu()
    a = ndl.NDArray([1.0, 2.0, 3.0], device=dev)
    nodes = [build.buffer(a), build.const(2, (3,), "float32", dev)]
    for _ in range(size):
        if rng.random() < 0.5:
            nodes.append(build.elementwise("add", rng.choice(nodes), rng.choice(nodes)))
        else:
            nodes.append(build.elementwise("exp", rng.choice(nodes)))
    return nodes


def test_toposort_is_the_recursive_post_order():
    for seed in range(20):
        nodes = _random_dag(seed, 40)
        outputs = random.Random(seed).sample(nodes, 3) + [nodes[-1]]
        expected = postorder(outputs, lambda n: n.srcs)
        got = toposort(outputs)
        assert [n.uid for n in got] == [n.uid for n in expected]


def test_toposort_of_a_deep_chain_needs_no_recursion():
    x = build.buffer(ndl.NDArray([1.0], device=ndl.cpu()))
    for _ in range(20000):
        x = build.elementwise("neg", x)
    order = toposort([x])
    assert len(order) == 20001 and order[0].op == "buffer" and order[-1] is x
