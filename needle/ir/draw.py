"""Pictures of the IR (`needle.ir.visualize`): DOT text, rendered by Graphviz."""
from __future__ import annotations

import os
import shutil
import subprocess

from ..errors import ArgumentError, NeedleError

_COLORS = {"buffer": "#cfe2f3", "const": "#eeeeee", "param": "#eeeeee", "matmul": "#f4cccc",
           "reduce_sum": "#fce5cd", "reduce_max": "#fce5cd", "assemble": "#d9d2e9", "copy": "#d9d2e9"}
_MOVEMENT_COLOR = "#d9ead3"


def quote(text: str) -> str:
    """A DOT string literal."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def node_attrs(n, label: str) -> str:
    from .nodes import MOVEMENT
    color = _COLORS.get(n.op, _MOVEMENT_COLOR if n.op in MOVEMENT else "#ffffff")
    return f"label={quote(label)}, style=filled, fillcolor={quote(color)}"


def dot_text(order, num, outputs, clusters=None) -> str:
    """DOT for nodes in `order`; `clusters` maps a cluster title to its node ids
    (fused kernels drawn as boxes around their nodes)."""
    out_ids = {id(n) for n in outputs}
    lines = ["digraph needle {", "  rankdir=TB;", '  node [shape=box, fontname="Helvetica", fontsize=10];']
    in_cluster = set()
    for ci, (title, members) in enumerate((clusters or {}).items()):
        lines.append(f"  subgraph cluster_{ci} {{")
        lines.append(f"    label={quote(title)}; style=rounded; color=\"#3d85c6\";")
        for n in order:
            if id(n) in members and id(n) not in in_cluster:  # a recomputed node is drawn once
                in_cluster.add(id(n))
                lines.append(f"    n{num[id(n)]} [{node_attrs(n, _label(n, num))}];")
        lines.append("  }")
    for n in order:
        if id(n) not in in_cluster:
            extra = ", peripheries=2" if id(n) in out_ids else ""
            lines.append(f"  n{num[id(n)]} [{node_attrs(n, _label(n, num))}{extra}];")
    for n in order:
        for s in n.srcs:
            lines.append(f"  n{num[id(s)]} -> n{num[id(n)]};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _label(n, num) -> str:
    arg = n.describe_arg()
    text = f"%{num[id(n)]} {n.op}" + (f" {arg}" if arg and len(arg) < 40 else "")
    return text + f"\n{n.type_str()}" + (f"\n({n.origin})" if n.origin else "")


def write(dot: str, path: str) -> str:
    """Write `dot` to `path`: .dot as text, .svg/.png through Graphviz's `dot`."""
    if not isinstance(path, (str, os.PathLike)):
        raise ArgumentError(f"visualize: path must be a file name, got {type(path).__name__}")
    path = os.fspath(path)
    ext = os.path.splitext(path)[1].lower()
    if ext not in ("", ".dot", ".gv", ".svg", ".png", ".pdf"):
        raise ArgumentError(f"visualize: unknown picture format {ext!r}; use .dot, .svg or .png")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise ArgumentError(f"visualize: cannot write {path!r}: the folder {folder!r} does not exist")
    if ext in ("", ".dot", ".gv"):
        try:
            with open(path, "w") as f:
                f.write(dot)
        except OSError as e:
            raise ArgumentError(f"visualize: cannot write {path!r}: {e.strerror or e}") from None
        return path
    exe = shutil.which("dot")
    if exe is None:
        raise NeedleError("visualize: Graphviz's `dot` is needed for .svg/.png "
                          "(apt-get install graphviz), or save as .dot")
    result = subprocess.run([exe, f"-T{ext[1:]}", "-o", path], input=dot.encode(), capture_output=True)
    if result.returncode != 0:
        raise NeedleError(f"visualize: dot failed: {result.stderr.decode(errors='replace').strip()}")
    return path
