"""The layering contract (docs/architecture.md, pyproject.toml [tool.importlinter]):
layers only import downwards, and the only import cycle is the frontend's
Tensor <-> ops knot."""
import os
import subprocess
import sys

import grimp

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: the one cycle allowed: a Tensor's methods are ops, and ops make Tensors
FRONTEND_KNOT = {"needle.autograd", "needle.backward", "needle.tensor_methods", "needle.ops", "needle.init"}


def test_lint_imports_keeps_the_layers_contract():
    """`lint-imports` (what .ci/run runs) with this checkout's pyproject.toml."""
    code = "import sys; from importlinter.cli import lint_imports; sys.exit(lint_imports(no_cache=True))"
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def cycles(graph) -> list:
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.find_modules_directly_imported_by(v):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(component)

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10000))
    for m in sorted(graph.modules):
        if m not in index:
            visit(m)
    return found


def test_the_only_import_cycle_is_the_frontend_knot():
    graph = grimp.build_graph("needle", cache_dir=None)
    for component in cycles(graph):
        packages = {".".join(m.split(".")[:2]) for m in component}
        assert packages <= FRONTEND_KNOT, sorted(component)
