"""needle's intermediate representation: the nodes (nodes.py), the builders the
frontend's lazy arrays call (build.py, lazy.py), a numpy reference interpreter
(reference.py), and the text and drawing of a graph (printer.py, draw.py).

`needle.ir.graph`, `needle.ir.dump` and `needle.ir.visualize`, the public faces that
show a graph at every stage of the compiler, are needle.inspect's functions: the
later stages belong to the engine above, so needle's composition root
(needle/wiring.py) names them here.
"""
from __future__ import annotations

from . import draw, lazy, printer  # noqa: F401  (lazy: the nodes `build` makes)
from .nodes import Node, toposort  # noqa: F401
